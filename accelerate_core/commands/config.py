"""`accelerate-core config`: write the launch config by questionnaire, or defaults with --default.

Questions follow earlier answers: machines and process counts only for a distributed backend
(FSDP needs 2 processes or more), ZeRO questions only for DeepSpeed, parameter offload only for
ZeRO-3, the fp16 emulation only for DeepSpeed fp16 on CPU.

What only the training script should decide is left unset (null in the file; launch then passes
nothing, and the script's `Accelerator(...)` arguments decide): --default leaves mixed precision,
gradient accumulation, the backend and, on a CUDA machine, the device unset, and the questionnaire offers
"script decides" as the default answer (an empty answer) for mixed precision, accumulation,
clipping and the DeepSpeed plugin's settings (ZeRO stage, offload, fp16 emulation).
A value that is set is binding: a contradicting `Accelerator(...)` argument is an error.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelerate_core.choices import BACKENDS, MIXED_PRECISIONS, OFFLOAD_DEVICES
from accelerate_core.commands.questions import Asker
from accelerate_core.imports import DEEPSPEED_INSTALL_HINT, is_deepspeed_available
from accelerate_core.launch.config import LaunchConfig, default_config_path, save_config


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "config",
        help="Write the launch config (a questionnaire, or --default).",
        description=("Ask how training should run and write the answers as a versioned YAML config "
                     "that `accelerate-core launch` reads. Answers are read line by line from "
                     "standard input (a pipe works); an empty answer takes the default in brackets. "
                     "'script decides' (null in the file) leaves a setting unset: launch then passes "
                     "nothing for it and the script's Accelerator(...) arguments decide, e.g. "
                     "Accelerator(fp16=True). A value that is set is binding: an Accelerator(...) "
                     "argument that contradicts it is an error."),
        epilog=f"Default file: $ACCELERATE_CORE_CONFIG_FILE, else {default_config_path()}.",
    )
    parser.add_argument("--config-file", "--config_file", metavar="FILE",
                        help="Where to write the config (default: see below).")
    parser.add_argument("--default", action="store_true",
                        help="Write a sensible config for this machine without asking "
                             "(CPU-only machines get a one-process CPU config; with CUDA: one process "
                             "per device). Mixed precision, gradient accumulation and the backend "
                             "are left unset (null) for the script and the process count to decide.")
    parser.set_defaults(handler=run)
    return parser


@dataclass(frozen=True)
class Machine:
    """What the defaults depend on."""

    cuda_devices: int

    @classmethod
    def here(cls) -> Machine:
        import torch  # only here: `accelerate-core --help` should not pay for it

        return cls(torch.cuda.device_count() if torch.cuda.is_available() else 0)


def default_config(machine: Machine) -> LaunchConfig:
    """What to run on this machine; mixed precision and accumulation stay unset (the script's).

    CPU-only: cpu=True (a working CPU config, gloo), one process. With CUDA: one process per
    device, cpu unset (CUDA unless the script says Accelerator(cpu=True)). The backend is unset
    too: single for one process, ddp for several (`launch --num-processes N` needs no other
    change), deepspeed when the script passes a DeepSpeedPlugin.
    """
    if machine.cuda_devices == 0:
        return LaunchConfig(cpu=True, num_processes=1)
    return LaunchConfig(num_processes=max(machine.cuda_devices, 1))


def questionnaire(asker: Asker, machine: Machine) -> LaunchConfig:
    say = asker.stdout.write
    a: dict[str, Any] = {}
    a["cpu"] = asker.ask("cpu", "Run on CPU only, even where CUDA devices exist? (yes/no)",
                         machine.cuda_devices == 0)
    a["backend"] = asker.ask(
        "backend", f"Backend: single (one process), ddp (DistributedDataParallel), deepspeed (ZeRO), "
        f"fsdp (FSDP2 fully_shard) ({'/'.join(BACKENDS)})",
        "ddp" if machine.cuda_devices > 1 and not a["cpu"] else "single")
    if a["backend"] == "deepspeed" and not is_deepspeed_available():
        say(f"  Note: deepspeed is not installed here; launch will ask for it ({DEEPSPEED_INSTALL_HINT}).\n")
    if a["backend"] != "single":
        machines = a["num_machines"] = asker.ask("num_machines", "How many machines?", 1)
        if machines > 1:
            a["machine_rank"] = asker.ask(
                "machine_rank", f"Rank of this machine (0 to {machines - 1})?", 0,
                lambda r: None if r < machines else f"it must be below {machines}")
            a["main_process_ip"] = asker.ask("main_process_ip", "Address of machine 0 (IP or host name)?")
            a["main_process_port"] = asker.ask("main_process_port", "Port on machine 0?", 29500)
        per_machine = 2 if a["cpu"] or machine.cuda_devices < 2 else machine.cuda_devices
        # FSDP shards over the processes: one alone has nothing to shard over.
        least = 2 if a["backend"] == "fsdp" else 1
        a["num_processes"] = asker.ask(
            "num_processes", "How many processes in total, over all machines?", per_machine * machines,
            lambda n: f"it must be a multiple of the {machines} machines" if n % machines
            else (f"backend {a['backend']!r} needs at least {least} processes" if n < least else None))
    # Defaults None: "script decides" (empty answer); a chosen value binds the script.
    a["mixed_precision"] = asker.ask(
        "mixed_precision", f"Mixed precision ({'/'.join(MIXED_PRECISIONS)}; 'no' is fp32, empty: the "
        f"script decides)?", None)
    if a["backend"] == "deepspeed":
        say("  DeepSpeed: 'script decides' takes the script's DeepSpeedPlugin(...) values, else its "
            "defaults (ZeRO-2, no offload, no emulation).\n")
        a["zero_stage"] = asker.ask("zero_stage", "DeepSpeed ZeRO stage (0/1/2/3)?", None)
        a["offload_optimizer_device"] = asker.ask(
            "offload_optimizer_device", f"Offload optimizer states to ({'/'.join(OFFLOAD_DEVICES)})?", None)
        if a["zero_stage"] == 3:
            a["offload_param_device"] = asker.ask(
                "offload_param_device", f"Offload parameters to ({'/'.join(OFFLOAD_DEVICES)})?", None)
        if a["cpu"] and a["mixed_precision"] in (None, "fp16"):  # fp16 chosen, or the script's to pick
            a["cpu_fp16_emulation"] = asker.ask(
                "cpu_fp16_emulation", "DeepSpeed refuses fp16 on most CPUs; emulate it when fp16 is "
                "used (runs are labelled emulated)? (yes/no)", None)
    a["gradient_accumulation_steps"] = asker.ask(
        "gradient_accumulation_steps", "Gradient accumulation steps (empty: the script decides)?", None)
    a["gradient_clipping"] = asker.ask(
        "gradient_clipping", "Clip the gradient norm to (a number; empty: the script decides)?", None)
    return LaunchConfig(**a)


def run(args: argparse.Namespace) -> int:
    path = Path(args.config_file).expanduser() if args.config_file else default_config_path()
    machine = Machine.here()
    config = default_config(machine) if args.default else questionnaire(Asker(sys.stdin, sys.stdout), machine)
    save_config(config, path)
    print(f"accelerate-core config: wrote {path}")
    return 0

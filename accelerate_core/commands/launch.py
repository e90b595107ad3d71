"""`accelerate-core launch`: start a training script on N processes from a config and flags.

Order of authority: launch flags, then the config file, then built-in defaults. A setting that
neither the flags nor a config file set (absent, or null: unset) is not passed to the processes
at all, so the script's own `Accelerator(...)` arguments decide it; one that is set is binding.
Everything is checked before anything starts: a bad value or a missing script is one message and
exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import socket
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelerate_core.choices import BACKENDS, MIXED_PRECISIONS, OFFLOAD_DEVICES
from accelerate_core.commands.rank_errors import ErrorWatch, report
from accelerate_core.commands.supervise import run_supervised
from accelerate_core.commands.torchrun_entry import SUMMARY_OPTION
from accelerate_core.errors import InvalidSettingError, explain
from accelerate_core.imports import require_deepspeed
from accelerate_core.launch.config import (
    CONFIG_VERSION,
    LaunchConfig,
    default_config_path,
    from_mapping,
    parse_text,
    read_mapping,
)
from accelerate_core.launch.settings import (
    CONFIG_FILE_VARIABLE,
    SOURCES_VARIABLE,
    LaunchSettings,
    SettingSource,
    config_file_from_environ,
)

DEFAULT_MULTI_NODE_PORT = 29500  # torchrun's default: every machine must agree on one port
_DEEPSPEED_ONLY = ("zero_stage", "offload_optimizer_device", "offload_param_device", "cpu_fp16_emulation")
_TORCHRUN_ENTRY = "accelerate_core.commands.torchrun_entry"

# (flag, config key, metavar, help); every flag is also accepted with underscores.
_VALUE_FLAGS: tuple[tuple[str, str, str, str], ...] = (
    ("--backend", "backend", "{" + ",".join(BACKENDS) + "}",
     "single: one process on one device; ddp: DistributedDataParallel; deepspeed: DeepSpeed ZeRO; "
     "fsdp: FSDP2 (torch's fully_shard; 2 processes or more)."),
    ("--num-processes", "num_processes", "N",
     "Processes in total, over all machines (each machine runs N / --num-machines)."),
    ("--num-machines", "num_machines", "N", "Machines taking part (torchrun's --nnodes)."),
    ("--machine-rank", "machine_rank", "R",
     "This machine's rank, 0 to num_machines-1 (torchrun's --node-rank)."),
    ("--main-process-ip", "main_process_ip", "HOST",
     "Address of machine 0 (torchrun's --master-addr). Default with one machine: 127.0.0.1."),
    ("--main-process-port", "main_process_port", "PORT",
     f"Port on machine 0 (torchrun's --master-port). Default: a free one with one machine, "
     f"{DEFAULT_MULTI_NODE_PORT} with several."),
    ("--mixed-precision", "mixed_precision", "{" + ",".join(MIXED_PRECISIONS) + ",null}",
     "Mixed precision mode ('no': fp32). null: unset, the script's Accelerator(...) decides."),
    ("--zero-stage", "zero_stage", "{0,1,2,3}", "DeepSpeed ZeRO stage (with --backend deepspeed)."),
    ("--offload-optimizer-device", "offload_optimizer_device", "{" + ",".join(OFFLOAD_DEVICES) + "}",
     "DeepSpeed: where optimizer states live."),
    ("--offload-param-device", "offload_param_device", "{" + ",".join(OFFLOAD_DEVICES) + "}",
     "DeepSpeed ZeRO-3: where parameters live."),
    ("--gradient-accumulation-steps", "gradient_accumulation_steps", "N",
     "Micro-batches per optimizer step. null: unset, the script's Accelerator(...) decides."),
    ("--gradient-clipping", "gradient_clipping", "X", "Clip the gradient norm to X."),
)
_BOOL_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("--cpu", "cpu", "Run on CPU even when CUDA devices are present (gloo backend)."),
    ("--cpu-fp16-emulation", "cpu_fp16_emulation",
     "DeepSpeed fp16 on a CPU without native fp16, through DeepSpeed's set_accelerator (an emulation)."),
    ("--sync-batchnorm", "sync_batchnorm",
     "Synchronise BatchNorm statistics over the processes (Accelerator(sync_batchnorm=True)), so N "
     "processes normalise like one process on the whole batch."),
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "launch",
        help="Start a training script on one or more processes.",
        description=(
            "Start SCRIPT with its arguments on the processes the config file and flags ask for. "
            "One process runs the script directly; several run through `python -m "
            "torch.distributed.run` (on one machine: a rendezvous on 127.0.0.1 and a port the kernel "
            "picks; with several: a static rendezvous at --main-process-ip:--main-process-port). "
            "Flags override the config file. Only settings that are set reach the script: a null (unset) "
            "one is left to its Accelerator(...) arguments, and a set one they contradict is an error. "
            "Exit status: "
            "the script's (the first failing rank's when several run); 128+N when stopped by signal N."
        ),
        epilog=("Config file: --config-file, else $ACCELERATE_CORE_CONFIG_FILE, else "
                f"{default_config_path()} when it exists. Flags may be spelled with underscores."),
    )
    parser.add_argument("--config-file", "--config_file", metavar="FILE",
                        help="Config written by `accelerate-core config`.")
    for flag, key, metavar, text in _VALUE_FLAGS:
        parser.add_argument(*_spellings(flag), dest=key, metavar=metavar, help=text)
    for flag, key, text in _BOOL_FLAGS:
        # --cpu / --no-cpu: "not given" (None) must differ from "false", so a flag can undo the file.
        parser.add_argument(*_spellings(flag), dest=key, action=argparse.BooleanOptionalAction,
                            default=None, help=text)
    parser.add_argument("--dry-run", "--dry_run", action="store_true",
                        help="Print the command and the settings it would pass, and start nothing.")
    parser.add_argument("script", metavar="script.py", help="The training script to run.")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="Arguments passed on to the script.")
    parser.set_defaults(handler=run)
    return parser


def _spellings(flag: str) -> list[str]:
    """`--num-processes` and `--num_processes` (torchrun and DeepSpeed's launcher accept both)."""
    underscored = "--" + flag[2:].replace("-", "_")
    return [flag] if underscored == flag else [flag, underscored]


@dataclass
class LaunchPlan:
    config: LaunchConfig
    settings: LaunchSettings
    command: list[str]
    env_updates: dict[str, str] = field(default_factory=dict)


def resolve_config(args: argparse.Namespace) -> tuple[LaunchConfig, set[str], dict[str, SettingSource]]:
    """The merged config, the keys someone actually set (flags or file; null is unset), and
    where each of those came from (the flag, or the config file)."""
    named = args.config_file or config_file_from_environ()
    path = Path(named).expanduser() if named else default_config_path()
    file_data: dict[str, Any] = {}
    source = "launch flags"
    if path.is_file():
        file_data = read_mapping(path)  # the file must be valid on its own
        file_data.pop("version", None)
        source = f"config file {path} with the launch flags"
    elif named:
        given = f"--config-file {path}" if args.config_file else f"{CONFIG_FILE_VARIABLE}={path}"
        raise InvalidSettingError(explain(given, "no such file", "an existing config file",
                                          "write one with `accelerate-core config --config-file FILE`"))
    flags: dict[str, Any] = {}
    sources = {key: SettingSource("config file", str(path)) for key in file_data}
    for flag, key, _, _ in _VALUE_FLAGS:
        if getattr(args, key) is not None:
            flags[key] = parse_text(key, getattr(args, key), flag)
            sources[key] = SettingSource("flag", f"{flag} {getattr(args, key)}", flag)
    for flag, key, _ in _BOOL_FLAGS:
        if getattr(args, key) is not None:
            flags[key] = getattr(args, key)
            sources[key] = SettingSource("flag", flag if flags[key] else "--no-" + flag[2:], flag)
    merged = {**file_data, **flags}
    if merged.get("backend", "deepspeed") != "deepspeed":
        # Switching away from DeepSpeed by flag drops the file's DeepSpeed-only settings.
        for key in _DEEPSPEED_ONLY:
            if key not in flags:
                merged.pop(key, None)
    explicit = {key for key, value in merged.items() if value is not None}
    if merged.get("backend") is None:
        # Unset: checked here as the connector will resolve it (ddp for several processes),
        # but not passed on, so a script's DeepSpeedPlugin can still choose DeepSpeed.
        merged["backend"] = "ddp" if merged.get("num_processes", 1) > 1 else "single"
    config = from_mapping({"version": CONFIG_VERSION, **merged}, source)
    return config, explicit, {key: sources[key] for key in explicit}


def plan(args: argparse.Namespace) -> LaunchPlan:
    """Check everything and decide the command and environment; starts nothing."""
    config, explicit, sources = resolve_config(args)
    script = Path(args.script)
    if not script.is_file():
        raise InvalidSettingError(explain(
            f"script {args.script!r}", "no such file", "a path to a Python file",
            "check the path (relative to the current directory)"))
    if config.backend == "deepspeed":
        require_deepspeed("--backend deepspeed")
    settings = config.to_launch_settings(only=explicit)
    settings = dataclasses.replace(settings, sources={k: v for k, v in sources.items()
                                                      if getattr(settings, k, None) is not None})
    env = settings.to_environ()  # with ACCELERATE_CORE_SOURCES: a conflict names file or flag
    if config.cpu and config.backend == "deepspeed":
        env["DS_ACCELERATOR"] = os.environ.get("DS_ACCELERATOR", "cpu")  # DeepSpeed's own selector
    script_args = list(args.script_args)
    if config.num_processes == 1:
        port = config.main_process_port or free_port()
        # DeepSpeed wants the torchrun variables even for one process, else it tries MPI discovery.
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", GROUP_RANK="0",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        command = [sys.executable, str(script), *script_args]
    else:
        command = [sys.executable, "-m", _TORCHRUN_ENTRY, *rendezvous_arguments(config),
                   "--nproc-per-node", str(config.processes_per_machine),
                   "--max-restarts", "0", str(script), *script_args]
    return LaunchPlan(config=config, settings=settings, command=command, env_updates=env)


def rendezvous_arguments(config: LaunchConfig) -> list[str]:
    """How torchrun's agents meet.

    One machine, no port given: what `torchrun --standalone` does, a c10d rendezvous whose store
    binds port 0 on loopback, so the kernel picks a free port at bind time (a port probed free
    earlier can be taken by another process before torchrun binds it). Otherwise a static
    rendezvous at main_process_ip:main_process_port, which every machine must be given alike.
    """
    if config.num_machines == 1 and config.main_process_port is None:
        return ["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
                "--rdzv-id", uuid.uuid4().hex]
    addr = config.main_process_ip or "127.0.0.1"
    port = config.main_process_port or DEFAULT_MULTI_NODE_PORT
    return ["--nnodes", str(config.num_machines), "--node-rank", str(config.machine_rank),
            "--rdzv-backend", "static", "--master-addr", addr, "--master-port", str(port)]


def free_port() -> int:
    """A TCP port free on loopback right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_environment(updates: dict[str, str]) -> dict[str, str]:
    """This process's environment with stale launcher variables removed and the plan's added."""
    env = {k: v for k, v in os.environ.items() if k not in LaunchSettings.variables()}
    env.update(updates)
    return env


SCRATCH_PREFIX = "accelerate-core-launch-"  # + the launcher's pid + "-" + a random part


def remove_orphaned_scratch(folder: Path | None = None) -> list[Path]:
    """Remove the scratch folders of launchers that died without cleaning up (SIGKILL cannot be
    handled); returns what it removed. A folder's pid names the launcher that owns it."""
    removed = []
    for path in Path(folder or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = path.name[len(SCRATCH_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to judge
        return True
    return True


def run(args: argparse.Namespace) -> int:
    launch_plan = plan(args)
    if args.dry_run:
        print("command: " + " ".join(launch_plan.command))
        for key, value in sorted(launch_plan.env_updates.items()):
            if key != SOURCES_VARIABLE:  # shown readably below
                print(f"env: {key}={value}")
        for name, source in sorted(launch_plan.settings.sources.items()):
            print(f"source: {LaunchSettings.variable(name)} from {source.kind} {source.where}")
        return 0
    env = child_environment(launch_plan.env_updates)
    command = launch_plan.command
    if command[1:3] != ["-m", _TORCHRUN_ENTRY]:
        return run_supervised(command, env)  # one process: its own traceback ends the output
    # Several: torchrun's summary goes above the error a rank raised, which ends the output.
    remove_orphaned_scratch()
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-") as scratch:
        summary = Path(scratch) / "failure.json"
        watch = ErrorWatch()
        status = run_supervised([*command[:3], SUMMARY_OPTION, str(summary), *command[3:]], env,
                                stderr_sink=watch.feed)
        watch.close()
        if status != 0:
            report(summary, watch.errors)
    return status

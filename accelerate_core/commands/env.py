"""`accelerate-core env`: what a bug report needs, as text to paste.

DeepSpeed's version is read from its installed metadata, never by importing it (that takes
seconds and can fail on its own); a broken config is reported, not raised, since this command
is what people run when something is wrong.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import Any

from accelerate_core.errors import AccelerateCoreError
from accelerate_core.imports import is_deepspeed_available
from accelerate_core.launch.config import default_config_path, read_mapping
from accelerate_core.launch.config_file import Scalar
from accelerate_core.machine import describe_machine


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "env",
        help="Print versions, devices and the config in use (for bug reports).",
        description="Print Python, torch, deepspeed and accelerate-core versions, the CUDA devices "
                    "and the launch config in use, in a form to paste into a bug report.",
    )
    parser.add_argument("--config-file", "--config_file", metavar="FILE",
                        help="Show this config instead of the default one.")
    parser.set_defaults(handler=run)
    return parser


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def collect(config_file: str | None = None) -> list[tuple[str, str]]:
    import torch

    rows = [
        ("accelerate-core", _version("accelerate-core")),
        ("Platform", platform.platform()),
        ("Python", f"{platform.python_version()} ({sys.executable})"),
        ("torch", torch.__version__),
        ("deepspeed", _version("deepspeed") if is_deepspeed_available() else "not installed"),
        ("CPU cores", str(os.cpu_count())),
        ("torch.distributed", "available" if torch.distributed.is_available() else "not available"),
    ]
    if torch.distributed.is_available():
        backends = [name for name, ok in (("gloo", torch.distributed.is_gloo_available()),
                                          ("nccl", torch.distributed.is_nccl_available()),
                                          ("mpi", torch.distributed.is_mpi_available())) if ok]
        rows.append(("Process group backends", ", ".join(backends) or "none"))
    rows.extend(_machine_rows(describe_machine()))
    rows.extend(_config_rows(config_file))
    return rows


def _yes_no(value: bool | None) -> str:
    return {True: "yes", False: "no"}.get(value, "unknown")  # type: ignore[arg-type]


def _machine_rows(machine: dict[str, Any]) -> list[tuple[str, str]]:
    """What decides numerics here (accelerate_core.machine): two CPUs may differ in the last bits."""
    cpu, cuda = machine["cpu"], machine["cuda"]
    flags = ", ".join(f"{name} {_yes_no(has)}" for name, has in cpu["flags"].items())
    rows = [
        ("CPU", f"{cpu['model']} ({cpu['architecture']}, {cpu['logical_cores']} logical cores)"),
        ("CPU flags", flags),
        ("torch CPU kernels", str(cpu["torch_cpu_capability"])),
        ("BLAS / oneDNN", f"{cpu['blas']} {cpu['mkl']} / {cpu['onednn']}"
                          + ("" if cpu["onednn_enabled"] else " (disabled)")),
        ("Threads", f"intra-op {cpu['intra_op_threads']}, inter-op {cpu['inter_op_threads']}"),
        ("Native fp16 / bf16 (oneDNN)", f"{_yes_no(cpu['native_fp16'])} / {_yes_no(cpu['native_bf16'])}"),
        ("DeepSpeed on this CPU", ("fp16 native" if cpu["deepspeed_cpu_fp16"] else
                                   "fp16 refused (emulation on request)")
                                  + f", bf16 {'yes' if cpu['deepspeed_cpu_bf16'] else 'no'}"),
        ("CUDA build", str(cuda["torch_cuda"])),
    ]
    if cuda["available"]:
        devices = "; ".join(f"{d['name']} (sm {d['capability']})" for d in cuda["devices"])
        rows += [("CUDA devices", f"{len(cuda['devices'])}: {devices}"),
                 ("cuDNN / NCCL", f"{cuda['cudnn']} / {cuda['nccl']}")]
    else:
        rows.append(("CUDA devices", "0"))
    forced = machine["environment"]
    rows.append(("Numerics environment", ", ".join(f"{k}={v}" for k, v in forced.items()) or "none set"))
    return rows


def _config_rows(config_file: str | None) -> list[tuple[str, str]]:
    path = Path(config_file).expanduser() if config_file else default_config_path()
    if not path.is_file():
        return [("Config file", f"{path} (not present: launch uses flags and defaults)")]
    rows = [("Config file", str(path))]
    try:
        data = read_mapping(path)
    except AccelerateCoreError as exc:
        return [*rows, ("Config problem", str(exc))]
    rows.extend((f"  {key}", _text(value)) for key, value in data.items())
    return rows


def _text(value: Scalar) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def run(args: argparse.Namespace) -> int:
    rows = collect(args.config_file)
    width = max(len(name) for name, _ in rows)
    print("Copy and paste this into a bug report:\n")
    for name, value in rows:
        print(f"- {name.ljust(width)} : {value}")
    return 0

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

from accelerate_core import flat_yaml
from accelerate_core.config import default_config_path, from_mapping
from accelerate_core.errors import AccelerateCoreError
from accelerate_core.imports import is_deepspeed_available


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
    rows.append(("CUDA build", str(torch.version.cuda) if torch.version.cuda else "none (CPU build)"))
    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        rows.append(("CUDA devices", f"{len(names)}: " + "; ".join(names)))
    else:
        rows.append(("CUDA devices", "0"))
    rows.extend(_config_rows(config_file))
    return rows


def _config_rows(config_file: str | None) -> list[tuple[str, str]]:
    path = Path(config_file).expanduser() if config_file else default_config_path()
    if not path.is_file():
        return [("Config file", f"{path} (not present: launch uses flags and defaults)")]
    rows = [("Config file", str(path))]
    try:
        data = flat_yaml.load(path)
        from_mapping(data, f"config file {path}")
    except AccelerateCoreError as exc:
        return [*rows, ("Config problem", str(exc))]
    rows.extend((f"  {key}", _text(value)) for key, value in data.items())
    return rows


def _text(value: flat_yaml.Scalar) -> str:
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

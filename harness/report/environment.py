"""Where a run happened (interpreter, package versions, devices, platform) and what the run
itself adds (its shard, an interruption, its launches' start-up): report.json's "environment".

DeepSpeed's version comes from the installed distribution's metadata, never from importing
it: an import costs seconds and pulls CUDA probing, and a report must not change what it
describes (the nodeepspeed environment must keep deepspeed unimported).
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from accelerate_core.machine import describe_machine
from harness.run.startup import StartupSummary

NOT_INSTALLED = "not installed"


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return NOT_INSTALLED


@dataclass
class Devices:
    cpu_count: int
    cuda_available: bool
    cuda_device_count: int
    cuda_devices: list[str]
    torch_cuda: str

    @classmethod
    def probe(cls) -> Devices:
        import torch  # the harness needs torch anyway; imported here to keep report import cheap

        count = int(torch.cuda.device_count())
        return cls(cpu_count=os.cpu_count() or 0, cuda_available=bool(torch.cuda.is_available()),
                   cuda_device_count=count,
                   cuda_devices=[torch.cuda.get_device_name(i) for i in range(count)],
                   torch_cuda=torch.version.cuda or "none")


@dataclass
class RunEnvironment:
    """The facts of one run. `to_json` is report.json's "environment" block: its keys, their
    order and values are a contract (docs/reading-the-report.md)."""

    name: str
    python: str
    python_executable: str
    platform: str
    # What decides numerics here (CPU model, flags, kernels, BLAS/oneDNN, threads, native
    # fp16/bf16, CUDA versions): a verdict names the machine it was reached on.
    machine: dict[str, Any]
    hostname: str
    torch: str
    deepspeed: str
    accelerate_core: str
    ci: bool
    devices: Devices
    shard: dict[str, Any] | None = None  # --shard: which part of the selection (harness.shard.identity)
    script: dict[str, Any] | None = None  # script mode: the user's script and its arguments
    interrupted: str | None = None  # by which signal, and how many cells had finished
    # `harness run` always says its launches' start-up (None: nothing was launched); a report
    # written by another caller (script mode, the pytest items) has no such entry.
    startup: StartupSummary | None = None
    says_startup: bool = False
    accelerate: str = NOT_INSTALLED  # Hugging Face Accelerate's release (the accelerate implementation)

    @property
    def deepspeed_installed(self) -> bool:
        return self.deepspeed != NOT_INSTALLED

    def with_startup(self, startup: StartupSummary | None) -> None:
        self.startup, self.says_startup = startup, True

    def to_json(self) -> dict[str, Any]:
        block: dict[str, Any] = {
            "name": self.name, "python": self.python, "python_executable": self.python_executable,
            "platform": self.platform, "machine": self.machine, "hostname": self.hostname,
            "torch": self.torch, "deepspeed": self.deepspeed, "deepspeed_installed": self.deepspeed_installed,
            "accelerate_core": self.accelerate_core, "accelerate": self.accelerate, "ci": self.ci,
            "cpu_count": self.devices.cpu_count, "cuda_available": self.devices.cuda_available,
            "cuda_device_count": self.devices.cuda_device_count,
            "cuda_devices": list(self.devices.cuda_devices),
            "torch_cuda": self.devices.torch_cuda,
        }
        optional = {"shard": self.shard, "script": self.script, "interrupted": self.interrupted}
        block |= {key: value for key, value in optional.items() if value is not None}
        if self.says_startup:
            block["startup"] = self.startup.to_json() if self.startup is not None else None
        return block


def environment_info(env_name: str) -> RunEnvironment:
    """This environment, probed now (the run's own facts are added by the caller)."""
    return RunEnvironment(
        name=env_name,
        python=platform.python_version(),
        python_executable=sys.executable,
        platform=platform.platform(),
        machine=describe_machine(),
        hostname=platform.node(),
        torch=_version("torch"),
        deepspeed=_version("deepspeed"),
        accelerate_core=_version("accelerate-core"),
        accelerate=_version("accelerate"),
        ci=bool(os.environ.get("CI")),
        devices=Devices.probe(),
    )

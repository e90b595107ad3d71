"""Whether this environment's torch / DeepSpeed release is one the core supports, and if not the
exact reason: the import error, or the core's refusal with its message. Written as
version_status.json beside report.json; an install error is written there by the sweep's
session itself (nothing of the project is installed then).
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.layout.report_dir import ReportDir

_IMPORT = "import torch, deepspeed"  # in a fresh process: an import failure must not end this one


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:400] if lines else "(no output)"


def environment_status() -> dict[str, Any]:
    """{"torch", "deepspeed", "supported": bool, "stage": "import"|"core"|"", "reason": str}."""
    from accelerate_core.deepspeed_support import UnsupportedDeepSpeedError, check_deepspeed_release

    status: dict[str, Any] = {"torch": _version("torch"), "deepspeed": _version("deepspeed"),
                              "supported": True, "stage": "", "reason": ""}
    if not status["deepspeed"]:
        return {**status, "supported": False, "stage": "install", "reason": "deepspeed is not installed"}
    done = subprocess.run([sys.executable, "-c", _IMPORT], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return {**status, "supported": False, "stage": "import",
                "reason": f"import error: {_last_line(done.stderr or done.stdout)}"}
    try:
        check_deepspeed_release(status["deepspeed"], allow_override=False)
    except UnsupportedDeepSpeedError as exc:
        return {**status, "supported": False, "stage": "core", "reason": f"refused by the core: {exc}"}
    return status


def write_status(report_dir: Path, status: dict[str, Any]) -> Path:
    from harness.atomic_files import write_text_atomic

    path = ReportDir(Path(report_dir)).version_status
    write_text_atomic(path, json.dumps(status, indent=2) + "\n")
    return path


def read_status(report_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(ReportDir(Path(report_dir)).version_status.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None

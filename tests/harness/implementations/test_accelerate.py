"""Hugging Face Accelerate as the `accelerate` implementation, for real: the same user loop on 2
gloo ranks through `accelerate.Accelerator`, judged against the same goldens. What it does
differently on CPU is declared in matrix.toml with its cause, and must fail on evidence (what the
objects that ran show), not on numbers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from harness.cli.main import main

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("accelerate") is None,
                       reason='accelerate is not installed (pip install -e ".[accelerate]")'),
]


def test_ddp_bf16_agrees_and_the_silent_fallbacks_fail_on_evidence(tmp_path: Path) -> None:
    report_dir = tmp_path / "report"
    code = main(["run", "--implementation", "accelerate", "-q", "--report-dir", str(report_dir),
                 "-k", "regression and cpu2 and (ddp or zero3) and (bf16 or fp16)"])
    cells = {c["id"]: c for c in json.loads((report_dir / "report.json").read_text())["cells"]}
    assert code == 0, {k: (c["status"], c["reason"]) for k, c in cells.items()}
    assert cells["regression-cpu2-ddp-bf16-accelerate"]["status"] == "passed"
    silent_ddp = cells["regression-cpu2-zero3-bf16-accelerate"]
    assert silent_ddp["status"] == "xfailed"
    assert "evidence: asked for zero3 bf16 on cpu2, the run had no DeepSpeed engine" in silent_ddp["reason"]
    silent_fp32 = cells["regression-cpu2-ddp-fp16-accelerate"]
    assert silent_fp32["status"] == "xfailed" and "computed in float32" in silent_fp32["reason"]

"""Where autocast acts, read from the model (harness.judge.autocast_site), and what the evidence
makes of it: a half-precision cell of `regression` or `scalar` that silently ran fp32 fails on its
evidence (it passed at 0% of its tolerance when they computed elementwise), and a task autocast
acts on nowhere says so in its evidence and fails its half-precision cells, never passes them
silently."""

from __future__ import annotations

import pytest

from harness.judge.autocast_site import autocast_site
from harness.judge.evidence_check import evidence_mismatch, required_fields
from harness.plan.cell import Cell
from harness.rank.loop import train_task
from harness.record.record_format import Record
from harness.tasks import get_task
from tests.harness.elementwise_task import registered


def _run(name: str, precision: str) -> Record:
    record = train_task(get_task(name), precision=precision, cpu=True, zero_stage=None)
    assert record is not None
    return record


def test_the_site_is_read_from_the_model() -> None:
    classifier = autocast_site(get_task("classifier"))
    # The first Linear (frozen), then every module whose output autocast makes bf16.
    assert classifier is not None and classifier.modules == ("embed", "body", "head.linear")
    assert classifier.describe() == "embed (Linear)"
    for name, model in (("regression", "RegressionModel"), ("scalar", "ScalarModel")):
        site = autocast_site(get_task(name))  # nn.functional.linear in the model's own forward
        assert site is not None and site.describe() == f"the model itself ({model})"
    # scalar keeps the 0-dim parameters it exists for.
    assert all(p.dim() == 0 for p in get_task("scalar").build_model().parameters())


@pytest.mark.parametrize("name", ["regression", "scalar"])
def test_a_bf16_cell_that_silently_ran_fp32_fails_on_its_evidence(name: str) -> None:
    assert "activation_dtype" in required_fields(Cell(name, "cpu", 1, "single", "bf16"), name)
    ran_fp32 = _run(name, "fp32")
    model = get_task(name).build_model().__class__.__name__
    assert evidence_mismatch(Cell(name, "cpu", 1, "single", "fp32"), ran_fp32) is None
    assert evidence_mismatch(Cell(name, "cpu", 1, "single", "bf16"), ran_fp32) == (
        f"asked for single bf16 on cpu1, the first module autocast acts on, the model itself ({model}), "
        "computed in float32")


def test_a_bf16_run_records_what_it_computed_in() -> None:
    evidence = _run("regression", "bf16").meta["evidence"]
    assert (evidence["activation_dtype"], evidence["activation_grad_dtype"], evidence["weight_dtype"]) == (
        "bfloat16", "bfloat16", "float32")  # autocast: half activations over fp32 weights
    assert evidence["eval_activation_dtype"] == "bfloat16"  # evaluation at the cell's precision too
    assert evidence["autocast_site"] == "the model itself (RegressionModel)"


def test_a_task_autocast_acts_on_nowhere_says_so_and_fails_its_half_cells(
        monkeypatch: pytest.MonkeyPatch) -> None:
    task = registered(monkeypatch)
    assert autocast_site(task) is None
    record = train_task(task, precision="fp32", cpu=True, zero_stage=None)
    assert record is not None
    evidence = record.meta["evidence"]
    assert evidence["autocast_site"].startswith(
        "none: no module of ElementwiseModel computes in a half dtype")
    assert "activation_dtype" not in evidence and "eval_activation_dtype" not in evidence
    # fp32 needs no autocast: nothing missing, nothing to see.
    assert evidence_mismatch(Cell(task.name, "cpu", 1, "single", "fp32"), record) is None
    mismatch = str(evidence_mismatch(Cell(task.name, "cpu", 1, "single", "bf16"), record))
    assert mismatch.startswith("asked for single bf16 on cpu1, but autocast acts on no module of the task's "
                               "model, so the cell cannot tell bf16 from fp32 and cannot pass")
    assert "Fix: compute the model through an op autocast casts" in mismatch

"""The guard on half-precision goldens (harness.golden.precision_visible): a golden that its
precision left bit-identical to the fp32 golden is refused by `golden --check` and `--update`,
with a given/why/valid/fix message, and never written. The task that cannot see half precision
is built in the test (tests/harness/elementwise_task.py); its goldens are made in this
process (the deterministic child could not import it), which is all the guard needs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.golden import golden_store as golden_module
from harness.golden.golden_generation import make_golden
from harness.golden.golden_store import check_goldens, load_golden, update_goldens
from harness.golden.precision_visible import micro_steps_through, unchanged_by_precision
from harness.record.record_format import Record
from harness.starter import tolerances_text
from harness.tasks import get_task
from tests.harness.elementwise_task import registered

HALF = ("fp16", "bf16")
OWN_GOLDENS = ("regression", "classifier", "lm", "scalar", "root_param", "sgd_accum", "clip_norm",
               "batchnorm", "dropout")


def _made_here(pairs: Sequence[tuple[str, str]], **_: object) -> dict[tuple[str, str], Record]:
    """Stands in for `generate`: the same reference, in this process."""
    return {(name, precision): make_golden(get_task(name), precision) for name, precision in pairs}


@pytest.mark.goldens
@pytest.mark.parametrize("precision", HALF)
@pytest.mark.parametrize("name", OWN_GOLDENS)
def test_every_checked_in_half_precision_golden_differs_from_fp32(name: str, precision: str) -> None:
    # regression and scalar were bit-identical here before their prediction went through
    # nn.functional.linear.
    task = get_task(name)
    assert unchanged_by_precision(task, load_golden(name, precision), load_golden(name, "fp32")) is None


def test_a_model_autocast_cannot_see_gets_its_half_goldens_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task = registered(monkeypatch)
    monkeypatch.setattr(golden_module, "generate", _made_here)
    checks = {check.label.rpartition("-")[2]: check for check in update_goldens(tasks=[task.name],
                                                                                golden_dir=tmp_path)}
    assert checks["fp32"].rewritten and not checks["fp32"].refused
    for precision in HALF:
        check = checks[precision]
        assert check.refused and not check.passed and not check.rewritten
        assert not (tmp_path / f"{task.name}-{precision}.json").exists()  # never written
        summary = check.summary()
        assert summary.startswith(f"{task.name}-{precision}: refused: golden {task.name}-{precision}: ")
        assert f"bit-identical to the {task.name}-fp32 golden's: this precision changed nothing" in summary
        assert "Valid: " in summary and "Fix: " in summary
    # bf16 compares every tensor; fp16 (a step skipped by its loss scaler at optimizer step 1)
    # only the losses through that step, the same in fp16 as in fp32 since nothing was cast.
    assert "(eval/labels, eval/logits, loss_scales, losses, lrs, state_dict/a, state_dict/b)" in checks[
        "bf16"].refused
    assert "its tensors (losses) are bit-identical" in checks["fp16"].refused
    # --check says the same of a regeneration, whatever is on disk.
    [check] = check_goldens(tasks=[task.name], precisions=["bf16"], golden_dir=tmp_path)
    assert check.refused and not check.passed


def test_golden_update_exits_1_naming_the_refused_goldens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    task = registered(monkeypatch)
    monkeypatch.setattr(golden_module, "generate", _made_here)
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(f'[axes]\ntask = ["{task.name}"]\ndevice = ["cpu"]\nstrategy = ["single"]\n'
                      'precision = ["fp32", "bf16"]\n\n[[shapes]]\ndevice = "cpu"\nprocesses = 1\n'
                      'strategies = ["single"]\n\n' + tolerances_text(), encoding="utf-8")
    command = ["golden", "--update", "--task", task.name, "--precision", "bf16", "--matrix", str(matrix)]
    assert main(command) == 1
    out = capsys.readouterr().out
    assert f"{task.name}-bf16: refused: golden {task.name}-bf16: " in out
    assert f"1 half-precision golden(s) refused: bit-identical to the fp32 golden ({task.name}-bf16)" in out
    assert not (tmp_path / "golden" / f"{task.name}-bf16.json").exists()


def test_a_precision_that_changed_something_passes_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    regression = get_task("regression")
    fp32, bf16 = make_golden(regression, "fp32"), make_golden(regression, "bf16")
    assert unchanged_by_precision(regression, bf16, fp32) is None
    assert unchanged_by_precision(regression, fp32, fp32) is not None  # the same bits: refused


def test_micro_steps_through_an_optimizer_step() -> None:
    classifier = get_task("classifier")  # 8 micro-steps per epoch, accumulation 2: 4 steps
    assert [micro_steps_through(classifier, step) for step in (0, 2, 3, 4)] == [2, 6, 8, 10]
    sgd_accum = get_task("sgd_accum")  # 5 micro-steps per epoch, accumulation 3 (3 + a short 2)
    assert [micro_steps_through(sgd_accum, step) for step in (0, 1, 2, 3)] == [3, 5, 8, 10]

"""Foreign goldens: every golden moved as a regeneration on another CPU moves it, and only that."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.golden.foreign_goldens import FOREIGN_MACHINE, make_foreign_goldens
from harness.golden.golden_check import Reproduction
from harness.golden.golden_store import check_goldens, load_golden
from harness.paths import REPOSITORY_GOLDEN_DIR as CHECKED_IN
from harness.record.record_format import Record

# Moves the checked-in goldens (harness.paths.REPOSITORY_GOLDEN_DIR), whatever HARNESS_GOLDEN_DIR
# says: tests(deepspeed) runs with it pointing at goldens moved already.
pytestmark = pytest.mark.goldens


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("foreign")
    labels = make_foreign_goldens(folder)
    assert sorted(labels) == sorted(p.stem for p in CHECKED_IN.glob("*.json"))
    return folder


def test_goldens_are_reproduced_within_the_regeneration_tolerance_never_bit_identical(foreign: Path) -> None:
    checks = check_goldens(tasks=["classifier", "lm"], precisions=["fp32", "bf16"], golden_dir=foreign)
    assert [c.reproduction for c in checks] == [Reproduction.WITHIN] * 4, [c.summary() for c in checks]
    assert all("Foreign CPU" in c.summary() for c in checks)


def test_only_computed_values_move_and_the_files_verify(foreign: Path) -> None:
    for name in ("classifier-fp32", "lm-bf16", "regression-fp16"):
        task, precision = name.split("-")
        moved = load_golden(task, precision, golden_dir=foreign)  # hash and task identity verified
        original = Record.load(CHECKED_IN / name)
        assert moved.meta["golden"]["made_on"] == FOREIGN_MACHINE
        assert moved.lrs == original.lrs and moved.loss_scales == original.loss_scales
        assert moved.skipped_steps == original.skipped_steps
        # The labels are the data gathered back, not computed: no CPU moves them.
        assert torch.equal(moved.eval_outputs["labels"], original.eval_outputs["labels"])
        assert moved.losses != original.losses and not torch.equal(moved.eval_outputs["logits"],
                                                                   original.eval_outputs["logits"])
        assert any(not torch.equal(moved.state_dict[k], v) for k, v in original.state_dict.items()), name
    frozen = ("embed.weight", "embed.bias", "input_scale")  # classifier's frozen layer and buffer
    moved = load_golden("classifier", "fp32", golden_dir=foreign)
    original = Record.load(CHECKED_IN / "classifier-fp32")
    assert all(torch.equal(moved.state_dict[k], original.state_dict[k]) for k in frozen)

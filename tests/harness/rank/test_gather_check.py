"""The user loop's gather of a whole model output, checked against gather_for_metrics
(harness.rank.gather_check): what a correct gather returns agrees; each way a gather goes wrong
is named, and so is an output object or a namedtuple rebuilt as another type."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from harness.rank.gather_check import PAD_INDEX, EvalPair, GatherCheck, ragged_width
from harness.tasks.base import TaskOutput

PROCESSES, LOCAL_ROWS = 2, 3
LOGITS = torch.arange(12.0).reshape(6, 2)  # two processes' 3 rows each, in rank order
KEPT = LOGITS[:5]  # gather_for_metrics of an uneven last batch: the duplicate row left out
KEYS = {"logits", "loss"}
LABELS = torch.tensor([0, 1, 2, 0, 1])  # gather_for_metrics(labels): the same 5 rows
PAIR = (KEPT, LABELS)  # gather_for_metrics((logits, labels)) done right


def _checked(gathered: Any, keys: set[str] = KEYS, pair: Any = PAIR) -> dict[str, Any]:
    check = GatherCheck(PROCESSES)
    check.add(gathered, keys, LOCAL_ROWS, KEPT, pair, LABELS)
    return check.evidence()


def test_a_correct_gather_agrees() -> None:
    assert _checked({"logits": LOGITS, "loss": torch.tensor([0.5, 0.7])}) == {
        "batches": 1, "agreed": 1, "first_disagreement": None}
    assert _checked({"logits": LOGITS}, {"logits"})["agreed"] == 1  # a model that returned no loss


@pytest.mark.parametrize(("gathered", "why"), [
    ({"logits": LOGITS}, "it returned a dict (['logits']) for a dict of ['logits', 'loss']"),
    (LOGITS, "it returned a Tensor (no keys) for a dict of ['logits', 'loss']"),
    ({"logits": LOGITS[:3], "loss": torch.tensor([0.5, 0.7])}, "logits came back with 3 rows, not 2 x 3"),
    ({"logits": LOGITS, "loss": torch.tensor(0.5)}, "the loss came back with shape (), not one per process"),
    ({"logits": LOGITS.flip(0), "loss": torch.tensor([0.5, 0.7])},
     "its logits' first 5 rows are not the ones gather_for_metrics returned"),
])
def test_each_wrong_gather_is_named(gathered: Any, why: str) -> None:
    evidence = _checked(gathered)
    assert evidence["agreed"] == 0 and evidence["first_disagreement"] == f"eval batch 1: {why}"


GOOD = {"logits": LOGITS, "loss": torch.tensor([0.5, 0.7])}


@pytest.mark.parametrize(("pair", "why"), [
    ([KEPT, LABELS], "gather_for_metrics((logits, labels)) returned a list of 2, not a tuple of 2"),
    ((KEPT,), "gather_for_metrics((logits, labels)) returned a tuple of 1, not a tuple of 2"),
    # the padding of the uneven last batch kept (truncated for a bare tensor only)
    ((LOGITS, torch.tensor([0, 1, 2, 0, 1, 0])),
     "gather_for_metrics((logits, labels)) returned logits (6 rows) other than gather_for_metrics(logits) "
     "alone (5 rows)"),
    ((KEPT, LABELS.flip(0)),
     "gather_for_metrics((logits, labels)) returned labels (5 rows) other than gather_for_metrics(labels) "
     "alone (5 rows)"),
])
def test_each_wrong_gather_of_a_tuple_is_named(pair: Any, why: str) -> None:
    evidence = _checked(GOOD, pair=pair)
    assert evidence["agreed"] == 0 and evidence["first_disagreement"] == f"eval batch 1: {why}"


def test_nan_logits_gathered_as_they_are_agree() -> None:
    """A run that diverged to NaN fails on its numbers (the diagnosis names the step), not here."""
    logits = LOGITS.clone()
    logits[1, 0] = float("nan")
    check = GatherCheck(PROCESSES)
    check.add({"logits": logits, "loss": torch.tensor([float("nan"), 0.7])}, KEYS, LOCAL_ROWS, logits[:5],
              (logits[:5], LABELS), LABELS)
    assert check.evidence()["agreed"] == 1


def test_the_first_disagreement_is_kept_and_every_batch_counted() -> None:
    check = GatherCheck(PROCESSES)
    good = {"logits": LOGITS, "loss": torch.tensor([0.5, 0.7])}
    for gathered in (good, {"logits": LOGITS}, good, LOGITS):
        check.add(gathered, KEYS, LOCAL_ROWS, KEPT, PAIR, LABELS)
    evidence = check.evidence()
    assert (evidence["batches"], evidence["agreed"]) == (4, 2)
    assert str(evidence["first_disagreement"]).startswith("eval batch 2: ")


OUTPUT = TaskOutput(loss=torch.tensor(0.5), logits=LOGITS[:3])  # one process's output object
WHOLE = TaskOutput(loss=torch.tensor([0.5, 0.7]), logits=LOGITS)  # gather(output) done right
NAMED = EvalPair(KEPT, LABELS)  # gather_for_metrics(EvalPair(logits, labels)) done right


def _structures(whole: Any = WHOLE, named: Any = NAMED) -> dict[str, Any]:
    check = GatherCheck(PROCESSES)
    check.add(GOOD, KEYS, LOCAL_ROWS, KEPT, PAIR, LABELS, (OUTPUT, whole, named))
    return check.evidence()


def test_the_output_object_and_a_namedtuple_gathered_right_agree() -> None:
    assert _structures()["agreed"] == 1


@pytest.mark.parametrize(("whole", "named", "why"), [
    ({"loss": torch.tensor([0.5, 0.7]), "logits": LOGITS}, NAMED,
     "gather(output) returned a dict for a TaskOutput"),
    (TaskOutput(loss=None, logits=LOGITS), NAMED,
     "gather(output).loss is not what gather gave for it in a dict"),
    (TaskOutput(loss=torch.tensor([0.5, 0.7]), logits=LOGITS.flip(0)), NAMED,
     "gather(output).logits is not what gather gave for it in a dict"),
    (WHOLE, (KEPT, LABELS), "gather_for_metrics(EvalPair(logits, labels)) returned a tuple, not an EvalPair"),
    (WHOLE, EvalPair(LOGITS, LABELS),
     "gather_for_metrics(EvalPair(logits, labels)).logits is not gather_for_metrics(logits) alone"),
])
def test_each_structure_rebuilt_wrong_is_named(whole: Any, named: Any, why: str) -> None:
    evidence = _structures(whole, named)
    assert evidence["agreed"] == 0 and evidence["first_disagreement"] == f"eval batch 1: {why}"


# pad_across_processes of rank 0's first column and rank 1's first two, then gathered, done right:
# each rank's block its own columns, rank 0's second column padding.
PADDED = torch.cat([torch.stack([LOGITS[:3, 0], torch.full((3,), PAD_INDEX)], dim=1), LOGITS[3:, :2]])


def _padded(padded: torch.Tensor) -> dict[str, Any]:
    check = GatherCheck(PROCESSES)
    check.add(GOOD, KEYS, LOCAL_ROWS, KEPT, PAIR, LABELS, padded=padded)
    return check.evidence()


def test_outputs_of_another_length_per_process_padded_and_gathered_right_agree() -> None:
    assert [ragged_width(rank) for rank in range(PROCESSES)] == [1, 2]
    assert _padded(PADDED)["agreed"] == 1


@pytest.mark.parametrize(("padded", "why"), [
    (LOGITS[:, :1], "came back with shape (6, 1), not (6, 2)"),  # not padded at all
    # padded in front (pad_first ignored the other way round)
    (torch.cat([torch.stack([torch.full((3,), PAD_INDEX), LOGITS[:3, 0]], dim=1), LOGITS[3:, :2]]),
     "holds other values than each process's columns followed by padding"),
    (torch.cat([torch.stack([LOGITS[:3, 0], torch.zeros(3)], dim=1), LOGITS[3:, :2]]),  # pad_index ignored
     "holds other values than each process's columns followed by padding"),
])
def test_each_wrong_padding_is_named(padded: torch.Tensor, why: str) -> None:
    call = "gather(pad_across_processes(outputs of another length per process, dim=1))"
    evidence = _padded(padded)
    assert evidence["agreed"] == 0 and evidence["first_disagreement"] == f"eval batch 1: {call} {why}"

"""The reference's perturbations (harness.golden.reference.Perturbation), each checked against a
computation of its own: the default is the golden's loop, a split averages the halves' gradients,
a gradient scale scales the step, half weights keep fp32 masters."""

from __future__ import annotations

import pytest
import torch

from harness.golden.reference import Perturbation, ReferenceInputs, ReferenceState, train_reference
from harness.tasks import get_task


def _after_one_step(name: str, precision: str, perturbation: Perturbation) -> ReferenceState:
    seen: list[ReferenceState] = []
    train_reference(get_task(name), precision, stop_at=(1, seen.append), perturbation=perturbation)
    return seen[0]


def test_no_perturbation_is_the_golden_loop_bit_for_bit() -> None:
    task = get_task("lm")
    plain = train_reference(task, "bf16")
    explicit = train_reference(task, "bf16", perturbation=Perturbation())
    assert plain.losses == explicit.losses
    assert all(torch.equal(plain.state_dict[k], explicit.state_dict[k]) for k in plain.state_dict)


def test_a_split_logs_the_mean_of_the_halves_losses_and_averages_their_gradients() -> None:
    task = get_task("regression")  # plain SGD: the first step is -lr x the gradient
    inputs = ReferenceInputs.of(task)
    model = task.build_model()
    model.load_state_dict(inputs.initial_state)
    batch = {k: v[: task.global_batch_size] for k, v in inputs.train.items()}
    halves = [{k: v.chunk(2)[i] for k, v in batch.items()} for i in range(2)]
    losses = [model(**half).loss for half in halves]
    grads = [torch.autograd.grad(loss, list(model.parameters())) for loss in losses]
    record = train_reference(task, "fp32", inputs=inputs, perturbation=Perturbation(splits=2))
    # reduce(mean) across ranks: an fp32 sum divided in fp32 (not Python's double mean)
    assert record.losses[0] == float((losses[0].detach() + losses[1].detach()) / 2)
    assert losses[0].dtype == torch.float32
    state = _after_one_step("regression", "fp32", Perturbation(splits=2))
    lr = task.build_optimizer(model).param_groups[0]["lr"]
    for (name, start), g0, g1 in zip(inputs.initial_state.items(), *grads, strict=True):
        expected = start - lr * (g0 + g1) / 2
        torch.testing.assert_close(state.model.state_dict()[name], expected, rtol=1e-6, atol=1e-7)


def test_a_gradient_scale_scales_the_first_sgd_step_by_the_same_factor() -> None:
    start = ReferenceInputs.of(get_task("regression")).initial_state
    plain = _after_one_step("regression", "fp32", Perturbation()).model.state_dict()
    scaled = _after_one_step("regression", "fp32", Perturbation(gradient_scale=1.5)).model.state_dict()
    for name, value in start.items():
        torch.testing.assert_close(scaled[name] - value, 1.5 * (plain[name] - value), rtol=1e-5, atol=1e-8)


def test_half_weights_step_fp32_masters_and_compute_with_half_copies() -> None:
    for style in ("zero1", "zero2", "fsdp"):
        state = _after_one_step("lm", "bf16", Perturbation(splits=2, half_weights=style))
        assert {p.dtype for p in state.model.parameters()} == {torch.float32}  # what the optimizer steps
        half = Perturbation(splits=2, half_weights=style)
        record = train_reference(get_task("lm"), "bf16", perturbation=half)
        # computed by the half copy; FSDP2's root hands its outputs back in fp32 (the core's output_dtype)
        logits = record.eval_outputs["logits"]
        assert logits.dtype == (torch.float32 if style == "fsdp" else torch.bfloat16)
        assert torch.equal(logits, logits.to(torch.bfloat16).float().to(logits.dtype))  # half values
        assert all(v.dtype == torch.float32 for k, v in record.state_dict.items() if v.is_floating_point())
        golden_loop = train_reference(get_task("lm"), "bf16", perturbation=Perturbation(splits=2))
        assert record.losses != golden_loop.losses  # the half semantics are not autocast's



def test_a_split_evaluates_each_ranks_rows_apart_filling_the_short_batch_as_the_core_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rank computes its block of an eval batch by itself (a GEMM may round 4 rows unlike 8), and
    the short last batch is filled from the start of the set, as the core's sampler fills it: every
    eval forward of the reference then takes one rank's rows, its logits are those of the blocks
    computed here one by one, and the filling is left out, as gather_for_metrics leaves it out."""
    from accelerate_core.data import ShardedBatchSampler

    task = get_task("regression")
    inputs = ReferenceInputs.of(task)
    model_class = type(task.build_model())
    forward = model_class.forward
    eval_rows_seen: list[int] = []

    def recording(self: torch.nn.Module, **batch: torch.Tensor) -> object:
        if not self.training:
            eval_rows_seen.append(len(next(iter(batch.values()))))
        return forward(self, **batch)

    monkeypatch.setattr(model_class, "forward", recording)
    record = train_reference(task, "fp32", inputs=inputs, perturbation=Perturbation(splits=2))
    monkeypatch.undo()
    size, per_rank = task.eval_batch_size, task.eval_batch_size // 2
    eval_rows = len(inputs.eval["labels"])
    assert eval_rows % size, "the eval set must end with a short batch for this test to mean anything"
    assert eval_rows_seen == [per_rank] * (2 * -(-eval_rows // size))
    # The core's rows of the last global eval batch, rank by rank (data.py's wrap-around).
    samplers = [ShardedBatchSampler(lambda _e: list(range(eval_rows)), eval_rows, per_rank, r, 2)
                for r in (0, 1)]
    model = task.build_model()
    model.load_state_dict(record.state_dict)
    model.eval()
    with torch.no_grad():
        blocks = [model(**{k: v[list(s)[-1]] for k, v in inputs.eval.items()}).logits for s in samplers]
    short = eval_rows % size
    assert torch.equal(record.eval_outputs["logits"][-short:], torch.cat(blocks)[:short])
    assert record.eval_outputs["logits"].shape[0] == eval_rows
    assert torch.equal(record.eval_outputs["labels"], inputs.eval["labels"])

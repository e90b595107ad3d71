"""The reference tasks: registry, determinism, sizes and the model features they promise."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.golden.reference import train_reference
from harness.tasks import get_task, register_task, task_names
from harness.tasks.base import Task
from harness.tasks.lm import LMTask
from harness.tasks.regression import RegressionTask

BUILTIN = ("regression", "classifier", "lm", "scalar", "root_param")


def test_builtin_tasks_are_registered() -> None:
    assert set(BUILTIN) <= set(task_names())
    assert task_names() == sorted(task_names())


def test_unknown_task_names_the_valid_ones() -> None:
    with pytest.raises(KeyError) as info:
        get_task("nope")
    message = str(info.value)
    assert "'nope'" in message and "'classifier'" in message and "Fix" in message


def test_register_rejects_bad_names_and_conflicting_definitions() -> None:
    with pytest.raises(ValueError, match="lowercase"):
        register_task(RegressionTask(name="Bad-Name"))
    with pytest.raises(ValueError, match="another definition"):
        register_task(RegressionTask(name="regression", seed=999))
    assert register_task(get_task("regression")) is get_task("regression")  # same definition: fine


@pytest.mark.parametrize("name", BUILTIN)
def test_everything_is_rebuilt_identically_from_the_seed(name: str) -> None:
    task = get_task(name)
    before = torch.random.get_rng_state()
    first, second = task.build_model().state_dict(), task.build_model().state_dict()
    assert torch.equal(before, torch.random.get_rng_state()), "build_model must not consume the global RNG"
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    for split in (task.train_dataset, task.eval_dataset):
        a, b = split().tensors, split().tensors
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert task.definition_hash() == get_task(name).definition_hash()


@pytest.mark.parametrize("name", BUILTIN)
def test_sizes_fit_every_world_size(name: str) -> None:
    task = get_task(name)
    assert len(task.train_dataset()) == task.train_size
    assert task.train_size % task.global_batch_size == 0
    assert len(task.eval_dataset()) % 2 == 1, "an eval set that no world size > 1 divides"
    for processes in (1, 2):
        assert task.per_process_batch_size(processes) * processes == task.global_batch_size
    with pytest.raises(ValueError, match="does not split over 3 processes"):
        task.per_process_batch_size(3)


def test_train_size_must_be_whole_global_batches() -> None:
    with pytest.raises(ValueError, match="not a multiple of global_batch_size"):
        RegressionTask(train_size=65)


def test_definition_hash_follows_the_definition() -> None:
    task = get_task("lm")
    assert isinstance(task, LMTask)
    assert dataclasses.replace(task, lr=task.lr * 2).definition_hash() != task.definition_hash()
    assert dataclasses.replace(task, seed=task.seed + 1).data_sha256() != task.data_sha256()


def test_definition_hash_ignores_comments_and_docstrings() -> None:
    from harness.tasks.base import _code_shape

    code = 'def f(x):\n    """Doc."""\n    return x + 1  # one\n'
    assert _code_shape(code) == _code_shape("def f(x):\n    # other words\n    return x + 1\n")
    assert _code_shape(code) != _code_shape("def f(x):\n    return x + 2\n")


def test_root_param_owns_a_parameter_used_beside_submodules() -> None:
    model = get_task("root_param").build_model()
    assert "position" in dict(model.named_parameters(recurse=False))
    assert len(list(model.children())) == 2


def test_lm_ties_embedding_and_head() -> None:
    model = get_task("lm").build_model()
    params = dict(model.named_parameters(remove_duplicate=False))
    assert params["head.weight"] is params["embed.weight"]
    state = model.state_dict()
    assert "head.weight" in state and "embed.weight" in state
    assert len(list(model.parameters())) == len(state) - 1  # one parameter, two state-dict keys


def test_classifier_has_frozen_params_buffers_groups_and_accumulation() -> None:
    task = get_task("classifier")
    model = task.build_model()
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen == ["embed.weight", "embed.bias"]
    assert "input_scale" in dict(model.named_buffers()) and "input_scale" in model.state_dict()
    optimizer = task.build_optimizer(model)
    groups = {(g["lr"], g["weight_decay"]) for g in optimizer.param_groups}
    assert len(optimizer.param_groups) == 3 and len(groups) == 3
    in_groups = {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert in_groups == {id(p) for p in model.parameters() if p.requires_grad}
    scheduler = task.build_scheduler(optimizer)
    first = [g["lr"] for g in optimizer.param_groups]
    optimizer.step()
    scheduler.step()
    assert [g["lr"] for g in optimizer.param_groups] != first
    assert task.gradient_accumulation_steps == 2
    # 8 micro-steps per epoch with accumulation 2: optimizer steps after micro-steps 1, 3, 5, 7.
    assert [s for s in range(task.micro_steps_per_epoch) if task.is_accumulation_boundary(s)] == [1, 3, 5, 7]
    assert task.steps == 8


def test_scalar_has_zero_dim_parameters() -> None:
    model = get_task("scalar").build_model()
    assert [p.dim() for p in model.parameters()] == [0, 0]


@pytest.mark.parametrize("name", BUILTIN)
def test_dict_batches_and_hf_like_outputs(name: str) -> None:
    task = get_task(name)
    batch = torch.utils.data.default_collate([task.train_dataset()[i] for i in range(4)])
    assert isinstance(batch, dict) and "labels" in batch
    output = task.build_model()(**batch)
    assert output.loss.dim() == 0 and torch.isfinite(output.loss)
    assert output.logits.shape[0] == 4


@pytest.mark.parametrize("name", BUILTIN)
def test_each_task_learns(name: str) -> None:
    # How long a task takes is a figure for benchmarks/task_cost.py, not a test: machines differ.
    task: Task = get_task(name)
    record = train_reference(task, "fp32")
    half = len(record.losses) // 2
    first, last = record.losses[:half], record.losses[half:]
    assert sum(last) / half < 0.9 * sum(first) / half, "the loss must fall visibly"

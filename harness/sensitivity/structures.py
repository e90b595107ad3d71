"""Catalog entries of the structures the core walks when it gathers or pads: a namedtuple, a
dataclass model output, and outputs of another length on each process padded before a gather.
The loop makes each call on every eval batch and the `gather` evidence checks what came back
(harness/rank/gather_check.py); the golden has no such calls, so these are caught on evidence.
"""

from __future__ import annotations

from harness.sensitivity.bug import Bug

STRUCTURE_BUGS: tuple[Bug, ...] = (
    Bug(
        name="gather_namedtuple_rebuilt_as_tuple",
        area="sharding",
        file="ops.py",
        search="        return type(data)(*(map_tensors(fn, v) for v in data))",
        replace="        return tuple(map_tensors(fn, v) for v in data)",
        select="regression-cpu1-single-fp32",
        affects="cpu",
        imitates="the walk that gathers a structure rebuilding a namedtuple as a plain tuple, its field "
                 "names lost, so the user's `pair.logits` breaks after a gather (huggingface/accelerate#65: "
                 "namedtuples in model inputs and outputs not honoured, fixed by huggingface/accelerate#67)",
    ),
    Bug(
        name="gather_dataclass_rebuilt_as_dict",
        area="sharding",
        file="ops.py",
        search="        return type(data)(**values)",
        replace="        return values",
        select="regression-cpu1-single-fp32",
        affects="cpu",
        imitates="a model output dataclass gathered back as a plain dict, so `output.logits` no longer "
                 "exists on it (pytorch/pytorch#41327: gather cannot rebuild dataclass outputs, and the "
                 "workaround discussed there and in huggingface/transformers#5941 turns them into dicts)",
    ),
    Bug(
        name="pad_across_processes_ignores_pad_index",
        area="sharding",
        file="ops.py",
        search="        out = tensor.new_full(shape, pad_index)",
        replace="        out = tensor.new_zeros(shape)",
        select="classifier-cpu2-ddp-fp32",
        # regression and scalar predict one column: every process keeps it all, nothing is padded
        affects="cpu2 and not (regression or scalar)",
        imitates="outputs padded across processes with zeros instead of the pad index asked for, so padded "
                 "positions read as class or token 0 and count in every metric where -100 would be "
                 "ignored (huggingface/transformers#6213 and meta-llama/llama-cookbook#73: padding "
                 "labelled 0 or -1 instead of the ignore index -100)",
    ),
)

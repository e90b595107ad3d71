"""Judging an fsdp cell's evidence (accelerate_core/evidence/fsdp.py): FSDP2 really sharded the model
over all the cell's processes, every parameter, and computed and reduced in the dtypes the
cell's precision means for FSDP2 (docs/fsdp.md: compute in the half dtype, reduce-scatter in
fp32, the root's outputs in fp32; BatchNorm units, when the model has any, in fp32). A cell
that asked for fsdp and ran DDP, ran unsharded, or sharded only part of the model fails here,
whatever its numbers (fp32 training is the same math on any backend, so numbers alone could
not tell).
"""

from __future__ import annotations

from typing import Any

from harness.judge.dtype_names import COMPUTE_DTYPES
from harness.plan.cell import Cell

# Every field an fsdp cell's evidence["fsdp"] must hold (missing evidence is a failure).
FSDP_FIELDS = ("units", "parameters", "sharded_parameters", "plain_parameters", "mesh_sizes",
               "full_elements", "local_elements", "trainable_elements", "wrapped_modules",
               "unsharded_parameters", "param_dtype", "reduce_dtype", "output_dtype")
# The dtype gradients are reduce-scattered in: the core asks for fp32 (precision/fsdp.py), and
# with no policy FSDP2 reduces in the parameters' own fp32.
REDUCE_DTYPE = "float32"
# BatchNorm units compute in fp32 under every precision: the core gives them an fp32 policy under
# a half one (their running statistics are fp32 buffers), and fp32 is fp32.
BATCHNORM_DTYPE = "float32"


def fsdp_mismatch(cell: Cell, evidence: dict[str, Any], asked: str) -> str | None:
    """One sentence saying how the FSDP2 run differs from what the fsdp cell asked for; None when
    it agrees (and for cells of other strategies)."""
    if not cell.is_fsdp:
        return None
    fsdp = evidence.get("fsdp")
    if not isinstance(fsdp, dict):
        return f"{asked}, the run had no FSDP2 units ({evidence.get('strategy_class')} ran)"
    for check in (_units, _sharded, _mesh, _elements, _dtypes):
        found = check(cell, fsdp, asked)
        if found is not None:
            return found
    return None


def missing_fields(evidence: dict[str, Any]) -> list[str]:
    fsdp = evidence.get("fsdp")
    if not isinstance(fsdp, dict):
        return []  # an absent block is judged by fsdp_mismatch: "the run had no FSDP2 units"
    if fsdp.get("units") == 0:
        # No unit, so no policy to read dtypes from: what ran (the strategy, no unit) is the
        # sentence to give, not the dtypes it could not have.
        return []
    return [f"fsdp.{key}" for key in FSDP_FIELDS if key not in fsdp]


def _units(_cell: Cell, fsdp: dict[str, Any], asked: str) -> str | None:
    if not fsdp.get("units"):
        return f"{asked}, fully_shard made no module of the model an FSDP unit"
    return None


def _sharded(_cell: Cell, fsdp: dict[str, Any], asked: str) -> str | None:
    total, sharded = fsdp.get("parameters"), fsdp.get("sharded_parameters")
    plain = list(fsdp.get("plain_parameters") or []) + list(fsdp.get("unsharded_parameters") or [])
    if not total or sharded != total or plain:
        names = ", ".join(sorted(set(plain))[:5]) or "none named"
        return (f"{asked}, only {sharded} of {total} parameters were sharded DTensors "
                f"(left whole: {names})")
    return None


def _mesh(cell: Cell, fsdp: dict[str, Any], asked: str) -> str | None:
    if fsdp.get("mesh_sizes") != [cell.processes]:
        return f"{asked}, the parameters were sharded over mesh size(s) {fsdp.get('mesh_sizes')}"
    return None


def _elements(cell: Cell, fsdp: dict[str, Any], asked: str) -> str | None:
    """A sharded rank holds about 1/N of the elements; only a model whose every parameter is one
    element (nothing to split) may keep them all on rank 0 (dim-0 chunks: rank 0 gets the one)."""
    full, local, count = (int(fsdp.get(k) or 0) for k in ("full_elements", "local_elements", "parameters"))
    if full > count and local >= full:
        return (f"{asked}, rank 0 held {local} of the model's {full} parameter elements: "
                "nothing was split across ranks")
    return None


def _dtypes(cell: Cell, fsdp: dict[str, Any], asked: str) -> str | None:
    wanted = COMPUTE_DTYPES[cell.precision]
    if fsdp.get("param_dtype") != wanted:
        return f"{asked}, FSDP2 computed with parameters in {fsdp.get('param_dtype')}"
    if "batchnorm_param_dtype" in fsdp and fsdp["batchnorm_param_dtype"] != BATCHNORM_DTYPE:
        return f"{asked}, FSDP2 computed BatchNorm units in {fsdp['batchnorm_param_dtype']}"
    if fsdp.get("reduce_dtype") != REDUCE_DTYPE:
        return f"{asked}, FSDP2 reduce-scattered gradients in {fsdp.get('reduce_dtype')}"
    # The root unit hands the user fp32 outputs under a half policy; without one, no cast at all.
    output = "float32" if cell.precision != "fp32" else "none"
    if fsdp.get("output_dtype") != output:
        return f"{asked}, FSDP2's root unit cast its outputs to {fsdp.get('output_dtype')}"
    return None

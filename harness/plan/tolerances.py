"""The comparison tolerances of matrix.toml's [tolerances.<precision>.<family>]: family "plain"
for single/ddp/fsdp, "zero" for the DeepSpeed stages, each entry with the measurement behind it.

An entry may hold sharper tolerances for one kind of quantity, as sub-tables
[tolerances.<precision>.<family>.<kind>] with kind "losses", "eval" (gathered eval outputs) or
"state_dict" (final weights), each with its own rtol, atol and measured reason: the per-step
losses of a half-precision run, for one, stay far closer to the golden than its eval logits, and
the entry's tolerance, sized for the logits, would let a loss bug through.

`[tolerances] weights_per_task` names a file of per-task tolerances for the final weights and the
eval outputs of half-precision cells of the plain family (harness.plan.weight_tolerances, written
by `python -m harness calibrate --write-weight-tolerances`); `for_cell` applies them to the cells
of the tasks they name. `[tolerances] semantics_per_task` names the file of the own-semantics
check's tolerances (harness.plan.semantics_tolerances): how far a half-precision CPU cell's final
weights may lie from the reference computed as its backend computes.

Parsed and validated once, with the rest of the matrix (harness.plan.matrix): a run judges every
cell with the tolerances of the matrix it was given, never with another file's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.errors import ToleranceError, explain
from harness.plan.cell import PRECISIONS, STRATEGIES
from harness.plan.semantics_tolerances import (
    SEMANTICS_PER_TASK,
    SemanticsKey,
    SemanticsTolerance,
    parse_semantics_tolerances,
)
from harness.plan.tolerance_entry import read_entry
from harness.plan.weight_tolerances import (
    TaskKey,
    WeightTolerance,
    parse_eval_tolerances,
    parse_weight_tolerances,
)

# fsdp is "plain" by measurement (benchmarks/fsdp_distance.py, docs/fsdp.md "FSDP in the matrix"):
# every fsdp cell that trains stays inside the plain tolerances, worst 4% in fp32, 49% in fp16
# (classifier weights), 58% in bf16 (regression losses, the losses sub-table). Its half-precision
# distances equal zero3's (it computes whole layers in the half dtype too), and the zero family
# would leave it 50%: the sharper family that holds was kept, never the wider one.
FAMILIES = {"single": "plain", "ddp": "plain", "zero1": "zero", "zero2": "zero", "zero3": "zero",
            "fsdp": "plain"}
# The kinds a comparison's quantity name starts with ("losses", "eval/logits", "state_dict/w").
QUANTITY_KINDS = ("losses", "eval", "state_dict")
# The [tolerances] key naming the per-task weight tolerances' file.
WEIGHTS_PER_TASK = "weights_per_task"


@dataclass(frozen=True)
class Tolerance:
    precision: str
    family: str
    rtol: float
    atol: float
    reason: str
    # Sharper tolerances for a kind of quantity (QUANTITY_KINDS); the others use this entry's.
    quantities: Mapping[str, Tolerance] = field(default_factory=dict, compare=False)

    def for_quantity(self, quantity: str) -> Tolerance:
        """The tolerance for a comparison named `quantity` (e.g. "eval/logits")."""
        return self.quantities.get(quantity.split("/", 1)[0], self)


LR_TOLERANCE = Tolerance(precision="any", family="any", rtol=1e-9, atol=0.0,
                         reason="learning rates are computed identically on every backend")
EXACT = Tolerance(precision="any", family="any", rtol=0.0, atol=0.0,
                  reason="set by a policy, not computed: any difference is a different policy")


@dataclass(frozen=True)
class ToleranceTable:
    source: Path
    entries: dict[tuple[str, str], Tolerance]
    # (family, precision, golden task) -> its final weights' tolerance there (WEIGHTS_PER_TASK)
    weights: dict[TaskKey, WeightTolerance] = field(default_factory=dict)
    # (family, precision, golden task) -> its eval outputs' tolerance there (the same file)
    eval_outputs: dict[TaskKey, WeightTolerance] = field(default_factory=dict)
    # (precision, golden task, semantics) -> the own-semantics check's tolerance (SEMANTICS_PER_TASK)
    semantics: dict[SemanticsKey, SemanticsTolerance] = field(default_factory=dict)

    def for_cell(self, precision: str, strategy: str, task: str | None = None) -> Tolerance:
        """The family's tolerance, with `task`'s own weight tolerance where it has one (`task`:
        the golden's task; None: the family's alone)."""
        return self.with_task(self.for_strategy(precision, strategy), task)

    def with_task(self, family_tolerance: Tolerance, task: str | None) -> Tolerance:
        """`family_tolerance` (an entry of this table) with `task`'s own weight and eval-output
        tolerances, where it has them in that family."""
        family = family_tolerance.family
        key = (family, family_tolerance.precision, task or "")
        found = (("state_dict", self.weights.get(key)), ("eval", self.eval_outputs.get(key)))
        own = {kind: Tolerance(entry.precision, f"{family}.{kind}.{task}", entry.rtol, entry.atol,
                               entry.reason)
               for kind, entry in found if entry is not None}
        if not own:
            return family_tolerance
        return replace(family_tolerance, quantities={**family_tolerance.quantities, **own})

    def for_strategy(self, precision: str, strategy: str) -> Tolerance:
        if strategy not in FAMILIES:
            raise ToleranceError(explain(f"strategy {strategy!r}", "it has no tolerance family",
                                         STRATEGIES, "use a strategy of the matrix"))
        family = FAMILIES[strategy]
        found = self.entries.get((precision, family))
        if found is None:
            raise ToleranceError(explain(
                f"[tolerances.{precision}.{family}] in {self.source}", "the section is missing",
                [f"{p}.{f}" for p, f in self.entries], "add it with rtol, atol and a reason"))
        return found


def parse_tolerances(source: Path, table: Any, weights_per_task: bool = True) -> ToleranceTable:
    """Every entry of [tolerances], validated (a malformed one is a ToleranceError naming it);
    the per-task weight tolerances' file too, unless `weights_per_task` is False."""
    if not isinstance(table, dict):
        raise ToleranceError(explain(f"[tolerances] in {source}", "it must be a table",
                                     "[tolerances.<precision>.<family>] sections", "fix the file"))
    entries: dict[tuple[str, str], Tolerance] = {}
    named = weights_per_task and WEIGHTS_PER_TASK in table
    weights = parse_weight_tolerances(source, table[WEIGHTS_PER_TASK]) if named else {}
    eval_outputs = parse_eval_tolerances(source, table[WEIGHTS_PER_TASK]) if named else {}
    semantics = (parse_semantics_tolerances(source, table[SEMANTICS_PER_TASK])
                 if weights_per_task and SEMANTICS_PER_TASK in table else {})
    for precision, families in table.items():
        if precision in (WEIGHTS_PER_TASK, SEMANTICS_PER_TASK):
            continue
        if precision not in PRECISIONS or not isinstance(families, dict):
            raise ToleranceError(explain(f"[tolerances.{precision}] in {source}", "not a precision table",
                                         PRECISIONS, "key tolerances by precision, then family"))
        for family, entry in families.items():
            where = f"[tolerances.{precision}.{family}] in {source}"
            if family not in set(FAMILIES.values()):
                raise ToleranceError(explain(where, "not a strategy family", sorted(set(FAMILIES.values())),
                                             "use plain (single/ddp/fsdp) or zero (zero1-3)"))
            rtol, atol, reason = read_entry(entry, where, [f"{precision}.{family}"], ToleranceError)
            quantities = _quantity_entries(entry, where, precision, family)
            entries[(precision, family)] = Tolerance(precision, family, rtol, atol, reason, quantities)
    return ToleranceTable(source, entries, weights, eval_outputs, semantics)


def _quantity_entries(entry: dict[str, Any], where: str, precision: str, family: str) -> dict[str, Tolerance]:
    extra = sorted(set(entry) - {"rtol", "atol", "reason"})
    unknown = [key for key in extra if key not in QUANTITY_KINDS]
    if unknown:
        raise ToleranceError(explain(
            f"{where}: key(s) {', '.join(map(repr, unknown))}", "not rtol/atol/reason nor a kind of quantity",
            ["rtol", "atol", "reason", *QUANTITY_KINDS], "remove the key, or name one of the quantity kinds"))
    quantities = {}
    for kind in extra:
        sub = f"[tolerances.{precision}.{family}.{kind}] in {where.split(' in ', 1)[-1]}"
        rtol, atol, reason = read_entry(entry[kind], sub, [f"{precision}.{family}.{kind}"], ToleranceError)
        quantities[kind] = Tolerance(precision, f"{family}.{kind}", rtol, atol, reason)
    return quantities

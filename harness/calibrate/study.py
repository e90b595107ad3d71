"""One calibration: the noise of every task x precision, the proposals, and the detection
thresholds under the tolerances in force and under each task's calibrated ones."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from harness.calibrate.calibrated import SAFETY_FACTOR, Proposal, family_proposals, task_tolerances
from harness.calibrate.noise import Need, measure
from harness.calibrate.thresholds import Threshold, detection_threshold
from harness.calibrate.variants import cell_semantics
from harness.golden.golden_store import load_golden
from harness.golden.reference import ReferenceInputs
from harness.plan.tolerances import ToleranceTable
from harness.tasks import get_task


@dataclass(frozen=True)
class Study:
    tasks: tuple[str, ...]
    precisions: tuple[str, ...]
    safety: float
    needs: list[Need]
    proposals: list[Proposal]
    in_force: list[Threshold]  # detection thresholds with matrix.toml's tolerances
    calibrated: list[Threshold]  # ... with each task's calibrated tolerances

    def to_json(self) -> dict[str, object]:
        return {"tasks": list(self.tasks), "precisions": list(self.precisions), "safety_factor": self.safety,
                "needs": [asdict(n) for n in self.needs],
                "proposals": [{**asdict(p), "need": asdict(p.need)} for p in self.proposals],
                "thresholds_in_force": [_threshold_json(t) for t in self.in_force],
                "thresholds_calibrated": [_threshold_json(t) for t in self.calibrated]}


def run_study(tasks: Sequence[str], precisions: Sequence[str], table: ToleranceTable,
              safety: float = SAFETY_FACTOR, thresholds: bool = True) -> Study:
    needs = measure(tasks, precisions, table)
    proposals = family_proposals(needs, table, safety)
    per_task = task_tolerances(needs, table, safety)
    in_force: list[Threshold] = []
    calibrated: list[Threshold] = []
    families = sorted({family for _, family in table.entries})
    for name in tasks if thresholds else ():
        task = get_task(name)
        inputs = ReferenceInputs.of(task)
        for precision in precisions:
            golden = load_golden(name, precision)
            for family in families:
                if (precision, family) not in table.entries:
                    continue
                in_force_tol = table.with_task(table.entries[(precision, family)], name)
                semantics = cell_semantics(family, precision, task.build_model())
                in_force.append(detection_threshold(task, precision, family, inputs, golden, in_force_tol,
                                                    semantics))
                calibrated.append(detection_threshold(task, precision, family, inputs, golden,
                                                      per_task[(name, precision, family)], semantics))
    return Study(tuple(tasks), tuple(precisions), safety, needs, proposals, in_force, calibrated)


def _threshold_json(threshold: Threshold) -> dict[str, object]:
    return {**asdict(threshold), "goal": threshold.goal, "meets_goal": threshold.meets_goal}

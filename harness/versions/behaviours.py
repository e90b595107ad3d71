"""The DeepSpeed behaviours the core reconciles, each with its DeepSpeed-alone reproduction.

A behaviour is judged per installed release by running its reproduction WITHOUT the core
(harness/rank/deepspeed_alone.py) and reading the outcome:
  present  the reproduction shows the behaviour (its signature error, or the side effect)
  fixed    the reproduction runs clean: the core's reconciliation is not needed there
  other    it fails another way (an older release failing earlier): neither proven
The rank also records whether the core's gate for that reconciliation is on (the patch applies
only where its gate finds the behaviour), so a gate that disagrees with the reproduction shows.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from harness.layout.report_dir import ReportDir

Verdict = Literal["present", "fixed", "other", "not run"]


@dataclass(frozen=True)
class Behaviour:
    key: str
    title: str
    task: str  # the harness task whose model reproduces it
    stages: tuple[int, ...]  # ZeRO stages it is reproduced under
    signature: str  # text of the error that IS the behaviour ("" for a side-effect probe)
    reconciliation: str  # where the core reconciles it


BEHAVIOURS = (
    Behaviour("zero_dim_broadcast", "deepspeed.initialize fails on a 0-dim parameter (start-up "
              "broadcast views it as bytes)", "scalar", (1, 2, 3), "self.dim() cannot be 0 to view",
              "accelerate_core/strategies/deepspeed/compat.py zero_dim_safe_initialize"),
    Behaviour("zero3_dataclass_output", "ZeRO-3's first backward fails for a root-owned parameter "
              "when forward returns a plain dataclass", "root_param", (3,),
              "The size of tensor a (0) must match",
              "accelerate_core/strategies/deepspeed/outputs.py expose_dataclass_outputs"),
    Behaviour("zero3_linear_left_swapped", "ZeRO-3 with memory_efficient_linear leaves "
              "torch.nn.functional.linear replaced after the engine is gone", "regression", (3,), "",
              "accelerate_core/strategies/deepspeed/compat.py restore_functional_linear"),
)
BY_KEY = {b.key: b for b in BEHAVIOURS}


@dataclass(frozen=True)
class Observation:
    """One reproduction's raw outcome on rank 0 (what harness/rank/deepspeed_alone.py writes)."""

    behaviour: str
    stage: int
    ok: bool  # the reproduction ran without an exception
    error: str = ""  # "Type: message" when it raised
    side_effect: bool = False  # for side-effect probes: the effect was seen
    gate_on: bool | None = None  # the core's gate for this reconciliation (None: no gate to ask)


@dataclass(frozen=True)
class BehaviourResult:
    behaviour: str
    verdict: Verdict
    evidence: str  # per stage, what was seen
    gate_on: bool | None  # the core's gate, as the rank found it
    gate_agrees: bool | None  # gate on exactly where present (None: no gate, or not decidable)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _stage_verdict(behaviour: Behaviour, seen: Observation) -> Verdict:
    if not behaviour.signature:
        return "present" if seen.side_effect else ("fixed" if seen.ok else "other")
    if seen.ok:
        return "fixed"
    return "present" if behaviour.signature in seen.error else "other"


def classify(behaviour: Behaviour, observations: list[Observation]) -> BehaviourResult:
    """Present when any stage shows it; fixed when every stage ran clean; else other."""
    mine = sorted((o for o in observations if o.behaviour == behaviour.key), key=lambda o: o.stage)
    if not mine:
        return BehaviourResult(behaviour.key, "not run", "no observation", None, None)
    verdicts = [_stage_verdict(behaviour, o) for o in mine]
    verdict: Verdict = ("present" if "present" in verdicts
                        else "fixed" if all(v == "fixed" for v in verdicts) else "other")
    evidence = "; ".join(
        f"zero{o.stage}: {v}" + (f" ({o.error[:160]})" if o.error and v != "present" else "")
        for o, v in zip(mine, verdicts, strict=True))
    gates = {o.gate_on for o in mine if o.gate_on is not None}
    gate_on = gates.pop() if len(gates) == 1 else None
    agrees = None if gate_on is None or verdict in ("other", "not run") else gate_on == (verdict == "present")
    return BehaviourResult(behaviour.key, verdict, evidence, gate_on, agrees)


def write_behaviours(report_dir: Path, versions: dict[str, str], results: list[BehaviourResult],
                     error: str = "") -> Path:
    from harness.atomic_files import write_text_atomic

    data = {"versions": versions, "error": error, "behaviours": [r.to_json() for r in results]}
    path = ReportDir(Path(report_dir)).behaviours
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")
    return path


def read_behaviours(report_dir: Path) -> dict[str, Any] | None:
    """The behaviours.json of a report dir, or None when the run probed none (or it is unreadable)."""
    path = ReportDir(Path(report_dir)).behaviours
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("behaviours"), list) else None

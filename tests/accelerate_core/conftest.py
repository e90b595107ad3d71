"""Fixtures of the core's tests: launches shared by the tests that read them.

A launch costs far more than the runs it hosts (torch, DeepSpeed and torch._dynamo are imported
in every rank, torchrun imports torch too), so runs of one shape share a launch:
- `shared_launch_out`: the module's part of the session's shared 2-rank launch
  (shared_launch.py: every module that declares a SHARED_LAUNCH part, one launch in all);
- `run_missions`: the user loop once per `Mission`, one after another in one launch of its own
  (scripts/scenarios.py), each with a fresh Accelerator freed afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.accelerate_core.shared_launch import Scenario, SharedLaunch, parts_of
from tests.distributed_helpers import DistributedRunError, run_distributed

SCRIPTS = Path(__file__).resolve().parent / "scripts"
MISSION = SCRIPTS / "mission_loop.py"
SCENARIOS = SCRIPTS / "scenarios.py"
MISSION_MODULE = "tests.accelerate_core.scripts.mission_loop"


@dataclass(frozen=True)
class Mission:
    """One run of the user loop (scripts/mission_loop.py flags; `--cpu --out DIR` are added).

    `env` is set for this run only, as a launch of its own would have had it. A run that stops at
    `--save-state-at` writes no record: give it `writes_record=False`.
    """

    name: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    writes_record: bool = True


def _is_launch_setting(name: str) -> bool:
    return name.startswith("ACCELERATE_CORE_") or name in ("RANK", "LOCAL_RANK", "WORLD_SIZE")


@contextlib.contextmanager
def launch_settings_cleared() -> Iterator[None]:
    """Without the calling shell's launcher variables (as `_no_launch_settings` below does for
    each test): a module-scoped launch starts before that per-test fixture runs."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if _is_launch_setting(n)]:
            patch.delenv(name)
        yield


def run_scenarios(out: Path, scenarios: Sequence[Mapping[str, Any]], nproc: int = 2,
                  timeout: float = 600.0) -> str:
    """Run scripts/scenarios.py's plan `scenarios` in one launch of `nproc` CPU ranks; returns
    the launch's output (the tail of which a failure raises with, naming the failed scenario)."""
    out.mkdir(parents=True, exist_ok=True)
    plan = out / "scenarios.json"
    plan.write_text(json.dumps(list(scenarios), indent=1), encoding="utf-8")
    with launch_settings_cleared():
        try:
            return run_distributed(SCENARIOS, nproc, ["--plan", str(plan)], timeout=timeout).stdout
        except DistributedRunError as exc:
            # The tail may have lost the line saying which scenario was running: put it first.
            raise DistributedRunError(f"{where_it_stopped(exc.output)}\n{exc}", output=exc.output) from None


def where_it_stopped(output: str) -> str:
    """Each rank's last scenario line (starts / FAILED) from scripts/scenarios.py's output."""
    last: dict[str, str] = {}
    for line in output.splitlines():
        if line.startswith("[scenarios rank "):
            last[line.split("]", 1)[0]] = line
    return "\n".join(last.values()) or "no scenario had started"


def run_missions(out: Path, missions: Sequence[Mission], nproc: int = 2,
                 timeout: float = 600.0) -> dict[str, dict[str, Any]]:
    """Run every mission in ONE launch of its own, in the order given; return rank 0's record of
    each (with `model_path`) by name, for those that write one."""
    plan = [mission_scenario(out, m).to_plan("mission", timeout) for m in missions]
    run_scenarios(out, plan, nproc=nproc, timeout=timeout)
    return mission_records(out, missions)


def mission_scenario(out: Path, mission: Mission) -> Scenario:
    """`mission` as a scenario of the shared launch, writing under out/<name>."""
    (out / mission.name).mkdir(parents=True, exist_ok=True)
    return Scenario(mission.name, MISSION_MODULE, ("--cpu", "--out", str(out / mission.name), *mission.args),
                    mission.env)


def mission_records(out: Path, missions: Sequence[Mission]) -> dict[str, dict[str, Any]]:
    """Rank 0's record of each mission under `out` that writes one (with `model_path`), by name."""
    records: dict[str, dict[str, Any]] = {}
    for mission in (m for m in missions if m.writes_record):
        path = out / mission.name / "record.pt"
        if not path.exists():  # the launch succeeded, so the script skipped its write: say so
            raise AssertionError(f"mission {mission.name!r} wrote no {path}, though its launch succeeded")
        record: dict[str, Any] = torch.load(path, weights_only=False)
        record["model_path"] = out / mission.name / "model.pt"
        records[mission.name] = record
    return records


def run_mission(out: Path, *args: str, nproc: int = 2) -> dict[str, Any]:
    """Run the user loop alone in a launch of `nproc` CPU ranks; return rank 0's record (with
    `model_path`)."""
    out.mkdir(parents=True, exist_ok=True)
    run_distributed(MISSION, nproc, ["--cpu", "--out", str(out), *args], timeout=240)
    record: dict[str, Any] = torch.load(out / "record.pt", weights_only=False)
    record["model_path"] = out / "model.pt"
    return record


@pytest.fixture(autouse=True)
def _no_launch_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process tests must not pick up a launcher's variables from the calling shell."""
    for name in [n for n in os.environ if _is_launch_setting(n)]:
        monkeypatch.delenv(name)


def _shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of this session, shared by its xdist workers (each has basetemp/popen-gwN)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared_launch"


def _launch(directory: Path, plan: list[dict[str, Any]], timeout: float) -> None:
    run_scenarios(directory, plan, timeout=timeout)


@pytest.fixture(scope="session")
def shared_launch(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> SharedLaunch:
    """The session's shared launch, of the parts of the modules with a selected test."""
    return SharedLaunch(parts_of(request.session.items), _shared_root(tmp_path_factory), launch=_launch)


@pytest.fixture(scope="module")
def shared_launch_out(shared_launch: SharedLaunch, request: pytest.FixtureRequest) -> Path:
    """This module's part of the shared launch: its output directory, once the launch ran (it
    runs here if no test of the session needed it before). Raises if the launch failed."""
    with launch_settings_cleared():
        return shared_launch.output_of(request.module)

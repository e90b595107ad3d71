"""One 2-rank launch for the whole test session, shared by the modules that ask for a part of it.

Why: a launch costs far more than the runs it hosts. torchrun imports torch, and every rank
imports torch, accelerate_core, torch._dynamo (at the first optimizer) and DeepSpeed: about 25
CPU-seconds before the first step, where one more configuration in a running launch costs one or
two. So the modules whose runs have the same shape (2 CPU ranks, the environment this session
has) declare them as a `LaunchPart`, and one launch of scripts/scenarios.py runs all of them one
after another in the same process group, each with a fresh Accelerator freed afterwards (as the
harness reuses a launch for its cells). Each module then asserts on its part's records.

- Which parts: those of the modules with a selected test that runs here (-k, -m and file
  arguments apply; a test marked skipif(True) or skip does not count), so a module run alone
  launches only its own part. Parts that need deepspeed are left out where it is not installed
  (their modules skip). A part may leave out what no such test reads: it is given the fixtures
  those tests use.
- In a fixed order: by `LaunchPart.order`, then module name. Parts that were alone in a fresh
  process before and depend on it come first (the exit-hook check must register before the group
  exists; the DDP-only runs go before any DeepSpeed one).
- Once per session, also under pytest-xdist: the first worker to need the launch runs it under a
  file lock in the directory the workers share; the others wait for it and read its status.
- Honest outcomes: a failed launch (or a failed `before` step of a part) fails every test of
  every part it concerns, with the launch's output tail, headed by the scenario each rank was
  running. Each scenario has its part's time limit: one that hangs ends its rank with every
  thread's traceback (scripts/scenarios.py).

A module declares, at module level:

    SHARED_LAUNCH = LaunchPart(scenarios=lambda out, fixtures: [Scenario(...), ...], needs_deepspeed=True)

and its tests take the `shared_launch_out` fixture (conftest.py): the part's output directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from accelerate_core.imports import is_deepspeed_available

STATUS = "status.json"
START_UP = 180.0  # seconds for torchrun and the ranks to start, on a loaded machine


@dataclass(frozen=True)
class Scenario:
    """`module.main(argv)` in the shared launch, with `env` set for it alone (scripts/scenarios.py)."""

    name: str
    module: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)

    def to_plan(self, part: str, timeout: float) -> dict[str, Any]:
        return {"name": f"{part}: {self.name}", "module": self.module, "argv": list(self.argv),
                "env": dict(self.env), "timeout": timeout}


@dataclass(frozen=True)
class LaunchPart:
    """A module's runs in the shared launch.

    scenarios: given the part's own output directory and the fixtures its module's selected
        tests use, what to run there.
    needs_deepspeed: left out where deepspeed is not installed (the module's tests skip there).
    timeout: the time limit of each of its scenarios (its own launch's limit before); the
        launch's limit is their sum, plus START_UP.
    before: run in a test process before the launch, given the same directory (a 1-process run
        whose checkpoint the launch reads, say); what tests need from it must be written there.
    order: parts run by (order, module name); a part whose last check leaves a timed-out
        collective behind it comes late.
    """

    scenarios: Callable[[Path, frozenset[str]], Sequence[Scenario]]
    needs_deepspeed: bool = False
    timeout: float = 300.0
    before: Callable[[Path], None] | None = None
    order: int = 0


class SharedLaunchError(RuntimeError):
    """The shared launch, or this part's `before` step, failed: the tests of the part cannot pass."""


@dataclass(frozen=True)
class Selected:
    """A part to launch, with the fixtures its module's selected tests use."""

    part: LaunchPart
    fixtures: frozenset[str]


def part_name(module: ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[-1]


def will_run(item: Any) -> bool:
    """False for a pytest item marked skip, or skipif with a condition that is True (a string
    condition, evaluated by pytest only later, counts as running)."""
    if item.get_closest_marker("skip") is not None:
        return False
    for mark in item.iter_markers("skipif"):
        condition = mark.args[0] if mark.args else mark.kwargs.get("condition")
        if condition is True:
            return False
    return True


def parts_of(items: Iterable[Any]) -> dict[str, Selected]:
    """The parts to launch for these pytest items (each module once), in launch order."""
    parts: dict[str, LaunchPart] = {}
    fixtures: dict[str, set[str]] = {}
    for item in items:
        module = getattr(item, "module", None)
        part = getattr(module, "SHARED_LAUNCH", None)
        if module is None or not isinstance(part, LaunchPart) or not will_run(item):
            continue
        if part.needs_deepspeed and not is_deepspeed_available():
            continue
        name = part_name(module)
        parts[name] = part
        fixtures.setdefault(name, set()).update(getattr(item, "fixturenames", ()))
    order = sorted(parts, key=lambda name: (parts[name].order, name))
    return {name: Selected(parts[name], frozenset(fixtures[name])) for name in order}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock held across processes (xdist workers); the OS drops it if one dies."""
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass
class SharedLaunch:
    """The session's shared launch: `parts` in `root`/<key>/<part>, run on first use."""

    parts: dict[str, Selected]
    root: Path
    launch: Callable[[Path, list[dict[str, Any]], float], None]
    _status: dict[str, str | None] | None = None

    @property
    def directory(self) -> Path:
        # The same parts give the same directory in every worker of the session.
        what = [(name, sorted(selected.fixtures)) for name, selected in self.parts.items()]
        key = hashlib.sha1(json.dumps(what).encode()).hexdigest()[:12]
        return self.root / f"launch-{key}"

    def output_of(self, module: ModuleType) -> Path:
        """The part's output directory once the launch has run; raises if it failed for this part."""
        name = part_name(module)
        if name not in self.parts:
            raise SharedLaunchError(f"{module.__name__} has no SHARED_LAUNCH part in this session's launch")
        failure = self.status()[name]
        if failure is not None:
            raise SharedLaunchError(f"the shared launch failed for {name}:\n{failure}")
        return self.directory / name

    def status(self) -> dict[str, str | None]:
        """Each part's failure (None: it ran), launching first if no process of the session has."""
        if self._status is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            with _locked(self.directory.with_suffix(".lock")):
                status_file = self.directory / STATUS
                if not status_file.exists():  # no worker launched it yet (or one died doing so)
                    status_file.write_text(json.dumps(self._run()), encoding="utf-8")
                self._status = json.loads(status_file.read_text(encoding="utf-8"))
        return self._status

    def _run(self) -> dict[str, str | None]:
        status: dict[str, str | None] = dict.fromkeys(self.parts)
        plan: list[dict[str, Any]] = []
        for name, selected in self.parts.items():
            part, out = selected.part, self.directory / name
            out.mkdir(parents=True, exist_ok=True)
            if part.before is not None:
                try:
                    part.before(out)
                except Exception:  # this part cannot run; the others still can
                    status[name] = f"its step before the launch failed:\n{traceback.format_exc()}"
                    continue
            plan += [scenario.to_plan(name, part.timeout)
                     for scenario in part.scenarios(out, selected.fixtures)]
        launched = [name for name, failure in status.items() if failure is None]
        if plan:
            try:
                self.launch(self.directory, plan, START_UP + sum(entry["timeout"] for entry in plan))
            except Exception as exc:  # every part in it fails with the launch's output
                message = f"{type(exc).__name__}: {exc}"
                status.update(dict.fromkeys(launched, message))
        return status

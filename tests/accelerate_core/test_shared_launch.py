"""The session's shared launch (shared_launch.py), with the launch itself replaced by a recorder:
which parts it runs and in what order, that it runs once for all workers, and that a failure
reaches every test of every part it concerns (never a pass, never a silent skip)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.accelerate_core import shared_launch
from tests.accelerate_core.shared_launch import (
    START_UP,
    LaunchPart,
    Scenario,
    Selected,
    SharedLaunch,
    SharedLaunchError,
    parts_of,
)


def module(name: str, part: LaunchPart | None) -> ModuleType:
    made = ModuleType(f"tests.accelerate_core.{name}")
    if part is not None:
        made.SHARED_LAUNCH = part  # type: ignore[attr-defined]
    return made


def part(name: str, **kwargs: Any) -> LaunchPart:
    """A part running one scenario NAME, with the fixtures it was given in its arguments."""
    return LaunchPart(scenarios=lambda out, fixtures: [Scenario(name, "some.script", ("--out", str(out),
                                                                                      *sorted(fixtures)))],
                      **kwargs)


class Item:
    """Just what parts_of reads from a pytest item: its module, fixtures and skip marks."""

    def __init__(self, module: ModuleType, fixtures: tuple[str, ...] = (),
                 skipif: str | bool | None = None) -> None:
        self.module, self.fixturenames = module, list(fixtures)
        self.marks = [] if skipif is None else [pytest.mark.skipif(skipif, reason="r").mark]

    def get_closest_marker(self, name: str) -> Any:
        return None

    def iter_markers(self, name: str) -> list[Any]:
        return [m for m in self.marks if m.name == name]


def selected(**parts: LaunchPart) -> dict[str, Selected]:
    return {name: Selected(value, frozenset()) for name, value in parts.items()}


class Recorder:
    """Stands in for the launch: records each call's plan and time limit; can fail like one."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[tuple[list[dict[str, Any]], float]] = []
        self.error = error

    def __call__(self, directory: Path, plan: list[dict[str, Any]], timeout: float) -> None:
        self.calls.append((plan, timeout))
        if self.error is not None:
            raise self.error


def test_parts_of_the_selected_tests_in_launch_order(monkeypatch: pytest.MonkeyPatch) -> None:
    late, ddp, ds = part("late", order=1), part("ddp", order=-1), part("ds", needs_deepspeed=True)
    z, b, a = module("test_z", late), module("test_b", ds), module("test_a", ddp)
    items = [Item(z, ("x",)), Item(module("test_plain", None)), Item(b), Item(a, ("y",)), Item(b, ("w",)),
             Item(a, ("never",), skipif=True),  # skipped here: what it reads is not asked for
             Item(z, ("maybe",), skipif="sys.platform == 'win32'")]  # pytest decides later: counted
    monkeypatch.setattr(shared_launch, "is_deepspeed_available", lambda: True)
    parts = parts_of(items)
    assert list(parts) == ["test_a", "test_b", "test_z"]
    assert {name: set(p.fixtures) for name, p in parts.items()} == {
        "test_a": {"y"}, "test_b": {"w"}, "test_z": {"x", "maybe"}}
    # Without deepspeed its parts are left out: their modules skip, and the rest still runs.
    monkeypatch.setattr(shared_launch, "is_deepspeed_available", lambda: False)
    assert list(parts_of(items)) == ["test_a", "test_z"]
    # A module whose selected tests all skip here has no part.
    assert list(parts_of([Item(a, skipif=True)])) == []


def test_one_launch_for_every_part_and_every_worker(tmp_path: Path) -> None:
    parts = {"test_a": Selected(part("a", timeout=10), frozenset()),
             "test_b": Selected(part("b", timeout=20), frozenset({"reads_b"}))}
    recorder = Recorder()
    worker0 = SharedLaunch(parts, tmp_path, launch=recorder)
    worker1 = SharedLaunch(dict(parts), tmp_path, launch=recorder)  # another process, same parts
    out_a = worker0.output_of(module("test_a", None))
    out_b = worker1.output_of(module("test_b", None))
    assert len(recorder.calls) == 1  # the second worker read the first one's status
    plan, timeout = recorder.calls[0]
    assert [entry["name"] for entry in plan] == ["test_a: a", "test_b: b"]
    # Each part writes to its own directory, and is told which fixtures its tests read.
    assert plan[0]["argv"] == ["--out", str(out_a)] and plan[1]["argv"] == ["--out", str(out_b), "reads_b"]
    assert [entry["timeout"] for entry in plan] == [10, 20]  # each scenario's own limit
    assert timeout == START_UP + 30
    assert out_a.parent == out_b.parent and out_a.is_dir()


def test_a_failed_launch_fails_every_part_with_its_output(tmp_path: Path) -> None:
    parts = selected(test_a=part("a"), test_b=part("b"))
    launch = SharedLaunch(parts, tmp_path, launch=Recorder(RuntimeError("rank 1 exited; output tail: XYZ")))
    for name in parts:
        with pytest.raises(SharedLaunchError, match=f"failed for {name}:\nRuntimeError: rank 1 exited; "
                                                    "output tail: XYZ"):
            launch.output_of(module(name, None))
    # Another worker reads the same failure rather than passing or launching again.
    again = Recorder()
    with pytest.raises(SharedLaunchError, match="XYZ"):
        SharedLaunch(parts, tmp_path, launch=again).output_of(module("test_a", None))
    assert again.calls == []


def test_a_failed_step_before_the_launch_fails_only_its_part(tmp_path: Path) -> None:
    def broken(out: Path) -> None:
        raise ValueError("the 1-process run diverged")

    parts = selected(test_a=part("a", before=broken), test_b=part("b"))
    recorder = Recorder()
    launch = SharedLaunch(parts, tmp_path, launch=recorder)
    with pytest.raises(SharedLaunchError) as failed:
        launch.output_of(module("test_a", None))
    message = str(failed.value)
    assert "before the launch failed" in message and "the 1-process run diverged" in message
    assert launch.output_of(module("test_b", None)).is_dir()
    assert [entry["name"] for entry in recorder.calls[0][0]] == ["test_b: b"]


def test_a_module_without_a_part_is_told_so(tmp_path: Path) -> None:
    launch = SharedLaunch(selected(test_a=part("a")), tmp_path, launch=Recorder())
    with pytest.raises(SharedLaunchError, match="no SHARED_LAUNCH part"):
        launch.output_of(module("test_other", None))

"""The run's floor (harness.run.floor): core-seconds of start-up and cell work over the cores, or
the longest launch when one launch alone is longer."""

from __future__ import annotations

import pytest

from harness.run.floor import run_floor


def test_a_two_process_launch_costs_two_cores_of_its_work() -> None:
    launches = [{"launch": "cpu1-001", "processes": 1, "startup_s": 2.0, "cells_work_s": 4.0},
                {"launch": "cpu2-001", "processes": 2, "startup_s": 3.0, "cells_work_s": 9.0}]
    floor = run_floor(launches, cores=2)
    assert floor is not None
    # (2 + 4) x 1 + (3 + 9) x 2 = 30 core-seconds over 2 cores = 15 s, above the longest launch (12 s)
    assert floor.core_seconds == pytest.approx(30.0)
    assert floor.seconds == pytest.approx(15.0)
    assert floor.longest_launch_s == pytest.approx(12.0)
    assert floor.ratio(22.5) == pytest.approx(1.5)
    assert "set by the cores" in floor.line(22.5)


def test_one_long_launch_sets_the_floor_when_the_cores_are_spare() -> None:
    launches = [{"processes": 1, "startup_s": 1.0, "cells_work_s": 1.0},
                {"processes": 1, "startup_s": 2.0, "cells_work_s": 20.0}]
    floor = run_floor(launches, cores=8)
    assert floor is not None
    assert floor.seconds == pytest.approx(22.0)
    assert "set by the longest launch" in floor.line(30.0)


def test_reports_from_before_the_launches_recorded_their_work_have_no_floor() -> None:
    assert run_floor([{"launch": "deepspeed-ops", "cached": True, "startup_s": 0.0}], cores=2) is None


def test_entries_without_work_do_not_count() -> None:
    launches = [{"launch": "deepspeed-ops", "cached": True, "startup_s": 0.0},
                {"processes": 2, "startup_s": 1.0, "cells_work_s": 3.0}]
    floor = run_floor(launches, cores=2)
    assert floor is not None and floor.launches == 1 and floor.seconds == pytest.approx(4.0)


def test_the_profile_report_ends_with_the_floor_when_the_launches_recorded_their_work() -> None:
    from harness.run.profile import profile_report

    profile = {"wall_s": 9.0, "launches": 1, "cells": 2, "seconds": {"cell training": 5.0}}
    launches = [{"processes": 2, "startup_s": 1.0, "cells_work_s": 5.0}]
    lines = profile_report(profile, launches, cores=2)
    assert lines[-1].startswith("floor: 6.0 s") and "1.50x the floor" in lines[-1]
    assert not profile_report(profile, [], cores=2)[-1].startswith("floor")
    assert profile_report(None, launches, cores=2) == ["no profile: no launch ran"]

"""Where the test suite's time goes: per nox test session, its wall time, the sum of its tests'
times, and the slowest tests and files, read from the junit.xml files `nox -s tests` writes
(reports/junit-tests-<env>.xml). CI prints this after the suite (.ci/run); the target (the whole
`.ci/run` under 12 minutes on a 2-core machine) is checked by reading it, not by a timed test.

    python benchmarks/suite_time.py [--reports DIR] [--slowest N] [--phases FILE]

`--phases FILE` adds the wall time of each phase of a CI run (lines "phase seconds", as .ci/run
writes them). `--write-costs tests/file_costs.json` stores each test file's seconds (its most
expensive session), which tests/conftest.py reads to hand the costliest files out first.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TestTime:
    session: str
    test: str  # file::name
    seconds: float


@dataclass(frozen=True)
class SessionTime:
    name: str
    wall_s: float  # as pytest reported it (the xdist run's wall time)
    tests: list[TestTime]
    counts: dict[str, int]


def read_session(path: Path) -> SessionTime:
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    name = path.stem.removeprefix("junit-tests-")
    tests: list[TestTime] = []
    counts: Counter[str] = Counter()
    for case in root.iter("testcase"):
        module = (case.get("classname") or "").replace(".", "/")
        tests.append(TestTime(name, f"{module}.py::{case.get('name')}", float(case.get("time") or 0.0)))
        outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        counts[outcome] += 1
    wall = sum(float(suite.get("time") or 0.0) for suite in suites)
    return SessionTime(name, wall, tests, dict(counts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=Path, default=Path("reports"))
    parser.add_argument("--slowest", type=int, default=20)
    parser.add_argument("--phases", type=Path, default=None)
    parser.add_argument("--write-costs", type=Path, default=None, metavar="JSON")
    arguments = parser.parse_args()
    if arguments.phases is not None and arguments.phases.is_file():
        print("== CI phases (wall seconds)")
        total = 0.0
        for line in arguments.phases.read_text().splitlines():
            phase, _, seconds = line.rpartition(" ")
            total += float(seconds)
            print(f"{float(seconds):8.0f}  {phase}")
        print(f"{total:8.0f}  total ({total / 60:.1f} min)")
    sessions = [read_session(path) for path in sorted(arguments.reports.glob("junit-tests-*.xml"))]
    if not sessions:
        print(f"no {arguments.reports}/junit-tests-*.xml: run `nox -s tests` first")
        return 1
    print("== test sessions: pytest wall seconds, test-seconds (summed over the xdist workers), outcomes")
    for session in sessions:
        summed = sum(t.seconds for t in session.tests)
        print(f"{session.wall_s:8.0f}  {summed:8.0f}  tests({session.name}): {session.counts}")
    everything = [t for s in sessions for t in s.tests]
    print(f"== the {arguments.slowest} slowest tests")
    for test in sorted(everything, key=lambda t: -t.seconds)[: arguments.slowest]:
        print(f"{test.seconds:8.1f}  [{test.session}] {test.test}")
    per_file: Counter[tuple[str, str]] = Counter()
    for test in everything:
        per_file[(test.session, test.test.split("::")[0])] += test.seconds
    print(f"== the {arguments.slowest} most expensive test files")
    for (session, path), seconds in per_file.most_common(arguments.slowest):
        print(f"{seconds:8.1f}  [{session}] {path}")
    if arguments.write_costs is not None:
        costs: dict[str, float] = {}
        for (_session, path), seconds in per_file.items():
            costs[path] = round(max(costs.get(path, 0.0), seconds), 1)
        ordered = dict(sorted(costs.items(), key=lambda item: -item[1]))
        arguments.write_costs.write_text(json.dumps(ordered, indent=1) + "\n", encoding="utf-8")
        print(f"file costs of {len(ordered)} files written to {arguments.write_costs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

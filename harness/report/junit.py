"""junit.xml: one testcase per cell, read by CI systems (GitHub test reporters, GitLab, Jenkins).

Mapping follows pytest's own junit output, so tools treat it the same way:
failed/xpassed -> <failure>, error/timeout/crashed -> <error>, skipped/xfailed -> <skipped>.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from harness.judge.outcome import CellResult, Status
from harness.report.merged_report import MergedReport
from harness.report.near_miss import count_text, near_misses, rule_text
from harness.report.text import failure_text

_FAILURE = (Status.FAILED, Status.XPASSED)
_ERROR = (Status.ERROR, Status.TIMEOUT, Status.CRASHED)
_SKIPPED = (Status.SKIPPED, Status.XFAILED)


def _clean(text: str) -> str:
    # XML 1.0 forbids most control characters; rank output tails can contain them.
    return "".join(ch for ch in text if ch in "\t\n\r" or ord(ch) >= 0x20)


def _suite(suites: ET.Element, results: Sequence[CellResult], environment: dict[str, Any]) -> None:
    env_name = str(environment.get("name", "matrix"))
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"matrix[{env_name}]",
        tests=str(len(results)),
        failures=str(sum(Status(r.status) in _FAILURE for r in results)),
        errors=str(sum(Status(r.status) in _ERROR for r in results)),
        skipped=str(sum(Status(r.status) in _SKIPPED for r in results)),
        time=f"{sum(r.duration_s for r in results):.3f}",
    )
    props = ET.SubElement(suite, "properties")
    for key in ("name", "python", "torch", "deepspeed", "platform"):
        if key in environment:
            ET.SubElement(props, "property", name=key, value=_clean(str(environment[key])))
    # The suite's summary: passed cells at 80% or more of a tolerance, one property each.
    misses = near_misses(results)
    ET.SubElement(props, "property", name="near_misses", value=f"{count_text(misses)} ({rule_text()})")
    for miss in misses:
        ET.SubElement(props, "property", name="near_miss", value=_clean(f"{miss.id}: {miss.text}"))
    for result in results:
        status = Status(result.status)
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"matrix.{env_name}.{result.task}",
            name=result.id,
            time=f"{result.duration_s:.3f}",
        )
        message = _clean(f"{status.value}: {result.reason}")
        if status in _FAILURE:
            ET.SubElement(case, "failure", message=message, type=status.value).text = _clean(
                failure_text(result)
            )
        elif status in _ERROR:
            ET.SubElement(case, "error", message=message, type=status.value).text = _clean(
                failure_text(result)
            )
        elif status in _SKIPPED:
            kind = "pytest.xfail" if status is Status.XFAILED else "pytest.skip"
            ET.SubElement(case, "skipped", message=message, type=kind)


def _text(suites: ET.Element) -> str:
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def render_junit(results: Sequence[CellResult], environment: dict[str, Any]) -> str:
    suites = ET.Element("testsuites")
    _suite(suites, results, environment)
    return _text(suites)


def render_merged_junit(merged: MergedReport) -> str:
    """One testsuite per environment (as its own junit.xml has it), then `cross_environment`:
    one testcase per compared record, a <failure> where it differs."""
    suites = ET.Element("testsuites")
    for report in merged.inputs:
        _suite(suites, report.results, {**report.environment, "name": report.name})
    cross = ET.SubElement(
        suites,
        "testsuite",
        name="cross_environment",
        tests=str(len(merged.cross)),
        failures=str(len(merged.differing)),
        errors="0",
        skipped="0",
        time="0.000",
    )
    for check in merged.cross:
        case = ET.SubElement(
            cross,
            "testcase",
            classname=f"cross_environment.{check.baseline}.{check.other}",
            name=check.cell_id,
            time="0.000",
        )
        if not check.identical:
            ET.SubElement(case, "failure", message=_clean(f"differs: {check.note}"), type="differs").text = (
                _clean(check.note)
            )
    return _text(suites)

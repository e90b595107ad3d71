"""The entries of matrix.toml, each parsed and checked on its own: shapes, match patterns,
expected outcomes, environments. Every mistake is a MatrixError naming the file, the entry, the
value given, why it is wrong, the valid values and the fix."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import implementations
from harness.errors import MatrixError, explain
from harness.plan.cell import DEVICES, TASK_NAME, Cell, Device, StrategyName
from harness.versions.release_condition import EXAMPLE, ReleaseCondition, parse_condition

MATCH_KEYS = ("task", "device", "processes", "strategy", "precision", "implementation")
# How a declared failure fails (`status` of an [[expected]] entry); a cell that fails another
# way is an unexpected failure. "failed": it ran to the end and was judged wrong (numbers,
# evidence, randomness); "exception": training raised; "crashed" / "timeout": as reported.
EXPECTED_STATUSES = ("failed", "exception", "crashed", "timeout")
_RELEASE = re.compile(r"\d+\.\d+\.\d+")  # an environment's pinned torch / deepspeed release


@dataclass(frozen=True)
class Match:
    """A pattern over cell axes: each key absent matches anything, else a list of allowed values."""

    values: dict[str, tuple[Any, ...]]

    def matches(self, cell: Cell) -> bool:
        return all(getattr(cell, key) in allowed for key, allowed in self.values.items())


@dataclass(frozen=True)
class Expected:
    match: Match
    status: str  # one of EXPECTED_STATUSES: how the cell is expected to fail
    reason: str
    environments: tuple[str, ...] = ()  # empty: every environment
    # A regular expression that must be found (re.search) in the cell's diagnosis (its reason;
    # for an exception, also its traceback); None: any diagnosis of that status.
    diagnosis: re.Pattern[str] | None = None
    index: int = 0  # its place among the matrix's [[expected]] entries (1 = the first; 0 = not from a file)
    # The Accelerate releases it holds for (harness.versions.release_condition); None: every release.
    accelerate_versions: ReleaseCondition | None = None


@dataclass(frozen=True)
class Environment:
    name: str
    description: str
    deepspeed: bool  # is deepspeed installed in this environment
    device: str  # "cpu" | "cuda": which cells this environment's CI job runs
    extras: tuple[str, ...] = ()
    runs_on: tuple[str, ...] = ("ubuntu-latest",)  # CI runner labels
    markexpr: str = ""  # the -m selection its CI job runs ("" = all cells of its device)
    # The dependency-version sweep (`nox -s versions`, the scheduled CI job); docs/versions.md.
    torch_version: str = ""  # pinned torch release ("" = the project's default pin)
    deepspeed_version: str = ""  # pinned deepspeed release ("" = the project's declared range)
    accelerate_version: str = ""  # pinned accelerate release (implementation "accelerate" only)
    sweep: bool = False  # only in the version sweep, not in `nox -s matrix` / push CI
    compare_with: str = ""  # the environment whose records this one's numbers are compared with
    # CI runs it as this many jobs, each `--shard K/N`, and merges them (docs/shards.md).
    shards: int = 1
    # Whose cells its CI job runs (the implementation axis; docs/implementations.md).
    implementation: str = "core"


def bad(
    file: Path, where: str, given: object, why: str, valid: Iterable[object] | str, fix: str
) -> MatrixError:
    valid_text = valid if isinstance(valid, str) else ", ".join(repr(v) for v in valid)
    return MatrixError(explain(f"{file.name} {where} = {given!r}", why, valid_text, fix))


def check_value(file: Path, where: str, axis: str, value: object, valid_axes: dict[str, Any]) -> None:
    valid = valid_axes[axis]
    if axis == "task":
        if not isinstance(value, str) or not TASK_NAME.match(value):
            raise bad(
                file,
                where,
                value,
                "a task name uses lowercase letters, digits and '_' only",
                "names like 'regression' or 'tiny_lm'",
                "rename the task",
            )
        if valid is not None and value not in valid and not value.startswith("canary"):
            raise bad(
                file,
                where,
                value,
                "no task of that name is registered",
                valid,
                "add the task under harness/tasks/ or fix the name",
            )
        return
    if value not in valid:
        raise bad(file, where, value, f"it is not a valid {axis}", valid, f"use one of the {axis} values")


def parse_shapes(
    file: Path, entries: list[Any], valid_axes: dict[str, Any]
) -> list[tuple[Device, int, list[StrategyName]]]:
    """(device, processes, strategies) of each [[shapes]] entry, every value checked."""
    out: list[tuple[Device, int, list[StrategyName]]] = []
    for i, entry in enumerate(entries):
        where = f"[[shapes]] #{i + 1}"
        only_keys(file, where, entry, ("device", "processes", "strategies"))
        check_value(file, where + ".device", "device", entry.get("device"), valid_axes)
        processes = entry.get("processes")
        if not isinstance(processes, int) or isinstance(processes, bool) or not 1 <= processes <= 64:
            raise bad(
                file,
                where + ".processes",
                processes,
                "it must be a whole number of processes",
                "1..64",
                "write e.g. processes = 2",
            )
        for strategy in entry.get("strategies", []):
            check_value(file, where + ".strategies", "strategy", strategy, valid_axes)
        out.append((entry["device"], processes, list(entry.get("strategies", []))))
    return out


def only_keys(file: Path, where: str, entry: object, allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    if not isinstance(entry, dict):
        raise bad(file, where, entry, "it must be a table", "a TOML table", "write key = value pairs")
    for key in entry:
        if key not in allowed:
            raise bad(file, where, key, "it is not a known key", allowed, "rename or remove it")


def parse_match(
    file: Path, where: str, entry: dict[str, Any], valid_axes: dict[str, Any], extra: tuple[str, ...]
) -> Match:
    only_keys(file, where, entry, MATCH_KEYS + extra)
    values: dict[str, tuple[Any, ...]] = {}
    for key in MATCH_KEYS:
        if key not in entry:
            continue
        given = entry[key] if isinstance(entry[key], list) else [entry[key]]
        for value in given:
            if key != "processes":
                check_value(file, f"{where}.{key}", key, value, valid_axes)
        values[key] = tuple(given)
    return Match(values)


def parse_reason(file: Path, where: str, entry: dict[str, Any]) -> str:
    reason = entry.get("reason", "")
    if not isinstance(reason, str) or len(reason.strip()) < 10:
        raise bad(
            file,
            where + ".reason",
            reason,
            "every exclusion and expected outcome needs a reason",
            "a sentence of at least 10 characters",
            "say why, e.g. the upstream issue",
        )
    return reason.strip()


def parse_expected(file: Path, i: int, entry: dict[str, Any], valid_axes: dict[str, Any]) -> Expected:
    where = f"[[expected]] #{i + 1}"
    match = parse_match(file, where, entry, valid_axes,
                        extra=("status", "match", "reason", "environments", "accelerate_versions"))
    releases = _parse_releases(file, where, entry, match)
    status = entry.get("status", "failed")
    if status == "xfailed":
        raise bad(
            file, where + ".status", status,
            "`status` now says HOW the cell is expected to fail (a cell failing another way is an "
            "unexpected failure); 'xfailed' is what the report calls a match, not a kind of failure",
            EXPECTED_STATUSES, "write status = 'failed' (judged wrong) or 'exception', and add "
            "match = '<regex on the diagnosis>' to pin the failure down",
        )
    if status not in EXPECTED_STATUSES:
        raise bad(file, where + ".status", status, "not a kind of failure", EXPECTED_STATUSES,
                  "use one of these (default 'failed')")
    diagnosis = None
    if "match" in entry:
        pattern = entry["match"]
        try:
            if not isinstance(pattern, str) or not pattern.strip():
                raise re.error("an empty pattern matches every diagnosis")
            diagnosis = re.compile(pattern)
        except re.error as exc:
            raise bad(file, where + ".match", pattern, f"not a usable regular expression ({exc})",
                      "a Python regex found in the diagnosis, e.g. 'per-rank batch statistics'",
                      "fix the pattern (or drop `match` to accept any diagnosis)") from None
    return Expected(match, status, parse_reason(file, where, entry), tuple(entry.get("environments", [])),
                    diagnosis, index=i + 1, accelerate_versions=releases)


def _parse_releases(file: Path, where: str, entry: dict[str, Any], match: Match) -> ReleaseCondition | None:
    """`accelerate_versions`: only on an entry of the accelerate implementation's cells alone."""
    if "accelerate_versions" not in entry:
        return None
    given = entry["accelerate_versions"]
    if match.values.get("implementation") != ("accelerate",):
        raise bad(file, where + ".accelerate_versions", given,
                  "a release condition on accelerate needs an entry of Accelerate's cells alone "
                  f"(this one selects implementation {list(match.values.get('implementation', ['any']))})",
                  "implementation = 'accelerate' beside it", 'add implementation = "accelerate", or drop '
                  "accelerate_versions")
    try:
        return parse_condition(given)
    except ValueError as exc:
        raise bad(file, where + ".accelerate_versions", given, f"not a release condition ({exc})",
                  f"comparisons joined by commas, e.g. {EXAMPLE}",
                  'write e.g. accelerate_versions = "<1.2" (the releases this outcome holds for)') from None


def parse_environment(file: Path, name: str, body: dict[str, Any]) -> Environment:
    where = f"[environments.{name}]"
    only_keys(file, where, body, ("description", "deepspeed", "device", "extras", "runs_on", "markexpr",
                                  "torch_version", "deepspeed_version", "sweep", "compare_with", "shards",
                                  "implementation", "accelerate_version"))
    implementation = body.get("implementation", "core")
    if implementation not in implementations.names():
        raise bad(file, where + ".implementation", implementation, "not an implementation of the axis",
                  implementations.names(), "use one of these")
    shards = _parse_shards(file, where, body)
    for key in ("torch_version", "deepspeed_version", "accelerate_version"):
        pin = body.get(key, "")
        if not isinstance(pin, str) or (pin and not _RELEASE.fullmatch(pin)):
            raise bad(file, f"{where}.{key}", pin, "it must be one exact release to pin",
                      "a release number such as '2.13.0' or '0.19.8'", f'write {key} = "X.Y.Z"')
    if body.get("accelerate_version") and implementation != "accelerate":
        raise bad(file, where + ".accelerate_version", body["accelerate_version"],
                  f"it pins accelerate in an environment whose implementation is {implementation!r}, "
                  "whose cells never import accelerate",
                  "implementation = 'accelerate' with a pin, or no pin",
                  'write implementation = "accelerate", or drop the pin')
    if body.get("deepspeed_version") and body.get("deepspeed") is not True:
        raise bad(file, where + ".deepspeed_version", body["deepspeed_version"],
                  "it pins deepspeed in an environment that says deepspeed is absent",
                  "deepspeed = true with a pin, or no pin", "write deepspeed = true, or drop the pin")
    if not isinstance(body.get("deepspeed"), bool):
        raise bad(
            file,
            where + ".deepspeed",
            body.get("deepspeed"),
            "it must say whether deepspeed is installed",
            (True, False),
            "write deepspeed = true or false",
        )
    device = body.get("device", "cpu")
    if device not in DEVICES:
        raise bad(file, where + ".device", device, "not a device", DEVICES, "use one of the devices")
    return Environment(
        name=name,
        description=str(body.get("description", "")),
        deepspeed=body["deepspeed"],
        device=device,
        extras=tuple(body.get("extras", [])),
        runs_on=tuple(body.get("runs_on", ["ubuntu-latest"])),
        markexpr=str(body.get("markexpr", "")),
        torch_version=body.get("torch_version", ""),
        deepspeed_version=body.get("deepspeed_version", ""),
        accelerate_version=body.get("accelerate_version", ""),
        sweep=bool(body.get("sweep", False)),
        compare_with=str(body.get("compare_with", "")),
        shards=shards,
        implementation=implementation,
    )


MAX_CI_SHARDS = 64  # jobs of one environment; GitHub allows 256 jobs per workflow run


def _parse_shards(file: Path, where: str, body: dict[str, Any]) -> int:
    shards = body.get("shards", 1)
    if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= MAX_CI_SHARDS:
        raise bad(file, where + ".shards", shards, "it must be a whole number of CI jobs",
                  f"1..{MAX_CI_SHARDS} (1: the environment runs whole, in one job)", "write e.g. shards = 3")
    if shards > 1 and body.get("sweep"):
        raise bad(file, where + ".shards", shards, "a version-sweep environment runs whole, in its own "
                  "`nox -s versions(NAME)` job", "shards = 1 (or no shards) with sweep = true",
                  "drop shards, or sweep")
    return shards

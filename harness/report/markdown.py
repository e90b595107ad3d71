"""report.md: a short report fit for a GitHub step summary ($GITHUB_STEP_SUMMARY) or a PR comment.

The headline and the near misses first, then problems (what a reader came for), then the grid
of tasks x configurations (markdown_grid.py: folded, narrow), then every cell folded away in
<details> so the summary stays short on a green run. Each section leads with its counts. A step
summary holds 1 MiB (GitHub drops a larger one whole): the diagnoses stop at MAX_DIAGNOSES, and
tests/harness/report/test_report_size.py measures a full-matrix report against that and a width.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.judge.outcome import CellResult, Status
from harness.layout.report_dir import ReportDir
from harness.report.markdown_grid import grid_markdown
from harness.report.merged_report import MergedReport
from harness.report.near_miss import count_text, near_misses, rule_text
from harness.report.record_changes import record_changes_markdown
from harness.report.summary import SYMBOL, by_severity, headline, margin_text, ok, unexpected
from harness.report.text import DETAIL_TAIL_CHARS, failure_text

# The worst 30 diagnoses (at most ~2.5 KB each) keep a failing run's summary near 100 KB; the
# table above them lists every unexpected result, report.html every diagnosis.
MAX_DIAGNOSES = 30


def _cell(text: object) -> str:
    """Make text safe inside a markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def _label(result: CellResult) -> str:
    status = Status(result.status)
    return f"{SYMBOL[status]} {status.value}"


def _environment_row(env: dict[str, Any]) -> str:
    devices = f"{env.get('cpu_count', '?')} CPU cores, {env.get('cuda_device_count', 0)} CUDA devices"
    names = env.get("cuda_devices") or []
    if names:
        devices += f" ({', '.join(map(str, names))})"
    return (
        "| "
        + " | ".join(
            _cell(v)
            for v in (
                env.get("name", "?"),
                env.get("python", "?"),
                env.get("torch", "?"),
                env.get("deepspeed", "?"),
                devices,
                env.get("platform", "?"),
            )
        )
        + " |"
    )


def _environment_table(*envs: dict[str, Any]) -> list[str]:
    return [
        "| environment | python | torch | deepspeed | devices | platform |",
        "|---|---|---|---|---|---|",
        *(_environment_row(env) for env in envs),
    ]


def _where(result: CellResult, show_env: bool) -> str:
    return f" | `{result.environment}`" if show_env else ""


def _near_misses(results: Sequence[CellResult], show_env: bool) -> list[str]:
    """Under the headline: passed cells at 80% or more of a tolerance, closest first."""
    misses = near_misses(results)
    if not misses:
        return [f"No near miss: no cell {rule_text()}.", ""]
    lines = [f"**⚠️ {count_text(misses)}**, {rule_text()} (the next flake, or the next bug a looser "
             "tolerance would hide):", ""]
    for miss in misses:
        where = f" in `{miss.result.environment}`" if show_env else ""
        lines.append(f"- `{miss.id}`{where}: {miss.text}")
    return [*lines, ""]


def _problems(problems: Sequence[CellResult], show_env: bool) -> list[str]:
    """The unexpected results: a table, then the worst MAX_DIAGNOSES diagnoses folded."""
    env_head, env_rule = (" | environment", "|---") if show_env else ("", "")
    lines = [f"### Unexpected results: {len(problems)}", "", f"| cell{env_head} | status | reason |",
             f"|---{env_rule}|---|---|"]
    lines += [f"| `{r.id}`{_where(r, show_env)} | {_label(r)} | {_cell(r.reason)} |" for r in problems]
    lines.append("")
    for r in problems[:MAX_DIAGNOSES]:
        text = failure_text(r, tail_chars=DETAIL_TAIL_CHARS // 2).replace("```", "'''")
        where = f" in <code>{r.environment}</code>" if show_env else ""
        lines += [f"<details><summary><code>{r.id}</code>{where} diagnosis</summary>", "", "```", text, "```",
                  "", "</details>", ""]
    if len(problems) > MAX_DIAGNOSES:
        lines += [f"{len(problems) - MAX_DIAGNOSES} more diagnoses are in {ReportDir.REPORT_HTML} and "
                  f"{ReportDir.JUNIT_XML} (this "
                  f"summary keeps the worst {MAX_DIAGNOSES}: a step summary holds 1 MiB).", ""]
    return lines


def _all_cells(results: Sequence[CellResult], show_env: bool) -> list[str]:
    """Every cell folded in <details>, worst first; skipped cells one row per reason (and
    environment), a passed cell's margin where a reason would be."""
    env_head, env_rule = (" | environment", "|---") if show_env else ("", "")
    skipped: dict[tuple[str, str], list[CellResult]] = {}
    for r in results:
        if Status(r.status) is Status.SKIPPED:
            skipped.setdefault((r.reason, r.environment if show_env else ""), []).append(r)
    lines = [f"<details><summary>All cells ({len(results)})</summary>", "",
             f"| cell{env_head} | status | duration (s) | reason, or a passed cell's margin |",
             f"|---{env_rule}|---|---|---|"]
    for r in by_severity(results):
        label = _label(r) + (" (emulated)" if r.emulated else "")
        note = margin_text(r) if Status(r.status) is Status.PASSED else r.reason
        cell, duration = f"`{r.id}`", r.duration_s
        if Status(r.status) is Status.SKIPPED:
            group = skipped[(r.reason, r.environment if show_env else "")]
            if r is not group[0]:
                continue  # the group's first cell stands for it
            if len(group) > 1:
                cell = f"{len(group)} cells: `{group[0].id}` … `{group[-1].id}`"
                duration = sum(g.duration_s for g in group)
        lines.append(f"| {cell}{_where(r, show_env)} | {label} | {duration:.1f} | {_cell(note)} |")
    return [*lines, "", "</details>", ""]


def _cells(
    results: Sequence[CellResult], show_env: bool = False, after_problems: Sequence[str] = ()
) -> list[str]:
    """Unexpected results with their diagnoses, [after_problems], the grid, every cell folded."""
    problems = unexpected(results)
    lines = _problems(problems, show_env) if problems else []
    lines += after_problems
    if results:
        lines += [*grid_markdown(results, by_environment=show_env), *_all_cells(results, show_env)]
    return lines


def _verdict(results: Sequence[CellResult], verdict: str) -> str:
    """The summary line: the counts, the verdict, the near misses' count."""
    misses = near_misses(results)
    near = f" · ⚠️ {count_text(misses)}" if misses else ""
    return f"**{headline(results)}** — {verdict}{near}"


def render_markdown(results: Sequence[CellResult], environment: dict[str, Any]) -> str:
    env_name = environment.get("name", "?")
    verdict = (
        "✅ no cell failed unexpectedly"
        if ok(results)
        else (f"❌ {len(unexpected(results))} cell(s) failed unexpectedly")
    )
    lines = [f"## Matrix report: `{env_name}`", "", _verdict(results, verdict), ""]
    lines += _near_misses(results, show_env=False)
    lines += [*_environment_table(environment), ""]
    startup = environment.get("startup")
    if isinstance(startup, dict) and startup.get("launches"):
        ops = startup.get("deepspeed_ops_s")
        built = f", DeepSpeed's CPU op build/load {float(ops):.1f} s of it" if ops is not None else ""
        lines += [f"Start-up: {startup['launches']} launch(es), {float(startup['total_s']):.1f} s before "
                  f"their first cells{built} (in no cell's duration).", ""]
    lines += record_changes_markdown(results)  # --compare-records: how the numbers moved
    lines += _cells(results)
    return "\n".join(lines)


def _cross(merged: MergedReport) -> list[str]:
    identical = sum(c.identical for c in merged.cross)
    lines = [
        "### Cross-environment comparison",
        "",
        f"{identical} bit-identical, {len(merged.cross) - identical} differ: a non-DeepSpeed cell's "
        "record must be the same bit for bit in every environment.",
        "",
    ]
    if not merged.cross:
        return [*lines[:2], "No non-DeepSpeed cell has records in two environments to compare.", ""]
    lines += ["| cell | environments | verdict | what |", "|---|---|---|---|"]
    for check in sorted(merged.cross, key=lambda c: c.identical):
        mark = "✅" if check.identical else "❌"
        lines.append(
            f"| `{check.cell_id}` | `{check.baseline}` vs `{check.other}` | {mark} {check.verdict} "
            f"| {_cell(check.note)} |"
        )
    return [*lines, ""]


def _versions(merged: MergedReport) -> list[str]:
    """The version sweep's tables (docs/versions.md), when the inputs are sweep environments."""
    if not merged.versions:
        return []
    from harness.versions.table import behaviours_markdown, versions_markdown

    return ["### Versions", "", *versions_markdown(merged.versions), "",
            "### DeepSpeed behaviours by version (reproduced with DeepSpeed alone)", "",
            *behaviours_markdown(merged.behaviours), ""]


def render_merged_markdown(merged: MergedReport) -> str:
    results = merged.results
    mark = "✅" if merged.ok else "❌"
    names = " + ".join(f"`{n}`" for n in merged.names)
    lines = [f"## Matrix report: {names}", "", _verdict(results, f"{mark} {merged.verdict}"), ""]
    lines += _near_misses(results, show_env=True)
    lines += [*_environment_table(*(r.environment for r in merged.inputs)), ""]
    lines += _cells(results, show_env=True, after_problems=_cross(merged) + _versions(merged))
    return "\n".join(lines)

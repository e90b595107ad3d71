"""report.md: a short report fit for a GitHub step summary ($GITHUB_STEP_SUMMARY) or a PR comment.

Problems first (what a reader came for), then the grid of tasks x configurations, then every
cell folded away in <details> so the summary stays short on a green run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.report.grid import Grid
from harness.report.merged import MergedReport
from harness.report.record_changes import record_changes_markdown
from harness.report.summary import SYMBOL, by_severity, headline, ok, unexpected
from harness.report.text import DETAIL_TAIL_CHARS, failure_text
from harness.truth.outcome import CellResult, Status


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


def _grid(results: Sequence[CellResult], by_environment: bool = False) -> list[str]:
    grid = Grid.of(results, by_environment=by_environment)
    headers = " | ".join(grid.row_headers)
    lines = [f"| {headers} | " + " | ".join(f"`{c}`" for c in grid.columns) + " |"]
    lines.append("|---" * (len(grid.columns) + len(grid.row_headers)) + "|")
    for key in grid.rows:
        row = [SYMBOL[Status(r.status)] if r else "" for r in grid.row(key)]
        lines.append(f"| {' | '.join(key)} | " + " | ".join(row) + " |")
    return lines


def _where(result: CellResult, show_env: bool) -> str:
    return f" | `{result.environment}`" if show_env else ""


def _cells(
    results: Sequence[CellResult], show_env: bool = False, after_problems: Sequence[str] = ()
) -> list[str]:
    """Unexpected results with their diagnoses, [after_problems], the grid, every cell folded."""
    env_head, env_rule = (" | environment", "|---") if show_env else ("", "")
    lines: list[str] = []
    problems = unexpected(results)
    if problems:
        lines += [
            "### Unexpected results",
            "",
            f"| cell{env_head} | status | reason |",
            f"|---{env_rule}|---|---|",
        ]
        lines += [f"| `{r.id}`{_where(r, show_env)} | {_label(r)} | {_cell(r.reason)} |" for r in problems]
        lines.append("")
        for r in problems:
            text = failure_text(r, tail_chars=DETAIL_TAIL_CHARS // 2).replace("```", "'''")
            where = f" in <code>{r.environment}</code>" if show_env else ""
            lines += [
                f"<details><summary><code>{r.id}</code>{where} diagnosis</summary>",
                "",
                "```",
                text,
                "```",
                "",
                "</details>",
                "",
            ]
    lines += after_problems
    if results:
        legend = ", ".join(f"{SYMBOL[s]} {s.value}" for s in Status)
        lines += ["### Grid", "", f"Legend: {legend}", "", *_grid(results, by_environment=show_env), ""]
        lines += [
            "<details><summary>All cells</summary>",
            "",
            f"| cell{env_head} | status | duration (s) | reason |",
            f"|---{env_rule}|---|---|---|",
        ]
        for r in by_severity(results):
            label = _label(r) + (" (emulated)" if r.emulated else "")
            lines.append(
                f"| `{r.id}`{_where(r, show_env)} | {label} | {r.duration_s:.1f} | {_cell(r.reason)} |"
            )
        lines += ["", "</details>", ""]
    return lines


def render_markdown(results: Sequence[CellResult], environment: dict[str, Any]) -> str:
    env_name = environment.get("name", "?")
    verdict = (
        "✅ no cell failed unexpectedly"
        if ok(results)
        else (f"❌ {len(unexpected(results))} cell(s) failed unexpectedly")
    )
    lines = [f"## Matrix report: `{env_name}`", "", f"**{headline(results)}** — {verdict}", ""]
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
    lines = [f"## Matrix report: {names}", "", f"**{headline(results)}** — {mark} {merged.verdict}", ""]
    lines += [*_environment_table(*(r.environment for r in merged.inputs)), ""]
    lines += _cells(results, show_env=True, after_problems=_cross(merged) + _versions(merged))
    return "\n".join(lines)

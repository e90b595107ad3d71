"""report.md: a short report fit for a GitHub step summary ($GITHUB_STEP_SUMMARY) or a PR comment.

Problems first (what a reader came for), then the grid of tasks x configurations, then every
cell folded away in <details> so the summary stays short on a green run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.report.grid import Grid
from harness.report.summary import SYMBOL, by_severity, headline, ok, unexpected
from harness.report.text import DETAIL_TAIL_CHARS, failure_text
from harness.truth.outcome import CellResult, Status


def _cell(text: object) -> str:
    """Make text safe inside a markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def _label(result: CellResult) -> str:
    status = Status(result.status)
    return f"{SYMBOL[status]} {status.value}"


def _environment_table(env: dict[str, Any]) -> list[str]:
    devices = f"{env.get('cpu_count', '?')} CPU cores, {env.get('cuda_device_count', 0)} CUDA devices"
    names = env.get("cuda_devices") or []
    if names:
        devices += f" ({', '.join(map(str, names))})"
    return [
        "| environment | python | torch | deepspeed | devices | platform |",
        "|---|---|---|---|---|---|",
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
        + " |",
    ]


def _grid(results: Sequence[CellResult]) -> list[str]:
    grid = Grid.of(results)
    lines = ["| task | " + " | ".join(f"`{c}`" for c in grid.columns) + " |"]
    lines.append("|---" * (len(grid.columns) + 1) + "|")
    for task in grid.tasks:
        row = [SYMBOL[Status(r.status)] if r else "" for r in grid.row(task)]
        lines.append(f"| {task} | " + " | ".join(row) + " |")
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
    problems = unexpected(results)
    if problems:
        lines += ["### Unexpected results", "", "| cell | status | reason |", "|---|---|---|"]
        lines += [f"| `{r.id}` | {_label(r)} | {_cell(r.reason)} |" for r in problems]
        lines.append("")
        for r in problems:
            text = failure_text(r, tail_chars=DETAIL_TAIL_CHARS // 2).replace("```", "'''")
            lines += [
                f"<details><summary><code>{r.id}</code> diagnosis</summary>",
                "",
                "```",
                text,
                "```",
                "",
                "</details>",
                "",
            ]
    if results:
        legend = ", ".join(f"{SYMBOL[s]} {s.value}" for s in Status)
        lines += ["### Grid", "", f"Legend: {legend}", "", *_grid(results), ""]
        lines += [
            "<details><summary>All cells</summary>",
            "",
            "| cell | status | duration (s) | reason |",
            "|---|---|---|---|",
        ]
        for r in by_severity(results):
            label = _label(r) + (" (emulated)" if r.emulated else "")
            lines.append(f"| `{r.id}` | {label} | {r.duration_s:.1f} | {_cell(r.reason)} |")
        lines += ["", "</details>", ""]
    return "\n".join(lines)

"""`--shard K/N` and `--shard-costs FILE` of `python -m harness run` and `list` (docs/shards.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness.errors import UsageError, explain
from harness.layout.report_dir import ReportDir
from harness.plan.cell import Cell
from harness.plan.matrix import Matrix
from harness.shard.spec import parse_shard


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shard", type=parse_shard, default=None, metavar="K/N",
                        help="only the K-th of N disjoint parts of the selection, balanced by cost "
                        "(docs/shards.md); `report merge` joins the N report dirs")
    parser.add_argument("--shard-costs", type=Path, default=None, metavar="REPORT_JSON",
                        help="balance --shard by the cell durations of an earlier run's "
                        f"{ReportDir.REPORT_JSON} "
                        "(the same file on every shard; default: the built-in table)")


def take_shard(
    args: argparse.Namespace, matrix: Matrix, cells: list[Cell]
) -> tuple[list[Cell], dict[str, Any] | None]:
    """This shard's cells (in selection order) and report.json's "shard" entry; without --shard,
    every cell and None."""
    if args.shard is None:
        if args.shard_costs is not None:
            raise UsageError(explain(
                f"--shard-costs {str(args.shard_costs)!r}", "it balances shards, and no --shard was given",
                "--shard-costs together with --shard K/N", "add --shard K/N, or drop --shard-costs"))
        return cells, None
    from harness.shard.costs import load_costs
    from harness.shard.identity import shard_block
    from harness.shard.split import plan_shards

    costs = load_costs(args.shard_costs)
    plan = plan_shards(cells, args.shard.count, costs)
    block = shard_block(args.shard, plan, cells, matrix, costs, args.keyword, args.markexpr)
    return [cells[i] for i in block["positions"]], block


def shard_line(block: dict[str, Any]) -> str:
    return (f"shard {block['index']}/{block['count']}: {len(block['cells'])} of {block['selected']} selected "
            f"cell(s), about {block['estimated_s']:.0f} s planned (cells and launch start-ups)")


def check_resumed_shard(resume_dir: Path, block: dict[str, Any] | None) -> None:
    """--resume / --last-failed of a shard's report dir: only as the same shard (another one's
    cells would be mixed into it, and the merge would find them twice)."""
    try:
        environment = json.loads(ReportDir(resume_dir).report_json.read_text(encoding="utf-8"))["environment"]
        earlier = environment.get("shard")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return  # an unreadable report is refused where the resume reads it, with its own message
    was = f"{earlier['index']}/{earlier['count']}" if isinstance(earlier, dict) else None
    now = f"{block['index']}/{block['count']}" if block else None
    if was == now:
        return
    raise UsageError(explain(
        f"--shard {now or '(none)'} resuming {str(resume_dir)!r}",
        f"that report dir holds {'shard ' + was if was else 'an unsharded run'}",
        "resume a shard's report dir with its own --shard K/N (and the same selection)",
        f"pass {'--shard ' + was if was else 'no --shard'}, or another report dir"))

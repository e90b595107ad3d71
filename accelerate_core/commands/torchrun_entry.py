"""`python -m torch.distributed.run`, but exiting with the failing rank's own exit code.

torchrun exits 1 whatever a rank returned; `accelerate-core launch` promises the script's exit
code. This module runs torchrun's own argument parser and `run()` unchanged and only translates
how it ends: a ChildFailedError becomes the first failed rank's exit code (128 + N for a rank
killed by signal N), a signal received by torchrun becomes 128 + that signal.

`--failure-summary FILE` (first, before torchrun's own arguments; the launcher passes it) writes
torchrun's failure summary to FILE as JSON instead of printing it, in full and as one short line,
so that the launcher can put it above the error a rank raised rather than below it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SUMMARY_OPTION = "--failure-summary"


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = list(sys.argv[1:] if argv is None else argv)
    summary_file: Path | None = None
    if args[:1] == [SUMMARY_OPTION] and len(args) > 1:
        summary_file, args = Path(args[1]), args[2:]
    try:
        run(parse_args(args))
    except ChildFailedError as failed:
        # torchrun's own summary (which rank, exit code, error file): on stderr as usual, or to
        # the launcher, which prints it after the ranks' output.
        if summary_file is None:
            print(failed.format_msg(), file=sys.stderr)
        else:
            summary_file.write_text(json.dumps({"full": failed.format_msg(), "short": short_summary(failed)}),
                                    encoding="utf-8")
        _, first = failed.get_first_failure()
        code = first.exitcode
        return 128 - code if code < 0 else (code or 1)
    except SignalException as stopped:
        print(f"accelerate-core launch: stopped every rank on {stopped.sigval.name}", file=sys.stderr)
        return 128 + int(stopped.sigval)
    return 0


def short_summary(failed: Any) -> str:
    """One line: which ranks ended how, the first failure marked (e.g. `rank 0 exited with 1
    (the first failure); rank 1 was stopped by SIGTERM`)."""
    first_rank, _ = failed.get_first_failure()
    groups: dict[str, list[int]] = {}
    ordered = sorted(failed.failures.items(), key=lambda item: (item[0] != first_rank, item[0]))
    for rank, failure in ordered:
        how = (f"was stopped by {failure.signal_name()}" if failure.exitcode < 0
               else f"exited with {failure.exitcode}")
        groups.setdefault(how + (" (the first failure)" if rank == first_rank else ""), []).append(rank)
    parts = []
    for how, ranks in groups.items():
        names = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)
        parts.append(f"{names} {how}")
    return f"torchrun: {'; '.join(parts)}"


if __name__ == "__main__":
    sys.exit(main())

"""`python -m torch.distributed.run`, but exiting with the failing rank's own exit code.

torchrun exits 1 whatever a rank returned; `accelerate-core launch` promises the script's exit
code. This module runs torchrun's own argument parser and `run()` unchanged and only translates
how it ends: a ChildFailedError becomes the first failed rank's exit code (128 + N for a rank
killed by signal N), a signal received by torchrun becomes 128 + that signal.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    try:
        run(parse_args(sys.argv[1:] if argv is None else argv))
    except ChildFailedError as failed:
        # torchrun's own summary (which rank, exit code, error file) goes to stderr as usual.
        print(failed.format_msg(), file=sys.stderr)
        _, first = failed.get_first_failure()
        code = first.exitcode
        return 128 - code if code < 0 else (code or 1)
    except SignalException as stopped:
        print(f"accelerate-core launch: stopped every rank on {stopped.sigval.name}", file=sys.stderr)
        return 128 + int(stopped.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())

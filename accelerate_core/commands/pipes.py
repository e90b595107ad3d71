"""Commands that print behave in a pipe: `accelerate-core env | head -3` or
`python -m harness list | grep -m1 zero3` end quietly when the reader stops reading.

Python raises BrokenPipeError on the next write after the reader went away, and again when it
flushes stdout at exit; so stdout is pointed at /dev/null and the command ends with the status a
process killed by SIGPIPE has (141, what `yes | head` gives), with no traceback.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

EXIT_BROKEN_PIPE = 128 + int(signal.SIGPIPE)


def quiet_when_the_reader_leaves(command: Callable[[], int]) -> int:
    try:
        status = command()
        sys.stdout.flush()  # a broken pipe shows here for output still buffered
        return status
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE

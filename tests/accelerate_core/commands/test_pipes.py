"""A command whose reader goes away (`| head`) ends quietly, with SIGPIPE's status."""

from __future__ import annotations

import subprocess
import sys

from accelerate_core.commands.pipes import EXIT_BROKEN_PIPE
from tests.distributed_helpers import REPO_ROOT

LOUD = (
    "import sys\n"
    "from accelerate_core.commands.pipes import quiet_when_the_reader_leaves\n"
    "def command():\n"
    "    for i in range(200_000):\n"
    "        print('line', i)\n"
    "    return 0\n"
    "sys.exit(quiet_when_the_reader_leaves(command))\n"
)


def test_a_printing_command_ends_quietly_when_the_reader_leaves() -> None:
    command = f"set -o pipefail; {sys.executable} -c \"$0\" | head -1"
    done = subprocess.run(["bash", "-c", command, LOUD], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.stdout == "line 0\n"
    assert done.stderr == "" and done.returncode == EXIT_BROKEN_PIPE == 141


def test_without_it_python_prints_a_traceback() -> None:
    # What the helper is for: the same loop bare ends with BrokenPipeError on stderr.
    bare = LOUD.replace("sys.exit(quiet_when_the_reader_leaves(command))", "sys.exit(command())")
    done = subprocess.run(["bash", "-c", f"{sys.executable} -c \"$0\" | head -1", bare],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert "BrokenPipeError" in done.stderr

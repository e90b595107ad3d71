"""The user loop as a user script: `Accelerator()` with no arguments, so every setting comes
from `accelerate-core launch` (through the environment). Rank 0 writes what the run produced,
and what the Accelerator resolved, to the file named by argv[1]."""

from __future__ import annotations

import sys

from mission_loop import run

from accelerate_core import Accelerator

run(Accelerator(), sys.argv[1])

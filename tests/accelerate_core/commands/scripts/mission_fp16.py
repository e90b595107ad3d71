"""The user loop as the user loop's user writes it: `Accelerator(fp16=True)`. Under a config that
leaves mixed precision unset it runs in fp16; under one that set another precision it must stop
with a ConflictingSettingsError. Rank 0 writes its results to the file named by argv[1]."""

from __future__ import annotations

import sys

from mission_loop import run

from accelerate_core import Accelerator

run(Accelerator(fp16=True), sys.argv[1])

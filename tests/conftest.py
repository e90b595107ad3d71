"""Settings every test process shares, applied before any test module imports torch's kernels.

One intra-op thread per process, as the harness's own launches (harness/run/launch.py) and the
golden generation run. torch's default, a thread per core, oversubscribes the machine as soon as
pytest-xdist's workers and the ranks they launch run side by side: on 2 cores the spinning
OpenMP threads of one process steal the cores the others need, and the nodeepspeed selection
took 209 s with the default against 133 s with one thread (same machine, one run each).
A value the user set (OMP_NUM_THREADS in the environment) is kept; subprocesses inherit it.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # after the variable: a torch started here reads it

_threads = os.environ["OMP_NUM_THREADS"]
if _threads.isdigit() and int(_threads) > 0:  # anything else: torch's own handling of the variable
    torch.set_num_threads(int(_threads))

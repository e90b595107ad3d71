"""The harness process's one lock on torch's global RNG.

The runner judges cells in parallel threads, and the resume grid trains the plain-PyTorch
reference in another thread meanwhile. Building a task's model seeds the global RNG
(`Task.build_model`), the reference seeds it and draws from it (dropout), and there is one such
RNG per process: two threads seeding and drawing at once get each other's numbers. Seen: a golden
refused once in a matrix run for an "initial weights sha256" mismatch; 15 of 400 hashes of
initial weights came out wrong from 4 threads. Whatever in the harness process seeds or draws from
the global RNG holds this lock (the ranks are processes of their own). harness.golden.golden_store also
holds it to hash a task's code, which Python 3.11 cannot parse in two threads at once."""

from __future__ import annotations

import threading

# Re-entrant: the reference builds the task's model while it holds the lock.
GLOBAL_RNG_LOCK = threading.RLock()

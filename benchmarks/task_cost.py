"""What one reference run of each built-in task costs here (plain PyTorch, one thread, fp32):
the tasks are meant to stay far below a launch's start-up (seconds), so that a matrix cell's
time is start-up, not training. Prints median milliseconds over a few runs and the ratio to
the cheapest task (ratios hold across machines; absolute times do not).

    python benchmarks/task_cost.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from harness.golden.reference import train_reference
from harness.tasks import get_task

BUILTIN = ("regression", "classifier", "lm", "scalar", "root_param")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    medians = {}
    for name in BUILTIN:
        task = get_task(name)
        train_reference(task, "fp32")  # warm-up: first-call costs are not the task's
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            train_reference(task, "fp32")
            times.append(time.perf_counter() - start)
        medians[name] = statistics.median(times)
    cheapest = min(medians.values())
    for name, seconds in medians.items():
        print(f"{name:<12} {seconds * 1000:8.1f} ms   x{seconds / cheapest:.1f}")


if __name__ == "__main__":
    main()

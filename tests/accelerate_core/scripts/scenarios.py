"""Several runs of test scripts in ONE launch: each scenario calls a script's `main(argv)` in the
launch's process group, frees the Accelerator it returns, and the next one starts clean (as the
harness reuses a launch). Start-up (importing torch, DeepSpeed and torch._dynamo in every rank,
and torchrun itself) is most of what a launch costs; the runs themselves take seconds.

    scenarios.py --plan PLAN.json

PLAN.json is a list of {"name": str, "module": str, "argv": [str, ...], "env": {str: str},
"timeout": seconds (optional)}: `module` is imported (e.g. tests.accelerate_core.scripts.mission_loop)
and its `main(argv)` run with `env` added to os.environ for that scenario only, as the launcher
would have set it for a launch of its own. Each rank prints a line when a scenario starts and when
it fails, so a failed launch's output tail names the scenario that failed; a scenario still
running after its `timeout` ends the rank with every thread's traceback (a hang shows where).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import gc
import importlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo root, for `tests.*`


@contextlib.contextmanager
def scenario_environ(env: Mapping[str, str]) -> Iterator[None]:
    """`env` in os.environ for the scenario's duration; what was there before comes back after."""
    before = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def say(message: str) -> None:
    print(f"[scenarios rank {os.environ.get('RANK', '?')}] {message}", file=sys.stderr, flush=True)


def run_scenario(scenario: Mapping[str, Any]) -> None:
    name = scenario["name"]
    say(f"scenario {name!r} starts: {scenario['module']} {' '.join(scenario['argv'])}")
    if scenario.get("timeout"):
        faulthandler.dump_traceback_later(float(scenario["timeout"]), exit=True)
    try:
        with scenario_environ(scenario.get("env", {})):
            accelerator = importlib.import_module(scenario["module"]).main(list(scenario["argv"]))
            if accelerator is not None:
                accelerator.free_memory()
    except BaseException:
        say(f"scenario {name!r} FAILED (traceback below)")
        raise
    finally:
        faulthandler.cancel_dump_traceback_later()
    del accelerator
    # What survived this scenario lives as long as the launch: left out of the next scenarios'
    # gc.collect() calls (free_memory, teardown), which otherwise walk all of torch each time.
    gc.collect()
    gc.freeze()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plan", type=Path, required=True)
    args = parser.parse_args()
    for scenario in json.loads(args.plan.read_text(encoding="utf-8")):
        run_scenario(scenario)


if __name__ == "__main__":
    main()

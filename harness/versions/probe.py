"""Run the DeepSpeed-alone reproductions here (one 2-process launch) and judge each behaviour.

The parent side of harness/rank/deepspeed_alone.py: it launches the ranks through
`torch.distributed.run`, reads rank 0's observations and classifies them
(harness/versions/behaviours.py). A launch that fails leaves every behaviour "not run" with the
launch's last line as the reason, so the table still says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.run.processes import kill_tree
from harness.versions.behaviours import BEHAVIOURS, BehaviourResult, Observation, classify

PROBE_PROCESSES = 2  # what ZeRO partitions across; the behaviours were found on 2 CPU ranks


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


RANK_PROGRAM = "harness.rank.deepspeed_alone"


def run_probe(timeout_s: float = 300.0,
              rank_program: str = RANK_PROGRAM) -> tuple[list[BehaviourResult], str]:
    """Each behaviour's verdict here, and "" or why the launch gave no observations.
    `rank_program`: the module each rank runs (its first argument: the observations file)."""
    with tempfile.TemporaryDirectory(prefix="deepspeed-alone-") as tmp:
        out = Path(tmp) / "observations.jsonl"
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("DS_ACCELERATOR", "cpu")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                   str(PROBE_PROCESSES), "-m", rank_program, str(out)]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            # A reproduction that fails on one rank can leave the other waiting in a collective
            # (seen on DeepSpeed 0.17.6). torchrun starts each rank in a session of its own, so
            # killing the launcher's group missed them, and they held the output pipe open:
            # every process of the tree, found by psutil, is killed.
            kill_tree(proc.pid)
            proc.communicate()
            return [classify(b, []) for b in BEHAVIOURS], (
                f"the probe launch ran past {timeout_s:g} s (a reproduction hung; its ranks were killed)")
        if proc.returncode != 0 or not out.is_file():
            why = f"the probe launch exited {proc.returncode}: {_last_line(output)}"
            return [classify(b, []) for b in BEHAVIOURS], why
        observations = [Observation(**json.loads(line)) for line in out.read_text().splitlines() if line]
    return [classify(b, observations) for b in BEHAVIOURS], ""

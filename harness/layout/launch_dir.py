"""The launch directory: what the parent and the ranks of one `torch.distributed.run` launch
share, the only channel between them besides the process group.

    plan.json                 the parent, before the launch: the cells, where records go, the
                              user's task imports
    launcher.log              torchrun's own output (its failure summary names the dead ranks)
    pids/rank{r}              each rank's pid, so the parent signals exactly the ranks
    logs/rank{r}.log          each rank's stdout + stderr at the file-descriptor level
    stacks/rank{r}.txt        each rank's Python stacks, dumped on SIGUSR1 (a hang)
    status/{id}.started       rank 0, when a cell starts (json: time)
    status/{id}.finished      rank 0, after its record is saved (json: seconds, phases)
    status/{id}.error.rank{r} any rank: the traceback of an exception, then the rank exits
    status/warm_up.json       rank 0, once warmed up (json: seconds, deepspeed_ops_s)

Every small file is written atomically by its writer, so a reader polling for it sees either
nothing or all of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SUBDIRS = ("pids", "logs", "stacks", "status")


@dataclass(frozen=True)
class LaunchDir:
    root: Path

    def create(self) -> None:
        """The folder and its sub-folders (both sides call it: whoever comes first makes them)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for sub in _SUBDIRS:
            (self.root / sub).mkdir(exist_ok=True)

    @property
    def name(self) -> str:
        return self.root.name

    # The parent's side: the plan and torchrun's log.
    @property
    def plan(self) -> Path:
        return self.root / "plan.json"

    def write_plan(self, plan: dict[str, Any]) -> None:
        self.plan.write_text(json.dumps(plan, indent=1), encoding="utf-8")

    def read_plan(self) -> dict[str, Any]:
        return dict(json.loads(self.plan.read_text(encoding="utf-8")))

    @property
    def launcher_log(self) -> Path:
        return self.root / "launcher.log"

    # Each rank's own files.
    def pid_file(self, rank: int) -> Path:
        return self.root / "pids" / f"rank{rank}"

    def pid_files(self) -> list[Path]:
        return sorted((self.root / "pids").glob("rank*"))

    def log(self, rank: int) -> Path:
        return self.root / "logs" / f"rank{rank}.log"

    def logs(self) -> list[Path]:
        return sorted((self.root / "logs").glob("rank*.log"))

    def stack(self, rank: int) -> Path:
        return self.root / "stacks" / f"rank{rank}.txt"

    def stacks(self) -> list[Path]:
        return sorted((self.root / "stacks").glob("rank*.txt"))

    @staticmethod
    def rank_of(path: Path) -> int:
        """The rank a log, stack or pid file belongs to (`rank3.log` -> 3)."""
        return int(path.name.split(".", 1)[0][len("rank"):])

    # A cell's status files: rank 0 says when it started and finished, any rank why it raised.
    @property
    def status(self) -> Path:
        return self.root / "status"

    def started(self, cell_id: str) -> Path:
        return self.status / f"{cell_id}.started"

    def finished(self, cell_id: str) -> Path:
        return self.status / f"{cell_id}.finished"

    def error(self, cell_id: str, rank: int) -> Path:
        return self.status / f"{cell_id}.error.rank{rank}"

    def errors(self, cell_id: str) -> dict[int, Path]:
        """rank -> the file holding the traceback that rank wrote for the cell."""
        found = self.status.glob(f"{cell_id}.error.rank*")
        return {int(path.name.rsplit("rank", 1)[1]): path for path in found}

    @property
    def warm_up(self) -> Path:
        return self.status / "warm_up.json"

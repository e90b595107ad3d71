"""Rank 1 exits 3 while rank 0 sleeps (and has started a grandchild in a session of its own).

Each process writes its pid to argv[1]/<name>.pid first, so the test can check afterwards that
none of them survived. Rank 1 waits until rank 0 and the grandchild are recorded, so the failure
happens while they run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

out = Path(sys.argv[1])
rank = int(os.environ["RANK"])
(out / f"rank{rank}.pid").write_text(str(os.getpid()))
if rank == 0:
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                  start_new_session=True)
    (out / "grandchild.pid").write_text(str(grandchild.pid))
    time.sleep(600)
else:
    deadline = time.monotonic() + 60
    while not (out / "grandchild.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(3)

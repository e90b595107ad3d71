"""Every rank records its pid in argv[1]/rank<N>.pid and sleeps: a run to be interrupted."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

out = Path(sys.argv[1])
(out / f"rank{os.environ['RANK']}.pid").write_text(str(os.getpid()))
time.sleep(600)

"""Writes the launcher-provided environment and its own arguments as JSON to argv[1]; exits
with argv[2] (default 0)."""

from __future__ import annotations

import json
import os
import sys

names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
         "DS_ACCELERATOR")
seen = {k: v for k, v in os.environ.items() if k in names or k.startswith("ACCELERATE_CORE_")}
with open(f"{sys.argv[1]}.rank{os.environ['RANK']}.json", "w", encoding="utf-8") as f:
    json.dump({"env": seen, "argv": sys.argv[1:]}, f)
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)

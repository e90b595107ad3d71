"""`python -m harness init DIR [--package NAME] [--force]`: a starter matrix.toml and task package."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from harness.starter import DEFAULT_PACKAGE, write_starter


def add_arguments(init: argparse.ArgumentParser) -> None:
    init.add_argument("directory", type=Path, metavar="DIR", help="your repository (created if missing)")
    init.add_argument("--package", default=DEFAULT_PACKAGE,
                      help=f"the task package's name (default {DEFAULT_PACKAGE})")
    init.add_argument("--force", action="store_true", help="overwrite files of an earlier init")


def cmd_init(args: argparse.Namespace) -> int:
    written = write_starter(args.directory, args.package, args.force)
    for path in written:
        print(f"wrote {path}")
    where = shlex.quote(str(args.directory))
    print(f"""
Next (from {args.directory}, so that `{args.package}` is importable; elsewhere put it on PYTHONPATH):
  cd {where}
  python -m harness list --matrix matrix.toml                       # the cells, and which run here
  python -m harness golden --update --matrix matrix.toml            # make the goldens (golden/)
  python -m harness run --matrix matrix.toml -k "cpu1 or ddp"       # a first run
  python -m harness golden --show my_mlp --matrix matrix.toml --precision fp32
Then change {args.package}/models.py and run again: the cells say what moved.""")
    return 0

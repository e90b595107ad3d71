"""The `accelerate-core` command: config | launch | env.

Errors the user can fix (AccelerateCoreError) are printed as one message with exit status 2,
no traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys

from accelerate_core.commands import config as config_command
from accelerate_core.commands import env as env_command
from accelerate_core.commands import launch as launch_command
from accelerate_core.commands.pipes import quiet_when_the_reader_leaves
from accelerate_core.errors import AccelerateCoreError

USAGE_ERROR = 2  # argparse's status for bad command lines; bad settings are the same kind


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="accelerate-core",
        description="Write a launch config, start training scripts on one or many processes "
                    "(single device, DDP, DeepSpeed ZeRO), and report the environment.",
        epilog="Typical use: `accelerate-core config`, then `accelerate-core launch train.py`. "
               "Run `accelerate-core COMMAND --help` for each command's options.",
    )
    subparsers = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    config_command.add_parser(subparsers)
    launch_command.add_parser(subparsers)
    env_command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    try:
        status: int = quiet_when_the_reader_leaves(lambda: args.handler(args))
    except AccelerateCoreError as exc:
        print(f"accelerate-core {args.command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print(f"accelerate-core {args.command}: interrupted", file=sys.stderr)
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())

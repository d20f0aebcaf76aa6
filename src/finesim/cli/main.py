"""Entry point of the ``finesim`` command.

Each sub-command lives in its own module under :mod:`finesim.cli` and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` (called with the parsed namespace, returning an exit code). The command modules are
listed in :data:`COMMANDS`; they import only ``argparse`` at module level, so ``finesim --help`` stays fast (the
library, torch included, is imported by the command that runs).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from finesim import __version__
from finesim.cli import bound, case, evaluate, prompt_eval, train

COMMANDS = (evaluate, prompt_eval, train, bound, case)


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered sub-command."""
    parser = argparse.ArgumentParser(prog="finesim", description="Fine-grained and conditional STS toolkit.")
    parser.add_argument("--version", action="version", version=f"finesim {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``finesim`` command; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose + 1, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError) as err:
        if args.verbose >= 2:
            raise
        print(f"finesim {args.command}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

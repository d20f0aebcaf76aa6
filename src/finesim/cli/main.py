"""Entry point of the ``finesim`` command.

Each sub-command lives in its own module under :mod:`finesim.cli` and exposes ``register(subparsers)``, which adds
its parser (through :func:`finesim.cli.common.command_parser`) and sets ``func`` (called with the parsed namespace,
returning an exit code). The command modules are listed in :data:`COMMANDS`; they import only ``argparse`` at module
level, so ``finesim --help`` stays fast (the library, torch included, is imported by the command that runs).
Every command runs inside one error boundary (:func:`finesim.cli.common.run_command`): see docs/errors.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from finesim._version import __version__
from finesim.cli import (
    bound,
    case,
    distill,
    ensemble,
    evaluate,
    export,
    index,
    prompt_eval,
    score,
    serve,
    soup,
    train,
)
from finesim.cli.common import EXIT_USAGE, HelpFormatter, configure_output, run_command

COMMANDS = (evaluate, score, serve, prompt_eval, train, ensemble, soup, export, bound, case, index, distill)


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered sub-command."""
    parser = argparse.ArgumentParser(
        prog="finesim",
        description="Fine-grained and conditional semantic textual similarity: train, evaluate, score and serve.",
        formatter_class=HelpFormatter,
        epilog="Run 'finesim COMMAND --help' for a command's options. Exit codes: 0 success, 1 error, 2 usage error.",
    )
    parser.add_argument("--version", action="version", version=f"finesim {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors: no progress lines or bars")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``finesim`` command; returns the process exit code."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        unrecognized(args, extras, parser, list(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    configure_output(args)
    return run_command(args, parser)


def unrecognized(args: argparse.Namespace, extras: list[str], parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Exit with a usage error for ``extras`` from the innermost command's parser (its usage, its name), naming the
    closest option of that command for each misspelt one; the top-level parser's when one comes before the command's
    name in ``argv``."""
    import difflib

    command = getattr(args, "command_parser", None) or parser
    name = getattr(args, "command", None)
    if name in argv and any(e in argv[: argv.index(name)] for e in extras):
        command = parser
    options = [o for action in command._actions for o in action.option_strings if o.startswith("--")]
    hints = []
    for extra in extras:
        if extra.startswith("--"):
            close = difflib.get_close_matches(extra.split("=", 1)[0], options, n=1, cutoff=0.75)
            if close:
                hints.append(f"{extra.split('=', 1)[0]}: did you mean {close[0]}?")
    message = "unrecognized arguments: " + " ".join(extras) + (f" ({'; '.join(hints)})" if hints else "")
    command.error(message)


if __name__ == "__main__":
    sys.exit(main())

"""``finesim soup``: save one model whose weights are the uniform average of several fine-tunings."""

from __future__ import annotations

import argparse
from typing import Any

from finesim.cli.common import UsageError, check_output_dir, command_parser

DESCRIPTION = """Save a model soup: one model whose weights are the uniform average of several fine-tunings of one
base model (typically the seeds of one recipe). It is a single model, scored, indexed, served and exported like any
other, at one model's cost. The members must be finesim bi-, tri- or cross-encoder folders of one architecture and
one base model. Their scores do not carry over: evaluate the soup (finesim evaluate --model DIR).

example:
  finesim soup --model runs/s42/model --model runs/s1/model --model runs/s2/model --output-dir runs/soup"""


def register(subparsers: Any) -> None:
    """Add the ``soup`` sub-command."""
    p = command_parser(
        subparsers, "soup", help="average the weights of several models into one", description=DESCRIPTION
    )
    p.add_argument("--model", dest="models", action="append", required=True, help="a member model folder (repeat)")
    p.add_argument("--output-dir", "-o", required=True, metavar="DIR", help="the soup's model folder (new or empty)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute ``finesim soup``."""
    from pathlib import Path

    from finesim.models.soup import member_markers

    if len(args.models) < 2:
        raise UsageError(f"a soup needs two or more --model folders, got {len(args.models)}")
    check_output_dir(args.output_dir)
    out = Path(args.output_dir)
    if out.is_dir() and any(out.iterdir()):
        raise UsageError(f"--output-dir {args.output_dir}: the folder is not empty; choose a new one")
    try:
        markers = member_markers(args.models)
    except ValueError as err:
        raise UsageError(str(err)) from None
    from finesim.models.soup import make_soup

    try:
        folder = make_soup(args.models, out)
    except ValueError as err:  # members that do not average (architecture, settings): named by their folders
        raise UsageError(str(err)) from None
    print(
        f"saved {folder}: the {markers[0]['encoder']}-encoder soup of {len(args.models)} models; its scores are "
        f"its own: finesim evaluate --model {folder}"
    )
    return 0

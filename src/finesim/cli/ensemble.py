"""``finesim ensemble``: save a folder that scores with the weighted mean of several saved models."""

from __future__ import annotations

import argparse
from typing import Any

from finesim.cli.common import UsageError, check_output_dir, command_parser

DESCRIPTION = """Save an ensemble of models trained on the same scaled labels (e.g. a C-STS bi-encoder and a
cross-encoder, both trained with MSE on (y - 1)/4): it scores each pair with every member and averages the scores with
the given weights. The folder holds only finesim_model.json (the members' paths and the weights), so finesim
evaluate, finesim score and Python's finesim.load_scorer load it like any model.

example:
  finesim ensemble --model runs/bi/model --model runs/cross/model --weight 0.5 --weight 0.5 --output-dir runs/ens"""


def register(subparsers: Any) -> None:
    """Add the ``ensemble`` sub-command."""
    p = command_parser(subparsers, "ensemble", help="save an ensemble of saved models", description=DESCRIPTION)
    p.add_argument("--model", dest="models", action="append", required=True, help="a member model folder (repeat)")
    p.add_argument(
        "--weight",
        dest="weights",
        action="append",
        type=float,
        default=None,
        help="a member's weight (repeat, in order)",
    )
    p.add_argument("--output-dir", "-o", required=True, metavar="DIR", help="the ensemble folder to write")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute ``finesim ensemble``."""
    from finesim.evaluation.ensemble import save_ensemble

    if args.weights is not None and len(args.weights) != len(args.models):
        raise UsageError(f"{len(args.models)} --model but {len(args.weights)} --weight options; give one weight each")
    check_output_dir(args.output_dir)
    folder = save_ensemble(args.output_dir, args.models, args.weights)
    print(f"saved {folder}: {len(args.models)} members")
    return 0

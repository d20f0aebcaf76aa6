"""``finesim train RECIPE``: train a model from a recipe (see docs/csts-training.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``train`` sub-command."""
    p = subparsers.add_parser(
        "train",
        help="train a model from a YAML/JSON recipe",
        description="Train a conditional (or plain) similarity model from a recipe; writes OUT/model, "
        "OUT/config.json and OUT/metrics.json and resumes from OUT/checkpoints when rerun.",
    )
    p.add_argument("recipe", nargs="?", help="recipe file (YAML or JSON)")
    p.add_argument("-o", "--output", help="output folder (overrides the recipe's output_dir)")
    p.add_argument("--data", help="data root for relative data paths (default: $FINESIM_DATA or ../shared/data)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe value, e.g. --set train.epochs=1 --set model.pooling=cls (repeatable)",
    )
    p.add_argument("--no-resume", action="store_true", help="start afresh even if OUT/checkpoints has checkpoints")
    p.add_argument("--list", action="store_true", help="list registered encoders, objectives and data formats")
    p.add_argument("--dry-run", action="store_true", help="validate the recipe and print it resolved; no training")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute ``finesim train``."""
    from finesim.training import available, check_recipe, get_objective, load_recipe
    from finesim.training.runner import train

    if args.list:
        info = available()
        for name in info["objectives"]:
            obj = get_objective(name)
            encoders = ",".join(obj.encoders)
            print(f"objective {name:12s} encoders={encoders} layout={obj.layout}  {obj.description}")
        print("encoders:", ", ".join(info["encoders"]))
        print("data formats:", ", ".join(info["data_formats"]))
        return 0
    if not args.recipe:
        print("finesim train: error: a recipe file is required (or --list)")
        return 2
    recipe = load_recipe(args.recipe, args.overrides)
    if args.dry_run:
        check_recipe(recipe)
        print(json.dumps(recipe.to_dict(), indent=2))
        return 0
    result = train(recipe, output_dir=args.output, data_root=args.data, resume=not args.no_resume)
    if result.metrics:
        val = result.metrics.get("validation") or {}
        print(
            f"model: {result.model_dir}\n"
            f"validation spearman: {val.get('spearman', float('nan')):.2f}  "
            f"pearson: {val.get('pearson', float('nan')):.2f}\n"
            f"metrics: {result.output_dir / 'metrics.json'}"
        )
    return 0

"""``finesim case``: CASE condition-aware embeddings (embed, sweep, isotropy, score; train, an alias of ``finesim
train`` for CASE recipes).

Every sub-command takes the encoder options (model, pooling, prompt family, formulation, "− c", cache
folder) and an optional ``--recipe``, a recipe with ``method: case`` whose ``case:`` section holds the same options
(``dim``, ``kind``, ``formulation``, ...); options given on the command line win over the recipe, and the recipe wins
over the built-in defaults. Data paths on the command line are relative to the working folder, those in a recipe to
the data root.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from finesim.cli.common import (
    add_runtime_options,
    check_output_dir,
    check_output_file,
    command_parser,
    dry_run_device_note,
    pooling_arg,
    positive_int,
    say,
    show_help,
)

# = finesim.case.options.DEFAULTS["model"], spelled out so that building the parser imports no library module
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def _switch(p: argparse.ArgumentParser, flag: str, help_text: str) -> None:
    """An on/off option (``--x`` / ``--no-x``) whose unset value (None) leaves the recipe or default in force."""
    dest = flag.lstrip("-").replace("-", "_")
    p.add_argument(flag, dest=dest, default=None, action=argparse.BooleanOptionalAction, help=help_text)


def _cache_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cache-dir",
        default=None,
        help="embedding cache folder (default: $FINESIM_CASE_CACHE, $FINESIM_CACHE/case, ~/.cache/finesim/case)",
    )


def _encoder_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recipe", default=None, help="CASE recipe (method: case) whose options apply (see recipes/case/)")
    p.add_argument("--model", default=None, help=f"encoder: Hub id or folder (default: {DEFAULT_MODEL})")
    p.add_argument(
        "--pooling", type=pooling_arg, default=None, help="override the encoder's pooling (mean, cls, lasttoken, ...)"
    )
    p.add_argument("--max-length", type=positive_int, default=None, help="truncate encoder inputs to this many tokens")
    p.add_argument("--family", default=None, help="prompt family of prompts.yaml (default: by formulation)")
    p.add_argument(
        "--prompts-file",
        default=None,
        help="YAML of prompt families laid out like finesim/case/prompts.yaml (default: the packaged one)",
    )
    p.add_argument(
        "--formulation",
        default=None,
        choices=["cond", "sent", "conc_sc", "conc_cs"],
        help="cond = f(c; I(s)), sent = f(s; I(c)), conc_sc = CONC(s+c) (default), conc_cs = CONC(c+s)",
    )
    _switch(p, "--subtract-condition", 'subtract the unconditional condition embedding ("− c"; default on)')
    _switch(
        p,
        "--normalize-before-subtract",
        "L2-normalise the encoder outputs before − c (default: off; un-normalised, as the reference)",
    )
    _cache_option(p)
    p.add_argument("--batch-size", type=positive_int, default=None, help="encoding batch size (default: 64)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: 1; see docs/case.md)")
    add_runtime_options(p)


def _train_options(p: argparse.ArgumentParser, *, sweep: bool = False) -> None:
    p.add_argument("--train", default=None, help="C-STS CSV to train on (default: <data>/csts/train.csv)")
    p.add_argument("--dev", default=None, help="C-STS CSV for choosing the epoch (default: carve from --train)")
    p.add_argument("--dev-fraction", type=float, default=None, help="share of train pairs carved as dev (default: 0.1)")
    p.add_argument("--eval", nargs="*", default=None, help="C-STS CSVs to report on (never used for selection)")
    p.add_argument(
        "--data", default=None, help="data root for the recipe's relative data paths and the default --train"
    )
    p.add_argument("--kind", default=None, choices=["linear", "nonlinear"], help="projection (default: nonlinear)")
    if sweep:
        p.add_argument(
            "--dims",
            default=None,
            help="comma-separated output dimensions; 'full' = the encoder's width (default: 64,128,256,512,full)",
        )
    else:
        p.add_argument("--dim", type=positive_int, default=None, help="output dimension k (default: 512)")
    p.add_argument("--lr", type=float, default=None, help="Adam learning rate (default: 1e-3)")
    p.add_argument("--train-batch-size", type=positive_int, default=None, help="projection batch size (default: 512)")
    p.add_argument("--epochs", type=positive_int, default=None, help="epochs (default: 30)")
    p.add_argument("--dropout", type=float, default=None, help="dropout (default: 0 linear, 0.15 non-linear)")
    p.add_argument("--negative-slope", type=float, default=None, help="LeakyReLU slope (default: 0.01)")
    p.add_argument(
        "--activation",
        default=None,
        choices=["leaky_relu", "relu", "gelu", "silu"],
        help="the non-linear projection's activation (default: leaky_relu, the paper's; Appendix B's ablation)",
    )
    p.add_argument(
        "--hidden-dim",
        type=positive_int,
        default=None,
        help="a two-layer non-linear projection d -> HIDDEN_DIM -> k (Appendix B: 1024; default: one layer)",
    )
    p.add_argument("--label-divisor", type=float, default=None, help="target = (label - offset) / divisor (default: 5)")
    p.add_argument("--label-offset", type=float, default=None, help="see --label-divisor (default: 0)")
    p.add_argument(
        "--label-low",
        type=float,
        default=None,
        help="the labels' declared range, with --label-high; any other label is an error (default: 1, C-STS's)",
    )
    p.add_argument("--label-high", type=float, default=None, help="see --label-low (default: 5, C-STS's)")
    p.add_argument("--seed", type=int, default=None, help="seed for the dev carve and training (default: 42)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``case`` command and its sub-commands (``finesim evaluate`` loads CASE folders by their marker)."""
    case = command_parser(
        sub,
        "case",
        help="CASE: condition-aware embeddings + a projection trained on cached embeddings",
        description="CASE (Zhang, Zhou, Bollegala 2026) on C-STS CSV files. See docs/case.md.",
    )
    actions = case.add_subparsers(dest="case_command", metavar="ACTION")

    p = command_parser(
        actions,
        "embed",
        help="fill the embedding cache; report unsupervised Spearman if labelled",
        description="Embed C-STS files condition-aware with a frozen encoder, filling the embedding cache; report "
        "the unsupervised Spearman of labelled files.",
    )
    _encoder_options(p)
    p.add_argument("data_files", nargs="+", help="C-STS CSV files")
    p.add_argument("--output", default=None, metavar="FILE", help="results JSON")
    p.set_defaults(func=run_embed)

    p = command_parser(
        actions,
        "train",
        help="alias of `finesim train` for a CASE recipe, with options on the command line",
        description="Train the CASE projection on cached embeddings (the epoch chosen on a dev split carved from "
        "--train) and save a CASE model: what `finesim train RECIPE` does for a recipe with method: case, with the "
        "options below over the recipe's.",
    )
    _encoder_options(p)
    _train_options(p)
    p.add_argument(
        "--output-dir", "-o", required=True, metavar="DIR", help="folder for the CASE model (and training.json)"
    )
    p.add_argument(
        "--no-resume",
        action="store_true",
        help="start over in a folder holding another run or model: delete that run's files first (without it such "
        "a folder is refused; one holding a CASE run of the same options is trained again and replaced)",
    )
    p.set_defaults(func=run_train)

    p = command_parser(
        actions,
        "sweep",
        help="train one projection per output dimension",
        description="Train one projection per output dimension and report dev (and --eval) Spearman for each.",
    )
    _encoder_options(p)
    _train_options(p, sweep=True)
    p.add_argument("--output", default=None, metavar="FILE", help="results JSON")
    p.set_defaults(func=run_sweep)

    p = command_parser(
        actions,
        "isotropy",
        help="I_iso and embedding-to-mean cosines, with and without − c",
        description="Approximate isotropy I_iso and the embedding-to-mean cosines, with and without minus condition.",
    )
    _encoder_options(p)
    p.add_argument("data_files", nargs="+", help="C-STS CSV files (both sentences of every row are used)")
    p.add_argument("--num-directions", type=positive_int, default=None, help="random directions (default: 1000)")
    p.add_argument("--seed", type=int, default=None, help="seed of the random directions (default: the recipe's, 42)")
    p.add_argument(
        "--output-dir", "-o", required=True, metavar="DIR", help="folder for isotropy.json and the PNG histogram"
    )
    p.set_defaults(func=run_isotropy)

    p = command_parser(
        actions,
        "score",
        help="Spearman of a saved CASE model on C-STS CSV files",
        description="Spearman and Pearson of a saved CASE model on C-STS files.",
    )
    p.add_argument("model_dir", help="folder written by `finesim case train`")
    p.add_argument("data_files", nargs="+", help="C-STS CSV files")
    _cache_option(p)
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: 1)")
    p.add_argument("--output", default=None, metavar="FILE", help="results JSON")
    add_runtime_options(p)
    p.set_defaults(func=run_score)
    case.set_defaults(func=show_help(case))


def recipe_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~finesim.training.recipe.CaseRecipe` of a parsed command line: its options over ``--recipe``
    (:func:`finesim.case.options.case_recipe`); data files given here become absolute paths."""
    from finesim.case.options import DEFAULTS, case_recipe

    given = {key: getattr(args, key) for key in DEFAULTS if hasattr(args, key)}
    for key in ("train", "dev"):
        if given.get(key):
            given[key] = str(Path(given[key]).expanduser().absolute())
    if given.get("eval"):
        given["eval"] = [str(Path(path).expanduser().absolute()) for path in given["eval"]]
    return case_recipe(given, recipe=getattr(args, "recipe", None))


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The CASE options of a parsed command line: command line > ``--recipe`` > defaults, checked."""
    from finesim.case.options import recipe_options

    return recipe_options(recipe_from_args(args))


def train_case(recipe: Any, args: argparse.Namespace, *, output_dir: str | None, dry_run: bool = False) -> int:
    """Train a CASE recipe (``finesim train`` and ``finesim case train``): its checks, then the projection."""
    from finesim.case.pipeline import check_case, train_recipe

    resume = not args.no_resume
    options, lines = check_case(recipe, output_dir=output_dir, data=args.data, resume=resume)
    tell = say(args)
    for line in lines:
        tell(line)
    if dry_run:
        print(json.dumps(recipe.to_dict(), indent=2))
        note = dry_run_device_note(options.get("device"))  # --device, else the recipe's case.device
        if note:
            tell(f"case.{note}" if not getattr(args, "device", None) else f"--{note}")
        tell("dry run: every check passed; nothing was trained")
        return 0
    out = str(output_dir or recipe.output_dir)
    payload = train_recipe(
        recipe,
        output_dir=out,
        data=args.data,
        resume=resume,
        argv=sys.argv[1:],
        show_progress=not args.no_progress,
        checked=options,
    )
    training = payload["training"]
    proj = training["projection"]
    print(
        f"saved {out}: {proj['kind']} {proj['in_dim']}→{proj['out_dim']}, "
        f"{training['trainable_parameters']} parameters, best epoch {training['best_epoch']} "
        f"(dev Spearman {training['best_dev_spearman']:.2f}), trained in {training['train_seconds']:.1f} s"
    )
    for name, value in payload["eval_spearman"].items():
        print(f"  {name}: Spearman {value:.2f}")
    return 0


def run_embed(args: argparse.Namespace) -> int:
    """``finesim case embed``: fill the cache, print and optionally write the unsupervised Spearman per file."""
    from finesim.case.pipeline import embed_files
    from finesim.results import write_json_atomic

    check_output_file(args.output)
    payload = embed_files(options_from_args(args), args.data_files, show_progress=not args.no_progress)
    for row in payload["results"]:
        print(
            f"{row['file']}: {row['rows']} rows, {row['texts_encoded']} texts encoded "
            f"({row['seconds']} s), unsupervised Spearman {row['unsupervised_spearman']:.2f}"
        )
    if args.output:
        write_json_atomic(args.output, payload)
    return 0


def run_train(args: argparse.Namespace) -> int:
    """``finesim case train``: ``finesim train`` of the CASE recipe the command line makes (:func:`train_case`)."""
    check_output_dir(args.output_dir)
    return train_case(recipe_from_args(args), args, output_dir=args.output_dir)


def run_sweep(args: argparse.Namespace) -> int:
    """``finesim case sweep``: one projection per output dimension; a table, optionally a results file."""
    from finesim.case.pipeline import resolve_paths, sweep_dims
    from finesim.results import write_json_atomic

    check_output_file(args.output)
    options = resolve_paths(options_from_args(args), args.data)
    payload = sweep_dims(options, show_progress=not args.no_progress)
    eval_names = list(payload["data"]["eval"])
    header = ["dim", "params", "epoch", "dev", *eval_names, "seconds"]
    print("  ".join(f"{h:>10}" for h in header))
    for row in payload["rows"]:
        values = [row["dim"], row["trainable_parameters"], row["best_epoch"], f"{row['dev_spearman']:.2f}"]
        values += [f"{row[f'{n}_spearman']:.2f}" for n in eval_names] + [row["train_seconds"]]
        print("  ".join(f"{v!s:>10}" for v in values))
    if args.output:
        write_json_atomic(args.output, payload)
    return 0


def run_isotropy(args: argparse.Namespace) -> int:
    """``finesim case isotropy``: I_iso and cosines to the mean; writes isotropy.json and the histogram."""
    from finesim.case.pipeline import measure_isotropy

    check_output_dir(args.output_dir)
    options = options_from_args(args)
    payload = measure_isotropy(options, args.data_files, args.output_dir, show_progress=not args.no_progress)
    for name, row in payload["results"].items():
        print(
            f"{name:>16}: I_iso {row['i_iso']:.4f}, cos-to-mean {row['cosine_to_mean_mean']:.3f} "
            f"± {row['cosine_to_mean_std']:.3f} (n={row['n']})"
        )
    print(f"histogram: {payload['histogram']}")
    return 0


def run_score(args: argparse.Namespace) -> int:
    """``finesim case score``: Spearman and Pearson of a saved CASE model per file."""
    from finesim.case.pipeline import score_files
    from finesim.results import write_json_atomic

    check_output_file(args.output)
    payload = score_files(
        args.model_dir, args.data_files, cache_dir=args.cache_dir, threads=args.threads, device=args.device
    )
    for row in payload["results"]:
        print(f"{row['file']}: Spearman {row['spearman']:.2f}, Pearson {row['pearson']:.2f} ({row['rows']} rows)")
    if args.output:
        write_json_atomic(args.output, payload)
    return 0

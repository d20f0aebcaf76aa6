"""``finesim case``: CASE condition-aware embeddings (embed, train, sweep, isotropy, score).

Every sub-command takes the encoder options (model, pooling, prompt family, formulation, "− c", cache
folder) and an optional ``--recipe`` YAML whose keys are option names (``dim``, ``kind``, ``formulation``,
...); options given on the command line win over the recipe, and the recipe wins over the built-in defaults.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

DEFAULTS: dict[str, Any] = {
    "model": "sentence-transformers/all-MiniLM-L6-v2",
    "pooling": None,
    "max_length": None,
    "family": None,
    "prompts_file": None,
    "formulation": "conc_sc",  # the paper's best MLM setting (Table 1) and the one chosen on dev with MiniLM
    "subtract_condition": True,
    "normalize_before_subtract": False,
    "cache_dir": None,
    "batch_size": 64,
    "threads": 1,
    "device": None,
    "kind": "nonlinear",
    "dim": 512,
    "lr": 1e-3,
    "train_batch_size": 512,
    "epochs": 30,
    "dropout": None,
    "negative_slope": 0.01,
    "label_divisor": 5.0,
    "label_offset": 0.0,
    "seed": 42,
    "dev": None,
    "dev_fraction": 0.1,
    "eval": [],
    "dims": "64,128,256,512,full",
    "num_directions": 1000,
}


def default_cache_dir() -> Path:
    """``$FINESIM_CASE_CACHE``, else ``$FINESIM_CACHE/case``, else ``~/.cache/finesim/case``."""
    from finesim.case.cache import configured_cache_dir

    return configured_cache_dir() or Path.home() / ".cache" / "finesim" / "case"


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
    p.add_argument("--recipe", default=None, help="YAML file of option defaults (see recipes/case/)")
    p.add_argument("--model", default=None, help=f"encoder: Hub id or folder (default {DEFAULTS['model']})")
    p.add_argument("--pooling", default=None, help="override the encoder's pooling (mean, cls, lasttoken)")
    p.add_argument("--max-length", type=int, default=None, help="truncate encoder inputs to this many tokens")
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
        "L2-normalise the encoder outputs before − c (default off: un-normalised, as the reference)",
    )
    _cache_option(p)
    p.add_argument("--batch-size", type=int, default=None, help="encoding batch size (default 64)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default 1; see docs/case.md)")
    p.add_argument("--device", default=None, help="torch device for the encoder")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _train_options(p: argparse.ArgumentParser, *, sweep: bool = False) -> None:
    p.add_argument("--train", default=None, help="C-STS CSV to train on (default: <data>/csts/train.csv)")
    p.add_argument("--dev", default=None, help="C-STS CSV for choosing the epoch (default: carve from --train)")
    p.add_argument("--dev-fraction", type=float, default=None, help="share of train pairs carved as dev (0.1)")
    p.add_argument("--eval", nargs="*", default=None, help="C-STS CSVs to report on (never used for selection)")
    p.add_argument("--data", default=None, help="data root for the default --train")
    p.add_argument("--kind", default=None, choices=["linear", "nonlinear"], help="projection (default nonlinear)")
    if sweep:
        p.add_argument(
            "--dims",
            default=None,
            help="comma-separated output dimensions; 'full' = the encoder's width (default 64,128,256,512,full)",
        )
    else:
        p.add_argument("--dim", type=int, default=None, help="output dimension k (default 512)")
    p.add_argument("--lr", type=float, default=None, help="Adam learning rate (default 1e-3)")
    p.add_argument("--train-batch-size", type=int, default=None, help="projection batch size (default 512)")
    p.add_argument("--epochs", type=int, default=None, help="epochs (default 30)")
    p.add_argument("--dropout", type=float, default=None, help="dropout (default 0 linear, 0.15 non-linear)")
    p.add_argument("--negative-slope", type=float, default=None, help="LeakyReLU slope (default 0.01)")
    p.add_argument("--label-divisor", type=float, default=None, help="target = (label - offset) / divisor (5)")
    p.add_argument("--label-offset", type=float, default=None, help="see --label-divisor (default 0)")
    p.add_argument("--seed", type=int, default=None, help="seed for the dev carve and training (default 42)")


def _load_case_model(path: str, **kwargs: Any) -> Any:
    """Registry loader that imports the CASE package only when a CASE folder is actually loaded."""
    from finesim.case.model import _load_for_registry

    return _load_for_registry(path, **kwargs)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``case`` command and its sub-commands (and make ``finesim evaluate`` load CASE folders)."""
    from finesim.models.registry import register_model_type

    register_model_type("case", _load_case_model)
    case = sub.add_parser(
        "case",
        help="CASE: condition-aware embeddings + a projection trained on cached embeddings",
        description="CASE (Zhang, Zhou, Bollegala 2026) on C-STS CSV files. See docs/case.md.",
    )
    actions = case.add_subparsers(dest="case_command", metavar="ACTION")

    p = actions.add_parser("embed", help="fill the embedding cache; report unsupervised Spearman if labelled")
    _encoder_options(p)
    p.add_argument("data_files", nargs="+", help="C-STS CSV files")
    p.add_argument("--output", default=None, help="results JSON")
    p.set_defaults(func=run_embed)

    p = actions.add_parser("train", help="train a projection on cached embeddings and save a CASE model")
    _encoder_options(p)
    _train_options(p)
    p.add_argument("--output-dir", required=True, help="folder for the CASE model (and training.json)")
    p.set_defaults(func=run_train)

    p = actions.add_parser("sweep", help="train one projection per output dimension")
    _encoder_options(p)
    _train_options(p, sweep=True)
    p.add_argument("--output", default=None, help="results JSON")
    p.set_defaults(func=run_sweep)

    p = actions.add_parser("isotropy", help="I_iso and embedding-to-mean cosines, with and without − c")
    _encoder_options(p)
    p.add_argument("data_files", nargs="+", help="C-STS CSV files (both sentences of every row are used)")
    p.add_argument("--num-directions", type=int, default=None, help="random directions (default 1000)")
    p.add_argument("--output-dir", required=True, help="folder for isotropy.json and the PNG histogram")
    p.set_defaults(func=run_isotropy)

    p = actions.add_parser("score", help="Spearman of a saved CASE model on C-STS CSV files")
    p.add_argument("model_dir", help="folder written by `finesim case train`")
    p.add_argument("data_files", nargs="+", help="C-STS CSV files")
    _cache_option(p)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default 1)")
    p.add_argument("--output", default=None, help="results JSON")
    p.set_defaults(func=run_score)
    case.set_defaults(func=lambda args: (case.print_help(), 2)[1])


def resolve_options(args: argparse.Namespace) -> dict[str, Any]:
    """Merge command line > recipe > defaults into one option dict."""
    import yaml

    recipe: dict[str, Any] = {}
    if getattr(args, "recipe", None):
        recipe = yaml.safe_load(Path(args.recipe).read_text(encoding="utf-8")) or {}
        if not isinstance(recipe, dict):
            raise ValueError(f"{args.recipe}: a recipe must be a mapping of option names to values")
        recipe = {k.replace("-", "_"): v for k, v in recipe.items()}
        unknown = sorted(set(recipe) - set(DEFAULTS) - {"description", "paper", "notes"})
        if unknown:
            raise ValueError(f"{args.recipe}: unknown recipe keys {unknown}; known: {sorted(DEFAULTS)}")
    options = dict(DEFAULTS)
    options.update({k: v for k, v in recipe.items() if k in DEFAULTS})
    for key in DEFAULTS:
        value = getattr(args, key, None)
        if value is not None:
            options[key] = value
    if options["cache_dir"] is None:
        options["cache_dir"] = str(default_cache_dir())
    if isinstance(options["eval"], str):
        options["eval"] = [options["eval"]]
    options["recipe"] = getattr(args, "recipe", None)
    return options


def build_encoder(options: dict[str, Any], show_progress: bool = True):
    """Load the encoder and wrap it in a :class:`~finesim.case.ConditionAwareEncoder`."""
    import torch

    from finesim.case import ConditionAwareEncoder, PromptFormat
    from finesim.case.encoding import DEFAULT_FAMILY_FOR
    from finesim.models import load_sentence_model
    from finesim.models.loading import ALIASES

    torch.set_num_threads(int(options["threads"]))
    options["model"] = ALIASES.get(options["model"], options["model"])  # one cache namespace per real model
    family = options["family"] or DEFAULT_FAMILY_FOR[options["formulation"]]
    prompt = PromptFormat(family, options["formulation"], prompts_file=options["prompts_file"])
    model = load_sentence_model(
        options["model"],
        device=options["device"],
        pooling=options["pooling"],
        max_length=options["max_length"],
    )
    return ConditionAwareEncoder(
        model,
        prompt,
        subtract_condition=bool(options["subtract_condition"]),
        normalize_before_subtract=bool(options["normalize_before_subtract"]),
        cache_dir=options["cache_dir"],
        model_name=options["model"],
        batch_size=int(options["batch_size"]),
        show_progress=show_progress,
    )


def _read(path: str):
    from finesim.data import read_csts

    return read_csts(path)


def _train_config(options: dict[str, Any], dim: int | None = None):
    from finesim.case import TrainConfig

    return TrainConfig(
        kind=options["kind"],
        dim=int(dim if dim is not None else options["dim"]),
        lr=float(options["lr"]),
        batch_size=int(options["train_batch_size"]),
        epochs=int(options["epochs"]),
        dropout=options["dropout"],
        negative_slope=float(options["negative_slope"]),
        label_divisor=float(options["label_divisor"]),
        label_offset=float(options["label_offset"]),
        seed=int(options["seed"]),
        threads=int(options["threads"]),
    )


def _splits(args: argparse.Namespace, options: dict[str, Any]) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """(train, dev, {eval name: dataset}, data description)."""
    from finesim.case import split_by_pair
    from finesim.case.data import split_summary
    from finesim.paths import data_root

    train_file = args.train or str(data_root(args.data) / "csts" / "train.csv")
    train, _ = _read(train_file)
    if options["dev"]:
        dev, _ = _read(options["dev"])
        dev_source = options["dev"]
    else:
        train, dev = split_by_pair(train, float(options["dev_fraction"]), int(options["seed"]))
        dev_source = f"{train_file} (carved: {options['dev_fraction']} of sentence pairs, seed {options['seed']})"
    evals = {}
    for path in options["eval"] or []:
        evals[Path(path).stem] = _read(path)[0]
    description = {
        "train": split_summary("train", train, train_file),
        "dev": split_summary("dev", dev, dev_source),
        "eval": {name: split_summary(name, ds, name) for name, ds in evals.items()},
        "selection_split": "dev",
    }
    return train, dev, evals, description


def run_embed(args: argparse.Namespace) -> int:
    from finesim.case import embed_pairs, evaluate_pairs
    from finesim.results import environment_record, write_json_atomic

    options = resolve_options(args)
    encoder = build_encoder(options, show_progress=not args.no_progress)
    rows = []
    for path in args.data_files:
        ds, report = _read(path)
        start = time.perf_counter()
        before = encoder.encoded
        data = embed_pairs(encoder, ds)
        row = {
            "file": path,
            "rows": len(ds),
            "skipped": report.skipped,
            "texts_encoded": encoder.encoded - before,
            "seconds": round(time.perf_counter() - start, 2),
            "unsupervised_spearman": evaluate_pairs(None, data),
        }
        rows.append(row)
        print(
            f"{path}: {row['rows']} rows, {row['texts_encoded']} texts encoded "
            f"({row['seconds']} s), unsupervised Spearman {row['unsupervised_spearman']:.2f}"
        )
    if args.output:
        write_json_atomic(
            args.output,
            {
                "command": "finesim case embed",
                **encoder.config(),
                "options": options,
                "results": rows,
                "environment": environment_record(),
            },
        )
    return 0


def run_train(args: argparse.Namespace) -> int:
    from finesim.case import CaseModel, embed_pairs, evaluate_pairs, train_projection
    from finesim.results import environment_record, write_json_atomic

    options = resolve_options(args)
    encoder = build_encoder(options, show_progress=not args.no_progress)
    train, dev, evals, description = _splits(args, options)
    start = time.perf_counter()
    train_x, dev_x = embed_pairs(encoder, train), embed_pairs(encoder, dev)
    eval_x = {name: embed_pairs(encoder, ds) for name, ds in evals.items()}
    embed_seconds = time.perf_counter() - start
    result = train_projection(train_x, dev_x, _train_config(options), show_progress=not args.no_progress)
    scores = {name: evaluate_pairs(result.projection, data) for name, data in eval_x.items()}
    summary = result.summary()
    model = CaseModel(encoder, result.projection, {"training": summary, "data": description})
    model.save(args.output_dir)
    payload = {
        "command": "finesim case train",
        "argv": sys.argv[1:],
        **encoder.config(),
        "options": options,
        "data": description,
        "training": summary,
        "embed_seconds": round(embed_seconds, 2),
        "texts_encoded": encoder.encoded,
        "eval_spearman": scores,
        "environment": environment_record(),
    }
    write_json_atomic(Path(args.output_dir) / "training.json", payload)
    proj = result.projection
    print(
        f"saved {args.output_dir}: {proj.kind} {proj.in_dim}→{proj.out_dim}, "
        f"{result.projection.num_parameters()} parameters, best epoch {result.best_epoch} "
        f"(dev Spearman {result.best_dev_spearman:.2f}), trained in {result.train_seconds:.1f} s"
    )
    for name, value in scores.items():
        print(f"  {name}: Spearman {value:.2f}")
    return 0


def parse_dims(spec: str | int | list[Any], width: int) -> list[int]:
    """Output dimensions of a sweep, ascending and distinct; the keyword ``full`` stands for ``width``.

    ``spec`` is a comma-separated string (``"64,128,full"``), a single number, or a list of those tokens.
    """
    tokens = spec if isinstance(spec, list) else str(spec).split(",")
    dims = set()
    for token in (str(t).strip() for t in tokens):
        if not token:
            continue
        if token.lower() == "full":
            dims.add(int(width))
        elif token.isdigit() and int(token) > 0:
            dims.add(int(token))
        else:
            raise ValueError(f"--dims: {token!r} is neither a positive integer nor 'full'")
    if not dims:
        raise ValueError("--dims needs at least one dimension")
    return sorted(dims)


def run_sweep(args: argparse.Namespace) -> int:
    from finesim.case import embed_pairs, sweep_dimensions
    from finesim.results import environment_record, write_json_atomic

    options = resolve_options(args)
    parse_dims(options["dims"], width=1)  # syntax errors before any encoding
    encoder = build_encoder(options, show_progress=not args.no_progress)
    train, dev, evals, description = _splits(args, options)
    train_x, dev_x = embed_pairs(encoder, train), embed_pairs(encoder, dev)
    dims = parse_dims(options["dims"], width=train_x.dim)
    eval_x = {name: embed_pairs(encoder, ds) for name, ds in evals.items()}
    rows = sweep_dimensions(train_x, dev_x, dims, _train_config(options, dims[0]), report=eval_x)
    header = ["dim", "params", "epoch", "dev", *eval_x, "seconds"]
    print("  ".join(f"{h:>10}" for h in header))
    for row in rows:
        values = [row["dim"], row["trainable_parameters"], row["best_epoch"], f"{row['dev_spearman']:.2f}"]
        values += [f"{row[f'{n}_spearman']:.2f}" for n in eval_x] + [row["train_seconds"]]
        print("  ".join(f"{v!s:>10}" for v in values))
    if args.output:
        write_json_atomic(
            args.output,
            {
                "command": "finesim case sweep",
                **encoder.config(),
                "options": options,
                "data": description,
                "rows": rows,
                "environment": environment_record(),
            },
        )
    return 0


def run_isotropy(args: argparse.Namespace) -> int:
    import numpy as np

    from finesim.case import cosine_to_mean, isotropy_summary, save_histograms
    from finesim.results import environment_record, write_json_atomic

    options = resolve_options(args)
    encoder = build_encoder(options, show_progress=not args.no_progress)
    sentences, conditions = [], []
    for path in args.data_files:
        ds, _ = _read(path)
        sentences += list(ds["sentence1"]) + list(ds["sentence2"])
        conditions += list(ds["condition"]) * 2
    conditional, unconditional = encoder.embed_parts(sentences, conditions)
    variants = {
        options["formulation"]: conditional,
        f"{options['formulation']} - c": conditional - unconditional,
    }
    out = Path(args.output_dir)
    summary = {
        name: isotropy_summary(x, num_directions=int(options["num_directions"]), seed=int(options["seed"]))
        for name, x in variants.items()
    }
    png = save_histograms(
        {name: cosine_to_mean(x) for name, x in variants.items()},
        out / "cosine_to_mean.png",
        title=f"{options['model']}: embedding-to-mean cosine",
    )
    for name, row in summary.items():
        print(
            f"{name:>16}: I_iso {row['i_iso']:.4f}, cos-to-mean {row['cosine_to_mean_mean']:.3f} "
            f"± {row['cosine_to_mean_std']:.3f} (n={row['n']})"
        )
    print(f"histogram: {png}")
    write_json_atomic(
        out / "isotropy.json",
        {
            "command": "finesim case isotropy",
            **encoder.config(),
            "files": args.data_files,
            "results": summary,
            "histogram": str(png),
            "mean_norm": float(np.linalg.norm(conditional, axis=1).mean()),
            "environment": environment_record(),
        },
    )
    return 0


def run_score(args: argparse.Namespace) -> int:
    import torch

    from finesim.case import CaseModel
    from finesim.evaluation.metrics import pearson, spearman
    from finesim.results import environment_record, write_json_atomic

    torch.set_num_threads(int(args.threads or DEFAULTS["threads"]))
    model = CaseModel.load(args.model_dir, cache_dir=args.cache_dir or str(default_cache_dir()))
    rows = []
    for path in args.data_files:
        ds, _ = _read(path)
        pred = model.score(ds["sentence1"], ds["sentence2"], ds["condition"])
        row = {
            "file": path,
            "rows": len(ds),
            "spearman": spearman(pred, ds["label"]),
            "pearson": pearson(pred, ds["label"]),
            "texts_encoded": model.last_encoded,
        }
        rows.append(row)
        print(f"{path}: Spearman {row['spearman']:.2f}, Pearson {row['pearson']:.2f} ({row['rows']} rows)")
    if args.output:
        write_json_atomic(
            args.output,
            {
                "command": "finesim case score",
                "model_dir": args.model_dir,
                "results": rows,
                "environment": environment_record(),
            },
        )
    return 0

"""C-STS training benchmark: finesim's bi-, cross- and tri-encoder (MSE) and bi-encoder Quad+MSE on MiniLM,
plus a plain sentence-transformers training loop (CosineSimilarityLoss on the same pair-encoded rows) as the
throughput baseline, all from one invocation.

All runs share the seed, batch size, lr, schedule and budget (``--epochs``, or ``--max-steps`` optimizer steps;
``--baseline-steps`` gives the baseline a different step budget). The finesim runs use length-grouped batches
(``train.group_by_length``; ``--no-group-by-length`` for the papers' plain random batches); the baseline is plain
sentence-transformers, random batches. Training throughput is C-STS (s1, s2, c) pairs (= training rows) per second
of *training step* time (summed per-step wall time from a trainer callback, so validation passes are excluded on
both sides; each epoch's rows counted once, ``finesim.training.runner.rows_seen``). The results file (self-describing
JSON, with the bi-encoder/baseline throughput ratio) is rewritten after every run, so a partial benchmark still leaves
its numbers.

Commands behind the committed results (docs/results.md)::

    python benchmarks/csts_train.py --epochs 1 --output benchmarks/results/csts_train_1ep_all.json
    python benchmarks/csts_train.py --epochs 3 --runs bi-mse --output benchmarks/results/csts_train_3ep.json
    python benchmarks/csts_train.py --epochs 3 --lr 1e-4 --runs bi-mse \\
        --output benchmarks/results/csts_train_3ep_lr1e-4.json

Training throughput of fp32 against bf16 autocast (this CPU has avx512_bf16), against the plain sentence-transformers
loop, for MiniLM and mpnet (docs/csts-training.md, "Recipes": bf16)::

    python benchmarks/csts_train.py --model minilm --max-steps 60 --no-group-by-length \
        --runs baseline,bi-mse,bi-mse-grouped,bi-mse-bf16,bi-mse-grouped-bf16 \
        --output benchmarks/results/bf16_minilm.json
    python benchmarks/csts_train.py --model mpnet --max-steps 40 --no-group-by-length \
        --runs baseline,bi-mse,bi-mse-grouped,bi-mse-bf16,bi-mse-grouped-bf16 \
        --output benchmarks/results/bf16_mpnet.json

Quad+MSE without a margin between tied pairs (1,027 of the 5,671 training pairs have equal labels)::

    python benchmarks/csts_train.py --epochs 3 --runs bi-quad-mse --quad-skip-equal      # or --equal-labels drop
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _timing import StepTimer  # benchmarks/ is on sys.path when run as a script

from finesim.results import environment_record, file_sha256, path_roots, portable, write_json_atomic
from finesim.training import recipe_from_dict, train
from finesim.training.runner import rows_seen

RUNS: dict[str, dict[str, Any]] = {
    "bi-mse": {"model": {"encoder": "bi"}, "objective": {"name": "mse"}},
    # always length-grouped batches (train.group_by_length), whatever --group-by-length says: with
    # --no-group-by-length, bi-mse and bi-mse-grouped compare random and grouped batches in one invocation
    "bi-mse-grouped": {"model": {"encoder": "bi"}, "objective": {"name": "mse"}, "train": {"group_by_length": True}},
    # bfloat16 autocast (train.bf16), with the invocation's batches / always length-grouped
    "bi-mse-bf16": {"model": {"encoder": "bi"}, "objective": {"name": "mse"}, "train": {"bf16": True}},
    "bi-mse-grouped-bf16": {
        "model": {"encoder": "bi"},
        "objective": {"name": "mse"},
        "train": {"group_by_length": True, "bf16": True},
    },
    "bi-quad-mse": {"model": {"encoder": "bi"}, "objective": {"name": "quad-mse"}},
    # --cross-head linear (the reference head on [CLS]) or sequence-classification; --pooling does not apply
    "cross-mse": {"model": {"encoder": "cross", "pooling": None}, "objective": {"name": "mse"}},
    "tri-mse": {"model": {"encoder": "tri", "head": "hadamard"}, "objective": {"name": "mse"}},
}


def base_recipe(args: argparse.Namespace, name: str, overrides: dict[str, Any], out: Path) -> dict[str, Any]:
    model = {
        "backbone": args.model,
        "pooling": args.pooling,
        "max_length": args.max_length,
        **overrides["model"],
    }
    train_spec: dict[str, Any] = {
        "batch_size": args.batch_size,
        "learning_rate": args.lr,
        "weight_decay": args.weight_decay,
        "warmup_ratio": 0.1,
        "logging_steps": 25,
        "num_threads": args.threads,
        "save_total_limit": 1,
        "group_by_length": args.group_by_length,
        **overrides.get("train", {}),
    }
    if args.max_steps:
        train_spec.update(max_steps=args.max_steps, epochs=1, eval_strategy="steps", eval_steps=args.max_steps)
    else:
        train_spec.update(epochs=args.epochs, eval_strategy="epoch")
    if model["encoder"] == "cross":
        model["head"] = args.cross_head
    objective = dict(overrides["objective"])
    if objective["name"] in ("quad", "quad-mse") and args.quad_skip_equal:
        objective["options"] = {"skip_equal": True}
    return {
        "name": name,
        "seed": args.seed,
        "output_dir": str(out / name),
        "model": model,
        "objective": objective,
        "data": {"root": args.data, "max_train_rows": args.max_train_rows, "equal_labels": args.equal_labels},
        "labels": {"scale": "minmax", "low": 1.0, "high": 5.0},
        "train": train_spec,
    }


def run_finesim(args: argparse.Namespace, name: str, out: Path) -> dict[str, Any]:
    recipe = recipe_from_dict(base_recipe(args, name, RUNS[name], out), source=f"benchmark:{name}")
    timer = StepTimer()
    started = time.perf_counter()
    result = train(recipe, resume=False, callbacks=[timer])
    wall = time.perf_counter() - started
    m = result.metrics
    evals = [
        {"step": e["step"], "epoch": e.get("epoch"), "spearman": e["eval_validation_spearman"]}
        for e in m["log_history"]
        if "eval_validation_spearman" in e
    ]
    return {
        "recipe": recipe.to_dict(),
        "validation_spearman": m["validation"]["spearman"],
        "validation_pearson": m["validation"]["pearson"],
        "evaluations": evals,
        "best_checkpoint_metric": m["best_metric"],
        "steps": m["global_steps"],
        "epochs": m["epochs"],
        "train_rows_seen": m["train_rows_seen"],
        "pairing": m["data"].get("pairing"),
        "wall_seconds": wall,
        "step_seconds": timer.seconds,
        # every step of the run was timed (no resume), so the rows seen are the timed rows
        "train_rows_per_second": m["train_rows_seen"] / timer.seconds if timer.seconds else None,
        "trainer_runtime_seconds": m["train_runtime_seconds"],
    }


def run_baseline(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Plain sentence-transformers: CosineSimilarityLoss on the same (s, c) text-pair rows, no finesim."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers import SentenceTransformerTrainingArguments as Args
    from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss

    from finesim.data.csts import read_csts
    from finesim.models.hub import resolve_model_path
    from finesim.paths import data_root

    torch.manual_seed(args.seed)
    rows, _ = read_csts(data_root(args.data) / "csts" / "train.csv")
    if args.max_train_rows:
        rows = rows.select(range(min(args.max_train_rows, len(rows))))
    ds = Dataset.from_dict(
        {
            "sentence1": [[s, c] for s, c in zip(rows["sentence1"], rows["condition"])],
            "sentence2": [[s, c] for s, c in zip(rows["sentence2"], rows["condition"])],
            "label": [(y - 1.0) / 4.0 for y in rows["label"]],
        }
    )
    model = SentenceTransformer(resolve_model_path(args.model))
    model.max_seq_length = args.max_length
    steps = args.baseline_steps or args.max_steps
    targs = Args(
        output_dir=str(out / "baseline"),
        max_steps=steps or -1,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        weight_decay=args.weight_decay,
        warmup_steps=0.1,  # fraction of the steps (transformers 5)
        lr_scheduler_type="linear",
        max_grad_norm=0.0,
        seed=args.seed,
        data_seed=args.seed,
        save_strategy="no",
        eval_strategy="no",
        logging_steps=25,
        report_to="none",
    )
    timer = StepTimer()
    trainer = SentenceTransformerTrainer(
        model=model, args=targs, train_dataset=ds, loss=CosineSimilarityLoss(model), callbacks=[timer]
    )
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    seen = rows_seen(timer.steps, examples=len(ds), per_step=args.batch_size)
    return {
        "description": "SentenceTransformerTrainer + CosineSimilarityLoss on ([s1,c], [s2,c], (y-1)/4) rows, "
        "random batches",
        "steps": timer.steps,
        "train_rows_seen": seen,
        "wall_seconds": wall,
        "step_seconds": timer.seconds,
        "train_rows_per_second": seen / timer.seconds if timer.seconds else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=None, help="data root (default $FINESIM_DATA or ../shared/data)")
    p.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    p.add_argument(
        "--runs",
        default="baseline,bi-mse,bi-quad-mse,cross-mse,tri-mse",
        help=f"comma-separated, in order: baseline, {', '.join(RUNS)}",
    )
    p.add_argument("--epochs", type=float, default=3.0, help="epochs per run (default 3)")
    p.add_argument("--max-steps", type=int, default=0, help="fixed step budget per run (0: use --epochs)")
    p.add_argument("--baseline-steps", type=int, default=None, help="baseline step budget (default: the runs' budget)")
    p.add_argument("--max-train-rows", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--pooling", default="mean", help="bi- and tri-encoder pooling: mean, cls, lasttoken, ...")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--group-by-length",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="length-grouped batches in the finesim runs (default on; the baseline always uses random batches)",
    )
    p.add_argument(
        "--equal-labels",
        choices=("keep", "drop", "error"),
        default="keep",
        help="condition pairs whose two labels tie, for Quad+MSE (data.equal_labels; keep = the reference)",
    )
    p.add_argument(
        "--quad-skip-equal",
        action="store_true",
        help="keep tied pairs for the MSE term but leave them out of Quad's margin (objective option skip_equal)",
    )
    p.add_argument(
        "--cross-head",
        choices=("linear", "sequence-classification"),
        default="linear",
        help="cross-encoder head (model.head): the C-STS reference's linear head on [CLS], or transformers' own",
    )
    p.add_argument("--work", default=None, help="folder for run outputs (default: a temporary folder)")
    p.add_argument(
        "--output", default="benchmarks/results/csts_train.json", help="results JSON (rewritten after every run)"
    )
    args = p.parse_args(argv)
    names = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [n for n in names if n != "baseline" and n not in RUNS]
    if unknown:
        p.error(f"unknown run(s) {unknown}; choose from baseline, {', '.join(RUNS)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    work = Path(args.work or tempfile.mkdtemp(prefix="finesim-csts-bench-"))
    from finesim.paths import data_root

    root = data_root(args.data)
    budget = (
        f"{args.max_steps} optimizer steps per run (batch {args.batch_size})"
        if args.max_steps
        else f"{args.epochs:g} epochs per run (batch {args.batch_size})"
    )
    report: dict[str, Any] = {
        "kind": "finesim-benchmark-csts-train",
        "command": " ".join(sys.argv),
        "budget": budget,
        "baseline_budget": f"{args.baseline_steps} optimizer steps (batch {args.batch_size})"
        if args.baseline_steps
        else budget,
        "batches": "finesim runs: "
        + ("length-grouped" if args.group_by_length else "random")
        + " (bi-mse-grouped: always length-grouped); baseline: random (plain sentence-transformers)",
        "settings": {k: v for k, v in vars(args).items() if k not in ("output",)},
        "data": {
            "train": str(root / "csts" / "train.csv"),
            "train_sha256": file_sha256(root / "csts" / "train.csv"),
            "validation": str(root / "csts" / "validation.csv"),
            "validation_sha256": file_sha256(root / "csts" / "validation.csv"),
        },
        "metric": "validation Spearman x100 (rows labelled -1 skipped), best checkpoint restored",
        "throughput": "C-STS (s1, s2, c) pairs (= training rows) per second of summed training-step wall time "
        "(evaluation excluded); each epoch's rows counted once",
        "runs": {},
        "environment": environment_record(),
    }
    for name in names:
        logging.info("benchmark run %s (%s)", name, budget if name != "baseline" else report["baseline_budget"])
        report["runs"][name] = run_baseline(args, work) if name == "baseline" else run_finesim(args, name, work)
        base = report["runs"].get("baseline", {}).get("train_rows_per_second")
        bi = report["runs"].get("bi-mse", {}).get("train_rows_per_second")
        if base and bi:
            report["bi_vs_baseline_throughput_ratio"] = bi / base
        grouped = report["runs"].get("bi-mse-grouped", {}).get("train_rows_per_second")
        if base and grouped:
            report["bi_grouped_vs_baseline_throughput_ratio"] = grouped / base
        report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_json_atomic(args.output, portable(report, path_roots(root)))
        logging.info("wrote %s", args.output)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

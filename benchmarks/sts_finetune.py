"""Stage-2 STS fine-tuning of all-MiniLM-L6-v2 with different objectives, evaluated on the seven STS tasks.

Objectives (same seeds, data, batch size, epochs, learning rate and checkpoint selection):
  mse-cosine      MSE on the cosine (sentence-transformers CosineSimilarityLoss, labels / 5)
  cosent          CoSENT
  smooth-k2       Siamese regression head + Smooth K2 (STS-regression paper), optionally after a head-only
                  stage 1 on SNLI regression pairs (encoder frozen; contradiction 0, neutral 1, entailment 2)
  mse-regression  the same head and the same two stages with MSE (the paper's baseline for Smooth K2)
  pearson         1 - Pearson r (Pcc-tuning stage 2)
Training data: STS-B train + SICK-R train (rescaled to 0-5), pairs that occur in any evaluation set removed.
Checkpoint selection (the papers' protocol): with --eval-steps N the model is scored on STS-B dev every N steps
and the checkpoint with the best dev Spearman is kept (0: the last step). --seeds runs every objective once per
seed and reports mean and sample standard deviation. --head-lr gives the regression head its own stage-2
learning rate (the default: the encoder's, as in the reference code).
Evaluation: Spearman x100 of the cosine, STS12-16 pooled ("all"), STS-B test, SICK-R test
(finesim.evaluation).

Run it in the background under the CPU lock, e.g.::

    flock /tmp/finesim-cpu.lock nohup python benchmarks/sts_finetune.py --epochs 1 >
    /tmp/sts_finetune.log 2>&1 &

The results file is rewritten after every objective and seed, so partial runs are kept.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch

logger = logging.getLogger("sts_finetune")
OBJECTIVES = ("mse-cosine", "cosent", "smooth-k2", "mse-regression", "pearson")
HEAD_OBJECTIVES = ("smooth-k2", "mse-regression")  # two-stage: head-only stage 1 on SNLI, then everything
DEV_NAME = "stsb_dev"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    p.add_argument("--objectives", default=",".join(OBJECTIVES), help="comma-separated objective names")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--seed", type=int, default=42, help="the seed when --seeds is not given")
    p.add_argument("--seeds", default="", help="comma-separated seeds; every objective runs once per seed")
    p.add_argument("--head-lr", type=float, default=None, help="stage-2 learning rate of the regression head")
    p.add_argument(
        "--eval-steps",
        type=int,
        default=0,
        help="score STS-B dev every N steps and keep the best checkpoint (0 = keep the last step)",
    )
    p.add_argument("--limit-train", type=int, default=0, help="use a seeded random N training pairs (0 = all)")
    p.add_argument("--sk2-k", type=float, default=3.0, help="Smooth K2 k for stage 2")
    p.add_argument("--sk2-x0", type=float, default=0.2, help="Smooth K2 x0 for stage 2")
    p.add_argument("--stage1-nli-pairs", type=int, default=2000, help="SNLI pairs for the head-only stage 1 (0 = skip)")
    p.add_argument("--stage1-lr", type=float, default=1e-3)
    p.add_argument("--stage1-k", type=float, default=2.0)
    p.add_argument("--stage1-x0", type=float, default=0.25)
    p.add_argument("--skip-baseline", action="store_true", help="do not re-evaluate the untuned model")
    p.add_argument("--tasks", default="sts", help="evaluation tasks or group")
    p.add_argument("--eval-batch-size", type=int, default=64)
    p.add_argument(
        "--eval-max-pairs",
        type=int,
        default=0,
        help="score a fixed random sample of at most N pairs per task (same for every model; 0 = all)",
    )
    p.add_argument("--dev-max-pairs", type=int, default=0, help="score only the first N STS-B dev pairs (0 = all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data", default=None, help="data root (default: $FINESIM_DATA or ../shared/data)")
    p.add_argument("--output", default="benchmarks/results/sts_finetune.json")
    p.add_argument("--work-dir", default="/tmp/finesim-sts-finetune")
    return p.parse_args(argv)


def seeds_of(args: argparse.Namespace) -> list[int]:
    """``--seeds`` as a list, or ``[--seed]``."""
    return [int(x) for x in args.seeds.split(",") if x.strip()] if args.seeds.strip() else [args.seed]


def train_args(
    args: argparse.Namespace, out: Path, *, lr: float, epochs: float, seed: int, select: bool, extra: dict | None = None
) -> Any:
    from sentence_transformers import SentenceTransformerTrainingArguments

    steps = {"save_strategy": "no"}
    if select:  # score STS-B dev every N steps, keep the best checkpoint (restored at the end)
        steps = {
            "eval_strategy": "steps",
            "eval_steps": args.eval_steps,
            "save_strategy": "steps",
            "save_steps": args.eval_steps,
            "save_total_limit": 1,
            "load_best_model_at_end": True,
            "metric_for_best_model": f"eval_{DEV_NAME}_spearman",
            "greater_is_better": True,
        }
    return SentenceTransformerTrainingArguments(
        output_dir=str(out),
        num_train_epochs=epochs,
        per_device_train_batch_size=args.batch_size,
        learning_rate=lr,
        warmup_steps=float(args.warmup_ratio),  # a float below 1 is a fraction of the steps (transformers 5)
        weight_decay=args.weight_decay,
        lr_scheduler_type="linear",
        seed=seed,
        data_seed=seed,
        report_to=[],
        logging_steps=50,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=False,
        **steps,
        **(extra or {}),
    )


def dev_evaluator(root: Path, max_pairs: int = 0) -> Any:
    """STS-B dev as the checkpoint-selection evaluator (cosine Spearman x100)."""
    from finesim.data.sts import read_stsb
    from finesim.training.evaluator import ConditionalSimilarityEvaluator

    dev, _ = read_stsb(root / "sts" / "STSBenchmark" / "sts-dev.csv")
    if max_pairs:
        dev = dev.select(range(min(max_pairs, len(dev))))
    return ConditionalSimilarityEvaluator(
        dev["sentence1"], dev["sentence2"], None, dev["label"], encoder="bi", name=DEV_NAME
    )


def fit(model: Any, loss: Any, dataset: Any, targs: Any, evaluator: Any = None) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformerTrainer

    trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=dataset, loss=loss, evaluator=evaluator)
    start = time.perf_counter()
    out = trainer.train()
    seconds = time.perf_counter() - start
    history = trainer.state.log_history
    record: dict[str, Any] = {
        "seconds": round(seconds, 1),
        "steps": int(out.global_step),
        "train_loss": float(out.training_loss),
        "logged_losses": [h["loss"] for h in history if "loss" in h],
    }
    key = f"eval_{DEV_NAME}_spearman"
    if evaluator is not None:
        best = trainer.state.best_model_checkpoint
        record["selection"] = {
            "metric": "STS-B dev Spearman x100 (cosine)",
            "eval_steps": targs.eval_steps,
            "dev_history": [[h["step"], round(h[key], 2)] for h in history if key in h],
            "best_dev_spearman": None if trainer.state.best_metric is None else round(trainer.state.best_metric, 2),
            "best_step": int(best.rsplit("-", 1)[-1]) if best else None,
            "restored_dev_spearman": round(evaluator.compute(model)["spearman"], 2),
        }
    shutil.rmtree(targs.output_dir, ignore_errors=True)  # checkpoints are only needed for the selection
    return record


def evaluate_model(model: Any, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from finesim.evaluation import EmbeddingScorer, default_registry, run_tasks, spearman

    tasks = default_registry().resolve(args.tasks)
    start = time.perf_counter()
    if args.eval_max_pairs:
        # A fixed sample per task (seed 0), identical for every model, so differences are paired.
        per_task = {}
        scorer = EmbeddingScorer(model, batch_size=args.eval_batch_size)
        for task in tasks:
            ds, _ = task.load(root)
            if len(ds) > args.eval_max_pairs:
                ds = ds.shuffle(seed=0).select(range(args.eval_max_pairs))
            pred = scorer.score(ds["sentence1"], ds["sentence2"])
            per_task[task.name] = round(spearman(pred, ds["label"]), 2)
            logger.info("%s (%d pairs): %.2f", task.name, len(ds), per_task[task.name])
    else:
        results = run_tasks(model, tasks, root, batch_size=args.eval_batch_size, hash_files=False)
        per_task = {r.task: round(r.main_score, 2) for r in results}
    return {
        "tasks": per_task,
        "average": round(float(np.mean(list(per_task.values()))), 2),
        "seconds": round(time.perf_counter() - start, 1),
    }


# benchmark names -> objective names ("mse-cosine" is the C-STS "mse" objective: MSE of the cosine against y/5)
OBJECTIVE_NAMES = {"mse-cosine": "mse"}


def objective_name(name: str) -> str:
    """The objective behind a benchmark name."""
    return OBJECTIVE_NAMES.get(name, name)


def stage_options(name: str, args: argparse.Namespace, stage: int) -> dict[str, Any]:
    """Loss options of a head objective in stage 1 (SNLI, labels 0-2) or stage 2 (STS, labels 0-5)."""
    label_range = (0.0, 2.0) if stage == 1 else (0.0, 5.0)
    if name == "smooth-k2":
        if stage == 1:
            return {"k": args.stage1_k, "x0": args.stage1_x0, "label_range": label_range}
        return {"k": args.sk2_k, "x0": args.sk2_x0, "label_range": label_range}
    return {"label_range": label_range}


def run_objective(
    name: str, args: argparse.Namespace, root: Path, train_ds: Any, label_range: tuple[float, float], seed: int
) -> dict[str, Any]:
    from datasets import Dataset

    from finesim.data.sts_training import nli_regression_pairs
    from finesim.models import load_sentence_model
    from finesim.models.regression_head import drop_regression_head, freeze_encoder, unfreeze_all
    from finesim.training.objectives import build_loss, prepare_labels
    from finesim.training.objectives.sts import head_training_args

    torch.manual_seed(seed)
    model = load_sentence_model(args.model, max_length=args.max_length, device="cpu")
    record: dict[str, Any] = {"objective": name, "seed": seed}
    work = Path(args.work_dir) / name / str(seed)
    extra = None
    if name in HEAD_OBJECTIVES:
        if args.stage1_nli_pairs > 0:
            nli, _ = nli_regression_pairs(root / "nli" / "SNLI")
            nli = nli.shuffle(seed=seed).select(range(min(args.stage1_nli_pairs, len(nli))))
            stage1_loss = build_loss(name, model, {**stage_options(name, args, 1), "seed": seed})
            frozen = freeze_encoder(model)
            logger.info("stage 1: head only (%d encoder parameters frozen) on %d SNLI pairs", frozen, len(nli))
            targs = train_args(args, work / "stage1", lr=args.stage1_lr, epochs=1, seed=seed, select=False)
            s1 = fit(model, stage1_loss, nli, targs)
            unfreeze_all(model)
            record["stage1"] = {
                **s1,
                "pairs": len(nli),
                "options": stage_options(name, args, 1),
                "lr": args.stage1_lr,
                "frozen_parameters": frozen,
            }
        options = stage_options(name, args, 2)
        loss = build_loss(name, model, {**options, "seed": seed})
        record["options"] = {**options, "clamp": "lower", "head_lr": args.head_lr}
        extra = head_training_args(model, loss, {"head_lr": args.head_lr})
    else:
        loss = build_loss(objective_name(name), model)
    labels = prepare_labels(objective_name(name), train_ds["label"], label_range)
    ds = Dataset.from_dict({"sentence1": train_ds["sentence1"], "sentence2": train_ds["sentence2"], "label": labels})
    select = args.eval_steps > 0
    targs = train_args(args, work / "stage2", lr=args.lr, epochs=args.epochs, seed=seed, select=select, extra=extra)
    record["train"] = fit(model, loss, ds, targs, dev_evaluator(root, args.dev_max_pairs) if select else None)
    if drop_regression_head(model) is not None:
        record["head_dropped_for_evaluation"] = True
    record["eval"] = evaluate_model(model, args, root)
    record["wall_seconds"] = round(record["train"]["seconds"] + record.get("stage1", {}).get("seconds", 0.0), 1)
    return record


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and sample standard deviation (ddof 1; 0 for one seed) of every task and of the average."""

    def stats(values: list[float]) -> dict[str, float]:
        arr = np.asarray(values, dtype=np.float64)
        return {"mean": round(float(arr.mean()), 2), "std": round(float(arr.std(ddof=1)) if arr.size > 1 else 0.0, 2)}

    tasks = list(runs[0]["eval"]["tasks"])
    return {
        "seeds": [r["seed"] for r in runs],
        "tasks": {t: stats([r["eval"]["tasks"][t] for r in runs]) for t in tasks},
        "average": stats([r["eval"]["average"] for r in runs]),
        "wall_seconds": stats([r["wall_seconds"] for r in runs]),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    from finesim.data.sts_training import merged_sts_training_set
    from finesim.models import load_sentence_model
    from finesim.paths import data_root
    from finesim.results import environment_record, path_roots, portable, write_json_atomic
    from finesim.training.objectives import get_objective

    names = [n.strip() for n in args.objectives.split(",") if n.strip()]
    for n in names:
        get_objective(objective_name(n))
    root = data_root(args.data)
    train_ds, data_report = merged_sts_training_set(root)
    if args.limit_train:  # shuffle first: the merged set is STS-B followed by SICK-R
        train_ds = train_ds.shuffle(seed=args.seed).select(range(min(args.limit_train, len(train_ds))))
    label_range = (0.0, 5.0)
    seeds = seeds_of(args)
    selection = (
        f"best STS-B dev Spearman, scored every {args.eval_steps} steps" if args.eval_steps > 0 else "the last step"
    )
    payload: dict[str, Any] = {
        "benchmark": "sts_finetune",
        "description": "stage-2 fine-tuning, filtered STS-B + SICK-R train; cosine Spearman x100",
        "environment": environment_record(),
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "config": {k: v for k, v in vars(args).items()},
        "budget": f"{args.epochs:g} epoch(s), batch {args.batch_size}, lr {args.lr:g}"
        + (f" (head {args.head_lr:g})" if args.head_lr is not None else "")
        + f", seeds {','.join(map(str, seeds))}, {len(train_ds)} training pairs, same for every objective; "
        f"checkpoint: {selection}; evaluation on "
        + (f"a fixed sample of at most {args.eval_max_pairs} pairs per task" if args.eval_max_pairs else "all pairs"),
        "training_data": {**data_report, "pairs_used": len(train_ds)},
        "reference_untuned_average": 78.87,
        "results": {},
    }
    out = Path(args.output)
    if not args.skip_baseline:
        torch.manual_seed(args.seed)
        base = load_sentence_model(args.model, max_length=args.max_length, device="cpu")
        payload["results"]["untuned"] = {"objective": "none", "eval": evaluate_model(base, args, root)}
        if args.eval_steps > 0:
            dev = dev_evaluator(root, args.dev_max_pairs).compute(base)["spearman"]
            payload["results"]["untuned"]["stsb_dev_spearman"] = round(dev, 2)
        write_json_atomic(out, portable(payload, path_roots(root)))
        del base
    for name in names:
        runs: list[dict[str, Any]] = []
        for seed in seeds:
            logger.info("objective %s, seed %d", name, seed)
            runs.append(run_objective(name, args, root, train_ds, label_range, seed))
            summary = summarize(runs)
            base_avg = payload["results"].get("untuned", {}).get("eval", {}).get("average", 78.87)
            payload["results"][name] = {
                "objective": name,
                "runs": runs,
                "summary": summary,
                # the means, in the layout of a single run (tables, ranking)
                "eval": {
                    "tasks": {t: v["mean"] for t, v in summary["tasks"].items()},
                    "average": summary["average"]["mean"],
                },
                "delta_vs_untuned": round(summary["average"]["mean"] - base_avg, 2),
            }
            write_json_atomic(out, portable(payload, path_roots(root)))
        rec = payload["results"][name]
        logger.info(
            "%s: average %.2f +- %.2f (%+.2f)",
            name,
            rec["eval"]["average"],
            summary["average"]["std"],
            rec["delta_vs_untuned"],
        )
    ranked = sorted(((r["eval"]["average"], n) for n, r in payload["results"].items()), reverse=True)
    payload["ranking"] = [{"objective": n, "average": a} for a, n in ranked]
    write_json_atomic(out, portable(payload, path_roots(root)))
    print(
        f"{'objective':<16}"
        + "".join(f"{t:>14}" for t in next(iter(payload["results"].values()))["eval"]["tasks"])
        + f"{'avg':>8}{'std':>7}"
    )
    for n, r in payload["results"].items():
        std = r.get("summary", {}).get("average", {}).get("std")
        print(
            f"{n:<16}"
            + "".join(f"{v:>14.2f}" for v in r["eval"]["tasks"].values())
            + f"{r['eval']['average']:>8.2f}"
            + (f"{std:>7.2f}" if std is not None else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

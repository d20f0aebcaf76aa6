"""Stage-2 STS fine-tuning of all-MiniLM-L6-v2 with different objectives, evaluated on the seven STS tasks.

Objectives (same seed, data, batch size, epochs and learning rate):
  mse-cosine  MSE on the cosine (sentence-transformers CosineSimilarityLoss, labels / 5)
  cosent      CoSENT
  smooth-k2   Siamese regression head + Smooth K2 (STS-regression paper), optionally after a head-only stage 1
              on SNLI regression pairs (encoder frozen; contradiction 0, neutral 1, entailment 2)
  pearson     1 - Pearson r (Pcc-tuning stage 2)
Training data: STS-B train + SICK-R train (rescaled to 0-5), pairs that occur in any evaluation set removed.
Evaluation: Spearman x100 of the cosine, STS12-16 pooled ("all"), STS-B test, SICK-R test
(finesim.evaluation).

Run it in the background under the CPU lock, e.g.::

    flock /tmp/finesim-cpu.lock nohup python benchmarks/sts_finetune.py --epochs 1 >
    /tmp/sts_finetune.log 2>&1 &

The results file is rewritten after every objective, so partial runs are kept.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch

logger = logging.getLogger("sts_finetune")
OBJECTIVES = ("mse-cosine", "cosent", "smooth-k2", "pearson")


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
    p.add_argument("--seed", type=int, default=42)
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
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data", default=None, help="data root (default: $FINESIM_DATA or ../shared/data)")
    p.add_argument("--output", default="benchmarks/results/sts_finetune.json")
    p.add_argument("--work-dir", default="/tmp/finesim-sts-finetune")
    return p.parse_args(argv)


def train_args(args: argparse.Namespace, out: Path, *, lr: float, epochs: float, seed: int) -> Any:
    from sentence_transformers import SentenceTransformerTrainingArguments

    return SentenceTransformerTrainingArguments(
        output_dir=str(out),
        num_train_epochs=epochs,
        per_device_train_batch_size=args.batch_size,
        learning_rate=lr,
        warmup_ratio=args.warmup_ratio,
        weight_decay=args.weight_decay,
        lr_scheduler_type="linear",
        seed=seed,
        data_seed=seed,
        save_strategy="no",
        report_to=[],
        logging_steps=50,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=False,
    )


def fit(model: Any, loss: Any, dataset: Any, targs: Any) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformerTrainer

    trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=dataset, loss=loss)
    start = time.perf_counter()
    out = trainer.train()
    seconds = time.perf_counter() - start
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {
        "seconds": round(seconds, 1),
        "steps": int(out.global_step),
        "train_loss": float(out.training_loss),
        "logged_losses": losses,
    }


def evaluate_model(model: Any, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from finesim.evaluation import EmbeddingScorer, default_registry, evaluate, spearman

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
        results = evaluate(model, tasks, root, batch_size=args.eval_batch_size, hash_files=False)
        per_task = {r.task: round(r.main_score, 2) for r in results}
    return {
        "tasks": per_task,
        "average": round(float(np.mean(list(per_task.values()))), 2),
        "seconds": round(time.perf_counter() - start, 1),
    }


def run_objective(
    name: str, args: argparse.Namespace, root: Path, train_ds: Any, label_range: tuple[float, float]
) -> dict[str, Any]:
    from datasets import Dataset

    from finesim.data.sts_training import nli_regression_pairs
    from finesim.losses.sts_objectives import build_sts_loss, prepare_labels
    from finesim.models import load_sentence_model
    from finesim.models.regression_head import drop_regression_head, freeze_encoder, unfreeze_all

    torch.manual_seed(args.seed)
    model = load_sentence_model(args.model, max_length=args.max_length, device="cpu")
    record: dict[str, Any] = {"objective": name}
    work = Path(args.work_dir) / name
    if name == "smooth-k2":
        options = {"k": args.sk2_k, "x0": args.sk2_x0, "label_range": label_range}
        if args.stage1_nli_pairs > 0:
            nli, _ = nli_regression_pairs(root)
            nli = nli.shuffle(seed=args.seed).select(range(min(args.stage1_nli_pairs, len(nli))))
            stage1_loss = build_sts_loss(
                "smooth-k2",
                model,
                {"k": args.stage1_k, "x0": args.stage1_x0, "label_range": (0.0, 2.0)},
                seed=args.seed,
            )
            frozen = freeze_encoder(model)
            logger.info("stage 1: head only (%d encoder parameters frozen) on %d SNLI pairs", frozen, len(nli))
            s1 = fit(
                model,
                stage1_loss,
                nli,
                train_args(args, work / "stage1", lr=args.stage1_lr, epochs=1, seed=args.seed),
            )
            unfreeze_all(model)
            record["stage1"] = {
                **s1,
                "pairs": len(nli),
                "k": args.stage1_k,
                "x0": args.stage1_x0,
                "lr": args.stage1_lr,
                "frozen_parameters": frozen,
            }
        loss = build_sts_loss("smooth-k2", model, options, seed=args.seed)
        record["options"] = {**options, "clamp": "lower"}
    else:
        loss = build_sts_loss(name, model, seed=args.seed)
    labels = prepare_labels(name, train_ds["label"], label_range)
    ds = Dataset.from_dict({"sentence1": train_ds["sentence1"], "sentence2": train_ds["sentence2"], "label": labels})
    record["train"] = fit(
        model, loss, ds, train_args(args, work / "stage2", lr=args.lr, epochs=args.epochs, seed=args.seed)
    )
    if drop_regression_head(model) is not None:
        record["head_dropped_for_evaluation"] = True
    record["eval"] = evaluate_model(model, args, root)
    record["wall_seconds"] = round(record["train"]["seconds"] + record.get("stage1", {}).get("seconds", 0.0), 1)
    return record


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    from finesim.data.sts_training import merged_sts_training_set
    from finesim.losses.sts_objectives import get_sts_objective
    from finesim.models import load_sentence_model
    from finesim.paths import data_root
    from finesim.results import environment_record, write_json_atomic

    names = [n.strip() for n in args.objectives.split(",") if n.strip()]
    for n in names:
        get_sts_objective(n)
    root = data_root(args.data)
    train_ds, data_report = merged_sts_training_set(root)
    if args.limit_train:  # shuffle first: the merged set is STS-B followed by SICK-R
        train_ds = train_ds.shuffle(seed=args.seed).select(range(min(args.limit_train, len(train_ds))))
    label_range = (0.0, 5.0)
    payload: dict[str, Any] = {
        "benchmark": "sts_finetune",
        "description": "stage-2 fine-tuning, filtered STS-B + SICK-R train; cosine Spearman x100",
        "environment": environment_record(),
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "config": {k: v for k, v in vars(args).items()},
        "budget": f"{args.epochs:g} epoch(s), batch {args.batch_size}, lr {args.lr:g}, seed {args.seed}, "
        f"{len(train_ds)} training pairs, same for every objective; evaluation on "
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
        write_json_atomic(out, payload)
        del base
    for name in names:
        logger.info("objective %s", name)
        rec = run_objective(name, args, root, train_ds, label_range)
        base_avg = payload["results"].get("untuned", {}).get("eval", {}).get("average", 78.87)
        rec["delta_vs_untuned"] = round(rec["eval"]["average"] - base_avg, 2)
        payload["results"][name] = rec
        write_json_atomic(out, payload)
        logger.info("%s: average %.2f (%+.2f)", name, rec["eval"]["average"], rec["delta_vs_untuned"])
    ranked = sorted(((r["eval"]["average"], n) for n, r in payload["results"].items()), reverse=True)
    payload["ranking"] = [{"objective": n, "average": a} for a, n in ranked]
    write_json_atomic(out, payload)
    print(
        f"{'objective':<14}"
        + "".join(f"{t:>14}" for t in next(iter(payload["results"].values()))["eval"]["tasks"])
        + f"{'avg':>8}"
    )
    for n, r in payload["results"].items():
        print(
            f"{n:<14}" + "".join(f"{v:>14.2f}" for v in r["eval"]["tasks"].values()) + f"{r['eval']['average']:>8.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""NLI as regression (STS-regression paper, section 4.1, Table 1) at CPU scale.

Trains one model per objective on SNLI pairs (contradiction 0, neutral 1, entailment 2; the regression head
Linear([u; v; |u-v|]) -> 1) and, for the SBERT baseline, cross-entropy over the three classes (head ->
3), then
drops the head and scores the cosine on the STS tasks. Same seed, data, batch size, epochs and learning
rate for
every objective. Objectives: l1, translated-relu, mse-regression, smooth-k2, softmax.

The paper trains BERT/RoBERTa-base on SNLI + MNLI (~570k pairs); the data here are SNLI dev + test
(19,666 pairs)
and the default encoder is all-MiniLM-L6-v2, which is already contrastively trained, so this measures how each
loss moves an existing embedding space rather than reproducing Table 1.

    flock /tmp/finesim-cpu.lock nohup python benchmarks/nli_regression.py --limit-train 2000 >
    /tmp/nli.log 2>&1 &
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sts_finetune import evaluate_model, fit, train_args

logger = logging.getLogger("nli_regression")
OBJECTIVES = ("l1", "translated-relu", "mse-regression", "smooth-k2", "softmax")
# the paper's BERT-base settings (Table 2)
PAPER_OPTIONS = {"translated-relu": {"k": 2.5, "x0": 0.25}, "smooth-k2": {"k": 2.0, "x0": 0.25}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    p.add_argument("--objectives", default=",".join(OBJECTIVES))
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--limit-train", type=int, default=0, help="a seeded random N SNLI pairs (0 = all 19,666)")
    p.add_argument("--clamp", default="lower", choices=("none", "lower", "both"))
    p.add_argument("--tasks", default="sts")
    p.add_argument("--eval-batch-size", type=int, default=64)
    p.add_argument("--eval-max-pairs", type=int, default=0)
    p.add_argument("--skip-baseline", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data", default=None)
    p.add_argument("--output", default="benchmarks/results/nli_regression.json")
    p.add_argument("--work-dir", default="/tmp/finesim-nli-regression")
    return p.parse_args(argv)


def run(name: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from datasets import Dataset

    from finesim.data.sts_training import nli_classification_pairs, nli_regression_pairs
    from finesim.models import load_sentence_model
    from finesim.models.regression_head import drop_regression_head
    from finesim.training.objectives import build_loss

    torch.manual_seed(args.seed)
    model = load_sentence_model(args.model, max_length=args.max_length, device="cpu")
    pairs, _ = (nli_classification_pairs if name == "softmax" else nli_regression_pairs)(root / "nli" / "SNLI")
    if args.limit_train:
        pairs = pairs.shuffle(seed=args.seed).select(range(min(args.limit_train, len(pairs))))
    ds = Dataset.from_dict({"sentence1": pairs["premise"], "sentence2": pairs["hypothesis"], "label": pairs["label"]})
    options: dict[str, Any] = dict(PAPER_OPTIONS.get(name, {}))
    if name != "softmax":
        options.update(clamp=args.clamp, label_range=(0.0, 2.0))
    loss = build_loss(name, model, {**options, "seed": args.seed})
    record: dict[str, Any] = {"objective": name, "options": options, "pairs": len(ds)}
    record["train"] = fit(
        model,
        loss,
        ds,
        train_args(args, Path(args.work_dir) / name, lr=args.lr, epochs=args.epochs, seed=args.seed),
    )
    drop_regression_head(model)
    record["eval"] = evaluate_model(model, args, root)
    return record


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    from finesim.models import load_sentence_model
    from finesim.paths import data_root
    from finesim.results import environment_record, path_roots, portable, write_json_atomic
    from finesim.training.objectives import get_objective

    names = [n.strip() for n in args.objectives.split(",") if n.strip()]
    for n in names:
        get_objective(n)
    root = data_root(args.data)
    payload: dict[str, Any] = {
        "benchmark": "nli_regression",
        "description": "SNLI as regression (0/1/2) or 3-class CE; head dropped; cosine Spearman x100",
        "environment": environment_record(),
        "config": vars(args),
        "results": {},
    }
    out = Path(args.output)
    if not args.skip_baseline:
        base = load_sentence_model(args.model, max_length=args.max_length, device="cpu")
        payload["results"]["untuned"] = {"objective": "none", "eval": evaluate_model(base, args, root)}
        write_json_atomic(out, portable(payload, path_roots(root)))
    for name in names:
        logger.info("objective %s", name)
        payload["results"][name] = run(name, args, root)
        write_json_atomic(out, portable(payload, path_roots(root)))
    for n, r in payload["results"].items():
        print(f"{n:<16}" + "".join(f"{v:>9.2f}" for v in r["eval"]["tasks"].values()) + f"{r['eval']['average']:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

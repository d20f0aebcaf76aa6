"""Benchmark: `finesim evaluate` on all-MiniLM-L6-v2 over the seven STS tasks and C-STS validation.

In the same run, a plain sentence-transformers baseline scores the same pairs the naive way (encode every
sentence1 and sentence2 list as given, no de-duplication) so speed and scores compare side by side.

    python benchmarks/evaluate_minilm.py [--data PATH] [--output benchmarks/results/evaluate_minilm.json]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from finesim.evaluation import default_registry, evaluate_task
from finesim.evaluation.metrics import spearman
from finesim.models import load_sentence_model
from finesim.paths import data_root
from finesim.results import environment_record, write_json_atomic

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def plain_baseline(model, task, root: Path, batch_size: int) -> dict:
    """Score a task with plain sentence-transformers calls: encode both columns, cosine, Spearman."""
    dataset, _ = task.load(root)
    s1, s2 = dataset["sentence1"], dataset["sentence2"]
    if task.conditional and task.condition_mode == "pair":
        s1 = list(zip(s1, dataset["condition"]))
        s2 = list(zip(s2, dataset["condition"]))
    start, cpu_start = time.perf_counter(), time.process_time()
    a = model.encode(s1, batch_size=batch_size, convert_to_tensor=True)
    b = model.encode(s2, batch_size=batch_size, convert_to_tensor=True)
    scores = torch.nn.functional.cosine_similarity(a, b).cpu().numpy()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {
        "spearman": spearman(scores, np.asarray(dataset["label"])),
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "texts_encoded": len(s1) + len(s2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=None)
    parser.add_argument("--tasks", default="all")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="benchmarks/results/evaluate_minilm.json")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    root = data_root(args.data)
    model = load_sentence_model(MODEL)
    tasks = default_registry().resolve(args.tasks)
    rows = {}
    for task in tasks:
        print(f"{task.name} ...", flush=True)
        cpu_start = time.process_time()
        ours = evaluate_task(task, model, root, batch_size=args.batch_size, seed=args.seed, hash_files=False)
        ours_cpu = time.process_time() - cpu_start
        base = plain_baseline(model, task, root, args.batch_size)
        rows[task.name] = {
            "pairs": ours.pairs,
            "finesim": {
                "spearman": ours.spearman,
                "pearson": ours.pearson,
                "main_score": ours.main_score,
                "seconds": ours.seconds,
                "cpu_seconds_incl_loading": round(ours_cpu, 3),
                "texts_encoded": ours.texts_encoded,
                "pairs_per_second": round(ours.pairs / ours.seconds, 1),
            },
            "plain_sentence_transformers": {
                **base,
                "pairs_per_second": round(ours.pairs / base["seconds"], 1),
            },
        }
        print(
            f"  finesim {ours.main_score:.2f} in {ours.seconds:.1f}s ({ours.texts_encoded} texts) | "
            f"plain ST {base['spearman']:.2f} in {base['seconds']:.1f}s ({base['texts_encoded']} texts)"
        )
    ours_s = sum(r["finesim"]["seconds"] for r in rows.values())
    base_s = sum(r["plain_sentence_transformers"]["seconds"] for r in rows.values())
    pairs = sum(r["pairs"] for r in rows.values())
    ours_cpu_s = sum(r["finesim"]["cpu_seconds_incl_loading"] for r in rows.values())
    base_cpu_s = sum(r["plain_sentence_transformers"]["cpu_seconds"] for r in rows.values())
    payload = {
        "benchmark": "evaluate_minilm",
        "note": "wall seconds are sensitive to other load on the machine; cpu seconds (process time, all threads) "
        "are the steadier comparison. finesim's cpu time includes loading and validating the task files.",
        "description": "finesim evaluate vs plain sentence-transformers encoding on the same pairs",
        "model": MODEL,
        "settings": {"batch_size": args.batch_size, "seed": args.seed, "max_length": model.max_seq_length},
        "data_root": str(root),
        "environment": environment_record(),
        "tasks": rows,
        "totals": {
            "pairs": pairs,
            "finesim_seconds": round(ours_s, 2),
            "plain_seconds": round(base_s, 2),
            "finesim_pairs_per_second": round(pairs / ours_s, 1),
            "plain_pairs_per_second": round(pairs / base_s, 1),
            "speedup": round(base_s / ours_s, 2),
            "finesim_cpu_seconds": round(ours_cpu_s, 2),
            "plain_cpu_seconds": round(base_cpu_s, 2),
            "cpu_speedup": round(base_cpu_s / ours_cpu_s, 2),
            "sts_average_main_score": float(
                np.mean([rows[t]["finesim"]["main_score"] for t in rows if not t.startswith("CSTS")])
            ),
        },
    }
    write_json_atomic(args.output, payload)
    print(f"wrote {args.output}: finesim {ours_s:.1f}s vs plain {base_s:.1f}s (x{payload['totals']['speedup']})")


if __name__ == "__main__":
    main()

"""Benchmark: `finesim evaluate` on all-MiniLM-L6-v2 over the seven STS tasks and C-STS validation.

The finesim side is the real command: ``finesim evaluate`` is run in-process (``finesim.cli.main.main``) with its
default data-file SHA-256 hashing, and its results file gives model-load time and, per task, data time, encode time
and encodes/s. Then a plain sentence-transformers baseline scores the same pairs the naive way (encode every
sentence1 and sentence2 list as given, no de-duplication), so speed and scores compare side by side.

    python benchmarks/evaluate_minilm.py [--data PATH] [--tasks all] [--output benchmarks/results/evaluate_minilm.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from finesim.cli.main import main as finesim_main
from finesim.evaluation import default_registry
from finesim.evaluation.metrics import spearman
from finesim.models import load_sentence_model
from finesim.paths import data_root
from finesim.results import environment_record, path_roots, portable, write_json_atomic

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def run_finesim_evaluate(argv: list[str]) -> tuple[dict[str, Any], float, float]:
    """Run ``finesim evaluate ARGV --output TMP`` in this process; return its results file, wall and CPU seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        start, cpu_start = time.perf_counter(), time.process_time()
        code = finesim_main(["evaluate", *argv, "--output", str(out)])
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        if code != 0:
            raise SystemExit(f"finesim evaluate exited with {code}")
        return json.loads(out.read_text(encoding="utf-8")), wall, cpu


def plain_baseline(model: Any, task: Any, root: Path, batch_size: int) -> dict[str, Any]:
    """Score a task with plain sentence-transformers calls: encode both columns, cosine, Spearman."""
    dataset, _ = task.load(root)
    s1, s2 = dataset["sentence1"], dataset["sentence2"]
    if task.conditional and task.condition_mode == "pair":
        s1 = list(zip(s1, dataset["condition"]))
        s2 = list(zip(s2, dataset["condition"]))
    start, cpu_start = time.perf_counter(), time.process_time()
    a = model.encode(s1, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False)
    b = model.encode(s2, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False)
    scores = torch.nn.functional.cosine_similarity(a, b).cpu().numpy()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    encoded = len(s1) + len(s2)
    return {
        "spearman": spearman(scores, np.asarray(dataset["label"])),
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "texts_encoded": encoded,
        "encodes_per_second": round(encoded / seconds, 2),
        "pairs_per_second": round(len(dataset) / seconds, 1),
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
    argv = ["--model", MODEL, "--tasks", args.tasks, "--data", str(root)]
    argv += ["--batch-size", str(args.batch_size), "--seed", str(args.seed), "--no-progress"]
    ours, ours_wall, ours_cpu = run_finesim_evaluate(argv)

    load_start = time.perf_counter()
    model = load_sentence_model(MODEL)
    plain_load = time.perf_counter() - load_start
    rows = {}
    for task in default_registry().resolve(args.tasks):
        r = ours["results"][task.name]
        base = plain_baseline(model, task, root, args.batch_size)
        rows[task.name] = {
            "pairs": r["pairs"],
            "files": r["files"],
            "finesim": {
                "main_score": r["main_score"],
                "spearman": r["spearman"],
                "pearson": r["pearson"],
                "data_seconds": r["data_seconds"],
                "encode_seconds": r["encode_seconds"],
                "texts_encoded": r["texts_encoded"],
                "encodes_per_second": r.get("encodes_per_second"),
                "pairs_per_second": round(r["pairs"] / r["encode_seconds"], 1),
            },
            "plain_sentence_transformers": base,
        }
        print(
            f"{task.name}: finesim {r['main_score']:.2f}, {r['texts_encoded']} texts in {r['encode_seconds']:.1f}s | "
            f"plain ST {base['spearman']:.2f}, {base['texts_encoded']} texts in {base['seconds']:.1f}s",
            flush=True,
        )
    ours_s = sum(r["finesim"]["encode_seconds"] for r in rows.values())
    base_s = sum(r["plain_sentence_transformers"]["seconds"] for r in rows.values())
    pairs = sum(r["pairs"] for r in rows.values())
    payload = {
        "benchmark": "evaluate_minilm",
        "description": "finesim evaluate (the CLI path, data hashed) vs plain sentence-transformers encoding of the "
        "same pairs",
        "note": "encode seconds are wall time inside the scorer (finesim) or the two encode calls (plain); both are "
        "sensitive to other load on the machine. finesim_evaluate.cpu_seconds covers the whole command (model "
        "load, data reading and hashing, encoding, analyses).",
        "model": MODEL,
        "model_resolved": ours["model_resolved"],
        "settings": {"batch_size": args.batch_size, "seed": args.seed, "max_length": model.max_seq_length},
        "data_root": str(root),
        "environment": environment_record(),
        "finesim_evaluate": {
            "argv": ["evaluate", *argv],
            "wall_seconds": round(ours_wall, 2),
            "cpu_seconds": round(ours_cpu, 2),
            "timing": ours["timing"],
            "average_main_score_by_group": ours["average_main_score_by_group"],
        },
        "plain_model_load_seconds": round(plain_load, 3),
        "tasks": rows,
        "totals": {
            "pairs": pairs,
            "finesim_encode_seconds": round(ours_s, 2),
            "plain_seconds": round(base_s, 2),
            "finesim_pairs_per_second": round(pairs / ours_s, 1),
            "plain_pairs_per_second": round(pairs / base_s, 1),
            "speedup": round(base_s / ours_s, 2),
            "plain_cpu_seconds": round(sum(r["plain_sentence_transformers"]["cpu_seconds"] for r in rows.values()), 2),
        },
    }
    write_json_atomic(args.output, portable(payload, path_roots(root)))
    speedup = payload["totals"]["speedup"]
    print(f"wrote {args.output}: finesim {ours_s:.1f}s encoding vs plain {base_s:.1f}s (x{speedup})")


if __name__ == "__main__":
    main()

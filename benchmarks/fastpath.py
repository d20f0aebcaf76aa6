"""Benchmark: fp32 torch scoring vs the fast CPU paths of ``finesim export``, in one run.

For one model (``--model``: the main job's trained model folder, e.g. ``runs/minilm-bi-mse-tuned/model``; default
all-MiniLM-L6-v2 as a zero-shot bi-encoder) every fast path is exported with :func:`finesim.models.export.export_model`
into a temporary folder and loaded back the way ``finesim evaluate`` / ``finesim score`` load models
(``finesim.ConditionalScorer(folder)``). Each scorer then scores C-STS validation (``CSTS-validation`` of the task
registry: the same rows ``finesim evaluate`` scores); the scorers take turns for ``--rounds`` rounds and the best
round counts, so a burst of load from other processes hits every path alike. Per path:

- pairs/s and distinct-text encodes/s (each distinct ``(sentence, condition)`` input is encoded once per call),
- Spearman x100 on C-STS validation and its difference from fp32 torch, and the agreement of the scores with fp32
  torch's (Pearson x100, largest absolute difference),
- size on disk (the runtime file, the folder) and export and load time.

``--throughput-rows N`` also times N rows of C-STS train (more distinct texts, labels unused). The JSON written to
``benchmarks/results/`` records the environment, torch/ONNX Runtime threads, the data file's SHA-256 and the load
average before and after (the machine may be busy: timings from a shared machine are indicative only).

    python benchmarks/fastpath.py [--model runs/minilm-bi-mse-tuned/model] [--paths onnx-int8,torch-bf16]
        [--limit 200] [--rounds 3] [--throughput-rows 4000] [--output benchmarks/results/fastpath_x.json]
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from finesim.evaluation import default_registry
from finesim.evaluation.metrics import spearman
from finesim.evaluation.scoring import ConditionalScorer
from finesim.models.export import export_model
from finesim.models.hub import resolve_model_path
from finesim.models.io import read_marker
from finesim.paths import data_root
from finesim.results import environment_record, file_sha256, package_versions, path_roots, portable, write_json_atomic

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# fast path name -> (export format, quantization)
PATHS = {
    "onnx-fp32": ("onnx", "none"),
    "onnx-int8": ("onnx", "int8"),
    "torch-int8": ("torch", "int8"),
    "torch-bf16": ("torch", "bf16"),
}
BASELINE = "torch-fp32"
GOAL = {"speedup": 2.0, "max_spearman_loss": 0.5}  # the issue's target for the main job's model


def load_rows(root: Path, task: str, limit: int | None) -> tuple[dict[str, list[Any]], Path]:
    """The task's rows (sentence1, sentence2, condition, label) as ``finesim evaluate`` reads them."""
    (spec,) = default_registry().resolve(task)
    dataset, _ = spec.load(root)
    if limit:
        dataset = dataset.select(range(min(limit, len(dataset))))
    return {k: list(dataset[k]) for k in ("sentence1", "sentence2", "condition", "label")}, root / spec.path


def train_rows(root: Path, n: int) -> dict[str, list[Any]]:
    """The first ``n`` rows of C-STS train, for a larger throughput set (labels unused)."""
    from finesim.data.csts import read_csts

    dataset, _ = read_csts(root / "csts" / "train.csv")
    dataset = dataset.select(range(min(n, len(dataset))))
    return {k: list(dataset[k]) for k in ("sentence1", "sentence2", "condition")}


def timed_score(scorer: ConditionalScorer, rows: dict[str, list[Any]]) -> tuple[np.ndarray, float, int]:
    """Scores, wall seconds and distinct texts encoded for one scoring call over ``rows``."""
    start = time.perf_counter()
    scores = scorer.score(rows["sentence1"], rows["sentence2"], rows["condition"])
    return scores, time.perf_counter() - start, scorer.last_encoded


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def weights_bytes(folder: Path) -> int:
    """Bytes of the torch weights a torch-runtime model loads (safetensors or bin files)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.suffix in (".safetensors", ".bin"))


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", Path(name).name if Path(name).exists() else name.split("/")[-1]).strip("-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model to benchmark (a trained finesim folder)")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"fast paths, from {list(PATHS)}")
    parser.add_argument("--data", default=None, help="data root (default: $FINESIM_DATA or ../shared/data)")
    parser.add_argument("--task", default="CSTS-validation", help="the accuracy task (a C-STS task)")
    parser.add_argument("--limit", type=int, default=None, help="score only the first N rows (a smoke run)")
    parser.add_argument("--throughput-rows", type=int, default=0, help="also time N rows of C-STS train")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds per path (the best one counts)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="torch (and ONNX Runtime) threads")
    parser.add_argument("--exports", default=None, help="keep the exported folders here (default: a temp folder)")
    parser.add_argument("--output", default=None, help="results JSON (default: benchmarks/results/fastpath_<m>.json)")
    args = parser.parse_args()
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        parser.error(f"unknown paths {unknown}; choose from {list(PATHS)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    output = args.output or f"benchmarks/results/fastpath_{slug(args.model)}{'_smoke' if args.limit else ''}.json"
    load_before = os.getloadavg()
    root = data_root(args.data)
    rows, data_file = load_rows(root, args.task, args.limit)
    extra = train_rows(root, args.throughput_rows) if args.throughput_rows else None
    labels = np.asarray(rows["label"], dtype=np.float64)
    resolved = resolve_model_path(args.model)
    marker = read_marker(resolved) if Path(resolved).is_dir() else None
    print(f"{args.model}: {len(labels)} pairs of {args.task}, {torch.get_num_threads()} threads", flush=True)

    with tempfile.TemporaryDirectory(prefix="finesim-fastpath-") as tmp:
        exports_dir = Path(args.exports or tmp)
        scorers: dict[str, ConditionalScorer] = {}
        info: dict[str, dict[str, Any]] = {}
        start = time.perf_counter()
        scorers[BASELINE] = ConditionalScorer(args.model, batch_size=args.batch_size, device="cpu")
        info[BASELINE] = {
            "load_seconds": round(time.perf_counter() - start, 2),
            "weights_bytes": weights_bytes(Path(resolved)) if Path(resolved).is_dir() else None,
        }
        for name in paths:
            fmt, quantize = PATHS[name]
            result = export_model(
                args.model, exports_dir / name, format=fmt, quantize=quantize, overwrite=True, progress=None
            )
            start = time.perf_counter()
            scorers[name] = ConditionalScorer(str(result.path), batch_size=args.batch_size)
            runtime = result.runtime
            info[name] = {
                "format": fmt,
                "quantize": quantize,
                "export_seconds": round(result.seconds, 2),
                "load_seconds": round(time.perf_counter() - start, 2),
                "runtime_file": runtime.get("file"),
                "runtime_file_bytes": runtime.get("bytes"),
                "weights_bytes": runtime.get("bytes") if fmt == "onnx" else weights_bytes(result.path),
                "folder_bytes": folder_bytes(result.path),
                "export_check": runtime.get("check"),
            }
            print(f"exported {name} in {result.seconds:.1f}s", flush=True)
        warm = {k: v[:8] for k, v in rows.items()}
        for scorer in scorers.values():  # first calls allocate (ONNX Runtime arenas, oneDNN primitives)
            timed_score(scorer, warm)
        seconds: dict[str, list[float]] = {name: [] for name in scorers}
        throughput: dict[str, list[float]] = {name: [] for name in scorers}
        results: dict[str, dict[str, Any]] = {}
        for round_ in range(args.rounds):
            for name, scorer in scorers.items():
                scores, wall, encoded = timed_score(scorer, rows)
                seconds[name].append(wall)
                results.setdefault(name, {"scores": scores, "texts_encoded": encoded})
                if extra is not None:
                    _, wall_extra, encoded_extra = timed_score(scorer, extra)
                    throughput[name].append(wall_extra)
                    results[name]["throughput_texts_encoded"] = encoded_extra
                print(f"round {round_ + 1}: {name:11s} {len(labels) / wall:8.1f} pairs/s", flush=True)

    base_scores = results[BASELINE]["scores"]
    base_rho = spearman(base_scores, labels)
    base_best = min(seconds[BASELINE])
    rows_out: dict[str, Any] = {}
    for name in scorers:
        scores = results[name]["scores"]
        best = min(seconds[name])
        rho = spearman(scores, labels)
        entry: dict[str, Any] = {
            **info[name],
            "spearman": rho,
            "spearman_diff": rho - base_rho,
            "agreement_with_fp32": {
                "pearson": float(np.corrcoef(scores, base_scores)[0, 1] * 100),
                "max_abs_diff": float(np.abs(scores - base_scores).max()),
            },
            "seconds": [round(s, 3) for s in seconds[name]],
            "pairs_per_second": round(len(labels) / best, 1),
            "encodes_per_second": round(results[name]["texts_encoded"] / best, 1),
            "texts_encoded": results[name]["texts_encoded"],
            "speedup": round(base_best / best, 2),
        }
        if extra is not None:
            best_extra = min(throughput[name])
            entry["throughput_set"] = {
                "pairs": len(extra["sentence1"]),
                "seconds": [round(s, 3) for s in throughput[name]],
                "pairs_per_second": round(len(extra["sentence1"]) / best_extra, 1),
                "encodes_per_second": round(results[name]["throughput_texts_encoded"] / best_extra, 1),
                "speedup": round(min(throughput[BASELINE]) / best_extra, 2),
            }
        if name != BASELINE:
            entry["meets_goal"] = (
                entry["speedup"] >= GOAL["speedup"] and -entry["spearman_diff"] <= GOAL["max_spearman_loss"]
            )
        rows_out[name] = entry
        print(
            f"{name:11s} {entry['pairs_per_second']:8.1f} pairs/s  x{entry['speedup']:<5} spearman {rho:6.2f} "
            f"({entry['spearman_diff']:+.2f})  agreement r {entry['agreement_with_fp32']['pearson']:.2f}",
            flush=True,
        )
    accurate = [n for n in paths if -rows_out[n]["spearman_diff"] <= GOAL["max_spearman_loss"]]
    fastest = max(accurate, key=lambda n: rows_out[n]["pairs_per_second"]) if accurate else None
    payload = {
        "benchmark": "fastpath",
        "description": "fp32 torch scoring vs finesim export's fast CPU paths (ONNX Runtime fp32/int8, torch "
        "dynamic int8, torch bf16) on C-STS validation through finesim.ConditionalScorer",
        "note": "timings are wall time of ConditionalScorer.score over the rows (tokenisation, encoding each distinct "
        "(sentence, condition) once, cosine), best of the rounds, paths taking turns; a shared machine makes them "
        "indicative only (see load_average). Spearman x100 against the gold labels; spearman_diff is against fp32 "
        "torch, whose loss must stay <= 0.5 for the main job's model.",
        "smoke": bool(args.limit),
        "machine_may_be_busy": True,
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "model": args.model,
        "model_resolved": str(resolved),
        "model_marker": marker,
        "data": {
            "task": args.task,
            "file": str(data_file),
            "sha256": file_sha256(data_file),
            "pairs": len(labels),
            "limit": args.limit,
            "throughput_rows": args.throughput_rows or None,
        },
        "settings": {
            "batch_size": args.batch_size,
            "rounds": args.rounds,
            "torch_threads": torch.get_num_threads(),
            "onnxruntime_threads": torch.get_num_threads(),  # finesim.models.runtime.onnx_session follows torch
            "goal": GOAL,
        },
        "versions": package_versions(("onnx", "onnxruntime")),
        "environment": environment_record(),
        "paths": rows_out,
        "recommendation": {
            "fastest_within_spearman_loss": fastest,
            "meets_goal": bool(fastest and rows_out[fastest].get("meets_goal")),
        },
    }
    write_json_atomic(output, portable(payload, path_roots(root)))
    print(f"wrote {output}; fastest path within {GOAL['max_spearman_loss']} Spearman: {fastest}")


if __name__ == "__main__":
    main()

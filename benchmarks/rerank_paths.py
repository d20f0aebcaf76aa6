"""Benchmark: the re-ranking stage of two-stage search on each fast path: its time for N candidates, and how much of
the fp32 model's top k it keeps.

Two-stage search (docs/search.md) spends almost all of a never-seen condition's query on the re-ranking: N corpus
texts embedded under the condition by the bi-encoder. This script measures that stage alone, for the bi-encoder
(``--model``, fp32 torch: the reference) and for each ``--path`` (a ``finesim export`` of the same model: ONNX fp32,
ONNX int8, torch bf16, ...), on the candidates a real first stage returns:

1. Corpus: the 1,000,000-text corpus of ``two_stage_search.py --size 1000000`` (its ``--seed``; mostly two-sentence
   passages, so the texts are as long as the 1M benchmark's), its never-seen C-STS validation conditions and
   queries (``Draws``, the same ``--conditions`` and ``--queries``). ``--sample`` texts drawn from it with the seed
   are embedded alone by the reference model (the ``plain`` first-stage vectors).
2. Candidates: for each (query, condition), the top ``max(--candidates)`` of the sample under the ``conditioned``
   first-stage query (the reference model's embedding of (query, condition) against the plain vectors), in
   first-stage order; the top N of them are the candidates at N. A sample is sparser than the full corpus (its
   nearest texts are less alike than the 1M corpus's), so agreement here is measured among candidates a little
   easier to tell apart than at 1M.
3. Per path and query, the paths taking turns query by query (which goes first rotates): the wall time of
   embedding the N candidates under the condition (``IndexEncoder.conditioned``: tokenising, the forward pass,
   normalising; what a cold re-ranking cache costs) for each N; and from those same embeddings the top ``-k`` of
   the N candidates by the path's cosine to its own (query, condition) embedding, against the reference's:
   **agreement@k** (the share of the reference re-ranker's top k over the same candidates that the path keeps).
   Two-stage recall against the exact fp32 ranking is at most the first stage's recall times about this share: the
   re-ranker's own loss. Every query's seconds and agreement are kept in the results file.

Run it alone on an idle machine (timings beside another job are not figures; ``--note`` records the conditions):

    flock /tmp/finesim-cpu.lock python benchmarks/rerank_paths.py --model runs/rerank/fp32 \\
        --path onnx-fp32=runs/rerank/onnx-fp32 --path onnx-int8=runs/rerank/onnx-int8 \\
        --path torch-bf16=runs/rerank/torch-bf16 [--sample 30000] [--candidates 50,100,200] \\
        [--output benchmarks/results/rerank_paths.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from main_job_check import git_commit
from two_stage_search import Draws, percentiles

from finesim.index.encoders import IndexEncoder, load_index_model
from finesim.index.topk import best_rows
from finesim.paths import data_root
from finesim.results import (
    environment_record,
    file_sha256,
    package_versions,
    path_roots,
    portable,
    write_json_atomic,
)

REFERENCE = "torch-fp32"


def describe_model(folder: str) -> dict[str, Any]:
    """The folder, its runtime (``finesim_model.json``'s ``runtime``, none for a plain torch folder) and the digest of
    its weights file."""
    path = Path(folder)
    marker = path / "finesim_model.json"
    runtime = json.loads(marker.read_text()).get("runtime") if marker.is_file() else None
    # the file the runtime reads (an ONNX export names it: model.onnx or model_int8.onnx), else torch's weights
    named = path / runtime["file"] if runtime and runtime.get("file") else None
    weights = next((p for p in (named, path / "model.safetensors") if p is not None and p.is_file()), None)
    return {
        "folder": folder,
        "runtime": runtime,
        "weights": str(weights.relative_to(path)) if weights else None,
        "weights_sha256": file_sha256(weights) if weights else None,
    }


def top_k(vectors: np.ndarray, query: np.ndarray, n: int, k: int) -> list[int]:
    """The positions of the ``k`` best of the first ``n`` rows of ``vectors`` by dot product with ``query``."""
    found, _ = best_rows(vectors[:n] @ query, np.arange(n), k)
    return [int(r) for r in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the bi-encoder in fp32 torch: the reference")
    parser.add_argument("--path", action="append", default=[], metavar="NAME=FOLDER",
                        help="a fast path to measure: an export of --model (repeat)")  # fmt: skip
    parser.add_argument("--data", default=None)
    parser.add_argument("--size", type=int, default=1_000_000, help="the corpus drawn from (two_stage_search.py's)")
    parser.add_argument("--sample", type=int, default=30000, help="texts of the corpus the first stage searches")
    parser.add_argument("--conditions", type=int, default=6)
    parser.add_argument("--queries", type=int, default=4)
    parser.add_argument("--candidates", default="50,100,200")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64, help="the re-ranker's batch size (an index's default)")
    parser.add_argument("--note", default=None)
    parser.add_argument("--output", default="benchmarks/results/rerank_paths.json")
    args = parser.parse_args()
    ns = sorted(int(n) for n in args.candidates.split(","))
    paths = {REFERENCE: args.model}
    for item in args.path:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder or name in paths:
            raise SystemExit(f"--path {item!r}: give NAME=FOLDER, a new name each time")
        paths[name] = folder

    root = data_root(args.data)
    draws = Draws.make(root, args.seed, args.size, args.conditions, args.queries)
    pairs = draws.pairs()
    sample = sorted(random.Random(args.seed).sample(range(len(draws.corpus)), args.sample))
    texts = [draws.corpus[i] for i in sample]
    encoders = {
        name: IndexEncoder(load_index_model(folder).model, "bi", batch_size=args.batch_size)
        for name, folder in paths.items()
    }
    reference = encoders[REFERENCE]
    start = time.perf_counter()
    plain = reference.plain(texts)
    plain_seconds = time.perf_counter() - start
    print(f"{len(texts)} sample texts embedded in {plain_seconds:.0f} s", flush=True)
    top = ns[-1]
    candidates = []
    for query, condition in pairs:
        vector = reference.conditioned([query], condition)[0]
        found, _ = best_rows(plain @ vector, np.arange(len(texts)), top)
        candidates.append([texts[int(r)] for r in found])

    for encoder in encoders.values():  # warm-up: first calls allocate
        encoder.conditioned(texts[:64], pairs[0][1])
    seconds: dict[str, dict[int, list[float]]] = {name: {n: [] for n in ns} for name in paths}
    tops: dict[str, list[dict[int, list[int]]]] = {name: [] for name in paths}
    tokens: list[int] = []
    names = list(paths)
    for i, ((query, condition), texts_n) in enumerate(zip(pairs, candidates)):
        for name in names[i % len(names) :] + names[: i % len(names)]:  # paths take turns; the first rotates
            encoder = encoders[name]
            tops_n = {}
            for n in ns:
                start = time.perf_counter()
                vectors = encoder.conditioned(texts_n[:n], condition)
                seconds[name][n].append(time.perf_counter() - start)
                own = encoder.conditioned([query], condition)[0]
                tops_n[n] = top_k(vectors, own, n, args.k)  # the ranking of the very embeddings timed
            tops[name].append(tops_n)
        tokenizer = reference.model.tokenizer
        tokens.append(sum(len(ids) for ids in tokenizer([(t, condition) for t in texts_n])["input_ids"]))
        print(f"{len(tokens)}/{len(pairs)} queries: " + ", ".join(
            f"{name} {1000 * seconds[name][top][-1]:.0f} ms" for name in paths), flush=True)  # fmt: skip

    results: dict[str, Any] = {}
    for name in paths:
        points = []
        for n in ns:
            agree = [len(set(mine[n]) & set(ref[n])) / args.k for mine, ref in zip(tops[name], tops[REFERENCE])]
            points.append({
                "candidates": n,
                "seconds": percentiles(seconds[name][n]),
                f"agreement_at_{args.k}": round(float(np.mean(agree)), 4),
                f"min_agreement_at_{args.k}": round(float(np.min(agree)), 4),
                "per_query": {"seconds": [round(x, 4) for x in seconds[name][n]], f"agreement_at_{args.k}": agree},
            })  # fmt: skip
        results[name] = {"model": describe_model(paths[name]), "points": points}
    ref_p50 = {p["candidates"]: p["seconds"]["p50_seconds"] for p in results[REFERENCE]["points"]}
    for name in paths:
        for point in results[name]["points"]:
            point["speedup_p50"] = round(ref_p50[point["candidates"]] / point["seconds"]["p50_seconds"], 3)
    record = {
        "benchmark": "rerank_paths",
        "description": __doc__.split("\n\n")[0],
        "command": " ".join(sys.argv),
        "settings": {
            "size": args.size,
            "sample": args.sample,
            "conditions": draws.conditions,
            "queries_per_condition": args.queries,
            "candidates": ns,
            "k": args.k,
            "seed": args.seed,
            "batch_size": args.batch_size,
            "reference": REFERENCE,
            "first_stage": "conditioned, exact over the sample, the reference model's vectors",
            "note": args.note,
        },
        "data": {"sentences": draws.files, "conditions": draws.csts_file, "composition": draws.composition},
        "results": {
            "sample_plain_seconds": round(plain_seconds, 1),
            "candidate_tokens": {"mean_per_query": round(float(np.mean(tokens)), 1), "candidates": top},
            "paths": results,
        },
        "code": {"git_commit": git_commit()},
        "versions": package_versions(("onnx", "onnxruntime")),
        "environment": environment_record(),
    }
    write_json_atomic(Path(args.output), portable(record, path_roots()))
    for name in paths:
        cells = ", ".join(
            f"N={p['candidates']}: {1000 * p['seconds']['p50_seconds']:.0f} ms,"
            f" agreement {p[f'agreement_at_{args.k}']:.3f}"
            for p in results[name]["points"]
        )
        print(f"{name}: {cells}")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

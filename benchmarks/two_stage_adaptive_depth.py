"""Benchmark: adaptive re-ranking depth for two-stage search (``finesim.index.rerank_depth.RerankDepth``), chosen on
C-STS train conditions, then measured on the never-seen validation conditions of ``two_stage_search.py``.

A two-stage search's time is its re-ranking: ``N`` encodes of ``(text, condition)``. ``RerankDepth(first, step,
patience)`` re-ranks the first stage's candidates best first, ``first`` of them and then ``step`` more at a time, and
stops after ``patience`` chunks in a row that add no candidate to the top k (or at ``N``).

**The selection rule**, written down before any setting was run on train conditions (a first probe of a few settings
on the six validation conditions of step 2 came before it; that is disclosed in the results and docs):

- settings: ``first`` in {25, 50}, ``step`` in {25, 50}, ``patience`` in {1, 2, 3}, each at ``N`` = 200 (the
  default number of candidates, the most any query re-ranks);
- data: the corpus, conditions and queries of ``two_stage_map_selection.py`` (the first 10,000 texts of its index, 4
  C-STS train conditions that validation does not have, 25 queries each: corpus texts left out of their own ranking;
  its ``--cache-dir`` holds their embeddings under each condition, so selection costs no encoding); first stages
  ``conditioned`` and ``mapped`` (the shipped ``map_sample`` and ``map_ridge``), exact;
- a setting qualifies when its mean recall@10 against the exact ranking is within ``--tolerance`` (0.01) of
  re-ranking all ``N`` candidates, for both first stages ("within" includes equality; compared on the unrounded
  means, with 1e-9 of slack for floating point); the chosen setting re-ranks the fewest candidates on average
  (unrounded, summed over both first stages; ties: the larger ``first``, then the larger ``patience``, then the
  larger ``step``);
- it becomes the default (``finesim.index.rerank_depth.ADAPTIVE_DEPTH`` and the index's ``rerank_depth``) when its
  mean number of candidates re-ranked is at most 75% of ``N`` for both first stages; otherwise re-ranking all ``N``
  stays the default and adaptive depth is an option.

**The report** (step 2): the 50k corpus, 6 validation conditions x 10 queries of ``two_stage_search.py`` (its index,
kept with ``--work-dir``, must store those conditions' exact embeddings: they give the exact ranking and a re-ranking
cache that costs no encoding); recall@10 and candidates re-ranked (mean, p50, p95) for every setting and for fixed
``N`` in {50, 100, 200, 400}, first stages ``conditioned`` and ``mapped`` (the condition's own map, read from the
index's ``maps/`` or fitted).

**Latency** (step 3, ``--latency``): real two-stage searches on that index through the library, the re-ranking cache
emptied before each search (every query pays its candidates' encodes, as a never-seen condition's first query
does), ``mapped`` first stage with the condition's own map held, all ``N`` = 200 against the chosen setting, each
query searched both ways, which goes first alternating from query to query; p50 and p95 milliseconds. Run it on an
idle machine (the CPU lock).

    flock /tmp/finesim-cpu.lock python benchmarks/two_stage_adaptive_depth.py \\
        --select-index WORK/index --select-cache CACHE --index /work/ts50k-mapped \\
        --model runs/minilm-bi-mse-tuned-fp32-onnx --latency \\
        --output benchmarks/results/two_stage_adaptive_depth.json
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from main_job_check import git_commit
from two_stage_map_selection import train_conditions
from two_stage_search import Draws, percentiles

from finesim.index import ConditionalIndex, recall_at_k
from finesim.index.rerank_depth import RerankDepth
from finesim.index.topk import best_rows
from finesim.index.two_stage import FIRST_STAGE, MAP_RIDGE, MAP_SAMPLE, RerankCache, fit_condition_map, map_sample_rows
from finesim.paths import data_root
from finesim.results import environment_record, file_sha256, path_roots, portable, write_json_atomic

FIRSTS, STEPS, PATIENCES = (25, 50), (25, 50), (1, 2, 3)
MAX_N = 200
FIXED_NS = (50, 100, 200, 400)
SHARE = 0.75  # the chosen setting becomes the default when it re-ranks at most this share of N on average
K = 10
SLACK = 1e-9  # floating-point slack of "within the tolerance" (recall means are multiples of 1 / (10 x queries))


def settings() -> list[RerankDepth]:
    return [RerankDepth(f, s, p) for f, s, p in itertools.product(FIRSTS, STEPS, PATIENCES)]


def measure(orders: list[tuple[np.ndarray, np.ndarray, list[int]]], depth: RerankDepth | None, n: int) -> dict:
    """Recall@K and candidates re-ranked over queries given as (candidate rows best first, exact score of every
    row, exact top K); ``depth`` None: all ``n`` candidates."""
    recalls, used = [], []
    for rows, exact, truth in orders:
        rows = rows[:n]
        if depth is None:
            top, count = best_rows(exact[rows], rows, K)[0], len(rows)
        else:
            top, _, count = depth.rerank(rows, K, lambda chunk, exact=exact: exact[chunk])
        recalls.append(recall_at_k(truth, [int(r) for r in top], K))
        used.append(count)
    return {
        f"recall_at_{K}": round(float(np.mean(recalls)), 4),
        "candidates_mean": round(float(np.mean(used)), 1),
        "candidates_p50": float(np.percentile(used, 50)),
        "candidates_p95": float(np.percentile(used, 95)),
        "hits": round(K * float(np.sum(recalls))),  # exact: the rule compares these, unrounded
        "candidates_total": int(np.sum(used)),
        "queries": len(used),
    }


def choose(
    table: dict[str, dict[str, dict[str, Any]]], tolerance: float
) -> tuple[RerankDepth | None, list[RerankDepth], bool]:
    """The rule of the module docstring on a selection table: the chosen setting (None when none qualifies), the
    qualifying ones, and whether the chosen one becomes the default. Exact: on hit counts and candidate totals."""

    def recall(mode: str, name: str) -> float:
        row = table[mode][name]
        return float(row["hits"]) / (K * row["queries"])

    def mean(mode: str, name: str) -> float:
        row = table[mode][name]
        return row["candidates_total"] / row["queries"]

    qualifying = [
        d for d in settings()
        if all(recall(m, str(d)) >= recall(m, f"all {MAX_N}") - tolerance - SLACK for m in table)
    ]  # fmt: skip
    if not qualifying:
        return None, [], False
    chosen = min(qualifying, key=lambda d: (sum(mean(m, str(d)) for m in table), -d.first, -d.patience, -d.step))
    return chosen, qualifying, all(mean(m, str(chosen)) <= SHARE * MAX_N for m in table)


def select(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Step 1: every setting on the train conditions of two_stage_map_selection.py, and the rule's choice."""
    conditions = train_conditions(root, args.select_seed, 4)  # two_stage_map_selection.py's draw
    index = ConditionalIndex.open(args.select_index, model=args.model)
    size = min(10_000, len(index))
    plain = np.concatenate([np.asarray(index.store.array(p, FIRST_STAGE)) for p in index.store.parts])[:size]
    texts = index.store.texts(range(4))
    rng = np.random.default_rng(args.select_seed + 1)  # its query draw
    orders: dict[str, list[tuple[np.ndarray, np.ndarray, list[int]]]] = {"conditioned": [], "mapped": []}
    for i, condition in enumerate(conditions):
        under = np.load(Path(args.select_cache) / f"c{i}.npy")
        if under.shape != plain.shape:
            raise SystemExit(f"{args.select_cache}/c{i}.npy: shape {under.shape}, expected {plain.shape}")
        check = np.asarray(index.embedder.conditioned(texts, condition), dtype=np.float32)
        if float(np.min(np.sum(check * under[:4], axis=1))) < 0.999:  # the cache is this index's, this condition's
            raise SystemExit(f"{args.select_cache}/c{i}.npy: not this index's texts embedded under {condition!r}")
        rows = map_sample_rows(size, MAP_SAMPLE)
        weights = fit_condition_map(plain[rows], under[rows], MAP_RIDGE)
        inverse = 1 / np.linalg.norm(plain @ weights, axis=1)
        everything = np.arange(size)
        for q in rng.choice(size, args.select_queries, replace=False):
            exact = under @ under[q]
            exact[q] = -np.inf  # a query is left out of its own ranking
            truth = [int(r) for r in best_rows(exact, everything, K)[0]]
            mapped = (plain @ (weights @ under[q])) * inverse
            for mode, first in (("conditioned", plain @ under[q]), ("mapped", mapped)):
                first[q] = -np.inf
                orders[mode].append((best_rows(first, everything, max(FIXED_NS))[0], exact, truth))
    table: dict[str, dict[str, Any]] = {}
    for mode, per in orders.items():
        table[mode] = {f"all {n}": measure(per, None, n) for n in FIXED_NS}
        table[mode].update({str(d): measure(per, d, MAX_N) for d in settings()})
    chosen, qualifying, default = choose(table, args.tolerance)
    for mode in table:
        for name, row in table[mode].items():
            print(f"select {mode:12} {name:10} {row}", flush=True)
    print(f"qualifying: {[str(d) for d in qualifying]}; chosen: {chosen}; default: {default}", flush=True)
    return {
        "conditions": conditions,
        "queries_per_condition": args.select_queries,
        "size": size,
        "table": table,
        "qualifying": [str(d) for d in qualifying],
        "chosen": None if chosen is None else str(chosen),
        "becomes_default": default,
        "data": {
            "train": {"path": "csts/train.csv", "sha256": file_sha256(root / "csts" / "train.csv")},
            "validation": {"path": "csts/validation.csv", "sha256": file_sha256(root / "csts" / "validation.csv")},
        },
    }


def report(args: argparse.Namespace, root: Path, chosen: RerankDepth | None) -> dict[str, Any]:
    """Steps 2 and 3: the validation conditions of two_stage_search.py on its 50k index."""
    draws = Draws.make(root, args.seed, args.size, args.conditions, args.queries)  # two_stage_search.py's draws
    corpus, conditions, queries, pairs = draws.corpus, draws.conditions, draws.queries, draws.pairs()
    index = ConditionalIndex.open(args.index, model=args.model)
    index.rerank_feedback = None  # the depth alone, as its committed results were measured
    if len(index) != len(corpus) or index.store.texts(range(len(corpus))) != corpus:
        raise SystemExit(f"--index {args.index}: not an index of this corpus")
    stage = index.first_stage()
    if stage is None or index.first_stage_spec is None or index.first_stage_spec.model != "self":
        raise SystemExit(f"--index {args.index}: needs a bi-encoder index with a 'self' first stage")
    everything = np.arange(len(index))
    orders: dict[str, list[tuple[np.ndarray, np.ndarray, list[int]]]] = {"conditioned": [], "mapped": []}
    for condition in conditions:
        key = index.key(condition)
        if index.store.condition_array(key, index.store.parts[0]) is None:
            raise SystemExit(f"--index {args.index}: does not store the condition {condition!r}")
        under = np.concatenate([np.asarray(index.store.condition_array(key, p), dtype=np.float32)
                                for p in index.store.parts])  # fmt: skip
        fitted = index._condition_map(condition, key)  # read from maps/ (or fitted once)
        for query in queries[condition]:
            vector = np.asarray(index.embedder.conditioned([query], condition)[0], dtype=np.float32)
            exact = under @ vector
            truth = [int(r) for r in best_rows(exact, everything, K)[0]]
            q = torch.as_tensor(vector)
            orders["conditioned"].append((index._nearest_first_stage(q, max(FIXED_NS), None, None), exact, truth))
            orders["mapped"].append((index._mapped_rows(fitted, q, max(FIXED_NS), None, None), exact, truth))
    table: dict[str, dict[str, Any]] = {}
    for mode, per in orders.items():
        table[mode] = {f"all {n}": measure(per, None, n) for n in FIXED_NS}
        table[mode].update({str(d): measure(per, d, MAX_N) for d in settings()})
        for name in [f"all {n}" for n in FIXED_NS] + ([str(chosen)] if chosen else []):
            print(f"report {mode:12} {name:10} {table[mode][name]}", flush=True)
    out: dict[str, Any] = {"conditions": conditions, "queries_per_condition": args.queries, "size": len(corpus),
                           "table": table}  # fmt: skip
    if args.latency and chosen is not None:
        out["latency"] = latency(index, pairs, chosen)
    return out


def latency(index: ConditionalIndex, pairs: list[tuple[str, str]], chosen: RerankDepth) -> dict[str, Any]:
    """Step 3: wall time of real searches, the cache emptied before each, all N against ``chosen``, alternating."""
    times: dict[str, list[float]] = {f"all {MAX_N}": [], str(chosen): []}
    encoded: dict[str, list[int]] = {name: [] for name in times}
    for condition in dict.fromkeys(c for _, c in pairs):
        index._condition_map(condition, index.key(condition))  # held: its fit is not what is timed
    index.search("warm-up", pairs[0][1], k=K, strategy="two-stage", candidates=MAX_N)
    ways: list[tuple[str, RerankDepth | None]] = [(f"all {MAX_N}", None), (str(chosen), chosen)]
    for i, (query, condition) in enumerate(pairs):
        for name, depth in ways if i % 2 == 0 else ways[::-1]:  # which goes first alternates
            index.rerank_cache = RerankCache()
            index.rerank_depth = depth
            before = index.embedder.encoded
            start = time.perf_counter()
            index.search(query, condition, k=K, strategy="two-stage", candidates=MAX_N)
            times[name].append(1000 * (time.perf_counter() - start))
            encoded[name].append(index.embedder.encoded - before - 1)  # less the query's own encode
    index.rerank_depth = None
    out = {}
    for name, values in times.items():
        seconds = percentiles([v / 1000 for v in values])
        out[name] = {"p50_ms": round(1000 * seconds["p50_seconds"], 1),
                     "p95_ms": round(1000 * seconds["p95_seconds"], 1),
                     "candidates_mean": round(float(np.mean(encoded[name])), 1), "searches": len(values)}  # fmt: skip
        print(f"latency {name:10} {out[name]}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the bi-encoder both indexes were built with")
    parser.add_argument("--select-index", required=True, help="two_stage_map_selection.py's --index")
    parser.add_argument("--select-cache", required=True, help="two_stage_map_selection.py's --cache-dir")
    parser.add_argument("--select-seed", type=int, default=7, help="two_stage_map_selection.py's --seed")
    parser.add_argument("--select-queries", type=int, default=25)
    parser.add_argument("--tolerance", type=float, default=0.01)
    parser.add_argument("--index", required=True, help="the index folder two_stage_search.py kept (--work-dir)/index")
    parser.add_argument("--data", default=None)
    parser.add_argument("--size", type=int, default=50000)
    parser.add_argument("--conditions", type=int, default=6)
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency", action="store_true", help="also time real searches (step 3; an idle machine)")
    parser.add_argument("--note", default=None)
    parser.add_argument("--output", default="benchmarks/results/two_stage_adaptive_depth.json")
    args = parser.parse_args()
    root = data_root(args.data)
    chosen_selection = select(args, root)
    chosen = RerankDepth.parse(chosen_selection["chosen"]) if chosen_selection["chosen"] else None
    record = {
        "benchmark": "two_stage_adaptive_depth",
        "description": __doc__.split("\n\n")[0],
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "settings": {
            "model": args.model,
            "select_index": Path(args.select_index).name,
            "index": Path(args.index).name,
            "max_candidates": MAX_N,
            "fixed_candidates": list(FIXED_NS),
            "firsts": list(FIRSTS),
            "steps": list(STEPS),
            "patiences": list(PATIENCES),
            "tolerance": args.tolerance,
            "default_share": SHARE,
            "k": K,
            "map_sample": MAP_SAMPLE,
            "map_ridge": MAP_RIDGE,
            "first_stage_search": "exact",
            "rerank_feedback": None,  # finesim.index.feedback: off here (the depth's chunks in first-stage order)
            "note": args.note,
        },
        "results": {"selection": chosen_selection, "report": report(args, root, chosen)},
        "code": {"git_commit": git_commit()},
        "environment": environment_record(),
    }
    roots = {str(Path(args.index).resolve()): "<index>", str(Path(args.select_index).resolve()): "<select-index>",
             str(Path(args.select_cache).resolve()): "<select-cache>"}  # fmt: skip
    write_json_atomic(Path(args.output), portable(record, path_roots(root, extra=roots)))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

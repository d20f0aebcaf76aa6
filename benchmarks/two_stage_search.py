"""Benchmark: two-stage conditional search (docs/search.md) against the exact bi-encoder ranking.

Corpus: ``--size`` distinct sentences of the shared data (STS12-16, STS-B, SICK, SNLI dev/test; the pool of
``benchmarks/index_scaling.py``: de-duplicated, shuffled with ``--seed``, the first ``--size`` taken; no repeats).
A ``--size`` beyond the pool (55,247 sentences) adds the C-STS train/validation sentences not in it, then
two-sentence passages ``f"{a} {b}"`` drawn with a fixed seed (``index_scaling.distinct_corpus``): every text is
distinct and the first 55,247 are the pool in the same order, so a ``--size 50000`` run is a prefix of a 1M run.
Conditions: ``--conditions`` distinct conditions drawn from C-STS validation, never stored in the index before the
measurement (the "never-seen condition" case); ``--queries`` query sentences per condition, drawn from the pool.

1. Build the index with the bi-encoder's own first stage (``--model``), or with ``--first-stage PATH``: another
   model, such as a tri-encoder distilled from the bi-encoder (docs/search.md, "A distilled first stage"), whose
   own top N under the condition are then the candidates (query mode ``tri``). Build seconds and bytes recorded.
2. **Reference**: for each condition, the exact top-k over the whole corpus (``strategy="exact"``, which embeds the
   corpus under the condition once; its seconds are the cost two-stage search avoids).
3. **Recall** of two-stage search for every first-stage query mode (``conditioned``, ``plain``; ``tri`` alone for
   a tri-encoder first stage), first-stage search (``exact`` scan or faiss ``hnsw``; ``hnsw@R`` is HNSW with
   ``ef_search_per_result`` R instead of the library's default, ``hnsw@0`` the fixed ``ef_search`` of finesim
   before it was widened with N: the same graph, searched with another rule) and candidate count N in
   ``--candidates``; with ``exact`` among the searches, each approximate first stage's ``first_stage_coverage`` too
   (the share of the exact first stage's N candidates it returns). The re-ranking cache is filled from the
   reference's stored embeddings (the very vectors the model gives the candidates), so the curve costs no encoding
   and is exactly what the search returns.
   With ``--reference INDEX`` (an index of the same corpus, or a longer prefix, built with the reference model and
   storing the measured conditions: an earlier run's ``--work-dir``), recall is also measured against that index's
   exact ranking over the first ``--size`` texts (``recall_at_10_vs_reference``), and the measured model's own exact
   ranking against it (``exact_recall_at_10_vs_reference``): the way to measure a fast re-ranker (``--model``: an
   int8 export, ``finesim export``) against the exact ranking of the fp32 bi-encoder it was exported from.
4. **Latency** (``--latency``): per query with a cold re-ranking cache (a never-seen condition: N candidates
   embedded) and a warm one (the same condition again, a new query: with local-map feedback's default, its fit
   takes the first search's pairs), for the default query mode, per N and first-stage search; p50/p95 seconds.
   ``--latency-feedback none,local-map`` times several ``rerank_feedback`` settings on the same queries, taking
   turns. Run it alone on an idle machine: latencies beside another job are not
   figures (the file records ``--note``).

    flock /tmp/finesim-cpu.lock python benchmarks/two_stage_search.py --model runs/minilm-bi-mse-tuned/model \\
        [--first-stage runs/distill/minilm/minilm-tri-hadamard-distill/model] \\
        [--size 50000] [--conditions 8] [--queries 10] [--candidates 25,50,100,200,400,800] [--latency]
        [--output benchmarks/results/two_stage_search.json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_scaling import csts_sentences, distinct_corpus, sentence_pool, validation_conditions

from finesim.index import ConditionalIndex, recall_at_k
from finesim.index.approximate import DEFAULT_PARAMS
from finesim.index.feedback import parse_rerank_feedback
from finesim.index.topk import best_rows
from finesim.index.two_stage import (
    FIRST_STAGE,
    RerankCache,
    fit_condition_map,
    map_sample_rows,
    other_model_query,
)
from finesim.paths import data_root
from finesim.results import environment_record, path_roots, portable, write_json_atomic


def fill_cache(index: ConditionalIndex, condition: str) -> None:
    """The re-ranking cache of ``condition`` holding every row, from the stored exact-search embeddings."""
    key = index.key(condition)
    for part in index.store.parts:
        array = index.store.condition_array(key, part)
        assert array is not None
        rows = list(range(part.start, part.stop))
        index.rerank_cache.store(key, rows, np.asarray(array, dtype=np.float32))


def reference_truth(reference: ConditionalIndex, size: int, query: str, condition: str, k: int) -> list[int]:
    """The exact top-``k`` of ``reference`` (another index of the same corpus, at least ``size`` texts, that stores
    ``condition``'s embeddings) over its first ``size`` rows: the ranking of the reference model, typically the fp32
    bi-encoder when the measured index re-ranks with a fast export of it."""
    key = reference.key(condition)
    if not reference.has_condition(condition):
        raise SystemExit(f"--reference {reference.store.root}: the condition {condition!r} is not stored in it")
    vector = np.asarray(reference.embedder.conditioned([query], condition)[0], dtype=np.float32)
    scores, rows = [], []
    for part in reference.store.parts:
        if part.start >= size:
            break
        array = reference.store.condition_array(key, part)
        assert array is not None
        stop = min(part.stop, size) - part.start
        scores.append(np.asarray(array[:stop], dtype=np.float32) @ vector)  # stored rows as exact search reads them
        rows.append(np.arange(part.start, part.start + stop))
    found, _ = best_rows(np.concatenate(scores), np.concatenate(rows), k)
    return [int(r) for r in found]


def prefix_recall(
    index: ConditionalIndex,
    pairs: list[tuple[str, str]],
    sizes: list[int],
    ns: list[int],
    k: int,
    mode: str = "conditioned",
) -> list[dict[str, Any]]:
    """Recall@k of two-stage search (exact first stage, query mode ``mode``: ``conditioned`` or ``mapped``) against
    exact search over the first ``size`` texts only, for each size and N, read from the stored arrays (the
    first-stage vectors and each condition's corpus embeddings) with the arithmetic of ``ConditionalIndex._two_stage``:
    how recall at a fixed N falls as the corpus grows. ``mapped`` fits each condition's map on each prefix as an
    index of that many texts would (``map_sample_rows`` of the prefix, the index's ``map_sample`` and ``map_ridge``;
    the sample's embeddings read from the stored arrays, which are the model's embeddings of those texts)."""
    first = np.concatenate([np.asarray(index.store.array(part, FIRST_STAGE), dtype=np.float32)
                            for part in index.store.parts])  # fmt: skip
    by_condition = {
        condition: np.concatenate(
            [
                np.asarray(index.store.condition_array(index.key(condition), part), dtype=np.float32)
                for part in index.store.parts
            ]
        )
        for condition in {condition for _, condition in pairs}
    }
    vectors = {
        (query, condition): np.asarray(index.embedder.conditioned([query], condition)[0], dtype=np.float32)
        for query, condition in pairs
    }
    out = []
    for size in sizes:
        rows = np.arange(size)
        maps: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if mode == "mapped":  # per condition, the map an index of the first `size` texts fits, and its row scales
            sample = map_sample_rows(size, index.map_sample)
            for condition, embedded in by_condition.items():
                weights = fit_condition_map(first[sample], embedded[sample], index.map_ridge)
                maps[condition] = (weights, 1.0 / np.maximum(np.linalg.norm(first[:size] @ weights, axis=1), 1e-12))
        # per query, once per size: the exact top k and the first stage's scores (each N takes its top N of them)
        scored = {}
        for query, condition in pairs:
            embedded, vector = by_condition[condition][:size], vectors[(query, condition)]
            if mode == "mapped":
                weights, inverse = maps[condition]
                stage_scores = (first[:size] @ (weights @ vector)) * inverse
            else:
                stage_scores = first[:size] @ vector
            scored[(query, condition)] = (best_rows(embedded @ vector, rows, k)[0], stage_scores)
        for n in ns:
            per_query = []
            for (query, condition), (truth, stage_scores) in scored.items():
                embedded, vector = by_condition[condition], vectors[(query, condition)]
                found, _ = best_rows(stage_scores, rows, max(n, k))
                got, _ = best_rows(embedded[found] @ vector, found, k)
                per_query.append(recall_at_k(truth, got, k))
            out.append({"query_mode": mode, "size": size, "candidates": n,
                        f"recall_at_{k}": round(float(np.mean(per_query)), 4),
                        "min_recall": round(float(np.min(per_query)), 4)})  # fmt: skip
            print(f"{mode} prefix {size} N={n}: recall@{k} {out[-1][f'recall_at_{k}']}", flush=True)
    return out


@dataclass
class Draws:
    """The corpus, never-seen conditions and queries of this script (its ``--seed``, ``--size``, ``--conditions``,
    ``--queries``), in its order of draws: ``two_stage_borrowed_map.py`` and ``two_stage_adaptive_depth.py`` measure
    the same ones on the index this script kept."""

    corpus: list[str]
    conditions: list[str]
    queries: dict[str, list[str]]
    files: list[dict[str, Any]]
    csts_file: dict[str, Any]
    composition: dict[str, int]
    # what later draws continue from (the latency queries): the generator, the shuffled pool, the conditions' pool
    rng: random.Random
    pool: list[str]
    conditions_pool: list[str]

    @classmethod
    def make(cls, root: Path, seed: int, size: int, conditions: int, queries: int) -> Draws:
        pool, files = sentence_pool(root)
        conditions_pool, csts_file = validation_conditions(root)
        rng = random.Random(seed)
        rng.shuffle(pool)
        composition = {"pool": min(size, len(pool)), "extra": 0, "passages": 0}
        if size > len(pool):  # beyond the pool: C-STS sentences, then two-sentence passages (distinct_corpus)
            extra, extra_files = csts_sentences(root)
            files += extra_files
            corpus, composition = distinct_corpus(pool, extra, size, seed)
        else:
            corpus = pool[:size]
        drawn = rng.sample(conditions_pool, conditions)
        queried = {c: rng.sample(pool, queries) for c in drawn}
        return cls(corpus, drawn, queried, files, csts_file, composition, rng, pool, conditions_pool)

    def pairs(self) -> list[tuple[str, str]]:
        """Every (query, condition), condition by condition."""
        return [(query, condition) for condition in self.conditions for query in self.queries[condition]]


def percentiles(seconds: list[float]) -> dict[str, float]:
    s = np.asarray(seconds)
    return {
        "p50_seconds": round(float(np.percentile(s, 50)), 4),
        "p95_seconds": round(float(np.percentile(s, 95)), 4),
        "mean_seconds": round(float(s.mean()), 4),
    }


def first_stage_search(index: ConditionalIndex, label: str, own_per_result: int) -> str | bool:
    """The ``approximate`` argument for a ``--first-stage-search`` label (``exact``, ``hnsw``, ``ivf``, ``hnsw@R``),
    with the first stage's HNSW searched by the label's ``ef_search_per_result`` (``own_per_result``, the index's
    own, for plain ``hnsw``). The rule is set on the index's loaded faiss file (a benchmark-only reach into the
    index: the library takes search parameters from the index's manifest), which the labels share: the graph is built
    once."""
    kind, _, rule = label.partition("@")
    if kind == "exact":
        return False
    if kind == "hnsw":
        index._ann_for_first_stage("hnsw").params["ef_search_per_result"] = int(rule) if rule else own_per_result
    return kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a bi-encoder (a finesim folder, or a Hub id / alias)")
    parser.add_argument(
        "--first-stage",
        default=None,
        metavar="PATH",
        help="the first stage (default: the bi-encoder's own): another model, e.g. a distilled tri-encoder folder",
    )
    parser.add_argument(
        "--reference",
        default=None,
        metavar="INDEX",
        help="also measure recall against this index's exact ranking over the first --size texts: an index of the "
        "same corpus (or a longer prefix of it) built with the reference model (e.g. the fp32 bi-encoder when "
        "--model is its int8 export) that stores the measured conditions (a --work-dir of an earlier run)",
    )
    parser.add_argument(
        "--no-own-exact",
        action="store_true",
        help="with --reference: skip the measured model's own exact ranking (the corpus embedded under every "
        "condition, the costly part); recall is then against the reference alone and the candidates are embedded by "
        "the re-ranker as a search would",
    )
    parser.add_argument(
        "--prefixes",
        default=None,
        help="also recall on the first S texts for each S in this list (e.g. 12500,25000) with the exact first stage "
        "and each of --modes' conditioned and mapped queries, from the stored arrays (needs the own exact ranking): "
        "the trend with corpus size",
    )
    parser.add_argument("--data", default=None)
    parser.add_argument("--size", type=int, default=50000)
    parser.add_argument("--conditions", type=int, default=8)
    parser.add_argument("--queries", type=int, default=10, help="queries per condition")
    parser.add_argument("--candidates", default="25,50,100,200,400,800")
    parser.add_argument(
        "--modes", default=None, help="first-stage query modes (default: conditioned,plain; tri for a tri-encoder)"
    )
    parser.add_argument(
        "--first-stage-search",
        default="exact,hnsw",
        help="exact, hnsw, ivf, or hnsw@R: HNSW searched with ef_search_per_result R (hnsw@0: the fixed ef_search)",
    )
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--latency", action="store_true", help="also time searches (idle machine only)")
    parser.add_argument("--latency-queries", type=int, default=20)
    parser.add_argument(
        "--latency-modes", default=None, help="first-stage query modes timed (default: the index's own)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--work-dir", default=None, help="keep the index here (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="open the index in --work-dir if it is there")
    parser.add_argument("--skip-recall", action="store_true", help="only the latency part (with --latency)")
    parser.add_argument("--build-chunk", type=int, default=100_000, help="texts per build/add step (resumable)")
    parser.add_argument(
        "--rerank-feedback",
        default=None,
        help="the index's rerank_feedback ('none', 'local-map[:ROUNDS,RIDGE,POOL[,earlier|own]]'; default: the "
        "index's own)",
    )
    parser.add_argument(
        "--latency-feedback",
        default=None,
        help="time these rerank_feedback settings side by side, taking turns per query (e.g. 'none,local-map'); "
        "default: the index's own only",
    )
    parser.add_argument("--note", default=None, help="recorded as it is (e.g. what else ran on the machine)")
    parser.add_argument("--output", default="benchmarks/results/two_stage_search.json")
    args = parser.parse_args()
    if args.no_own_exact and not args.reference:
        raise SystemExit("--no-own-exact needs --reference (the ranking recall is measured against)")
    try:
        prefixes = sorted({int(x) for x in args.prefixes.split(",")}) if args.prefixes else []
    except ValueError:
        raise SystemExit(f"--prefixes: whole numbers separated by commas, got {args.prefixes!r}") from None
    if prefixes and (args.first_stage or args.no_own_exact or args.skip_recall):
        raise SystemExit("--prefixes needs the bi-encoder's own first stage and its own exact ranking")
    if prefixes and not 0 < prefixes[0] <= prefixes[-1] < args.size:
        raise SystemExit(f"--prefixes: each S must satisfy 1 <= S < --size ({args.size}), got {args.prefixes}")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    ns = [int(n) for n in args.candidates.split(",")]
    searches = args.first_stage_search.split(",")
    for label in searches:
        kind, at, rule = label.partition("@")
        if kind not in ("exact", "hnsw", "ivf") or (at and (kind != "hnsw" or not rule.isdigit())):
            raise SystemExit(f"--first-stage-search: {label!r} is not exact, hnsw, ivf or hnsw@R (R a whole number)")
    # a tri-encoder first stage (its own top N under the condition) has the query mode "tri" alone
    tri = args.first_stage is not None and other_model_query(args.first_stage, None) == "tri"
    modes = args.modes.split(",") if args.modes else (["tri"] if tri else ["conditioned", "plain"])
    if tri != (modes == ["tri"]):
        raise SystemExit(f"--modes {args.modes}: 'tri' is the mode of a tri-encoder first stage, its only one")
    if prefixes and not {"conditioned", "mapped"} & set(modes):
        raise SystemExit(f"--prefixes measures the conditioned and mapped modes; --modes {args.modes} has neither")

    root = data_root(args.data)
    draws = Draws.make(root, args.seed, args.size, args.conditions, args.queries)
    corpus, conditions, queries, files, csts_file = (
        draws.corpus,
        draws.conditions,
        draws.queries,
        draws.files,
        draws.csts_file,
    )
    composition, rng, pool, conditions_pool = draws.composition, draws.rng, draws.pool, draws.conditions_pool
    print(f"{len(corpus)} texts, {len(conditions)} conditions x {args.queries} queries", flush=True)

    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="finesim-two-stage-"))
    folder = work / "index"
    result: dict[str, Any] = {}
    try:
        # built in chunks of --build-chunk texts (the first by build, the others by add, each atomic): a killed
        # build resumes with --reuse from the last committed chunk; the chunks' seconds are kept beside the index
        seconds_file = work / "build_seconds.json"
        if args.reuse and (folder / "manifest.json").is_file():
            index = ConditionalIndex.open(folder, model=args.model)
            if index.store.texts(range(len(index))) != corpus[: len(index)]:
                raise SystemExit(f"{folder}: --reuse of an index of another corpus")
            built_with = index.first_stage_spec.model if index.first_stage_spec else None
            if built_with != (args.first_stage or "self"):
                raise SystemExit(f"{folder}: --reuse of an index whose first stage is {built_with}")
            chunks = json.loads(seconds_file.read_text()) if seconds_file.is_file() else None
        else:
            shutil.rmtree(folder, ignore_errors=True)
            start = time.perf_counter()
            index = ConditionalIndex.build(
                args.model, corpus[: args.build_chunk], folder, first_stage=args.first_stage or "auto",
                show_progress=True,
            )  # fmt: skip
            chunks = [round(time.perf_counter() - start, 1)]
            write_json_atomic(seconds_file, chunks)
        while len(index) < len(corpus):
            start = time.perf_counter()
            print(f"adding texts {len(index):,}-{min(len(index) + args.build_chunk, len(corpus)):,}", flush=True)
            index.add(corpus[len(index) : len(index) + args.build_chunk])
            if chunks is not None:
                chunks.append(round(time.perf_counter() - start, 1))
                write_json_atomic(seconds_file, chunks)
        if args.rerank_feedback is not None:
            index.rerank_feedback = args.rerank_feedback  # else the index's default (docs/search.md)
        result["build_seconds"] = None if chunks is None else round(sum(chunks), 1)  # None: reused, unknown
        result["build_chunk_seconds"] = chunks
        # the first stage's faiss index is built (and saved) by the first approximate search: time it apart
        ann_seconds = {}
        for kind in dict.fromkeys(search.partition("@")[0] for search in searches):
            if kind != "exact":
                start = time.perf_counter()
                warm_up = "a condition used by no measurement"
                index.search_rows(corpus[0], warm_up, args.k, strategy="two-stage", candidates=1, approximate=kind)
                ann_seconds[kind] = round(time.perf_counter() - start, 1)
                print(f"first-stage {kind}: built or loaded in {ann_seconds[kind]} s", flush=True)
        # the parameters the first stage's HNSW file searches with (the index's own, before any hnsw@R label)
        hnsw_params = (
            dict(index._ann_for_first_stage("hnsw").params)
            if any(s.partition("@")[0] == "hnsw" for s in searches)
            else dict(DEFAULT_PARAMS["hnsw"])
        )
        result["first_stage_ann_seconds"] = ann_seconds
        result["index_bytes"] = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        print(f"built in {result['build_seconds']} s", flush=True)

        reference = None
        if args.reference and not args.skip_recall:
            reference = ConditionalIndex.open(args.reference)
            if len(reference) < len(corpus) or reference.store.texts(range(len(corpus))) != corpus:
                raise SystemExit(f"--reference {args.reference}: not an index of this corpus (or a longer prefix)")

        # the reference: exact search (the corpus embedded under each condition once)
        exact: dict[tuple[str, str], list[int]] = {}
        cold = []
        pairs = (
            [] if args.skip_recall else [(query, condition) for condition in conditions for query in queries[condition]]
        )
        for condition in [] if args.skip_recall or args.no_own_exact else conditions:
            start = time.perf_counter()
            for query in queries[condition]:
                rows, _ = index.search_rows(query, condition, args.k, strategy="exact")
                exact[(query, condition)] = [int(r) for r in rows]
            cold.append(round(time.perf_counter() - start, 1))
            print(f"exact reference for {condition!r}: {cold[-1]} s", flush=True)
        result["exact_condition_seconds"] = cold
        truth_ref: dict[tuple[str, str], list[int]] = {}
        if reference is not None:
            for query, condition in pairs:
                truth_ref[(query, condition)] = reference_truth(reference, len(corpus), query, condition, args.k)
        if exact and truth_ref:
            agreement = [recall_at_k(truth_ref[key], rows, args.k) for key, rows in exact.items()]
            # how far the measured model's own exact ranking is from the reference's (e.g. int8 against fp32)
            result[f"exact_recall_at_{args.k}_vs_reference"] = round(float(np.mean(agreement)), 4)
            print(f"exact search of --model against --reference: recall@{args.k} {np.mean(agreement):.4f}", flush=True)

        # recall of two-stage search: the cache holds every row's exact embedding, so nothing is encoded (with
        # --no-own-exact the re-ranker embeds the candidates, kept in the cache across N)
        if args.no_own_exact:
            index.rerank_cache = RerankCache(max_rows=(len(corpus) + 1) * len(conditions))
        elif not args.skip_recall:
            index.rerank_cache = RerankCache(max_rows=(len(corpus) + 1) * len(conditions))
            for condition in conditions:
                fill_cache(index, condition)
        stage = index.first_stage()
        assert stage is not None
        curve = []
        # the first stage's candidate sets (a two-stage search for k = N returns exactly them, re-ranked): with the
        # own exact ranking the cache holds every row, so they cost no encoding; an approximate first stage's
        # coverage is the share of the exact first stage's N candidates it returns
        coverage_of = "exact" in searches and bool(exact)
        exact_candidates: dict[tuple[str, str, str, int], set[int]] = {}
        for mode in [] if args.skip_recall else modes:
            stage.query_mode = mode
            for search in searches if not coverage_of else ["exact", *(s for s in searches if s != "exact")]:
                approximate = first_stage_search(index, search, hnsw_params["ef_search_per_result"])
                for n in ns:
                    per_query, per_query_ref, covered = [], [], []
                    for query, condition in pairs:
                        # with coverage, all N candidates re-ranked (a search for k = N): the top k are their head
                        with index.rerank_cache.pairs_set_aside():  # each search as its condition's first
                            found, _ = index.search_rows(
                                query, condition, max(n, args.k) if coverage_of else args.k, strategy="two-stage",
                                candidates=n, approximate=approximate,
                            )  # fmt: skip
                        rows = found[: args.k]
                        if exact:
                            per_query.append(recall_at_k(exact[(query, condition)], rows, args.k))
                        if truth_ref:
                            per_query_ref.append(recall_at_k(truth_ref[(query, condition)], rows, args.k))
                        if coverage_of:
                            found_set = {int(r) for r in found}
                            if search == "exact":
                                exact_candidates[(mode, query, condition, n)] = found_set
                            else:
                                truth_set = exact_candidates[(mode, query, condition, n)]
                                covered.append(len(found_set & truth_set) / max(len(truth_set), 1))
                    point: dict[str, Any] = {"query_mode": mode, "first_stage_search": search, "candidates": n}
                    if covered:
                        point["first_stage_coverage"] = round(float(np.mean(covered)), 4)
                    if per_query:
                        point[f"recall_at_{args.k}"] = round(float(np.mean(per_query)), 4)
                        point["min_recall"] = round(float(np.min(per_query)), 4)
                    if per_query_ref:
                        point[f"recall_at_{args.k}_vs_reference"] = round(float(np.mean(per_query_ref)), 4)
                        point["min_recall_vs_reference"] = round(float(np.min(per_query_ref)), 4)
                    curve.append(point)
                    shown = {key: value for key, value in point.items() if "recall" in key or "coverage" in key}
                    print(f"{mode} {search} N={n}: {shown}", flush=True)
        if curve:
            result["recall"] = curve
        stage.query_mode = index.first_stage_spec.query if index.first_stage_spec else "conditioned"  # its own
        if prefixes:
            result["recall_by_size"] = [
                point
                for mode in modes
                if mode in ("conditioned", "mapped")
                for point in prefix_recall(index, pairs, [*prefixes, len(corpus)], ns, args.k, mode)
            ]

        if args.latency:
            timing = []
            latency_modes = args.latency_modes.split(",") if args.latency_modes else [stage.query_mode]
            # "index": whatever the index has (--rerank-feedback or its default), as before this option existed
            ways = [w.strip() for w in args.latency_feedback.split(",")] if args.latency_feedback else ["index"]
            initial_feedback = index.rerank_feedback
            for mode, search in [(m, s) for m in latency_modes for s in searches]:
                stage.query_mode = mode
                approximate = first_stage_search(index, search, hnsw_params["ef_search_per_result"])
                for n in ns:
                    cold_s: dict[str, list[float]] = {way: [] for way in ways}
                    warm_s: dict[str, list[float]] = {way: [] for way in ways}
                    fresh = [(rng.choice(pool), c) for c in rng.sample(conditions_pool, args.latency_queries)]
                    for i, (query, condition) in enumerate(fresh):
                        warm_query = rng.choice(pool)
                        for way in ways if i % 2 == 0 else ways[::-1]:  # settings take turns, first alternating
                            if way != "index":
                                index.rerank_feedback = way
                            index.rerank_cache = RerankCache()
                            index._maps.clear()  # a never-seen condition: a "mapped" first stage fits its map
                            for kept in (folder / "maps").glob("*.npz"):  # ... not read from an earlier fit's file
                                kept.unlink()
                            start = time.perf_counter()
                            index.search_rows(query, condition, args.k, strategy="two-stage", candidates=n,
                                              approximate=approximate)  # fmt: skip
                            cold_s[way].append(time.perf_counter() - start)
                            start = time.perf_counter()
                            index.search_rows(warm_query, condition, args.k, strategy="two-stage", candidates=n,
                                              approximate=approximate)  # fmt: skip
                            warm_s[way].append(time.perf_counter() - start)
                    for way in ways:
                        label = {} if way == "index" else {"rerank_feedback": str(parse_rerank_feedback(way) or "none")}
                        timing.append(
                            {
                                "query_mode": mode,
                                "first_stage_search": search,
                                "candidates": n,
                                **label,
                                "cold": percentiles(cold_s[way]),
                                "warm": percentiles(warm_s[way]),
                            }
                        )
                        shown = f"cold {timing[-1]['cold']} warm {timing[-1]['warm']}"
                        print(f"latency {mode} {search} N={n} feedback {way}: {shown}", flush=True)
            result["latency"] = timing
            index.rerank_feedback = initial_feedback  # what the settings record
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)

    payload = {
        "benchmark": "two_stage_search",
        "description": "two-stage conditional search (first-stage candidates re-ranked under the condition) against "
        "the exact full-corpus bi-encoder ranking: recall@k per candidate count, query mode and first-stage search; "
        "latency with a cold and a warm re-ranking cache",
        "command": " ".join(sys.argv),
        "settings": {
            "model": args.model,
            "first_stage": args.first_stage or "self",
            "reference": args.reference,
            "own_exact": not args.no_own_exact,
            "reference_model": reference.store.manifest["model"].get("name") if reference is not None else None,
            "first_stage_modes": modes,
            "first_stage_searches": searches,
            "map_sample": index.map_sample,  # the "mapped" first stage's fit (docs/search.md)
            "map_ridge": index.map_ridge,
            # which candidates a conditioned ranking re-ranks (finesim.index.feedback); results files written before
            # it existed lack the key and were measured without feedback
            "rerank_feedback": None if index.rerank_feedback is None else str(index.rerank_feedback),
            "hnsw_params": hnsw_params,  # hnsw@R: the same with ef_search_per_result R
            "size": len(corpus),
            "corpus_composition": composition,
            "conditions": conditions,
            "queries_per_condition": args.queries,
            "k": args.k,
            "seed": args.seed,
            "threads": torch.get_num_threads(),
            "note": args.note,
        },
        "data": {"sentences": files, "conditions": csts_file},
        "results": result,
        "environment": environment_record(),
    }
    # the work folder may lie outside the checkout: recorded as <work-dir>, never as this machine's path
    write_json_atomic(args.output, portable(payload, path_roots(extra={str(work): "<work-dir>"})))
    print(f"wrote {args.output}", flush=True)


if __name__ == "__main__":
    main()

"""Benchmark: recall@10 of two-stage search over 1M texts, against a pooled reference.

The exact ranking of a 1M-text corpus under one condition embeds every text under it (about an hour here per
condition), so ``two_stage_search.py`` measures recall on prefixes of at most 50k texts and extrapolates. This script
measures it on the whole corpus against a **pooled reference**, as retrieval evaluations pool the runs they judge:

1. **The pool** of a condition: the rows its map is fitted on (``map_sample_rows``) and, for each of its queries, the
   top ``--depth`` rows of two first stages over the whole corpus: ``conditioned`` (the model's ``(query,
   condition)`` embedding against every text's embedding alone) and ``mapped`` with the condition's own map (fitted
   on those sample rows as the library fits it). The pool is embedded under the condition by the index's model
   (resumable: each chunk is kept under ``--work-dir``) and put into the re-ranking cache.
2. **The searches**: every (query, condition) is searched through the library (``ConditionalIndex.search_rows``,
   ``strategy="two-stage"``) for each query mode (``conditioned``; ``mapped`` with the condition's own map, a
   condition seen before; ``borrowed``, last: the index holds only the maps of the conditions' donors, as the real
   searches of ``two_stage_feedback_maps.py``, :func:`hold_donor_maps`), first-stage search (exact scan, HNSW),
   feedback setting and N,
   each as its condition's first search (``RerankCache.pairs_set_aside``), k = 11 so that the query's own text (the
   corpus holds it) is left out of its top 10, as in the feedback benchmarks. A candidate outside the pool is
   embedded by the search itself, exactly as without the pool: the pool only saves encodes.
3. **The reference** of a query: the top 10 (its own text left out) of every row whose embedding under the condition
   is known: the pool and every row any search returned. Recall against it is an **upper bound** on recall against
   the exact ranking: a row of the exact top 10 that the pool holds is in the pooled top 10 as well, so every hit
   counts; the two are equal when the pool holds the exact top 10.

4. **Latency** (``--latency``, added after the first 1M run, whose recall at N = 50, 100, 200, 400 was known; N =
   75 was added to the curve then, for lying between the two that bracket 0.90 for a borrowed map): the same
   60 searches, timed one by one with an empty re-ranking cache (every candidate embedded, as for a never-seen
   condition; the measured condition's text embedding dropped too, the donors' kept, as a server that served them
   keeps them) for each of ``--latency-modes`` x first-stage search x ``--latency-feedback`` x
   ``--latency-candidates``, and for the exact scan with each of ``--latency-scan-threads`` (``scan_threads``: 1,
   the scan on one thread as before it was split, against 0, the library's default), the settings taking turns
   (their order reversed every other search). Each timed search's returned rows join the reference, so its recall
   is measured as the untimed searches'. ``borrowed`` times what a `mapped` index with ``--no-map-wait`` answers a
   never-seen condition while its own map is fitted, with that fit stubbed out: in a server it would compete for
   the cores, so these times are a lower bound for those first queries. Timings only with nothing else running.

5. **A never-seen condition's first queries while its own map is fitted** (``--latency-fit N``, after the
   ``borrowed`` searches; written before it ran): the stub of step 2 removed, each condition's saved map moved aside
   (put back if no new one is saved) and an empty re-ranking cache, its 10 queries are searched one after another at
   N (exact scan, the first ``--latency-feedback``) as a server's first queries under it: the first starts the
   background fit (``map_wait`` False) and borrows a donor's map meanwhile, every search competing with the fit for
   the cores, a later query taking the condition's own map once it is held. Reported: p50 / p95 over all of them,
   the first stages taken, recall as in step 4 (what carries over between a condition's queries is the shared
   cache: the fit's sample embeddings and earlier candidates; a map's ranking does not fit on earlier pairs) and each
   fit's time from the first search to the map being held. Unlike step 4, the cache is emptied once per condition
   and its searches run one after another. ``--latency-fit-batch 64,16`` runs the step once per fit batch
   (``map_fit_batch``: texts per model call of the fit, each holding the model lock the searches' calls wait for);
   ``--latency-fit-yield 0,1`` once per longest wait of each of the fit's steps for a moment when no search runs
   (``map_fit_yield``, seconds; 0: the steps take turns with the searches' model calls). The settings take turns
   condition by condition, their order reversed every other condition (each condition's fit runs once per setting).

**How the pool's depth is checked (written before the 1M run).** (a) Convergence: the reference is also computed
from a pool of depth ``--depth / 4``; the share of reference rows that change between the two is reported. (b) The
check at 50k texts (``--check-cache-dir``: the stored embeddings of the feedback benchmarks, every one of the first
50,000 texts embedded under each of the same six conditions, ``two_stage_feedback.py``'s cache; skipped if absent,
never computed): there the exact top 10 is known, and the share of its rows that a pool built the same way holds is
reported at the same depth, at a quarter of it, and at the same share of the corpus (``--depth x 50,000 /
--size``). The same absolute depth is the one that counts: two-stage recall at a fixed N barely moves with the
corpus's size (results.md: recall by corpus size, `conditioned`), so the exact top 10 sits at about the same first-
stage ranks in a larger corpus, not at the same share of it (a test of this script at 20,000 texts, depth 400: the
pool held 0.987 of the exact rows; its recall figures were 0.002-0.006 above the exact ones measured before). The
pooled reference is taken as the 1M reference when (a) changes at most 1% of its rows and (b) holds at least 99% of
the exact rows at the same depth; otherwise the file says so and the recall figures are upper bounds only. The
search-at-scale goal (recall@10 >= 0.90 within p50 <= 500 ms) is judged on the setting whose 1M latency met the goal
(``two_stage_latency_1m_feedback.json``: the ``conditioned`` query, HNSW, N = 100, the default feedback).

Corpus, conditions and queries: ``two_stage_search.py``'s draws (``--seed``, six never-seen C-STS validation
conditions x 10 queries), the index it kept with ``--work-dir`` at ``--size`` texts (``--index``; it must hold that
corpus). Recall is not a timing, but run it alone under the lock anyway: it embeds tens of thousands of texts.

    flock /tmp/finesim-cpu.lock python benchmarks/two_stage_pooled.py --model runs/rerank/torch-bf16 \\
        --index /scratch/ts1m-bf16/index --work-dir /scratch/pooled-1m --check-cache-dir runs/feedback-cache \\
        [--latency] [--output benchmarks/results/two_stage_recall_1m_pooled.json]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from two_stage_search import Draws, first_stage_search, percentiles

from finesim.index import ConditionalIndex, recall_at_k
from finesim.index.feedback import parse_rerank_feedback
from finesim.index.topk import best_rows
from finesim.index.two_stage import FIRST_STAGE, RerankCache, fit_condition_map, map_sample_rows
from finesim.paths import data_root
from finesim.results import environment_record, path_roots, portable, write_json_atomic

K = 10
CHECK_SIZE = 50_000
ACCEPT_CHANGED = 0.01  # (a): at most this share of reference rows change from depth / 4 to depth
ACCEPT_HELD = 0.99  # (b): at least this share of the exact top-10 rows in the pool at 50k
CHUNK = 4096  # pool rows embedded (and kept) at a time


def unit_scores(vectors: np.ndarray, q: np.ndarray) -> np.ndarray:
    return np.asarray(vectors, dtype=np.float32) @ q


def map_parts(first: np.ndarray, under_sample: np.ndarray, sample: np.ndarray, ridge: float) -> tuple[Any, Any]:
    """The condition's own map (the library's fit on the sample rows) and each row's ``1 / ||x W||``."""
    weights = fit_condition_map(first[sample], under_sample, ridge)
    inverse = np.empty(len(first), dtype=np.float32)
    for start in range(0, len(first), 100_000):
        block = first[start : start + 100_000] @ weights
        inverse[start : start + len(block)] = 1.0 / np.maximum(np.linalg.norm(block, axis=1), 1e-12)
    return weights, inverse


def top_rows(scores: np.ndarray, depth: int) -> np.ndarray:
    return best_rows(scores, np.arange(len(scores)), depth)[0]


def pool_of(
    first: np.ndarray, vectors: np.ndarray, weights: np.ndarray, inverse: np.ndarray, depth: int
) -> list[dict[str, np.ndarray]]:
    """Per query: the top ``depth`` rows of the conditioned and of the own-map first stage, best first."""
    return [
        {"conditioned": top_rows(first @ q, depth), "mapped": top_rows((first @ (weights @ q)) * inverse, depth)}
        for q in vectors
    ]


def embed_pool(index: ConditionalIndex, condition: str, rows: np.ndarray, keep: Path) -> np.ndarray:
    """The pool rows' embeddings under ``condition``, chunk by chunk, each chunk kept in ``keep`` (resumable)."""
    keep.mkdir(parents=True, exist_ok=True)
    parts = []
    total = len(rows)
    start_time = time.perf_counter()
    for i, start in enumerate(range(0, total, CHUNK)):
        chunk = rows[start : start + CHUNK]
        tag = hashlib.sha256(chunk.tobytes()).hexdigest()[:12]
        file = keep / f"chunk{i:04d}-{tag}.npy"
        if file.is_file():
            parts.append(np.load(file))
            continue
        vectors = np.asarray(index.embedder.conditioned(index.store.texts(chunk.tolist()), condition), np.float32)
        tmp = file.with_suffix(".tmp.npy")
        np.save(tmp, vectors)
        tmp.replace(file)
        parts.append(vectors)
        done = min(start + CHUNK, total)
        rate = done / max(time.perf_counter() - start_time, 1e-9)
        print(f"  embedded {done:,} of {total:,} pool rows under {condition!r} ({rate:.0f}/s)", flush=True)
    return np.concatenate(parts) if parts else np.zeros((0, index.store.dim), np.float32)


def pooled_top(rows: np.ndarray, vectors: np.ndarray, q: np.ndarray, own: int | None) -> list[int]:
    scores = unit_scores(vectors, q)
    if own is not None:
        scores = np.where(rows == own, -np.inf, scores)
    return [int(r) for r in best_rows(scores, rows, K)[0]]


def check_50k(args: argparse.Namespace, index: ConditionalIndex, draws: Draws) -> dict[str, Any] | None:
    """(b): at ``--check-size`` texts (50k), the share of the exact top-10 rows (the query's own text left out) that
    a pool built as the 1M one holds: at ``--depth``, at a quarter of it, and at the same share of the corpus. Reads
    ``two_stage_feedback.py``'s cache; never embeds."""
    if not args.check_cache_dir:
        return None
    from two_stage_feedback import cache_file, model_tag

    cache = Path(args.check_cache_dir)
    size = args.check_size
    corpus = draws.corpus[:size]
    tag = model_tag(args.model)

    def cached(condition: str | None) -> np.ndarray | None:
        file = cache_file(corpus, condition, cache, tag)
        return np.load(file) if file.is_file() else None

    plain = cached(None)
    if plain is None:
        print(f"check skipped: {cache} does not hold the first {size:,} texts' embeddings for this model", flush=True)
        return None
    matched = max(K, round(args.depth * size / len(draws.corpus)))
    depths = sorted({args.depth, args.depth // 4, matched})
    position = {text: i for i, text in enumerate(corpus)}
    sample = map_sample_rows(size, index.map_sample)
    held = dict.fromkeys(depths, 0)
    total = 0
    for condition in draws.conditions:
        under = cached(condition)
        if under is None:
            print(f"check skipped: no stored embeddings of {size:,} texts under {condition!r}", flush=True)
            return None
        weights, inverse = map_parts(plain, under[sample], sample, index.map_ridge)
        vectors = np.asarray(index.embedder.conditioned(draws.queries[condition], condition), np.float32)
        pool = pool_of(plain, vectors, weights, inverse, max(depths))
        truths = []
        for query, q in zip(draws.queries[condition], vectors):
            scores = under @ q
            own = position.get(query)
            if own is not None:
                scores[own] = -np.inf
            truths.append(best_rows(scores, np.arange(size), K)[0])
        total += K * len(vectors)
        for depth in depths:
            rows = np.concatenate([sample, *[p[m][:depth] for p in pool for m in ("conditioned", "mapped")]])
            in_pool = np.zeros(size, dtype=bool)
            in_pool[rows] = True
            held[depth] += int(sum(in_pool[truth].sum() for truth in truths))
    shares = {depth: round(count / total, 4) for depth, count in held.items()}
    print(f"check at {size:,} texts: the pool holds, by depth, {shares} of the exact top-10 rows", flush=True)
    return {
        "size": size,
        "depth": args.depth,
        "held_share": shares[args.depth],
        "matched_share_depth": matched,
        "held_share_by_depth": [{"depth": depth, "held_share": share} for depth, share in shares.items()],
    }


def hold_donor_maps(index: ConditionalIndex, draws: Draws, root: Path) -> dict[str, dict[str, Any]]:
    """The ``borrowed`` mode's set-up, as ``two_stage_feedback_maps.py``'s real searches: each measured condition's
    donor (the nearest of 100 C-STS train conditions drawn at random), the donors' maps fitted on this index and held,
    the measured conditions' own maps dropped, ``map_wait`` off and their own maps never ready (a stub), so that
    every search borrows the nearest held map (or ranks as ``conditioned`` below ``map_borrow_min_cosine``)."""
    from two_stage_feedback_maps import donor_pool, nearest_donor

    pool = donor_pool(root)
    donors: dict[str, dict[str, Any]] = {}
    for condition in draws.conditions:
        donor, cosine = nearest_donor(index.embedder, condition, pool)
        donors[condition] = {"donor": donor, "cosine": cosine}
    for condition in draws.conditions:  # benchmark-only reaches into the index, as the script above does
        index._maps.pop(index.key(condition), None)
    for donor in dict.fromkeys(str(d["donor"]) for d in donors.values()):
        start = time.perf_counter()
        index._condition_map(donor, index.key(donor))  # held, as if a server had searched the donor before
        print(f"donor map of {donor!r} fitted in {time.perf_counter() - start:.0f} s", flush=True)
    index.map_wait = False
    index._map_or_fit_later = lambda condition, key: None  # the condition's own map is never ready
    return donors


def timed_searches(
    index: ConditionalIndex, draws: Draws, position: dict[str, int], mode: str, points: list[dict[str, Any]]
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Step 4 (``--latency``): each (query, condition) searched once per point (``search``, ``approximate``,
    ``feedback``, ``n``, ``scan_threads``), the points taking turns, each search timed with an empty re-ranking cache
    and without the condition's text embedding. The returned rows' embeddings are put into the pool's cache afterwards
    (outside the timing), so the reference covers them."""
    pool_cache, threads_before, feedback_before = index.rerank_cache, index.scan_threads, index.rerank_feedback
    timed: dict[tuple[Any, ...], dict[str, Any]] = {
        point_key(mode, p): {"seconds": [], "got": {}, "took": Counter()} for p in points
    }
    pairs = [(query, condition) for condition in draws.conditions for query in draws.queries[condition]]
    try:
        for i, (query, condition) in enumerate(pairs):
            for point in points if i % 2 == 0 else points[::-1]:
                index.rerank_feedback = None if point["feedback"] == "none" else point["feedback"]
                index.scan_threads = point["scan_threads"] or None
                index.rerank_cache = RerankCache()
                index._condition_vectors.pop(condition, None)  # benchmark-only: a never-seen condition's text
                start = time.perf_counter()
                rows, _ = index.search_rows(
                    query, condition, K + 1, strategy="two-stage", candidates=point["n"],
                    approximate=point["approximate"],
                )  # fmt: skip
                seconds = time.perf_counter() - start
                own = position.get(query)
                kept = [int(r) for r in rows if int(r) != own][:K]
                entry = timed[point_key(mode, point)]
                entry["seconds"].append(seconds)
                entry["got"][(query, condition)] = kept
                entry["took"][str(index.last_first_stage())] += 1
                key = index.key(condition)
                _, missing = pool_cache.lookup(key, np.asarray(kept))
                if missing:
                    found, _ = index.rerank_cache.lookup(key, np.asarray(missing))
                    pool_cache.store(key, missing, np.stack([found[r] for r in missing]))
    finally:
        index.rerank_cache = pool_cache
        index.scan_threads, index.rerank_feedback = threads_before, feedback_before
    for key, entry in timed.items():
        print(f"timed {key}: p50 {np.median(entry['seconds']):.3f} s", flush=True)
    return timed


def timed_during_fit(
    index: ConditionalIndex,
    draws: Draws,
    position: dict[str, int],
    n: int,
    feedback: str,
    conditions: list[str] | None = None,
) -> dict[str, Any]:
    """Step 5 (``--latency-fit``): each condition's queries searched one after another from its first, its own map
    fitted in the background meanwhile (the stub of :func:`hold_donor_maps` removed for this step), with an empty
    re-ranking cache per condition; returned rows' embeddings put into the pool's cache afterwards. ``conditions``:
    these of the draws' only (default: all)."""
    from finesim.index.store import MAPS
    from finesim.index.two_stage import map_file_name

    pool_cache, feedback_before = index.rerank_cache, index.rerank_feedback
    stub = index._map_or_fit_later
    del index._map_or_fit_later  # the class's own method again: a real background fit
    index.rerank_feedback = None if feedback == "none" else feedback
    entry: dict[str, Any] = {"seconds": [], "got": {}, "took": Counter(), "fit_seconds": {}}
    try:
        for condition in draws.conditions if conditions is None else conditions:
            key = index.key(condition)
            name = map_file_name(key, len(index), index.map_sample, index.map_ridge, [p.id for p in index.store.parts])
            saved = index.store.root / MAPS / name
            aside = saved.with_name(saved.name + ".aside")  # a name the index never reads, in the same folder
            if saved.is_file():
                saved.replace(aside)
            try:
                index._maps.pop(key, None)
                index.rerank_cache = RerankCache()
                index._condition_vectors.pop(condition, None)
                first = time.perf_counter()
                held_at: list[float] = []
                stop = threading.Event()

                def watch(key: str = key, first: float = first, held_at: list = held_at, stop: Any = stop) -> None:
                    while key not in index._maps and not stop.is_set():
                        time.sleep(0.05)
                    if key in index._maps:
                        held_at.append(time.perf_counter() - first)

                watcher = threading.Thread(target=watch, daemon=True)
                watcher.start()
                for query in draws.queries[condition]:
                    start = time.perf_counter()
                    rows, _ = index.search_rows(query, condition, K + 1, strategy="two-stage", candidates=n,
                                                approximate=False)  # fmt: skip
                    entry["seconds"].append(time.perf_counter() - start)
                    entry["took"][str(index.last_first_stage())] += 1
                    own = position.get(query)
                    entry["got"][(query, condition)] = [int(r) for r in rows if int(r) != own][:K]
                index.wait_for_maps()
                stop.set()
                watcher.join()
                entry["fit_seconds"][condition] = round(held_at[0], 1) if held_at else None
                kept = [r for (_, c), got in entry["got"].items() if c == condition for r in got]
                _, missing = pool_cache.lookup(key, np.asarray(kept))
                if missing:
                    found, _ = index.rerank_cache.lookup(key, np.asarray(missing))
                    pool_cache.store(key, missing, np.stack([found[r] for r in missing]))
            finally:
                if aside.is_file():
                    if saved.is_file():
                        aside.unlink()
                    else:
                        aside.replace(saved)
                index._maps.pop(key, None)  # the next conditions borrow the donors' maps only, as before
            print(f"{condition!r}: {len(draws.queries[condition])} searches during its fit,"
                  f" fit held after {entry['fit_seconds'][condition]} s", flush=True)  # fmt: skip
    finally:
        index.rerank_cache, index.rerank_feedback = pool_cache, feedback_before
        index._map_or_fit_later = stub
    return entry


def during_fit_in_turns(
    index: ConditionalIndex,
    draws: Draws,
    position: dict[str, int],
    n: int,
    feedback: str,
    settings: list[tuple[int | None, float | None]],
) -> list[dict[str, Any]]:
    """Step 5 once per ``(map_fit_batch, map_fit_yield)`` setting (None: the index's default), the settings taking
    turns condition by condition, their order reversed every other condition; one entry per setting, as
    :func:`timed_during_fit` returns it, with ``fit_batch`` and ``fit_yield``. The index's settings are put back."""
    entries: list[dict[str, Any]] = [{"seconds": [], "got": {}, "took": Counter(), "fit_seconds": {}} for _ in settings]
    default_batch, default_wait = index.map_fit_batch, index.map_fit_yield
    try:
        for i, condition in enumerate(draws.conditions):
            order = list(range(len(settings)))
            for j in reversed(order) if i % 2 else order:
                batch, wait = settings[j]
                index.map_fit_batch = default_batch if batch is None else batch
                index.map_fit_yield = default_wait if wait is None else wait
                one = timed_during_fit(index, draws, position, n, feedback, conditions=[condition])
                entry = entries[j]
                entry["seconds"] += one["seconds"]
                entry["got"].update(one["got"])
                entry["took"].update(one["took"])
                entry["fit_seconds"].update(one["fit_seconds"])
                entry["fit_batch"], entry["fit_yield"] = index.map_fit_batch, index.map_fit_yield
    finally:
        index.map_fit_batch, index.map_fit_yield = default_batch, default_wait
    return entries


def point_key(mode: str, point: dict[str, Any]) -> tuple[Any, ...]:
    return (mode, point["search"], point["feedback"], point["n"], point["scan_threads"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the index's bi-encoder (its ranking is the reference)")
    parser.add_argument("--index", required=True, help="the index two_stage_search.py kept (--work-dir)/index")
    parser.add_argument("--work-dir", required=True, help="the pool's embeddings are kept here (resumable)")
    parser.add_argument("--data", default=None)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--conditions", type=int, default=6)
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--depth", type=int, default=2500, help="each first stage's top rows per query in the pool")
    parser.add_argument("--candidates", default="50,100,200,400")
    parser.add_argument("--first-stage-search", default="exact,hnsw")
    parser.add_argument("--modes", default="conditioned,mapped,borrowed")
    parser.add_argument("--feedback", default="none,local-map", help="rerank_feedback settings (none: off)")
    parser.add_argument("--check-cache-dir", default=None, help="two_stage_feedback.py's --cache-dir (the check)")
    parser.add_argument("--check-size", type=int, default=CHECK_SIZE, help="the check's corpus prefix (its cache's)")
    parser.add_argument("--latency", action="store_true", help="also time the searches (step 4; idle machine)")
    parser.add_argument("--latency-modes", default="mapped,borrowed")
    parser.add_argument("--latency-candidates", default="100,200")
    parser.add_argument("--latency-feedback", default="local-map", help="rerank_feedback settings timed")
    parser.add_argument(
        "--latency-scan-threads", default="1,0", help="the exact scan's scan_threads timed (0: the default)"
    )
    parser.add_argument(
        "--latency-fit", type=int, default=None, help="N for step 5: first queries while the map is fitted"
    )
    parser.add_argument(
        "--latency-fit-batch", default=None, help="step 5 once per value of the fit's batch (map_fit_batch), e.g. 64,16"
    )
    parser.add_argument(
        "--latency-fit-yield",
        default=None,
        help="step 5 once per value of the fit's wait for a gap between searches (map_fit_yield, seconds), e.g. 0,1",
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--note", default=None)
    parser.add_argument("--output", default="benchmarks/results/two_stage_recall_1m_pooled.json")
    args = parser.parse_args()
    if args.depth < 4 * K:
        raise SystemExit(f"--depth must be at least {4 * K}, got {args.depth}")
    ns = [int(n) for n in args.candidates.split(",")]
    if max(ns) > args.depth:
        raise SystemExit(f"--depth {args.depth} must be at least the largest N ({max(ns)})")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    root = data_root(args.data)
    draws = Draws.make(root, args.seed, args.size, args.conditions, args.queries)
    index = ConditionalIndex.open(args.index, model=args.model)
    if len(index) != len(draws.corpus) or index.store.texts(range(len(index))) != draws.corpus:
        raise SystemExit(f"--index {args.index}: not an index of this corpus ({len(draws.corpus):,} texts, --seed)")
    print(f"{len(index):,} texts, {len(draws.conditions)} conditions x {args.queries} queries", flush=True)
    check = check_50k(args, index, draws)

    first = np.concatenate([np.asarray(index.store.array(p, FIRST_STAGE), dtype=np.float32) for p in index.store.parts])
    position = {text: i for i, text in enumerate(draws.corpus)}
    sample = map_sample_rows(len(index), index.map_sample)
    index.rerank_cache = RerankCache(max_rows=len(index) * len(draws.conditions))
    work = Path(args.work_dir)
    pools: dict[str, dict[str, Any]] = {}
    vectors_of: dict[str, np.ndarray] = {}
    for condition in draws.conditions:
        key = index.key(condition)
        keep = work / key[:16]
        start = time.perf_counter()
        under_sample = embed_pool(index, condition, sample, keep / "sample")
        weights, inverse = map_parts(first, under_sample, sample, index.map_ridge)
        vectors = np.asarray(index.embedder.conditioned(draws.queries[condition], condition), np.float32)
        vectors_of[condition] = vectors
        stage_tops = pool_of(first, vectors, weights, inverse, args.depth)
        small = args.depth // 4
        deep = np.unique(np.concatenate([p[m] for p in stage_tops for m in ("conditioned", "mapped")]))
        shallow = np.unique(np.concatenate([p[m][:small] for p in stage_tops for m in ("conditioned", "mapped")]))
        rest = np.setdiff1d(deep, sample)
        print(f"{condition!r}: pool of {len(rest) + len(sample):,} rows (depth {args.depth})", flush=True)
        under_rest = embed_pool(index, condition, rest, keep / f"depth{args.depth}")
        index.rerank_cache.store(key, sample.tolist(), under_sample)
        index.rerank_cache.store(key, rest.tolist(), under_rest)
        pools[condition] = {
            "rows": np.union1d(sample, rest),
            "shallow": np.union1d(sample, shallow),
            "map": (weights, inverse),
            "seconds": round(time.perf_counter() - start, 1),
        }

    stage = index.first_stage()
    assert stage is not None
    # the first stage's HNSW graph (built and saved by the first approximate search if the index lacks it)
    searches = args.first_stage_search.split(",")
    own_rule = index._ann_for_first_stage("hnsw").params["ef_search_per_result"] if "hnsw" in searches else 0
    found: dict[tuple[str, str, str, int], dict[tuple[str, str], list[int]]] = {}
    stages: dict[tuple[str, str, str, int], Counter[str]] = {}
    feedbacks = [f.strip() for f in args.feedback.split(",")]
    modes = args.modes.split(",")
    if "borrowed" in modes[:-1]:
        raise SystemExit("--modes: 'borrowed' must come last (it leaves the index borrowing maps)")
    donors = None
    timed: dict[tuple[Any, ...], dict[str, Any]] = {}
    if args.latency and sum(label.startswith("hnsw") for label in searches) > 1:
        raise SystemExit("--latency times one HNSW rule at a time (the rule is set on the shared graph)")
    for setting in ("batch", "yield"):
        if getattr(args, f"latency_fit_{setting}") and not args.latency_fit:
            raise SystemExit(f"--latency-fit-{setting} is a setting of --latency-fit")
    if args.latency_fit and not args.latency:
        raise SystemExit("--latency-fit is a step of --latency (its settings are recorded there)")
    if args.latency_fit and modes[-1] != "borrowed":
        raise SystemExit("--latency-fit needs the 'borrowed' mode (its donors' maps held)")
    for mode in modes:
        if mode == "borrowed":
            donors = hold_donor_maps(index, draws, root)
        stage.query_mode = "mapped" if mode == "borrowed" else mode
        for search in searches:
            approximate = first_stage_search(index, search, own_rule)
            for feedback in feedbacks:
                index.rerank_feedback = None if feedback == "none" else feedback
                for n in ns:
                    start = time.perf_counter()
                    got: dict[tuple[str, str], list[int]] = {}
                    took: Counter[str] = Counter()
                    for condition in draws.conditions:
                        for query in draws.queries[condition]:
                            with index.rerank_cache.pairs_set_aside():  # each search as its condition's first
                                rows, _ = index.search_rows(
                                    query, condition, K + 1, strategy="two-stage", candidates=n,
                                    approximate=approximate,
                                )  # fmt: skip
                            took[str(index.last_first_stage())] += 1
                            own = position.get(query)
                            got[(query, condition)] = [int(r) for r in rows if int(r) != own][:K]
                    found[(mode, search, feedback, n)] = got
                    stages[(mode, search, feedback, n)] = took
                    print(f"searched {mode} {search} {feedback} N={n} in {time.perf_counter() - start:.0f} s",
                          flush=True)  # fmt: skip
        if args.latency and mode in args.latency_modes.split(","):
            points = [
                {"search": search, "approximate": first_stage_search(index, search, own_rule), "feedback": feedback,
                 "n": int(n), "scan_threads": int(threads)}
                for search in searches
                for feedback in args.latency_feedback.split(",")
                for n in args.latency_candidates.split(",")
                for threads in (args.latency_scan_threads.split(",") if search == "exact" else ["0"])
            ]  # fmt: skip
            timed.update(timed_searches(index, draws, position, mode, points))
        if args.latency_fit and mode == "borrowed":
            feedback = args.latency_feedback.split(",")[0]
            batches = [int(b) for b in args.latency_fit_batch.split(",")] if args.latency_fit_batch else [None]
            waits = [float(w) for w in args.latency_fit_yield.split(",")] if args.latency_fit_yield else [None]
            settings = [(batch, wait) for batch in batches for wait in waits]
            entries = during_fit_in_turns(index, draws, position, args.latency_fit, feedback, settings)
            for (batch, wait), during_fit in zip(settings, entries):
                timed[("during-fit", "exact", feedback, args.latency_fit, 0, batch, wait)] = during_fit
    stage.query_mode = index.first_stage_spec.query if index.first_stage_spec else "conditioned"

    # the references: the pool and every returned row (all cached: each was re-ranked)
    reference: dict[tuple[str, str], list[int]] = {}
    changed, reference_depth = [], []
    for condition in draws.conditions:
        key = index.key(condition)
        searched = [*found.values(), *(entry["got"] for entry in timed.values())]
        returned = {r for got in searched for (_, c), rows in got.items() if c == condition for r in rows}
        for query, q in zip(draws.queries[condition], vectors_of[condition]):
            own = position.get(query)
            tops = []
            for base in (pools[condition]["rows"], pools[condition]["shallow"]):
                rows = np.union1d(base, np.fromiter(returned, dtype=np.int64, count=len(returned)))
                cached, missing = index.rerank_cache.lookup(key, rows)
                assert not missing, "every pool row and returned row is in the re-ranking cache"
                tops.append(pooled_top(rows, np.stack([cached[int(r)] for r in rows]), q, own))
            reference[(query, condition)] = tops[0]
            changed.append(1.0 - recall_at_k(tops[0], tops[1], K))
            # how deep the reference rows sit: each row's better rank (0 = first) in the two first stages
            weights, inverse = pools[condition]["map"]
            ranked_by = (first @ q, (first @ (weights @ q)) * inverse)
            for row in tops[0]:
                reference_depth.append(min(int((s > s[row]).sum()) for s in ranked_by))
    share_changed = float(np.mean(changed))
    accepted = share_changed <= ACCEPT_CHANGED and (check is None or check["held_share"] >= ACCEPT_HELD)
    print(f"reference rows changed from depth {args.depth // 4} to {args.depth}: {share_changed:.4f}", flush=True)

    curve = []
    for (mode, search, feedback, n), got in found.items():
        per_query = [recall_at_k(reference[pair], rows, K) for pair, rows in got.items()]
        point = {
            "query_mode": mode,
            "first_stage_search": search,
            "rerank_feedback": "none" if feedback == "none" else str(parse_rerank_feedback(feedback)),
            "candidates": n,
            "recall_at_10_pooled": round(float(np.mean(per_query)), 4),
            "min_recall": round(float(np.min(per_query)), 4),
            "searches": len(per_query),
            "first_stages": dict(stages[(mode, search, feedback, n)]),
        }
        curve.append(point)
        print(f"{mode} {search} {point['rerank_feedback']} N={n}: recall@10 <= {point['recall_at_10_pooled']}")

    latency = []
    for (mode, search, feedback, n, threads, *_), entry in timed.items():
        per_query = [recall_at_k(reference[pair], rows, K) for pair, rows in entry["got"].items()]
        latency.append(
            {
                "query_mode": mode,
                "first_stage_search": search,
                "rerank_feedback": "none" if feedback == "none" else str(parse_rerank_feedback(feedback)),
                "candidates": n,
                "scan_threads": threads or None,  # None: the library's default (torch.get_num_threads())
                **percentiles(entry["seconds"]),
                "recall_at_10_pooled": round(float(np.mean(per_query)), 4),
                "searches": len(per_query),
                "first_stages": dict(entry["took"]),
                **({k: entry[k] for k in ("fit_seconds", "fit_batch", "fit_yield")} if "fit_seconds" in entry else {}),
            }
        )
        print(f"latency {mode} {search} {feedback} N={n} scan_threads={threads or 'default'}: {latency[-1]}")

    payload = {
        "benchmark": "two_stage_pooled",
        "description": "recall@10 of two-stage search over the whole corpus against a pooled reference (the exact "
        "top 10 among the rows of two deep first stages and every returned row): an upper bound on recall against "
        "the exact ranking, equal to it when the pool holds the exact top 10",
        "command": " ".join(sys.argv),
        "settings": {
            "model": args.model,
            "size": len(index),
            "conditions": draws.conditions,
            "queries_per_condition": args.queries,
            "seed": args.seed,
            "depth": args.depth,
            "k": K,
            "index_dtype": index.store.dtype,  # float16: its first stage scanned in float16 (candidate_dot)
            "map_sample": index.map_sample,
            "map_ridge": index.map_ridge,
            "own_text_left_out": True,
            "threads": torch.get_num_threads(),
            "latency": {
                "modes": args.latency_modes.split(","),
                "candidates": [int(n) for n in args.latency_candidates.split(",")],
                "rerank_feedback": args.latency_feedback.split(","),
                "scan_threads": [int(t) or None for t in args.latency_scan_threads.split(",")],
                "during_fit_candidates": args.latency_fit,
                "cache": "empty before each search (every candidate embedded); the condition's text embedding dropped",
            }
            if args.latency
            else None,
            "accept_rule": {"max_changed_share": ACCEPT_CHANGED, "min_held_share_50k": ACCEPT_HELD},
            "note": args.note,
        },
        "results": {
            "pool": [
                {"condition": c, "rows": len(p["rows"]), "shallow_rows": len(p["shallow"]), "seconds": p["seconds"]}
                for c, p in pools.items()
            ],
            "reference_changed_share": round(share_changed, 4),
            # each reference row's better rank (0 = first) in the two first stages the pool comes from
            "reference_depth": {
                "max": int(max(reference_depth)),
                "p95": float(np.percentile(reference_depth, 95)),
                "median": float(np.median(reference_depth)),
            },
            "check_50k": check,
            "donors": donors,
            "reference_accepted": accepted,
            "recall": curve,
            "latency": latency,
        },
        "environment": environment_record(),
    }
    extra = {str(work): "<work-dir>", str(Path(args.index)): "<index>"}
    write_json_atomic(args.output, portable(payload, path_roots(extra=extra)))
    print(f"wrote {args.output}", flush=True)


if __name__ == "__main__":
    main()

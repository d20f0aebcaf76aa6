"""Benchmark: local-map feedback that also learns from the earlier searches of the same condition.

Local-map feedback (``finesim.index.feedback``) fits its map on the candidates re-ranked by the search at hand. A
server or a batch asks many queries under one condition, and every earlier search's re-ranked candidates sit in the
re-ranking cache with their embeddings under the condition: more pairs for the same fit, at no encode. This script
measures feedback whose fit also takes those pairs: before each round (the first included, once the cache holds at
least ``MIN_CACHED`` pairs of the condition) the map is fitted on the cached pairs plus the search's own, and ranks the
pool (the `conditioned` ranking's next 10 N candidates not yet re-ranked). The chosen feedback setting is otherwise
unchanged (4 rounds, ridge 0.1, pool 10 N).

**The rule, written before this script was run.** On ``two_stage_feedback.py``'s train conditions (4 conditions, 25
queries each in their drawn order, 10k texts; the `conditioned` first stage), the metric is the mean recall@10 at N =
100 and 200 over each condition's queries after its first (a first query has no cache). The cache-fed fit would
qualify to be built as the default if it beats feedback without the cache by at least 0.02, else it stays unbuilt
(``becomes_default`` in the results file; it qualified, and the library has it since: ``local-map:...,earlier``).
Reported on the never-seen validation conditions (6 x 10 queries in their drawn order, 20k texts), queries after
the first. A simulation over stored embeddings, like ``two_stage_feedback.py`` (its cache of embeddings is read).

**Real searches, once the library had it** (``--latency-index DIR``: ``two_stage_feedback.py``'s `conditioned`
index of the same corpus; written after the simulation above was run, before these searches were): each validation
condition's queries are searched in their drawn order through ``ConditionalIndex.search`` (k = 10, exact first
stage) at N in {100, 200}, with ``rerank_feedback`` ``local-map:4,0.1,10,own`` and ``local-map:4,0.1,10,earlier``
taking turns (which goes first alternates per query). Each setting keeps its own re-ranking cache across the
queries of a condition (a fresh one per N), as a server would, so its later searches also encode fewer candidates.
Reported per setting: p50/p95 wall time and recall@10 against the exact ranking, over the queries after each
condition's first, and over the first queries alone. Timings only on an idle machine.

    python benchmarks/two_stage_feedback_cache.py --model runs/rerank/torch-bf16 --cache-dir runs/feedback-cache \
        [--latency-index runs/feedback-index]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from main_job_check import git_commit
from two_stage_feedback import POOL, data_record, embed, model_tag, ranked, sizes, truth_of
from two_stage_map_selection import train_conditions
from two_stage_search import Draws

from finesim import ConditionalIndex
from finesim.index.encoders import IndexEncoder, load_index_model
from finesim.index.feedback import LocalMapFeedback
from finesim.index.topk import best_rows
from finesim.index.two_stage import RerankCache, fit_condition_map
from finesim.paths import data_root
from finesim.results import environment_record, path_roots, portable, write_json_atomic

K = 10
ROUNDS = (0.25, 0.25, 0.25, 0.25)
RIDGE = 0.1
MIN_CACHED = 100
METRIC_NS = (100, 200)
MIN_GAIN = 0.02
# per condition: its texts' embeddings under it, and its queries in order (query vector, rows left out of its search)
Conditions = dict[str, tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]]


def one_search(
    plain: np.ndarray, under: np.ndarray, q: np.ndarray, n: int, left_out: np.ndarray, cached: list[int],
    rounds: tuple[float, ...] = ROUNDS, ridge: float = RIDGE, pool_size: int = POOL, min_cached: int = MIN_CACHED,
) -> tuple[np.ndarray, list[int]]:  # fmt: skip
    """The top K of a search with ``n`` re-ranks and the rows it re-ranked; ``cached``: rows re-ranked by the
    condition's earlier searches (their pairs join every fit; empty: feedback as shipped). The other arguments: the
    setting (the shipped one by default; ``two_stage_feedback_cache_grid.py`` varies them)."""
    first = plain @ q
    scored = left_out.copy()
    rows: list[np.ndarray] = []
    for i, size in enumerate(sizes(n, rounds)):
        done = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        fit_rows = np.unique(np.concatenate([np.asarray(cached, dtype=np.int64), done]))
        fit_rows = fit_rows[~left_out[fit_rows]]  # the query's own text never joins a fit (as without the cache)
        if i == 0 and len(cached) < min_cached:
            chunk = ranked(first, size, scored)
        else:
            weights = fit_condition_map(plain[fit_rows], under[fit_rows], ridge)
            pool = ranked(first, pool_size * n, scored)
            mapped = plain[pool] @ weights
            chunk = pool[np.argsort(-(mapped @ q) / np.linalg.norm(mapped, axis=1), kind="stable")[:size]]
        scored[chunk] = True
        rows.append(chunk)
    done = np.concatenate(rows)
    return best_rows(under[done] @ q, done, K)[0], done.tolist()


def run(
    plain: np.ndarray, conditions: Conditions, n: int,
    use_cache: bool, **setting: Any,
) -> float:  # fmt: skip
    """Mean recall@K over every condition's queries after its first, the queries in order (``setting``: passed to
    :func:`one_search`)."""
    hits = []
    for under, queries in conditions.values():
        cached: dict[int, None] = {}
        for i, (q, left_out) in enumerate(queries):
            top, done = one_search(plain, under, q, n, left_out, list(cached) if use_cache else [], **setting)
            if i > 0:
                truth = truth_of(under @ q, left_out)
                hits.append(len(set(top.tolist()) & set(truth.tolist())) / K)
            cached.update(dict.fromkeys(done))
    return round(float(np.mean(hits)), 4)


def real_searches(
    index: ConditionalIndex, draws: Draws, truths: dict[str, list[tuple[np.ndarray, np.ndarray]]]
) -> dict[str, Any]:
    """The docstring's real searches: per N and setting, p50/p95 ms and recall@10 of the queries after each
    condition's first, and of the first ones."""
    settings = {name: LocalMapFeedback(4, RIDGE, POOL, earlier=name == "earlier") for name in ("own", "earlier")}
    out: dict[str, Any] = {"settings": {name: str(f) for name, f in settings.items()}}
    for n in (100, 200):
        caches = {name: RerankCache() for name in settings}
        times: dict[tuple[str, bool], list[float]] = {(name, later): [] for name in settings for later in (False, True)}
        hits: dict[tuple[str, bool], list[float]] = {key: [] for key in times}
        turn = 0
        for condition in draws.conditions:
            for i, (query, (truth, left_out)) in enumerate(zip(draws.queries[condition], truths[condition])):
                for name in list(settings) if turn % 2 == 0 else list(settings)[::-1]:
                    index.rerank_cache, index.rerank_feedback = caches[name], settings[name]
                    start = time.perf_counter()
                    found = index.search(query, condition, k=K + 1, strategy="two-stage", candidates=n)
                    times[name, i > 0].append(1000 * (time.perf_counter() - start))
                    rows = [r["index"] for r in found if not left_out[r["index"]]][:K]  # its own text left out
                    hits[name, i > 0].append(len(set(truth.tolist()) & set(rows)) / K)
                turn += 1
        out[str(n)] = {
            name: {
                which: {"p50_ms": round(float(np.percentile(times[name, later], 50)), 1),
                        "p95_ms": round(float(np.percentile(times[name, later], 95)), 1),
                        "recall_at_10": round(float(np.mean(hits[name, later])), 4),
                        "searches": len(times[name, later])}
                for which, later in (("after_first", True), ("first", False))
            }
            for name in settings
        }  # fmt: skip
        print(f"real searches N={n}: {out[str(n)]}", flush=True)
    index.rerank_cache, index.rerank_feedback = RerankCache(), None
    return out


def table(plain: np.ndarray, conditions: dict, ns: tuple[int, ...]) -> dict[str, dict[str, float]]:
    return {
        name: {str(n): run(plain, conditions, n, use) for n in ns}
        for name, use in (("feedback", False), ("feedback + cached pairs", True))
    }


def selection_conditions(encoder: IndexEncoder, root: Path, corpus: list[str], cache: Path, tag: str) -> Conditions:
    """The train conditions (``two_stage_map_selection.py``'s draw) over ``corpus``, with their 25 queries each
    (``two_stage_feedback.py``'s draw: corpus texts, each left out of its own search): (embeddings under the
    condition, [(query vector, left-out mask)])."""
    rng = np.random.default_rng(8)  # two_stage_feedback.py's query draw
    out: Conditions = {}
    for condition in train_conditions(root, 7, 4):
        under = embed(encoder, corpus, condition, cache, tag)
        queries = []
        for qi in rng.choice(len(corpus), 25, replace=False):
            left_out = np.zeros(len(corpus), dtype=bool)
            left_out[qi] = True
            queries.append((under[qi], left_out))
        out[condition] = (under, queries)
    return out


def validation_conditions(encoder: IndexEncoder, draws: Draws, cache: Path, tag: str) -> Conditions:
    """The never-seen validation conditions of ``draws`` with their queries (a query that is a corpus text left
    out of its own search), as :func:`selection_conditions` gives them."""
    position = {t: i for i, t in enumerate(draws.corpus)}
    out: Conditions = {}
    for condition in draws.conditions:
        under = embed(encoder, draws.corpus, condition, cache, tag)
        vectors = np.asarray(encoder.conditioned(draws.queries[condition], condition), dtype=np.float32)
        queries = []
        for query, q in zip(draws.queries[condition], vectors):
            left_out = np.zeros(len(draws.corpus), dtype=bool)
            if query in position:
                left_out[position[query]] = True
            queries.append((q, left_out))
        out[condition] = (under, queries)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", default=None)
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--select-size", type=int, default=10_000)
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--latency-index", default=None, help="time real searches on this index (the docstring)")
    parser.add_argument("--note", default=None)
    parser.add_argument("--output", default="benchmarks/results/two_stage_feedback_cache.json")
    args = parser.parse_args()

    root = data_root(args.data)
    cache = Path(args.cache_dir)
    encoder = IndexEncoder(load_index_model(args.model).model, "bi")
    tag = model_tag(args.model)
    draws = Draws.make(root, 0, args.size, 6, 10)
    corpus = draws.corpus
    plain = embed(encoder, corpus, None, cache, tag)

    size = min(args.select_size, len(corpus))
    select = selection_conditions(encoder, root, corpus[:size], cache, tag)
    selection = table(plain[:size], select, METRIC_NS)
    metric = {name: round(float(np.mean(list(row.values()))), 4) for name, row in selection.items()}
    gain = round(metric["feedback + cached pairs"] - metric["feedback"], 4)
    print(f"selection {selection} metric {metric} gain {gain:+.4f}", flush=True)

    report_conditions = validation_conditions(encoder, draws, cache, tag)
    report = table(plain, report_conditions, (50, 100, 200))
    print(f"report {report}", flush=True)

    latency = None
    if args.latency_index:
        index = ConditionalIndex.open(args.latency_index, model=args.model)
        if len(index) != len(corpus) or index.first_stage_spec is None \
                or index.first_stage_spec.query != "conditioned":  # fmt: skip
            raise SystemExit(f"--latency-index {args.latency_index}: not a conditioned two-stage index of this corpus")
        truths = {c: [(truth_of(report_conditions[c][0] @ q, left_out), left_out) for q, left_out in queries]
                  for c, (_, queries) in report_conditions.items()}  # fmt: skip
        index.search("warm-up", draws.conditions[0], k=K, strategy="two-stage", candidates=100)
        latency = real_searches(index, draws, truths)

    payload = {
        "benchmark": "two_stage_feedback_cache",
        "description": "local-map feedback whose fit also takes the pairs re-ranked by the earlier searches of the "
        "same condition (the re-ranking cache): recall@10 of the queries after a condition's first, simulated over "
        "stored embeddings; selection on C-STS train conditions, report on never-seen validation conditions",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "git_commit": git_commit(),
        "settings": {
            "model": args.model,
            "rounds": list(ROUNDS),
            "ridge": RIDGE,
            "pool": POOL,
            "min_cached": MIN_CACHED,
            "size": len(corpus),
            "select_size": size,
            "select_conditions": list(select),
            "report_conditions": draws.conditions,
            "metric": f"mean recall@{K} at N in {list(METRIC_NS)}, queries after each condition's first",
            "min_gain": MIN_GAIN,
            "data": data_record(root, draws),
            "note": args.note,
        },
        "environment": environment_record(),
        "results": {
            "selection": selection,
            "metric": metric,
            "gain": gain,
            "becomes_default": gain >= MIN_GAIN,
            "report": report,
            "real_searches": latency,
        },
    }
    extra = {str(cache): "<cache-dir>", **({args.latency_index: "<latency-index>"} if args.latency_index else {})}
    write_json_atomic(args.output, portable(payload, path_roots(root, extra=extra)))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

"""Benchmark: local-map feedback on top of a map — a condition's own map, or one borrowed from the nearest condition.

``two_stage_feedback.py`` chose local-map feedback for the `conditioned` first stage and found it **lowered** recall
on the `mapped` one: there the local map, fitted on a few re-ranked texts from the *unmapped* vectors, replaced the
order of a map fitted on 2048 random texts. This script measures feedback as a **residual** on top of a map ``W``:
the local map is fitted from the *mapped* first-stage vectors (``x W / ||x W||``, whose cosine with the query is the
mapped score) to the texts' embeddings under the condition, and ranks the mapped ranking's top ``10 N``. With ``W =
I`` it is the `conditioned` feedback already chosen; with few rows fitted it stays near the map's own order. The
setting is the one chosen (4 equal rounds, ridge 0.1, pool 10 N); nothing else is tuned here.

Two maps: the condition's **own** (fitted on ``map_sample`` texts: what a `mapped` index holds once the condition has
been seen) and a **borrowed** one (the map of the nearest of 100 C-STS train conditions drawn at random with seed
11, excluding the condition itself and any validation condition, nearest by the cosine of the model's embeddings of
the condition texts alone: what a `mapped` index uses for a never-seen condition's first queries with ``map_wait``
False, ``two_stage_borrowed_map.py``).

**The rule, written before this script was run.** On the train conditions of ``two_stage_feedback.py``'s selection
(4 x 25 queries, 10k texts), the metric is again the mean recall@10 at N = 100 and 200. Residual feedback is applied
to a ranking by the **own** map if its metric does not fall by more than 0.005 there, and to a ranking by a
**borrowed** map if its metric rises by at least 0.02 — each decided separately. Reported on the never-seen
validation conditions (6 x 10 queries, 20k texts) at N in {50, 100, 200}, with and without, for both maps and (for
comparison) the `conditioned` first stage. Recall against the model's exact ranking, simulated over stored
embeddings (the cache of ``two_stage_feedback.py``; the donors' map samples are embedded here and cached too).

**Real searches** (``--latency-index DIR``, a `mapped` index of the 20k texts built there on first use): the index
holds the maps of the six validation conditions' donors (fitted once, before timing), ``map_wait`` is False and the
condition's own map is never fitted (a benchmark-only stub of the background fit, so every search is a never-seen
condition's early query), so each search borrows the nearest map the index holds (above ``map_borrow_min_cosine``;
else it ranks as `conditioned`); at N in {100, 200}, without and with the feedback, taking turns, the re-ranking
cache emptied before each search: p50/p95 wall time, the first stage the library took, and recall@10 against the
exact ranking. Timings only on an idle machine.

    python benchmarks/two_stage_feedback_maps.py --model runs/rerank/torch-bf16 --cache-dir runs/feedback-cache \\
        [--latency-index runs/feedback-index-mapped]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from main_job_check import git_commit
from two_stage_feedback import POOL, Feedback, data_record, embed, model_tag, search, timed_searches, truth_of
from two_stage_map_selection import train_conditions
from two_stage_search import Draws

from finesim.data.csts import read_csts
from finesim.index import ConditionalIndex
from finesim.index.encoders import IndexEncoder, load_index_model
from finesim.index.feedback import LOCAL_MAP_FEEDBACK
from finesim.index.two_stage import MAP_RIDGE, MAP_SAMPLE, fit_condition_map, map_sample_rows
from finesim.paths import data_root
from finesim.results import environment_record, path_roots, portable, write_json_atomic

K = 10
METRIC_NS = (100, 200)
REPORT_NS = (50, 100, 200)
CHOSEN = Feedback("localmap", 0, (0.25, 0.25, 0.25, 0.25), ridge=0.1)
OWN_TOLERANCE = 0.005
BORROWED_GAIN = 0.02
DONOR_POOL, DONOR_SEED = 100, 11


def unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def donor_pool(root: Path) -> list[str]:
    """The distinct C-STS train conditions that validation does not have (``train_conditions``' pool, file order)."""
    train, _ = read_csts(root / "csts" / "train.csv")
    validation, _ = read_csts(root / "csts" / "validation.csv")
    return sorted(set(train["condition"]) - set(validation["condition"]))


def nearest_donor(encoder: IndexEncoder, condition: str, pool: list[str]) -> tuple[str, float]:
    """The nearest of ``DONOR_POOL`` conditions drawn from ``pool`` (less ``condition``) with ``DONOR_SEED``."""
    drawn = random.Random(f"{DONOR_SEED}-{condition}").sample([c for c in pool if c != condition], DONOR_POOL)
    vectors = np.asarray(encoder.plain([condition, *drawn]), dtype=np.float32)
    cosines = vectors[1:] @ vectors[0]
    best = int(np.argmax(cosines))
    return drawn[best], round(float(cosines[best]), 4)


def mean_recall(cases: list[tuple], ns: tuple[int, ...], feedback: Feedback | None) -> dict[str, float]:
    """Mean recall@K per N over ``cases`` (mapped unit vectors, exact scores, q, truth, left-out mask, under)."""
    out = {}
    for n in ns:
        hits = [
            len(set(search(m @ q, m, e, q, n, feedback, lo, u).tolist()) & set(t.tolist())) / K
            for m, e, q, t, lo, u in cases
        ]
        out[str(n)] = round(float(np.mean(hits)), 4)
    return out


def table(cases: dict[str, list[tuple]], ns: tuple[int, ...]) -> dict[str, dict[str, dict[str, float]]]:
    """Mean recall@K per first stage, without and with the chosen feedback."""
    return {
        kind: {"none": mean_recall(c, ns, None), str(CHOSEN): mean_recall(c, ns, CHOSEN)} for kind, c in cases.items()
    }


def build_cases(
    encoder: IndexEncoder, corpus: list[str], plain: np.ndarray, conditions: list[str],
    queries: dict[str, list[int | str]], pool: list[str], cache: Path, tag: str,
) -> tuple[dict[str, list[tuple]], dict[str, Any]]:  # fmt: skip
    """Per first stage (conditioned, own, borrowed), the simulation's cases; and each condition's donor."""
    n = len(corpus)
    rows = map_sample_rows(n, MAP_SAMPLE)
    position = {t: i for i, t in enumerate(corpus)}
    cases: dict[str, list[tuple]] = {"conditioned": [], "own map": [], "borrowed map": []}
    donors: dict[str, Any] = {}
    for condition in conditions:
        under = embed(encoder, corpus, condition, cache, tag)
        own = fit_condition_map(plain[rows], under[rows], MAP_RIDGE)
        donor, cosine = nearest_donor(encoder, condition, pool)
        donors[condition] = {"donor": donor, "cosine": cosine}
        donor_under = embed(encoder, [corpus[r] for r in rows], donor, cache, tag)
        borrowed = fit_condition_map(plain[rows], donor_under, MAP_RIDGE)
        maps = {"conditioned": plain, "own map": unit_rows(plain @ own), "borrowed map": unit_rows(plain @ borrowed)}
        for query in queries[condition]:
            left_out = np.zeros(n, dtype=bool)
            if isinstance(query, int):  # a corpus text, left out of its own ranking
                q, left_out[query] = under[query], True
            else:
                q = np.asarray(encoder.conditioned([query], condition)[0], dtype=np.float32)
                if query in position:
                    left_out[position[query]] = True
            exact = under @ q
            truth = truth_of(exact, left_out)
            for kind, mapped in maps.items():
                cases[kind].append((mapped, exact, q, truth, left_out, under))
    return cases, donors


def measure_latency(
    args: argparse.Namespace, corpus: list[str], draws: Draws, donors: dict[str, Any], cases: list[tuple]
) -> dict[str, Any]:
    """Real searches of never-seen conditions through borrowed maps, without and with feedback (the docstring)."""
    folder = Path(args.latency_index)
    if (folder / "manifest.json").is_file():
        index = ConditionalIndex.open(folder, model=args.model)
    else:
        index = ConditionalIndex.build(args.model, corpus, folder, first_stage_query="mapped", show_progress=True)
    spec = index.first_stage_spec
    if len(index) != len(corpus) or spec is None or spec.query != "mapped":
        raise SystemExit(f"--latency-index {folder}: not a mapped two-stage index of this corpus")
    for donor in dict.fromkeys(d["donor"] for d in donors.values()):
        index._condition_map(donor, index.key(donor))  # held (read from maps/ when saved), as if served before
    index.map_wait = False
    index._map_or_fit_later = lambda condition, key: None  # stub: the condition's own map is never ready
    pairs = draws.pairs()
    ways = [("none", None), (str(LOCAL_MAP_FEEDBACK), LOCAL_MAP_FEEDBACK)]
    index.search("warm-up", pairs[0][1], k=K, strategy="two-stage", candidates=100)
    return timed_searches(index, pairs, cases, ways)


def metric(row: dict[str, float]) -> float:
    return round(float(np.mean([row[str(n)] for n in METRIC_NS])), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", default=None)
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--select-size", type=int, default=10_000)
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--latency-index", default=None, help="time real searches on this mapped index (built here)")
    parser.add_argument("--note", default=None)
    parser.add_argument("--output", default="benchmarks/results/two_stage_feedback_maps.json")
    args = parser.parse_args()

    root = data_root(args.data)
    cache = Path(args.cache_dir)
    encoder = IndexEncoder(load_index_model(args.model).model, "bi")
    tag = model_tag(args.model)
    draws = Draws.make(root, 0, args.size, 6, 10)  # two_stage_feedback.py's draws
    corpus = draws.corpus
    plain = embed(encoder, corpus, None, cache, tag)
    pool = donor_pool(root)

    size = min(args.select_size, len(corpus))
    select_conditions = train_conditions(root, 7, 4)
    rng = np.random.default_rng(8)
    select_queries: dict[str, list[int | str]] = {c: [int(i) for i in rng.choice(size, 25, replace=False)]
                                                  for c in select_conditions}  # fmt: skip
    cases, select_donors = build_cases(encoder, corpus[:size], plain[:size], select_conditions, select_queries, pool,
                                       cache, tag)  # fmt: skip
    selection = table(cases, METRIC_NS)
    for kind, rows in selection.items():
        for name, row in rows.items():
            print(f"select {kind:13} {name:48} {row} metric {metric(row)}", flush=True)
    own, borrowed = selection["own map"], selection["borrowed map"]
    own_change = round(metric(own[str(CHOSEN)]) - metric(own["none"]), 4)
    borrowed_change = round(metric(borrowed[str(CHOSEN)]) - metric(borrowed["none"]), 4)
    applies = {"own map": own_change >= -OWN_TOLERANCE, "borrowed map": borrowed_change >= BORROWED_GAIN}
    print(f"own map {own_change:+.4f}, borrowed map {borrowed_change:+.4f}: applies {applies}", flush=True)

    report_cases, report_donors = build_cases(encoder, corpus, plain, draws.conditions, dict(draws.queries), pool,
                                              cache, tag)  # fmt: skip
    report = table(report_cases, REPORT_NS)
    for kind, rows in report.items():
        for name, row in rows.items():
            print(f"report {kind:13} {name:48} {row}", flush=True)

    latency = None
    if args.latency_index:
        latency = measure_latency(args, corpus, draws, report_donors, report_cases["own map"])

    payload = {
        "benchmark": "two_stage_feedback_maps",
        "description": "local-map feedback as a residual on top of a map (the condition's own, or the nearest "
        "condition's borrowed): selection on C-STS train conditions, report on never-seen validation conditions; "
        "recall@10 against the model's exact ranking, simulated over stored embeddings (rule: the docstring)",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "git_commit": git_commit(),
        "settings": {
            "model": args.model,
            "feedback": str(CHOSEN),
            "pool": POOL,
            "size": len(corpus),
            "select_size": size,
            "select_conditions": select_conditions,
            "report_conditions": draws.conditions,
            "donor_pool": {"size": DONOR_POOL, "seed": DONOR_SEED, "of": len(pool)},
            "metric": f"mean recall@{K} at N in {list(METRIC_NS)}",
            "own_tolerance": OWN_TOLERANCE,
            "borrowed_gain": BORROWED_GAIN,
            "map": {"sample": MAP_SAMPLE, "ridge": MAP_RIDGE},
            "data": data_record(root, draws),
            "note": args.note,
        },
        "environment": environment_record(),
        "results": {
            "selection": selection,
            "select_donors": select_donors,
            "change": {"own map": own_change, "borrowed map": borrowed_change},
            "applies": applies,
            "report": report,
            "report_donors": report_donors,
            "latency": latency,
        },
    }
    extra = {str(cache): "<cache-dir>", **({args.latency_index: "<latency-index>"} if args.latency_index else {})}
    write_json_atomic(args.output, portable(payload, path_roots(root, extra=extra)))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

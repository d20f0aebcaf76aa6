"""Benchmark: a never-seen condition searched through the map of the nearest condition already fitted.

The `mapped` first stage (docs/search.md) fits a linear map per condition on its first query: ``map_sample`` corpus
texts embedded under it, about 12-20 s with MiniLM on 2 cores, so a never-seen condition's first search either waits
for that fit or (``map_wait = False``) is answered by the `conditioned` first stage, whose recall is far lower. This
script measures a third way for that first search: **borrow** the map of the nearest condition whose map is already
held (nearest by the cosine of the model's embeddings of the two condition texts alone), while the condition's own
map is fitted.

Procedure (the corpus, conditions and queries of ``two_stage_search.py`` with the same ``--seed``, ``--size``,
``--conditions`` and ``--queries``, so an index it built and kept with ``--work-dir`` is reused here; that index must
store the measured conditions' exact embeddings, which give both the exact ranking and a re-ranking cache that costs
no encoding):

1. The exact top k of every (query, condition): the reference.
2. Donor pools: the distinct C-STS **train** conditions, less any equal to a measured condition (compared
   case-folded, spaces collapsed), so every measured condition stays never seen; ``all`` of them (a best case: an
   index that has fitted thousands of maps) and ``--pool-size`` drawn at random with ``--seed`` (an index that has
   served that many conditions before); as a control, also the random pool's *farthest* condition.
3. For each measured condition and pool: the donor is the pool's condition with the highest cosine to it; its map is
   fitted on this index (its sample embedded under the donor, as a server would have done when the donor was first
   searched; kept in the index's ``maps/`` like any fitted map, so a rerun reads it) and used as the measured
   condition's map. The donors are picked here, from whole pools; an index picks among the maps it holds (at most
   16, ``ConditionalIndex._borrowed_map``) and only above ``map_borrow_min_cosine``.
4. Recall@k of two-stage search with the exact first stage at each N of ``--candidates`` for the first-stage queries
   `conditioned`, `mapped` (the condition's own map) and each pool's borrowed map.

    flock /tmp/finesim-cpu.lock python benchmarks/two_stage_borrowed_map.py \\
        --model runs/minilm-bi-mse-tuned-fp32-onnx \\
        --index /work/ts50k-mapped --size 50000 --conditions 6 --queries 10 \\
        --output benchmarks/results/two_stage_borrowed_map.json
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from main_job_check import git_commit
from two_stage_search import Draws, fill_cache

from finesim.index import ConditionalIndex, recall_at_k
from finesim.index.two_stage import RerankCache
from finesim.paths import data_root
from finesim.results import environment_record, path_roots, portable, write_json_atomic


def same_condition(a: str, b: str) -> bool:
    """Equal once case-folded with runs of spaces collapsed ("Type of beverage" is "type of beverage")."""
    return " ".join(a.casefold().split()) == " ".join(b.casefold().split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the bi-encoder the index was built with")
    parser.add_argument("--index", required=True, help="the index folder two_stage_search.py kept (--work-dir)/index")
    parser.add_argument("--data", default=None)
    parser.add_argument("--size", type=int, default=50000)
    parser.add_argument("--conditions", type=int, default=6)
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--candidates", default="50,100,200")
    parser.add_argument("--pool-size", type=int, default=100, help="the random donor pool's size")
    parser.add_argument(
        "--held",
        type=int,
        default=0,
        help="also: the index holding the maps of this many train conditions drawn at random (one draw per "
        "--held-draws seed), each measured condition's donor picked by the index itself (map_borrow_min_cosine "
        "applied: a condition with no donor near enough is ranked as conditioned)",
    )
    parser.add_argument("--held-draws", default="1,2", help="seeds of the --held draws, comma-separated")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--note", default=None)
    parser.add_argument("--output", default="benchmarks/results/two_stage_borrowed_map.json")
    args = parser.parse_args()
    ns = [int(n) for n in args.candidates.split(",")]

    from finesim.data.csts import read_csts

    root = data_root(args.data)
    draws = Draws.make(root, args.seed, args.size, args.conditions, args.queries)  # two_stage_search.py's draws
    corpus, conditions, pairs = draws.corpus, draws.conditions, draws.pairs()
    files, csts_file = draws.files, draws.csts_file

    index = ConditionalIndex.open(args.index, model=args.model)
    index.rerank_feedback = None  # the first stages' own candidates, as its committed results were measured
    if len(index) != len(corpus) or index.store.texts(range(len(corpus))) != corpus:
        raise SystemExit(f"--index {args.index}: not an index of this corpus")
    missing = [
        c for c in conditions if any(index.store.condition_array(index.key(c), p) is None for p in index.store.parts)
    ]
    if missing:
        raise SystemExit(f"--index {args.index}: does not store the measured conditions {missing}")
    stage = index.first_stage()
    assert stage is not None

    train, _ = read_csts(root / "csts" / "train.csv")
    donors_all = [c for c in dict.fromkeys(train["condition"]) if not any(same_condition(c, m) for m in conditions)]
    pools = {"all": donors_all, f"random {args.pool_size}": random.Random(args.seed).sample(donors_all, args.pool_size)}
    print(
        f"{len(corpus)} texts, {len(pairs)} queries; donor pools:",
        ", ".join(f"{k} ({len(v)})" for k, v in pools.items()),
    )

    exact = {(q, c): [int(r) for r in index.search_rows(q, c, args.k, strategy="exact")[0]] for q, c in pairs}
    index.rerank_cache = RerankCache(max_rows=(len(corpus) + 1) * (len(conditions) + 2 * len(conditions)))
    for condition in conditions:
        fill_cache(index, condition)

    # the condition texts alone, through the model: the nearness that picks a donor
    texts = list(dict.fromkeys([*conditions, *donors_all]))
    vectors = index.embedder.plain(texts)  # unit rows
    position = {t: i for i, t in enumerate(texts)}
    donors: dict[str, dict[str, Any]] = {}
    for label, candidates in pools.items():
        block = vectors[[position[c] for c in candidates]]
        for condition in conditions:
            cosines = block @ vectors[position[condition]]
            best = int(np.argmax(cosines))
            donors.setdefault(condition, {})[label] = {"donor": candidates[best], "cosine": float(cosines[best])}
            if label != "all":  # a control: the pool's farthest condition, to see what nearness adds
                worst = int(np.argmin(cosines))
                donors[condition][f"{label}, farthest"] = {"donor": candidates[worst], "cosine": float(cosines[worst])}

    def curve(mode: str, install: dict[str, Any] | None) -> dict[str, Any]:
        """Recall@k per N with the first-stage query ``mode``; ``install``: condition -> the map it is given (None:
        that condition ranked as ``conditioned``)."""
        index._maps.clear()
        for condition, fitted in (install or {}).items():
            if fitted is not None:
                index._maps[index.key(condition)] = fitted

        def search(q: str, c: str, n: int) -> list[int]:
            stage.query_mode = "conditioned" if install is not None and install.get(c, 0) is None else mode
            with index.rerank_cache.pairs_set_aside():  # each search as its condition's first
                return [int(r) for r in index.search_rows(q, c, args.k, strategy="two-stage", candidates=n)[0]]

        points = []
        for n in ns:
            per_query = [recall_at_k(exact[(q, c)], search(q, c, n), args.k) for q, c in pairs]
            by_condition = {
                c: float(np.mean([r for (q, cc), r in zip(pairs, per_query) if cc == c])) for c in conditions
            }
            points.append({"candidates": n, f"recall_at_{args.k}": round(float(np.mean(per_query)), 4),
                           "min_recall": round(float(np.min(per_query)), 4),
                           "by_condition": {c: round(v, 4) for c, v in by_condition.items()}})  # fmt: skip
            print(f"{mode} {'(borrowed)' if install else ''} N={n}: {points[-1][f'recall_at_{args.k}']}", flush=True)
        return {"points": points}

    results: dict[str, Any] = {"conditioned": curve("conditioned", None), "mapped (own map)": curve("mapped", None)}
    map_seconds: dict[str, float] = {}
    for label in donors[conditions[0]]:
        install = {}
        for condition in conditions:
            donor = donors[condition][label]["donor"]
            start = time.perf_counter()
            install[condition] = index._condition_map(donor, index.key(donor))
            map_seconds.setdefault(donor, round(time.perf_counter() - start, 1))
            print(f"{label}: {condition!r} borrows the map of {donor!r} "
                  f"(cosine {donors[condition][label]['cosine']:.3f}; {map_seconds[donor]} s)", flush=True)  # fmt: skip
        which = (
            f"the farthest of {label.removesuffix(', farthest')}"
            if label.endswith("farthest")
            else f"the nearest of {label}"
        )
        results[f"mapped, borrowed from {which}"] = curve("mapped", install)

    # the index's own pick: it holds the maps of --held train conditions (fitted as when they were searched) and
    # borrows for each measured condition through ConditionalIndex._borrowed_map, threshold included
    for draw in [int(s) for s in args.held_draws.split(",")] if args.held else []:
        label = f"the index's maps of {args.held} train conditions (draw {draw})"
        index._maps.clear()
        held = random.Random(draw).sample(donors_all, args.held)
        for donor in held:
            start = time.perf_counter()
            index._condition_map(donor, index.key(donor))
            map_seconds.setdefault(donor, round(time.perf_counter() - start, 1))
        kept = dict(index._maps)  # at most MAP_CONDITIONS: the index's own bound
        install = {}
        for condition in conditions:
            picked = index._borrowed_map(condition, index.key(condition))
            nearest = max(
                (index._map_conditions[k] for k in kept),
                key=lambda t: float(vectors[position[t]] @ vectors[position[condition]]),
            )
            cosine = float(vectors[position[nearest]] @ vectors[position[condition]])
            donor = next((index._map_conditions[k] for k, m in kept.items() if m is picked), None)
            donors[condition][label] = {"donor": donor, "cosine": cosine, "nearest_held": nearest}
            install[condition] = picked
            print(f"{label}: {condition!r} -> {donor!r} (nearest held {nearest!r}, cosine {cosine:.3f})", flush=True)
        results[f"mapped, borrowed from {label}"] = curve("mapped", install)

    record = {
        "benchmark": "two_stage_borrowed_map",
        "description": __doc__.split("\n\n")[0],
        "command": " ".join(sys.argv),
        "settings": {
            "model": args.model,
            "index": Path(args.index).name,
            "size": args.size,
            "conditions": conditions,
            "queries_per_condition": args.queries,
            "k": args.k,
            "seed": args.seed,
            "candidates": ns,
            "map_sample": index.map_sample,
            "map_ridge": index.map_ridge,
            "first_stage_search": "exact",
            "donor_pools": {label: len(p) for label, p in pools.items()},
            "held": args.held,
            "held_draws": [int(s) for s in args.held_draws.split(",")] if args.held else [],
            "map_borrow_min_cosine": index.map_borrow_min_cosine,
            "rerank_feedback": None,  # finesim.index.feedback: off here (each first stage's own top N)
            "note": args.note,
        },
        "data": {"sentences": files, "conditions": csts_file},
        # a donor's map: fitted here, or read in about no time from maps/ where an earlier run of this script saved it
        "results": {"donors": donors, "donor_map_seconds": map_seconds, "recall": results},
        "code": {"git_commit": git_commit()},
        "environment": environment_record(),
    }
    # the index folder may lie outside the checkout: recorded as <index>, never as this machine's path
    write_json_atomic(
        Path(args.output), portable(record, path_roots(extra={str(Path(args.index).resolve()): "<index>"}))
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

"""Benchmark: conditional retrieval on C-STS validation, through ``finesim.ConditionalIndex``.

How the evaluation is built (the exact procedure; nothing else is filtered or tuned):

1. Corpus: every distinct sentence of ``csts/validation.csv`` (sentence1 and sentence2 of every row, the ``-1``
   rows included), in first-seen order. One index per model is built over it.
2. Queries: the labelled rows (label 1-5; ``-1`` = condition not applicable, skipped). Each row (s1, s2, c, label)
   gives two queries, s1 -> s2 and s2 -> s1: the query sentence searches the corpus under the row's condition c, and
   the *partner* is the other sentence. The query's own sentence is removed from its ranking, so the partner's rank
   is among all other validation sentences (1 = ranked first).
3. Condition preference: C-STS annotates each sentence pair under two conditions, one with a high and one with a low
   similarity label (``finesim.data.pairing.pair_conditions``). For every pair whose two labels differ and each
   direction: is the partner ranked higher (a smaller rank) under the high-label condition than under the low-label
   one? 1 if so, 0 if lower, 0.5 on a tie; the mean is ``rank_preference``. ``score_preference`` asks the same of the
   score itself (score under the high condition > score under the low one). A model that ignores the condition scores
   0.5 on both.
4. Recall@k of the partner per condition: for each query, 1 if the partner is in the top k; reported over all
   labelled rows and separately for rows labelled 4-5 (the pair is similar under that condition) and 1-2 (it is not):
   a condition-aware model finds the partner more often in the first group than in the second. MRR and mean rank too.

Models (``--model``, repeatable; ``NAME=PATH`` or a path / Hub id): the zero-shot all-MiniLM-L6-v2 bi-encoder by
default; trained bi- and tri-encoders (and CASE models) by their folders. The encoder type comes from the folder's
finesim marker (a plain model is a bi-encoder). A bi-encoder embeds the corpus once per distinct condition (926 in
validation: about 1.8M encodings); ``--max-pairs`` evaluates a seeded sample of pairs (and only their rows) instead.

    python benchmarks/conditional_retrieval.py [--model minilm] [--model tri=runs/tri/model] [--max-pairs N]
        [--ks 1,5,10,50] [--seed 0] [--output benchmarks/results/conditional_retrieval.json]
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from finesim.data.csts import read_csts
from finesim.data.pairing import pair_conditions
from finesim.index import ConditionalIndex
from finesim.paths import data_root
from finesim.results import environment_record, file_sha256, path_roots, portable, write_json_atomic


def partner_ranks(index: ConditionalIndex, position: dict[str, int], query: str, partner: str, condition: str):
    """``(rank, score)`` of ``partner`` among all corpus sentences but ``query`` when searching ``query`` under
    ``condition`` (rank 1 = first)."""
    rows, scores = index.search_rows(query, condition, len(index))
    own, target = position[query], position[partner]
    keep = rows != own
    rows, scores = rows[keep], scores[keep]
    at = int(np.flatnonzero(rows == target)[0])
    return at + 1, float(scores[at])


def evaluate_model(
    name: str, model: str, corpus: list[str], rows: list[dict[str, Any]], pairs: list[dict[str, Any]], ks: list[int],
    work: Path,
) -> dict[str, Any]:  # fmt: skip
    """Build the index, rank every partner, and compute the metrics of the module docstring."""
    position = {text: i for i, text in enumerate(corpus)}
    folder = work / f"index-{len(list(work.iterdir()))}"
    start = time.perf_counter()
    index = ConditionalIndex.build(model, corpus, folder)
    build_seconds = time.perf_counter() - start
    start = time.perf_counter()
    cache: dict[tuple[str, str, str], tuple[int, float]] = {}

    def ranked(query: str, partner: str, condition: str) -> tuple[int, float]:
        key = (query, partner, condition)
        if key not in cache:
            cache[key] = partner_ranks(index, position, query, partner, condition)
        return cache[key]

    per_query = []
    for row in rows:
        for query, partner in ((row["sentence1"], row["sentence2"]), (row["sentence2"], row["sentence1"])):
            rank, score = ranked(query, partner, row["condition"])
            per_query.append({"label": row["label"], "rank": rank, "score": score})
    preference_rank, preference_score = [], []
    for pair in pairs:
        if pair["label_high"] == pair["label_low"]:
            continue
        for query, partner in ((pair["sentence1"], pair["sentence2"]), (pair["sentence2"], pair["sentence1"])):
            hi_rank, hi_score = ranked(query, partner, pair["condition_high"])
            lo_rank, lo_score = ranked(query, partner, pair["condition_low"])
            preference_rank.append(1.0 if hi_rank < lo_rank else 0.5 if hi_rank == lo_rank else 0.0)
            preference_score.append(1.0 if hi_score > lo_score else 0.5 if hi_score == lo_score else 0.0)
    search_seconds = time.perf_counter() - start

    def summary(entries: list[dict[str, Any]]) -> dict[str, Any]:
        ranks = np.asarray([e["rank"] for e in entries], dtype=np.float64)
        if not len(ranks):
            return {"queries": 0}
        out: dict[str, Any] = {"queries": len(ranks)}
        for k in ks:
            out[f"recall_at_{k}"] = round(float(np.mean(ranks <= k)), 4)
        out["mrr"] = round(float(np.mean(1.0 / ranks)), 4)
        out["mean_rank"] = round(float(ranks.mean()), 1)
        return out

    info = index.info()
    shutil.rmtree(folder, ignore_errors=True)
    return {
        "name": name,
        "model": model,
        "encoder": info["encoder"],
        "model_sha256": info["model"]["sha256"],
        "rank_preference": round(float(np.mean(preference_rank)), 4) if preference_rank else None,
        "score_preference": round(float(np.mean(preference_score)), 4) if preference_score else None,
        "preference_comparisons": len(preference_rank),
        "recall": {
            "all": summary(per_query),
            "label_4_5": summary([e for e in per_query if e["label"] >= 4]),
            "label_1_2": summary([e for e in per_query if e["label"] <= 2]),
        },
        "texts_embedded": index.embedder.encoded,
        "build_seconds": round(build_seconds, 2),
        "search_seconds": round(search_seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=None)
    parser.add_argument("--model", action="append", default=None, help="NAME=PATH or PATH (repeatable)")
    parser.add_argument("--max-pairs", type=int, default=None, help="evaluate a seeded sample of sentence pairs")
    parser.add_argument("--ks", default="1,5,10,50")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="benchmarks/results/conditional_retrieval.json")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    models = args.model or ["minilm-zero-shot=minilm"]

    root = data_root(args.data)
    path = root / "csts" / "validation.csv"
    everything, _ = read_csts(path, keep_unlabeled=True)
    corpus = list(dict.fromkeys([*everything["sentence1"], *everything["sentence2"]]))
    labelled, report = read_csts(path)
    pairs_ds, pairing = pair_conditions(labelled)
    pairs = pairs_ds.to_list()
    if args.max_pairs is not None and args.max_pairs < len(pairs):
        pairs = random.Random(args.seed).sample(pairs, args.max_pairs)
    rows = labelled.to_list()
    if args.max_pairs is not None:  # the rows of the sampled pairs only
        chosen = {(p["sentence1"], p["sentence2"]) for p in pairs}
        rows = [r for r in rows if (r["sentence1"], r["sentence2"]) in chosen]
    conditions = {r["condition"] for r in rows}
    print(f"corpus {len(corpus)} sentences; {len(pairs)} pairs, {len(rows)} rows, {len(conditions)} conditions")

    work = Path(tempfile.mkdtemp(prefix="finesim-retrieval-"))
    results = []
    try:
        for spec in models:
            name, _, model = spec.rpartition("=")
            result = evaluate_model(name or model, model, corpus, rows, pairs, ks, work)
            results.append(result)
            r = result["recall"]
            print(
                f"{result['name']} ({result['encoder']['type']}): rank preference {result['rank_preference']}, "
                f"score preference {result['score_preference']}; recall@10 all {r['all'].get('recall_at_10')}, "
                f"labels 4-5 {r['label_4_5'].get('recall_at_10')}, labels 1-2 {r['label_1_2'].get('recall_at_10')}",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    payload = {
        "benchmark": "conditional_retrieval",
        "description": "C-STS validation as a conditional retrieval task through finesim.ConditionalIndex: partner "
        "rank under the high- vs the low-similarity condition, and recall@k of the partner among all validation "
        "sentences per condition (the procedure is in the module docstring of benchmarks/conditional_retrieval.py)",
        "data": {
            "path": str(path.relative_to(root)),
            "sha256": file_sha256(path),
            "corpus_sentences": len(corpus),
            "labelled_rows": report.rows_kept,
            "load_report": report.as_dict(),
            "pairing": pairing.as_dict(),
            "pairs_evaluated": len(pairs),
            "rows_evaluated": len(rows),
            "conditions_evaluated": len(conditions),
        },
        "settings": {"ks": ks, "max_pairs": args.max_pairs, "seed": args.seed, "models": models},
        "environment": environment_record(),
        "results": results,
    }
    write_json_atomic(args.output, portable(payload, path_roots(root)))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

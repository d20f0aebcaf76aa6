"""Select the ``"mapped"`` first stage's fit (docs/search.md): the sample size M and the ridge, on C-STS **train**
conditions, never on the validation conditions that ``benchmarks/two_stage_search.py`` reports.

The rule, fixed before the grid was looked at: M in {256, 512, 1024, 2048}, ridge in {0.1, 0.3, 1, 3}; the metric
is the mean recall@10 at N = 100 and N = 200 (exact first stage) against the model's own exact ranking, over
``--conditions`` conditions drawn (``--seed``) from the C-STS train conditions that validation does not have, with
``--queries`` queries each: corpus texts, left out of their own ranking. The best ridge per M; then the smallest M
whose metric is within ``--tolerance`` (0.01) of the best M's (each sample text costs one encode on a condition's
first query).

Corpus: the first ``--size`` texts of an existing bi-encoder index with a ``self`` first stage (``--index``, e.g. the
``--work-dir`` of a ``two_stage_search.py`` run); the texts are embedded under each condition once (``--cache-dir``
keeps them, so a rerun costs no encoding). The fit is the library's (``fit_condition_map``, ``map_sample_rows``).

    flock /tmp/finesim-cpu.lock python benchmarks/two_stage_map_selection.py --index WORK/index \\
        --model runs/minilm-bi-mse-tuned-fp32-onnx --output benchmarks/results/two_stage_map_selection.json
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from finesim.data.csts import read_csts
from finesim.index import ConditionalIndex
from finesim.index.two_stage import FIRST_STAGE, fit_condition_map, map_sample_rows
from finesim.paths import data_root
from finesim.results import environment_record, file_sha256, path_roots, portable, write_json_atomic

SAMPLES = (256, 512, 1024, 2048)
RIDGES = (0.1, 0.3, 1.0, 3.0)
NS = (50, 100, 200)
METRIC_NS = (100, 200)


def train_conditions(root: Path, seed: int, count: int) -> list[str]:
    """``count`` C-STS train conditions that validation does not have, drawn with ``seed`` (this script's draw, which
    ``two_stage_adaptive_depth.py`` repeats)."""
    train, _ = read_csts(root / "csts" / "train.csv")
    validation, _ = read_csts(root / "csts" / "validation.csv")
    return random.Random(seed).sample(sorted(set(train["condition"]) - set(validation["condition"])), count)


def recall_table(
    plain: np.ndarray, under: dict[str, np.ndarray], queries: int, seed: int
) -> dict[str, dict[int, float]]:
    """Mean recall@10 per variant (``conditioned``, ``M=.. ridge=..``) and N over the conditions' queries."""
    rng = np.random.default_rng(seed)
    n = len(plain)
    hits: dict[tuple[str, int], list[float]] = {}
    for conditioned in under.values():
        picked = rng.choice(n, queries, replace=False)
        fits = {}
        for m in SAMPLES:
            rows = map_sample_rows(n, m)
            for ridge in RIDGES:
                weights = fit_condition_map(plain[rows], conditioned[rows], ridge)
                fits[f"M={m} ridge={ridge}"] = (weights, 1 / np.linalg.norm(plain @ weights, axis=1))
        for q in picked:
            exact = conditioned @ conditioned[q]
            exact[q] = -np.inf
            truth = set(np.argpartition(-exact, 10)[:10].tolist())
            scores = {"conditioned": plain @ conditioned[q]}
            for name, (weights, inverse) in fits.items():
                scores[name] = (plain @ (weights @ conditioned[q])) * inverse
            for name, score in scores.items():
                score[q] = -np.inf
                order = np.argsort(-score, kind="stable")
                for big_n in NS:
                    cands = order[:big_n]
                    top = cands[np.argsort(-exact[cands], kind="stable")[:10]]
                    hits.setdefault((name, big_n), []).append(len(truth & set(top.tolist())) / 10)
    names = list(dict.fromkeys(name for name, _ in hits))
    return {name: {big_n: round(float(np.mean(hits[(name, big_n)])), 4) for big_n in NS} for name in names}


def choose(table: dict[str, dict[int, float]], tolerance: float) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    """The best ridge per M and the chosen (M, ridge) by the rule of the module docstring."""
    best: dict[int, dict[str, Any]] = {}
    for name, row in table.items():
        if name == "conditioned":
            continue
        m_text, ridge_text = name.split()
        m, ridge = int(m_text[2:]), float(ridge_text[6:])
        metric = round(float(np.mean([row[big_n] for big_n in METRIC_NS])), 4)
        if m not in best or metric > best[m]["metric"]:
            best[m] = {"sample": m, "ridge": ridge, "metric": metric}
    top = max(entry["metric"] for entry in best.values())
    chosen = best[min(m for m, entry in best.items() if entry["metric"] >= top - tolerance)]
    return best, chosen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", required=True, help="a bi-encoder index with a 'self' first stage")
    parser.add_argument("--model", default=None, help="the index's model (default: as its manifest records)")
    parser.add_argument("--data", default=None)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--conditions", type=int, default=4)
    parser.add_argument("--queries", type=int, default=25)
    parser.add_argument("--seed", type=int, default=7, help="draws the conditions (and, + 1, the queries)")
    parser.add_argument("--tolerance", type=float, default=0.01)
    parser.add_argument("--cache-dir", default=None, help="keep each condition's embeddings here (rerun: no encoding)")
    parser.add_argument("--note", default=None)
    parser.add_argument("--output", default="benchmarks/results/two_stage_map_selection.json")
    args = parser.parse_args(argv)

    root = data_root(args.data)
    train_path, validation_path = root / "csts" / "train.csv", root / "csts" / "validation.csv"
    conditions = train_conditions(root, args.seed, args.conditions)
    print(f"train conditions (none in validation): {conditions}", flush=True)

    index = ConditionalIndex.open(args.index, model=args.model)
    spec = index.first_stage_spec
    if spec is None or spec.model != "self":
        raise SystemExit(f"--index {args.index}: needs a bi-encoder index with a 'self' first stage")
    size = min(args.size, len(index))
    texts = index.store.texts(range(size))
    plain = np.concatenate([np.asarray(index.store.array(p, FIRST_STAGE)) for p in index.store.parts])[:size]
    cache = Path(args.cache_dir) if args.cache_dir else None
    under: dict[str, np.ndarray] = {}
    encode_seconds: dict[str, float | None] = {}
    for i, condition in enumerate(conditions):
        file = cache / f"c{i}.npy" if cache else None
        if file is not None and file.is_file():
            vectors, encode_seconds[condition] = np.load(file), None  # cached: embedded by an earlier run
        else:
            start = time.perf_counter()
            vectors = np.asarray(index.embedder.conditioned(texts, condition), dtype=np.float32)
            encode_seconds[condition] = round(time.perf_counter() - start, 1)
            if file is not None:
                file.parent.mkdir(parents=True, exist_ok=True)
                np.save(file, vectors)
        if vectors.shape != (size, plain.shape[1]):
            raise SystemExit(f"{file}: embeddings of shape {vectors.shape}, expected {(size, plain.shape[1])}")
        under[condition] = vectors
        print(f"{condition!r}: embedded", flush=True)

    table = recall_table(plain, under, args.queries, args.seed + 1)
    best, chosen = choose(table, args.tolerance)
    for name, row in table.items():
        print(name.ljust(24), *[f"{row[big_n]:.3f}" for big_n in NS])
    print(f"best ridge per M: {best}\nchosen: {chosen}", flush=True)
    payload = {
        "benchmark": "two_stage_map_selection",
        "description": "selection of the 'mapped' first stage's sample size M and ridge on C-STS train conditions "
        "(recall@10 against the model's own exact ranking, exact first stage); the rule is in the script's docstring",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "settings": {
            "index": args.index,
            "model": index.store.manifest["model"]["name"],
            "model_sha256": index.store.manifest["model"]["sha256"],
            "size": size,
            "conditions": conditions,
            "queries_per_condition": args.queries,
            "seed": args.seed,
            "samples": list(SAMPLES),
            "ridges": list(RIDGES),
            "metric": f"mean recall@10 at N in {list(METRIC_NS)}",
            "metric_candidates": list(METRIC_NS),
            "tolerance": args.tolerance,
            "data": {
                "train": {"path": str(train_path.relative_to(root)), "sha256": file_sha256(train_path)},
                "validation": {"path": str(validation_path.relative_to(root)), "sha256": file_sha256(validation_path)},
            },
            "note": args.note,
        },
        "environment": environment_record(),
        "results": {
            "encode_seconds": encode_seconds,
            "recall_at_10": {name: {str(k): v for k, v in row.items()} for name, row in table.items()},
            "best_ridge_per_sample": list(best.values()),
            "chosen": chosen,
        },
    }
    extra = {str(Path(args.index)): "<index>", **({str(cache): "<cache-dir>"} if cache else {})}
    write_json_atomic(args.output, portable(payload, path_roots(root, extra=extra)))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

"""Benchmark: conditional search against corpus size: build time, query latency, exact vs approximate, tri vs bi.

Corpus: real sentences from the shared data (every sentence of STS12-16, STS-B train/dev/test, SICK train/trial/test
and SNLI dev/test, read with finesim's loaders), de-duplicated, shuffled with the seed, and repeated in that order
until the corpus has the size asked for. The results file records how many are distinct; a repeated sentence is
another row (its embedding is computed again: repeats are a corpus length apart, never in the same encoding chunk).
Queries: sentences drawn from the same pool, each with a condition drawn from the C-STS validation conditions.

Per corpus size:

- tri-encoder, per head kind: build seconds (texts/s), index bytes, peak RSS; exact query latency p50/p95 (seconds);
  for each approximate kind (faiss HNSW, IVF): the faiss build seconds, latency and recall@10 against exact search.
  Without ``--tri-model`` the tri-encoders are all-MiniLM-L6-v2 with a random (seeded) head of each kind: the figures
  are timings only (an untrained head ranks at random).
- bi-encoder (``--bi-model``, default the zero-shot all-MiniLM-L6-v2): build seconds (texts only), then the cold
  first query of each of ``--cold-conditions`` conditions (the corpus embedded under it) and warm query latency
  p50/p95 under those conditions; approximate per kind as for tri.

Peak RSS is sampled every 20 ms (psutil) during each phase; ``ru_maxrss`` is the process's lifetime peak.

    python benchmarks/index_scaling.py [--sizes 10000,100000,1000000] [--bi-sizes 10000,100000] [--queries 100]
        [--heads hadamard,concat,hypernet] [--tri-model PATH] [--bi-model minilm] [--approximate hnsw,ivf]
        [--output benchmarks/results/index_scaling.json]

Run it alone on an idle machine (``flock /tmp/finesim-cpu.lock python benchmarks/index_scaling.py``): a 1M-sentence
tri-encoder build embeds a million sentences per head kind, and a cold bi-encoder condition a million pairs.
"""

from __future__ import annotations

import argparse
import random
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from finesim.index import ConditionalIndex, recall_at_k
from finesim.paths import data_root
from finesim.results import environment_record, file_sha256, path_roots, portable, write_json_atomic

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


# ---------------------------------------------------------------- data


def sentence_pool(root: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """Every sentence of the STS, SICK and SNLI files (first-seen order, de-duplicated) and the files read."""
    from finesim.data.nli import read_snli
    from finesim.data.sts import read_senteval_subset, read_sick, read_stsb, senteval_subsets

    seen: dict[str, None] = {}
    files: list[Path] = []

    def take(texts: Sequence[str]) -> None:
        for text in texts:
            text = text.strip()
            if text:
                seen.setdefault(text, None)

    sts = root / "sts"
    for year in ("STS12-en-test", "STS13-en-test", "STS14-en-test", "STS15-en-test", "STS16-en-test"):
        for subset in senteval_subsets(sts / year):
            data, _ = read_senteval_subset(sts / year, subset)
            take(data["sentence1"])
            take(data["sentence2"])
            files.append(sts / year / f"STS.input.{subset}.txt")
    for split in ("train", "dev", "test"):
        path = sts / "STSBenchmark" / f"sts-{split}.csv"
        data, _ = read_stsb(path)
        take(data["sentence1"])
        take(data["sentence2"])
        files.append(path)
    for name in ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"):
        data, _ = read_sick(sts / "SICK" / name)
        take(data["sentence1"])
        take(data["sentence2"])
        files.append(sts / "SICK" / name)
    for split in ("dev", "test"):
        data, _ = read_snli(root / "nli" / "SNLI", split)
        take(data["premise"])
        take(data["hypothesis"])
        files += [root / "nli" / "SNLI" / f"{name}.{split}" for name in ("s1", "s2")]
    return list(seen), [{"path": str(p.relative_to(root)), "sha256": file_sha256(p)} for p in files]


def validation_conditions(root: Path) -> tuple[list[str], dict[str, Any]]:
    """The distinct conditions of C-STS validation (file order) and the file's description."""
    from finesim.data.csts import read_csts

    path = root / "csts" / "validation.csv"
    data, _ = read_csts(path)
    return list(dict.fromkeys(data["condition"])), {"path": str(path.relative_to(root)), "sha256": file_sha256(path)}


def csts_sentences(root: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """The distinct sentences of C-STS train and validation (file order) and the files read."""
    from finesim.data.csts import read_csts

    seen: dict[str, None] = {}
    files = []
    for name in ("train.csv", "validation.csv"):
        path = root / "csts" / name
        data, _ = read_csts(path)
        for text in [*data["sentence1"], *data["sentence2"]]:
            if text.strip():
                seen.setdefault(text.strip(), None)
        files.append({"path": str(path.relative_to(root)), "sha256": file_sha256(path)})
    return list(seen), files


def distinct_corpus(pool: list[str], extra: list[str], size: int, seed: int) -> tuple[list[str], dict[str, int]]:
    """``size`` distinct texts: ``pool`` in its order, then the ``extra`` sentences not in it, then passages.

    A passage is two sentences of the first two parts joined by one space, ``f"{a} {b}"`` with ``a != b``, the pair
    drawn uniformly by ``random.Random(f"passages-{seed}")``; a passage equal to an earlier text is skipped. The
    corpus is a pure function of the data files, ``size`` and ``seed``; its first ``len(pool)`` texts are ``pool``
    itself, so a smaller benchmark over the pool is a prefix of a larger one. Returns the texts and the count of
    each part.
    """
    seen = dict.fromkeys(pool)
    texts = list(pool[:size])
    for text in extra:
        if len(texts) >= size:
            break
        if text not in seen:
            seen[text] = None
            texts.append(text)
    counts = {"pool": min(size, len(pool)), "extra": len(texts) - min(size, len(pool))}
    sentences = list(seen)
    rng = random.Random(f"passages-{seed}")
    while len(texts) < size:
        a, b = rng.randrange(len(sentences)), rng.randrange(len(sentences))
        if a == b:
            continue
        text = f"{sentences[a]} {sentences[b]}"
        if text not in seen:
            seen[text] = None
            texts.append(text)
    counts["passages"] = len(texts) - counts["pool"] - counts["extra"]
    return texts, counts


def corpus_of(pool: list[str], size: int) -> list[str]:
    """``size`` texts: the (shuffled) pool repeated in order."""
    repeats = -(-size // len(pool))
    return (pool * repeats)[:size]


# ---------------------------------------------------------------- measuring


class PeakRSS:
    """Sample the process's resident set size every ``interval`` seconds while active; ``peak`` in bytes."""

    def __init__(self, interval: float = 0.02) -> None:
        self.process = psutil.Process()
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRSS:
        self.peak = self.process.memory_info().rss
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


@contextmanager
def phase(out: dict[str, Any], name: str) -> Iterator[None]:
    """Record wall seconds and peak RSS (MiB) of a block under ``out[name + '_seconds' / '_peak_rss_mib']``."""
    with PeakRSS() as rss:
        start = time.perf_counter()
        yield
        out[f"{name}_seconds"] = round(time.perf_counter() - start, 3)
    out[f"{name}_peak_rss_mib"] = round(rss.peak / 2**20, 1)


def latencies(index: ConditionalIndex, queries: list[tuple[str, str]], k: int, **search: Any) -> dict[str, Any]:
    """Latency of each (query, condition) search (after one untimed warm-up), and the rows found."""
    index.search_rows(*queries[0], k, **search)
    seconds, found = [], []
    with PeakRSS() as rss:
        for query, condition in queries:
            start = time.perf_counter()
            rows, _ = index.search_rows(query, condition, k, **search)
            seconds.append(time.perf_counter() - start)
            found.append([int(r) for r in rows])
    s = np.asarray(seconds)
    return {
        "queries": len(seconds),
        "p50_seconds": round(float(np.percentile(s, 50)), 5),
        "p95_seconds": round(float(np.percentile(s, 95)), 5),
        "mean_seconds": round(float(s.mean()), 5),
        "peak_rss_mib": round(rss.peak / 2**20, 1),
        "_found": found,
    }


def approximate(
    index: ConditionalIndex, queries: list[tuple[str, str]], exact: list[list[int]], kinds: list[str], k: int
) -> dict[str, Any]:
    """Per faiss kind: build seconds (every index the queries need), latency, recall@k against ``exact``."""
    out = {}
    for kind in kinds:
        result: dict[str, Any] = {}
        targets = [None] if index.encoder == "tri" else list(dict.fromkeys(c for _, c in queries))
        with phase(result, "build"):
            for condition in targets:
                index._ann_for(condition, kind)
        timing = latencies(index, queries, k, approximate=kind)
        found = timing.pop("_found")
        result.update(timing)
        result["recall_at_10"] = round(float(np.mean([recall_at_k(e, f, 10) for e, f in zip(exact, found)])), 4)
        out[kind] = result
    return out


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


# ---------------------------------------------------------------- models


def tri_models(args: argparse.Namespace, work: Path) -> dict[str, str]:
    """Head kind -> tri-encoder folder: ``--tri-model`` as given, else MiniLM with a seeded random head per kind."""
    if args.tri_model:
        from finesim.models.condition_head import find_condition_head
        from finesim.models.io import load_conditional_model

        head = find_condition_head(load_conditional_model(args.tri_model))
        if head is None:
            raise SystemExit(f"--tri-model {args.tri_model}: not a tri-encoder (no ConditionHead)")
        return {head.kind: args.tri_model}
    import torch

    from finesim.models.builders import build_tri_encoder
    from finesim.models.io import save_model

    out = {}
    for kind in args.heads.split(","):
        torch.manual_seed(args.seed)
        model = build_tri_encoder(MINILM, head=kind)
        out[kind] = str(save_model(model, work / f"tri-{kind}", encoder="tri"))
    return out


# ---------------------------------------------------------------- runs


def run_tri(model: str, texts: list[str], queries: list[tuple[str, str]], args: argparse.Namespace, work: Path):
    folder = work / "index-tri"
    shutil.rmtree(folder, ignore_errors=True)
    result: dict[str, Any] = {"model": model}
    with phase(result, "build"):
        index = ConditionalIndex.build(model, texts, folder, batch_size=args.batch_size)
    result["build_texts_per_second"] = round(len(texts) / result["build_seconds"], 1)
    result["index_bytes"] = folder_bytes(folder)
    exact = latencies(index, queries, args.k)
    found = exact.pop("_found")
    result["exact"] = exact
    result["approximate"] = approximate(index, queries, found, args.approximate_kinds, args.k)
    result["index_bytes_with_faiss"] = folder_bytes(folder)
    shutil.rmtree(folder, ignore_errors=True)
    return result


def run_bi(model: str, texts: list[str], queries: list[tuple[str, str]], args: argparse.Namespace, work: Path):
    folder = work / "index-bi"
    shutil.rmtree(folder, ignore_errors=True)
    result: dict[str, Any] = {"model": model}
    with phase(result, "build"):
        index = ConditionalIndex.build(model, texts, folder, batch_size=args.batch_size)
    conditions = list(dict.fromkeys(c for _, c in queries))[: args.cold_conditions]
    cold = []
    for condition in conditions:
        entry: dict[str, Any] = {"condition": condition}
        with phase(entry, "first_query"):
            index.search_rows(queries[0][0], condition, args.k)
        entry["texts_per_second"] = round(len(texts) / entry["first_query_seconds"], 1)
        cold.append(entry)
    result["cold_conditions"] = cold
    result["condition_bytes_each"] = folder_bytes(folder / "conditions") // max(1, len(conditions))
    warm_queries = [(q, conditions[i % len(conditions)]) for i, (q, _) in enumerate(queries)]
    warm = latencies(index, warm_queries, args.k)
    found = warm.pop("_found")
    result["warm"] = warm
    result["approximate"] = approximate(index, warm_queries, found, args.approximate_kinds, args.k)
    result["index_bytes_with_faiss"] = folder_bytes(folder)
    shutil.rmtree(folder, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=None)
    parser.add_argument("--sizes", default="10000,100000,1000000", help="tri-encoder corpus sizes")
    parser.add_argument("--bi-sizes", default="10000,100000", help="bi-encoder corpus sizes")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--heads", default="hadamard,concat,hypernet")
    parser.add_argument("--tri-model", default=None, help="a trained tri-encoder folder (else random heads)")
    parser.add_argument("--bi-model", default="minilm")
    parser.add_argument("--approximate", default="hnsw,ivf", help="faiss kinds to compare ('' for none)")
    parser.add_argument("--cold-conditions", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    parser.add_argument("--work-dir", default=None, help="where indexes are built (default: a temporary folder)")
    parser.add_argument("--output", default="benchmarks/results/index_scaling.json")
    args = parser.parse_args()
    args.approximate_kinds = [k for k in args.approximate.split(",") if k]
    sizes = [int(s) for s in args.sizes.split(",") if s]
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    bi_sizes = [int(s) for s in args.bi_sizes.split(",") if s]

    root = data_root(args.data)
    pool, files = sentence_pool(root)
    conditions, csts_file = validation_conditions(root)
    rng = random.Random(args.seed)
    rng.shuffle(pool)
    queries = [(rng.choice(pool), rng.choice(conditions)) for _ in range(args.queries)]
    print(f"{len(pool)} distinct sentences, {len(conditions)} conditions, {len(queries)} queries", flush=True)

    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="finesim-index-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    try:
        models = tri_models(args, work)
        for size in sorted(set(sizes) | set(bi_sizes)):
            texts = corpus_of(pool, size)
            entry: dict[str, Any] = {"size": size, "distinct": min(size, len(pool)), "tri": {}}
            if size in sizes:
                for kind, model in models.items():
                    entry["tri"][kind] = run_tri(model, texts, queries, args, work)
                    r = entry["tri"][kind]
                    print(
                        f"n={size} tri-{kind}: build {r['build_seconds']}s, exact p50 {r['exact']['p50_seconds']}s "
                        f"p95 {r['exact']['p95_seconds']}s, "
                        + ", ".join(
                            f"{a} p50 {v['p50_seconds']}s recall@10 {v['recall_at_10']}"
                            for a, v in r["approximate"].items()
                        ),
                        flush=True,
                    )
            if size in bi_sizes:
                entry["bi"] = run_bi(args.bi_model, texts, queries, args, work)
                r = entry["bi"]
                print(
                    f"n={size} bi: cold first query {[c['first_query_seconds'] for c in r['cold_conditions']]}s, "
                    f"warm p50 {r['warm']['p50_seconds']}s p95 {r['warm']['p95_seconds']}s",
                    flush=True,
                )
            results[str(size)] = entry
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)

    payload = {
        "benchmark": "index_scaling",
        "description": "finesim.ConditionalIndex: build time, query latency (p50/p95), exact vs approximate "
        "(faiss, recall@10 against exact), tri- vs bi-encoder (cold and warm conditions), peak RSS, by corpus size",
        "corpus": {
            "source": "every sentence of STS12-16, STS-B, SICK and SNLI dev/test (finesim loaders), de-duplicated, "
            "shuffled with the seed, repeated in order up to the size",
            "distinct_sentences": len(pool),
            "files": files,
        },
        "queries": {"count": len(queries), "conditions_from": csts_file, "distinct_conditions": len(conditions)},
        "settings": {
            "sizes": sizes,
            "bi_sizes": bi_sizes,
            "k": args.k,
            "heads": list(models),
            "tri_model": args.tri_model or f"{MINILM} + random head per kind (seed {args.seed}): timings only",
            "bi_model": args.bi_model,
            "approximate": args.approximate_kinds,
            "cold_conditions": args.cold_conditions,
            "batch_size": args.batch_size,
            "seed": args.seed,
            "torch_threads": torch.get_num_threads(),
        },
        "environment": environment_record(),
        "process_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "results": results,
    }
    # the work folder may lie outside the checkout: recorded as <work-dir>, never as this machine's path
    write_json_atomic(args.output, portable(payload, path_roots(root, extra={str(work): "<work-dir>"})))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

"""Benchmark of ``finesim score``: rows/s and peak memory against the file's size, beside a pandas baseline.

Two parts, one run, each measurement in a fresh Python process (its own peak RSS, ``ru_maxrss``):

1. **Memory against size.** Synthetic CSV files of ``--sizes`` rows (default 10k, 100k and 1M) built by repeating
   the first ``--pool`` C-STS validation triples (sentence1, sentence2, condition) with a running ``id`` column.
   ``finesim score`` streams them in chunks; the baseline is what a careful pandas user writes: read the whole file
   (``pandas.read_csv``), encode each distinct (text, condition) once with plain sentence-transformers, map the
   cosines back, ``DataFrame.to_csv``. The pool keeps encoding cheap so that 1M rows finish in minutes: these
   figures measure reading, bookkeeping and writing (what grows with the file), not the model.
2. **Throughput on distinct texts.** The C-STS validation file itself (``--unique-rows`` rows, nearly every text
   distinct): ``finesim score`` against the same pandas baseline, so that the encoder dominates.

Both sides use the same model (``--model``, loaded by finesim as a bi-encoder: each text is encoded as a pair with
its condition) and the same batch size; the scores of the two sides are compared (largest absolute difference).
The goal of issue 15 is that finesim's peak RSS does not grow with the file: the JSON records the RSS of every
size and the growth from the smallest to the largest.

    flock /tmp/finesim-cpu.lock python benchmarks/score_file.py
    python benchmarks/score_file.py --sizes 2000,20000 --unique-rows 200 --output /tmp/smoke.json   # smoke test
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm", help="model id or folder (scored as finesim loads it)")
    p.add_argument("--data", default=None, help="data root (default: $FINESIM_DATA or ../shared/data)")
    p.add_argument("--sizes", default="10000,100000,1000000", help="rows of the synthetic files, comma-separated")
    p.add_argument("--pool", type=int, default=100, help="distinct triples the synthetic files repeat")
    p.add_argument("--unique-rows", type=int, default=2000, help="C-STS validation rows of the throughput part")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--chunk-rows", type=int, default=4096)
    p.add_argument("--workdir", default=None, help="where the synthetic files go (default: a temporary folder)")
    p.add_argument("--output", default=str(RESULTS / "score_file.json"))
    # internal: one measured run in this process
    p.add_argument("--child", choices=["finesim", "pandas"], help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    p.add_argument("--scored", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def peak_rss_mib() -> float:
    """This process's peak resident set size in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_finesim(args: argparse.Namespace) -> dict[str, Any]:
    """One ``finesim score`` run, as the command runs it."""
    from finesim.evaluation.loading import load_scorer
    from finesim.evaluation.score_file import score_file

    started = time.perf_counter()
    scorer = load_scorer(args.model, batch_size=args.batch_size)
    load_s = time.perf_counter() - started
    report = score_file(scorer, args.input, args.scored, chunk_rows=args.chunk_rows)
    return {"load_s": round(load_s, 3), "score_s": report["seconds"], "rows": report["rows_scored"]}


def child_pandas(args: argparse.Namespace) -> dict[str, Any]:
    """The baseline: the whole file in pandas, each distinct (text, condition) encoded once by plain ST."""
    import numpy as np
    import pandas as pd

    from finesim.models.io import load_sentence_model

    started = time.perf_counter()
    model = load_sentence_model(args.model)
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    df = pd.read_csv(args.input, keep_default_na=False)
    key1 = df["sentence1"] + "\x00" + df["condition"]
    key2 = df["sentence2"] + "\x00" + df["condition"]
    keys = pd.unique(pd.concat([key1, key2]))
    pairs = [k.split("\x00", 1) for k in keys]
    emb = model.encode(pairs, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True)
    index = {k: i for i, k in enumerate(keys)}
    a = emb[key1.map(index).to_numpy()]
    b = emb[key2.map(index).to_numpy()]
    df["score"] = np.einsum("ij,ij->i", a, b)
    df.to_csv(args.scored, index=False)
    return {"load_s": round(load_s, 3), "score_s": round(time.perf_counter() - started, 3), "rows": len(df)}


def measure(args: argparse.Namespace, side: str, input_path: Path, scored: Path) -> dict[str, Any]:
    """Run one side in a fresh process; returns its timings and peak RSS."""
    cmd = [
        sys.executable, __file__, "--child", side, "--input", str(input_path), "--scored", str(scored),
        "--model", args.model, "--batch-size", str(args.batch_size), "--chunk-rows", str(args.chunk_rows),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{side} on {input_path.name} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["rows_per_second"] = round(result["rows"] / result["score_s"], 1) if result["score_s"] else None
    return result


def compare_scores(a: Path, b: Path) -> float:
    """The largest absolute difference between two scored CSV files' score columns (same row order)."""
    import pandas as pd

    x = pd.read_csv(a, keep_default_na=False)["score"].to_numpy()
    y = pd.read_csv(b, keep_default_na=False)["score"].to_numpy()
    if len(x) != len(y):
        raise RuntimeError(f"{a} has {len(x)} rows, {b} has {len(y)}")
    return float(abs(x - y).max())


def growth(memory: list[dict[str, Any]], side: str) -> float:
    """Peak RSS of the largest file minus that of the smallest, in MiB."""
    return round(memory[-1][side]["peak_rss_mib"] - memory[0][side]["peak_rss_mib"], 1)


def write_table(path: Path, triples: list[tuple[str, str, str]], rows: int) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "sentence1", "sentence2", "condition"])
        for i in range(rows):
            w.writerow([i, *triples[i % len(triples)]])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        runner = child_finesim if args.child == "finesim" else child_pandas
        result = runner(args)
        result["peak_rss_mib"] = round(peak_rss_mib(), 1)
        print(json.dumps(result))
        return 0

    from finesim.data import read_csts
    from finesim.paths import data_root
    from finesim.results import environment_record, file_sha256, path_roots, portable, write_json_atomic

    root = data_root(args.data)
    validation = root / "csts" / "validation.csv"
    ds, _ = read_csts(validation)
    triples = list(zip(ds["sentence1"], ds["sentence2"], ds["condition"]))
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="finesim-score-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []

    def both(name: str, path: Path, rows: int, part: str) -> None:
        entry: dict[str, Any] = {"part": part, "rows": rows, "file_mib": round(path.stat().st_size / 2**20, 1)}
        for side in ("finesim", "pandas"):
            print(f"[score_file] {name}: {side} ...", file=sys.stderr, flush=True)
            entry[side] = measure(args, side, path, work / f"{name}.{side}.csv")
        entry["max_abs_score_diff"] = compare_scores(work / f"{name}.finesim.csv", work / f"{name}.pandas.csv")
        for side in ("finesim", "pandas"):
            (work / f"{name}.{side}.csv").unlink()
        runs.append(entry)
        print(f"[score_file] {json.dumps(entry)}", file=sys.stderr, flush=True)

    for rows in sizes:
        path = work / f"synthetic_{rows}.csv"
        write_table(path, triples[: args.pool], rows)
        both(f"synthetic_{rows}", path, rows, "memory")
        path.unlink()
    unique = work / "unique.csv"
    n_unique = min(args.unique_rows, len(triples))
    write_table(unique, triples[:n_unique], n_unique)
    both("unique", unique, n_unique, "throughput")

    memory = [r for r in runs if r["part"] == "memory"]
    payload = {
        "benchmark": "score_file",
        "description": "finesim score (streamed) vs a whole-file pandas baseline: peak RSS against file size, rows/s",
        **environment_record(),
        "settings": {
            "model": args.model,
            "batch_size": args.batch_size,
            "chunk_rows": args.chunk_rows,
            "pool": args.pool,
            "sizes": sizes,
            "unique_rows": n_unique,
            "torch_threads": os.cpu_count(),
        },
        "data": {"csts_validation": str(validation), "sha256": file_sha256(validation)},
        "runs": runs,
        "summary": {
            **{f"{side}_rss_growth_mib": growth(memory, side) for side in ("finesim", "pandas")},
            "rows_from_to": [memory[0]["rows"], memory[-1]["rows"]],
        }
        if memory
        else {},
    }
    write_json_atomic(args.output, portable(payload, path_roots(root)))
    print(json.dumps(payload["summary"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The exact first-stage scan of two-stage search on a float32 index and on its float16 copy (``finesim index
convert``): time per scan and how much of the float32 ranking the float16 one keeps.

Each scan is ``ConditionalIndex._dot_scan`` of the first stage (what a search's ``conditioned`` first stage runs)
for a query vector drawn from the index's own first-stage vectors plus noise, as many rows as a search at N = 100
with feedback fetches (1,100). Three settings take turns, scan by scan:
the float32 index (split over ``scan_threads``), the float16 index (the half product,
:func:`finesim.index.tri.candidate_dot`), and the float16 index converted to float32 chunk by chunk before its
product (how a float16 index was scanned before the half product; computed here, as the library did). Reported:
median and p95 ms per setting, and the share of the float32 scan's top rows the float16 scans keep. Run it with
nothing else on the machine:

    python benchmarks/first_stage_scan.py --index /scratch/index-1m --half /scratch/index-1m-f16
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from finesim import ConditionalIndex
from finesim.index.tri import as_float_tensor
from finesim.index.two_stage import FIRST_STAGE
from finesim.results import environment_record, path_roots, portable, write_json_atomic

WANTED = 1100  # a search at N = 100 with local-map feedback (pool 10) fetches (10 + 1) x 100 rows


def converted_scan(index: ConditionalIndex, vector: torch.Tensor, wanted: int) -> np.ndarray:
    """The previous float16 scan: each chunk converted to float32, then multiplied (split as the float32 scan)."""
    return index._exact(FIRST_STAGE, lambda b: as_float_tensor(b) @ vector, wanted, None, split=True)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", required=True, help="a float32 index with a first stage")
    parser.add_argument("--half", required=True, help="its float16 copy (finesim index convert --dtype float16)")
    parser.add_argument("--scans", type=int, default=30, help="scans per setting")
    parser.add_argument("--wanted", type=int, default=WANTED, help="rows each scan returns")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--note", default=None)
    parser.add_argument("--output", default="benchmarks/results/first_stage_scan_1m.json")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    full, half = ConditionalIndex.open(args.index), ConditionalIndex.open(args.half)
    if (full.store.dtype, half.store.dtype) != ("float32", "float16"):
        raise SystemExit(f"--index must be float32 and --half float16, got {full.store.dtype} and {half.store.dtype}")
    if len(full) != len(half) or full.store.texts([0, len(full) - 1]) != half.store.texts([0, len(half) - 1]):
        raise SystemExit("--half is not a copy of --index (other rows)")
    if full.first_stage_spec is None:
        raise SystemExit(f"--index {args.index}: no first stage to scan")
    rng = np.random.default_rng(args.seed)
    rows = rng.choice(len(full), args.scans, replace=False)
    dim = full.first_stage_spec.dim
    queries = []
    for row in rows:  # a stored vector moved by noise of about its own size, at unit length
        x = full._gather(np.array([row]), FIRST_STAGE)[0] + rng.normal(0, 1 / np.sqrt(dim), dim).astype(np.float32)
        queries.append(torch.from_numpy(x / np.linalg.norm(x)))
    wanted = args.wanted
    settings: dict[str, Any] = {
        "float32": lambda q: full._dot_scan(FIRST_STAGE, q, wanted, None)[0],
        "float16": lambda q: half._dot_scan(FIRST_STAGE, q, wanted, None)[0],
        "float16 converted to float32": lambda q: converted_scan(half, q, wanted),
    }
    for scan in settings.values():  # warm: page cache, threads
        scan(queries[0])
    seconds: dict[str, list[float]] = {name: [] for name in settings}
    kept: dict[str, list[float]] = {name: [] for name in settings if name != "float32"}
    for i, q in enumerate(queries):
        order = list(settings) if i % 2 == 0 else list(reversed(settings))
        found = {}
        for name in order:
            start = time.perf_counter()
            found[name] = settings[name](q)
            seconds[name].append(time.perf_counter() - start)
        for name in kept:
            kept[name].append(len(np.intersect1d(found[name], found["float32"])) / len(found["float32"]))
    results = {
        name: {
            "p50_ms": round(1000 * float(np.median(times)), 3),
            "p95_ms": round(1000 * float(np.percentile(times, 95)), 3),
            "kept_share_of_float32_top": round(float(np.mean(kept[name])), 4) if name in kept else 1.0,
            "kept_min": round(float(np.min(kept[name])), 4) if name in kept else 1.0,
        }
        for name, times in seconds.items()
    }
    payload = {
        "benchmark": "first_stage_scan",
        "description": __doc__.split("\n\n")[0],
        "settings": {
            "rows": len(full),
            "dim": dim,
            "wanted": wanted,
            "scans": args.scans,
            "seed": args.seed,
            "threads": torch.get_num_threads(),
            "scan_threads": full.scan_threads,
            "note": args.note,
        },
        "results": {"scan": results},
        "environment": environment_record(),
    }
    extra = {str(Path(args.index)): "<index>", str(Path(args.half)): "<half>"}
    write_json_atomic(args.output, portable(payload, path_roots(extra=extra)))
    print({name: (r["p50_ms"], r["kept_share_of_float32_top"]) for name, r in results.items()})
    print(f"wrote {args.output}", flush=True)


if __name__ == "__main__":
    main()

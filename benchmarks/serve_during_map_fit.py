"""What a ``finesim serve`` client waits while another client's search fits a new condition's map.

A server with a "mapped" index (``finesim index build --first-stage-query mapped``) fits a never-seen condition's
map before that condition's first ``/search`` (``--map-sample`` texts embedded under it; 12-14 s at 50k texts with
MiniLM on 2 cores). This benchmark starts a real server process on 127.0.0.1 over such an index and, for each of
``--conditions`` (each must be new to the index: neither stored nor in its ``maps/``):

1. sends ``--idle-probes`` sequential one-pair ``POST /similarity`` requests: their latency with nothing else running;
2. sends ``POST /search`` under the condition from one thread and, from ``--probe-delay`` seconds later until it
   returns, one-pair ``/similarity`` requests one after another from another: each one's latency while the map is
   fitted, and the search's own time.

With ``--no-map-wait`` (``finesim serve --no-map-wait``: a new condition's searches are answered at once while its
map is fitted in the background: by the ``conditioned`` first stage here, each condition on a fresh server holding
no other map to borrow) step 2 becomes: one ``/search`` under the
condition (its time: what a client of a never-seen condition waits), then, until the fit's map file appears in
``maps/``, one-pair ``/similarity`` requests and ``/search`` requests under the condition (``--queries``, cycled)
one after another, each one's latency, and the fit's time as seen from outside (from the first search sent to the map
file's appearance, to within one request); then ``--after-fit`` searches under the condition (its map held).

``--map-fit-yield 0,1`` serves each condition once per value (``finesim serve --map-fit-yield``: how long a
background fit waits, before each of its steps, for a moment when no ``/search`` runs), the values taking turns
condition by condition, their order reversed every other condition; each run records its value.

The maps it fits are removed from the index's ``maps/`` afterwards (so the next run fits them again). ``--src`` runs
the server from another checkout's ``src`` (a baseline, e.g. a git worktree of an earlier commit); the results file
records which. Run it alone on the machine (``flock`` on the CPU lock), code and baseline in one invocation each,
side by side:

    flock /tmp/finesim-cpu.lock python benchmarks/serve_during_map_fit.py --index IDX --model M --src ../base/src \\
        --label before --output benchmarks/results/serve_during_map_fit_before.json
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import Server

from finesim.results import environment_record, path_roots, portable, write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
PAIR = {"sentence1": ["A man is playing a guitar on stage."], "sentence2": ["A woman sings into a microphone."]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", required=True, help="a mapped index (finesim index build --first-stage-query mapped)")
    p.add_argument("--model", required=True, help="what finesim serve --model gets (the index's model)")
    p.add_argument(
        "--conditions",
        nargs="+",
        default=["the time of day", "the kind of weather"],
        help="never-seen conditions, one measured fit each",
    )
    p.add_argument("--query", default="A person is outside.", help="the /search query")
    p.add_argument(
        "--no-map-wait", action="store_true", help="serve with --no-map-wait and measure as the docstring says"
    )
    p.add_argument(
        "--queries",
        nargs="+",
        default=["A person is outside.", "Two dogs play in the snow.", "A man cooks dinner.", "A child reads a book."],
        help="--no-map-wait: the searches sent during and after the fit, cycled",
    )
    p.add_argument("--after-fit", type=int, default=8, help="--no-map-wait: searches once the map is held")
    p.add_argument(
        "--map-fit-yield",
        default=None,
        help="--no-map-wait: serve with each of these --map-fit-yield values (seconds, comma-separated, e.g. 0,1), "
        "taking turns per condition (their order reversed every other condition); default: the server's own",
    )
    p.add_argument("--idle-probes", type=int, default=20, help="sequential /similarity requests with nothing else on")
    p.add_argument("--probe-delay", type=float, default=1.0, help="seconds from sending /search to the first probe")
    p.add_argument("--threads", type=int, default=2, help="finesim serve --threads")
    p.add_argument("--inference-batch-size", type=int, default=None, help="finesim serve --inference-batch-size")
    p.add_argument("--src", default=None, help="run the server from this src folder (a baseline checkout's)")
    p.add_argument("--label", default="this checkout", help="what the results file calls the code measured")
    p.add_argument("--output", required=True, help="results JSON")
    return p.parse_args(argv)


def summary(values: list[float]) -> dict[str, Any]:
    """Count, p50, p95 and max of latencies in milliseconds, and each latency."""
    if not values:
        return {"n": 0, "latencies_ms": []}
    ms = np.asarray(values) * 1000.0
    return {
        "n": len(values),
        "p50_ms": float(np.percentile(ms, 50)),
        "p95_ms": float(np.percentile(ms, 95)),
        "max_ms": float(ms.max()),
        "latencies_ms": [round(float(v), 1) for v in ms],
    }


def similarity_latency(client: Any, url: str) -> float:
    started = time.perf_counter()
    response = client.post(f"{url}/similarity", json={**PAIR, "condition": "the activity"}, timeout=600)
    response.raise_for_status()
    return time.perf_counter() - started


def measure(url: str, condition: str, query: str, idle_probes: int, delay: float) -> dict[str, Any]:
    """Idle /similarity latency, then a /search under ``condition`` with /similarity probes beside it."""
    import httpx

    with httpx.Client() as client:
        for _ in range(3):
            similarity_latency(client, url)  # warm-up
        idle = [similarity_latency(client, url) for _ in range(idle_probes)]
    found: dict[str, Any] = {}

    def search() -> None:
        started = time.perf_counter()
        with httpx.Client() as client:
            response = client.post(f"{url}/search", json={"query": query, "condition": condition, "k": 10}, timeout=900)
        found.update(
            status=response.status_code,
            seconds=time.perf_counter() - started,
            first_stage=response.headers.get("X-Finesim-First-Stage"),
        )

    searching = threading.Thread(target=search)
    searching.start()
    time.sleep(delay)  # the search has reached the server and its fit has begun: each probe is sent during it
    during = []
    with httpx.Client() as client:
        while searching.is_alive():
            during.append(similarity_latency(client, url))
    searching.join()
    return {
        "condition": condition,
        "search": found,
        "similarity_idle": summary(idle),
        "similarity_during_fit": summary(during),
    }


def search_latency(client: Any, url: str, query: str, condition: str, stages: list[str | None]) -> float:
    """One /search's seconds; the first stage its answer names (X-Finesim-First-Stage) is appended to ``stages``."""
    started = time.perf_counter()
    response = client.post(f"{url}/search", json={"query": query, "condition": condition, "k": 10}, timeout=900)
    response.raise_for_status()
    stages.append(response.headers.get("X-Finesim-First-Stage"))
    return time.perf_counter() - started


def measure_no_wait(
    url: str, condition: str, queries: list[str], idle_probes: int, maps: Path, after_fit: int
) -> dict[str, Any]:
    """--no-map-wait: idle /similarity latency; a first /search under ``condition``; /similarity and /search
    requests one after another until the condition's map file appears; then ``after_fit`` searches."""
    import httpx

    before = set(maps.glob("*.npz")) if maps.is_dir() else set()

    def fitted() -> bool:
        return maps.is_dir() and bool(set(maps.glob("*.npz")) - before)

    with httpx.Client() as client:
        for _ in range(3):
            similarity_latency(client, url)  # warm-up
        idle = [similarity_latency(client, url) for _ in range(idle_probes)]
        started = time.perf_counter()
        first_stage: list[str | None] = []
        first = search_latency(client, url, queries[0], condition, first_stage)
        similarity, searches, fit_seconds = [], [], None
        during_stages: list[str | None] = []
        after_stages: list[str | None] = []
        for i in itertools.count(1):
            if fitted():
                fit_seconds = time.perf_counter() - started
                break
            if time.perf_counter() - started > 900:
                break
            similarity.append(similarity_latency(client, url))
            searches.append(search_latency(client, url, queries[i % len(queries)], condition, during_stages))
        later = [
            search_latency(client, url, queries[i % len(queries)], condition, after_stages) for i in range(after_fit)
        ]
    return {
        "condition": condition,
        "search": {"status": 200, "seconds": first, "first_stage": first_stage[0]},
        "fit_seconds_seen": fit_seconds,
        "first_stages": {  # each answer's X-Finesim-First-Stage, counted
            "during_fit": dict(collections.Counter(map(str, during_stages))),
            "after_fit": dict(collections.Counter(map(str, after_stages))),
        },
        "similarity_idle": summary(idle),
        "similarity_during_fit": summary(similarity),
        "search_during_fit": summary(searches),
        "search_after_fit": summary(later),
    }


def results_roots(args: argparse.Namespace, src: Path) -> list[tuple[str, str]]:
    """The folders the results file names portably: the index as ``<index>`` (its name and size are recorded
    beside), a baseline's ``src`` as ``<baseline>/src``, then :func:`~finesim.results.path_roots`'."""
    extra = {str(Path(args.index).resolve()): "<index>"}
    if args.src:
        extra[str(src.parent)] = "<baseline>"
    return path_roots(extra=extra)


def source_commit(src: Path) -> dict[str, Any] | None:
    """The commit of the checkout holding ``src``, and whether its ``src`` differs from it (uncommitted changes)."""
    try:
        head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        changed = subprocess.run(
            ["git", "-C", str(src), "status", "--porcelain", "--", "."], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"commit": head.stdout.strip(), "uncommitted_changes": bool(changed.stdout.strip())}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from finesim.index.store import IndexStore

    if args.map_fit_yield is not None and not args.no_map_wait:
        raise SystemExit("--map-fit-yield is a setting of --no-map-wait (only a background fit waits for gaps)")
    waits: list[str | None] = args.map_fit_yield.split(",") if args.map_fit_yield else [None]

    manifest = IndexStore.open(args.index).manifest
    stage = manifest.get("first_stage") or {}
    if stage.get("query") != "mapped":
        raise SystemExit(
            f"{args.index}: its first stage's query is {stage.get('query')!r}, not 'mapped': a server fits no map over "
            "it (build it with --first-stage-query mapped)"
        )
    maps = Path(args.index) / "maps"
    before = set(maps.glob("*.npz")) if maps.is_dir() else set()
    src = Path(args.src).resolve() if args.src else ROOT / "src"
    if args.src:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))
    server_args = argparse.Namespace(
        model=args.model, threads=args.threads, clients=1, inference_batch_size=args.inference_batch_size,
        encoder=None, device=None,
    )  # fmt: skip
    runs = []
    try:
        for turn, condition in enumerate(args.conditions):
            for wait in reversed(waits) if turn % 2 else waits:
                server = Server(server_args, batch_size=64, batch_wait_ms=5)
                server.command += ["--index", str(args.index)] + (["--no-map-wait"] if args.no_map_wait else [])
                server.command += [] if wait is None else ["--map-fit-yield", wait]
                url = server.start()
                try:
                    if args.no_map_wait:
                        run = measure_no_wait(url, condition, args.queries, args.idle_probes, maps, args.after_fit)
                    else:
                        run = measure(url, condition, args.query, args.idle_probes, args.probe_delay)
                finally:
                    server.stop()
                if wait is not None:
                    run["map_fit_yield"] = float(wait)
                    for path in set(maps.glob("*.npz")) - before:  # the next setting fits this condition again
                        path.unlink()
                runs.append(run)
                print(runs[-1], flush=True)
    finally:
        for path in set(maps.glob("*.npz")) - before if maps.is_dir() else ():
            path.unlink()  # the maps this run fitted: the next run fits them again
    during = [r["similarity_during_fit"]["p50_ms"] for r in runs if r["similarity_during_fit"]["n"]]
    payload = {
        "benchmark": "serve_during_map_fit",
        "code": {"label": args.label, "src": str(src), "git_commit": source_commit(src)},
        "index": {
            "name": Path(args.index).resolve().name,
            "count": manifest["count"],
            "model": manifest["model"].get("name"),
            "first_stage": stage,
        },
        "settings": {k: v for k, v in vars(args).items() if k not in ("output",)},
        "server_command": server.command if runs else None,
        "runs": runs,
        "similarity_p50_ms_during_fit_median": statistics.median(during) if during else None,
        "environment": environment_record(),
    }
    write_json_atomic(args.output, portable(payload, results_roots(args, src)))
    print(f"wrote {args.output}")
    return 0 if runs and all(r["search"].get("status") == 200 for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Load benchmark of ``finesim serve``: concurrent loopback clients against a real server process.

For one model, on the same C-STS validation pairs (shuffled with ``--seed``, cut into requests of
``--pairs-per-request`` pairs):

1. **in-process**: ``ConditionalScorer(model).similarity`` on all the pairs the server runs send (one call, the
   scorer's own batching; the median of ``--in-process-repeats`` timings): the throughput without HTTP;
2. **server, micro-batching on**: ``finesim serve --max-batch-inputs B --batch-wait-ms W``, ``--clients`` concurrent
   clients (asyncio + httpx, one connection each) sending ``POST /similarity`` until ``--requests`` requests are
   answered or ``--duration`` seconds have passed;
3. **server, one request at a time**: the same with ``--max-batch-requests 1`` (and ``--max-batch-inputs 4096``, so that
   no request is split).

``--in-process-chunks 15,27`` also times the in-process scorer called on consecutive chunks of that many pairs (the
micro-batch sizes a server forms: each call sorts and pads only its own inputs), the upper bound for a server whose
batches are that small; ``--skip-server`` stops after the in-process figures.

Both servers run with ``--cache-size 0`` (the LRU cache would answer repeated inputs without the model and flatter
the server) and are stopped with SIGTERM (their exit code is recorded). Each run starts with ``--warmup``
untimed requests. Reported per run: pairs/s, requests/s, latency p50/p95/p99, errors (must be 0), the largest
difference between the server's scores and the in-process ones, and the server's own batch metrics. Goals: the
batched server reaches >= 0.8x the in-process throughput, and >= 3x the one-request-at-a-time server.

The clients share the machine with the server: on a small machine they take CPU from it (the JSON records the
hardware). Run real measurements alone on the machine:

    flock /tmp/finesim-cpu.lock python benchmarks/serve_load.py --model minilm
    python benchmarks/serve_load.py --model minilm --requests 64 --pairs 64 --output /tmp/smoke.json  # smoke test
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from finesim.data import read_csts
from finesim.paths import data_root
from finesim.results import environment_record, file_sha256, path_roots, portable, write_json_atomic

RESULTS = Path(__file__).parent / "results"
GOAL_VS_IN_PROCESS = 0.8
GOAL_BATCHED_VS_SINGLE = 3.0
# what uvicorn's "auto" loop and HTTP parser pick in the server's environment: uvloop and httptools when they import
HTTP_STACK_PROBE = """
import importlib, importlib.metadata as m, json
def imports(name):
    try:
        importlib.import_module(name)
        return True
    except Exception:
        return False
def version(name):
    try:
        return m.version(name)
    except Exception:
        return None
print(json.dumps({
    "loop": "uvloop" if imports("uvloop") else "asyncio",
    "http": "httptools" if imports("httptools") else "h11",
    "versions": {name: version(name) for name in ("uvicorn", "uvloop", "httptools", "h11")},
}))
"""


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm", help="what finesim serve --model gets")
    p.add_argument("--encoder", default=None, choices=["bi", "tri", "cross", "case"], help="finesim serve --encoder")
    p.add_argument("--data", default=None, help="data root (default: $FINESIM_DATA or ../shared/data)")
    p.add_argument("--clients", type=int, default=32, help="concurrent clients")
    p.add_argument("--requests", type=int, default=2000, help="timed requests per server run (at most)")
    p.add_argument("--duration", type=float, default=120.0, help="time limit of a server run's timed part (s)")
    p.add_argument("--warmup", type=int, default=64, help="untimed requests before each timed part")
    p.add_argument("--pairs", type=int, default=None, help="use at most this many validation pairs")
    p.add_argument("--pairs-per-request", type=int, default=1, help="pairs in one /similarity request")
    p.add_argument("--batch-size", type=int, default=64, help="finesim serve --max-batch-inputs of the batched run")
    p.add_argument("--batch-wait-ms", type=int, default=5, help="finesim serve --batch-wait-ms of the batched run")
    p.add_argument(
        "--inference-batch-size",
        type=positive_int,
        default=None,
        help="finesim serve --inference-batch-size, and the in-process scorer's batch size (default: their own, 64)",
    )
    p.add_argument("--in-process-repeats", type=int, default=3, help="in-process timings (the median is used)")
    p.add_argument("--device", default=None, help="torch device of the server and the in-process scorer")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed of the pairs")
    p.add_argument("--workers", type=int, default=1, help="finesim serve --workers of the batched run")
    p.add_argument("--threads", type=int, default=None, help="finesim serve --threads (torch threads per worker)")
    p.add_argument(
        "--load-generator",
        choices=["python", "wrk"],
        default="python",
        help="python: asyncio + httpx clients in this process (they take CPU from the server); wrk: the compiled "
        "load generator (apt install wrk), one thread, --clients connections, for --duration seconds; the scores "
        "are then checked on a few requests with httpx",
    )
    p.add_argument("--skip-single", action="store_true", help="skip the one-request-at-a-time server run")
    p.add_argument(
        "--in-process-chunks",
        default=None,
        help="also time the in-process scorer called on consecutive chunks of K pairs (comma-separated Ks: the "
        "micro-batch sizes a server forms), the pairs in the same order",
    )
    p.add_argument("--skip-server", action="store_true", help="in-process figures only (no server run)")
    p.add_argument("--output", default=None, metavar="FILE", help="results JSON (default: results/serve_load_*.json)")
    args = p.parse_args(argv)
    if args.in_process_chunks:
        try:
            sizes = sorted({int(x) for x in args.in_process_chunks.split(",")})
        except ValueError:
            p.error(f"--in-process-chunks: whole numbers separated by commas, got {args.in_process_chunks!r}")
        if sizes[0] < 1:
            p.error(f"--in-process-chunks: each size must be at least 1, got {args.in_process_chunks!r}")
        args.in_process_chunks = sizes
    if min(args.clients, args.requests, args.pairs_per_request, args.in_process_repeats) < 1 or args.duration <= 0:
        p.error("--clients, --requests, --pairs-per-request and --duration must be positive")
    return args


def load_pairs(root: Path, limit: int | None, seed: int) -> tuple[list[tuple[str, str, str]], dict[str, Any]]:
    """C-STS validation (s1, s2, condition) triples, shuffled; and the data block of the results file."""
    path = root / "csts" / "validation.csv"
    dataset, report = read_csts(path)
    rows = list(zip(dataset["sentence1"], dataset["sentence2"], dataset["condition"]))
    order = np.random.default_rng(seed).permutation(len(rows))
    pairs = [rows[i] for i in order[: limit or len(rows)]]
    return pairs, {
        "file": str(path),
        "sha256": file_sha256(path),
        "pairs_in_file": len(rows),
        "skipped": report.skipped,
    }


def request_bodies(pairs: list[tuple[str, str, str]], per_request: int) -> list[dict[str, Any]]:
    """``/similarity`` bodies of ``per_request`` pairs each (a condition per pair)."""
    out = []
    for start in range(0, len(pairs), per_request):
        chunk = pairs[start : start + per_request]
        out.append(
            {"sentence1": [p[0] for p in chunk], "sentence2": [p[1] for p in chunk], "condition": [p[2] for p in chunk]}
        )
    return out


def in_process(args: argparse.Namespace, pairs: list[tuple[str, str, str]]) -> tuple[dict[str, Any], np.ndarray]:
    """Throughput of ``ConditionalScorer.similarity`` on ``pairs`` (after a warm-up call)."""
    from finesim.evaluation.scoring import ConditionalScorer

    start = time.perf_counter()
    sized = {} if args.inference_batch_size is None else {"batch_size": args.inference_batch_size}
    scorer = ConditionalScorer(args.model, encoder=args.encoder, device=args.device, **sized)
    load_s = time.perf_counter() - start
    s1, s2, c = ([p[i] for p in pairs] for i in range(3))
    scorer.similarity(s1[:64], s2[:64], c[:64])  # warm-up
    times = []
    for _ in range(args.in_process_repeats):
        start = time.perf_counter()
        scores = scorer.similarity(s1, s2, c)
        times.append(time.perf_counter() - start)
    seconds = float(np.median(times))
    result = {
        "pairs": len(pairs),
        "seconds": round(seconds, 3),
        "seconds_each_repeat": [round(x, 3) for x in times],
        "pairs_per_s": round(len(pairs) / seconds, 2),
        "model_load_s": round(load_s, 2),
        "encoder": scorer.encoder,
        "scorer_batch_size": scorer.batch_size,
    }
    return result, np.asarray(scores, dtype=np.float64)


def in_process_chunked(
    scorer: Any, args: argparse.Namespace, pairs: list[tuple[str, str, str]], size: int
) -> dict[str, Any]:
    """Throughput of ``ConditionalScorer.similarity`` called on consecutive chunks of ``size`` pairs (each call
    sorts and pads only its own inputs, as a server's micro-batch does): the in-process figure for batches of that
    size. Median of ``--in-process-repeats``."""
    chunks = [pairs[i : i + size] for i in range(0, len(pairs), size)]
    scorer.similarity(*([p[i] for p in chunks[0]] for i in range(3)))  # warm-up
    times = []
    for _ in range(args.in_process_repeats):
        start = time.perf_counter()
        for chunk in chunks:
            scorer.similarity(*([p[i] for p in chunk] for i in range(3)))
        times.append(time.perf_counter() - start)
    seconds = float(np.median(times))
    return {
        "chunk_pairs": size,
        "calls": len(chunks),
        "seconds": round(seconds, 3),
        "seconds_each_repeat": [round(x, 3) for x in times],
        "pairs_per_s": round(len(pairs) / seconds, 2),
    }


class Server:
    """A ``finesim serve`` subprocess on 127.0.0.1 with a free port."""

    def __init__(self, args: argparse.Namespace, batch_size: int, batch_wait_ms: int, workers: int = 1) -> None:
        self.command = [sys.executable, "-m", "finesim.cli.main", "serve", "--model", args.model]
        self.command += ["--workers", str(workers)] + (["--threads", str(args.threads)] if args.threads else [])
        self.command += ["--host", "127.0.0.1", "--port", "0", "--cache-size", "0", "--no-progress"]
        # batch_size 1 is the one-request-at-a-time server: requests are split at --max-batch-inputs, so it takes whole
        # requests (up to --max-items) one per batch
        sizes = ["4096", "--max-batch-requests", "1"] if batch_size == 1 else [str(batch_size)]
        self.command += ["--max-batch-inputs", *sizes, "--batch-wait-ms", str(batch_wait_ms)]
        self.command += ["--max-concurrent", str(max(64, 2 * args.clients)), "--max-items", "4096"]
        if args.inference_batch_size is not None:
            self.command += ["--inference-batch-size", str(args.inference_batch_size)]
        if args.encoder:
            self.command += ["--encoder", args.encoder]
        if args.device:
            self.command += ["--device", args.device]
        self.lines: queue.Queue = queue.Queue()
        self.output: list[str] = []

    @staticmethod
    def environment() -> dict[str, str]:
        """The server process's environment."""
        return {**os.environ, "TOKENIZERS_PARALLELISM": "false"}

    def start(self, timeout: float = 600.0) -> str:
        """Start the process; return its base URL once ``/health`` answers 200."""
        import httpx

        env = self.environment()
        self.proc = subprocess.Popen(
            self.command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )  # its own process group: a multi-worker server's workers are stopped with it
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + timeout
        port = None
        while port is None:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None or time.monotonic() > deadline:
                raise RuntimeError("finesim serve did not start:\n" + "".join(self.output))
            found = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
            port = int(found.group(1)) if found else None
        self.url = f"http://127.0.0.1:{port}"
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return self.url
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("finesim serve did not become ready:\n" + "".join(self.output))
            time.sleep(0.2)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, ""):
            self.output.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def metrics(self) -> dict[str, float]:
        """The server's batch and model-call counters from ``/metrics``."""
        import httpx

        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        names = ("finesim_model_calls_total", "finesim_batch_requests_sum", "finesim_batch_requests_count")
        names += ("finesim_batch_items_sum",)
        out = {}
        for name in names:
            found = re.search(rf"^{name} ([0-9.e+-]+)$", text, flags=re.MULTILINE)
            out[name] = float(found.group(1)) if found else 0.0
        return out

    def stop(self, timeout: float = 120.0) -> int | None:
        """SIGTERM, then the exit code (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
                return None
        return self.proc.returncode


async def drive(url: str, bodies: list[dict[str, Any]], *, clients: int, count: int, duration: float) -> dict[str, Any]:
    """``clients`` concurrent clients send bodies[i % len] for i < count, until ``duration`` seconds have passed."""
    import httpx

    latencies: list[float] = []
    errors: list[str] = []
    scores: dict[int, list[float]] = {}
    next_index = ok = pairs = 0
    start = time.perf_counter()
    deadline = start + duration

    async def client_loop(client: Any) -> None:
        nonlocal next_index, ok, pairs
        while next_index < count and time.perf_counter() < deadline:
            i = next_index
            next_index += 1
            sent = time.perf_counter()
            try:
                response = await client.post("/similarity", json=bodies[i % len(bodies)])
            except httpx.HTTPError as err:
                errors.append(f"{type(err).__name__}: {err}")
                continue
            latencies.append(time.perf_counter() - sent)
            if response.status_code != 200:
                errors.append(f"{response.status_code}: {response.text[:200]}")
                continue
            ok += 1
            pairs += len(bodies[i % len(bodies)]["sentence1"])
            if i < len(bodies):
                scores[i] = response.json()["scores"]

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    wall = time.perf_counter() - start
    return {
        "wall": wall,
        "latencies": latencies,
        "errors": errors,
        "scores": scores,
        "sent": next_index,
        "ok": ok,
        "pairs": pairs,
    }


WRK_SCRIPT = """
local bodies = {%s}
local i = 0
request = function()
  i = i %% #bodies + 1
  return wrk.format("POST", "/similarity", {["Content-Type"] = "application/json"}, bodies[i])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRKJSON {\\"requests\\": %%d, \\"duration_us\\": %%d, \\"status_errors\\": %%d, "
    .. "\\"socket_errors\\": %%d, \\"p50_us\\": %%d, \\"p95_us\\": %%d, \\"p99_us\\": %%d}\\n",
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99)))
end
"""


def lua_string(text: str) -> str:
    """A Lua long string literal holding ``text``."""
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    return f"[{'=' * level}[{text}]{'=' * level}]"


def _ticks(stat: str) -> float:
    """utime + stime, in seconds, from a /proc .../stat line (the fields after the parenthesised name)."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a multi-worker server's workers); none where /proc is missing."""
    out: list[int] = []
    if not Path("/proc/self/task").is_dir():
        return out
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def server_cpu(pid: int) -> dict[str, float]:
    """CPU seconds used so far by a server process tree (Linux /proc), split into each process's main thread (the
    event loop: HTTP parsing, validation, JSON) and its other threads (the batcher thread running the model, torch's
    intra-op threads, the tokenizer), with each thread's own seconds under ``"<role> <tid>"``; empty where /proc is
    missing."""
    out = {"main_threads": 0.0, "other_threads": 0.0}
    for proc in [pid, *_children(pid)]:
        try:
            for task in Path(f"/proc/{proc}/task").iterdir():
                seconds = _ticks((task / "stat").read_text())
                role = "main" if int(task.name) == proc else "other"
                out[f"{role}_threads"] += seconds
                out[f"{role} {task.name}"] = seconds
        except OSError:
            continue
    return out if out["main_threads"] or out["other_threads"] else {}


def children_cpu() -> float:
    """CPU seconds of this process's finished (waited-for) children: the load generator once it has exited."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat; (0, 0) where it is missing."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / tick, sum(values[:8]) / tick


def cpu_split(
    server_before: dict[str, float],
    server_after: dict[str, float],
    children_s: float,
    machine: tuple[float, float],
) -> dict[str, Any]:
    """Where the CPU went during the timed load: the server's main threads and other threads, its four busiest
    threads (role and seconds), the load generator (wrk, a child of this process; 0 for the Python clients, which are
    this process's threads and not counted), and the whole machine's busy and total CPU seconds (total: wall time x
    cores)."""
    if not server_before or not server_after:
        return {}
    # per thread: a thread that ended during the load is left out (its seconds are gone from the second reading),
    # one that started during it counts from 0
    out = {k: server_after[k] - server_before.get(k, 0.0) for k in server_after if " " in k}
    threads = sorted(((round(v, 2), k.split()[0]) for k, v in out.items()), reverse=True)[:4]
    return {
        "server_main_threads_s": round(sum(v for k, v in out.items() if k.startswith("main ")), 2),
        "server_other_threads_s": round(sum(v for k, v in out.items() if k.startswith("other ")), 2),
        "server_busiest_threads_s": [[role, seconds] for seconds, role in threads],
        "load_generator_s": round(children_s, 2),
        "machine_busy_s": round(machine[0], 2),
        "machine_total_s": round(machine[1], 2),
    }


def drive_wrk(url: str, bodies: list[dict[str, Any]], *, clients: int, duration: float, work: Path) -> dict[str, Any]:
    """``wrk`` with ``clients`` connections for ``duration`` seconds, cycling through ``bodies``."""
    import json
    import shutil

    if shutil.which("wrk") is None:
        raise SystemExit("--load-generator wrk needs wrk on PATH (apt-get install wrk)")
    script = work / "serve_load.lua"
    script.write_text(WRK_SCRIPT % ", ".join(lua_string(json.dumps(b)) for b in bodies), encoding="utf-8")
    command = ["wrk", "-t1", f"-c{clients}", f"-d{max(1, round(duration))}s", "--timeout", "60s", "-s", str(script)]
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    found = re.search(r"^WRKJSON (.*)$", out, flags=re.MULTILINE)
    if not found:
        raise RuntimeError(f"wrk printed no summary:\n{out}")
    summary = json.loads(found.group(1))
    summary["command"] = " ".join([*command[:-1], "serve_load.lua"])
    return summary


def server_run(
    args: argparse.Namespace,
    bodies: list[dict[str, Any]],
    reference: np.ndarray,
    batch_size: int,
    wait_ms: int,
    workers: int = 1,
) -> dict[str, Any]:
    """One server process: warm-up, the timed load, its metrics, SIGTERM."""
    server = Server(args, batch_size, wait_ms, workers)
    started = time.perf_counter()
    url = server.start()
    startup_s = time.perf_counter() - started
    wrk_summary = None
    try:
        if workers > 1:  # every worker ready: /health from many new connections
            import httpx

            for _ in range(20 * workers):
                while httpx.get(f"{url}/health", timeout=30).status_code != 200:
                    time.sleep(0.2)
        if args.warmup:
            asyncio.run(drive(url, bodies, clients=args.clients, count=args.warmup, duration=args.duration))
        before = server.metrics()
        count = min(args.requests, len(bodies))
        cpu_before, kids_before, machine_before = server_cpu(server.proc.pid), children_cpu(), machine_cpu()
        if args.load_generator == "wrk":
            import tempfile

            with tempfile.TemporaryDirectory() as work:
                wrk_summary = drive_wrk(url, bodies, clients=args.clients, duration=args.duration, work=Path(work))
            timed_end = (server_cpu(server.proc.pid), children_cpu(), machine_cpu())
            # the scores, checked on the first requests (one client, after the timed part)
            run = asyncio.run(drive(url, bodies, clients=1, count=min(count, 16), duration=args.duration))
        else:
            run = asyncio.run(drive(url, bodies, clients=args.clients, count=count, duration=args.duration))
            timed_end = (server_cpu(server.proc.pid), children_cpu(), machine_cpu())
        after = server.metrics()
    finally:
        exit_code = server.stop()
    if wrk_summary is not None:
        wall = wrk_summary["duration_us"] / 1e6
        per_request = args.pairs_per_request
        ok = wrk_summary["requests"] - wrk_summary["status_errors"]
        run = {
            **run,
            "wall": wall,
            "sent": wrk_summary["requests"],
            "ok": ok,
            "pairs": ok * per_request,
            "errors": run["errors"]
            + [f"wrk: {wrk_summary['status_errors']} non-2xx"] * bool(wrk_summary["status_errors"])
            + [f"wrk: {wrk_summary['socket_errors']} socket errors"] * bool(wrk_summary["socket_errors"]),
            "latencies": [],
        }
    lat_ms = np.asarray(run["latencies"]) * 1000.0
    per = args.pairs_per_request
    diffs = [
        abs(float(s) - float(reference[i * per + j])) for i, got in run["scores"].items() for j, s in enumerate(got)
    ]
    delta = {k: after[k] - before[k] for k in after}
    machine = (timed_end[2][0] - machine_before[0], timed_end[2][1] - machine_before[1])
    cpu = cpu_split(cpu_before, timed_end[0], timed_end[1] - kids_before, machine)
    batches = delta["finesim_batch_requests_count"]
    return {
        "server_command": server.command,
        "startup_to_ready_s": round(startup_s, 2),
        "requests_sent": run["sent"],
        "requests_ok": run["ok"],
        "errors": len(run["errors"]),
        "error_examples": run["errors"][:5],
        "wall_s": round(run["wall"], 3),
        "pairs": run["pairs"],
        "pairs_per_s": round(run["pairs"] / run["wall"], 2) if run["wall"] > 0 else None,
        "requests_per_s": round(run["sent"] / run["wall"], 2) if run["wall"] > 0 else None,
        "latency_ms": {
            q: round(float(np.percentile(lat_ms, int(q[1:]))), 2) if lat_ms.size else None
            for q in ("p50", "p95", "p99")
        }
        if wrk_summary is None
        else {q: round(wrk_summary[f"{q}_us"] / 1000.0, 2) for q in ("p50", "p95", "p99")},
        "load_generator": "python" if wrk_summary is None else wrk_summary["command"],
        "workers": workers,
        "max_abs_diff_vs_in_process": float(max(diffs)) if diffs else None,
        "server_batches": int(batches),
        "server_mean_requests_per_batch": round(delta["finesim_batch_requests_sum"] / batches, 2) if batches else None,
        "server_mean_pairs_per_batch": round(delta["finesim_batch_items_sum"] / batches, 2) if batches else None,
        "server_model_calls": int(delta["finesim_model_calls_total"]),
        "exit_code_after_sigterm": exit_code,
        # CPU seconds during the timed load (Linux; {} elsewhere); with wrk the window includes wrk's start and exit
        "cpu_seconds": cpu,
    }


def http_stack() -> dict[str, Any]:
    """The event loop and HTTP parser uvicorn picks in the server's environment, with the versions (asked once,
    before any load, in a fresh interpreter with the server's environment)."""
    out = subprocess.run(
        [sys.executable, "-c", HTTP_STACK_PROBE], env=Server.environment(), capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stack = http_stack()
    print(f"server HTTP stack: {stack['loop']} + {stack['http']}", flush=True)
    root = data_root(args.data)
    pairs, data = load_pairs(root, args.pairs, args.seed)
    bodies = request_bodies(pairs, args.pairs_per_request)
    used = bodies[: min(args.requests, len(bodies))]
    used_pairs = pairs[: sum(len(b["sentence1"]) for b in used)]
    print(f"{len(pairs)} pairs, {len(bodies)} requests of {args.pairs_per_request}; timed: {len(used)}", flush=True)

    baseline, reference = in_process(args, used_pairs)
    print(f"in-process: {baseline['pairs_per_s']} pairs/s", flush=True)
    chunked = {}
    if args.in_process_chunks:
        from finesim.evaluation.scoring import ConditionalScorer

        sized = {} if args.inference_batch_size is None else {"batch_size": args.inference_batch_size}
        scorer = ConditionalScorer(args.model, encoder=args.encoder, device=args.device, **sized)
    for size in args.in_process_chunks or []:
        chunked[str(size)] = in_process_chunked(scorer, args, used_pairs, size)
        print(f"in-process in chunks of {size} pairs: {chunked[str(size)]['pairs_per_s']} pairs/s", flush=True)
    if args.skip_server:
        batched: dict[str, Any] = {"pairs_per_s": None, "errors": 0}
    else:
        batched = server_run(args, bodies, reference, args.batch_size, args.batch_wait_ms, args.workers)
    print(f"server, micro-batching: {batched['pairs_per_s']} pairs/s, {batched['errors']} errors", flush=True)
    skip_single = args.skip_single or args.skip_server
    single = {"pairs_per_s": None, "errors": 0} if skip_single else server_run(args, bodies, reference, 1, 0)
    print(f"server, one request at a time: {single['pairs_per_s']} pairs/s, {single['errors']} errors", flush=True)

    vs_in_process = batched["pairs_per_s"] / baseline["pairs_per_s"] if batched["pairs_per_s"] else None
    vs_single = (
        batched["pairs_per_s"] / single["pairs_per_s"] if batched["pairs_per_s"] and single["pairs_per_s"] else None
    )
    goals = {
        "batched_vs_in_process": round(vs_in_process, 3) if vs_in_process else None,
        "batched_vs_in_process_goal": GOAL_VS_IN_PROCESS,
        # None: not measured (--skip-server), not "not met"
        "batched_vs_in_process_met": None if vs_in_process is None else vs_in_process >= GOAL_VS_IN_PROCESS,
        "batched_vs_single": round(vs_single, 3) if vs_single else None,
        "batched_vs_single_goal": GOAL_BATCHED_VS_SINGLE,
        "batched_vs_single_met": None if vs_single is None else vs_single >= GOAL_BATCHED_VS_SINGLE,
        "zero_errors": batched["errors"] == 0 and single["errors"] == 0,
    }
    record = {
        "benchmark": "serve_load",
        "description": "finesim serve under concurrent loopback clients (POST /similarity on C-STS validation "
        "pairs) against the in-process ConditionalScorer and a one-request-at-a-time server; see the script's "
        "docstring",
        "environment": environment_record(),
        "command": [sys.executable, *sys.argv],
        "seed": args.seed,
        "data": {**data, "pairs_used": len(pairs), "timed_pairs": len(used_pairs)},
        "settings": {k: v for k, v in vars(args).items() if k != "output"},
        "http_stack": stack,
        # the thread settings the server inherits (torch reads them at start), and this process's interpreter switch
        # interval (a site-wide setting reaches the server too)
        "thread_environment": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
        | {"python_switch_interval_s": sys.getswitchinterval()},
        "results": {
            "in_process": baseline,
            **({"in_process_chunked": chunked} if chunked else {}),
            "server_batched": batched,
            "server_one_at_a_time": single,
        },
        "goals": goals,
    }
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(args.model).name or args.model)
    out = Path(args.output) if args.output else RESULTS / f"serve_load_{slug}.json"
    write_json_atomic(out, portable(record, path_roots(root)))
    print(f"goals: {goals}\nwrote {out}", flush=True)
    return 0 if goals["zero_errors"] else 1


if __name__ == "__main__":
    sys.exit(main())

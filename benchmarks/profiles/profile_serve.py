"""Where ``finesim serve``'s threads spend their time under load: a py-spy profile (issue 41, exploration).

Starts ``finesim serve`` as ``benchmarks/serve_load.py`` does (one worker, batch 64, 5 ms wait, cache off), warms it
up, then records Python stacks of every server thread with py-spy (``pip install py-spy``; 200 Hz, non-blocking) while
wrk drives 32 connections at one pair per request for 20 s. Writes py-spy's raw (collapsed) stacks to the given file;
``benchmarks/results/serve_stack/profile_A_summary.json`` summarises one such profile. Run it alone on the machine:

    flock /tmp/finesim-cpu.lock python benchmarks/profiles/profile_serve.py /tmp/profile.txt --model MODEL
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import serve_load

from finesim.paths import data_root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="py-spy's raw stacks file")
    parser.add_argument("--model", default="runs/levers-minilm-lr5e-5-seed42")
    parser.add_argument("--seconds", type=int, default=20)
    cli = parser.parse_args()
    spy_bin = shutil.which("py-spy")
    if spy_bin is None:
        raise SystemExit("needs py-spy on PATH (pip install py-spy)")
    args = serve_load.parse_args(["--model", cli.model, "--load-generator", "wrk", "--pairs-per-request", "1"])
    pairs, _ = serve_load.load_pairs(data_root(None), None, 0)
    bodies = serve_load.request_bodies(pairs, 1)
    server = serve_load.Server(args, 64, 5)
    url = server.start()
    try:
        asyncio.run(serve_load.drive(url, bodies, clients=32, count=64, duration=30))
        record = [spy_bin, "record", "-p", str(server.proc.pid), "--threads", "-r", "200"]
        spy = subprocess.Popen([*record, "-d", str(cli.seconds + 2), "-f", "raw", "-o", cli.output, "--nonblocking"])
        time.sleep(1)
        with tempfile.TemporaryDirectory() as work:
            summary = serve_load.drive_wrk(url, bodies, clients=32, duration=cli.seconds, work=Path(work))
        print(f"{summary['requests'] / (summary['duration_us'] / 1e6):.2f} requests/s while profiled")
        spy.wait()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

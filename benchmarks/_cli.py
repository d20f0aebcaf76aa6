"""Shared by the benchmark drivers (claims/run.py, distill/run.py): one ``finesim`` command as a subprocess."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_finesim(args: list[str], log: Path) -> tuple[int, float]:
    """Run ``finesim ARGS`` from the repository root with this interpreter, appending the command line and its output
    to ``log``; return its exit code and wall seconds."""
    start = time.perf_counter()
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"\n$ finesim {' '.join(args)}\n")
        out.flush()
        code = subprocess.run(
            [sys.executable, "-m", "finesim.cli.main", *args], stdout=out, stderr=out, cwd=ROOT
        ).returncode
    return code, time.perf_counter() - start


def add_set_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE`` (repeatable, into ``overrides``): recipe overrides, as ``finesim train --set`` takes them."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help)

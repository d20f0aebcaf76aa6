"""Benchmark: how fast ``finesim`` answers when the answer needs no model (issue: "a CLI that feels instant").

Each case is a whole ``finesim`` process (``python -m finesim.cli.main ...``) that stops at a check made before any
model loads — a missing file, a missing column, a recipe with an unknown key — or that needs no model at all
(``--help``, ``index info``). Each case runs ``--repeats`` times; the median, minimum and maximum wall seconds are
recorded, with the exit codes (each case must stop with the code it expects: 0 for a command that succeeds, 1 or 2
for a refusal) and whether the process imported torch (a small launcher prints it at exit). Goal: every case under 2
s on the 2-core machine.

    python benchmarks/cli_startup.py [--repeats 5] [--output benchmarks/results/cli_startup.json]

Run it alone on an idle machine: a timing beside another job is not a figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from finesim.results import environment_record, portable_path, write_json_atomic

GOAL_SECONDS = 2.0
PROBE = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write('TORCH-IMPORTED=%s\\n' % ('torch' in sys.modules)))\n"
    "from finesim.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def cases(work: Path, index_dir: Path) -> dict[str, list[str]]:
    """Command lines (after ``finesim``) of the timed cases; each stops before loading a model."""
    table = work / "pairs.csv"
    table.write_text("sentence1,sentence_2,condition\na,b,c\n", encoding="utf-8")
    typo = work / "typo.csv"
    typo.write_text("sentence1,sentence2,condtion\na,b,c\n", encoding="utf-8")
    recipe = work / "recipe.yaml"
    recipe.write_text("name: x\nmodel:\n  backbone: minilm\ntrain:\n  epocs: 1\n", encoding="utf-8")
    out = str(work / "out.csv")
    return {
        "help": ["--help"],
        "score --help": ["score", "--help"],
        "score: missing input file": ["score", "--model", "minilm", "--input", str(work / "nope.csv"), "--output", out],
        "score: missing sentence column": ["score", "--model", "minilm", "--input", str(table), "--output", out],
        "score: condition column typo": ["score", "--model", "minilm", "--input", str(typo), "--output", out],
        "train: unknown recipe key": ["train", str(recipe), "-o", str(work / "run")],
        "index info": ["index", "info", str(index_dir)],
        "index search: missing folder": ["index", "search", str(work / "nope"), "--query", "a", "--condition", "b"],
    }


def build_index(folder: Path) -> None:
    """A small index to describe (built once, untimed)."""
    from finesim.index import ConditionalIndex

    ConditionalIndex.build("minilm", ["a man plays guitar", "a dog runs", "a red car"], folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--note", default=None, help="recorded as it is (e.g. what else ran on the machine)")
    parser.add_argument("--output", default="benchmarks/results/cli_startup.json")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        build_index(work / "index")
        probe = work / "probe.py"
        probe.write_text(PROBE, encoding="utf-8")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        for name, argv in cases(work, work / "index").items():
            seconds, codes, torch = [], set(), set()
            for _ in range(args.repeats):
                start = time.perf_counter()
                done = subprocess.run([sys.executable, str(probe), *argv], env=env, capture_output=True, text=True)
                seconds.append(time.perf_counter() - start)
                codes.add(done.returncode)
                torch.add("TORCH-IMPORTED=True" in done.stderr)
            results[name] = {
                "command": "finesim " + " ".join(a.replace(tmp, "<tmp>") for a in argv),
                "median_seconds": round(statistics.median(seconds), 3),
                "min_seconds": round(min(seconds), 3),
                "max_seconds": round(max(seconds), 3),
                "exit_codes": sorted(codes),
                "imported_torch": sorted(torch),
                "under_goal": statistics.median(seconds) < GOAL_SECONDS,
            }
            print(f"{name}: {results[name]['median_seconds']} s (exit {sorted(codes)}, torch {sorted(torch)})")
    write_json_atomic(
        args.output,
        {
            "benchmark": "cli_startup",
            "description": "wall seconds of whole finesim processes that stop before any model loads (see the "
            "script's docstring); goal: under 2 s each",
            "command": portable_path(" ".join(sys.argv)),
            "goal_seconds": GOAL_SECONDS,
            "repeats": args.repeats,
            "note": args.note,
            "results": results,
            "all_under_goal": all(r["under_goal"] for r in results.values()),
            "environment": environment_record(),
        },
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

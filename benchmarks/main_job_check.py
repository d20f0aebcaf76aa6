"""Behaviour check: the main job after a refactor gives the committed validation Spearman to the digit.

Runs the main job exactly as ``scripts/main.sh`` does (``finesim train recipes/csts/minilm-bi-mse-tuned.yaml`` with
the recipe's own seed, then ``finesim evaluate --tasks csts``) into ``--run-dir`` and writes a self-describing JSON
with the validation Spearman before (read from ``--before``, a committed results file of the same recipe and seed:
``benchmarks/csts_train.py``'s or the claims study's) and after, whether they agree to two decimals, and the run's
seconds (training, evaluation), dev Spearman and per-epoch selection scores. On an idle machine the seconds are the
main job's time; on a busy one only the scores compare.

    flock /tmp/finesim-cpu.lock python benchmarks/main_job_check.py --run-dir runs/main-job-check \\
        --what "after the issue-39 refactor" --output benchmarks/results/refactor_main_job_after_issue39.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from finesim.results import environment_record, portable, write_json_atomic

RECIPE = "recipes/csts/minilm-bi-mse-tuned.yaml"


def git_commit() -> str:
    """The checked-out commit, with ``-dirty`` when tracked files differ from it."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "src", "recipes"], check=False).returncode != 0
    return commit + ("-dirty" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/main-job-check")
    parser.add_argument(
        "--before",
        default="benchmarks/results/claims/levers-csts-minilm/minilm-lr1e-4__seed42.json",
        help="a committed results file of the recipe's seed (default: the screen's run the recipe is since issue 42)",
    )
    parser.add_argument("--what", required=True, help="which change the run checks (recorded)")
    parser.add_argument("--note", default=None)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    finesim = [sys.executable, "-m", "finesim.cli.main"]
    commit = git_commit()
    run = Path(args.run_dir)
    started = time.perf_counter()
    # --no-resume: the check trains under this commit every time (a rerun into a finished run's folder trains nothing)
    train = [*finesim, "train", RECIPE, "--output-dir", str(run), "--no-progress", "--no-resume"]
    subprocess.run(train, check=True)
    train_seconds = time.perf_counter() - started
    evaluate = run / "evaluate.json"
    started = time.perf_counter()
    subprocess.run(
        [*finesim, "evaluate", "--model", str(run / "model"), "--tasks", "csts", "--output", str(evaluate)], check=True
    )
    evaluate_seconds = time.perf_counter() - started
    metrics: dict[str, Any] = json.loads((run / "metrics.json").read_text())
    scores = json.loads(evaluate.read_text())
    before = before_validation(Path(args.before))
    after = float(metrics["validation"]["spearman"])
    payload = {
        "benchmark": "refactor_main_job",
        "what": f"the main job ({RECIPE}, its seed) {args.what}, against the committed result before it",
        "git_commit_after": commit,
        "before_file": args.before,
        "before_validation_spearman": before,
        "after": {
            "validation": metrics["validation"],
            "dev": metrics.get("dev"),
            "evaluations": [  # the selection split's Spearman at each evaluation (the trainer's log)
                {k: v for k, v in e.items() if k in ("epoch", "step") or k.endswith("_spearman")}
                for e in metrics.get("log_history", [])
                if any(k.endswith("_spearman") for k in e)
            ],
            "train_rows_per_second": metrics.get("train_rows_per_second"),
            "bf16": metrics.get("bf16"),  # the autocast the run used (train.bf16 "auto" resolved on this machine)
            "evaluate_by_group": scores.get("average_main_score_by_group"),
            "resumed_from": metrics.get("resumed_from"),
        },
        "same_to_two_decimals": f"{before:.2f}" == f"{after:.2f}",
        "seconds": {"train": round(train_seconds, 1), "evaluate": round(evaluate_seconds, 1)},
        "environment": environment_record(),
        "note": args.note or "the seconds are the main job's time only on an idle machine",
    }
    write_json_atomic(args.output, portable(payload))
    print(f"before {before:.4f}, after {after:.4f}: same to two decimals: {payload['same_to_two_decimals']}")


def before_validation(path: Path) -> float:
    """The validation Spearman of a committed results file: ``benchmarks/csts_train.py``'s (one run) or the claims
    study's (``train.validation``)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("benchmark") == "claims":
        return float(doc["train"]["validation"]["spearman"])
    found = [r["validation_spearman"] for r in doc.get("runs", {}).values() if "validation_spearman" in r]
    if len(found) != 1:
        raise SystemExit(f"{path}: expected one run with a validation_spearman, found {len(found)}")
    return float(found[0])


if __name__ == "__main__":
    main()

"""Behaviour check: the main job after a refactor gives the committed validation Spearman to the digit.

Runs the main job exactly as ``scripts/main.sh`` does (``finesim train recipes/csts/minilm-bi-mse-tuned.yaml`` with
the recipe's own seed, then ``finesim evaluate --tasks csts``) into ``--run-dir`` and writes a self-describing JSON
with the validation Spearman before (read from ``--before``, a committed results file of the same recipe and seed)
and after, and whether they agree to two decimals. Only the scores are compared: a busy machine changes the time.

    flock /tmp/finesim-cpu.lock python benchmarks/main_job_check.py --run-dir runs/main-job-check \\
        --what "after the issue-39 refactor" --output benchmarks/results/refactor_main_job_after_issue39.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
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
    parser.add_argument("--before", default="benchmarks/results/csts_train_3ep_lr1e-4.json")
    parser.add_argument("--what", required=True, help="which change the run checks (recorded)")
    parser.add_argument("--note", default=None)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    finesim = [sys.executable, "-m", "finesim.cli.main"]
    commit = git_commit()
    run = Path(args.run_dir)
    subprocess.run([*finesim, "train", RECIPE, "--output-dir", str(run), "--no-progress"], check=True)
    evaluate = run / "evaluate.json"
    subprocess.run(
        [*finesim, "evaluate", "--model", str(run / "model"), "--tasks", "csts", "--output", str(evaluate)], check=True
    )
    metrics: dict[str, Any] = json.loads((run / "metrics.json").read_text())
    scores = json.loads(evaluate.read_text())
    before_doc = json.loads(Path(args.before).read_text())
    before = [r["validation_spearman"] for r in before_doc["runs"].values() if "validation_spearman" in r]
    if len(before) != 1:
        raise SystemExit(f"{args.before}: expected one run with a validation_spearman, found {len(before)}")
    after = float(metrics["validation"]["spearman"])
    payload = {
        "benchmark": "refactor_main_job",
        "what": f"the main job ({RECIPE}, its seed) {args.what}, against the committed result before it",
        "git_commit_after": commit,
        "before_file": args.before,
        "before_validation_spearman": before[0],
        "after": {"validation": metrics["validation"], "evaluate_by_group": scores.get("average_main_score_by_group")},
        "same_to_two_decimals": f"{before[0]:.2f}" == f"{after:.2f}",
        "environment": environment_record(),
        "note": args.note or "only the scores are compared, not the time",
    }
    write_json_atomic(args.output, portable(payload))
    print(f"before {before[0]:.4f}, after {after:.4f}: same to two decimals: {payload['same_to_two_decimals']}")


if __name__ == "__main__":
    main()

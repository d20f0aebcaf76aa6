"""Behaviour check: small CCL, STS-regression and CASE runs through the ``finesim`` command, for before/after
comparisons of a change that must not alter results (e.g. a refactor).

Each run goes through the command line only (``finesim train`` / ``finesim case train``), so the same script
measures any two versions of the code. It records validation numbers and the last logged training losses;
two versions behave the same when every number matches.

    python benchmarks/behaviour_check.py --label after --output benchmarks/results/behaviour_check_after.json

Runs (all-MiniLM-L6-v2, seed 42, CPU):

- ``ccl``: ``recipes/ccl/minilm-bi-ccl.yaml`` for 30 steps, C-STS validation at the end;
- ``sts_regression``: ``recipes/sts/minilm-smooth-k2.yaml`` for 30 steps, STS-B dev at the end;
- ``case``: ``recipes/case/minilm-conc-sc-minus-c-nonlinear.yaml`` with 5 epochs and a fresh embedding cache,
  reported on C-STS validation.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _finesim(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "finesim.cli.main", *args]
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    return time.perf_counter() - start


def _train_run(recipe: str, out: Path, env: dict[str, str], steps: int) -> dict[str, Any]:
    sets = [
        f"train.max_steps={steps}",
        "train.eval_strategy=steps",
        f"train.eval_steps={steps}",
        "train.logging_steps=10",
    ]
    argv = ["train", recipe, "-o", str(out)]
    for item in sets:
        argv += ["--set", item]
    seconds = _finesim(argv, env)
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    losses = [
        {
            k: v
            for k, v in entry.items()
            if k == "step" or k == "loss" or k.endswith("_loss") or k in ("w_acl", "bcl", "mse", "c_mse")
        }
        for entry in metrics["log_history"]
        if "loss" in entry
    ]
    return {
        "recipe": recipe,
        "steps": steps,
        "validation": metrics["validation"],
        "global_steps": metrics["global_steps"],
        "logged_losses": losses,
        "wall_seconds": round(seconds, 1),
    }


def _case_run(out: Path, cache: Path, env: dict[str, str], data: Path) -> dict[str, Any]:
    recipe = "recipes/case/minilm-conc-sc-minus-c-nonlinear.yaml"
    argv = [
        "case",
        "train",
        "--recipe",
        recipe,
        "--epochs",
        "5",
        "--cache-dir",
        str(cache),
        "--eval",
        str(data / "csts" / "validation.csv"),
        "--output-dir",
        str(out),
        "--no-progress",
    ]
    seconds = _finesim(argv, env)
    training = json.loads((out / "training.json").read_text(encoding="utf-8"))
    return {
        "recipe": recipe,
        "epochs": 5,
        "best_epoch": training["training"]["best_epoch"],
        "best_dev_spearman": training["training"]["best_dev_spearman"],
        "eval_spearman": training["eval_spearman"],
        "history": training["training"]["history"],
        "wall_seconds": round(seconds, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", required=True, help="what version this is (e.g. before, after)")
    parser.add_argument("--output", required=True, help="results JSON")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--only", nargs="*", default=None, help="subset of runs: ccl sts_regression case")
    args = parser.parse_args()
    data = Path(os.environ.get("FINESIM_DATA", ROOT.parent / "shared" / "data")).resolve()
    env = {**os.environ, "FINESIM_DATA": str(data), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    runs = args.only or ["ccl", "sts_regression", "case"]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "ccl" in runs:
            results["ccl"] = _train_run("recipes/ccl/minilm-bi-ccl.yaml", work / "ccl", env, args.steps)
        if "sts_regression" in runs:
            results["sts_regression"] = _train_run("recipes/sts/minilm-smooth-k2.yaml", work / "sts", env, args.steps)
        if "case" in runs:
            results["case"] = _case_run(work / "case", work / "cache", env, data)
    sys.path.insert(0, str(ROOT / "src"))
    from finesim.results import environment_record, path_roots, portable, write_json_atomic

    record = {
        "benchmark": "behaviour_check",
        "label": args.label,
        "git_commit": commit,
        "seed": 42,
        "data_root": str(data),
        "runs": results,
        "environment": environment_record(),
    }
    write_json_atomic(args.output, portable(record, path_roots(data)))
    print(json.dumps({k: v.get("validation", v.get("eval_spearman")) for k, v in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

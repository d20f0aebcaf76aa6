"""The condition template lever (issue 42): a C-STS bi-encoder fed one templated text per side, e.g. ``In terms of
{condition}: {sentence}``, against the same recipe fed ``(sentence, condition)`` as a text pair (the control, finesim's
bi-encoder as it is). A screen, not a feature: the templated texts are written into plain tables and the bi-encoder
trains on them with no condition, so the screen needs nothing from finesim's model layer; a lever that passes would
then need the template carried by the model folder (scoring, serving and the index would apply it).

    flock /tmp/finesim-cpu.lock python benchmarks/condition_template.py            # seeds 42, 1, 2, both arms
    python benchmarks/condition_template.py --seeds 42 --set train.max_steps=4 --work runs/condition-template-smoke \\
        --results /tmp/smoke.json                                                    # a smoke run

Both arms train ``--recipe`` (default: the main job's, ``recipes/csts/minilm-bi-mse-tuned.yaml``) on the rows of
C-STS train less the recipe's dev split (``data.dev_fraction`` / ``data.dev_seed``: the same sentence pairs in both
arms, carved once here with :func:`finesim.data.splits.split_by_pair`, the function the trainer carves with), keep the
epoch with the best Spearman on that dev split, and are then evaluated once on C-STS validation (rows labelled -1
skipped), which chooses nothing. The control trains on the carved rows as C-STS files (``train.csv``, ``dev.csv``:
the rows the recipe's own carve gives, in the same order); the lever on the same rows with each sentence replaced by
the template filled with its sentence and condition (tables with ``sentence1``, ``sentence2``, ``label``); its
validation file is templated the same way. Everything else (seed, batches, schedule, epochs, bf16) is the recipe's.

**The rule, fixed before the first run** (as the third lever screen's, docs/results.md): the lever passes when its
mean dev Spearman over seeds 42, 1 and 2 beats the control's mean by more than 0.40; validation is reported beside
it and decides nothing. The verdict is written only when both arms have those three seeds (a run over other seeds,
such as a smoke run, records none).

Work folder ``--work`` (default ``runs/condition-template``): ``data/`` (the files of both arms), ``control/seedS``
and ``lever/seedS`` (``finesim train`` output folders: an interrupted run resumes from its checkpoint; a finished one,
with its ``evaluate.json``, is skipped). The results file (``--results``, default
``benchmarks/results/condition_template_minilm.json``) is rewritten after every finished run, so the runs done so far
land: the template, the recipe and overrides, the data files' SHA-256, each run's dev Spearman at selection, its dev
and validation Spearman from ``finesim evaluate``, its training seconds, the rule and the verdict, the environment.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).absolute().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _cli import add_set_option, run_finesim  # noqa: E402

TEMPLATE = "In terms of {condition}: {sentence}"
RECIPE = "recipes/csts/minilm-bi-mse-tuned.yaml"
ARMS = ("control", "lever")
PASS_MARGIN = 0.40  # the rule: mean dev gain over RULE_SEEDS must exceed this (Spearman x100)
RULE_SEEDS = (42, 1, 2)  # the seeds the rule judges; a run over other seeds records no verdict


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--template", default=TEMPLATE, help="one {sentence} and one {condition} (default: %(default)s)")
    p.add_argument("--recipe", default=RECIPE, help="the recipe both arms train (default: %(default)s)")
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2], help="seeds (default: 42 1 2)")
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS), help="arms to run (default: both)")
    add_set_option(p, "a recipe override for both arms (repeatable), e.g. train.max_steps=4 for a smoke run")
    p.add_argument("--data", default=None, help="data root (default: $FINESIM_DATA or ../shared/data)")
    p.add_argument("--work", default="runs/condition-template", help="work folder (default: %(default)s)")
    p.add_argument("--results", default="benchmarks/results/condition_template_minilm.json", help="results file")
    return p.parse_args(argv)


def fill(template: str, sentence: str, condition: str) -> str:
    """The template with its two fields filled (plain replacement: other braces in a template stay as they are)."""
    return template.replace("{condition}", condition).replace("{sentence}", sentence)


def check_template(template: str) -> None:
    """A template needs exactly one ``{sentence}`` and one ``{condition}``."""
    counts = {field: template.count("{" + field + "}") for field in ("sentence", "condition")}
    if counts != {"sentence": 1, "condition": 1}:
        raise SystemExit(
            f"--template {template!r} has {counts['sentence']} {{sentence}} and {counts['condition']} {{condition}}; "
            "it needs exactly one of each"
        )


def write_rows(path: Path, rows: dict[str, list[Any]], columns: tuple[str, ...]) -> None:
    """A CSV with ``columns`` from ``rows`` (written whole, then renamed into place)."""
    import pandas as pd

    from finesim.results import atomic_write

    frame = pd.DataFrame({c: rows[c] for c in columns})
    atomic_write(path, lambda fh: frame.to_csv(fh, index=False), mode="w")


def prepare(root: Path, work: Path, template: str, recipe: Any) -> dict[str, dict[str, Path]]:
    """The files of both arms under ``work/data`` (written on every start: the same content for the same data and
    template)."""
    from finesim.data.csts import read_csts
    from finesim.training.preflight import LoadedData, carve_dev

    path = root / "csts" / "train.csv"
    train, _ = read_csts(path)
    validation, _ = read_csts(root / "csts" / "validation.csv")
    kept, carved = carve_dev(recipe, LoadedData("train", path, "csts", train, {}, ""))  # the trainer's own carve
    assert carved is not None  # main() refuses a recipe without data.dev_fraction
    rest, dev = kept.dataset, carved.dataset
    folder = work / "data"
    folder.mkdir(parents=True, exist_ok=True)
    csts_columns = ("sentence1", "sentence2", "condition", "label")
    files: dict[str, dict[str, Path]] = {"control": {}, "lever": {}}
    for split, ds in (("train", rest), ("dev", dev), ("validation", validation)):
        rows = ds.to_dict()
        if split != "validation":  # the control's validation is C-STS validation itself
            files["control"][split] = folder / f"control-{split}.csv"
            write_rows(files["control"][split], rows, csts_columns)
        templated = {
            "sentence1": [fill(template, s, c) for s, c in zip(rows["sentence1"], rows["condition"])],
            "sentence2": [fill(template, s, c) for s, c in zip(rows["sentence2"], rows["condition"])],
            "label": rows["label"],
        }
        files["lever"][split] = folder / f"lever-{split}.csv"
        write_rows(files["lever"][split], templated, ("sentence1", "sentence2", "label"))
    files["control"]["validation"] = root / "csts" / "validation.csv"
    return files


def task_file(work: Path, files: dict[str, dict[str, Path]]) -> Path:
    """The evaluation tasks of both arms: each arm's dev split and validation, scored as ``finesim evaluate`` scores
    C-STS (the control's files as C-STS with the condition paired in; the lever's as tables without conditions)."""
    tasks = {
        "control-dev": {"format": "csts", "path": str(files["control"]["dev"].absolute()), "split": "dev",
                        "score_range": [1, 5]},
        "control-validation": {"format": "csts", "path": str(files["control"]["validation"].absolute()),
                               "split": "validation", "score_range": [1, 5]},
        "lever-dev": {"format": "table", "path": str(files["lever"]["dev"].absolute()), "score_range": [1, 5]},
        "lever-validation": {"format": "table", "path": str(files["lever"]["validation"].absolute()),
                             "score_range": [1, 5]},
    }  # fmt: skip
    groups = {arm: [f"{arm}-dev", f"{arm}-validation"] for arm in ARMS}
    path = work / "tasks.yaml"
    path.write_text(yaml.safe_dump({"tasks": tasks, "groups": groups}, sort_keys=False), encoding="utf-8")
    return path


def arm_overrides(arm: str, files: dict[str, dict[str, Path]]) -> list[str]:
    """The recipe keys an arm sets on top of ``--recipe``: its own train and dev files, the dev file choosing."""
    f = files[arm]
    keys = [f"data.train={f['train'].absolute()}", f"data.validation={f['dev'].absolute()}", "data.dev_fraction=null"]
    if arm == "lever":
        keys += ["data.format=table", "data.validation_format=table"]
    return keys


def verdict(runs: dict[str, dict[int, dict[str, Any]]], seeds: tuple[int, ...] = RULE_SEEDS) -> dict[str, Any] | None:
    """The rule's outcome once both arms have every seed of ``seeds`` (the rule's); None before."""
    if not all(seed in runs.get(arm, {}) for arm in ARMS for seed in seeds):
        return None

    def mean(arm: str, key: str) -> float:
        return sum(runs[arm][s][key] for s in seeds) / len(seeds)

    gain = mean("lever", "dev_spearman") - mean("control", "dev_spearman")
    return {
        "dev_gain": gain,
        "validation_gain": mean("lever", "validation_spearman") - mean("control", "validation_spearman"),
        "passes": gain > PASS_MARGIN,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import os

    os.chdir(ROOT)
    from finesim.paths import data_root
    from finesim.results import environment_record, file_sha256, portable, write_json_atomic
    from finesim.training import load_recipe

    check_template(args.template)
    root = data_root(args.data)
    recipe = load_recipe(Path(args.recipe), args.overrides)  # checked now, before any work
    if recipe.data.dev_fraction is None:
        raise SystemExit(f"{args.recipe}: the screen chooses on the recipe's dev split; it sets no data.dev_fraction")
    work = Path(args.work)
    files = prepare(root, work, args.template, recipe)
    tasks = task_file(work, files)
    results = Path(args.results)
    done: dict[str, dict[int, dict[str, Any]]] = {}
    if results.is_file():  # runs of earlier sittings with the same template and recipe
        old = json.loads(results.read_text("utf-8"))
        same = ("template", args.template), ("overrides", args.overrides), ("recipe_file", args.recipe)
        if all(old.get(key) == value for key, value in same):
            done = {arm: {int(s): r for s, r in old.get("runs", {}).get(arm, {}).items()} for arm in ARMS}
    log = work / "screen.log"
    for seed in args.seeds:
        for arm in args.arms:
            out = work / arm / f"seed{seed}"
            evaluation = out / "evaluate.json"
            if seed in done.get(arm, {}) and evaluation.is_file():
                continue
            sets = [f"seed={seed}", *args.overrides, *arm_overrides(arm, files)]
            fit = ["train", args.recipe, "-o", str(out), "--data", str(root), "--no-progress"]
            fit += [x for s in sets for x in ("--set", s)]
            print(f"[template] {arm} seed {seed}: training ({out})", file=sys.stderr, flush=True)
            start = time.perf_counter()
            code, _ = run_finesim(fit, log)
            if code != 0:
                raise SystemExit(f"{arm} seed {seed}: finesim train exited {code}; see {log}")
            train_seconds = time.perf_counter() - start
            score = ["evaluate", "--model", str(out / "model"), "--tasks", arm, "--task-file", str(tasks)]
            score += ["--output", str(evaluation), "--data", str(root), "--no-progress"]
            code, _ = run_finesim(score, log)
            if code != 0:
                raise SystemExit(f"{arm} seed {seed}: finesim evaluate exited {code}; see {log}")
            metrics = json.loads((out / "metrics.json").read_text("utf-8"))
            scores = json.loads(evaluation.read_text("utf-8"))["results"]
            done.setdefault(arm, {})[seed] = {
                "dev_spearman_at_selection": metrics.get("best_metric"),
                "best_checkpoint": metrics.get("best_checkpoint"),
                "dev_spearman": scores[f"{arm}-dev"]["spearman"],
                "validation_spearman": scores[f"{arm}-validation"]["spearman"],
                "wall_seconds_this_sitting": round(train_seconds, 1),
                "train_runtime_seconds": metrics.get("train_runtime_seconds"),
                "bf16": metrics.get("bf16"),
                "command": ["finesim", *fit],
            }
            record = {
                "benchmark": "condition_template",
                "template": args.template,
                "recipe_file": args.recipe,
                "overrides": args.overrides,
                "recipe": recipe.to_dict(),
                "seeds": args.seeds,
                "rule": f"the lever passes when its mean dev Spearman over seeds {', '.join(map(str, RULE_SEEDS))} "
                f"beats the control's by more than {PASS_MARGIN} (fixed before the first run); validation decides "
                "nothing",
                "rule_seeds": list(RULE_SEEDS),
                "pass_margin": PASS_MARGIN,
                "data": {
                    **{f"{arm}_{split}": str(path) for arm in ARMS for split, path in files[arm].items()},
                    **{f"{arm}_{split}_sha256": file_sha256(p) for arm in ARMS for split, p in files[arm].items()},
                },
                "runs": {arm: {str(s): r for s, r in sorted(done.get(arm, {}).items())} for arm in ARMS},
                "verdict": verdict(done),
                "environment": environment_record(),
            }
            write_json_atomic(results, portable(record))
    outcome = verdict(done)
    if outcome is not None:
        print(
            f"[template] dev gain {outcome['dev_gain']:+.2f} (passes: {outcome['passes']}), validation gain "
            f"{outcome['validation_gain']:+.2f} -> {results}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

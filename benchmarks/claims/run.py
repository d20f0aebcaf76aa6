"""Run the claims study (docs/claims.md): every run of ``plan.yaml`` for every seed, one results file each.

Each (run, seed) goes through the ``finesim`` command exactly as a user would run it:

- ``kind: train`` — ``finesim train RECIPE --set ... --set seed=N -o runs/claims/<study>/<run>/seed<N>`` then
  ``finesim evaluate --model OUT/model --tasks <report>`` (C-STS validation with the over-estimation count, or the
  seven STS tasks); a ``then`` list chains further stages (each stage's ``backbone`` may name ``{prev}``, the previous
  stage's model folder);
  a C-STS run also keeps its model's score of every validation pair (``predictions``: row numbers and scores, checked
  against ``finesim evaluate``'s figure; the report adds their pair-sampling variance to Welch's test);
- ``kind: evaluate`` — ``finesim evaluate --model M --tasks ...`` (zero-shot rows);
- ``kind: case`` — ``finesim case train --recipe RECIPE ... --seed N --eval <C-STS validation>``, with the trained
  model's ``predictions`` as for a C-STS training run (an ``ensemble`` too; where they cannot be made or disagree,
  ``predictions_error`` says why and the run is still recorded).

The results file ``benchmarks/results/claims/<study>/<run>__seed<N>.json`` is written atomically when the run is
complete and holds the command lines, the recipe as it ran, the training metrics that matter (validation, dev,
best checkpoint, steps, time), the report scores, the environment and the git commit. Times: ``seconds.train`` sums
every sitting of ``finesim train`` for the (run, seed) — an interrupted and resumed run included — as recorded in
``<run folder>/seed<N>.sittings.json`` and copied to ``seconds_sittings`` (a sitting whose process was killed is
closed at the log's last write, ``estimated``); ``seconds.train_cpu`` sums the sittings' CPU seconds (user and
system over every thread of ``finesim train`` and the children it waited for: about the wall time times the busy
threads, not a wall time), which do not grow while a run is paused with SIGSTOP as the wall time does; it is left
out when any counted sitting has none (recorded before 2026-11-28, or killed together with run.py);
``train_seconds_partial: true`` marks a file whose record cannot cover the whole training (a resume whose earlier
sittings were not recorded, or a model trained by an earlier invocation before sittings were recorded; the files
written before 2026-11-26 that resumed carry it); ``wall_seconds`` is the last invocation of run.py only. A finished
(run, seed) is skipped on the next invocation; an interrupted one resumes (``finesim train`` resumes the same run
from its last checkpoint). Run it under the CPU lock, in the background::

    flock /tmp/finesim-cpu.lock python benchmarks/claims/run.py --only csts       # one study
    python benchmarks/claims/run.py --list                                         # what is done, what is left
    flock /tmp/finesim-cpu.lock python benchmarks/claims/run.py --add-predictions   # for finished runs whose models
                                                                                   # remain (every study at once)

``FINESIM_CLAIMS_RESULTS`` and ``FINESIM_CLAIMS_WORK`` move the results and run folders, so a long study can run from
a frozen copy of the code (a git worktree) while the code changes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _cli import run_finesim  # noqa: E402

PLAN = Path(__file__).with_name("plan.yaml")
# where results and run folders go (a long study can run from a snapshot of the code and write here)
RESULTS = Path(os.environ.get("FINESIM_CLAIMS_RESULTS", ROOT / "benchmarks" / "results" / "claims"))
WORK = Path(os.environ.get("FINESIM_CLAIMS_WORK", ROOT / "runs" / "claims"))


def finesim(args: list[str], log: Path) -> float:
    """Run ``finesim ARGS`` (appending its output to ``log``); return the wall seconds; raise on failure."""
    code, seconds = run_finesim(args, log)
    if code != 0:
        raise RuntimeError(f"finesim {' '.join(args[:3])} ... exited with {code}; see {log}")
    return seconds


def data_folder() -> Path:
    """The data root the runs read: ``$FINESIM_DATA``, else ``../shared/data`` beside the checkout (as the commands
    resolve it)."""
    return Path(os.environ.get("FINESIM_DATA", str(ROOT.parent / "shared" / "data")))


def sittings_path(log: Path) -> Path:
    """Where the sittings of one (run, seed) are recorded: beside its log, ``<log stem>.sittings.json``."""
    return log.with_name(f"{log.stem}.sittings.json")


def load_sittings(log: Path) -> list[dict[str, Any]]:
    """The recorded sittings of ``finesim train`` for one (run, seed). A sitting left open (its process was killed,
    so it never recorded its end) is closed with the log's last write as its end, marked ``estimated``."""
    path = sittings_path(log)
    sittings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    for sitting in sittings:
        if sitting.get("seconds") is None:
            end = log.stat().st_mtime if log.is_file() else sitting["started"]
            sitting["seconds"] = round(max(0.0, end - sitting["started"]), 1)
            sitting["estimated"] = True
    return sittings


def _write_sittings(log: Path, sittings: list[dict[str, Any]]) -> None:
    path = sittings_path(log)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(sittings, indent=1) + "\n", encoding="utf-8")


def timed_train(argv: list[str], log: Path, stage: int, out: Path | None = None) -> float:
    """One sitting of ``finesim train``, recorded (stage, start, seconds) in the (run, seed)'s sittings file before
    it starts and again when it ends, so that a resumed run can sum all its sittings; returns its seconds. When the
    stage's folder ``out`` holds no checkpoint, training starts from step 0: the stage's earlier sittings (a run
    killed before its first checkpoint, or whose folder was deleted) are kept but marked ``restarted`` and not
    summed."""
    sittings = load_sittings(log)  # closes a sitting an earlier, killed invocation left open
    if out is not None and not any((out / "checkpoints").glob("checkpoint-*")):
        for earlier in sittings:
            if earlier.get("stage", 1) == stage:
                earlier["restarted"] = True
    sitting: dict[str, Any] = {"stage": stage, "started": round(time.time(), 1), "seconds": None}
    sittings.append(sitting)
    _write_sittings(log, sittings)
    start, cpu = time.perf_counter(), children_cpu_seconds()
    try:
        return finesim(argv, log)
    finally:
        sitting["seconds"] = round(time.perf_counter() - start, 1)
        # the training process's CPU time (user + system, all its threads): unlike the wall time, it does not grow
        # while the run is paused (SIGSTOP, to time a benchmark alone on the machine)
        sitting["cpu_seconds"] = round(children_cpu_seconds() - cpu, 1)
        _write_sittings(log, sittings)


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished, waited-for children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def train_seconds(log: Path, metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """``seconds_train`` (the sum of every recorded sitting of every stage), ``seconds_sittings`` and, when the record
    cannot cover the whole training, ``train_seconds_partial: True``: a stage that resumed (``resumed_from``) with
    fewer than two recorded sittings, or a stage with none (trained before sittings were recorded)."""
    sittings = load_sittings(log)
    counted = [s for s in sittings if not s.get("restarted")]  # a sitting whose training was started over is not
    partial = False
    for stage, m in enumerate(metrics, start=1):
        count = sum(s.get("stage", 1) == stage for s in counted)
        if count == 0 or (m.get("resumed_from") and count < 2):
            partial = True
    out: dict[str, Any] = {"seconds_train": round(sum(s["seconds"] for s in counted), 1), "seconds_sittings": sittings}
    if counted and all("cpu_seconds" in s for s in counted):  # sittings recorded before 2026-11-28 have none
        out["cpu_seconds_train"] = round(sum(s["cpu_seconds"] for s in counted), 1)
    if partial:
        out["train_seconds_partial"] = True
    return out


def result_path(study: str, run: str, seed: int) -> Path:
    return RESULTS / study / f"{run}__seed{seed}.json"


def _sets(items: list[str] | None, **extra: Any) -> list[str]:
    out: list[str] = []
    for item in items or []:
        out += ["--set", item]
    for key, value in extra.items():
        out += ["--set", f"{key}={value}"]
    return out


def _train_metrics(folder: Path) -> dict[str, Any]:
    m = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    keep = (
        "validation",
        "dev",
        "best_metric",
        "best_checkpoint",
        "kept",
        "global_steps",
        "epochs",
        "train_rows_seen",
        "train_rows_per_second",
        "wall_seconds",
        "resumed_from",
        "objective_options",
    )
    evals = [
        {k: v for k, v in e.items() if k in ("epoch", "step") or k.endswith("_spearman")}
        for e in m.get("log_history", [])
        if any(k.endswith("_spearman") for k in e)
    ]
    soup = {"soup": m["soup"]} if "soup" in m else {}  # train.keep soup: both scores, the members, the choice
    return {**{k: m.get(k) for k in keep}, **soup, "evaluations": evals, "data": m.get("data")}


def _report(folder: Path, model: str, tasks: str, log: Path, extra: list[str]) -> tuple[dict[str, Any], float]:
    out = folder / f"evaluate-{tasks}.json"
    seconds = 0.0
    if not out.is_file():
        seconds = finesim(
            ["evaluate", "--model", model, "--tasks", tasks, "--output", str(out), "--no-progress", *extra], log
        )
    record = json.loads(out.read_text(encoding="utf-8"))
    scores = {name: r["main_score"] for name, r in record["results"].items()}
    over = {
        name: {k: r["analyses"]["overestimation"].get(k) for k in ("overestimated", "eq16", "eq17", "pairs")}
        for name, r in record["results"].items()
        if "overestimation" in r.get("analyses", {})
    }
    return {"scores": scores, "averages": record.get("average_main_score_by_group"), "overestimation": over}, seconds


def run_train(study: str, spec: dict[str, Any], seed: int, log: Path) -> dict[str, Any]:
    """One seed of a training run (possibly several chained stages), then its report."""
    folder = WORK / study / spec["id"] / f"seed{seed}"
    stages = [spec, *spec.get("then", [])]
    commands, metrics, prev = [], [], None
    for i, stage in enumerate(stages):
        out = folder if len(stages) == 1 else folder / f"stage{i + 1}"
        sets = [s.replace("{prev}", str(prev)) for s in stage.get("set", [])]
        argv = ["train", stage["recipe"], "-o", str(out), *_sets(sets, seed=seed), "--no-progress"]
        if not (out / "metrics.json").is_file():
            timed_train(argv, log, i + 1, out)
        commands.append("finesim " + shlex.join(argv))
        metrics.append(_train_metrics(out))
        prev = out / "model"
    report, eval_seconds = _report(folder, str(prev), spec.get("report", "csts"), log, spec.get("evaluate_args", []))
    timing = train_seconds(log, metrics)
    extra: dict[str, Any] = {}
    if spec.get("evaluate_args"):  # how the report was scored, beside the training commands
        extra["evaluate_args"] = list(spec["evaluate_args"])
    if spec.get("report", "csts") == "csts" and not spec.get("evaluate_args"):  # the scores finesim evaluate made
        extra["predictions"] = validation_predictions(str(prev), report["scores"]["CSTS-validation"])
    # train: every sitting of finesim train summed (a resumed run included); train_cpu: their CPU seconds, which a
    # pause does not grow; wall_seconds (top level) is this invocation of run.py only
    seconds = {"train": timing.pop("seconds_train"), "evaluate": round(eval_seconds, 1)}
    if "cpu_seconds_train" in timing:
        seconds["train_cpu"] = timing.pop("cpu_seconds_train")
    return {
        "commands": commands,
        "train": metrics if len(metrics) > 1 else metrics[0],
        "report": report,
        **extra,
        "seconds": seconds,
        **timing,
    }


def validation_predictions(model: str, reported: float | None = None) -> dict[str, Any]:
    """The model's score of every labelled C-STS validation pair (file order; ``row``: the CSV's data-row numbers),
    kept in the results file so that the report can resample the pairs. With ``reported`` (what ``finesim evaluate``
    gave), their Spearman must agree with it to 0.001, or the scores are not the evaluated ones (``RuntimeError``)."""
    from finesim.data.csts import read_csts
    from finesim.evaluation.metrics import spearman
    from finesim.evaluation.scoring import ConditionalScorer
    from finesim.results import file_sha256

    path = data_folder() / "csts" / "validation.csv"
    rows, _ = read_csts(path)
    scores = ConditionalScorer(model, batch_size=64).score(rows["sentence1"], rows["sentence2"], rows["condition"])
    if reported is not None and abs((mine := spearman(scores, rows["label"])) - reported) > 1e-3:
        raise RuntimeError(f"{model}: the stored predictions give Spearman {mine:.4f}, finesim evaluate {reported:.4f}")
    return {
        "file": str(path),
        "sha256": file_sha256(path),
        "row": [int(r) for r in rows["row"]],
        "score": [round(float(x), 6) for x in scores],
    }


def stored_predictions(model: Path, reported: float) -> dict[str, Any]:
    """``{"predictions": ...}`` for a finished run, or ``{"predictions_error": why}`` when they cannot be made or
    disagree with ``reported``: the run's own result is still written (the report then uses Welch's test alone)."""
    try:
        return {"predictions": validation_predictions(str(model), reported)}
    except Exception as err:  # any failure here must not lose the finished run
        print(f"[claims] predictions of {model} not stored: {err}", flush=True)
        return {"predictions_error": f"{type(err).__name__}: {err}"}


def run_evaluate(study: str, spec: dict[str, Any], seed: int, log: Path) -> dict[str, Any]:
    folder = WORK / study / spec["id"]
    folder.mkdir(parents=True, exist_ok=True)
    report, seconds = _report(folder, spec["model"], spec.get("report", "csts"), log, spec.get("evaluate_args", []))
    return {
        "commands": [f"finesim evaluate --model {spec['model']} --tasks {spec.get('report', 'csts')}"],
        "report": report,
        "seconds": {"evaluate": round(seconds, 1)},
    }


def run_case(study: str, spec: dict[str, Any], seed: int, log: Path) -> dict[str, Any]:
    folder = WORK / study / spec["id"] / f"seed{seed}"
    validation = str(data_folder() / "csts" / "validation.csv")
    argv = [
        "case",
        "train",
        "--recipe",
        spec["recipe"],
        "--seed",
        str(seed),
        "--eval",
        validation,
        "--output-dir",
        str(folder),
        "--no-progress",
        *spec.get("args", []),
    ]
    seconds = 0.0
    if not (folder / "training.json").is_file():
        seconds = finesim(argv, log)
    t = json.loads((folder / "training.json").read_text(encoding="utf-8"))
    reported = next(iter(t["eval_spearman"].values()))
    return {
        "commands": ["finesim " + shlex.join(argv)],
        **stored_predictions(folder, reported),  # the folder is the CASE model
        "train": {
            "best_epoch": t["training"]["best_epoch"],
            "dev": {"spearman": t["training"]["best_dev_spearman"]},
            "projection": t["training"]["projection"],
            "options": t.get("options"),
        },
        "report": {"scores": {"CSTS-validation": reported}},
        "seconds": {"total": round(seconds, 1)},
    }


def run_case_embed(study: str, spec: dict[str, Any], seed: int, log: Path) -> dict[str, Any]:
    """The unsupervised CASE embeddings (no projection) scored on C-STS validation."""
    folder = WORK / study / spec["id"]
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "embed.json"
    validation = str(data_folder() / "csts" / "validation.csv")
    argv = ["case", "embed", "--recipe", spec["recipe"], validation, "--output", str(out), "--no-progress"]
    argv += spec.get("args", [])
    seconds = 0.0 if out.is_file() else finesim(argv, log)
    payload = json.loads(out.read_text(encoding="utf-8"))
    return {
        "commands": ["finesim " + shlex.join(argv)],
        "report": {"scores": {"CSTS-validation": payload["results"][0]["unsupervised_spearman"]}},
        "seconds": {"total": round(seconds, 1)},
    }


def run_case_isotropy(study: str, spec: dict[str, Any], seed: int, log: Path) -> dict[str, Any]:
    """I_iso of the unsupervised CASE embeddings with and without "− c" (both from one encoding, measured on the
    same random directions, so the two are paired) on both sentences of every C-STS validation row; the seed draws
    the directions of the approximation (the embeddings do not depend on it)."""
    folder = WORK / study / spec["id"] / f"seed{seed}"
    out = folder / "isotropy.json"
    validation = str(data_folder() / "csts" / "validation.csv")
    argv = ["case", "isotropy", "--recipe", spec["recipe"], validation, "--output-dir", str(folder), "--seed"]
    argv += [str(seed), "--no-progress", *spec.get("args", [])]
    seconds = 0.0 if out.is_file() else finesim(argv, log)
    payload = json.loads(out.read_text(encoding="utf-8"))
    return {
        "commands": ["finesim " + shlex.join(argv)],
        "report": {"isotropy": payload["results"]},  # "<formulation>" and "<formulation> - c": I_iso, cosines
        "seconds": {"total": round(seconds, 1)},
    }


def run_ensemble(study: str, spec: dict[str, Any], seed: int, log: Path) -> dict[str, Any]:
    """An ensemble of this seed's members (other runs of the study): its weights chosen on the members' dev split
    (carved from train with ``dev_fraction`` / ``dev_seed``, as in their recipes) over a grid, then reported on
    validation with ``finesim evaluate``."""
    import numpy as np

    from finesim.data.csts import read_csts
    from finesim.data.splits import split_by_pair
    from finesim.evaluation.ensemble import save_ensemble
    from finesim.evaluation.metrics import spearman
    from finesim.evaluation.scoring import ConditionalScorer

    members = [WORK / study / m / f"seed{seed}" / "model" for m in spec["members"]]
    missing = [str(m) for m in members if not m.is_dir()]
    if missing:
        raise RuntimeError(f"members not trained yet: {missing}")
    data = data_folder()
    rows, _ = read_csts(data / "csts" / "train.csv")
    _, dev = split_by_pair(rows, float(spec.get("dev_fraction", 0.1)), int(spec.get("dev_seed", 42)))
    scores = [
        ConditionalScorer(str(m), batch_size=64).score(dev["sentence1"], dev["sentence2"], dev["condition"])
        for m in members
    ]
    grid = np.linspace(0.0, 1.0, 11)
    if len(members) != 2:
        raise RuntimeError("the ensemble kind chooses the weight of two members")
    dev_scores = {round(float(w), 2): spearman(w * scores[0] + (1 - w) * scores[1], dev["label"]) for w in grid}
    best = max(dev_scores, key=dev_scores.get)
    folder = WORK / study / spec["id"] / f"seed{seed}"
    weights = [best, round(1 - best, 2)]
    save_ensemble(folder / "model", members, weights)
    report, seconds = _report(folder, str(folder / "model"), "csts", log, [])
    return {
        "commands": [f"ensemble of {[str(m) for m in members]} with weights {weights}"],
        **stored_predictions(folder / "model", report["scores"]["CSTS-validation"]),
        "train": {"dev": {"spearman": dev_scores[best]}, "dev_by_weight": dev_scores, "weights": weights},
        "report": report,
        "seconds": {"evaluate": round(seconds, 1)},
    }


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """What the progress line shows of a run's report: its scores, or an isotropy run's I_iso."""
    if "scores" in report:
        return report["scores"]
    return {name: variant["i_iso"] for name, variant in report["isotropy"].items()}


KINDS = {
    "train": run_train,
    "evaluate": run_evaluate,
    "case": run_case,
    "case-embed": run_case_embed,
    "case-isotropy": run_case_isotropy,
    "ensemble": run_ensemble,
}


def select(
    plan: dict[str, Any], only: list[str] | None, seeds: list[int] | None
) -> tuple[list[tuple[str, dict[str, Any], int]], list[str]]:
    """The (study, run spec, seed) triples that ``--only`` and ``--seeds`` pick from ``plan``, and notes on the
    requested seeds that some picked runs do not plan (those are skipped, and said so). Raises ``ValueError`` naming
    what is wrong when an ``--only`` entry names no study or run, or when nothing at all is picked: a selection that
    runs nothing must not look like one that finished."""
    studies = plan["studies"]
    names = {f"{study}/{spec['id']}" for study, runs in studies.items() for spec in runs}
    unknown = [o for o in only or [] if o not in studies and o not in names]
    if unknown:
        raise ValueError(f"--only names no study or run of the plan: {', '.join(unknown)} (see --list)")
    picked, notes = [], []
    for study, runs in studies.items():
        for spec in runs:
            name = f"{study}/{spec['id']}"
            if only and not any(name == o or study == o for o in only):
                continue
            planned = spec.get("seeds", [42])
            missing = [seed for seed in seeds or [] if seed not in planned]
            if missing:
                notes.append(
                    f"{name}: seed {', '.join(map(str, missing))} not in the plan (planned: "
                    f"{', '.join(map(str, planned))}); add it to plan.yaml to run it"
                )
            picked += [(study, spec, seed) for seed in planned if not seeds or seed in seeds]
    if not picked:
        raise ValueError("nothing to run: " + ("; ".join(notes) if notes else "the selection is empty"))
    return picked, notes


def trained_model(study: str, spec: dict[str, Any], seed: int) -> Path | None:
    """The model folder a finished (run, seed) of a kind that trains left in the run folder; None for the other
    kinds."""
    folder = WORK / study / spec["id"] / f"seed{seed}"
    kind = spec.get("kind", "train")
    if kind == "train":
        stages = 1 + len(spec.get("then", []))
        return (folder if stages == 1 else folder / f"stage{stages}") / "model"
    if kind == "case":
        return folder
    if kind == "ensemble":
        return folder / "model"
    return None


def add_predictions(study: str, spec: dict[str, Any], seed: int, roots: Sequence[tuple[str, str]]) -> str:
    """Add ``predictions`` to a finished C-STS run's results file that has none, from the model still in its run
    folder under ``WORK`` (``FINESIM_CLAIMS_WORK``: the one the run used; the run's spec as stored in the file
    says where), checked against the file's reported Spearman like a new run's; the file is rewritten atomically
    with ``predictions_added`` (when, and the code's commit). Returns what was done, for the progress line."""
    from finesim.results import portable, write_json_atomic

    path = result_path(study, spec["id"], seed)
    result = json.loads(path.read_text(encoding="utf-8"))
    spec = result.get("spec") or spec
    reported = (result.get("report") or {}).get("scores", {}).get("CSTS-validation")
    if "predictions" in result:
        return "has predictions"
    if reported is None or spec.get("evaluate_args") or (model := trained_model(study, spec, seed)) is None:
        return "not a C-STS run with a model of its own: nothing to add"
    if not model.is_dir():
        return f"its model is not on disk ({model}): skipped"
    result["predictions"] = validation_predictions(str(model), reported)
    result["predictions_added"] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": git_commit(),
    }
    write_json_atomic(path, portable(result, roots))
    return "predictions added"


def git_commit() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", default=str(PLAN), help="the study plan (YAML)")
    parser.add_argument("--only", nargs="*", default=None, help="studies or study/run ids to run")
    parser.add_argument("--seeds", nargs="*", type=int, default=None, help="only these seeds")
    parser.add_argument("--list", action="store_true", help="show what is done and what is left, run nothing")
    parser.add_argument(
        "--add-predictions",
        action="store_true",
        help="run nothing; add the per-pair validation scores to the selected finished C-STS runs that have none, "
        "from the models still in their run folders",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from finesim.results import environment_record, path_roots, portable, write_json_atomic

    plan = yaml.safe_load(Path(args.plan).read_text(encoding="utf-8"))
    try:
        selected, notes = select(plan, args.only, args.seeds)
    except ValueError as err:
        print(f"[claims] error: {err}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"[claims] {note}", flush=True)
    # results files name paths relative to the repository, the data root and the run folder (moved or not)
    roots = path_roots(data_folder(), {str(WORK): "runs/claims"})
    todo = [(study, spec, seed, result_path(study, spec["id"], seed).is_file()) for study, spec, seed in selected]
    if args.list:
        for study, spec, seed, done in todo:
            print(f"{'done' if done else 'todo'}  {study}/{spec['id']} seed {seed}")
        return 0
    if args.add_predictions:
        for study, spec, seed, done in todo:
            if done:
                try:
                    outcome = add_predictions(study, spec, seed, roots)
                except Exception as err:  # one run's failure is reported, the others still go
                    outcome = f"FAILED: {type(err).__name__}: {err}"
                print(f"[claims] {study}/{spec['id']} seed {seed}: {outcome}", flush=True)
        return 0
    for study, spec, seed, done in todo:
        if done:
            continue
        log = WORK / study / spec["id"] / f"seed{seed}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        print(f"[claims] {study}/{spec['id']} seed {seed} ...", flush=True)
        started, commit = time.perf_counter(), git_commit()  # the code the run started on
        try:
            body = KINDS[spec.get("kind", "train")](study, spec, seed, log)
        except RuntimeError as err:
            print(f"[claims] FAILED {study}/{spec['id']} seed {seed}: {err}", flush=True)
            continue
        payload = {
            "benchmark": "claims",
            "study": study,
            "run": spec["id"],
            "seed": seed,
            "spec": spec,
            **body,
            "wall_seconds": round(time.perf_counter() - started, 1),
            "git_commit": commit,
            **({"git_commit_at_end": end} if (end := git_commit()) != commit else {}),
            "environment": environment_record(),
        }
        write_json_atomic(result_path(study, spec["id"], seed), portable(payload, roots))
        print(f"[claims] done {study}/{spec['id']} seed {seed}: {headline(body['report'])}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

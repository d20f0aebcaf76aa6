"""Distil a conditional bi-encoder teacher into an index-once tri-encoder student (issue 41, part 2; docs/search.md,
"A distilled first stage"), end to end and resumably, through the ``finesim`` command as a user would run it:

1. ``finesim distill-data``: triples from C-STS train and the dev split (human labels) -> ``triples.parquet``,
   ``dev.csv``, ``triples.json`` (the report);
2. ``finesim score --model TEACHER --score-column teacher`` -> ``scored.parquet``;
3. ``finesim train STUDENT_RECIPE --data WORK -o WORK/<recipe name> --set seed=SEED`` (the checkpoint chosen on the
   dev split's human labels);
4. ``finesim evaluate`` of the kept student and of the teacher on the dev split and on C-STS validation (once each:
   validation is reported, never chosen on), with a task file written into the work folder.

Work folder: ``runs/distill/<teacher>/seed<SEED>`` (``--work``; ``-smoke`` appended with ``--max-triples`` or
``--max-steps``). A step is skipped when its outputs exist and its fingerprint (its command's settings and the hashes
of its inputs: the training CSV, the triples, the teacher's files, the recipe, the scored triples, the student model)
matches the one recorded in ``WORK/steps.json`` when it last finished; otherwise it runs again (the student with
``--no-resume`` when its recorded fingerprint differs; an interrupted student run resumes from its checkpoint).

The results file ``benchmarks/results/distill/<teacher>__<recipe name>__seed<SEED>[__smoke].json`` (``--results``)
is written atomically at the end: teacher, student recipe (as run, overrides included), seed, the data hashes and the
triple builder's report, each command line, each step's seconds (a step skipped by this invocation: the seconds it
took when it ran; ``steps_skipped`` names them), the student's dev Spearman at selection, the dev and validation
Spearman of student and teacher, the gap (teacher - student on validation), the environment (versions, hardware) and
the git commit, ``--note`` (null unless given), every path relative to the repository or the data root.

Run it under the CPU lock on this machine (a GPU: ``--device cuda``), e.g.::

    flock /tmp/finesim-cpu.lock python benchmarks/distill/run.py --teacher runs/levers-minilm-lr5e-5-seed42 \\
        --student recipes/distill/minilm-tri-hadamard-distill.yaml --seed 42          # then --seed 1, --seed 2
    python benchmarks/distill/run.py --teacher runs/mpnet-bi-mse/model \\
        --student recipes/distill/mpnet-tri-hadamard-distill.yaml --seed 42
    python benchmarks/distill/run.py --teacher T --student R --max-triples 2000 --max-steps 50   # a smoke run

The teacher must not have trained on the dev split: train it with ``data.dev_fraction`` / ``data.dev_seed`` equal to
``--dev-fraction`` / ``--dev-seed`` (0.1 and 42, as recipes/csts/mpnet-bi-mse.yaml and the levers runs do). This is
checked before any work (:func:`finesim.models.teacher.check_teacher_dev_split`, and again by ``finesim distill-data
--teacher``): the teacher's recorded recipe (the card in its ``finesim_model.json``, or the ``config.json`` of the
finesim run beside its folder) must hold those values; a teacher that records other values is refused, and so is one
that records none (a Hub model) unless ``--allow-unchecked-teacher`` says you know it never saw the dev rows. The
results file records what was checked (``teacher.dev_split``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from finesim.results import environment_record, file_sha256, path_sha256, portable, write_json_atomic

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _cli import add_set_option, run_finesim  # noqa: E402

STEPS_FILE = "steps.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", required=True, help="the bi-encoder teacher: a model folder or a Hub id / alias")
    p.add_argument(
        "--student",
        default="recipes/distill/minilm-tri-hadamard-distill.yaml",
        help="the student's recipe (default: %(default)s)",
    )
    p.add_argument("--seed", type=int, default=42, help="seed of the triples and of the student (default: 42)")
    p.add_argument("--train", default="csts/train.csv", help="C-STS train, under --data (default: %(default)s)")
    p.add_argument("--size", type=int, default=200_000, help="triples (default: %(default)s)")
    p.add_argument("--new-pair-fraction", type=float, default=0.2, help="share of new pairs (default: %(default)s)")
    p.add_argument("--dev-fraction", type=float, default=0.1, help="dev split: share of pairs (default: 0.1)")
    p.add_argument("--dev-seed", type=int, default=42, help="dev split's seed: the teacher's data.dev_seed")
    p.add_argument(
        "--allow-unchecked-teacher",
        action="store_true",
        help="run with a teacher that records no training recipe (a Hub model) that you know never saw the dev rows",
    )
    p.add_argument("--max-triples", type=int, default=None, help="smoke run: this many triples instead of --size")
    p.add_argument("--max-steps", type=int, default=None, help="smoke run: stop the student after this many steps")
    add_set_option(p, "a student recipe override (repeatable), e.g. train.epochs=2")
    p.add_argument("--data", default=None, help="data root (default: $FINESIM_DATA or ../shared/data)")
    p.add_argument("--device", default=None, help="torch device for scoring, training and evaluation, e.g. cuda")
    p.add_argument("--work", default=None, help="work folder (default: runs/distill/<teacher>/seed<SEED>[-smoke])")
    p.add_argument("--results", default=None, help="results file (default: benchmarks/results/distill/...json)")
    p.add_argument(
        "--note",
        default=None,
        help="a provenance note kept in the results file as 'note', e.g. how the models reached another machine",
    )
    return p.parse_args(argv)


def slug(text: str) -> str:
    """A file-name part for a model: the folder's name (its parent's when the folder is ``model``) or the Hub id."""
    path = Path(text)
    name = path.parent.name if path.name == "model" else path.name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name or text).strip("-")


def digest(record: Any) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def model_hash(model: str) -> str:
    """A folder's files hashed (:func:`finesim.results.path_sha256`); a Hub id or alias as given."""
    return path_sha256(model) if Path(model).exists() else f"id:{model}"


class Steps:
    """The steps of one work folder: their recorded fingerprints (``steps.json``), skip or run, commands and times."""

    def __init__(self, work: Path, device: str | None) -> None:
        self.work = work
        self.device = device
        self.path = work / STEPS_FILE
        self.recorded: dict[str, Any] = json.loads(self.path.read_text("utf-8")) if self.path.is_file() else {}
        self.commands: dict[str, list[str]] = {}
        self.seconds: dict[str, float | None] = {}
        self.skipped: list[str] = []
        self.log = work / "run.log"

    def done(self, name: str, fingerprint: dict[str, Any], outputs: list[Path]) -> bool:
        entry = self.recorded.get(name)
        return bool(entry and entry["fingerprint"] == digest(fingerprint) and all(p.exists() for p in outputs))

    def changed(self, name: str, fingerprint: dict[str, Any]) -> bool:
        """The step finished before with another fingerprint."""
        entry = self.recorded.get(name)
        return bool(entry and entry["fingerprint"] != digest(fingerprint))

    def run(self, name: str, args: list[str], fingerprint: dict[str, Any], outputs: list[Path]) -> None:
        """Run ``finesim ARGS`` unless the step is done; record its fingerprint when it succeeds."""
        self.commands[name] = ["finesim", *args]
        if self.done(name, fingerprint, outputs):
            print(f"[distill] {name}: done before with the same inputs, skipped", file=sys.stderr)
            self.seconds[name] = self.recorded[name].get("seconds")  # what it took when it ran
            self.skipped.append(name)
            return
        print(f"[distill] {name}: finesim {' '.join(args)}", file=sys.stderr, flush=True)
        code, seconds = run_finesim(args, self.log)
        if code != 0:
            raise SystemExit(f"[distill] {name}: finesim exited with {code}; see {self.log}")
        self.seconds[name] = round(seconds, 1)
        self.recorded[name] = {"fingerprint": digest(fingerprint), "seconds": self.seconds[name]}
        write_json_atomic(self.path, self.recorded)

    def device_args(self) -> list[str]:
        return ["--device", self.device] if self.device else []


def task_file(work: Path, dev: Path) -> Path:
    """A task registry with the dev split (human labels) and C-STS validation, scored as ``finesim evaluate`` scores
    C-STS (the packaged CSTS-validation task, copied)."""
    from finesim.evaluation.tasks import load_registry

    packaged = load_registry().tasks["CSTS-validation"]
    tasks = {
        "distill-dev": {"format": "csts", "path": str(dev.resolve()), "split": "dev", "score_range": [1, 5]},
        "CSTS-validation": {
            "format": packaged.format,
            "path": packaged.path,
            "split": packaged.split,
            "score_range": list(packaged.score_range),
            "condition_mode": packaged.condition_mode,
        },
    }
    path = work / "tasks.yaml"
    text = yaml.safe_dump({"tasks": tasks, "groups": {"distill": list(tasks)}}, sort_keys=False)
    if not path.is_file() or path.read_text("utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def spearmans(record_path: Path) -> dict[str, float]:
    results = json.loads(record_path.read_text("utf-8"))["results"]
    return {task: results[task]["spearman"] for task in ("distill-dev", "CSTS-validation")}


def git_commit() -> str | None:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.chdir(ROOT)
    from finesim.paths import data_root
    from finesim.training import load_recipe

    root = data_root(args.data)
    smoke = args.max_triples is not None or args.max_steps is not None
    size = args.max_triples or args.size
    teacher = args.teacher
    recipe_path = Path(args.student)
    overrides = [f"seed={args.seed}", *args.overrides]
    if args.max_steps:
        overrides += [f"train.max_steps={args.max_steps}", "train.eval_strategy=steps"]
        overrides += [f"train.eval_steps={max(1, args.max_steps // 2)}"]
    recipe = load_recipe(recipe_path, overrides)  # checked now, before any work
    from finesim.models.teacher import check_teacher_dev_split

    checked = check_teacher_dev_split(  # the teacher never saw the dev rows: refused now, before any work
        teacher,
        dev_fraction=args.dev_fraction,
        dev_seed=args.dev_seed,
        allow_unchecked=args.allow_unchecked_teacher,
        train=root / args.train,
    )
    work = Path(args.work or Path("runs/distill") / slug(teacher) / f"seed{args.seed}{'-smoke' if smoke else ''}")
    work.mkdir(parents=True, exist_ok=True)
    steps = Steps(work, args.device)
    train_csv = root / args.train
    triples, dev, report = work / "triples.parquet", work / "dev.csv", work / "triples.json"
    scored = work / "scored.parquet"
    student_dir = work / recipe.name
    started = time.perf_counter()

    # 1. triples and the dev split
    build = [
        "distill-data", "--train", str(train_csv), "--output", str(triples), "--size", str(size),
        "--seed", str(args.seed), "--new-pair-fraction", str(args.new_pair_fraction),
        "--dev-fraction", str(args.dev_fraction), "--dev-seed", str(args.dev_seed), "--dev-output", str(dev),
        "--report", str(report), "--no-progress",
    ]  # fmt: skip
    # the teacher check: the same in distill-data, and not part of the step's fingerprint (it writes nothing)
    check = ["--allow-unchecked-teacher"] if checked is None else ["--teacher", teacher]
    steps.run("triples", build + check, {"args": build[2:], "train": file_sha256(train_csv)}, [triples, dev, report])

    # 2. the teacher's scores
    teacher_sha = model_hash(teacher)
    score = [
        "score", "--model", teacher, "--input", str(triples), "--output", str(scored), "--score-column", "teacher",
        "--no-progress", *steps.device_args(),
    ]  # fmt: skip
    steps.run("teacher-scores", score, {"teacher": teacher_sha, "triples": file_sha256(triples)}, [scored])

    # 3. the student, chosen on the dev split
    sets = [x for o in overrides for x in ("--set", o)]
    fit = ["train", str(recipe_path), "--data", str(work), "-o", str(student_dir), "--no-progress", *sets]
    fit += steps.device_args()
    fit_print = {
        "recipe": file_sha256(recipe_path),
        "overrides": overrides,
        "scored": file_sha256(scored),
        "dev": file_sha256(dev),
    }
    if steps.changed("student", fit_print):
        fit.append("--no-resume")  # another run's checkpoints: start over rather than be refused
    steps.run("student", fit, fit_print, [student_dir / "metrics.json", student_dir / "model"])

    # 4. the kept student and the teacher on the dev split and on C-STS validation, once each
    tasks = task_file(work, dev)
    evaluations = {}
    for who, model in (("student", str(student_dir / "model")), ("teacher", teacher)):
        out = work / f"evaluate-{who}.json"
        evaluate = ["evaluate", "--model", model, "--tasks", "distill", "--task-file", str(tasks), "--output", str(out)]
        evaluate += ["--data", str(root), "--no-progress", *steps.device_args()]
        model_sha = model_hash(model) if who == "student" else teacher_sha
        steps.run(f"evaluate-{who}", evaluate, {"model": model_sha, "tasks": file_sha256(tasks)}, [out])
        evaluations[who] = spearmans(out)

    metrics = json.loads((student_dir / "metrics.json").read_text("utf-8"))
    student, teacher_scores = evaluations["student"], evaluations["teacher"]
    name = f"{slug(teacher)}__{recipe.name}__seed{args.seed}{'__smoke' if smoke else ''}.json"
    results = Path(args.results or Path("benchmarks/results/distill") / name)
    record = {
        "benchmark": "distill",
        "smoke": smoke,
        "teacher": {
            "model": teacher,
            "sha256": teacher_sha,
            "dev_split": "unchecked (--allow-unchecked-teacher)"
            if checked is None
            else {"fraction": checked.fraction, "seed": checked.seed, "recorded_in": portable(checked.source)},
        },
        "student": {"recipe_file": str(recipe_path), "overrides": overrides, "recipe": recipe.to_dict()},
        "seed": args.seed,
        "data": {
            "train": str(train_csv),
            "train_sha256": file_sha256(train_csv),
            "triples_sha256": file_sha256(triples),
            "scored_sha256": file_sha256(scored),
            "dev_sha256": file_sha256(dev),
            "triples_report": json.loads(report.read_text("utf-8")),
        },
        "commands": steps.commands,
        "seconds": steps.seconds,
        "steps_skipped": steps.skipped,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "student_training": {
            "dev_spearman_at_selection": metrics.get("validation", {}).get("spearman"),
            "best_checkpoint": metrics.get("best_checkpoint"),
            "global_steps": metrics.get("global_steps"),
            "epochs": metrics.get("epochs"),
            "train_rows_seen": metrics.get("train_rows_seen"),
        },
        "dev_spearman": {"student": student["distill-dev"], "teacher": teacher_scores["distill-dev"]},
        "validation_spearman": {"student": student["CSTS-validation"], "teacher": teacher_scores["CSTS-validation"]},
        "gap_validation": teacher_scores["CSTS-validation"] - student["CSTS-validation"],
        "git_commit": git_commit(),
        "environment": environment_record(),
        "note": args.note,
    }
    write_json_atomic(results, portable(record))
    print(
        f"[distill] validation Spearman: student {student['CSTS-validation']:.2f}, teacher "
        f"{teacher_scores['CSTS-validation']:.2f} (gap {record['gap_validation']:.2f}); dev: student "
        f"{student['distill-dev']:.2f}, teacher {teacher_scores['distill-dev']:.2f} -> {results}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

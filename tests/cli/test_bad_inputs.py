"""A corpus of malformed inputs run through the ``finesim`` command: each must end with a clean error (exit code 1,
or 2 for a usage error), one line, no traceback, naming the file (and row / column / key where it applies)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from finesim.cli.main import main

GOOD_CSTS = (
    "sentence1,sentence2,condition,label\n"
    "a man plays guitar,a woman plays piano,the instrument,2\n"
    "a man plays guitar,a woman plays piano,the activity,4\n"
    "a dog runs in the park,a cat sits in the house,the animal,3\n"
    "a dog runs in the park,a cat sits in the house,the location,1\n"
)


@dataclass(frozen=True)
class Case:
    """One malformed input: ``argv(folder)`` builds the command line (writing files into ``folder``)."""

    name: str
    argv: Callable[[Path], list[str]]
    code: int
    expect: tuple[str, ...]  # substrings of stderr; "{dir}" stands for the case's folder


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _recipe(folder: Path, body: str, name: str = "r.yaml") -> str:
    return str(_write(folder / name, body))


def _data(folder: Path, train: str | bytes = GOOD_CSTS) -> Path:
    _write(folder / "data" / "csts" / "train.csv", train)
    _write(folder / "data" / "csts" / "validation.csv", GOOD_CSTS)
    return folder / "data"


def _dry(
    folder: Path, body: str, *extra: str, train: str | bytes = GOOD_CSTS, backbone: str | None = None
) -> list[str]:
    """``finesim train RECIPE --dry-run`` with a tiny model folder as the backbone and a small data root."""
    root = _data(folder, train)
    model = backbone or str(_tiny_model_dir())
    text = body.replace("{backbone}", model)
    return ["train", _recipe(folder, text), "--dry-run", "--data", str(root), "-o", str(folder / "out"), *extra]


_TINY: list[Path] = []


def _run_folder(folder: Path) -> Path:
    """A training folder as finesim train leaves it: the effective recipe as config.json beside model/."""
    run = folder / "run"
    _write(run / "config.json", '{"name": "r", "model": {"backbone": "x"}}')
    _write(run / "metrics.json", "{}")
    _write(run / "run.json", "{}")
    _write(run / "model" / "finesim_model.json", '{"model_type": "bi"}')
    _write(run / "model" / "modules.json", "[]")
    return run


def _pairs(folder: Path) -> Path:
    return _write(folder / "pairs.csv", "sentence1,sentence2\na,b\n")


def _tiny_model_dir() -> Path:
    return _TINY[0]


BASE = "model: {backbone: {backbone}}\n"


def _task_file(folder: Path, text: str) -> list[str]:
    _data(folder)
    path = _write(folder / "tasks.yaml", text)
    return [
        "evaluate",
        "--model",
        str(_tiny_model_dir()),
        "--task-file",
        str(path),
        "--tasks",
        "toy",
        "--data",
        str(folder / "data"),
    ]


GOOD_TASK = "tasks:\n  toy: {format: csts, path: csts/validation.csv, score_range: [1, 5]}\n"


def _case_recipe(folder: Path, text: str) -> list[str]:
    """``finesim case train --recipe case.yaml`` whose ``case:`` section holds ``text`` (empty: an empty file)."""
    data = _data(folder)
    body = "method: case\ncase:\n" + "".join(f"  {line}\n" for line in text.splitlines()) if text else ""
    path = _write(folder / "case.yaml", body)
    return [
        "case",
        "train",
        "--recipe",
        str(path),
        "--model",
        str(_tiny_model_dir()),
        "--train",
        str(data / "csts" / "train.csv"),
        "--output-dir",
        str(folder / "caseout"),
        "--cache-dir",
        str(folder / "cache"),
        "--no-progress",
    ]


def _score(folder: Path, name: str, text: str) -> list[str]:
    path = _write(folder / name, text)
    return ["score", "--model", str(_tiny_model_dir()), "--input", str(path), "--output", str(folder / "out.csv")]


def _truncated_model(folder: Path) -> str:
    """A copy of the tiny model whose ``model.safetensors`` was cut in half (an interrupted download or copy)."""
    import shutil

    model = folder / "cut-model"
    shutil.copytree(_tiny_model_dir(), model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return str(model)


def _prompt_eval_hf(folder: Path, model: str) -> list[str]:
    data = _data(folder) / "csts"
    files = ["--eval-file", str(data / "validation.csv"), "--train-file", str(data / "train.csv")]
    return ["prompt-eval", "--backend", "hf", "--model", model, *files, "--no-cache"]


def _table_recipe(folder: Path, name: str, text: str, columns: str = "{}") -> list[str]:
    data = _write(folder / name, text)
    body = f"model: {{backbone: {_tiny_model_dir()}}}\n"
    body += f"data: {{format: table, train: {data}, validation: null, columns: {columns}}}\n"
    return ["train", _recipe(folder, body), "--dry-run", "-o", str(folder / "out")]


CONSTANT_CSTS = GOOD_CSTS.replace(",2\n", ",3\n").replace(",4\n", ",3\n").replace(",1\n", ",3\n")
ONE_CONDITION_EACH = "sentence1,sentence2,condition,label\na b,c d,the x,2\ne f,g h,the y,4\n"
TABLE_WITH_CONDITIONS = "sentence1,sentence2,condition,label\na,b,c,1\nd,e,f,3\ng,h,i,5\nj,k,l,2\n"
TABLE_PLAIN = "sentence1,sentence2,label\na,b,1\nd,e,3\ng,h,5\nj,k,2\n"


def _table_pair(folder: Path, train: str, validation: str | None, *extra: str) -> list[str]:
    """``finesim train --dry-run`` on a table file (and a validation table, or none)."""
    files = {"train": str(_write(folder / "t.csv", train))}
    files["validation"] = str(_write(folder / "v.csv", validation)) if validation is not None else "null"
    body = f"model: {{backbone: {_tiny_model_dir()}}}\nlabels: {{low: 1, high: 5}}\n"
    body += f"data: {{format: table, train: {files['train']}, validation: {files['validation']}}}\n"
    return ["train", _recipe(folder, body), "--dry-run", "-o", str(folder / "out"), *extra]


CASES: list[Case] = [
    # ---------------------------------------------------------------- training recipes
    Case(
        "train-cosine-on-raw-labels",
        lambda d: _dry(d, BASE + "labels: {scale: none, low: 1, high: 5}\n"),
        1,
        ("objective 'mse' regresses a cosine, within [-1, 1], on the labels, but", "labels from 1 to 4"),
    ),
    Case(
        "train-regression-head-on-minmax-labels",
        lambda d: _dry(d, BASE + "objective: {name: smooth-k2}\n"),
        1,
        (
            "labels.scale minmax maps the labels onto [0, 1], but objective 'smooth-k2' reads them on "
            "objective.options.label_range [0, 5]",
        ),
    ),
    Case(
        "train-softmax-on-scaled-labels",
        lambda d: _dry(d, BASE + "objective: {name: softmax}\n"),
        1,
        ("objective 'softmax' trains on class ids (0, 1, 2, ...), which labels.scale 'minmax' turns into fractions",),
    ),
    Case(
        "train-validation-labels-all-one-value",
        lambda d: _dry(d, BASE, "--set", f"data.validation={_write(d / 'v.csv', CONSTANT_CSTS)}"),
        1,
        ("every label of {dir}/v.csv (data.validation) is 0.5: a correlation with constant labels is 0.0",),
    ),
    Case(
        "train-dev-split-of-one-row",
        lambda d: _table_pair(d, TABLE_PLAIN, None, "--set", "data.dev_fraction=0.01"),
        1,
        ("the dev split carved from {dir}/t.csv (data.dev_fraction 0.01) has 1 labelled row; choosing",),
    ),
    Case(
        "train-conditional-validated-on-plain-pairs",
        lambda d: _table_pair(d, TABLE_WITH_CONDITIONS, TABLE_PLAIN),
        1,
        ("the training data gives a condition per pair, but {dir}/v.csv (data.validation) has none",),
    ),
    Case(
        "train-quad-without-any-condition-pair",
        lambda d: _dry(d, BASE + "objective: {name: quad}\n", train=ONE_CONDITION_EACH),
        1,
        ("objective 'quad' trains on sentence pairs labelled under two conditions, and none of the 2 rows forms one",),
    ),
    Case("recipe-empty", lambda d: _dry(d, ""), 1, ("r.yaml: the recipe file is empty",)),
    Case("recipe-duplicate-key", lambda d: _dry(d, BASE + "seed: 1\nseed: 2\n"), 1, ("r.yaml", "'seed' appears twice")),
    Case(
        "recipe-json-duplicate-key",
        lambda d: ["train", _recipe(d, '{"seed": 1, "seed": 2}', "r.json"), "--dry-run"],
        1,
        ("r.json", "'seed' appears twice"),
    ),
    Case("recipe-json-blank", lambda d: ["train", _recipe(d, " \n", "r.json"), "--dry-run"], 1, ("r.json", "empty")),
    Case("recipe-yaml-syntax", lambda d: _dry(d, "model: [unclosed\n"), 1, ("r.yaml: not valid YAML", "line")),
    Case("recipe-not-a-mapping", lambda d: _dry(d, "- a\n- b\n"), 1, ("r.yaml: a recipe must be a mapping",)),
    Case("recipe-unknown-key", lambda d: _dry(d, BASE + "trian: {}\n"), 1, ("r.yaml: unknown key 'trian'", "'train'")),
    Case(
        "recipe-pooling-typo",
        lambda d: _dry(d, "model: {backbone: {backbone}, pooling: clss}\n"),
        1,
        ("r.yaml: model.pooling 'clss'", "did you mean 'cls'"),
    ),
    Case(
        "recipe-scheduler",
        lambda d: _dry(d, BASE + "train: {lr_scheduler: foo}\n"),
        1,
        ("r.yaml: train.lr_scheduler 'foo' is not one of",),
    ),
    Case(
        "recipe-negative-lr",
        lambda d: _dry(d, BASE + "train: {learning_rate: -1}\n"),
        1,
        ("r.yaml: train.learning_rate must be > 0",),
    ),
    Case(  # "false" in quotes is text, which was truthy: the option was silently on
        "recipe-option-quoted-bool",
        lambda d: _dry(d, BASE + "objective: {name: quad, options: {skip_equal: 'false'}}\n"),
        1,
        ("r.yaml: objective.options: objective 'quad': option 'skip_equal' must be true or false, got text 'false'",),
    ),
    Case(  # checked by the loss only once the model was built, in a message naming neither file nor key
        "recipe-ccl-temperature-zero",
        lambda d: _dry(d, BASE + "objective: {name: ccl, options: {temperature: 0}}\n"),
        1,
        ("r.yaml: objective.options: temperature must be > 0, got 0",),
    ),
    Case(
        "recipe-ccl-bcl-reduction-none",
        lambda d: _dry(d, BASE + "objective: {name: ccl, options: {bcl_reduction: none}}\n"),
        1,
        ("r.yaml: objective.options: bcl_reduction must be one of ('mean', 'sum', 'log_of_sum'), got 'none'",),
    ),
    Case(  # read by the condition pairing alone: ignored by mse without a word
        "recipe-equal-labels-with-rows",
        lambda d: _dry(d, BASE + "data: {equal_labels: drop}\n"),
        1,
        (
            "r.yaml: data.equal_labels 'drop' applies to the objectives that train on condition pairs (ccl, quad, "
            "quad-mse); objective 'mse' trains on rows and would ignore it",
        ),
    ),
    Case(
        "recipe-missing-backbone",
        lambda d: _dry(d, "model: {backbone: /nonexistent/model}\n", backbone="/nonexistent/model"),
        1,
        ("r.yaml: model.backbone:", "/nonexistent/model", "does not exist"),
    ),
    Case(
        "recipe-unknown-hub-backbone-offline",
        lambda d: _dry(d, "model: {backbone: someone/not-a-model-xyz}\n"),
        1,
        ("r.yaml: model.backbone:", "Hub is unreachable"),
    ),
    Case(
        "recipe-data-root-missing",
        lambda d: [*_dry(d, BASE)[:-4], "--data", "/nonexistent/data", "-o", str(d / "out")],
        1,
        ("/nonexistent/data", "does not exist"),
    ),
    Case(
        "recipe-train-file-missing",
        lambda d: _dry(d, BASE + "data: {train: nope.csv}\n"),
        1,
        ("nope.csv", "data.train not found", "r.yaml"),
    ),
    Case(
        "recipe-objective-typo",
        lambda d: _dry(d, BASE + "objective: {name: msee}\n"),
        1,
        ("r.yaml: objective.name: unknown objective 'msee'", "did you mean 'mse'"),
    ),
    Case(
        "recipe-encoder-typo",
        lambda d: _dry(d, "model: {backbone: {backbone}, encoder: bii}\n"),
        1,
        ("r.yaml: model.encoder: unknown encoder type 'bii'", "did you mean 'bi'"),
    ),
    Case(
        "recipe-objective-option-typo",
        lambda d: _dry(d, BASE + "objective: {name: quad, options: {marginn: 1}}\n"),
        1,
        ("r.yaml: objective.options:", "['marginn']", "did you mean 'margin'"),
    ),
    Case(
        "recipe-wrong-type",
        lambda d: _dry(d, BASE + "train: {batch_size: big}\n"),
        1,
        ("r.yaml: train.batch_size must be an integer, got 'big'",),
    ),
    Case(
        "recipe-warmup-range",
        lambda d: _dry(d, BASE + "train: {warmup_ratio: 1.5}\n"),
        1,
        ("r.yaml: train.warmup_ratio must be in [0, 1)",),
    ),
    Case(
        "recipe-label-range-empty",
        lambda d: _dry(d, BASE + "labels: {low: 5, high: 1}\n"),
        1,
        ("r.yaml: labels.low (5.0) must be below labels.high (1.0)",),
    ),
    Case(
        "recipe-odd-batch-pairs",
        lambda d: _dry(d, BASE + "objective: {name: quad-mse}\ntrain: {batch_size: 31}\n"),
        1,
        ("r.yaml: train.batch_size must be even",),
    ),
    Case(
        "recipe-tri-without-head",
        lambda d: _dry(d, "model: {backbone: {backbone}, encoder: tri}\n"),
        1,
        ("r.yaml: model.head is required for encoder 'tri'",),
    ),
    Case(
        "recipe-tri-head-typo",
        lambda d: _dry(d, "model: {backbone: {backbone}, encoder: tri, head: hadamrd}\n"),
        1,
        ("r.yaml: model.head 'hadamrd' is not a tri-encoder head", "did you mean 'hadamard'?"),
    ),
    Case(
        "recipe-file-missing",
        lambda d: ["train", str(d / "missing.yaml"), "--dry-run"],
        1,
        ("missing.yaml", "does not exist"),
    ),
    Case(
        "recipe-format-typo",
        lambda d: _dry(d, BASE + "data: {format: cstss}\n"),
        1,
        ("r.yaml: data.format: unknown data format 'cstss'", "did you mean 'csts'"),
    ),
    Case(
        "recipe-no-budget",
        lambda d: _dry(d, BASE + "train: {epochs: 0}\n"),
        1,
        ("r.yaml: set train.epochs > 0 or train.max_steps > 0",),
    ),
    Case(
        "override-without-equals",
        lambda d: [*_dry(d, BASE), "--set", "train.epochs"],
        2,
        ("argument --set", "must look like section.key=value"),
    ),
    Case(
        "override-text-key-read-as-a-boolean",
        lambda d: [*_dry(d, BASE), "--set", "data.format=table", "--set", "data.columns.label=yes"],
        1,
        (
            "override 'data.columns.label=yes'",
            "data.columns.label must be text, got True (YAML reads yes as True; for the text quote it: "
            "--set \"data.columns.label='yes'\")",
        ),
    ),
    Case(
        "recipe-output-is-a-file",
        lambda d: [*_dry(d, BASE)[:-2], "-o", str(_write(d / "afile", "x"))],
        1,
        ("r.yaml: the output folder", "afile", "is a file"),
    ),
    # ---------------------------------------------------------------- training data
    Case(
        "data-missing-column",
        lambda d: _dry(d, BASE, train="sentence1,sentence2,conditon,label\na,b,c,1\n"),
        1,
        ("train.csv", "missing column 'condition'", "found 'conditon'"),
    ),
    Case(
        "data-label-out-of-range",
        lambda d: _dry(d, BASE, train=GOOD_CSTS + "a,b,c,7\n"),
        1,
        ("train.csv, row 5", "column 'label'", "outside the declared range [1, 5]"),
    ),
    Case(
        "data-label-outside-declared-range",
        lambda d: _dry(d, BASE + "labels: {low: 1, high: 3}\n"),
        1,
        ("train.csv, row 2", "outside the declared range [1, 3]"),
    ),
    Case(
        "data-label-not-a-number",
        lambda d: _dry(d, BASE, train=GOOD_CSTS + "a,b,c,high\n"),
        1,
        ("train.csv, row 5", "column 'label'", "not a number"),
    ),
    Case(
        "data-empty-sentence",
        lambda d: _dry(d, BASE, train=GOOD_CSTS + ",b,c,2\n"),
        1,
        ("train.csv, row 5", "column 'sentence1'", "text is empty"),
    ),
    Case(
        "data-unclosed-quote",
        lambda d: _dry(d, BASE, train=GOOD_CSTS + 'a,"b never closed,c,2\nx,y,z,1\n'),
        1,
        ("train.csv", "quoted field opened on line 6 is never closed"),
    ),
    Case(
        "data-ragged-row",
        lambda d: _dry(d, BASE, train=GOOD_CSTS + "a,b,c,2,extra\n"),
        1,
        ("train.csv, row 5", "has 5 fields, the header has 4"),
    ),
    Case(
        "data-invalid-utf8",
        lambda d: _dry(d, BASE, train=GOOD_CSTS.encode() + b"a,b\xff\xfe,c,2\n"),
        1,
        ("train.csv, line 6", "not valid UTF-8"),
    ),
    Case(
        "data-header-only",
        lambda d: _dry(d, BASE, train="sentence1,sentence2,condition,label\n"),
        1,
        ("train.csv", "no rows"),
    ),
    Case(
        "data-conditions-for-pairs-missing-partner",
        lambda d: _dry(
            d, BASE + "objective: {name: quad}\ndata: {equal_labels: error}\n", train=GOOD_CSTS.replace(",4\n", ",2\n")
        ),
        1,
        ("train.csv", "share the label 0.25 for the same sentence pair", "data.equal_labels"),
    ),
    # ---------------------------------------------------------------- task files (finesim evaluate --task-file)
    Case("tasks-yaml-syntax", lambda d: _task_file(d, "tasks: [unclosed\n"), 1, ("tasks.yaml", "not valid YAML")),
    Case("tasks-as-list", lambda d: _task_file(d, "tasks:\n  - toy\n"), 1, ("tasks.yaml", "tasks: must be a mapping")),
    Case(
        "tasks-score-range-one-number",
        lambda d: _task_file(d, GOOD_TASK.replace("[1, 5]", "[5]")),
        1,
        ("tasks.yaml: task 'toy': score_range must be two numbers [low, high], got [5]",),
    ),
    Case(
        "tasks-aggregation-median",
        lambda d: _task_file(d, GOOD_TASK.replace("score_range", "aggregation: median, score_range")),
        1,
        ("tasks.yaml: task 'toy': aggregation 'median' is not one of ['pooled', 'mean']",),
    ),
    Case(
        "tasks-unknown-format",
        lambda d: _task_file(d, GOOD_TASK.replace("format: csts", "format: cvs")),
        1,
        ("tasks.yaml: task 'toy' has format 'cvs'",),
    ),
    Case(
        "tasks-unknown-key",
        lambda d: _task_file(d, GOOD_TASK.replace("score_range", "weight: 2, score_range")),
        1,
        ("tasks.yaml: task 'toy' has unknown keys ['weight']",),
    ),
    Case(
        "tasks-file-missing",
        lambda d: [*_task_file(d, GOOD_TASK)[:4], str(d / "none.yaml"), "--tasks", "toy"],
        1,
        ("none.yaml", "cannot read task registry"),
    ),
    Case(
        "tasks-group-unknown-task",
        lambda d: _task_file(d, GOOD_TASK + "groups:\n  g: [toy, nope]\n"),
        1,
        ("tasks.yaml: group 'g' names unknown tasks ['nope']",),
    ),
    Case("tasks-empty", lambda d: _task_file(d, ""), 1, ("tasks.yaml", "the task registry is empty")),
    Case(
        "tasks-data-label-out-of-range",
        lambda d: _task_file(d, GOOD_TASK.replace("[1, 5]", "[1, 3]")),
        1,
        ("validation.csv, row 2", "outside the declared range [1, 3]"),
    ),
    # ---------------------------------------------------------------- CASE recipes
    Case(
        "case-recipe-typo",
        lambda d: _case_recipe(d, "dimm: 64\n"),
        1,
        ("finesim case train: error:", "case.yaml: unknown key 'case.dimm' (did you mean 'case.dim'?)"),
    ),
    Case(
        "case-recipe-duplicate",
        lambda d: _case_recipe(d, "dim: 64\ndim: 32\n"),
        1,
        ("case.yaml", "'dim' appears twice"),
    ),
    Case("case-recipe-zero-dim", lambda d: _case_recipe(d, "dim: 0\n"), 1, ("case.yaml: case.dim must be > 0, got 0",)),
    Case("case-recipe-kind", lambda d: _case_recipe(d, "kind: quadratic\n"), 1, ("case.yaml: case.kind 'quadratic'",)),
    Case("case-recipe-kind-typo", lambda d: _case_recipe(d, "kind: linearr\n"), 1, ("case.kind", "mean 'linear'?")),
    Case(
        "case-option-at-the-top",
        lambda d: _dry(d, "formulation: cond\n"),
        1,
        ("r.yaml: unknown key 'formulation'", "CASE options go in a case: section, with method: case"),
    ),
    Case(
        "case-flat-recipe-with-method",  # an older flat CASE recipe given method: case, a - spelling
        lambda d: _dry(d, "method: case\ndev-fraction: 0.2\n"),
        1,
        ("r.yaml: unknown key 'dev-fraction' (did you mean 'case.dev_fraction'?); CASE options go in a case: section",),
    ),
    Case(
        "case-recipe-dash-key",
        lambda d: _case_recipe(d, "dev-fraction: 0.2\n"),
        1,
        ("case.yaml: unknown key 'case.dev-fraction' (did you mean 'case.dev_fraction'?); allowed: [",),
    ),
    Case(
        "case-model-offline",
        lambda d: [*_dry(d, "method: case\ncase: {model: someone/not-a-model-xyz}\n")],
        1,
        ("r.yaml: case.model:", "Hub is unreachable"),
    ),
    Case(
        "recipe-trainer-args-typo",
        lambda d: _dry(d, BASE + "train: {trainer_args: {gradient_checkpointng: true}}\n"),
        1,
        (
            "r.yaml: unknown key 'train.trainer_args.gradient_checkpointng'",
            "did you mean 'train.trainer_args.gradient_checkpointing'",
        ),
    ),
    Case(
        "recipe-trainer-args-owned",
        lambda d: _dry(d, BASE + "train: {trainer_args: {num_train_epochs: 1}}\n"),
        1,
        ("r.yaml: train.trainer_args.num_train_epochs is not passed through: finesim sets it from train.epochs",),
    ),
    Case(
        "recipe-trainer-args-value",
        lambda d: _dry(d, BASE + "train: {trainer_args: {optim: adamx}}\n"),
        1,
        ("r.yaml: train.trainer_args:", "adamx"),
    ),
    Case("case-recipe-empty", lambda d: _case_recipe(d, ""), 1, ("case.yaml", "empty")),
    # ---------------------------------------------------------------- finesim score and the table format
    Case(
        "score-jsonl-line-not-an-object",
        lambda d: _score(d, "in.jsonl", '{"sentence1": "a", "sentence2": "b"}\n[1, 2]\n'),
        1,
        ("in.jsonl, row 2", "not a JSON object"),
    ),
    Case(
        "score-missing-column",
        lambda d: _score(d, "in.csv", "s1,sentence2\na,b\n"),
        1,
        ("in.csv", "missing column 'sentence1'", "the input has ['s1', 'sentence2']"),
    ),
    Case(
        "score-empty-text",
        lambda d: _score(d, "in.tsv", "sentence1\tsentence2\na\t \n"),
        1,
        ("in.tsv, row 1", "column 'sentence2'", "text is empty"),
    ),
    Case(
        "score-unknown-extension",
        lambda d: _score(d, "in.xlsx", "x"),
        1,
        ("in.xlsx", "finesim reads .csv"),
    ),
    Case(
        "score-output-is-input",
        lambda d: [*_score(d, "in.csv", "sentence1,sentence2\na,b\n")[:-2], "--output", str(d / "in.csv")],
        1,
        ("is the input file",),
    ),
    Case(
        "table-train-ragged-tsv",
        lambda d: _table_recipe(d, "t.tsv", "sentence1\tsentence2\tlabel\na\tb\t1\nc\td\n"),
        1,
        ("t.tsv, row 2", "has 2 fields, the header has 3"),
    ),
    Case(
        "table-train-column-mapping-typo",
        lambda d: _table_recipe(
            d, "t.jsonl", '{"x": "a", "y": "b", "label": 1}\n', columns="{sentence1: x, sentence2: yy}"
        ),
        1,
        ("t.jsonl", "'yy'"),
    ),
    Case(
        "table-recipe-without-validation",
        lambda d: [
            "train",
            _recipe(d, BASE.replace("{backbone}", str(_tiny_model_dir())) + "data: {format: table, train: t.csv}\n"),
            "--dry-run",
            "-o",
            str(d / "out"),
        ],
        1,
        ("r.yaml: data.validation is not set", "data.validation: null", "data.validation_format: csts"),
    ),
    Case(
        "snli-recipe-without-validation",
        lambda d: [
            "train",
            _recipe(
                d, BASE.replace("{backbone}", str(_tiny_model_dir())) + "data: {format: snli-regression, train: nli}\n"
            ),
            "--dry-run",
            "-o",
            str(d / "out"),
        ],
        1,
        ("r.yaml: data.validation is not set", "'snli-regression'", "data.validation: null"),
    ),
    # ---------------------------------------------------------------- command-line arguments
    Case(  # failed after the data was read, when the model loaded (exit 1)
        "evaluate-pooling-typo",
        lambda d: ["evaluate", "--model", "x", "--pooling", "clss"],
        2,
        ("argument --pooling: 'clss' is not a pooling mode (did you mean 'cls'?)", "weightedmean"),
    ),
    Case(
        "case-pooling-typo",
        lambda d: ["case", "embed", "--pooling", "maxx"],
        2,
        ("finesim case embed: error: argument --pooling: 'maxx' is not a pooling mode (did you mean 'max'?)",),
    ),
    Case(
        "evaluate-batch-size-zero",
        lambda d: ["evaluate", "--model", "x", "--batch-size", "0"],
        2,
        ("--batch-size", "must be >= 1"),
    ),
    Case(
        "evaluate-output-is-a-folder",
        lambda d: ["evaluate", "--model", str(_tiny_model_dir()), "--output", str(d)],
        2,
        ("--output", "is a folder"),
    ),
    Case(
        "evaluate-run-folder-not-model",
        lambda d: [
            "evaluate",
            "--model",
            str(_run_folder(d)),
            "--tasks",
            "STS12",
        ],
        1,
        ("is a finesim training folder, not a model", "run/model"),
    ),
    Case(
        "score-run-folder-not-model",
        lambda d: ["score", "--model", str(_run_folder(d)), "--input", str(_pairs(d)), "--output", str(d / "o.csv")],
        1,
        ("is a finesim training folder, not a model", "run/model"),
    ),
    Case(
        "evaluate-model-missing",
        lambda d: ["evaluate", "--model", "./no/such/model", "--tasks", "STS12"],
        1,
        ("does not exist",),
    ),
    Case(
        "evaluate-unknown-task",
        lambda d: ["evaluate", "--model", "x", "--tasks", "STS99"],
        1,
        ("unknown task or group 'STS99'",),
    ),
    Case(
        "evaluate-bad-range",
        lambda d: ["evaluate", "--model", "x", "--prediction-range", "5,1"],
        2,
        ("LOW must be below HIGH",),
    ),
    Case(
        "prompt-eval-offline-openai",
        lambda d: [
            "prompt-eval",
            "--backend",
            "openai",
            "--model",
            "m",
            "--base-url",
            "http://no-such-host.invalid/v1",
            "--eval-file",
            str(_data(d) / "csts" / "validation.csv"),
            "--train-file",
            str(d / "data" / "csts" / "train.csv"),
            "--no-cache",
        ],
        1,
        ("cannot reach http://no-such-host.invalid/v1", "does not resolve"),
    ),
    Case(
        "prompt-eval-hf-model-missing",
        lambda d: _prompt_eval_hf(d, "/nonexistent/model"),
        1,
        ("finesim prompt-eval: error: model folder '/nonexistent/model' does not exist",),
    ),
    Case(
        "prompt-eval-hf-hub-id-offline",
        lambda d: _prompt_eval_hf(d, "someone/not-a-model-xyz"),
        1,
        ("cannot load 'someone/not-a-model-xyz'", "Hub is unreachable"),
    ),
    Case(
        "prompt-eval-other-backends-options",
        lambda d: ["prompt-eval", "--backend", "openai", "--model", "m", "--dtype", "bf16", "--batch-size", "4"],
        2,
        ("--dtype, --batch-size apply to --backend hf, not --backend openai: drop them",),
    ),
    Case(
        "prompt-eval-other-backends-option",
        lambda d: ["prompt-eval", "--backend", "hf", "--model", "m", "--concurrency", "8"],
        2,
        ("--concurrency applies to --backend openai, not --backend hf: drop it",),
    ),
    Case(
        "prompt-eval-k-shot-not-a-number",
        lambda d: ["prompt-eval", "--k-shot", "x"],
        2,
        ("argument --k-shot: expected a whole number, got 'x'",),
    ),
    Case(
        "prompt-eval-limit-zero",
        lambda d: ["prompt-eval", "--limit", "0"],
        2,
        ("argument --limit: must be >= 1, got 0",),
    ),
    Case("train-no-recipe", lambda d: ["train"], 2, ("a recipe file is required",)),
    Case("bound-n-too-small", lambda d: ["bound", "--n", "1"], 2, ("--n must be at least 2",)),
    Case(
        "bound-labels-missing",
        lambda d: ["bound", "--labels", str(d / "gold.txt")],
        1,
        ("gold.txt", "cannot read labels"),
    ),
    Case(
        "bound-labels-not-numbers",
        lambda d: ["bound", "--labels", str(_write(d / "gold.txt", "1\n2\nthree\n"))],
        1,
        ("gold.txt, row 3", "not a number: 'three'"),
    ),
    Case(
        "score-truncated-weights",
        lambda d: ["score", "--model", _truncated_model(d), "--input", str(_pairs(d)), "--output", str(d / "o.csv")],
        1,
        ("finesim score: error: {dir}/cut-model/model.safetensors: the model's weights cannot be read", "again"),
    ),
    Case(
        "export-truncated-weights",
        lambda d: ["export", _truncated_model(d), "--encoder", "bi", "--to", str(d / "exported")],
        1,
        ("finesim export: error: {dir}/cut-model/model.safetensors: the model's weights cannot be read",),
    ),
    Case(
        "case-train-empty-dev-file",
        lambda d: [
            *_case_recipe(d, "dim: 4"),
            "--dev",
            str(_write(d / "empty.csv", "sentence1,sentence2,condition,label\n")),
        ],
        1,
        ("{dir}/empty.csv: no labelled rows (only a header, or every label -1): nothing for the dev data",),
    ),
    Case(
        "case-train-targets-outside-the-cosine",
        lambda d: [*_case_recipe(d, "dim: 4"), "--label-divisor", "2"],
        1,
        (
            "labels from 1 to 5 (case.label_low, case.label_high) become cosine targets from 0.5 to 2.5 under "
            "(label - case.label_offset 0) / case.label_divisor 2, outside the cosine's [-1, 1]",
            "--label-divisor 5",
        ),
    ),
    Case(
        "case-train-label-range-upside-down",
        lambda d: [*_case_recipe(d, "label_low: 5\nlabel_high: 1")],
        1,
        ("case.label_low (5) must be below case.label_high (1)",),
    ),
    Case(
        "case-score-not-a-case-folder",
        lambda d: ["case", "score", str(d), str(_data(d) / "csts" / "validation.csv")],
        1,
        ("finesim case score: error:", "is not a CASE model folder"),
    ),
]


@pytest.fixture(scope="module", autouse=True)
def _tiny(tiny_bert_dir: Path) -> None:
    from finesim.models.io import load_sentence_model

    folder = tiny_bert_dir.parent / "tiny-st"
    if not folder.exists():
        load_sentence_model(str(tiny_bert_dir), max_length=32).save(str(folder))
    _TINY[:] = [folder]


def test_the_corpus_is_large() -> None:
    print(f"\nbad-input corpus: {len(CASES)} malformed inputs tried through the finesim command")
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gives_one_clean_line(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = case.argv(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse usage errors
        code = int(exit_.code or 0)
    err = capsys.readouterr().err
    assert code == case.code, f"exit {code}, stderr:\n{err}"
    assert "Traceback" not in err, err
    message = [line for line in err.splitlines() if "error" in line]
    assert message, err
    for expected in case.expect:
        assert expected.replace("{dir}", str(tmp_path)) in err, f"{expected!r} not in:\n{err}"


def test_unknown_errors_are_one_line_too(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import finesim.cli.bound as bound

    def boom(args: object) -> int:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(bound, "run", boom)
    assert main(["bound", "--n", "3"]) == 1
    err = capsys.readouterr().err
    assert "internal error: ZeroDivisionError: a bug (run with -v" in err and "Traceback" not in err
    assert main(["bound", "--n", "3", "-v"]) == 1  # -v after the command: the traceback too
    assert "Traceback" in capsys.readouterr().err


def test_unreadable_weights_read_elsewhere_are_a_user_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """safetensors' own error (not an OSError or ValueError), raised outside finesim's loaders, is still no bug."""
    import finesim.cli.bound as bound

    cut = _write(tmp_path / "w.safetensors", b"\x10\x00\x00\x00\x00\x00\x00\x00{}")

    def read(args: object) -> int:
        from safetensors import safe_open

        safe_open(str(cut), framework="pt")
        return 0

    monkeypatch.setattr(bound, "run", read)
    assert main(["bound", "--n", "3"]) == 1
    err = capsys.readouterr().err
    assert "finesim bound: error: a model's weights cannot be read (" in err and "internal error" not in err


def test_label_checks_are_left_to_what_they_apply_to(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """After review: with train.keep last no split chooses (a constant-label validation only reports 0.0), a
    cross-encoder's regression output is not a cosine, and quad compares labels only: none is refused."""
    last = _dry(
        tmp_path / "a",
        BASE + "train: {keep: last}\n",
        "--set",
        f"data.validation={_write(tmp_path / 'v.csv', CONSTANT_CSTS)}",
    )
    assert main(last) == 0
    raw = "labels: {scale: none, low: 1, high: 5}\n"
    assert main(_dry(tmp_path / "b", raw + "model: {backbone: {backbone}, encoder: cross}\n")) == 0
    assert main(_dry(tmp_path / "c", BASE + raw + "objective: {name: quad}\n")) == 0
    capsys.readouterr()


def test_training_tells_of_pairs_under_one_condition_twice(tmp_path: Path, caplog) -> None:
    twice = GOOD_CSTS.replace("the activity,4", "the instrument,4")
    with caplog.at_level("WARNING", logger="finesim.training.preflight"):
        assert main(_dry(tmp_path, BASE + "objective: {name: quad}\n", train=twice)) == 0
    assert "1 sentence pairs have the same condition twice (first: rows 1 and 2, 'the instrument')" in caplog.text


def test_validation_pairs_also_in_train_are_counted(tmp_path: Path, capsys: pytest.CaptureFixture, caplog) -> None:
    with caplog.at_level("WARNING", logger="finesim.training.preflight"):
        assert main(_table_pair(tmp_path / "same", TABLE_PLAIN, TABLE_PLAIN)) == 0
    assert f"data.validation ({tmp_path}/same/v.csv) is the training data itself: the model is validated" in caplog.text
    shared = TABLE_PLAIN.replace("j,k,2", "x,y,2") + "k,j,4\n"  # j/k in the other order, and 3 rows of train's
    assert main(_table_pair(tmp_path, TABLE_PLAIN, shared)) == 0
    assert "4 of the 5 validation rows have a sentence pair (either order) that the training data has too" in (
        capsys.readouterr().err
    )


def test_a_relative_data_path_says_where_it_was_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A relative data.train is read under the data root, not the working folder: the error says so, and names the
    file of that name in the working folder (it was read as a Hub dataset id: 'no local file or folder by this
    name')."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FINESIM_DATA", str(_data(tmp_path / "root")))
    argv = _table_pair(tmp_path, TABLE_PLAIN, None, "--set", "data.train=t.csv")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert (
        f"data.train not found (from {tmp_path}/r.yaml): a relative path is read under "
        f"the data root {tmp_path}/root/data (from $FINESIM_DATA); t.csv exists in the working folder: give its "
        f"absolute path ({tmp_path}/t.csv)"
    ) in err, err


@pytest.mark.parametrize("error", [KeyError("x"), IndexError("list index out of range"), AttributeError("y")])
def test_key_and_index_errors_are_bugs_not_user_errors(
    error: Exception, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import finesim.cli.bound as bound

    def boom(args: object) -> int:
        raise error

    monkeypatch.setattr(bound, "run", boom)
    assert main(["bound", "--n", "3"]) == 1
    err = capsys.readouterr().err
    assert f"internal error: {type(error).__name__}" in err and "please report it" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["case", "embed", "{dir}/none.csv", "--recipe", "{dir}/none.yaml"],
        ["case", "train", "--recipe", "{dir}/none.yaml", "--output-dir", "{dir}/out"],
        ["case", "sweep", "--recipe", "{dir}/none.yaml"],
        ["case", "isotropy", "{dir}/none.csv", "--recipe", "{dir}/none.yaml", "--output-dir", "{dir}/out"],
        ["case", "score", "{dir}", "{dir}/none.csv"],
        ["index", "info", "{dir}/none"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_errors_name_the_sub_command(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([a.replace("{dir}", str(tmp_path)) for a in argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"finesim {argv[0]} {argv[1]}: error: "), err

"""``finesim distill-data`` and the distillation recipe end to end with tiny models: the command's files and errors,
the dev split equal to the one a recipe carves, and a tiny tri-encoder student trained on a tiny bi-encoder teacher's
scores (through ``finesim score`` and ``finesim train`` with the shipped recipe) agreeing with its teacher more than
before training, on triples of sentences it never saw."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np
import pytest

from conftest import build_tiny_bert
from finesim.cli.main import main

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "distill" / "minilm-tri-hadamard-distill.yaml"

SUBJECTS = ["man", "woman", "boy", "girl", "dog", "cat"]
ADJECTIVES = ["happy", "sad", "old", "young", "small", "big"]
ACTS = ["plays guitar", "plays piano", "runs in the park", "eats food", "walks on the street", "sits in the house"]
CONDITIONS = [
    *("the activity", "the person", "the animal", "the location", "the music", "the food"),
    *("the color", "the size", "the sport", "the number", "the time", "the weather"),
]


def write_csts(path: Path, pairs: int, seed: int = 0) -> Path:
    """A C-STS-shaped CSV: ``pairs`` distinct sentence pairs of the tiny tokenizer's words, each under two conditions
    (labels 1-5)."""
    rng = random.Random(seed)
    seen: set[tuple[str, str]] = set()
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["sentence1", "sentence2", "condition", "label"])
        while len(seen) < pairs:
            s1, s2 = (f"a {rng.choice(ADJECTIVES)} {rng.choice(SUBJECTS)} {rng.choice(ACTS)}" for _ in range(2))
            if s1 == s2 or (s1, s2) in seen:
                continue
            seen.add((s1, s2))
            for condition in rng.sample(CONDITIONS, 2):
                w.writerow([s1, s2, condition, float(rng.randint(1, 5))])
    return path


def _distill(*args: str, unchecked: bool = True) -> int:
    """``finesim distill-data`` (with ``--allow-unchecked-teacher`` unless ``unchecked`` is False: the tests' tiny
    teachers record no training recipe)."""
    return main(["distill-data", "--no-progress", *args, *(["--allow-unchecked-teacher"] if unchecked else [])])


def test_files_and_report(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    train = write_csts(tmp_path / "train.csv", pairs=30)
    out, dev, report = tmp_path / "triples.csv", tmp_path / "dev.csv", tmp_path / "report.json"
    code = _distill(
        "--train", str(train), "--output", str(out), "--size", "200", "--seed", "1", "--dev-fraction", "0.2",
        "--dev-output", str(dev), "--report", str(report),
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    saved = json.loads(report.read_text())
    counts = saved["counts"]
    assert counts["total"] == 200 and counts["new-pair"] == 40  # 0.2 x 200
    assert (
        f"200 triples -> {out}: {counts['own']} own, {counts['other-condition']} other-condition, 40 new-pair"
        in printed
    )
    assert saved["dev"] == {"fraction": 0.2, "seed": 42, "pairs": 6, "rows": 12, "sentences": saved["dev"]["sentences"]}
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 200 and list(rows[0]) == ["sentence1", "sentence2", "condition", "kind"]
    with open(dev, newline="", encoding="utf-8") as fh:
        dev_rows = list(csv.DictReader(fh))
    assert len(dev_rows) == 12 and list(dev_rows[0]) == ["sentence1", "sentence2", "condition", "label"]
    dev_sentences = {r[c] for r in dev_rows for c in ("sentence1", "sentence2")}
    assert not dev_sentences & {r[c] for r in rows for c in ("sentence1", "sentence2")}
    # the report names no folder of this machine, and says what made the files
    assert str(tmp_path) not in report.read_text()
    assert saved["teacher"] is None  # --allow-unchecked-teacher
    assert saved["environment"]["versions"]["finesim"] and isinstance(saved["argv"], list)


def test_the_dev_split_is_the_one_a_recipe_carves(tmp_path: Path) -> None:
    from finesim.training import recipe_from_dict
    from finesim.training.preflight import carve_dev, load_data

    (tmp_path / "csts").mkdir()
    train = write_csts(tmp_path / "csts" / "train.csv", pairs=40)
    dev = tmp_path / "dev.csv"
    code = _distill("--train", "csts/train.csv", "--data", str(tmp_path), "--output", str(tmp_path / "t.jsonl"),
                    "--size", "100", "--dev-output", str(dev), "--dev-fraction", "0.25", "--dev-seed", "7")  # fmt: skip
    assert code == 0  # a relative --train is looked up under --data
    recipe = recipe_from_dict(
        {
            "model": {"backbone": "unused"},
            "data": {"train": str(train), "dev_fraction": 0.25, "dev_seed": 7},
            "labels": {"scale": "none"},
        }
    )
    _, carved = carve_dev(recipe, load_data(recipe, "train", None))
    with open(dev, newline="", encoding="utf-8") as fh:
        written = [(r["sentence1"], r["sentence2"], r["condition"], float(r["label"])) for r in csv.DictReader(fh)]
    assert carved is not None
    assert written == list(zip(*(carved.dataset[c] for c in ("sentence1", "sentence2", "condition", "label"))))


def test_a_missing_column_names_the_file_and_the_column(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    train = tmp_path / "train.csv"
    train.write_text("sentence1,sentence2,aspect,label\na man,a dog,the person,3\n", encoding="utf-8")
    code = _distill(
        "--train", str(train), "--output", str(tmp_path / "t.parquet"), "--dev-output", str(tmp_path / "d.csv")
    )
    err = capsys.readouterr().err
    assert code == 1
    assert f"finesim distill-data: error: {train}, line 1, column 'condition': missing column 'condition'" in err
    assert not (tmp_path / "t.parquet").exists() and not (tmp_path / "d.csv").exists()


def test_the_old_names_out_and_dev_out_still_read(tmp_path: Path) -> None:
    """``--output`` / ``--dev-output`` (every command's name for an output file) were ``--out`` / ``--dev-out``:
    the old names give the same files."""
    from finesim.cli.main import build_parser

    new = build_parser().parse_args(["distill-data", "--train", "t.csv", "--output", "a", "--dev-output", "b.csv"])
    old = build_parser().parse_args(["distill-data", "--train", "t.csv", "--out", "a", "--dev-out", "b.csv"])
    assert (new.out, new.dev_out) == (old.out, old.dev_out) == ("a", "b.csv")


def test_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    train = write_csts(tmp_path / "train.csv", pairs=4)
    out = str(tmp_path / "t.parquet")
    with pytest.raises(SystemExit) as exit_:
        _distill("--train", str(train), "--output", out)
    assert exit_.value.code == 2 and "--dev-output FILE is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _distill("--train", str(train), "--output", out, "--dev-output", str(tmp_path / "d.parquet"))
    assert "the dev rows are a C-STS CSV; name a .csv file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _distill("--train", str(train), "--output", str(tmp_path / "t.txt"), "--no-dev")
    assert "cannot tell the output format" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _distill("--train", str(train), "--output", out, "--no-dev", "--new-pair-fraction", "1")
    assert "must be in [0, 1), got 1" in capsys.readouterr().err
    assert _distill("--train", str(tmp_path / "nope.csv"), "--output", out, "--no-dev") == 1
    assert "--train" in capsys.readouterr().err
    # 4 pairs under 2 of 6 conditions each: 4 other conditions per pair, 16 in all; size 500 = 8 own, 100 new pairs
    # (0.2), 392 under other conditions: too many, at most 8 + 16 + 100
    small = tmp_path / "small.csv"
    rows = [("a man", "a dog", "c1"), ("a man", "a dog", "c2"), ("a cat", "a boy", "c3"), ("a cat", "a boy", "c4")]
    rows += [("a girl", "a car", "c5"), ("a girl", "a car", "c6"), ("a red car", "a man", "c1")]
    rows += [("a red car", "a man", "c3")]
    small.write_text("sentence1,sentence2,condition,label\n" + "".join(f"{a},{b},{c},3\n" for a, b, c in rows))
    assert _distill("--train", str(small), "--output", out, "--no-dev", "--size", "500") == 1
    err = capsys.readouterr().err
    message = (
        "size 500 needs 392 triples of training pairs under other conditions, but the 4 pairs and 6 conditions give "
        "only 16; size can be at most 30 at new_pair_fraction 0.2"
    )
    assert message in err, err


def _teacher_folder(folder: Path, data: dict | None, *, run_config: dict | None = None) -> Path:
    """A hand-written teacher folder: a marker whose card records a recipe with ``data`` (none when None), and with
    ``run_config`` a ``config.json`` of a finesim run beside it (the folder is then ``RUN/model``)."""
    model = folder / "model" if run_config is not None else folder
    model.mkdir(parents=True)
    card = {"encoder": "bi"} if data is None else {"encoder": "bi", "recipe": {"name": "teacher", "data": data}}
    (model / "finesim_model.json").write_text(json.dumps({"encoder": "bi", "card": card}), encoding="utf-8")
    if run_config is not None:
        (folder / "config.json").write_text(json.dumps(run_config), encoding="utf-8")
        (folder / "run.json").write_text("{}", encoding="utf-8")
    return model


def test_the_teacher_must_not_have_trained_on_the_dev_split(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--teacher reads the teacher's recorded recipe: the same dev split passes; another split, training on all of
    train, or no record at all is refused before anything is written; --allow-unchecked-teacher is only for a
    teacher that records nothing."""
    train = write_csts(tmp_path / "train.csv", pairs=30)
    out, dev = tmp_path / "triples.csv", tmp_path / "dev.csv"
    base = (
        "--train",
        str(train),
        "--output",
        str(out),
        "--size",
        "100",
        "--dev-fraction",
        "0.2",
        "--dev-output",
        str(dev),
    )

    def build(*extra: str) -> int:
        return _distill(*base, *extra, unchecked=False)

    same = _teacher_folder(tmp_path / "same", {"dev_fraction": 0.2, "dev_seed": 42})
    assert build("--teacher", str(same)) == 0 and out.is_file()
    out.unlink()
    other = _teacher_folder(tmp_path / "other", {"dev_fraction": 0.1, "dev_seed": 42})
    assert build("--teacher", str(other)) == 1
    err = capsys.readouterr().err
    assert (
        f"{other} was trained with data.dev_fraction 0.1 and data.dev_seed 42 ({other / 'finesim_model.json'}), but "
        "the dev split here is data.dev_fraction 0.2 and data.dev_seed 42: the teacher trained on dev rows"
    ) in err, err
    assert not out.exists()
    everything = _teacher_folder(tmp_path / "all", {"dev_fraction": None, "dev_seed": 42})
    assert build("--teacher", str(everything)) == 1
    assert "was trained on all of train (data.dev_fraction null)" in capsys.readouterr().err
    seed = _teacher_folder(tmp_path / "seed", {"dev_fraction": 0.2, "dev_seed": 7})
    assert build("--teacher", str(seed)) == 1
    assert "data.dev_fraction 0.2 and data.dev_seed 7" in capsys.readouterr().err
    # a finesim run folder: the marker's card records no recipe, the run's config.json does
    run = _teacher_folder(tmp_path / "run", None, run_config={"data": {"dev_fraction": 0.1, "dev_seed": 42}})
    assert build("--teacher", str(run)) == 1
    assert f"data.dev_seed 42 ({tmp_path / 'run' / 'config.json'})" in capsys.readouterr().err
    bare = _teacher_folder(tmp_path / "bare", None)
    assert build("--teacher", str(bare)) == 1
    err = capsys.readouterr().err
    assert f"{bare}: no recorded training recipe" in err and "--allow-unchecked-teacher" in err, err
    assert not out.exists()
    with pytest.raises(SystemExit) as exit_:
        build()
    assert exit_.value.code == 2 and "--teacher MODEL is required with a dev split" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build("--teacher", str(same), "--allow-unchecked-teacher")
    assert "give one of them" in capsys.readouterr().err
    assert build("--allow-unchecked-teacher") == 0 and out.is_file()


def test_the_teacher_must_have_trained_on_the_same_file(
    tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    """The same dev fraction and seed carve other rows from another file: a teacher whose recorded training file's
    SHA-256 (its card's train entry, or the run.json beside it) is not --train's is refused; one that records none is
    warned of."""
    from finesim.results import file_sha256

    train = write_csts(tmp_path / "train.csv", pairs=30)
    other_file = write_csts(tmp_path / "other.csv", pairs=31)
    out, dev = tmp_path / "triples.csv", tmp_path / "dev.csv"
    base = (
        "--train",
        str(train),
        "--output",
        str(out),
        "--size",
        "100",
        "--dev-fraction",
        "0.2",
        "--dev-output",
        str(dev),
    )
    split = {"dev_fraction": 0.2, "dev_seed": 42}

    def teacher(name: str, trained_on: Path) -> Path:
        folder = _teacher_folder(tmp_path / name, split)
        marker = json.loads((folder / "finesim_model.json").read_text(encoding="utf-8"))
        marker["card"]["data"] = [{"split": "train", "file": "x.csv", "sha256": file_sha256(trained_on)}]
        (folder / "finesim_model.json").write_text(json.dumps(marker), encoding="utf-8")
        return folder

    report = tmp_path / "report.json"
    same = teacher("same", train)
    assert _distill(*base, "--teacher", str(same), "--report", str(report), unchecked=False) == 0
    recorded = json.loads(report.read_text())["teacher"]
    assert recorded["train_sha256_checked"] is True and recorded["record"].endswith("finesim_model.json")
    out.unlink()
    assert _distill(*base, "--teacher", str(teacher("other", other_file)), unchecked=False) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'other'} was trained on another file than {train} (its training file's SHA-256 " in err
    assert "the teacher may have trained on these dev rows" in err and not out.exists()
    # a finesim run folder whose card has no hash: the run.json beside model/ records it
    run = _teacher_folder(tmp_path / "run", None, run_config={"data": split})
    (tmp_path / "run" / "run.json").write_text(
        json.dumps({"fingerprint": {"data": {"train": file_sha256(other_file)}}}), encoding="utf-8"
    )
    assert _distill(*base, "--teacher", str(run), unchecked=False) == 1
    assert "was trained on another file than" in capsys.readouterr().err
    # no hash anywhere (an older finesim): checked by fraction and seed, and said so
    old = _teacher_folder(tmp_path / "old", split)
    with caplog.at_level("WARNING", logger="finesim.models.teacher"):
        assert _distill(*base, "--teacher", str(old), unchecked=False) == 0
    assert "records no SHA-256 of its training file" in caplog.text


def test_the_teacher_check_from_python(tmp_path: Path) -> None:
    from finesim.models.teacher import TeacherCheckError, check_teacher_dev_split, recorded_dev_split

    same = _teacher_folder(tmp_path / "same", {"dev_fraction": 0.1, "dev_seed": 42})
    record = check_teacher_dev_split(same, dev_fraction=0.1, dev_seed=42)
    assert record is not None and (record.fraction, record.seed) == (0.1, 42)
    bare = _teacher_folder(tmp_path / "bare", None)
    assert recorded_dev_split(bare) is None
    assert check_teacher_dev_split(bare, dev_fraction=0.1, dev_seed=42, allow_unchecked=True) is None
    with pytest.raises(TeacherCheckError, match="no recorded training recipe"):
        check_teacher_dev_split(bare, dev_fraction=0.1, dev_seed=42)
    with pytest.raises(TeacherCheckError, match=r"trained with data\.dev_fraction 0\.1"):  # a known leak: never allowed
        check_teacher_dev_split(same, dev_fraction=0.2, dev_seed=42, allow_unchecked=True)


def test_a_case_teacher_is_checked_by_the_options_it_recorded(tmp_path: Path) -> None:
    """A CASE model's card keeps its flat training options (dev_fraction, seed, dev), not a recipe's data section:
    a CASE teacher that held the same split out was refused as having 'no recorded training recipe'."""
    from finesim.models.teacher import TeacherCheckError, check_teacher_dev_split

    def case_teacher(name: str, options: dict) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        marker = {"encoder": "case", "card": {"encoder": "case", "recipe": options}}
        (folder / "finesim_model.json").write_text(json.dumps(marker), encoding="utf-8")
        return folder

    same = case_teacher("same", {"dev_fraction": 0.1, "seed": 42, "dev": None, "lr": 1e-3})
    record = check_teacher_dev_split(same, dev_fraction=0.1, dev_seed=42)
    assert record is not None and (record.fraction, record.seed) == (0.1, 42)
    # its card's train entry carries the file's hash (after review: a CASE teacher's file was never compared)
    marker = json.loads((same / "finesim_model.json").read_text(encoding="utf-8"))
    marker["card"]["data"] = [{"split": "train", "sha256": "0" * 64}]
    (same / "finesim_model.json").write_text(json.dumps(marker), encoding="utf-8")
    train = write_csts(tmp_path / "train.csv", pairs=5)
    with pytest.raises(TeacherCheckError, match="was trained on another file than"):
        check_teacher_dev_split(same, dev_fraction=0.1, dev_seed=42, train=train)
    with pytest.raises(TeacherCheckError, match=r"trained with case\.dev_fraction 0\.1 and seed 7 .*--set seed=42"):
        check_teacher_dev_split(
            case_teacher("other", {"dev_fraction": 0.1, "seed": 7, "dev": None}), dev_fraction=0.1, dev_seed=42
        )
    # a separate dev file: the carved rows were trained on
    with pytest.raises(TeacherCheckError, match=r"own-dev was trained on all of train \(case\.dev_fraction null\)"):
        check_teacher_dev_split(
            case_teacher("own-dev", {"dev_fraction": 0.1, "seed": 42, "dev": "dev.csv"}), dev_fraction=0.1, dev_seed=42
        )
    # options that do not say where the dev rows came from (no "dev" key) are no record
    with pytest.raises(TeacherCheckError, match="no recorded training recipe"):
        check_teacher_dev_split(
            case_teacher("unsure", {"dev_fraction": 0.1, "seed": 42}), dev_fraction=0.1, dev_seed=42
        )


# ------------------------------------------------------------------ end to end with tiny models


def _spearman_with(model: Path, teacher: np.ndarray, held_out: dict[str, list[str]]) -> float:
    from finesim.evaluation.metrics import spearman
    from finesim.evaluation.scoring import ConditionalScorer

    scores = ConditionalScorer(str(model)).score(held_out["sentence1"], held_out["sentence2"], held_out["condition"])
    return spearman(scores, teacher)


def test_tiny_student_learns_its_teacher(tiny_bert_dir: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from finesim.evaluation.scoring import ConditionalScorer
    from finesim.models.builders import build_bi_encoder
    from finesim.models.io import save_model
    from finesim.training import get_encoder
    from finesim.training.recipe import ModelSpec

    work = tmp_path / "work"
    work.mkdir()
    train = write_csts(tmp_path / "train.csv", pairs=40)
    # the teacher: a tiny bi-encoder, (sentence, condition) encoded together, over other random weights than the
    # student's backbone (over the same ones, the untrained student already agrees with it at about 75)
    teacher_bert = build_tiny_bert(tmp_path / "teacher-bert", seed=1)
    teacher = save_model(build_bi_encoder(str(teacher_bert), max_length=32), tmp_path / "teacher", encoder="bi")
    assert _distill("--train", str(train), "--output", str(work / "triples.parquet"), "--size", "400", "--seed", "1",
                    "--dev-fraction", "0.2", "--dev-output", str(work / "dev.csv")) == 0  # fmt: skip
    code = main(["score", "-q", "--model", str(teacher), "--input", str(work / "triples.parquet"),
                 "--output", str(work / "scored.parquet"), "--score-column", "teacher", "--no-progress"])  # fmt: skip
    assert code == 0
    scored = pq.read_table(work / "scored.parquet")
    assert scored.column_names == ["sentence1", "sentence2", "condition", "kind", "teacher"]
    assert scored.num_rows == 400 and scored.column("teacher").null_count == 0

    # held out: the dev pairs' sentences (never in a triple), paired across pairs, under every condition
    with open(work / "dev.csv", newline="", encoding="utf-8") as fh:
        dev_sentences = sorted({r[c] for r in csv.DictReader(fh) for c in ("sentence1", "sentence2")})
    pairs = [(a, b) for i, a in enumerate(dev_sentences) for b in dev_sentences[i + 1 :]]
    held = {"sentence1": [], "sentence2": [], "condition": []}
    for (a, b), c in ((p, c) for p in pairs for c in CONDITIONS):
        held["sentence1"].append(a), held["sentence2"].append(b), held["condition"].append(c)
    target = ConditionalScorer(str(teacher)).score(held["sentence1"], held["sentence2"], held["condition"])

    # the student before training: the recipe's model, its head drawn with the run's seed
    from transformers import set_seed

    set_seed(42)
    spec = ModelSpec(backbone=str(tiny_bert_dir), encoder="tri", pooling="mean", head="hadamard", max_length=32)
    untrained = save_model(get_encoder("tri").build(spec), tmp_path / "untrained", encoder="tri")
    before = _spearman_with(untrained, target, held)

    out = tmp_path / "student"
    code = main(
        ["train", "-q", str(RECIPE), "--data", str(work), "-o", str(out), "--no-progress",
         "--set", f"model.backbone={tiny_bert_dir}", "--set", "model.max_length=32", "--set", "train.bf16=false",
         "--set", "train.epochs=4", "--set", "train.learning_rate=3e-3", "--set", "train.eval_steps=20",
         "--set", "train.batch_size=16", "--set", "train.num_threads=1", "--set", "train.warmup_ratio=0"]
    )  # fmt: skip
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["best_model_restored"] is True  # the best checkpoint on the dev split's human labels
    after = _spearman_with(out / "model", target, held)
    assert after >= before + 20, f"Spearman with the teacher on held-out triples {before:.1f} -> {after:.1f}"

"""``finesim score`` never drops a condition silently: a column that looks like a condition column, a named column that
is missing, ``--condition`` beside a condition column are refused (before the model is loaded); an input with no
condition-like column is scored without one and the command says so; it says which model and runtime score."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from finesim.cli.main import main
from finesim.data.errors import DataFormatError
from finesim.evaluation.score_file import Columns, condition_column, score_file

S1 = ["a man plays guitar", "a dog runs in the park", "a girl eats food", "two boys sit", "a red car"]
S2 = ["a woman plays piano", "a cat sits in the house", "a boy eats food", "a girl walks", "a blue car"]
C = ["the activity", "the animal", "the person", "the number", "the color"]
MISSING_MODEL = "/nonexistent/finesim-model"  # the checks below must answer before any model is loaded


def _csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _table(tmp_path: Path, condition_header: str | None, name: str = "in.csv") -> Path:
    header = ["sentence1", "sentence2"] + ([condition_header] if condition_header else []) + ["id"]
    rows = [[a, b] + ([c] if condition_header else []) + [str(i)] for i, (a, b, c) in enumerate(zip(S1, S2, C))]
    return _csv(tmp_path / name, header, rows)


def _scores(path: Path) -> list[float]:
    return [json.loads(line)["score"] for line in path.read_text(encoding="utf-8").splitlines()]


def _score(model: str | Path, table: Path, out: Path, *flags: str) -> int:
    return main(["score", "--model", str(model), "--input", str(table), "--output", str(out), "--no-progress", *flags])


@pytest.fixture(scope="module")
def bi_folder(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from finesim.models.builders import build_bi_encoder
    from finesim.models.io import save_model

    folder = tmp_path_factory.mktemp("score-conditions") / "bi"
    return save_model(build_bi_encoder(str(tiny_bert_dir), max_length=32), folder, encoder="bi")


@pytest.fixture(scope="module")
def bi_scorer(bi_folder: Path):
    from finesim.evaluation.scoring import ConditionalScorer

    return ConditionalScorer(str(bi_folder))


@pytest.mark.parametrize("header", ["condtion", "conditon", "aspect", "conditions", "Condition"])
def test_a_condition_like_column_is_refused_naming_the_flag(header, bi_folder, tmp_path, capsys) -> None:
    table = _table(tmp_path, header)
    out = tmp_path / "out.jsonl"
    assert _score(bi_folder, table, out) == 1
    err = capsys.readouterr().err
    assert "in.csv" in err and f"has {header!r}, which looks like one" in err, err
    assert f"--condition-column {header} " in err and "--no-condition" in err and "Traceback" not in err
    assert not out.exists()
    # found before the model is loaded: a model that does not exist is never reached
    assert _score(MISSING_MODEL, table, out) == 1
    assert "which looks like one" in capsys.readouterr().err


def test_the_condition_column_named_by_the_hint_scores_under_it(bi_folder, bi_scorer, tmp_path, capsys) -> None:
    table = _table(tmp_path, "aspect")
    out = tmp_path / "out.jsonl"
    assert _score(bi_folder, table, out, "--condition-column", "aspect") == 0
    np.testing.assert_allclose(_scores(out), bi_scorer.similarity(S1, S2, C), atol=1e-5)
    assert "without a condition" not in capsys.readouterr().err


def test_no_condition_scores_without_one_on_purpose(bi_folder, bi_scorer, tmp_path, capsys) -> None:
    table = _table(tmp_path, "aspect")
    out = tmp_path / "out.jsonl"
    assert _score(bi_folder, table, out, "--no-condition") == 0
    np.testing.assert_allclose(_scores(out), bi_scorer.similarity(S1, S2), atol=1e-5)
    assert capsys.readouterr().err.count("scoring without a condition (--no-condition)") == 1
    # even an input that has the condition column
    table = _table(tmp_path, "condition", name="with.csv")
    assert _score(bi_folder, table, out, "--no-condition") == 0
    np.testing.assert_allclose(_scores(out), bi_scorer.similarity(S1, S2), atol=1e-5)


def test_an_input_without_a_condition_like_column_is_scored_without_one_and_says_so(
    bi_folder, bi_scorer, tmp_path, capsys
) -> None:
    table = _table(tmp_path, None)
    out = tmp_path / "out.jsonl"
    assert _score(bi_folder, table, out) == 0
    err = capsys.readouterr().err
    assert err.count("no condition column: scoring without a condition") == 1, err
    np.testing.assert_allclose(_scores(out), bi_scorer.similarity(S1, S2), atol=1e-5)
    # -q: nothing on stderr
    assert _score(bi_folder, table, out, "-q") == 0
    assert capsys.readouterr().err == ""


def test_the_command_says_which_model_and_runtime_score(bi_folder, tmp_path, capsys) -> None:
    table = _table(tmp_path, "condition")
    assert _score(bi_folder, table, tmp_path / "out.jsonl") == 0
    err = capsys.readouterr().err
    assert err.count(f"scoring with {bi_folder} (bi-encoder, torch on cpu)") == 1, err


def test_describe_scorer_names_an_exported_runtime() -> None:
    from finesim.evaluation.loading import describe_scorer

    onnx = SimpleNamespace(encoder="tri", model=SimpleNamespace(finesim_runtime={"format": "onnx", "quantize": "int8"}))
    assert describe_scorer(onnx) == "tri-encoder, onnx int8"
    bf16 = SimpleNamespace(
        encoder="bi", model=SimpleNamespace(finesim_runtime={"format": "torch", "quantize": "bf16"}, device="cpu")
    )
    assert describe_scorer(bf16) == "bi-encoder, torch bf16 on cpu"
    assert describe_scorer(SimpleNamespace(encoder="ensemble", members=[1, 2])) == "ensemble of 2 models"


def test_a_named_condition_column_that_is_missing_is_refused(tmp_path, capsys) -> None:
    table = _csv(tmp_path / "in.csv", ["sentence1", "sentence2", "topic"], [[a, b, c] for a, b, c in zip(S1, S2, C)])
    out = tmp_path / "out.jsonl"
    assert _score(MISSING_MODEL, table, out, "--condition-column", "topc") == 1
    err = capsys.readouterr().err
    assert "in.csv" in err and "missing column 'topc' (named by --condition-column)" in err, err
    assert "did you mean 'topic'?" in err and "['sentence1', 'sentence2', 'topic']" in err
    # even the default name, given on purpose
    assert _score(MISSING_MODEL, table, out, "--condition-column", "condition") == 1
    assert "missing column 'condition' (named by --condition-column)" in capsys.readouterr().err
    assert not out.exists()


def test_condition_beside_a_condition_column_is_refused(tmp_path, capsys) -> None:
    table = _table(tmp_path, "condition")
    out = tmp_path / "out.jsonl"
    assert _score(MISSING_MODEL, table, out, "--condition", "the color") == 1
    err = capsys.readouterr().err
    assert "in.csv" in err and "has a condition column 'condition' and --condition 'the color' was given too" in err
    assert "drop --condition" in err and not out.exists()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--condition", "x", "--condition-column", "aspect"], "were both given: choose one"),
        (["--no-condition", "--condition", "x"], "--no-condition scores without a condition: drop it or --condition"),
        (["--no-condition", "--condition-column", "aspect"], "drop it or --condition-column"),
    ],
)
def test_contradicting_condition_flags_are_a_usage_error(flags, says, tmp_path, capsys) -> None:
    table = _table(tmp_path, "aspect")
    with pytest.raises(SystemExit) as exit_:
        _score(MISSING_MODEL, table, tmp_path / "out.jsonl", *flags)
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


def test_a_missing_sentence_column_names_the_flag(tmp_path, capsys) -> None:
    rows = [[a, b, c] for a, b, c in zip(S1, S2, C)]
    out = tmp_path / "out.jsonl"
    assert _score(MISSING_MODEL, _csv(tmp_path / "in.csv", ["text_a", "text_b", "condition"], rows), out) == 1
    err = capsys.readouterr().err
    assert "in.csv" in err and "missing column 'sentence1' (name the column with --sentence1-column NAME)" in err
    table = _csv(tmp_path / "close.csv", ["text_a", "sentence_2", "condition"], rows)
    assert _score(MISSING_MODEL, table, out, "--sentence1-column", "text_a") == 1
    err = capsys.readouterr().err
    assert "missing column 'sentence2' (found 'sentence_2': pass --sentence2-column sentence_2)" in err, err


def test_a_tri_encoder_cannot_score_without_a_condition(tiny_bert_dir, tmp_path, capsys) -> None:
    from finesim.models.builders import build_tri_encoder
    from finesim.models.io import save_model

    folder = save_model(build_tri_encoder(str(tiny_bert_dir), head="hadamard", max_length=32), tmp_path / "tri")
    table = _table(tmp_path, "condition")
    assert _score(folder, table, tmp_path / "out.jsonl", "--no-condition") == 1
    err = capsys.readouterr().err
    assert "cannot score without one (--no-condition)" in err and "--condition-column NAME" in err, err
    assert "scoring without a condition" not in err
    assert "scoring with" not in err  # refused before the model loads, as every other condition check
    assert _score(folder, _table(tmp_path, None), tmp_path / "out.jsonl") == 1  # no condition column at all
    err = capsys.readouterr().err
    assert "the input has no 'condition' column; pass --condition TEXT" in err and "scoring with" not in err


def test_the_python_api_refuses_a_condition_like_column(bi_scorer, tmp_path) -> None:
    table = _table(tmp_path, "aspect")
    with pytest.raises(DataFormatError, match="has 'aspect', which looks like one"):
        score_file(bi_scorer, table, tmp_path / "out.jsonl")
    report = score_file(bi_scorer, table, tmp_path / "out.jsonl", columns=Columns(condition="aspect"))
    assert report["condition"] == "per row"
    report = score_file(bi_scorer, table, tmp_path / "out.jsonl", columns=Columns(condition=None))
    assert report["condition"] == "none"


@pytest.mark.parametrize(
    ("available", "found"),
    [
        (["sentence1", "sentence2", "id", "label"], None),
        (["sentence1", "sentence2", "position", "edition", "description"], None),
        (["sentence1", "sentence2", "condition_text"], "condition_text"),
        (["sentence1", "sentence2", "facet"], "facet"),
    ],
)
def test_condition_like_columns(available, found) -> None:
    if found is None:
        assert condition_column("f.csv", available, Columns()) is None
    else:
        with pytest.raises(DataFormatError, match=f"has {found!r}, which looks like one"):
            condition_column("f.csv", available, Columns())


def test_the_command_names_an_onnx_runtime(bi_folder, tmp_path, capsys) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from finesim.models.export import export_model

    exported = export_model(str(bi_folder), tmp_path / "onnx", quantize="none").path
    table = _table(tmp_path, "condition")
    assert _score(exported, table, tmp_path / "out.jsonl") == 0
    assert f"scoring with {exported} (bi-encoder, onnx on cpu)" in capsys.readouterr().err


def test_conditions_given_to_a_model_trained_without_them_are_told(tiny_bert_dir: Path, tmp_path: Path, capsys) -> None:
    """A model whose card says it was trained without conditions scored (sentence, condition) inputs without a word,
    in finesim score and in finesim evaluate's C-STS rows."""
    from finesim.models.builders import build_bi_encoder
    from finesim.models.card import CardInfo
    from finesim.models.io import save_model, trained_without_conditions

    plain = save_model(
        build_bi_encoder(str(tiny_bert_dir), max_length=32),
        tmp_path / "plain",
        encoder="bi",
        card=CardInfo(encoder="bi", conditional=False),
    )
    assert trained_without_conditions(str(plain)) and not trained_without_conditions(str(tiny_bert_dir))
    table = _table(tmp_path, "condition")
    out = tmp_path / "out.jsonl"
    assert _score(plain, table, out) == 0
    note = "was trained without conditions (its card says so): each (sentence, condition) input is one it never saw"
    assert note in capsys.readouterr().err
    assert _score(plain, table, out, "--no-condition") == 0  # plain pairs: nothing to tell
    assert "trained without conditions" not in capsys.readouterr().err
    csts = tmp_path / "data" / "csts"
    csts.mkdir(parents=True)
    _csv(csts / "validation.csv", ["sentence1", "sentence2", "condition", "label"], [["a b", "c d", "e", "3"]] * 3)
    assert (
        main(["evaluate", "--model", str(plain), "--tasks", "CSTS-validation", "--data", str(tmp_path / "data")]) == 0
    )
    assert "trained without conditions (its card says so): on CSTS-validation it reads" in capsys.readouterr().err


def test_one_column_in_two_roles_is_refused(tmp_path, capsys) -> None:
    """The same column as both sentences scored every row 1.0; a sentence column as the condition column passed."""
    rows = [[a, b, c] for a, b, c in zip(S1, S2, C)]
    table = _csv(tmp_path / "a.csv", ["text_a", "text_b", "aspect"], rows)
    out = tmp_path / "out.jsonl"
    both = ["--sentence1-column", "text_a", "--sentence2-column", "text_a", "--condition-column", "aspect"]
    assert _score(MISSING_MODEL, table, out, *both) == 1
    assert "--sentence1-column and --sentence2-column both name 'text_a': every row would be scored against" in (
        capsys.readouterr().err
    )
    roles = ["--sentence1-column", "text_a", "--sentence2-column", "text_b", "--condition-column", "text_b"]
    assert _score(MISSING_MODEL, table, out, *roles) == 1
    assert "the condition column 'text_b' is also a sentence column" in capsys.readouterr().err
    assert not out.exists()


def test_one_condition_over_a_condition_like_column_is_told(bi_folder, bi_scorer, tmp_path, capsys) -> None:
    """``--condition`` beside a column that looks like the rows' conditions (``aspect``) scored every row under the
    one condition without a word (beside a ``condition`` column it is refused)."""
    table = _table(tmp_path, "aspect")
    out = tmp_path / "out.jsonl"
    assert _score(bi_folder, table, out, "--condition", "the size") == 0
    err = capsys.readouterr().err
    assert "every row is scored under --condition 'the size', although the input's column 'aspect' looks like" in err
    assert err.count("although the input's column") == 1  # said once (the check before loading said it too)
    np.testing.assert_allclose(_scores(out), bi_scorer.score(S1, S2, ["the size"] * 5), atol=1e-5)


def test_the_report_says_what_scored(bi_folder, tmp_path, capsys) -> None:
    """The report (``--json``, and ``--report FILE``, new) named neither the model nor the condition text."""
    table = _table(tmp_path, None)
    out, report = tmp_path / "out.jsonl", tmp_path / "report.json"
    assert _score(bi_folder, table, out, "--condition", "the size", "--report", str(report), "--json") == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads(report.read_text(encoding="utf-8"))
    for record in (printed, written):
        assert record["command"] == "finesim score" and record["rows_scored"] == 5
        assert record["model"]["encoder"] == "bi" and record["model"]["scorer"].startswith("bi-encoder, torch")
        assert record["model"]["resolved"].endswith("/bi")
        assert record["condition_text"] == "the size" and record["condition_column"] is None
        assert isinstance(record["argv"], list) and record["environment"]["code"]
    assert printed["model"]["resolved"] == str(bi_folder.resolve())
    from finesim.results import path_roots, portable

    assert written["model"]["resolved"] == portable(printed["model"]["resolved"], path_roots())  # portable in the file
    assert written["model"]["resolved"] != printed["model"]["resolved"]  # (pytest's folder: shown as <tmp>/...)
    with pytest.raises(SystemExit):
        _score(bi_folder, table, out, "--condition", "x", "--report", str(out))
    assert "--report must name another file than --input and --output" in capsys.readouterr().err

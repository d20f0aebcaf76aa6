"""``finesim score``: streaming a table through a scorer, formats in and out, bad rows, atomic output."""

from __future__ import annotations

import csv
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from finesim.cli.main import main
from finesim.data.errors import DataFormatError
from finesim.evaluation.score_file import Columns, rejects_path, score_file

S1 = ["a man plays guitar", "a dog runs in the park", "a girl eats food", "two boys sit", "a red car"]
S2 = ["a woman plays piano", "a cat sits in the house", "a boy eats food", "a girl walks", "a blue car"]
C = ["the activity", "the animal", "the person", "the number", "the color"]


def _csv(path: Path, rows: list[list[str]], header: list[str], delimiter: str = ",") -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, delimiter=delimiter)
        w.writerow(header)
        w.writerows(rows)
    return path


def _read_scores(path: Path) -> list[float]:
    if path.suffix == ".jsonl":
        return [json.loads(line)["score"] for line in path.read_text(encoding="utf-8").splitlines()]
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(str(path)).column("score").to_pylist()
    with open(path, newline="", encoding="utf-8") as fh:
        return [float(r["score"]) for r in csv.DictReader(fh, delimiter="\t" if path.suffix == ".tsv" else ",")]


@pytest.fixture()
def bi_folder(tiny_bert_dir: Path, tmp_path: Path) -> Path:
    from finesim.models.builders import build_bi_encoder
    from finesim.models.io import save_model

    return save_model(build_bi_encoder(str(tiny_bert_dir), max_length=32), tmp_path / "bi", encoder="bi")


@pytest.mark.parametrize("out_name", ["out.csv", "out.tsv", "out.jsonl", "out.parquet"])
def test_scores_equal_the_python_scorer_in_every_output_format(bi_folder: Path, tmp_path: Path, out_name: str) -> None:
    from finesim.evaluation.scoring import ConditionalScorer

    inp = _csv(
        tmp_path / "in.csv",
        [[a, b, c, str(i)] for i, (a, b, c) in enumerate(zip(S1, S2, C))],
        ["sentence1", "sentence2", "condition", "id"],
    )
    scorer = ConditionalScorer(str(bi_folder))
    report = score_file(scorer, inp, tmp_path / out_name, chunk_rows=2)
    expected = scorer.similarity(S1, S2, C)
    assert report["rows_scored"] == 5 and report["condition"] == "per row"
    np.testing.assert_allclose(_read_scores(tmp_path / out_name), expected, atol=1e-5)
    if out_name == "out.csv":  # the input's columns, in input order, then the score
        with open(tmp_path / out_name, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        assert list(rows[0]) == ["sentence1", "sentence2", "condition", "id", "score"]
        assert [r["id"] for r in rows] == ["0", "1", "2", "3", "4"]


def test_jsonl_input_column_names_and_one_condition(bi_folder: Path, tmp_path: Path) -> None:
    from finesim.evaluation.scoring import ConditionalScorer

    inp = tmp_path / "in.jsonl"
    inp.write_text("\n".join(json.dumps({"a": a, "b": b, "n": i}) for i, (a, b) in enumerate(zip(S1, S2))) + "\n")
    scorer = ConditionalScorer(str(bi_folder))
    score_file(scorer, inp, tmp_path / "out.jsonl", columns=Columns("a", "b", None), condition="the color")
    rows = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["n"] for r in rows] == [0, 1, 2, 3, 4] and set(rows[0]) == {"a", "b", "n", "score"}
    np.testing.assert_allclose([r["score"] for r in rows], scorer.similarity(S1, S2, "the color"), atol=1e-5)


def test_a_bad_row_stops_the_run_naming_file_row_and_column_and_leaves_no_output(
    bi_folder: Path, tmp_path: Path
) -> None:
    from finesim.evaluation.scoring import ConditionalScorer

    rows = [[a, b, c] for a, b, c in zip(S1, S2, C)]
    rows[3][1] = " "
    inp = _csv(tmp_path / "in.csv", rows, ["sentence1", "sentence2", "condition"])
    (tmp_path / "out.csv").write_text("an earlier result\n")
    with pytest.raises(DataFormatError, match=r"in\.csv, row 4 \(line 5\), column 'sentence2'"):
        score_file(ConditionalScorer(str(bi_folder)), inp, tmp_path / "out.csv", chunk_rows=2)
    assert (tmp_path / "out.csv").read_text() == "an earlier result\n"  # untouched: nothing half-written
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.csv")]


def test_skip_bad_rows_sends_them_to_a_rejects_file_and_counts_them(bi_folder: Path, tmp_path: Path) -> None:
    from finesim.evaluation.scoring import ConditionalScorer

    inp = tmp_path / "in.csv"
    inp.write_text(
        "sentence1,sentence2,condition\n"
        "a man plays guitar,a woman plays piano,the activity\n"
        ",a cat sits,the animal\n"
        "a girl eats food,a boy eats food,the person,extra\n"
        "a red car,a blue car,the color\n",
        encoding="utf-8",
    )
    report = score_file(ConditionalScorer(str(bi_folder)), inp, tmp_path / "out.csv", skip_bad_rows=True)
    assert (report["rows_scored"], report["rows_skipped"]) == (2, 2)
    rejects = [json.loads(x) for x in rejects_path(tmp_path / "out.csv").read_text().splitlines()]
    assert [(r["row"], r["column"]) for r in rejects] == [(2, "sentence1"), (3, None)]
    assert "text is empty" in rejects[0]["error"] and "4 fields" in rejects[1]["error"]
    # the record as read: its fields by column, and the text of one that is not well-formed (its 4th field with it)
    assert rejects[0]["record"] == {"sentence1": "", "sentence2": "a cat sits", "condition": "the animal"}
    assert rejects[0]["raw"] is None
    assert rejects[1]["raw"].rstrip("\r\n") == "a girl eats food,a boy eats food,the person,extra"
    assert len(_read_scores(tmp_path / "out.csv")) == 2


def test_a_tri_encoder_needs_a_condition(tiny_bert_dir: Path, tmp_path: Path) -> None:
    from finesim.evaluation.scoring import ConditionalScorer
    from finesim.models.builders import build_tri_encoder

    scorer = ConditionalScorer(build_tri_encoder(str(tiny_bert_dir), head="hadamard", max_length=32))
    inp = _csv(tmp_path / "in.csv", [[a, b] for a, b in zip(S1, S2)], ["sentence1", "sentence2"])
    # refused before any row is read, naming the file and both ways to give a condition
    with pytest.raises(ValueError, match="under a condition, but the input has no 'condition' column") as err:
        score_file(scorer, inp, tmp_path / "out.csv")
    assert "in.csv" in str(err.value) and "--condition-column" in str(err.value)
    assert not (tmp_path / "out.csv").exists()
    report = score_file(scorer, inp, tmp_path / "out.csv", condition="the color")
    np.testing.assert_allclose(_read_scores(tmp_path / "out.csv"), scorer.similarity(S1, S2, "the color"), atol=1e-5)
    assert report["rows_scored"] == 5


class _LengthScorer:
    """A fast stand-in: the score is a function of the texts."""

    def score(self, s1, s2, conditions=None):
        return np.asarray([len(a) - len(b) for a, b in zip(s1, s2)], dtype=np.float32)


def test_memory_does_not_grow_with_the_file(tmp_path: Path) -> None:
    inp = tmp_path / "big.csv"
    with open(inp, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["sentence1", "sentence2", "condition"])
        for i in range(200_000):
            w.writerow([f"sentence number {i} about a cat", f"another sentence {i * 7}", "the animal"])
    tracemalloc.start()
    report = score_file(_LengthScorer(), inp, tmp_path / "out.csv", chunk_rows=2000)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert report["rows_scored"] == 200_000
    assert peak < min(8 * 2**20, inp.stat().st_size / 2), (peak, inp.stat().st_size)


def test_cli_end_to_end(bi_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    inp = _csv(tmp_path / "in.tsv", [[a, b, c] for a, b, c in zip(S1, S2, C)], ["x", "y", "cond"], delimiter="\t")
    argv = ["score", "--model", str(bi_folder), "--input", str(inp), "--output", str(tmp_path / "o.jsonl"), "--json"]
    argv += ["--sentence1-column", "x", "--sentence2-column", "y", "--condition-column", "cond", "--no-progress"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows_scored"] == 5 and (tmp_path / "o.jsonl").is_file()
    # a missing column: one line naming the file and the columns that exist, exit 1
    assert main(["score", "--model", str(bi_folder), "--input", str(inp), "--output", str(tmp_path / "p.csv")]) == 1
    err = capsys.readouterr().err
    assert "in.tsv" in err and "missing column 'sentence1'" in err and "Traceback" not in err
    assert not (tmp_path / "p.csv").exists()

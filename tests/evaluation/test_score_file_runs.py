"""``finesim score`` over a run's life (issue 40): a progress bar with a row total that moves within a chunk, a long
CSV cell read like JSONL and its truncation told, the first bad row of the file named, CSV column types kept in
Parquet, and nothing stale left by a killed run or an earlier run's rejects."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from finesim.data.errors import DataFormatError
from finesim.evaluation.score_file import rejects_path, score_file

S1 = ["a man plays guitar", "a dog runs in the park", "a girl eats food", "two boys sit", "a red car"]
S2 = ["a woman plays piano", "a cat sits in the house", "a boy eats food", "a girl walks", "a blue car"]


def _csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


class _LengthScorer:
    """A fast stand-in with a batch size: the score is a function of the texts; it records its calls."""

    def __init__(self, batch_size: int | None = None) -> None:
        if batch_size is not None:
            self.batch_size = batch_size
        self.calls: list[int] = []

    def score(self, s1, s2, conditions=None):
        self.calls.append(len(s1))
        return np.asarray([len(a) - len(b) for a, b in zip(s1, s2)], dtype=np.float32)


class _Bar:
    """Records what ``score_file`` does with its tqdm bar: every total and format it is given, every update."""

    made: ClassVar[list[_Bar]] = []

    def __init__(self, *args: Any, total: int | None = None, bar_format: str | None = None, **kwargs: Any) -> None:
        self.totals: list[int | None] = []
        self.formats: list[str | None] = []
        self.total = total
        self.bar_format = bar_format
        self.updates: list[int] = []
        _Bar.made.append(self)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "total":
            self.totals.append(value)
        if name == "bar_format":
            self.formats.append(value)
        object.__setattr__(self, name, value)

    def update(self, n: int) -> None:
        self.updates.append(n)

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture()
def bars(monkeypatch: pytest.MonkeyPatch) -> list[_Bar]:
    import tqdm.auto

    _Bar.made = []
    monkeypatch.setattr(tqdm.auto, "tqdm", _Bar)
    return _Bar.made


@pytest.fixture(scope="module")
def bi_scorer(tiny_bert_dir: Path):
    from finesim.evaluation.scoring import ConditionalScorer
    from finesim.models.builders import build_bi_encoder

    return ConditionalScorer(build_bi_encoder(str(tiny_bert_dir), max_length=32))


# ---- 1. progress: a total, and updates within a chunk ---------------------------------------------------------------


def test_the_progress_bar_has_a_total_and_moves_within_a_chunk(tmp_path: Path, bars: list[_Bar]) -> None:
    rows = [[f"sentence {i}", f"other {i}"] for i in range(20)]
    inp = _csv(tmp_path / "in.csv", ["sentence1", "sentence2"], rows)
    scorer = _LengthScorer(batch_size=1)  # 8 rows a call
    score_file(scorer, inp, tmp_path / "out.csv", show_progress=True)  # one chunk of 4096 rows
    (bar,) = bars
    assert bar.totals[0] == 20 and "about" in (bar.formats[0] or "")  # a line count: an estimate
    assert scorer.calls == [8, 8, 4] and bar.updates == [8, 8, 4]  # moved after every call, not once per chunk
    assert bar.total == 20 and bar.bar_format is None  # the count at the end


def test_parquet_gives_an_exact_total_and_rejects_move_the_bar(tmp_path: Path, bars: list[_Bar]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    inp = tmp_path / "in.parquet"
    pq.write_table(pa.table({"sentence1": ["a", "", "c", "d"], "sentence2": ["w", "x", "y", "z"]}), str(inp))
    score_file(_LengthScorer(), inp, tmp_path / "out.csv", show_progress=True, skip_bad_rows=True, chunk_rows=3)
    (bar,) = bars
    assert bar.totals == [4] and bar.bar_format is None  # from the metadata: exact, never re-estimated
    assert sum(bar.updates) == 4  # 3 scored rows and 1 rejected


def test_quoted_line_ends_make_the_total_an_estimate_that_is_corrected(tmp_path: Path, bars: list[_Bar]) -> None:
    rows = [[f"line one\nline two\nline three {i}", f"other {i}"] for i in range(30)]
    inp = _csv(tmp_path / "in.csv", ["sentence1", "sentence2"], rows)
    score_file(_LengthScorer(), inp, tmp_path / "out.csv", show_progress=True, chunk_rows=10)
    (bar,) = bars
    assert bar.totals[0] == 90  # 3 lines a record
    assert bar.totals[1] < 90 and bar.total == 30 and sum(bar.updates) == 30


def test_the_python_function_refuses_to_write_over_its_input(tmp_path: Path) -> None:
    """The command refused --output equal to --input; the function replaced the input with the scored table."""
    inp = _csv(tmp_path / "in.csv", ["sentence1", "sentence2"], [["a", "b"], ["c", "d"]])
    before = inp.read_bytes()
    alias = tmp_path / "sub" / ".." / "in.csv"
    (tmp_path / "sub").mkdir()
    for output in (inp, alias):
        with pytest.raises(ValueError, match="is the input file; write the scores to another file"):
            score_file(_LengthScorer(), inp, output)
    assert inp.read_bytes() == before


# ---- 2. a long CSV cell is read as JSONL reads it, and truncation is told ----------------------------------------


def test_a_csv_cell_over_128_kib_is_scored_like_the_same_jsonl_text(tmp_path: Path, bi_scorer) -> None:
    long = "a man plays guitar in the park " * 5000  # 155 KB
    header = ["sentence1", "sentence2"]
    rows = [[S1[0], S2[0]], [long, S2[1]], [S1[2], S2[2]]]
    inp = _csv(tmp_path / "in.csv", header, rows)
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps(dict(zip(header, r))) + "\n" for r in rows), encoding="utf-8")
    notes: list[str] = []
    report = score_file(bi_scorer, inp, tmp_path / "out.jsonl", skip_bad_rows=True, notify=notes.append)
    assert (report["rows_scored"], report["rows_skipped"]) == (3, 0)
    assert report["rows_truncated"] == 1 and report["token_limit"] == 32
    assert notes == [
        "1 row was longer than the model's 32-token limit and was truncated (the first is row 2): the model reads "
        "only the start of the text"
    ]
    assert not rejects_path(tmp_path / "out.jsonl").exists()
    from_jsonl = score_file(bi_scorer, jsonl, tmp_path / "out2.jsonl", notify=notes.append)
    assert from_jsonl["rows_truncated"] == 1 and len(notes) == 2  # JSONL says so too now
    scores = [json.loads(x)["score"] for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    again = [json.loads(x)["score"] for x in (tmp_path / "out2.jsonl").read_text().splitlines()]
    np.testing.assert_allclose(scores, again, atol=1e-6)


def test_truncation_counts_the_texts_each_encoder_reads(tmp_path: Path, tiny_bert_dir: Path, bi_scorer) -> None:
    from finesim.evaluation.scoring import ConditionalScorer
    from finesim.models.builders import build_cross_encoder, build_tri_encoder

    long = " ".join(["the cat plays"] * 12)  # 36 words: over 32 tokens alone
    medium = " ".join(["the cat"] * 9)  # 18 words: over 32 tokens only beside the condition (a bi-encoder's pair)
    rows = [["a man", "a woman", "the color"], [medium, "a dog", medium], ["a car", "a red car", long]]
    inp = _csv(tmp_path / "in.csv", ["sentence1", "sentence2", "condition"], rows)
    tri = ConditionalScorer(build_tri_encoder(str(tiny_bert_dir), head="hadamard", max_length=32))
    cross = ConditionalScorer(build_cross_encoder(str(tiny_bert_dir), max_length=32))
    found = {}
    for name, scorer in (("bi", bi_scorer), ("tri", tri), ("cross", cross)):
        found[name] = score_file(scorer, inp, tmp_path / f"{name}.csv", notify=lambda _: None)["rows_truncated"]
    # bi: (s, c) pairs of rows 2 and 3; tri: each text alone, only row 3's condition; cross: (s1, s2 [SEP] c)
    assert found == {"bi": 2, "tri": 1, "cross": 2}
    assert score_file(_LengthScorer(), inp, tmp_path / "x.csv")["rows_truncated"] is None  # not a finesim model


# ---- 3. the first bad row of the file ------------------------------------------------------------------------------


def test_the_first_bad_row_in_file_order_is_named(tmp_path: Path) -> None:
    inp = tmp_path / "in.csv"
    # row 2: an empty sentence2; row 3: a ragged record (found by the reader, which read the chunk first)
    inp.write_text("sentence1,sentence2,id\na,b,1\nc,,2\nd,e,3,extra\n,f,4\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"row 2 \(line 3\), column 'sentence2': text is empty"):
        score_file(_LengthScorer(), inp, tmp_path / "out.csv")
    # two bad rows in different columns, the later one in the column checked first
    inp.write_text("sentence1,sentence2,condition\na,b,c\nd,e,\n,f,g\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"row 2 \(line 3\), column 'condition'"):
        score_file(_LengthScorer(), inp, tmp_path / "out.csv")
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"sentence1": "a", "sentence2": "b"}\n{"sentence1": "c", "sentence2": ""}\n[1]\n')
    with pytest.raises(DataFormatError, match=r"in\.jsonl, row 2, column 'sentence2'"):
        score_file(_LengthScorer(), jsonl, tmp_path / "out.csv")
    assert not (tmp_path / "out.csv").exists()


# ---- 4. CSV -> Parquet keeps column types ---------------------------------------------------------------------------


def test_csv_to_parquet_keeps_column_types(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    header = ["sentence1", "sentence2", "label", "weight", "gold", "code"]
    rows = [[a, b, str(i), f"{i / 2}", "true" if i % 2 else "false", f"00{i}"] for i, (a, b) in enumerate(zip(S1, S2))]
    inp = _csv(tmp_path / "in.csv", header, rows)
    report = score_file(_LengthScorer(), inp, tmp_path / "out.parquet", chunk_rows=2)
    table = pq.read_table(str(tmp_path / "out.parquet"))
    types = {f.name: str(f.type) for f in table.schema}
    assert types == {
        "sentence1": "string",
        "sentence2": "string",
        "label": "int64",
        "weight": "double",
        "gold": "bool",
        "code": "string",  # 000, 001: identifiers keep their zeros
        "score": "double",
    }
    assert table.column("label").to_pylist() == [0, 1, 2, 3, 4]
    assert report["column_types"] == {"label": "int64", "weight": "float64", "gold": "bool"}


# ---- 5. killed runs and stale rejects -------------------------------------------------------------------------------


KILLED_RUN = """
import sys, time
import numpy as np
from finesim.evaluation.score_file import score_file

class Slow:
    def score(self, s1, s2, conditions=None):
        print("scoring", flush=True)
        time.sleep(600)

score_file(Slow(), sys.argv[1], sys.argv[2])
"""


def test_a_killed_runs_temp_file_is_removed_by_the_next_run(tmp_path: Path) -> None:
    inp = _csv(tmp_path / "in.csv", ["sentence1", "sentence2"], [[a, b] for a, b in zip(S1, S2)])
    out = tmp_path / "out.csv"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, str(inp), str(out)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "scoring"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    (left,) = [p for p in tmp_path.iterdir() if p.name.startswith(".out.csv.")]
    assert left.name.startswith(f".out.csv.{child.pid}-") and left.name.endswith(".tmp")
    notes: list[str] = []
    report = score_file(_LengthScorer(), inp, out, notify=notes.append)
    assert not left.exists() and report["temp_files_removed"] == [str(left)]
    assert notes == [f"removed 1 temporary file(s) of killed runs beside {out} ({left.name})"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "out.csv"]


def test_a_clean_rerun_removes_the_earlier_rejects_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    bad = _csv(tmp_path / "bad.csv", ["sentence1", "sentence2"], [["a", "b"], ["", "c"]])
    first = score_file(_LengthScorer(), bad, out, skip_bad_rows=True)
    assert first["rows_skipped"] == 1 and rejects_path(out).is_file()
    good = _csv(tmp_path / "good.csv", ["sentence1", "sentence2"], [["a", "b"], ["d", "c"]])
    notes: list[str] = []
    report = score_file(_LengthScorer(), good, out, skip_bad_rows=True, notify=notes.append)
    assert report["rejects"] is None and report["stale_rejects_removed"] == str(rejects_path(out))
    assert not rejects_path(out).exists()
    assert notes == [f"removed {rejects_path(out)}: it listed the bad rows of an earlier run, and this run had none"]
    # a failed run leaves both the output and the rejects of the last good run
    score_file(_LengthScorer(), bad, out, skip_bad_rows=True)
    with pytest.raises(DataFormatError):
        score_file(_LengthScorer(), bad, out)
    assert rejects_path(out).is_file()

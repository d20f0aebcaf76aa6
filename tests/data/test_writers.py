"""Table writers: the format by the same extension table as the readers, written atomically with the mode a plain
open() would give."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from finesim.data.table import EXTENSIONS, detect_format, read_table
from finesim.data.writers import WRITE_FORMATS, TableWriter, cell_kinds, output_format

ROWS = [{"sentence1": "a man", "sentence2": "a woman", "label": 1.5}, {"sentence1": "x", "sentence2": "y", "label": 0}]


@pytest.mark.parametrize("extension", sorted(EXTENSIONS))
def test_writer_and_reader_agree_on_every_extension(extension: str) -> None:
    name = f"out{extension}"
    assert output_format(name) == detect_format(name) == EXTENSIONS[extension]
    assert output_format(name) in WRITE_FORMATS


def test_unknown_extension_is_refused() -> None:
    with pytest.raises(ValueError, match=r"cannot tell the output format of 'out\.xlsx'"):
        output_format("out.xlsx")


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
@pytest.mark.parametrize("name", ["t.csv", "t.jsonl", "t.pq"])
def test_commit_moves_a_complete_file_into_place(tmp_path: Path, name: str, umask: int, mode: int) -> None:
    out = tmp_path / "sub" / name
    old = os.umask(umask)
    try:
        with TableWriter(out, ["sentence1", "sentence2", "label"]) as writer:
            writer.write(ROWS)
            assert not out.exists()  # only the temporary file so far
    finally:
        os.umask(old)
    assert [p.name for p in out.parent.iterdir()] == [name]
    assert stat.S_IMODE(out.stat().st_mode) == mode
    dataset, _ = read_table(out, conditions="none")
    assert dataset["sentence1"] == ["a man", "x"]


def test_a_failure_leaves_the_earlier_file(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    out.write_text("old\n", encoding="utf-8")
    with pytest.raises(RuntimeError), TableWriter(out, ["sentence1", "sentence2"]) as writer:
        writer.write(ROWS)
        raise RuntimeError("stop")
    assert out.read_text(encoding="utf-8") == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]


@pytest.mark.parametrize(
    ("cell", "kinds"),
    [
        ("12", {"int", "float"}),
        ("-0", {"int", "float"}),
        ("1.5", {"float"}),
        ("1e-3", {"float"}),
        ("NaN", {"float"}),
        ("true", {"bool"}),
        ("False", {"bool"}),
        ("007", set()),  # an identifier: its leading zero would be lost
        ("99999999999999999999", set()),  # beyond int64: digits would be lost
        (" 1", set()),
        ("1,5", set()),
        ("yes", set()),
    ],
)
def test_cell_kinds(cell: str, kinds: set[str]) -> None:
    assert cell_kinds(cell) == kinds


def test_text_columns_get_their_types_in_parquet(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    columns = ["id", "label", "weight", "flag", "code", "text", "empty"]
    out = tmp_path / "t.parquet"
    with TableWriter(out, [*columns, "score"], infer_types=columns) as writer:
        first = {"id": "1", "label": "3", "weight": "0.5", "flag": "true", "code": "007", "text": "a", "empty": ""}
        writer.write([{**first, "score": 0.25}])
        # a later batch: an empty cell (a null), an integer in a number column, a number in a text column
        second = {"id": "2", "label": "", "weight": "2", "flag": "False", "code": "12", "text": "4", "empty": ""}
        writer.write([{**second, "score": 1.0}])
        assert writer.inferred_types() == {"id": "int64", "label": "int64", "weight": "float64", "flag": "bool"}
    table = pq.read_table(out)
    types = {f.name: str(f.type) for f in table.schema}
    assert types == {
        "id": "int64",
        "label": "int64",
        "weight": "double",
        "flag": "bool",
        "code": "string",
        "text": "string",
        "empty": "string",
        "score": "double",
    }
    assert table.column("label").to_pylist() == [3, None] and table.column("weight").to_pylist() == [0.5, 2.0]
    assert table.column("code").to_pylist() == ["007", "12"]
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]  # the rewrite left no temporary file


def test_other_formats_write_the_text_as_it_is(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    with TableWriter(out, ["label"], infer_types=["label"]) as writer:
        writer.write([{"label": "007"}, {"label": "1"}])
        assert writer.inferred_types() == {}
    assert out.read_text(encoding="utf-8").splitlines() == ["label", "007", "1"]

"""Table writers: the format by the same extension table as the readers, written atomically with the mode a plain
open() would give."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from finesim.data.table import EXTENSIONS, detect_format, read_table
from finesim.data.writers import WRITE_FORMATS, TableWriter, output_format

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

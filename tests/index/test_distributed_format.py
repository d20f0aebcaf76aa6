"""The Ray index build tells a file's format with finesim's one detector (:func:`finesim.data.table.detect_format`),
limited to what Ray Data reads; no Ray needed."""

from __future__ import annotations

import pytest

from finesim.data.errors import DataFormatError
from finesim.index.distributed import strict_record_count, table_format


def test_the_format_comes_from_the_shared_detector(tmp_path) -> None:
    assert table_format(tmp_path / "c.tab") == "tsv"
    assert table_format(tmp_path / "c.pq") == "parquet"  # the readers' extension, unknown to the old Ray table
    assert table_format(tmp_path / "c.txt", "JSONL") == "jsonl"  # a named format, as every finesim reader takes it
    with pytest.raises(DataFormatError, match=r"unknown table format 'json' \(did you mean 'jsonl'\?\)"):
        table_format(tmp_path / "c.csv", "json")  # the old Ray-only alias is gone: one vocabulary
    with pytest.raises(DataFormatError, match=r"c\.csv: --ray reads csv, tsv, jsonl, parquet files, not format 'hf'"):
        table_format(tmp_path / "c.csv", "hf")
    (tmp_path / "c.xlsx").write_text("x")
    with pytest.raises(DataFormatError, match=r"cannot tell the table format from the extension '\.xlsx'"):
        table_format(tmp_path / "c.xlsx")


def test_the_strict_pass_reads_as_the_local_build(tmp_path) -> None:
    """pyarrow's CSV parser (Ray Data's) read `"A big" dog runs.` as `A big dog runs.` and skipped blank lines
    without a word; the strict pass before it refuses the first and counts the second, as the local build does."""
    good = tmp_path / "good.csv"
    good.write_text('text\n"a, quoted text"\n\nsecond one\n\n', encoding="utf-8")
    assert strict_record_count(good, "csv") == (2, 2)
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"text": "a"}\n\n{"text": "b"}\n', encoding="utf-8")
    assert strict_record_count(jsonl, "jsonl") == (2, 1)
    bad = tmp_path / "bad.csv"
    bad.write_text('text\n"A big" dog runs.\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.csv, row 1 \(line 2\).*text after"):
        strict_record_count(bad, "csv")

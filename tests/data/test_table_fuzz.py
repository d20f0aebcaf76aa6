"""Property-based checks: any bytes or text give valid rows or a DataFormatError, never another exception."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finesim.data import DataFormatError, open_table, read_csts
from finesim.data import table as table_module
from finesim.data.csv_records import unclosed_quote

FUZZ = settings(max_examples=200, deadline=None, database=None)
# quotes, separators, every line end, letters, a NUL and non-ASCII (2-, 3- and 4-byte UTF-8)
ALPHABET = '"",,\t\r\n\n ab1\x00é中😀'
CHUNK_SIZES = st.sampled_from([3, 4, 7, 64, 256 * 1024])  # small chunks split \r\n and multi-byte characters
EOL = re.compile(rb"\r\n|\r|\n")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@contextmanager
def chunked(size: int) -> Iterator[None]:
    with mock.patch.object(table_module, "_CHUNK_BYTES", size):
        yield


def blank(fields: list[str]) -> bool:
    return not any(field.strip() for field in fields)


def reference_csv(text: str, delimiter: str) -> tuple[list[str], list[list[str]]] | None:
    """The header and rows Python's csv module reads from ``text`` in strict mode (text after a closing quote is an
    error there); None when finesim must refuse the file."""
    text = text.removeprefix("\ufeff")
    if unclosed_quote(text, delimiter) is not None:  # the csv module would read the rest of the file silently
        return None
    try:
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
        records = [r for r in reader if not blank(r)]
    except csv.Error:
        return None
    if not records:
        return None
    header = [name.strip() for name in records[0]]
    if len(set(header)) != len(header) or any(len(r) != len(header) for r in records[1:]):
        return None
    return header, records[1:]


def read_all(path: Path, fmt: str) -> list[dict[str, object]] | DataFormatError:
    try:
        return [record.values for record in open_table(path, format=fmt)]
    except DataFormatError as err:
        return err


@FUZZ
@given(text=st.text(alphabet=ALPHABET, max_size=120), fmt=st.sampled_from(["csv", "tsv"]), chunk=CHUNK_SIZES)
def test_delimited_text_reads_as_the_csv_module_or_fails_cleanly(folder: Path, text: str, fmt: str, chunk: int) -> None:
    path = folder / f"t.{fmt}"
    path.write_bytes(text.encode("utf-8"))
    with chunked(chunk):
        got = read_all(path, fmt)
    expected = reference_csv(text, "," if fmt == "csv" else "\t")
    if expected is None:
        assert isinstance(got, DataFormatError)
    else:
        header, rows = expected
        assert got == [dict(zip(header, row)) for row in rows]


@FUZZ
@given(data=st.binary(max_size=120), fmt=st.sampled_from(["csv", "tsv", "jsonl"]), chunk=CHUNK_SIZES)
def test_random_bytes_give_rows_or_a_located_error(folder: Path, data: bytes, fmt: str, chunk: int) -> None:
    path = folder / f"b.{fmt}"
    path.write_bytes(data)
    with chunked(chunk):
        got = read_all(path, fmt)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        assert isinstance(got, DataFormatError)  # a bad byte is never read past
        if "not valid UTF-8" in got.reason:
            ends = data.count(b"\n", 0, err.start) if fmt == "jsonl" else len(EOL.findall(data, 0, err.start))
            assert got.line == ends + 1
            assert f"at offset {err.start})" in got.reason


@FUZZ
@given(text=st.text(alphabet='{}[]":,\r\n\n 1a\\é', max_size=80), chunk=CHUNK_SIZES)
def test_jsonl_text_gives_the_json_objects_or_fails_cleanly(folder: Path, text: str, chunk: int) -> None:
    path = folder / "t.jsonl"
    path.write_bytes(text.encode("utf-8"))
    with chunked(chunk):
        got = read_all(path, "jsonl")
    lines = [line for line in io.StringIO(text.removeprefix("\ufeff"), newline="\n") if line.strip()]
    try:
        objects = [json.loads(line) for line in lines]
        valid = bool(objects) and all(isinstance(o, dict) for o in objects)
    except json.JSONDecodeError:
        valid = False
    if valid:
        assert got == objects
    else:
        assert isinstance(got, DataFormatError)


# C-STS files through csv_records: random junk and rows that are often valid
FIELD = st.one_of(
    st.text(alphabet=ALPHABET, max_size=8),
    st.sampled_from(["a b", '"q, ""x""\nr"', "1", "4.5", "-1", "0", "5", " "]),
)
ROW = st.lists(FIELD, min_size=3, max_size=5)
LINE_END = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def csts_bodies(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return draw(st.text(alphabet=ALPHABET, max_size=120))
    end = draw(LINE_END)
    return "".join(",".join(row) + end for row in draw(st.lists(ROW, max_size=6)))


@FUZZ
@given(body=csts_bodies())
def test_csts_reader_gives_rows_or_a_data_format_error(folder: Path, body: str) -> None:
    path = folder / "c.csv"
    text = "sentence1,sentence2,condition,label\n" + body
    path.write_bytes(text.encode("utf-8"))
    try:
        ds, report = read_csts(path, keep_unlabeled=True)
    except DataFormatError:
        return
    records = [r for r in csv.reader(io.StringIO(text, newline="")) if not blank(r)]
    assert len(ds) == report.rows_read == len(records) - 1
    assert unclosed_quote(text) is None

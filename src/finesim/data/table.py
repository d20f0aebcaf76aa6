"""Reading users' own tables (CSV, TSV, JSONL, Parquet, Hugging Face datasets) with located errors.

Two layers:

* :func:`open_table` returns a :class:`TableReader`: iterate it (or its :meth:`TableReader.chunks`) to stream the
  records of a file of any size with flat memory, each a :class:`TableRecord` carrying its record number, the line
  it starts on and its values by column name.
* :func:`read_table` collects the records into a ``datasets.Dataset`` with finesim's column names (``sentence1``,
  ``sentence2``, ``condition``, ``label``, ``row``), mapping them from the table's own names and checking every value.

CSV and TSV are read in binary chunks and split into physical lines at ``\\n``, ``\\r\\n`` and a bare ``\\r`` (the
lines Python's ``csv`` module sees with ``newline=""``); each run of complete lines is decoded on its own, so a byte
that is not UTF-8 is reported with its line and byte offset, and a UTF-8 byte order mark is removed. The lines go to
``csv.reader`` in its default dialect, strict: text after a quoted field's closing quote is an error (the lenient
reading drops the quotes and glues the text on, changing it silently).

A field may be as long as :data:`MAX_FIELD_CHARS` (the ``csv`` module's own limit, 128 KiB, is raised to it while
finesim's reader parses a record, and put back after: a long text in a CSV cell is read as it would be from a JSONL
line).

That dialect reads a quote that never closes silently as the rest of the file. The stream detects it without a
second pass: the reader only asks its line source for a line past the end of the file while a quoted field is still
open, so the source notes when it runs out, and a record returned after that ended inside an open quote. In a large
file the runaway field reaches :data:`MAX_FIELD_CHARS` first and the reader raises ``csv.Error``. In both cases
the lines of the current record, which the source keeps (and drops at every record, so they are bounded by the
field size limit and by :data:`MAX_RECORD_CHARS`), are scanned with :func:`~finesim.data.csv_records.unclosed_quote`
to name the line and column where the quote opened.

:meth:`TableReader.count_rows` tells how many records a table has before it is read (for a progress bar): exactly
from a Parquet file's metadata or a dataset's length, and estimated from a fast count of line ends for CSV, TSV and
JSONL (a quoted field over several lines and blank lines make the estimate high; :meth:`RowCount.estimate` corrects
it from the records read so far).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import numbers
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from datasets import Dataset, DatasetDict, Features, Value

from finesim.data._io import check_range, close_match, parse_label, require_text
from finesim.data.csv_records import text_after_quote_error, unclosed_quote, unclosed_quote_error
from finesim.data.errors import DataFormatError, LoadReport
from finesim.options import did_you_mean

logger = logging.getLogger(__name__)

TABLE_FORMATS = ("csv", "tsv", "jsonl", "parquet", "hf")
HUB_FORMAT = "hub"
ALL_FORMATS = (*TABLE_FORMATS, HUB_FORMAT)
EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
TABLE_COLUMNS = ("sentence1", "sentence2", "condition", "label")
CONDITIONS = ("required", "optional", "none")
BAD_RECORDS = ("raise", "yield")

MAX_LINE_BYTES = 64 * 1024 * 1024
"""A physical line longer than this (no line end in sight) is an error rather than read whole into memory."""
MAX_RECORD_CHARS = 64 * 1024 * 1024
"""A CSV/TSV record longer than this is an error (a backstop for a raised ``csv.field_size_limit``)."""
MAX_FIELD_CHARS = 16 * 1024 * 1024
"""A CSV/TSV field longer than this is an error: the ``csv`` field size limit while finesim reads a record (the
module's default, 128 KiB, would refuse a long text that JSONL reads)."""
COUNT_ALL_BYTES = 1024**3
"""A CSV, TSV or JSONL file up to this size has its line ends counted to the end for :meth:`TableReader.count_rows`;
a larger one is estimated from its first :data:`COUNT_SAMPLE_BYTES`."""
COUNT_SAMPLE_BYTES = 64 * 1024 * 1024

_CHUNK_BYTES = 256 * 1024
_BATCH_ROWS = 1024
_BOM = b"\xef\xbb\xbf"
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
_DELIMITERS = {"csv": ",", "tsv": "\t"}
_FORMATS_HINT = (
    "finesim reads .csv, .tsv/.tab, .jsonl/.ndjson and .parquet/.pq files, a folder written by a dataset's "
    f"save_to_disk, or a Hub dataset id owner/name; pass format= one of {list(ALL_FORMATS)} (--format on the command "
    "line) to name it"
)


# --------------------------------------------------------------------------------------------------------------------
# formats


def detect_format(path: str | Path, explicit: str | None = None) -> str:
    """The table format of ``path``: one of :data:`TABLE_FORMATS` or ``"hub"``.

    Args:
        path: a file, a folder written by ``save_to_disk``, or a Hub dataset id ``owner/name``.
        explicit: a format named by the user; it wins over the extension (case and a leading dot are ignored).

    Raises:
        DataFormatError: an unknown ``explicit`` format (with a did-you-mean), or a path whose format cannot be told
            (an unknown extension, a folder not written by ``save_to_disk``, a missing file that is no Hub id).
    """
    if explicit is not None:
        name = explicit.strip().lower().lstrip(".")
        if name in ALL_FORMATS:
            return name
        hint = did_you_mean(name, ALL_FORMATS)
        raise DataFormatError(
            f"unknown table format {explicit!r}{hint}; the formats are {list(ALL_FORMATS)}", path=path
        )
    p = Path(path)
    if p.is_dir():
        if (p / "state.json").is_file() or (p / "dataset_dict.json").is_file():
            return "hf"
        raise DataFormatError(
            f"is a folder but not one written by save_to_disk (it has no state.json or dataset_dict.json); "
            f"{_FORMATS_HINT}",
            path=p,
        )
    found = EXTENSIONS.get(p.suffix.lower())
    if found is not None:
        return found
    if not p.exists():
        if _HUB_ID.fullmatch(str(path)):
            return HUB_FORMAT
        raise DataFormatError(f"table file not found; {_FORMATS_HINT}", path=p)
    raise DataFormatError(f"cannot tell the table format from the extension {p.suffix!r}; {_FORMATS_HINT}", path=p)


# --------------------------------------------------------------------------------------------------------------------
# records and readers


@dataclass(frozen=True, slots=True)
class TableRecord:
    """One record of a table.

    Attributes:
        row: the 1-based record number (a header excluded, blank lines not counted).
        line: the 1-based physical line where the record starts (CSV, TSV, JSONL); None for Parquet and datasets.
        values: every column of the record by name, in the table's column order (a JSONL record holds the keys it
            has, in the first object's order; a key the first object lacks makes the record malformed).
        error: None, except for a malformed record yielded by a reader opened with ``bad_records="yield"``; its
            ``values`` are then what could be read (the fields matched to the header in order, or nothing).
        raw: for such a record, its text as in the file (to write to a rejects file); otherwise None.
    """

    row: int
    line: int | None
    values: dict[str, Any]
    error: DataFormatError | None = None
    raw: str | None = None


@dataclass(frozen=True)
class RowCount:
    """How many records a table has, counted before it is read (:meth:`TableReader.count_rows`).

    Attributes:
        rows: the number of records (exact), or an estimate.
        exact: whether ``rows`` is exact (Parquet metadata, a dataset's length) or estimated from line ends (CSV,
            TSV, JSONL: a record over several lines and blank lines count once per line).
        lines: for an estimate, the file's number of lines (itself estimated for a file over
            :data:`COUNT_ALL_BYTES`); ``before``: the lines before the first record (a header).
    """

    rows: int
    exact: bool
    lines: int | None = None
    before: int = 0

    def estimate(self, rows_read: int, line: int | None) -> int:
        """The number of records, re-estimated once ``rows_read`` records have been read, the last of them starting
        on ``line``: the rows per line seen so far, over the file's lines (never below ``rows_read``)."""
        if self.exact or self.lines is None or line is None or line <= self.before or rows_read < 1:
            return max(self.rows, rows_read)
        per_line = rows_read / (line - self.before)
        return max(rows_read, round(rows_read + (self.lines - line) * per_line))


def count_lines(path: Path, *, universal: bool) -> tuple[int, bool]:
    """The number of lines of a text file, fast (line ends counted in binary chunks, nothing decoded), and whether it
    is exact: a file over :data:`COUNT_ALL_BYTES` is estimated from its first :data:`COUNT_SAMPLE_BYTES`. Lines end at
    ``\\n``, and with ``universal`` also at ``\\r\\n`` and a bare ``\\r`` (as the CSV reader counts them); a last line
    without a line end counts."""
    size = path.stat().st_size
    limit = size if size <= COUNT_ALL_BYTES else COUNT_SAMPLE_BYTES
    lines = read = 0
    last = b""
    with path.open("rb") as handle:
        while read < limit:
            chunk = handle.read(min(1 << 20, limit - read))
            if not chunk:
                break
            lines += chunk.count(b"\n")
            if universal:
                lines += chunk.count(b"\r") - chunk.count(b"\r\n") - (last == b"\r" and chunk[:1] == b"\n")
            read += len(chunk)
            last = chunk[-1:]
    if read < size:  # a sample of a large file
        return round(lines * size / max(read, 1)), False
    if last and last not in ((b"\n", b"\r") if universal else (b"\n",)):
        lines += 1
    return lines, True


class TableReader:
    """A table opened by :func:`open_table`: iterate it to stream its :class:`TableRecord` s.

    Every iteration reads the table again from its start (a file is opened and closed by each pass), so a reader can
    be iterated more than once; a :class:`LoadReport` given to :func:`open_table` counts the blank lines of every pass.

    Attributes:
        path: the file or folder (a ``Path``), or the Hub id (a ``str``).
        format: one of :data:`TABLE_FORMATS` or ``"hub"``.
        columns: the column names in file order: the header (CSV, TSV), the keys of the first JSON object (JSONL) or
            the schema (Parquet, datasets).
        header_line: the line the header (CSV, TSV) or the first object (JSONL) is on; None for the other formats.
    """

    def __init__(
        self,
        path: Path | str,
        format: str,
        columns: list[str],
        records: Callable[[], Iterator[TableRecord]],
        *,
        header_line: int | None = None,
        count: Callable[[], RowCount] | None = None,
    ) -> None:
        self.path = path
        self.format = format
        self.columns = columns
        self.header_line = header_line
        self._records = records
        self._count = count

    def __iter__(self) -> Iterator[TableRecord]:
        return self._records()

    def count_rows(self) -> RowCount | None:
        """How many records the table has, counted without reading them (see the module docstring); None if that
        cannot be told cheaply."""
        return self._count() if self._count is not None else None

    def chunks(self, size: int) -> Iterator[list[TableRecord]]:
        """Consecutive records, ``size`` at a time (the last chunk may be shorter; none for an empty table)."""
        if size < 1:
            raise ValueError(f"chunk size must be at least 1, got {size}")
        chunk: list[TableRecord] = []
        for record in self:
            chunk.append(record)
            if len(chunk) == size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def __repr__(self) -> str:
        return f"TableReader({str(self.path)!r}, format={self.format!r}, columns={self.columns})"


def open_table(
    path: str | Path,
    *,
    format: str | None = None,
    split: str | None = None,
    report: LoadReport | None = None,
    bad_records: str = "raise",
) -> TableReader:
    """Open a table for streaming; its columns are read now, its records when the reader is iterated.

    Args:
        path: a CSV, TSV, JSONL or Parquet file, a folder written by ``save_to_disk``, or a Hub dataset id.
        format: the format, when the extension does not tell it (see :func:`detect_format`).
        split: the split of a ``DatasetDict`` folder or a Hub dataset (needed when it has several).
        report: blank lines skipped while iterating are counted here as ``"blank lines"``; the caller counts the
            records it reads and keeps.
        bad_records: ``"raise"`` (default): a malformed record raises :class:`DataFormatError` while iterating.
            ``"yield"``: a malformed record the reader can step past (a CSV/TSV record with another number of fields
            than the header; a JSONL line that is not a JSON object, or one with a key the first object lacks) is
            yielded with ``error`` and ``raw`` set and
            its row number, and reading goes on. Errors that end the file's reading (bad UTF-8, a quote that never
            closes, text after a quoted field's closing quote, a corrupt Parquet file) always raise.

    Raises:
        DataFormatError: naming the file (and the line, row and column where known) for anything that cannot be read.
    """
    fmt = detect_format(path, format)
    if bad_records not in BAD_RECORDS:
        raise ValueError(f"bad_records must be one of {list(BAD_RECORDS)}, got {bad_records!r}")
    if fmt == HUB_FORMAT:
        return _open_hub(str(path), split)
    p = Path(path)
    if fmt == "hf":
        return _open_saved_dataset(p, split)
    if split is not None:
        raise DataFormatError(
            f"split={split!r} (--split) applies to a folder written by save_to_disk or a Hub dataset, not to a {fmt} "
            "file",
            path=p,
        )
    if not p.is_file():
        raise DataFormatError("table file not found" + (" (it is a folder)" if p.is_dir() else ""), path=p)
    if fmt in _DELIMITERS:
        return _open_delimited(p, fmt, report, bad_records)
    if fmt == "jsonl":
        return _open_jsonl(p, report, bad_records)
    return _open_parquet(p)


# --------------------------------------------------------------------------------------------------------------------
# decoded lines, streamed


class _RecordTooLong(Exception):
    """Raised by a line source when the current CSV record passes :data:`MAX_RECORD_CHARS`."""


class _Lines:
    """The decoded lines of a UTF-8 file, read in binary chunks (a BOM is removed).

    ``universal``: lines end at ``\\n``, ``\\r\\n`` or a bare ``\\r`` (CSV, TSV); otherwise at ``\\n`` only (JSONL).
    Each line keeps its line end. ``line`` counts the lines yielded; ``exhausted`` turns true when the file has been
    read to its end; with ``keep``, ``record`` holds the lines yielded since the last :meth:`new_record`.
    """

    def __init__(self, handle: IO[bytes], path: Path, *, universal: bool, keep: bool = False) -> None:
        self.path = path
        self.universal = universal
        self.keep = keep
        self.line = 0
        self.exhausted = False
        self.record: list[str] = []
        self._record_chars = 0
        self._handle = handle

    def new_record(self) -> None:
        self.record.clear()
        self._record_chars = 0

    def _last_line_end(self, data: bytes, end: int) -> int:
        """The index just past the last line end in ``data[:end]``; 0 if there is none."""
        last = data.rfind(b"\n", 0, end)
        if self.universal:
            last = max(last, data.rfind(b"\r", 0, end))
        return last + 1

    def __iter__(self) -> Iterator[str]:
        read = self._handle.read
        pieces: list[bytes] = []  # bytes read that hold no complete line yet
        held = 0
        offset = 0  # file offset of the first byte in ``pieces``
        first = True
        while True:
            chunk = read(max(_CHUNK_BYTES, len(_BOM)))
            eof = not chunk
            if first:
                first = False
                if chunk.startswith(_BOM):
                    chunk, offset = chunk[len(_BOM) :], len(_BOM)
            held_cr = self.universal and bool(pieces) and pieces[-1].endswith(b"\r")
            if not eof and not held_cr and b"\n" not in chunk and not (self.universal and b"\r" in chunk):
                pieces.append(chunk)
                held += len(chunk)
                if held > MAX_LINE_BYTES:
                    raise DataFormatError(
                        f"the line is longer than {MAX_LINE_BYTES} bytes without a line end "
                        "(is this really a text table?)",
                        path=self.path,
                        line=self.line + 1,
                    )
                continue
            data = b"".join([*pieces, chunk]) if pieces else chunk
            if not eof:
                # a final \r may be the first half of a \r\n: keep it for the next chunk
                end = len(data) - 1 if self.universal and data.endswith(b"\r") else len(data)
                cut = self._last_line_end(data, end)
            else:
                cut = len(data)
            if cut:
                yield from self._decode(data[:cut], offset)
                offset += cut
            pieces = [data[cut:]] if cut < len(data) else []
            held = len(data) - cut
            if eof:
                self.exhausted = True
                return

    def _decode(self, data: bytes, offset: int) -> Iterator[str]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            good = self._last_line_end(data, err.start)
            yield from self._split(data[:good].decode("utf-8"))
            raise DataFormatError(
                f"not valid UTF-8 (byte {data[err.start]:#04x} at offset {offset + err.start}); "
                "re-save the file as UTF-8",
                path=self.path,
                line=self.line + 1,
            ) from None
        yield from self._split(text)

    def _split(self, text: str) -> Iterator[str]:
        # io.StringIO splits exactly as the csv module expects with newline="" (and at \n only with newline="\n")
        for line in io.StringIO(text, newline="" if self.universal else "\n"):
            self.line += 1
            if self.keep:
                self.record.append(line)
                self._record_chars += len(line)
                if self._record_chars > MAX_RECORD_CHARS:
                    raise _RecordTooLong
            yield line


# --------------------------------------------------------------------------------------------------------------------
# CSV and TSV


class _DelimitedPass:
    """One pass over a CSV or TSV file: its header, then its non-blank records."""

    def __init__(self, path: Path, handle: IO[bytes], delimiter: str, report: LoadReport | None) -> None:
        self.path = path
        self.delimiter = delimiter
        self.report = report
        self.lines = _Lines(handle, path, universal=True, keep=True)
        # strict: text after a quoted field's closing quote (`"A big" dog`) is an error, not glued on with the quotes
        # dropped (the default dialect's reading, which changed the text without a word)
        self.reader = csv.reader(iter(self.lines), delimiter=delimiter, strict=True)
        self.header: list[str] = []
        self.header_line = 1

    def read_header(self) -> None:
        item = self.next_record(None)
        if item is None:
            raise DataFormatError("file is empty (expected a header row)", path=self.path)
        self.header_line, fields = item
        self.header = [name.strip() for name in fields]
        seen: set[str] = set()
        for name in self.header:
            if name in seen:
                what = "more than one column has no name" if not name else f"column {name!r} appears more than once"
                raise DataFormatError(
                    f"{what} in the header {self.header}; rename or remove the copy",
                    path=self.path,
                    line=self.header_line,
                    column=name,
                )
            seen.add(name)

    def next_record(self, row: int | None) -> tuple[int, list[str]] | None:
        """The next non-blank record as ``(line, fields)``, None at the end; ``row``: its number (None: header)."""
        while True:
            line = self.reader.line_num + 1
            self.lines.new_record()
            before = csv.field_size_limit(MAX_FIELD_CHARS)  # the module's limit is global: put it back at once
            try:
                fields = next(self.reader)
            except StopIteration:
                return None
            except csv.Error as err:  # e.g. a stray quote read past the field size limit
                what = "CSV" if self.delimiter == "," else "TSV"
                why = f"a field is longer than {MAX_FIELD_CHARS} characters" if "field limit" in str(err) else str(err)
                if "expected after" in why:  # strict: text after a quoted field's closing quote
                    raise text_after_quote_error(
                        self.path, "".join(self.lines.record), (row, line), self.header, self.delimiter
                    ) from None
                at_end = "unexpected end of data" in why  # strict: the file ends inside a quoted field
                raise self._unclosed(row, line, within=None if at_end else MAX_FIELD_CHARS) or DataFormatError(
                    f"malformed {what}: {why}", path=self.path, row=row, line=line
                ) from None
            except _RecordTooLong:
                raise self._unclosed(row, line, within=MAX_RECORD_CHARS) or DataFormatError(
                    f"record is longer than {MAX_RECORD_CHARS} characters", path=self.path, row=row, line=line
                ) from None
            finally:
                csv.field_size_limit(before)
            if self.lines.exhausted:  # the reader needed a line past the end: a quoted field is still open
                raise self._unclosed(row, line) or unclosed_quote_error(
                    self.path, (line, max(len(fields) - 1, 0)), self._where(row, line), self.header, header_line=line
                )
            if not any(field.strip() for field in fields):
                if self.report is not None:
                    self.report.skip("blank lines")
                continue
            return line, fields

    def _where(self, row: int | None, line: int) -> tuple[int, int] | None:
        return (row, line) if row is not None else None

    def _unclosed(self, row: int | None, line: int, within: int | None = None) -> DataFormatError | None:
        """The error for a quote opened in the current record and still open, or None if no quote is open."""
        opened = unclosed_quote("".join(self.lines.record), self.delimiter)
        if opened is None:
            return None
        quote_line, field = opened
        return unclosed_quote_error(
            self.path,
            (line + quote_line - 1, field),
            self._where(row, line),
            self.header,
            header_line=line,
            within=within,
        )


def _other_delimiter(header: list[str], delimiter: str) -> str | None:
    """The separator a one-column header seems to be split by (``;``, ``|``, tab or comma, other than the one read),
    or None."""
    if len(header) != 1:
        return None
    return next((d for d in (";", "|", "\t", ",") if d != delimiter and d in header[0]), None)


def _open_delimited(path: Path, fmt: str, report: LoadReport | None, bad_records: str) -> TableReader:
    delimiter = _DELIMITERS[fmt]
    with path.open("rb") as handle:
        peek = _DelimitedPass(path, handle, delimiter, None)
        peek.read_header()
    header, header_line = peek.header, peek.header_line
    del peek  # nothing may keep it: its line source holds the first chunk of the file
    other = _other_delimiter(header, delimiter)
    if other is not None:  # a missing column's error follows; this says why
        logger.warning(
            "%s: the header is one column, %r, which holds %r: is the file separated by %r? A .csv file is read as "
            "comma-separated and a .tsv file as tab-separated (--format tsv for a tab-separated .csv)",
            path, header[0], other, other,
        )  # fmt: skip

    def records() -> Iterator[TableRecord]:
        with path.open("rb") as handle:
            stream = _DelimitedPass(path, handle, delimiter, report)
            stream.read_header()
            width = len(stream.header)
            row = 0
            while (item := stream.next_record(row + 1)) is not None:
                line, fields = item
                row += 1
                if len(fields) == width:
                    yield TableRecord(row, line, dict(zip(stream.header, fields)))
                    continue
                error = DataFormatError(
                    f"has {len(fields)} fields, the header has {width}", path=path, row=row, line=line
                )
                if bad_records == "raise":
                    raise error
                raw = "".join(stream.lines.record)
                yield TableRecord(row, line, dict(zip(stream.header, fields)), error=error, raw=raw)

    def count() -> RowCount:
        lines, _ = count_lines(path, universal=True)
        return RowCount(max(lines - header_line, 0), False, lines, header_line)

    return TableReader(path, fmt, header, records, header_line=header_line, count=count)


# --------------------------------------------------------------------------------------------------------------------
# JSONL


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return "a number"


def _parse_json_line(path: Path, text: str, row: int, line: int) -> dict[str, Any] | DataFormatError:
    """The JSON object on a line, or the error saying why the line holds none."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        return DataFormatError(f"not valid JSON: {err.msg} (at character {err.colno})", path=path, row=row, line=line)
    if not isinstance(value, dict):
        return DataFormatError(
            f"is {_json_kind(value)}, not a JSON object; JSONL needs one {{...}} object per line",
            path=path,
            row=row,
            line=line,
        )
    return value


def _open_jsonl(path: Path, report: LoadReport | None, bad_records: str) -> TableReader:
    columns: list[str] = []  # stays empty if every line is malformed (with bad_records="yield")
    first_line: int | None = None
    with path.open("rb") as handle:
        row = 0
        for line, text in enumerate(_Lines(handle, path, universal=False), start=1):
            if not text.strip():
                continue
            row += 1
            parsed = _parse_json_line(path, text, row, line)
            if not isinstance(parsed, DataFormatError):
                columns, first_line = list(parsed), line
                break
            if bad_records == "raise":
                raise parsed
    if not row:
        raise DataFormatError("file is empty (expected one JSON object per line)", path=path)
    known = set(columns)

    def checked(value: dict[str, Any], row: int, line: int) -> dict[str, Any] | DataFormatError:
        """The record in the first object's key order; a key the first object lacks is an error (the first object
        fixes the columns, as a CSV header does: a later key would otherwise be dropped without a word)."""
        if list(value) == columns:
            return value
        late = [key for key in value if key not in known]
        if late:
            return DataFormatError(
                f"has key(s) {late} that the first JSON object (line {first_line}) lacks; the first object fixes the "
                "columns: add them to it (null where it has no value)",
                path=path,
                row=row,
                line=line,
            )
        return {name: value[name] for name in columns if name in value}

    def records() -> Iterator[TableRecord]:
        with path.open("rb") as handle:
            row = 0
            for line, text in enumerate(_Lines(handle, path, universal=False), start=1):
                if not text.strip():
                    if report is not None:
                        report.skip("blank lines")
                    continue
                row += 1
                parsed = _parse_json_line(path, text, row, line)
                if not isinstance(parsed, DataFormatError):
                    parsed = checked(parsed, row, line)
                if not isinstance(parsed, DataFormatError):
                    yield TableRecord(row, line, parsed)
                elif bad_records == "raise":
                    raise parsed
                else:
                    yield TableRecord(row, line, {}, error=parsed, raw=text)

    def count() -> RowCount:
        lines, _ = count_lines(path, universal=False)
        before = (first_line or 1) - 1
        return RowCount(max(lines - before, 0), False, lines, before)

    return TableReader(path, "jsonl", columns, records, header_line=first_line, count=count)


# --------------------------------------------------------------------------------------------------------------------
# Parquet, datasets folders and the Hub


def _open_parquet(path: Path) -> TableReader:
    import pyarrow as pa
    import pyarrow.parquet as pq

    failures = (pa.ArrowException, OSError)

    def unreadable(err: Exception, after: int | None = None) -> DataFormatError:
        where = f"cannot read the rows after row {after}" if after is not None else "not a readable Parquet file"
        return DataFormatError(f"{where} (corrupt or truncated?): {err}", path=path)

    try:
        with pq.ParquetFile(path) as parquet:
            columns = list(parquet.schema_arrow.names)
    except failures as err:
        raise unreadable(err) from None
    twice = next((name for i, name in enumerate(columns) if name in columns[:i]), None)
    if twice is not None:
        message = f"column {twice!r} appears more than once in the schema {columns}"
        raise DataFormatError(message, path=path, column=twice)

    def records() -> Iterator[TableRecord]:
        row = 0
        try:
            parquet = pq.ParquetFile(path)
        except failures as err:
            raise unreadable(err) from None
        with parquet:
            batches = parquet.iter_batches(batch_size=_BATCH_ROWS)
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                except failures as err:
                    raise unreadable(err, row) from None
                for values in batch.to_pylist():
                    row += 1
                    yield TableRecord(row, None, values)

    def count() -> RowCount:
        try:
            with pq.ParquetFile(path) as parquet:
                return RowCount(parquet.metadata.num_rows, True)
        except failures as err:
            raise unreadable(err) from None

    return TableReader(path, "parquet", columns, records, count=count)


def _pick_split(loaded: Any, split: str | None, path: Path | str) -> Dataset:
    if isinstance(loaded, DatasetDict):
        splits = list(loaded)
        if split is None:
            raise DataFormatError(
                f"holds a DatasetDict with splits {splits}: choose one with split= (--split on the command line)",
                path=path,
            )
        if split not in loaded:
            close = close_match(split, splits)
            hint = f" (did you mean {close!r}?)" if close else ""
            raise DataFormatError(f"has no split {split!r}{hint}; its splits are {splits}", path=path)
        return loaded[split]
    if not isinstance(loaded, Dataset):
        raise DataFormatError(f"holds a {type(loaded).__name__}, not a Dataset or DatasetDict", path=path)
    if split is not None and loaded.split is not None and str(loaded.split) != split:
        raise DataFormatError(f"holds one Dataset of split {str(loaded.split)!r}, not split {split!r}", path=path)
    if split is not None and loaded.split is None:  # nothing says which split its rows are: all of them are read
        logger.warning("%s holds one Dataset with no split name: split %r not checked, every row is read", path, split)
    return loaded


def _dataset_reader(path: Path | str, fmt: str, dataset: Dataset) -> TableReader:
    dataset = dataset.with_format(None)
    columns = list(dataset.column_names)

    def records() -> Iterator[TableRecord]:
        row = 0
        for batch in dataset.iter(batch_size=_BATCH_ROWS):
            for values in zip(*(batch[name] for name in columns)):
                row += 1
                yield TableRecord(row, None, dict(zip(columns, values)))

    return TableReader(path, fmt, columns, records, count=lambda: RowCount(len(dataset), True))


def _open_saved_dataset(path: Path, split: str | None) -> TableReader:
    from datasets import load_from_disk

    if not path.exists():
        raise DataFormatError("dataset folder not found", path=path)
    try:
        loaded = load_from_disk(str(path))
    except Exception as err:  # datasets raises many kinds (missing files, bad JSON, Arrow errors)
        raise DataFormatError(
            f"cannot load as a folder written by save_to_disk: {type(err).__name__}: {err}", path=path
        ) from None
    return _dataset_reader(path, "hf", _pick_split(loaded, split, path))


def _open_hub(name: str, split: str | None) -> TableReader:
    from datasets import load_dataset
    from huggingface_hub import constants

    try:
        loaded = load_dataset(name, split=split)
    except Exception as err:  # offline, unknown id, unknown split, network errors: all reported the same clean way
        offline = bool(constants.HF_HUB_OFFLINE)
        if offline or isinstance(err, ConnectionError):
            why = "offline mode is on (HF_HUB_OFFLINE)" if offline else f"it is unreachable ({err})"
            raise DataFormatError(
                f"there is no local file or folder by this name, so it was read as a Hugging Face Hub dataset id, "
                f"but the Hub cannot be used: {why}, and the dataset is not in the local cache. Pass a local file "
                "instead (CSV, TSV, JSONL, Parquet, or a folder written by save_to_disk), e.g. one saved where the "
                "Hub is reachable with load_dataset(...).to_json('data.jsonl')",
                path=name,
            ) from None
        raise DataFormatError(f"cannot load the Hub dataset: {type(err).__name__}: {err}", path=name) from None
    return _dataset_reader(name, HUB_FORMAT, _pick_split(loaded, split, name))


# --------------------------------------------------------------------------------------------------------------------
# values and read_table


def record_error(path: str | Path, record: TableRecord, message: str, *, column: str | None = None) -> DataFormatError:
    """A :class:`DataFormatError` located at ``record`` (its row and line) and, if given, ``column``."""
    return DataFormatError(message, path=path, row=record.row, line=record.line, column=column)


def _value(path: str | Path, record: TableRecord, column: str) -> Any:
    try:
        return record.values[column]
    except KeyError:
        raise record_error(
            path, record, f"the record has no {column!r} (its keys are {list(record.values)})", column=column
        ) from None


def _short_repr(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def text_field(path: str | Path, record: TableRecord, column: str) -> str:
    """The text in ``column`` of ``record``: a non-empty string, or a located :class:`DataFormatError`."""
    value = _value(path, record, column)
    if value is None:
        raise record_error(path, record, "text is missing (null)", column=column)
    if not isinstance(value, str):
        message = f"text must be a string, got {type(value).__name__} {_short_repr(value)}"
        raise record_error(path, record, message, column=column)
    return require_text(value, path=path, row=record.row, column=column, line=record.line)


def label_field(
    path: str | Path, record: TableRecord, column: str, label_range: tuple[float, float] | None = None
) -> float:
    """The label in ``column`` of ``record``: a finite number (or numeric string) inside ``label_range`` if given."""
    value = _value(path, record, column)
    if value is None:
        raise record_error(path, record, "label is missing (null)", column=column)
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Real)):
        raise record_error(path, record, f"label {_short_repr(value)} is not a number", column=column)
    text = value if isinstance(value, str) else str(value)
    label = parse_label(text, path=path, row=record.row, column=column, line=record.line)
    if label_range is not None:
        check_range(label, *label_range, path=path, row=record.row, column=column, line=record.line)
    return label


_WHAT_COLUMNS = {"csv": "header", "tsv": "header", "jsonl": "first JSON object", "parquet": "schema"}


def _resolve_columns(
    reader: TableReader, given: Mapping[str, str], require_label: bool, conditions: str
) -> dict[str, str]:
    """Map each finesim column to use to its table column, raising for a required (or renamed) one that is missing."""
    required = {"sentence1", "sentence2"}
    if require_label:
        required.add("label")
    if conditions == "required":
        required.add("condition")
    names = [name for name in TABLE_COLUMNS if not (name == "condition" and conditions == "none")]
    needed = [given.get(name, name) for name in names if name in required]
    wanted: dict[str, str] = {}
    for name in names:
        column = given.get(name, name)
        if column in reader.columns:
            wanted[name] = column
        elif name in required or column != name:  # a column the user renamed must exist
            raise _missing_column(reader, name, column, needed)
    roles: dict[str, str] = {}
    for name, column in wanted.items():  # the same column as both sentences scores every pair against itself
        if column in roles:
            raise DataFormatError(
                f"columns map both {roles[column]} and {name} to the column {column!r}: each role needs its own "
                f"column (the file has {reader.columns})",
                path=reader.path,
                line=reader.header_line,
                column=column,
            )
        roles[column] = name
    return wanted


def _missing_column(reader: TableReader, name: str, column: str, needed: list[str]) -> DataFormatError:
    mapped = f" (for {name})" if column != name else ""
    close = close_match(column, [c for c in reader.columns if c not in needed])
    if close is not None:
        hint = f" (found {close!r}: rename it, or map it with columns={{{name!r}: {close!r}}})"
    else:
        hint = f"; name the column to use with columns={{{name!r}: ...}}" if column == name else ""
    what = _WHAT_COLUMNS.get(reader.format, "dataset")  # a datasets folder or a Hub dataset
    return DataFormatError(
        f"missing column {column!r}{mapped}{hint}; the {what} has {reader.columns}, finesim needs {needed}",
        path=reader.path,
        line=reader.header_line,
        column=column,
    )


def read_table(
    path: str | Path,
    *,
    columns: Mapping[str, str] | None = None,
    format: str | None = None,
    split: str | None = None,
    label_range: tuple[float, float] | None = None,
    require_label: bool = True,
    conditions: str = "optional",
) -> tuple[Dataset, LoadReport]:
    """Read a table into a dataset with columns ``sentence1``, ``sentence2``, [``condition``], [``label``], ``row``.

    Args:
        path: a CSV, TSV, JSONL or Parquet file, a folder written by ``save_to_disk``, or a Hub dataset id.
        columns: finesim's names (``sentence1``, ``sentence2``, ``condition``, ``label``) to the table's column
            names; a name left out is looked up as itself. A column renamed here must exist.
        format: the format, when the extension does not tell it (see :func:`detect_format`).
        split: the split of a ``DatasetDict`` folder or a Hub dataset.
        label_range: the declared label range ``(low, high)``; a label outside it is an error. None: no range check.
        require_label: the label column must exist; if False, it is read when it exists.
        conditions: ``"required"`` (the condition column must exist), ``"optional"`` (read when it exists) or
            ``"none"`` (never read).

    Returns:
        The dataset (``row`` is the 1-based record number in the table) and a :class:`LoadReport` (blank lines are
        counted as skipped; every record read is kept, as any bad value is an error).

    Raises:
        DataFormatError: naming the file, and the row, line and column where known, for any bad input: a missing
            column (with a rename hint), a text that is empty or not a string, a label that is not a finite number or
            lies outside ``label_range``, and anything :func:`open_table` raises.
        ValueError: an unknown key in ``columns`` or an unknown ``conditions`` value.
    """
    if conditions not in CONDITIONS:
        hint = did_you_mean(str(conditions), CONDITIONS)
        raise ValueError(f"conditions must be one of {list(CONDITIONS)}, got {conditions!r}{hint}")
    given = dict(columns or {})
    for name in given:
        if name not in TABLE_COLUMNS:
            hint = did_you_mean(name, TABLE_COLUMNS)
            raise ValueError(f"unknown finesim column {name!r} in columns{hint}; they are {list(TABLE_COLUMNS)}")
    report = LoadReport(path=str(path))
    reader = open_table(path, format=format, split=split, report=report)
    wanted = _resolve_columns(reader, given, require_label, conditions)
    out: dict[str, list[Any]] = {name: [] for name in (*wanted, "row")}
    texts = [(out[name], column) for name, column in wanted.items() if name != "label"]
    label_column = wanted.get("label")
    for record in reader:
        report.rows_read += 1
        for values, column in texts:
            values.append(text_field(reader.path, record, column))
        if label_column is not None:
            out["label"].append(label_field(reader.path, record, label_column, label_range))
        out["row"].append(record.row)
        report.rows_kept += 1
    report.log()
    features = Features(
        {name: Value("float64" if name == "label" else "string") for name in wanted} | {"row": Value("int64")}
    )
    return Dataset.from_dict(out, features=features), report

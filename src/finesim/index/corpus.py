"""Reading a corpus file for an index: one text column, each row one text, in file order.

Files are read with :func:`finesim.data.table.open_table` (CSV, TSV, JSONL, Parquet, Hugging Face datasets;
streaming; errors naming file, row and column). Every row's text must be a non-empty string: the row number of an
index result is the row of the corpus, so a row is never skipped silently. The corpus record kept in the manifest
has the file's path, SHA-256, row count and column.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finesim.data.errors import DataFormatError


@dataclass
class Corpus:
    """The texts of a corpus file and what the manifest records about it."""

    texts: list[str]
    record: dict[str, Any] = field(default_factory=dict)


def file_record(path: str | Path, rows: int, text_column: str, format: str | None = None) -> dict[str, Any]:
    """The manifest's description of a corpus file (a folder, e.g. a saved dataset, has no SHA-256)."""
    from finesim.results import file_sha256

    p = Path(path)
    return {
        "path": str(p.resolve()),
        "sha256": file_sha256(p) if p.is_file() else None,
        "rows": rows,
        "text_column": text_column,
        "format": format,
    }


def missing_column(path: str | Path, column: str, columns: list[str]) -> DataFormatError:
    """The error for a text column a corpus file lacks, listing the columns it has."""
    return DataFormatError(
        f"no column {column!r}; the columns are: {', '.join(repr(c) for c in columns) or '(none)'} "
        "(choose one with --text-column)",
        path=path,
        column=column,
    )


def read_corpus(path: str | Path, text_column: str = "text", format: str | None = None) -> Corpus:
    """Read the ``text_column`` of a corpus file; errors name the file, and the row and column where one is bad.

    Raises:
        DataFormatError: the column is missing (the message lists the columns there are), a text is empty or not a
            string, or the file has no rows.
    """
    texts: list[str] = []
    with _open(path, format) as reader:
        columns = list(reader.columns)
        if text_column not in columns:
            raise missing_column(path, text_column, columns)
        for record in reader:
            value = record.values.get(text_column)
            if not isinstance(value, str) or not value.strip():
                problem = "empty text" if value is None or isinstance(value, str) else f"{type(value).__name__}"
                raise DataFormatError(
                    problem if problem == "empty text" else f"a {problem}, not a text",
                    path=path,
                    row=record.row,
                    column=text_column,
                    line=getattr(record, "line", None),
                )
            texts.append(value)
    if not texts:
        raise DataFormatError("no rows: the corpus is empty", path=path)
    return Corpus(texts, file_record(path, len(texts), text_column, format))


@contextlib.contextmanager
def _open(path: str | Path, format: str | None) -> Iterator[Any]:
    try:
        from finesim.data.table import open_table
    except ImportError:  # TEMPORARY: until finesim.data.table lands on main (see _TemporaryTable)
        reader: Any = _TemporaryTable(path, format)
    else:
        reader = open_table(path, format=format)
    try:
        yield reader
    finally:
        close = getattr(reader, "close", None)
        if close is not None:
            close()


# ---------------------------------------------------------------------------------------------------------------
# TEMPORARY: a minimal CSV / JSONL reader standing in for finesim.data.table.open_table, which is being written on
# main. It mimics the part of its interface used above (``columns``; records with ``row``, ``line``, ``values``)
# and is removed once that module is merged.


@dataclass
class _Record:
    row: int
    line: int
    values: dict[str, Any]


class _TemporaryTable:
    """TEMPORARY CSV / JSONL reader (see the note above)."""

    def __init__(self, path: str | Path, format: str | None = None) -> None:
        from finesim.data._io import read_text

        self.path = Path(path)
        suffix = self.path.suffix.lower().lstrip(".")
        self.format = format or {"jsonl": "jsonl", "ndjson": "jsonl", "csv": "csv"}.get(suffix)
        if self.format not in ("csv", "jsonl"):
            raise DataFormatError(
                f"cannot read format {self.format or suffix!r} yet: use a .csv or .jsonl corpus", path=self.path
            )
        self._text = read_text(self.path, what="corpus file")
        if self.format == "csv":
            import csv
            import io

            reader = csv.reader(io.StringIO(self._text, newline=""))
            self.columns = [h.strip() for h in next(reader, [])]
        else:
            self.columns = self._json_columns()

    def _json_columns(self) -> list[str]:
        for record in self._json_records():
            return list(record.values)
        return []

    def _json_records(self) -> Iterator[_Record]:
        row = 0
        for number, line in enumerate(self._text.splitlines(), start=1):
            if not line.strip():
                continue
            row += 1
            try:
                values = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataFormatError(f"not valid JSON ({err.msg})", path=self.path, row=row, line=number) from None
            if not isinstance(values, dict):
                raise DataFormatError("not a JSON object", path=self.path, row=row, line=number)
            yield _Record(row, number, values)

    def __iter__(self) -> Iterator[_Record]:
        if self.format == "jsonl":
            yield from self._json_records()
            return
        from finesim.data.csv_records import csv_records

        _, records = csv_records(self.path, self._text, [])
        for row, line, fields in records:
            yield _Record(row, line, dict(zip(self.columns, fields)))

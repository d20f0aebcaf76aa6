"""Reading a corpus file for an index: one text column, each row one text, in file order.

Files are read with :func:`finesim.data.table.open_table` (CSV, TSV, JSONL, Parquet, Hugging Face datasets;
streaming; errors naming file, row and column). Every row's text must be a non-empty string: the row number of an
index result is the row of the corpus, so a row is never skipped silently. The corpus record kept in the manifest
has the file's path, SHA-256, row count and column.
"""

from __future__ import annotations

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
        DataFormatError: the file cannot be read, the column is missing (the message lists the columns there are), a
            text is empty or not a string, or the file has no rows.
    """
    from finesim.data.table import open_table, text_field

    reader = open_table(path, format=format)
    if text_column not in reader.columns:
        raise missing_column(path, text_column, list(reader.columns))
    texts = [text_field(path, record, text_column) for record in reader]
    if not texts:
        raise DataFormatError("no rows: the corpus is empty", path=path)
    return Corpus(texts, file_record(path, len(texts), text_column, reader.format))

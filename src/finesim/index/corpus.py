"""Reading a corpus file for an index: one text column, each row one text, in file order; optionally an ID column
and metadata columns.

Files are read with :func:`finesim.data.table.open_table` (CSV, TSV, JSONL, Parquet, Hugging Face datasets;
streaming; errors naming file, row and column). Every row's text must be a non-empty string: the row number of an
index result is the row of the corpus, so a row is never skipped silently. An ID must be a non-empty string or an
integer, unique in the file (the index checks it is unique across the index too); a metadata value is kept as JSON
(a CSV cell is a string; a value JSON cannot hold, such as a date, is kept as its text). The corpus record kept in
the manifest has the file's path, SHA-256, row count and columns.
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finesim.data.errors import DataFormatError, LoadReport

logger = logging.getLogger("finesim.index")


@dataclass
class Corpus:
    """The texts of a corpus file (with their IDs and metadata when asked for) and what the manifest records."""

    texts: list[str]
    record: dict[str, Any] = field(default_factory=dict)
    ids: list[str | int] | None = None
    metadata: list[dict[str, Any]] | None = None


def file_record(
    path: str | Path,
    rows: int,
    text_column: str,
    format: str | None = None,
    *,
    id_column: str | None = None,
    metadata_columns: Sequence[str] = (),
    split: str | None = None,
) -> dict[str, Any]:
    """The manifest's description of a corpus file (a folder, e.g. a saved dataset, has no SHA-256; ``split``: the
    split read from a dataset folder of several)."""
    from finesim.results import file_sha256

    p = Path(path)
    record: dict[str, Any] = {
        "path": str(p.resolve()),
        "sha256": file_sha256(p) if p.is_file() else None,
        "rows": rows,
        "text_column": text_column,
        "format": format,
    }
    if id_column is not None:
        record["id_column"] = id_column
    if metadata_columns:
        record["metadata_columns"] = list(metadata_columns)
    if split is not None:
        record["split"] = split
    return record


def missing_column(path: str | Path, column: str, columns: list[str], flag: str = "--text-column") -> DataFormatError:
    """The error for a column a corpus file lacks, listing the columns it has."""
    return DataFormatError(
        f"no column {column!r}; the columns are: {', '.join(repr(c) for c in columns) or '(none)'} "
        f"(choose one with {flag})",
        path=path,
        column=column,
    )


def check_id(value: Any) -> str | int:
    """An ID as stored: a non-empty string or an integer (not a bool); a ValueError says what is wrong."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"an ID must be a non-empty string or an integer, got {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)  # a Parquet or JSON integer column read as floats
    if isinstance(value, str) and value.strip():
        return value
    raise ValueError(f"an ID must be a non-empty string or an integer, got {type(value).__name__} {value!r}")


def json_value(value: Any) -> Any:
    """A metadata value as JSON holds it: None, bool, int, finite float, str, lists and objects of those; NaN and
    infinities become None; anything else (a date, a decimal, bytes) its text."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return json_value(value.tolist())
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def meta_rows(
    count: int, ids: Iterable[Any] | None, metadata: Iterable[Any] | None, what: str = "corpus"
) -> list[dict[str, Any]] | None:
    """Each row's ``{"id": ..., "metadata": {...}}`` (the keys given), checked: one ID per text, each a non-empty
    string or an integer and unique; one metadata object per text (its values kept as JSON holds them). None when
    neither is given. Errors name the row (0-based)."""
    if ids is None and metadata is None:
        return None
    rows: list[dict[str, Any]] = [{} for _ in range(count)]
    if ids is not None:
        if isinstance(ids, (str, bytes)):
            raise ValueError("ids must be a list with one ID per text, got a single string")
        given = list(ids)
        if len(given) != count:
            raise ValueError(f"{len(given)} IDs for {count} texts: give one ID per text")
        seen: dict[str, int] = {}
        for i, value in enumerate(given):
            try:
                checked = check_id(value)
            except ValueError as err:
                raise ValueError(f"{what} row {i}: {err}") from None
            earlier = seen.setdefault(str(checked), i)
            if earlier != i:
                raise ValueError(f"{what} row {i}: duplicate ID {checked!r} (row {earlier} has it too): IDs are unique")
            rows[i]["id"] = checked
    if metadata is not None:
        if isinstance(metadata, Mapping):
            raise ValueError("metadata must be a list with one dict per text, got a single dict")
        given = list(metadata)
        if len(given) != count:
            raise ValueError(f"{len(given)} metadata objects for {count} texts: give one dict per text ({{}} for none)")
        for i, value in enumerate(given):
            if not isinstance(value, Mapping):
                raise ValueError(f"{what} row {i}: metadata must be a dict, got {type(value).__name__}")
            rows[i]["metadata"] = {str(k): json_value(v) for k, v in value.items()}
    return rows


def parse_columns(text: str | None) -> list[str]:
    """``--metadata-columns A,B``: the names, in order, each once (spaces around a name dropped)."""
    if not text:
        return []
    names = [name.strip() for name in text.split(",")]
    if any(not name for name in names):
        raise ValueError(f"--metadata-columns {text!r}: an empty column name (write A,B,C)")
    return list(dict.fromkeys(names))


def read_corpus(
    path: str | Path,
    text_column: str = "text",
    format: str | None = None,
    *,
    id_column: str | None = None,
    metadata_columns: Sequence[str] = (),
    split: str | None = None,
) -> Corpus:
    """Read the ``text_column`` of a corpus file (and its ``id_column`` and ``metadata_columns``; ``split``: the split
    of a dataset folder or Hub dataset of several); errors name the file, and the row and column where one is bad.

    Raises:
        DataFormatError: the file cannot be read, a column is missing (the message lists the columns there are), a
            text is empty or not a string, an ID is missing, not a string or integer, or a duplicate of an earlier
            row's, or the file has no rows.
    """
    from finesim.data.table import open_table, record_error, text_field

    report = LoadReport(path=str(path))
    reader = open_table(path, format=format, split=split, report=report)
    columns = list(reader.columns)
    if text_column not in columns:
        raise missing_column(path, text_column, columns)
    if id_column is not None and id_column not in columns:
        raise missing_column(path, id_column, columns, "--id-column")
    for name in metadata_columns:
        if name not in columns:
            raise missing_column(path, name, columns, "--metadata-columns")
    if id_column is not None and id_column == text_column:
        raise ValueError(f"--id-column {id_column!r} is the text column: name the column holding the IDs")
    texts: list[str] = []
    ids: list[str | int] | None = [] if id_column is not None else None
    metadata: list[dict[str, Any]] | None = [] if metadata_columns else None
    seen: dict[str, int] = {}
    for record in reader:
        texts.append(text_field(path, record, text_column))
        if ids is not None and id_column is not None:
            try:
                value = check_id(record.values.get(id_column))
            except ValueError as err:
                raise record_error(path, record, str(err), column=id_column) from None
            earlier = seen.setdefault(str(value), record.row)
            if earlier != record.row:
                message = f"duplicate ID {value!r} (row {earlier} has it too): IDs must be unique"
                raise record_error(path, record, message, column=id_column)
            ids.append(value)
        if metadata is not None:
            metadata.append({name: json_value(record.values.get(name)) for name in metadata_columns})
    if not texts:
        raise DataFormatError("no rows: the corpus is empty", path=path)
    description = file_record(
        path, len(texts), text_column, reader.format, id_column=id_column, metadata_columns=metadata_columns,
        split=split,
    )  # fmt: skip
    note_blank_lines(description, report.skipped.get("blank lines", 0))
    return Corpus(texts, description, ids, metadata)


def note_blank_lines(description: dict[str, Any], blank: int) -> None:
    """Record (``blank_lines_skipped``) and warn of a corpus file's skipped blank lines: not texts, so a result's
    row is the record's place in the file, not its line."""
    if blank:
        description["blank_lines_skipped"] = blank
        logger.warning(
            "%s: %d blank line%s skipped (no record; result rows count the %d records, not the file's lines)",
            description["path"], blank, "" if blank == 1 else "s", description["rows"],
        )  # fmt: skip

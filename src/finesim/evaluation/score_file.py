"""Score a table of sentence pairs row by row (``finesim score``): stream in chunks, write atomically.

The input (CSV, TSV, JSONL, Parquet, a datasets folder or a Hub id; :mod:`finesim.data.table`) is read in chunks of
``chunk_rows`` records; each chunk's valid rows are scored with one call of the scorer (each distinct text encoded
once), and the input's columns plus a ``score`` column are written to the output in input order
(:class:`finesim.data.writers.TableWriter`: a temporary file renamed into place at the end, so nothing is left
half-written on a failure or Ctrl-C). Memory does not grow with the file.

Bad rows — an empty or missing text, a record with another number of fields than the header, a JSON line that is not
an object — stop the run with the file, row (line) and column named. With ``skip_bad_rows`` they go to a rejects file
next to the output instead (``<output stem>.rejects.jsonl``: row, line, column, the error and the record) and are
counted in the report; nothing is dropped silently. A byte that is not UTF-8 or a quote that never closes makes the
rest of the file unreadable and always stops the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from finesim.data.errors import DataFormatError, LoadReport


@dataclass(frozen=True)
class Columns:
    """Which input columns hold the texts (``condition`` None: no condition column)."""

    sentence1: str = "sentence1"
    sentence2: str = "sentence2"
    condition: str | None = "condition"
    score: str = "score"


def rejects_path(output: str | Path) -> Path:
    """Where the rejected rows of ``output`` go: ``<stem>.rejects.jsonl`` beside it."""
    out = Path(output)
    return out.with_name(f"{out.stem}.rejects.jsonl")


def _check_columns(path: Path | str, available: list[str], columns: Columns, condition_from_column: bool) -> None:
    from finesim.data._io import close_match

    needed = [columns.sentence1, columns.sentence2] + ([columns.condition] if condition_from_column else [])
    for name in needed:
        if name not in available:
            close = close_match(name, [c for c in available if c not in needed])
            hint = f" (found {close!r}: pass it with the matching --*-column option)" if close else ""
            raise DataFormatError(f"missing column {name!r}{hint}; the input has {available}", path=path, column=name)
    if columns.score in available:
        raise DataFormatError(
            f"the input already has a column {columns.score!r}; pick another name for the scores (--score-column)",
            path=path,
        )


def check_input(
    input_path: str | Path,
    *,
    columns: Columns | None = None,
    condition: str | None = None,
    input_format: str | None = None,
    split: str | None = None,
) -> list[str]:
    """Open the input and check its text columns (before any model is loaded); returns its columns."""
    from finesim.data.table import open_table

    columns = columns or Columns()
    reader = open_table(input_path, format=input_format, split=split)
    from_column = condition is None and columns.condition is not None and columns.condition in reader.columns
    _check_columns(input_path, reader.columns, columns, from_column)
    return reader.columns


def score_file(
    scorer: Any,
    input_path: str | Path,
    output_path: str | Path,
    *,
    columns: Columns | None = None,
    condition: str | None = None,
    input_format: str | None = None,
    output_format: str | None = None,
    split: str | None = None,
    chunk_rows: int = 4096,
    skip_bad_rows: bool = False,
    show_progress: bool = False,
) -> dict[str, Any]:
    """Score every row of ``input_path`` into ``output_path`` (see the module docstring); returns a report.

    Args:
        scorer: a :class:`~finesim.evaluation.scoring.PairScorer` (e.g. a ``ConditionalScorer``).
        columns: the input's text columns and the name of the score column.
        condition: one condition for every row (then no condition column is read).
        input_format / output_format: formats when the file extensions do not tell.
        split: the split of a datasets folder or Hub dataset.
        chunk_rows: rows read and scored at a time.
        skip_bad_rows: send bad rows to the rejects file instead of stopping.
        show_progress: a progress bar with rows/s.
    """
    from tqdm.auto import tqdm

    from finesim.data.table import open_table, text_field
    from finesim.data.writers import TableWriter

    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    columns = columns or Columns()
    report = LoadReport(path=str(input_path))
    reader = open_table(
        input_path, format=input_format, split=split, report=report, bad_records="yield" if skip_bad_rows else "raise"
    )
    from_column = condition is None and columns.condition is not None and columns.condition in reader.columns
    if condition is None and getattr(scorer, "requires_condition", False) and not from_column:
        raise DataFormatError(
            f"the model scores pairs under a condition, but the input has no {columns.condition!r} column; pass "
            "--condition TEXT (one for every row) or --condition-column",
            path=input_path,
        )
    _check_columns(input_path, reader.columns, columns, from_column)
    out_columns = [*reader.columns, columns.score]
    rejects_file = rejects_path(output_path)
    writer = TableWriter(output_path, out_columns, output_format)
    rejects: TableWriter | None = None
    started = time.perf_counter()
    bar = tqdm(desc="scoring", unit=" rows", disable=not show_progress)
    scored = skipped = 0
    try:
        for chunk in reader.chunks(chunk_rows):
            keep, s1, s2, conds = [], [], [], []
            for record in chunk:
                try:
                    if record.error is not None:
                        raise record.error
                    a = text_field(input_path, record, columns.sentence1)
                    b = text_field(input_path, record, columns.sentence2)
                    c = condition if not from_column else text_field(input_path, record, str(columns.condition))
                except DataFormatError as err:
                    if not skip_bad_rows:
                        raise
                    if rejects is None:
                        rejects = TableWriter(rejects_file, ["row", "line", "column", "error", "record"], "jsonl")
                    rejects.write([_reject(record, err)])
                    skipped += 1
                    continue
                keep.append(record)
                s1.append(a)
                s2.append(b)
                conds.append(c)
            if keep:
                scores = scorer.score(s1, s2, conds if (from_column or condition is not None) else None)
                writer.write([{**r.values, columns.score: float(s)} for r, s in zip(keep, scores)])
                scored += len(keep)
            bar.update(len(chunk))
        writer.commit()
        if rejects is not None:
            rejects.commit()
    except BaseException:
        writer.abort()
        if rejects is not None:
            rejects.abort()
        raise
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    return {
        "input": str(input_path),
        "output": str(output_path),
        "rows_scored": scored,
        "rows_skipped": skipped,
        "rejects": str(rejects_file) if skipped else None,
        "blank_lines": report.skipped.get("blank lines", 0),
        "condition": "one for every row" if condition is not None else ("per row" if from_column else "none"),
        "seconds": round(seconds, 3),
        "rows_per_second": round(scored / seconds, 1) if seconds > 0 else None,
    }


def _reject(record: Any, err: DataFormatError) -> dict[str, Any]:
    values = record.values if record.values else None
    return {
        "row": record.row,
        "line": record.line,
        "column": err.column,
        "error": err.reason,
        "record": values if values is not None else getattr(record, "raw", None),
    }

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

Conditions come from the ``condition`` column (or the column named), from one ``condition`` for every row, or from
nowhere; a condition is never dropped silently (:func:`condition_column`): a named column that is missing, a column
that looks like a condition column under another name (``aspect``, ``condtion``), and one condition given for an
input that has its own are all refused before any model is loaded.
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


CONDITION_COLUMN = "condition"
"""The condition column read when none is named (``Columns.condition``'s default)."""

CONDITION_ALIASES = ("aspect", "aspects", "cond", "conditions", "criterion", "criteria", "facet")
"""Column names other datasets give conditions: a file with one of them (or a near-spelling of ``condition``) and no
``condition`` column is refused rather than scored without its conditions."""

_FLAGS = {"sentence1": "--sentence1-column", "sentence2": "--sentence2-column", "condition": "--condition-column"}


def condition_like(available: list[str], exclude: list[str]) -> str | None:
    """A column of ``available`` (not in ``exclude``) that looks like a condition column under another name: a known
    alias (``aspect``, ``conditions``, ...), a name starting with ``condition``, or a near-spelling (``condtion``)."""
    import difflib

    candidates = [c for c in available if c not in exclude]
    for column in candidates:
        name = column.strip().lower()
        if name in CONDITION_ALIASES or name.startswith(CONDITION_COLUMN):
            return column
    lowered = {c.strip().lower(): c for c in candidates}
    close = difflib.get_close_matches(CONDITION_COLUMN, list(lowered), n=1, cutoff=0.85)
    return lowered[close[0]] if close else None


def condition_column(
    path: Path | str,
    available: list[str],
    columns: Columns,
    condition: str | None = None,
    *,
    explicit: bool | None = None,
) -> str | None:
    """The input column that holds the rows' conditions, or None (one ``condition`` for every row, or none at all).

    ``columns.condition`` None reads no condition column (scoring without one is chosen). Otherwise the column is
    named on purpose (``explicit``; by default: any name but ``condition``) and must exist, or it is the default
    ``condition``, read when the input has it. Nothing is dropped silently:

    - a named column that is missing is an error listing the input's columns (with a did-you-mean hint);
    - with no ``condition`` column, a column that looks like one (``aspect``, ``conditions``, ``condtion``) is an
      error naming it and the flag that reads it (``--condition-column aspect``), and ``--no-condition``;
    - a ``condition`` for every row on an input that has its condition column is an error (which one to use is
      unknown).

    Raises:
        DataFormatError: naming the file and the column.
    """
    from finesim.options import did_you_mean

    name = columns.condition
    if name is None:
        return None
    if explicit is None:
        explicit = name != CONDITION_COLUMN
    texts = [columns.sentence1, columns.sentence2, columns.score]
    if condition is not None:
        if name in available:
            raise DataFormatError(
                f"the input has a condition column {name!r} and --condition {condition!r} was given too: drop "
                f"--condition to score each row under its own condition, or remove or rename the column {name!r} "
                f"to score every row under {condition!r}",
                path=path,
                column=name,
            )
        return None
    if name in available:
        return name
    if explicit:
        hint = did_you_mean(name, [c for c in available if c not in texts])
        raise DataFormatError(
            f"missing column {name!r} (named by --condition-column){hint}; the input has {available}",
            path=path,
            column=name,
        )
    alike = condition_like(available, texts)
    if alike is not None:
        raise DataFormatError(
            f"the input has no {name!r} column but has {alike!r}, which looks like one: pass --condition-column "
            f"{alike} to score each row under it, or --no-condition to score without a condition on purpose",
            path=path,
            column=alike,
        )
    return None


def _check_columns(path: Path | str, available: list[str], columns: Columns) -> None:
    """The text columns exist (a missing one names the flag that fixes it) and the score column does not."""
    from finesim.data._io import close_match

    needed = [columns.sentence1, columns.sentence2, *([columns.condition] if columns.condition in available else [])]
    for what, name in (("sentence1", columns.sentence1), ("sentence2", columns.sentence2)):
        if name not in available:
            flag = _FLAGS[what]
            close = close_match(name, [c for c in available if c not in needed])
            hint = f" (found {close!r}: pass {flag} {close})" if close else f" (name the column with {flag} NAME)"
            raise DataFormatError(f"missing column {name!r}{hint}; the input has {available}", path=path, column=name)
    if columns.score in available:
        raise DataFormatError(
            f"the input already has a column {columns.score!r}; pick another name for the scores (--score-column)",
            path=path,
        )


@dataclass(frozen=True)
class InputPlan:
    """What :func:`check_input` found: the input's columns and the column the conditions come from (None: one
    condition for every row, or none)."""

    columns: list[str]
    condition_column: str | None


def check_input(
    input_path: str | Path,
    *,
    columns: Columns | None = None,
    condition: str | None = None,
    input_format: str | None = None,
    split: str | None = None,
    explicit_condition_column: bool | None = None,
) -> InputPlan:
    """Open the input and check its columns (before any model is loaded): the text columns exist and where the
    conditions come from (:func:`condition_column`)."""
    from finesim.data.table import open_table

    columns = columns or Columns()
    reader = open_table(input_path, format=input_format, split=split)
    _check_columns(input_path, reader.columns, columns)
    found = condition_column(input_path, reader.columns, columns, condition, explicit=explicit_condition_column)
    return InputPlan(list(reader.columns), found)


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
    explicit_condition_column: bool | None = None,
) -> dict[str, Any]:
    """Score every row of ``input_path`` into ``output_path`` (see the module docstring); returns a report.

    Args:
        scorer: a :class:`~finesim.evaluation.scoring.PairScorer` (e.g. a ``ConditionalScorer``).
        columns: the input's text columns and the name of the score column; ``columns.condition`` None reads no
            condition column (scoring without a condition, or with ``condition`` for every row).
        condition: one condition for every row; an input that also has the condition column is refused.
        input_format / output_format: formats when the file extensions do not tell.
        split: the split of a datasets folder or Hub dataset.
        chunk_rows: rows read and scored at a time.
        skip_bad_rows: send bad rows to the rejects file instead of stopping.
        show_progress: a progress bar with rows/s.
        explicit_condition_column: whether ``columns.condition`` was named on purpose (it must exist then); by
            default any name but ``condition``. See :func:`condition_column` for how the condition is found.
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
    _check_columns(input_path, reader.columns, columns)
    cond_column = condition_column(input_path, reader.columns, columns, condition, explicit=explicit_condition_column)
    from_column = cond_column is not None
    if condition is None and getattr(scorer, "requires_condition", False) and not from_column:
        if columns.condition is None:
            raise DataFormatError(
                "the model scores pairs only under a condition, so it cannot score without one (--no-condition): "
                "pass --condition TEXT (one for every row) or --condition-column NAME",
                path=input_path,
            )
        raise DataFormatError(
            f"the model scores pairs under a condition, but the input has no {columns.condition!r} column; pass "
            "--condition TEXT (one for every row) or --condition-column NAME",
            path=input_path,
        )
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
                    c = condition if cond_column is None else text_field(input_path, record, cond_column)
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

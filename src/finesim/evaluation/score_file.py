"""Score a table of sentence pairs row by row (``finesim score``): stream in chunks, write atomically.

The input (CSV, TSV, JSONL, Parquet, a datasets folder or a Hub id; :mod:`finesim.data.table`) is read in chunks of
``chunk_rows`` records; each chunk's distinct (sentence1, sentence2, condition) triples are scored :func:`score_rows`
at a time (8 of the scorer's batches; each call encodes each of its distinct texts once), and the input's columns
plus a ``score`` column are written to the output in input order (:class:`finesim.data.writers.TableWriter`: a
temporary file named with the process id, renamed into place at the end, so nothing is left half-written on a
failure or Ctrl-C; those of a killed run are removed when the next run of the same output starts). Memory does not
grow with the file. A CSV or TSV input's integer, number and true/false columns keep those types in a Parquet output.

The progress bar counts the input's rows against a total counted first (:meth:`~finesim.data.table.TableReader.
count_rows`: exact for Parquet and datasets, estimated from the line count for CSV, TSV and JSONL and shown as
``about N``), with rows/s and an ETA; it moves after every call of the scorer.

Bad rows — an empty or missing text, a record with another number of fields than the header, a JSON line that is not
an object — stop the run with the file, row (line) and column named: the first bad row of the file, as each record
is checked when it is read. With ``skip_bad_rows`` they go to a rejects file next to the output instead
(``<output stem>.rejects.jsonl``: row, line, column, the error, the record's fields and, for a record that is
not well-formed, its text as in the file) and are counted in the report; nothing
is dropped silently. A run without bad rows removes the rejects file an earlier run left (it would describe another
output). A byte that is not UTF-8 or a quote that never closes makes the rest of the file unreadable and always stops
the run.

A text longer than the model reads (its token limit, ``max_seq_length``) is truncated by the model, as everywhere in
sentence-transformers; the rows this happened to are counted (:class:`Truncation`) and the count is told once at the
end. CASE models and Ray actors are not counted (``rows_truncated`` is None in the report).

Conditions come from the ``condition`` column (or the column named), from one ``condition`` for every row, or from
nowhere; a condition is never dropped silently (:func:`condition_column`): a named column that is missing, a column
that looks like a condition column under another name (``aspect``, ``condtion``), and one condition given for an
input that has its own are all refused before any model is loaded.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from finesim.data.errors import DataFormatError, LoadReport
from finesim.evaluation.truncation import Truncation

logger = logging.getLogger("finesim.evaluation")


@dataclass(frozen=True)
class Columns:
    """Which input columns hold the texts (``condition`` None: no condition column)."""

    sentence1: str = "sentence1"
    sentence2: str = "sentence2"
    condition: str | None = "condition"
    score: str = "score"


REJECT_FIELDS = ["row", "line", "column", "error", "record", "raw"]  # a rejects file's keys (:func:`_reject`)


def rejects_path(output: str | Path) -> Path:
    """Where the rejected rows of ``output`` go: ``<stem>.rejects.jsonl`` beside it."""
    out = Path(output)
    return out.with_name(f"{out.stem}.rejects.jsonl")


CONDITION_COLUMN = "condition"
"""The condition column read when none is named (``Columns.condition``'s default)."""

CONDITION_ALIASES = ("aspect", "aspects", "cond", "conditions", "criterion", "criteria", "facet")
"""Column names other datasets give conditions: a file with one of them (or a near-spelling of ``condition``) and no
``condition`` column is refused rather than scored without its conditions."""


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
    warn: bool = True,
) -> str | None:
    """The input column that holds the rows' conditions, or None (one ``condition`` for every row, or none at all).
    ``warn=False``: the same checks without the warning of a column like a condition under one ``condition`` (said
    once, by the check before the model loads).

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
    if name in texts[:2]:
        raise DataFormatError(
            f"the condition column {name!r} is also a sentence column: name the column that holds the conditions",
            path=path,
            column=name,
        )
    if condition is not None:
        if name in available:
            raise DataFormatError(
                f"the input has a condition column {name!r} and --condition {condition!r} was given too: drop "
                f"--condition to score each row under its own condition, or remove or rename the column {name!r} "
                f"to score every row under {condition!r}",
                path=path,
                column=name,
            )
        alike = condition_like(available, texts)
        if alike is not None and warn:  # scored as asked, but the rows' own conditions may be what was meant
            logger.warning(
                "%s: every row is scored under --condition %r, although the input's column %r looks like each "
                "row's condition (--condition-column %s, without --condition, scores each row under its own)",
                path, condition, alike, alike,
            )  # fmt: skip
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
    """The text columns exist and are two (a missing one names the flag that fixes it) and the score column does
    not exist."""
    from finesim.data._io import close_match

    if columns.sentence1 == columns.sentence2:
        raise DataFormatError(
            f"--sentence1-column and --sentence2-column both name {columns.sentence1!r}: every row would be scored "
            "against itself; name the two text columns",
            path=path,
            column=columns.sentence1,
        )
    needed = [columns.sentence1, columns.sentence2, *([columns.condition] if columns.condition in available else [])]
    for name, flag in ((columns.sentence1, "--sentence1-column"), (columns.sentence2, "--sentence2-column")):
        if name not in available:
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


def check_output_is_not_input(input_path: str | Path, output_path: str | Path, flag: str = "the output") -> None:
    """Refuse to write the scores over the input (the rename at the end would replace it); ``flag`` names the output
    as the caller spells it (``--output`` on the command line)."""
    if Path(output_path).resolve() == Path(input_path).resolve():
        raise ValueError(f"{flag} {output_path} is the input file; write the scores to another file")


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
    notify: Callable[[str], None] | None = None,
    warn_condition_like: bool = True,
) -> dict[str, Any]:
    """Score every row of ``input_path`` into ``output_path`` (see the module docstring); returns a report.

    Args:
        scorer: a :class:`~finesim.evaluation.scoring.PairScorer` (e.g. a ``ConditionalScorer``).
        columns: the input's text columns and the name of the score column; ``columns.condition`` None reads no
            condition column (scoring without a condition, or with ``condition`` for every row).
        condition: one condition for every row; an input that also has the condition column is refused.
        input_format / output_format: formats when the file extensions do not tell.
        split: the split of a datasets folder or Hub dataset.
        chunk_rows: rows read and written at a time (scored :func:`score_rows` at a time).
        skip_bad_rows: send bad rows to the rejects file instead of stopping.
        show_progress: a progress bar with the row total (estimated for CSV, TSV and JSONL), rows/s and an ETA.
        explicit_condition_column: whether ``columns.condition`` was named on purpose (it must exist then); by
            default any name but ``condition``. See :func:`condition_column` for how the condition is found.
        notify: where the notes for the user go (truncated texts, files removed); default: a logged warning.
        warn_condition_like: warn of one ``condition`` over a column like the rows' conditions; False when
            :func:`check_input` has warned already (the command, before its model loads).
    """
    import numpy as np

    from finesim.data.table import open_table, text_field
    from finesim.data.writers import TableWriter
    from finesim.results import remove_dead_temp_files

    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    check_output_is_not_input(input_path, output_path)
    tell = notify if notify is not None else logger.warning
    columns = columns or Columns()
    report = LoadReport(path=str(input_path))
    # every record comes back, a malformed one with its error, so the first bad row in file order is the one named
    reader = open_table(input_path, format=input_format, split=split, report=report, bad_records="yield")
    _check_columns(input_path, reader.columns, columns)
    cond_column = condition_column(
        input_path, reader.columns, columns, condition, explicit=explicit_condition_column, warn=warn_condition_like
    )
    from_column = cond_column is not None
    if condition is None and getattr(scorer, "requires_condition", False) and not from_column:
        raise condition_needed(input_path, columns)
    out_columns = [*reader.columns, columns.score]
    rejects_file = rejects_path(output_path)
    leftovers = remove_dead_temp_files(output_path) + remove_dead_temp_files(rejects_file)
    if leftovers:
        names = ", ".join(f.name for f in leftovers)
        tell(f"removed {len(leftovers)} temporary file(s) of killed runs beside {output_path} ({names})")
    text_input = reader.format in ("csv", "tsv")
    writer = TableWriter(output_path, out_columns, output_format, infer_types=reader.columns if text_input else ())
    rejects: TableWriter | None = None
    truncation = Truncation.of(scorer)
    per_call = score_rows(scorer, chunk_rows)
    conditioned = from_column or condition is not None
    started = time.perf_counter()
    bar = _ProgressBar(reader, show_progress)
    scored = skipped = read = 0
    last_line: int | None = None

    def flush(chunk: list[tuple[Any, str, str, str | None]], rejected: int) -> None:
        """Score a chunk's rows (each distinct triple once, :func:`score_rows` triples a call) and write them."""
        nonlocal scored
        where: dict[tuple[str, str, str | None], int] = {}
        first_rows: list[int] = []
        counts: list[int] = []
        for record, a, b, c in chunk:
            at = where.setdefault((a, b, c), len(where))
            if at == len(counts):
                first_rows.append(record.row)
                counts.append(0)
            counts[at] += 1
        triples = list(where)
        scores = np.zeros(len(triples), dtype=np.float64)
        for start in range(0, len(triples), per_call):
            stop = start + per_call
            s1, s2, conds = (list(texts) for texts in zip(*triples[start:stop]))
            given = conds if conditioned else None
            if truncation is not None:
                truncation.check(first_rows[start:stop], counts[start:stop], s1, s2, given)
            scores[start:stop] = scorer.score(s1, s2, given)
            bar.update(sum(counts[start:stop]) + rejected, read, last_line)
            rejected = 0
        if rejected:
            bar.update(rejected, read, last_line)
        writer.write([{**r.values, columns.score: float(scores[where[(a, b, c)]])} for r, a, b, c in chunk])
        scored += len(chunk)

    try:
        chunk: list[tuple[Any, str, str, str | None]] = []
        rejected = 0
        for record in reader:
            read += 1
            last_line = record.line
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
                    rejects = TableWriter(rejects_file, REJECT_FIELDS, "jsonl")
                rejects.write([_reject(record, err)])
                skipped += 1
                rejected += 1
            else:
                chunk.append((record, a, b, c))
            if len(chunk) + rejected >= chunk_rows:
                flush(chunk, rejected)
                chunk, rejected = [], 0
        flush(chunk, rejected)
        writer.commit()
        if rejects is not None:
            rejects.commit()
        bar.finish(read)
    except BaseException:
        writer.abort()
        if rejects is not None:
            rejects.abort()
        raise
    finally:
        bar.close()
    stale_rejects = None
    if rejects is None and rejects_file.is_file():
        rejects_file.unlink()
        stale_rejects = str(rejects_file)
        tell(f"removed {rejects_file}: it listed the bad rows of an earlier run, and this run had none")
    if truncation is not None and truncation.rows:
        tell(truncation.message())
    seconds = time.perf_counter() - started
    return {
        "input": str(input_path),
        "output": str(output_path),
        "rows_scored": scored,
        "rows_skipped": skipped,
        "rejects": str(rejects_file) if skipped else None,
        "stale_rejects_removed": stale_rejects,
        "temp_files_removed": [str(f) for f in leftovers],
        "rows_truncated": None if truncation is None else truncation.rows,
        "token_limit": None if truncation is None else truncation.limit,
        "column_types": writer.inferred_types() or None,
        "blank_lines": report.skipped.get("blank lines", 0),
        "condition": "one for every row" if condition is not None else ("per row" if from_column else "none"),
        "condition_text": condition,  # the one condition of every row (None: per row, or none)
        "condition_column": cond_column,  # the column of the rows' own conditions (None: not read)
        "seconds": round(seconds, 3),
        "rows_per_second": round(scored / seconds, 1) if seconds > 0 else None,
    }


ROWS_PER_CALL = 8
"""The scorer is called on this many of its batches' worth of (distinct) rows at a time (:func:`score_rows`)."""


def score_rows(scorer: Any, chunk_rows: int) -> int:
    """How many distinct rows one call of ``scorer.score`` gets: :data:`ROWS_PER_CALL` times the scorer's
    ``batch_size`` (so the progress bar moves within a chunk, while each call still sorts and deduplicates enough
    texts to batch them well), at most ``chunk_rows``; a scorer without a batch size (Ray actors, which share a call
    out) gets the whole chunk."""
    size = getattr(scorer, "batch_size", None)
    if isinstance(size, int) and size > 0:
        return max(1, min(chunk_rows, ROWS_PER_CALL * size))
    return chunk_rows


class _ProgressBar:
    """The ``scoring`` progress bar over the rows of the input (scored and rejected): a total from
    :meth:`~finesim.data.table.TableReader.count_rows` (shown as ``about N`` when estimated, and re-estimated as
    rows are read), rows/s and an ETA."""

    def __init__(self, reader: Any, show: bool) -> None:
        from tqdm.auto import tqdm

        self.count = None
        if show:
            with contextlib.suppress(OSError, DataFormatError):  # reading will say what is wrong
                self.count = reader.count_rows()
        about = self.count is not None and not self.count.exact
        bar_format = (
            "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/about {total_fmt}{unit} [{elapsed}<{remaining}, {rate_fmt}]"
            if about
            else None
        )
        total = self.count.rows if self.count is not None else None
        self.bar = tqdm(desc="scoring", unit=" rows", total=total, disable=not show, bar_format=bar_format)

    def update(self, rows: int, read: int, line: int | None) -> None:
        if self.count is not None and not self.count.exact:
            self.bar.total = self.count.estimate(read, line)
        self.bar.update(rows)

    def finish(self, read: int) -> None:
        """All ``read`` rows are done: the estimated total gives way to the count."""
        if self.count is not None and (self.bar.total != read or not self.count.exact):
            self.bar.total = read
            self.bar.bar_format = None  # a count now, not "about"
            self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def condition_needed(input_path: str | Path, columns: Columns) -> DataFormatError:
    """The error for an input scored without a condition by a model that scores only under one (a tri-encoder, a
    CASE model); ``columns.condition`` None: without one on purpose (``--no-condition``)."""
    if columns.condition is None:
        return DataFormatError(
            "the model scores pairs only under a condition, so it cannot score without one (--no-condition): "
            "pass --condition TEXT (one for every row) or --condition-column NAME",
            path=input_path,
        )
    return DataFormatError(
        f"the model scores pairs under a condition, but the input has no {columns.condition!r} column; pass "
        "--condition TEXT (one for every row) or --condition-column NAME",
        path=input_path,
    )


def _reject(record: Any, err: DataFormatError) -> dict[str, Any]:
    """A rejects-file line: where, why, the fields read by column (null when none could be) and, for a record that
    is not well-formed (a CSV record of another width than the header, a JSON line that is not an object), its text
    as in the file, so that nothing of it is lost (a field beyond the header's columns is only there)."""
    return {
        "row": record.row,
        "line": record.line,
        "column": err.column,
        "error": err.reason,
        "record": record.values or None,
        "raw": getattr(record, "raw", None),
    }

"""C-STS: conditional semantic textual similarity data.

Reads the ``sentence1,sentence2,condition,label`` CSVs of both the original C-STS release (Deshpande et al., 2023;
integer labels 1-5, hidden test labels ``-1``) and the re-annotated release (float labels 1.0-5.0, ``-1`` for a
condition judged not applicable). Fields may contain quoted newlines, so a real CSV parser is used.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from datasets import Dataset

from finesim.data._io import check_range, header_index, parse_label, read_text, require_text
from finesim.data.errors import DataFormatError, LoadReport

CSTS_COLUMNS = ("sentence1", "sentence2", "condition", "label")
CSTS_LABEL_RANGE = (1.0, 5.0)
UNLABELED = -1.0


def unclosed_quote(text: str) -> tuple[int, int] | None:
    """Where a quoted field opens that is never closed, as ``(line, field index)``; None if every quote closes.

    Follows the rules of Python's default (non-strict) CSV dialect: a ``"`` at the start of a field opens a quoted
    field, ``""`` inside it is a literal quote, and any other ``"`` inside it closes it. Python's reader does not
    complain about an unclosed quote: it silently reads the rest of the file into one field.
    """
    quoted = after_quote = False
    field_start, field, line = True, 0, 1
    opened: tuple[int, int] = (0, 0)
    for ch in text:
        if quoted:
            if after_quote:
                after_quote = False
                if ch == '"':  # a doubled quote: literal, the field stays quoted
                    continue
                quoted = False  # the previous quote closed the field; ``ch`` is read outside quotes below
            else:
                after_quote = ch == '"'
                line += ch == "\n"
                continue
        if ch == '"' and field_start:
            quoted, field_start, opened = True, False, (line, field)
        elif ch == ",":
            field_start, field = True, field + 1
        elif ch in "\r\n":
            field_start, field = True, 0
            line += ch == "\n"
        else:
            field_start = False
    return opened if quoted and not after_quote else None


def read_csts(
    path: str | Path,
    *,
    label_range: tuple[float, float] = CSTS_LABEL_RANGE,
    keep_unlabeled: bool = False,
) -> tuple[Dataset, LoadReport]:
    """Read a C-STS CSV into a dataset with columns sentence1, sentence2, condition, label, row.

    Args:
        path: the CSV file.
        label_range: the declared label range; any other label except ``-1`` is an error.
        keep_unlabeled: keep ``-1`` rows (e.g. a hidden test split to predict); by default they are skipped and
            counted in the report.

    Returns:
        The dataset (``row`` is the 1-based record number in the file) and a :class:`LoadReport`.

    Raises:
        DataFormatError: naming file, row and column for any bad input.
    """
    p = Path(path)
    text = read_text(p, what="C-STS file")
    reader = csv.reader(io.StringIO(text, newline=""))
    report = LoadReport(path=str(p))
    open_quote = unclosed_quote(text)
    try:
        header = next(reader)
    except StopIteration:
        raise DataFormatError("file is empty (expected a header row)", path=p) from None
    header = [h.strip() for h in header]
    if open_quote is not None and reader.line_num >= open_quote[0]:
        raise _unclosed_quote_error(p, open_quote, None, header)
    index = header_index(p, header, CSTS_COLUMNS)
    low, high = label_range
    columns: dict[str, list] = {name: [] for name in (*CSTS_COLUMNS, "row")}
    row = 0
    while True:
        line = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            raise DataFormatError(f"malformed CSV: {err}", path=p, row=row + 1, line=line) from None
        row += 1
        if open_quote is not None and reader.line_num >= open_quote[0]:
            raise _unclosed_quote_error(p, open_quote, (row, line), header)
        if not fields or all(not f.strip() for f in fields):
            report.skip("blank lines")
            row -= 1
            continue
        report.rows_read += 1
        if len(fields) != len(header):
            raise DataFormatError(f"has {len(fields)} fields, the header has {len(header)}", path=p, row=row, line=line)
        label = parse_label(fields[index["label"]], path=p, row=row, column="label", line=line)
        if label == UNLABELED and not keep_unlabeled:
            report.skip("unlabeled (-1) rows")
            continue
        if label != UNLABELED:
            check_range(label, low, high, path=p, row=row, column="label", line=line)
        for name in ("sentence1", "sentence2", "condition"):
            columns[name].append(require_text(fields[index[name]], path=p, row=row, column=name, line=line))
        columns["label"].append(label)
        columns["row"].append(row)
        report.rows_kept += 1
    report.log()
    return Dataset.from_dict(columns), report


def _unclosed_quote_error(
    path: Path, opened: tuple[int, int], record: tuple[int, int] | None, header: list[str]
) -> DataFormatError:
    quote_line, field = opened
    row, line = record if record is not None else (None, 1)
    return DataFormatError(
        f'a quoted field opened on line {quote_line} is never closed: no closing " before the end of the file '
        "(a stray quote? double it inside a quoted field, or quote the whole field)",
        path=path,
        row=row,
        line=line,
        column=header[field] if record is not None and field < len(header) else None,
    )


def load_csts(path: str | Path, **kwargs: object) -> Dataset:
    """Like :func:`read_csts` but returns only the dataset (the report is logged)."""
    dataset, _ = read_csts(path, **kwargs)  # type: ignore[arg-type]
    return dataset

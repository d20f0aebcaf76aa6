"""C-STS: conditional semantic textual similarity data.

Reads the ``sentence1,sentence2,condition,label`` CSVs of both the original C-STS release (Deshpande et al., 2023;
integer labels 1-5, hidden test labels ``-1``) and the re-annotated release (float labels 1.0-5.0, ``-1`` for a
condition judged not applicable). Fields may contain quoted newlines, so a real CSV parser is used.
"""

from __future__ import annotations

import csv
import difflib
import io
from pathlib import Path

from datasets import Dataset

from finesim.data._io import check_range, parse_label, read_text, require_text
from finesim.data.errors import DataFormatError, LoadReport

CSTS_COLUMNS = ("sentence1", "sentence2", "condition", "label")
CSTS_LABEL_RANGE = (1.0, 5.0)
UNLABELED = -1.0


def _missing_column_error(path: Path, header: list[str], missing: str) -> DataFormatError:
    close = difflib.get_close_matches(missing, header, n=1, cutoff=0.6)
    hint = f" (found {close[0]!r}: rename it)" if close else ""
    return DataFormatError(
        f"missing column {missing!r}{hint}; the header has {header}, finesim expects {list(CSTS_COLUMNS)}",
        path=path,
        line=1,
        column=missing,
    )


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
    try:
        header = next(reader)
    except StopIteration:
        raise DataFormatError("file is empty (expected a header row)", path=p) from None
    header = [h.strip() for h in header]
    index = {}
    for name in CSTS_COLUMNS:
        if name not in header:
            raise _missing_column_error(p, header, name)
        index[name] = header.index(name)
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


def load_csts(path: str | Path, **kwargs: object) -> Dataset:
    """Like :func:`read_csts` but returns only the dataset (the report is logged)."""
    dataset, _ = read_csts(path, **kwargs)  # type: ignore[arg-type]
    return dataset

"""C-STS: conditional semantic textual similarity data.

Reads the ``sentence1,sentence2,condition,label`` CSVs of both the original C-STS release (Deshpande et al., 2023;
integer labels 1-5, hidden test labels ``-1``) and the re-annotated release (float labels 1.0-5.0, ``-1`` for a
condition judged not applicable). Fields may contain quoted newlines, so a real CSV parser is used.
"""

from __future__ import annotations

from pathlib import Path

from datasets import Dataset

from finesim.data._io import check_range, parse_label, read_text, require_text
from finesim.data.csv_records import csv_records
from finesim.data.errors import LoadReport

CSTS_COLUMNS = ("sentence1", "sentence2", "condition", "label")
CSTS_LABEL_RANGE = (1.0, 5.0)
UNLABELED = -1.0


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
    report = LoadReport(path=str(p))
    index, records = csv_records(p, text, CSTS_COLUMNS, report=report)
    columns: dict[str, list] = {name: [] for name in (*CSTS_COLUMNS, "row")}
    for row, line, fields in records:
        report.rows_read += 1
        label = parse_label(fields[index["label"]], path=p, row=row, column="label", line=line)
        if label == UNLABELED and not keep_unlabeled:
            report.skip("unlabeled (-1) rows")
            continue
        if label != UNLABELED:
            check_range(label, *label_range, path=p, row=row, column="label", line=line)
        for name in ("sentence1", "sentence2", "condition"):
            columns[name].append(require_text(fields[index[name]], path=p, row=row, column=name, line=line))
        columns["label"].append(label)
        columns["row"].append(row)
        report.rows_kept += 1
    report.log()
    return Dataset.from_dict(columns), report

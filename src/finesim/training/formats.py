"""Data formats of the recipe runner (``data.format``), declared in one table: :data:`DATA_FORMATS`.

A format is a loader ``loader(path, options) -> (dataset, report_dict)``: ``path`` is the recipe's ``data.train``
(or ``data.validation``) resolved against the data root, ``options`` (:class:`FormatOptions`) carries the declared
label range (the recipe's ``labels.low/high``) and the column mapping (``data.columns``); the dataset has
``sentence1, sentence2, [condition,] label`` (plus a 1-based ``row``), or ``anchor, positive, negative`` for the
triplet formats.

- ``csts``: a C-STS CSV; rows with conditions, labels 1-5.
- ``table``: any table of pairs (CSV, TSV, JSONL, Parquet, a datasets folder, a Hub dataset id) with the column
  mapping ``data.columns`` (finesim's ``sentence1``, ``sentence2``, ``condition``, ``label`` -> the file's names), the
  labels checked against ``labels.low/high``; a condition column is used when there is one.
- ``sts``: the data root (``.``) gives the overlap-filtered STS-B + SICK-R training pairs (0-5); an ``sts-*.csv``
  path an STS-B split; a ``SICK_*.txt`` path SICK rescaled to 0-5.
- ``sts-unfiltered``: the data root; STS-B train + SICK-R train (0-5) **without** the overlap filter (the
  Pcc-tuning paper's 10,249 pairs).
- ``snli-regression``: the SNLI folder (``nli/SNLI``); dev + test pairs as regression data (contradiction 0,
  neutral 1, entailment 2).
- ``snli-classification``: the SNLI folder; the same pairs with integer class ids (for ``softmax``).
- ``snli-triplets``: the SNLI folder; (premise, entailment, contradiction) triplets (Pcc-tuning stage 1).
- ``simcse-nli-csv``: SimCSE's ``nli_for_simcse.csv``; its ``sent0, sent1, hard_neg`` triplets (the Pcc-tuning
  paper's stage-1 data).

A new format: write its loader here and add it to :data:`DATA_FORMATS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from datasets import Dataset


@dataclass(frozen=True)
class FormatOptions:
    """What a recipe tells a data format: the declared label range (``labels.low/high``; formats whose files carry
    a fixed scale, such as STS-B's 0-5, keep their own) and the column mapping (``data.columns``, finesim's name ->
    the file's column)."""

    label_range: tuple[float, float] = (1.0, 5.0)
    columns: dict[str, str] = field(default_factory=dict)
    split: str | None = None  # the split of a datasets folder or Hub dataset (format "table")


# A data format loader returns (dataset with sentence1, sentence2, [condition,] label[, row], report-dict).
DataLoader = Callable[[Path, FormatOptions | None], tuple[Dataset, dict[str, Any]]]


def load_csts(path: Path, options: FormatOptions | None = None) -> tuple[Dataset, dict[str, Any]]:
    """The ``csts`` format: a C-STS CSV, labels checked against the declared range."""
    from finesim.data.csts import read_csts

    dataset, report = read_csts(path, label_range=(options or FormatOptions()).label_range)
    return dataset, report.as_dict()


def load_table(path: Path, options: FormatOptions | None = None) -> tuple[Dataset, dict[str, Any]]:
    """The ``table`` format: any table (CSV, TSV, JSONL, Parquet, a datasets folder or a Hub dataset id) read with
    :func:`finesim.data.table.read_table`: the column mapping ``data.columns`` and the declared label range
    ``labels.low/high``; a condition column is used when the table has one."""
    from finesim.data.table import read_table

    options = options or FormatOptions()
    dataset, report = read_table(
        path, columns=options.columns or None, split=options.split, label_range=options.label_range
    )
    out = report.as_dict()
    if "condition" not in dataset.column_names:  # the caller, which knows the file's role, tells the user
        out["columns_unread"] = _unread_columns(path, options)
    return dataset, out


def _unread_columns(path: Path, options: FormatOptions) -> list[str]:
    """The table's columns that none of finesim's names read (one may hold a condition under another name)."""
    from finesim.data.table import open_table

    used = {options.columns.get(name, name) for name in ("sentence1", "sentence2", "label")}
    return [column for column in open_table(path, split=options.split).columns if column not in used]


def _sentence_pairs(ds: Dataset) -> Dataset:
    return ds.select_columns(["sentence1", "sentence2", "label"])


def load_sts(path: Path, options: FormatOptions | None = None) -> tuple[Dataset, dict[str, Any]]:
    """The ``sts`` format (see the module docstring)."""
    from finesim.data.labels import sick_to_sts
    from finesim.data.sts import read_sick, read_stsb
    from finesim.data.sts_training import merged_sts_training_set

    path = Path(path)
    if path.is_dir():
        return merged_sts_training_set(path)
    if path.name.startswith("SICK"):
        ds, _ = read_sick(path)
        ds = _sentence_pairs(ds).map(lambda b: {"label": sick_to_sts(b["label"]).tolist()}, batched=True)
        return ds, {"rows": len(ds), "label_scale": "0-5 (SICK rescaled)"}
    ds, _ = read_stsb(path)
    return _sentence_pairs(ds), {"rows": len(ds)}


def load_sts_unfiltered(path: Path, options: FormatOptions | None = None) -> tuple[Dataset, dict[str, Any]]:
    """The ``sts-unfiltered`` format (see the module docstring)."""
    from finesim.data.sts_training import merged_sts_training_set

    if not Path(path).is_dir():
        raise ValueError(f"data format 'sts-unfiltered' needs the data root folder as train:, got {path}")
    return merged_sts_training_set(path, filter_eval_overlap=False)


def load_snli_pairs(
    path: Path, options: FormatOptions | None = None, *, classes: bool
) -> tuple[Dataset, dict[str, Any]]:
    """The ``snli-regression`` and (``classes``) ``snli-classification`` formats: ``path`` is the SNLI folder."""
    from finesim.data.sts_training import nli_classification_pairs, nli_regression_pairs

    ds, report = (nli_classification_pairs if classes else nli_regression_pairs)(path)
    return Dataset.from_dict({"sentence1": ds["premise"], "sentence2": ds["hypothesis"], "label": ds["label"]}), report


def load_snli_triplets(path: Path, options: FormatOptions | None = None) -> tuple[Dataset, dict[str, Any]]:
    """The ``snli-triplets`` format: ``path`` is the SNLI folder (``nli/SNLI``)."""
    from finesim.data.sts_training import nli_triplets

    return nli_triplets(path)


def load_simcse_nli(path: Path, options: FormatOptions | None = None) -> tuple[Dataset, dict[str, Any]]:
    """The ``simcse-nli-csv`` format: ``path`` is SimCSE's ``nli_for_simcse.csv``."""
    from finesim.data.sts_training import read_simcse_nli

    return read_simcse_nli(path)


DATA_FORMATS: dict[str, DataLoader] = {
    "csts": load_csts,
    "table": load_table,
    "sts": load_sts,
    "sts-unfiltered": load_sts_unfiltered,
    "snli-regression": partial(load_snli_pairs, classes=False),
    "snli-classification": partial(load_snli_pairs, classes=True),
    "snli-triplets": load_snli_triplets,
    "simcse-nli-csv": load_simcse_nli,
}


def get_data_format(name: str) -> DataLoader:
    """The data format ``name`` (a clear error listing the known ones)."""
    if name not in DATA_FORMATS:
        raise ValueError(f"unknown data format {name!r}; registered: {sorted(DATA_FORMATS)}")
    return DATA_FORMATS[name]

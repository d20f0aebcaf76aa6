"""Training sets for the STS objectives (STS-regression and Pcc-tuning papers).

- :func:`merged_sts_training_set`: STS-B train + SICK-R train (SICK rescaled 1-5 -> 0-5 with
  :func:`~finesim.data.labels.sick_to_sts`), with every pair that occurs in an evaluation set (STS12-16, STS-B
  test, SICK-R test; either order) removed by :func:`~finesim.data.overlap.filter_overlap` (regression paper,
  appendix A). Labels stay on the 0-5 scale.
- :func:`nli_regression_pairs`: SNLI pairs as regression data, contradiction 0, neutral 1, entailment 2
  (regression paper, section 4.1).
- :func:`nli_classification_pairs`: the same pairs with integer class ids for the SBERT cross-entropy
  baseline.
- :func:`nli_triplets`: (premise, entailment hypothesis, contradiction hypothesis) for InfoNCE with hard
  negatives (Pcc-tuning stage 1, the SimCSE NLI format).
- :func:`read_simcse_nli`: SimCSE's own NLI triplet file (``nli_for_simcse.csv``, columns ``sent0, sent1,
  hard_neg``), the Pcc-tuning paper's stage-1 data, when a user has it (it is not in the shared data).

All return ``datasets.Dataset`` objects whose columns are only the model inputs and ``label`` (ready for a
sentence-transformers trainer), plus a small report dict.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from datasets import Dataset, concatenate_datasets

from finesim.data._io import read_text, require_text
from finesim.data.csv_records import csv_records
from finesim.data.errors import LoadReport
from finesim.data.labels import sick_to_sts
from finesim.data.nli import read_snli
from finesim.data.overlap import filter_overlap
from finesim.data.sts import read_senteval_subset, read_sick, read_stsb, senteval_subsets

logger = logging.getLogger("finesim.data")

NLI_REGRESSION_LABELS = {"contradiction": 0.0, "neutral": 1.0, "entailment": 2.0}
STS_YEARS = ("STS12", "STS13", "STS14", "STS15", "STS16")


def evaluation_sets(root: str | Path) -> list[Dataset]:
    """Every STS evaluation set whose pairs must not be trained on: STS12-16, STS-B test, SICK-R test."""
    sts = Path(root) / "sts"
    folders = [sts / f"{year}-en-test" for year in STS_YEARS]
    sets = [read_senteval_subset(folder, subset)[0] for folder in folders for subset in senteval_subsets(folder)]
    sets.append(read_stsb(sts / "STSBenchmark" / "sts-test.csv")[0])
    sets.append(read_sick(sts / "SICK" / "SICK_test_annotated.txt")[0])
    return sets


def merged_sts_training_set(root: str | Path, *, filter_eval_overlap: bool = True) -> tuple[Dataset, dict[str, Any]]:
    """Filtered, merged STS-B + SICK-R training pairs on the 0-5 scale (columns sentence1, sentence2, label)."""
    root = Path(root)
    stsb, _ = read_stsb(root / "sts" / "STSBenchmark" / "sts-train.csv")
    sick, _ = read_sick(root / "sts" / "SICK" / "SICK_train.txt")
    cols = ["sentence1", "sentence2", "label"]
    stsb = stsb.select_columns(cols)
    sick = sick.select_columns(cols)
    sick = sick.map(lambda b: {"label": sick_to_sts(b["label"]).tolist()}, batched=True)
    report: dict[str, Any] = {"stsb_train": len(stsb), "sick_train": len(sick)}
    if filter_eval_overlap:
        evals = evaluation_sets(root)
        stsb, removed_stsb = filter_overlap(stsb, evals)
        sick, removed_sick = filter_overlap(sick, evals)
        report.update(removed_stsb=removed_stsb, removed_sick=removed_sick)
    merged = concatenate_datasets([stsb, sick])
    report["pairs"] = len(merged)
    report["label_scale"] = "0-5 (SICK rescaled (y - 1) * 5 / 4)"
    logger.info("merged STS-B + SICK-R training set: %s", report)
    return merged, report


def _snli(folder: str | Path, splits: Sequence[str]) -> Dataset:
    parts = [read_snli(Path(folder), split)[0] for split in splits]
    return concatenate_datasets(parts) if len(parts) > 1 else parts[0]


def nli_regression_pairs(folder: str | Path, splits: Sequence[str] = ("dev", "test")) -> tuple[Dataset, dict[str, Any]]:
    """SNLI pairs with labels contradiction 0, neutral 1, entailment 2 (columns premise, hypothesis,
    label); ``folder`` is the SNLI folder (``<data>/nli/SNLI``)."""
    ds = _snli(folder, splits)
    labels = [NLI_REGRESSION_LABELS[x] for x in ds["label"]]
    out = Dataset.from_dict({"premise": ds["premise"], "hypothesis": ds["hypothesis"], "label": labels})
    return out, {"pairs": len(out), "splits": list(splits), "mapping": NLI_REGRESSION_LABELS}


def nli_classification_pairs(
    folder: str | Path, splits: Sequence[str] = ("dev", "test")
) -> tuple[Dataset, dict[str, Any]]:
    """SNLI pairs with integer class ids (contradiction 0, neutral 1, entailment 2) for cross-entropy; ``folder``
    is the SNLI folder."""
    ds, report = nli_regression_pairs(folder, splits)
    ds = ds.map(lambda b: {"label": [int(x) for x in b["label"]]}, batched=True)
    return ds, report


def nli_triplets(folder: str | Path, splits: Sequence[str] = ("dev", "test")) -> tuple[Dataset, dict[str, Any]]:
    """(anchor, positive, negative) triplets from the SNLI folder ``folder``: premise, an entailed hypothesis, a
    contradicting hypothesis.

    Each premise with at least one entailment and one contradiction gives one triplet per entailment hypothesis,
    paired with its contradiction hypotheses in turn (cycled when there are fewer). Premises lacking either class are
    counted in the report, not used.
    """
    ds = _snli(folder, splits)
    groups: dict[str, dict[str, list[str]]] = defaultdict(lambda: {"entailment": [], "contradiction": []})
    for premise, hypothesis, label in zip(ds["premise"], ds["hypothesis"], ds["label"]):
        if label in ("entailment", "contradiction"):
            groups[premise][label].append(hypothesis)
    out: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    unusable = 0
    for premise, g in groups.items():
        if not g["entailment"] or not g["contradiction"]:
            unusable += 1
            continue
        for i, pos in enumerate(g["entailment"]):
            out["anchor"].append(premise)
            out["positive"].append(pos)
            out["negative"].append(g["contradiction"][i % len(g["contradiction"])])
    report = {
        "triplets": len(out["anchor"]),
        "premises": len(groups),
        "premises_without_both_classes": unusable,
    }
    logger.info("NLI triplets: %s", report)
    return Dataset.from_dict(out), report


SIMCSE_NLI_COLUMNS = {"sent0": "anchor", "sent1": "positive", "hard_neg": "negative"}


def read_simcse_nli(path: str | Path) -> tuple[Dataset, dict[str, Any]]:
    """SimCSE's NLI triplet CSV (columns ``sent0, sent1, hard_neg``) as ``anchor, positive, negative``.

    Every row is kept (blank lines are counted in the report); an empty field, a record with another number of
    fields than the header or a quote that never closes is a :class:`DataFormatError` naming the file, row,
    line and column.
    """
    text = read_text(path, what="SimCSE NLI triplet file")
    skipped = LoadReport(path=str(path))
    index, records = csv_records(Path(path), text, list(SIMCSE_NLI_COLUMNS), report=skipped)
    out: dict[str, list[str]] = {name: [] for name in SIMCSE_NLI_COLUMNS.values()}
    for row, line, fields in records:
        for column, name in SIMCSE_NLI_COLUMNS.items():
            out[name].append(require_text(fields[index[column]], path=path, row=row, column=column, line=line))
    report = {"triplets": len(out["anchor"]), "file": str(path), "skipped": dict(skipped.skipped)}
    logger.info("SimCSE NLI triplets: %s", report)
    return Dataset.from_dict(out), report

"""Group C-STS rows into sentence pairs with a high and a low condition.

Each (sentence1, sentence2) pair of C-STS is annotated under two conditions. The Quad and CCL objectives need both
rows together, ordered high then low. Rows are grouped on the exact raw text *before* tokenisation (the reference
code's sampler crashed because it looked for columns already removed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

from datasets import Dataset

EqualLabels = Literal["keep", "drop", "error"]

PAIR_COLUMNS = (
    "sentence1",
    "sentence2",
    "condition_high",
    "label_high",
    "row_high",
    "condition_low",
    "label_low",
    "row_low",
)


@dataclass
class PairingReport:
    """Rows that did not fit the two-conditions-per-pair shape, and pairs whose labels tie."""

    pairs: int = 0
    bad_groups: list[dict[str, object]] = field(default_factory=list)
    rows_in_bad_groups: int = 0
    equal_label_pairs: int = 0
    equal_label_pairs_dropped: int = 0
    # pairs annotated twice under one condition (C-STS train has 53, 26 with two labels): kept, as the reference
    # keeps them, though no ordering of one condition against itself is right
    same_condition_pairs: int = 0
    same_condition_examples: list[dict[str, object]] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "pairs": self.pairs,
            "bad_groups": len(self.bad_groups),
            "rows_in_bad_groups": self.rows_in_bad_groups,
            "bad_group_examples": self.bad_groups[:10],
            "equal_label_pairs": self.equal_label_pairs,
            "equal_label_pairs_dropped": self.equal_label_pairs_dropped,
            "same_condition_pairs": self.same_condition_pairs,
            "same_condition_examples": self.same_condition_examples[:10],
        }


class PairingError(ValueError):
    """Raised when pairing is asked to fail on equal labels and finds some."""


def pair_conditions(dataset: Dataset, *, equal_labels: EqualLabels = "keep") -> tuple[Dataset, PairingReport]:
    """Group rows by exact (sentence1, sentence2) into high/low condition pairs.

    Args:
        dataset: C-STS rows (columns sentence1, sentence2, condition, label; ``row`` optional).
        equal_labels: what to do with a pair whose two conditions have the same label: ``"keep"`` (the C-STS
            reference keeps them, in file order), ``"drop"`` (count and leave out) or ``"error"``.

    Returns:
        A dataset with one row per pair (see :data:`PAIR_COLUMNS`) and a :class:`PairingReport`. Groups with other
        than two rows are left out and listed in the report.
    """
    # Materialise columns once: indexing a datasets column value by value is slow.
    rows = list(dataset["row"]) if "row" in dataset.column_names else list(range(1, len(dataset) + 1))
    groups: dict[tuple[str, str], list[int]] = {}
    for i, key in enumerate(zip(list(dataset["sentence1"]), list(dataset["sentence2"]))):
        groups.setdefault(key, []).append(i)
    labels = list(dataset["label"])
    conditions = list(dataset["condition"])
    out: dict[str, list] = {name: [] for name in PAIR_COLUMNS}
    report = PairingReport()
    for (s1, s2), members in groups.items():
        if len(members) != 2:
            report.rows_in_bad_groups += len(members)
            report.bad_groups.append({"sentence1": s1, "sentence2": s2, "rows": [rows[i] for i in members]})
            continue
        a, b = members
        if str(conditions[a]).strip() == str(conditions[b]).strip():
            report.same_condition_pairs += 1
            report.same_condition_examples.append({"condition": conditions[a], "rows": [rows[a], rows[b]]})
        if labels[a] == labels[b]:
            report.equal_label_pairs += 1
            if equal_labels == "error":
                raise PairingError(
                    f"rows {rows[a]} and {rows[b]} share the label {labels[a]:g} for the same sentence pair; "
                    "use equal_labels='keep' or 'drop'"
                )
            if equal_labels == "drop":
                report.equal_label_pairs_dropped += 1
                continue
        hi, lo = (a, b) if labels[a] >= labels[b] else (b, a)
        values = (s1, s2, conditions[hi], labels[hi], rows[hi], conditions[lo], labels[lo], rows[lo])
        for name, value in zip(PAIR_COLUMNS, values):
            out[name].append(value)
        report.pairs += 1
    if report.bad_groups:
        logging.getLogger("finesim.data").warning(
            "pairing: %d sentence pairs (%d rows) do not have exactly two conditions and were left out",
            len(report.bad_groups),
            report.rows_in_bad_groups,
        )
    return Dataset.from_dict(out), report


def same_condition_note(report: PairingReport) -> str | None:
    """The line a trainer warns with when sentence pairs have the same condition twice (None when none has): kept as
    high/low pairs, which no ordering makes right. Only training says it; evaluation and prompting pair too."""
    if not report.same_condition_pairs:
        return None
    first = report.same_condition_examples[0]
    rows = " and ".join(str(r) for r in first["rows"])  # type: ignore[attr-defined]
    return (
        f"pairing: {report.same_condition_pairs} sentence pairs have the same condition twice (first: rows {rows}, "
        f"{first['condition']!r}); kept as high/low pairs, as the C-STS reference keeps them"
    )

"""Train/test overlap filter (STS-regression paper, appendix A).

A training pair is dropped when the same two sentences occur as a pair in any evaluation set, in either order.
Matching is on exact text after stripping surrounding whitespace.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from datasets import Dataset

logger = logging.getLogger("finesim.data")


def _key(a: str, b: str) -> tuple[str, str]:
    a, b = a.strip(), b.strip()
    return (a, b) if a <= b else (b, a)


def _pair_keys(dataset: Dataset, columns: tuple[str, str]) -> set[tuple[str, str]]:
    """The sentence pairs of ``dataset``, each in one order (:func:`_key`)."""
    c1, c2 = columns
    return {_key(a, b) for a, b in zip(dataset[c1], dataset[c2])}


def filter_overlap(
    train: Dataset,
    eval_sets: Iterable[Dataset],
    *,
    columns: tuple[str, str] = ("sentence1", "sentence2"),
) -> tuple[Dataset, int]:
    """Drop training rows whose sentence pair appears in any evaluation set (either order).

    Returns:
        The filtered dataset and the number of rows removed (also logged).
    """
    c1, c2 = columns
    seen: set = set()
    for ds in eval_sets:
        seen |= _pair_keys(ds, columns)
    keep = [i for i, (a, b) in enumerate(zip(train[c1], train[c2])) if _key(a, b) not in seen]
    removed = len(train) - len(keep)
    logger.info("overlap filter: removed %d of %d training pairs found in evaluation sets", removed, len(train))
    return train.select(keep), removed


def count_overlap(train: Dataset, other: Dataset, *, columns: tuple[str, str] = ("sentence1", "sentence2")) -> int:
    """How many rows of ``other`` have a sentence pair (either order) that ``train`` has too."""
    c1, c2 = columns
    seen = _pair_keys(train, columns)
    return sum(_key(a, b) in seen for a, b in zip(other[c1], other[c2]))

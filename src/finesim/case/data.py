"""C-STS rows → CASE pair embeddings; the development split is carved by :func:`finesim.data.splits.split_by_pair`."""

from __future__ import annotations

from typing import Any

import numpy as np
from datasets import Dataset

from finesim.case.encoding import ConditionAwareEncoder
from finesim.case.training import PairEmbeddings
from finesim.data.splits import split_by_pair

__all__ = ["embed_pairs", "split_by_pair", "split_summary"]


def embed_pairs(encoder: ConditionAwareEncoder, dataset: Dataset) -> PairEmbeddings:
    """Condition-aware embeddings of both sentences of every row, with the row's rating."""
    s1, s2, cond = list(dataset["sentence1"]), list(dataset["sentence2"]), list(dataset["condition"])
    both = encoder.embed(s1 + s2, cond + cond)
    n = len(s1)
    return PairEmbeddings(both[:n], both[n:], np.asarray(dataset["label"], dtype=np.float32))


def split_summary(name: str, dataset: Dataset, source: str, **extra: Any) -> dict[str, Any]:
    """A results-file description of one split."""
    pairs = len(set(zip(dataset["sentence1"], dataset["sentence2"])))
    return {"name": name, "source": source, "rows": len(dataset), "sentence_pairs": pairs, **extra}

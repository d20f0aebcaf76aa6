"""C-STS rows → CASE pair embeddings; the development split is carved by :func:`finesim.data.splits.split_by_pair`."""

from __future__ import annotations

from typing import Any

import numpy as np
from datasets import Dataset

from finesim.case.encoding import ConditionAwareEncoder
from finesim.case.training import PairEmbeddings
from finesim.data.splits import split_by_pair

__all__ = ["embed_pairs", "read_case_data", "split_by_pair", "split_summary"]


def read_case_data(path: Any, role: str, label_range: tuple[float, float] = (1.0, 5.0)) -> tuple[Dataset, Any]:
    """A C-STS file's labelled rows and its read report (:func:`finesim.data.read_csts`), refused when it has none:
    an empty train, dev or eval file failed later with an error naming no file ("dev embeddings are 0-dimensional",
    "need at least 2 pairs to correlate"). ``role`` says what the file is for (``train``, ``dev``, ``eval``, ...);
    ``label_range``: the labels' declared range (``case.label_low``, ``case.label_high``), any other is an error."""
    from finesim.data import read_csts
    from finesim.data.errors import DataFormatError

    dataset, report = read_csts(path, label_range=label_range)
    if len(dataset) == 0:
        raise DataFormatError(
            f"no labelled rows (only a header, or every label -1): nothing for the {role} data", path=path
        )
    return dataset, report


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

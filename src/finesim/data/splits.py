"""A leakage-free development split carved from a training set, whole sentence pairs at a time.

The public re-annotated C-STS has no test labels, so model selection happens on a development split carved from
``train.csv`` and numbers are reported on ``validation.csv``. The carve keeps every row of a sentence pair together
(grouped on the exact (sentence1, sentence2) text: in C-STS both conditions of a pair), so no pair seen in training is
scored on dev.
"""

from __future__ import annotations

import numpy as np
from datasets import Dataset


def split_by_pair(dataset: Dataset, dev_fraction: float = 0.1, seed: int = 42) -> tuple[Dataset, Dataset]:
    """Split C-STS rows into (train, dev), whole sentence pairs at a time.

    Args:
        dataset: rows with ``sentence1`` and ``sentence2``.
        dev_fraction: share of distinct sentence pairs that go to dev.
        seed: shuffling seed (NumPy ``default_rng``).
    """
    if not 0.0 < dev_fraction < 1.0:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction}")
    keys = list(zip(dataset["sentence1"], dataset["sentence2"]))
    unique = sorted(set(keys))
    if len(unique) < 2:
        raise ValueError(f"need at least 2 distinct sentence pairs to split, got {len(unique)}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(unique))
    n_dev = max(1, round(dev_fraction * len(unique)))
    dev_keys = {unique[i] for i in order[:n_dev]}
    dev_rows = [i for i, k in enumerate(keys) if k in dev_keys]
    train_rows = [i for i, k in enumerate(keys) if k not in dev_keys]
    return dataset.select(train_rows), dataset.select(dev_rows)

"""Length-grouped batches for the sentence-transformers trainer (``train.group_by_length`` in a recipe).

Padding is the main waste when encoding short, uneven texts on a CPU: a batch is padded to its longest text.
:class:`LengthGroupedBatchSampler` keeps batches random but fills each with texts of similar length, the scheme of
transformers' ``group_by_length``: every epoch the rows are shuffled, cut into *mega-batches* of
``megabatch_factor × batch_size`` rows, each mega-batch is sorted by length (longest first) and cut into batches,
and the order of all batches is shuffled. It plugs into the trainer through the documented extension point
``SentenceTransformerTrainingArguments(batch_sampler=...)``.

Length is the number of characters of a row's text columns (nested lists such as ``[sentence, condition]``
summed); characters track token counts closely enough for grouping and cost no tokenisation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from sentence_transformers.base.sampler import DefaultBatchSampler

LABEL_COLUMNS = ("label", "labels", "score", "scores")


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple)):
        return sum(_chars(v) for v in value)
    return 0


def row_lengths(dataset: Any, exclude: Sequence[str] = LABEL_COLUMNS) -> list[int]:
    """Characters of text per row, summed over the dataset's text columns (label columns excluded)."""
    columns = [c for c in dataset.column_names if c not in exclude]
    if not columns:
        raise ValueError("the dataset has no text columns to measure")
    lengths = [0] * len(dataset)
    for column in columns:
        for i, value in enumerate(dataset[column]):
            lengths[i] += _chars(value)
    return lengths


def length_grouped_batches(
    lengths: Sequence[int], batch_size: int, *, seed: int, megabatch_factor: int = 50, drop_last: bool = False
) -> list[list[int]]:
    """Batches of row indices: shuffled, grouped by length within mega-batches, batch order shuffled."""
    if batch_size < 1 or megabatch_factor < 1:
        raise ValueError("batch_size and megabatch_factor must be positive")
    g = torch.Generator()
    g.manual_seed(seed)
    order = torch.randperm(len(lengths), generator=g).tolist()
    mega = batch_size * megabatch_factor
    batches: list[list[int]] = []
    for start in range(0, len(order), mega):
        chunk = sorted(order[start : start + mega], key=lambda i: -lengths[i])
        batches.extend(chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size))
    if drop_last:
        batches = [b for b in batches if len(b) == batch_size]
    shuffle = torch.randperm(len(batches), generator=g).tolist()
    return [batches[i] for i in shuffle]


class LengthGroupedBatchSampler(DefaultBatchSampler):
    """A sentence-transformers batch sampler yielding length-grouped random batches (see the module docstring).

    Reproducible: the batches of an epoch depend only on ``seed + epoch`` (the trainer calls ``set_epoch``).
    """

    megabatch_factor: int = 50

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        drop_last: bool,
        valid_label_columns: list[str] | None = None,
        generator: torch.Generator | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(
            dataset,
            batch_size=batch_size,
            drop_last=drop_last,
            valid_label_columns=valid_label_columns,
            generator=generator,
            seed=seed,
        )
        self.lengths = row_lengths(dataset, exclude=tuple(valid_label_columns or ()) + LABEL_COLUMNS)

    def __iter__(self) -> Iterator[list[int]]:
        yield from length_grouped_batches(
            self.lengths,
            self.batch_size,
            seed=int(self.seed) + int(self.epoch),
            megabatch_factor=self.megabatch_factor,
            drop_last=self.drop_last,
        )

    def __len__(self) -> int:
        n, bs = len(self.lengths), self.batch_size
        mega = bs * self.megabatch_factor
        sizes = [mega] * (n // mega) + ([n % mega] if n % mega else [])
        return sum(m // bs if self.drop_last else -(-m // bs) for m in sizes)

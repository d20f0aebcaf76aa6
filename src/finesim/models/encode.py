"""Encode a batch with each distinct input once: the one helper behind every scorer and the CASE encoder."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch


def encode_distinct(
    model: Any, items: Sequence[Hashable], *, batch_size: int = 64, show_progress: bool = False
) -> tuple[torch.Tensor, dict[Hashable, int]]:
    """Encode each distinct item of ``items`` once with ``model.encode``.

    Returns the float32 embeddings of the distinct items (in first-seen order, on the CPU) and each item's row.
    Items are texts or ``(text, condition)`` pairs (which a ``SentenceTransformer`` encodes as a text pair).
    """
    unique = list(dict.fromkeys(items))
    position = {item: i for i, item in enumerate(unique)}
    if not unique:
        return torch.zeros((0, 0)), position
    embeddings = model.encode(unique, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=show_progress)
    return embeddings.float().cpu(), position


def rows(embeddings: torch.Tensor, position: dict[Hashable, int], items: Sequence[Hashable]) -> torch.Tensor:
    """The embeddings of ``items`` (one row each) from the output of :func:`encode_distinct`."""
    return embeddings[[position[x] for x in items]]

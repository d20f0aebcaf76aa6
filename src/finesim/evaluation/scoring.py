"""Pair scorers: the one interface the evaluation harness needs from any model.

A scorer maps (sentence1, sentence2[, condition]) batches to similarity scores. Embedding models are wrapped by
:class:`EmbeddingScorer`; other model types (cross-encoders, tri-encoders, CASE projections) implement
:class:`PairScorer` themselves and plug into the same harness.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import torch

ConditionMode = Literal["pair", "ignore"]
Similarity = Literal["cosine", "dot", "euclidean", "manhattan"]


@runtime_checkable
class PairScorer(Protocol):
    """Anything that scores sentence pairs, optionally under a condition.

    A scorer may also declare ``prediction_range = (low, high)``: the range of its scores that corresponds to labels
    on [0, 1] (cosine scorers: ``(0, 1)``), which analyses comparing scores with labels need (the over-estimation
    count); without it they are skipped unless the caller gives the range.
    """

    def score(
        self,
        sentences1: Sequence[str],
        sentences2: Sequence[str],
        conditions: Sequence[str] | None = None,
    ) -> np.ndarray:
        """Return one similarity score per pair (higher = more similar)."""
        ...


def pairwise_similarity(a: torch.Tensor, b: torch.Tensor, similarity: Similarity = "cosine") -> torch.Tensor:
    """Row-wise similarity of two equally shaped embedding matrices."""
    if similarity == "cosine":
        return torch.nn.functional.cosine_similarity(a, b, dim=-1)
    if similarity == "dot":
        return (a * b).sum(-1)
    if similarity == "euclidean":
        return -torch.linalg.vector_norm(a - b, dim=-1)
    if similarity == "manhattan":
        return -(a - b).abs().sum(-1)
    raise ValueError(f"unknown similarity {similarity!r}")


class EmbeddingScorer:
    """Score pairs with a sentence-embedding model, encoding each distinct input once.

    Args:
        model: a ``SentenceTransformer`` (anything with a compatible ``encode``).
        condition_mode: with conditions, ``"pair"`` encodes ``(sentence, condition)`` as a text pair
            (``[CLS] s [SEP] c [SEP]``, the C-STS bi-encoder, zero-shot or trained); ``"ignore"`` encodes the
            sentence alone (the condition-ignored reference point).
        similarity: the similarity function; cosine by default.
        batch_size: encoding batch size (the model sorts inputs by length within a call).
        show_progress: show a progress bar while encoding.
    """

    def __init__(
        self,
        model: Any,
        *,
        condition_mode: ConditionMode = "pair",
        similarity: Similarity = "cosine",
        batch_size: int = 64,
        show_progress: bool = False,
    ) -> None:
        if condition_mode not in ("pair", "ignore"):
            raise ValueError(f"condition_mode must be 'pair' or 'ignore', got {condition_mode!r}")
        self.model = model
        self.condition_mode = condition_mode
        self.similarity = similarity
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.last_encoded = 0

    @property
    def prediction_range(self) -> tuple[float, float] | None:
        """Cosine scores are compared with labels on [0, 1] as they are; other similarities have no known scale."""
        return (0.0, 1.0) if self.similarity == "cosine" else None

    def _inputs(self, sentences: Sequence[str], conditions: Sequence[str] | None) -> list[Any]:
        if conditions is None or self.condition_mode == "ignore":
            return list(sentences)
        if len(conditions) != len(sentences):
            raise ValueError(f"{len(sentences)} sentences but {len(conditions)} conditions")
        return list(zip(sentences, conditions))

    def score(
        self,
        sentences1: Sequence[str],
        sentences2: Sequence[str],
        conditions: Sequence[str] | None = None,
    ) -> np.ndarray:
        if len(sentences1) != len(sentences2):
            raise ValueError(f"{len(sentences1)} first sentences but {len(sentences2)} second sentences")
        left = self._inputs(sentences1, conditions)
        right = self._inputs(sentences2, conditions)
        unique = list(dict.fromkeys(left + right))
        position = {item: i for i, item in enumerate(unique)}
        embeddings = self.model.encode(
            unique,
            batch_size=self.batch_size,
            convert_to_tensor=True,
            show_progress_bar=self.show_progress,
        )
        self.last_encoded = len(unique)
        embeddings = embeddings.float().cpu()
        a = embeddings[[position[x] for x in left]]
        b = embeddings[[position[x] for x in right]]
        return pairwise_similarity(a, b, self.similarity).numpy()

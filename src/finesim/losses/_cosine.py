"""Shared plumbing of the C-STS cosine losses: conditional cosines of bi- and tri-encoder batches.

Feature layouts (the column order the training runner produces):

- rows, bi-encoder: ``[(s1, c), (s2, c)]`` (each column a text pair)
- rows, tri-encoder: ``[s1, s2, c]``
- pairs, bi-encoder: ``[(s1, c_high), (s2, c_high), (s1, c_low), (s2, c_low)]``
- pairs, tri-encoder: ``[s1, s2, c_high, c_low]``

Bi and tri are told apart by the model itself: a tri-encoder has a
:class:`finesim.models.heads.ConditionHead`.
For a tri-encoder the condition embedding is passed into the model's forward as ``condition_embedding`` so
the head runs inside the (possibly DDP-wrapped) forward pass.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from finesim.models.heads import CONDITION_KEY, find_condition_head


def embed(model: Any, features: dict[str, Any], condition: Tensor | None = None) -> Tensor:
    """``sentence_embedding`` of one column; fused with ``condition`` when given (tri-encoder)."""
    inputs = dict(features)
    if condition is not None:
        inputs[CONDITION_KEY] = condition
    return model(inputs)["sentence_embedding"]


def is_tri(model: Any) -> bool:
    """Whether ``model`` (possibly wrapped) is a tri-encoder."""
    return find_condition_head(model) is not None


def row_cosines(model: Any, features: list[dict[str, Any]]) -> Tensor:
    """``cos(f(s1, c), f(s2, c))`` for a rows-layout batch."""
    if is_tri(model):
        if len(features) != 3:
            raise ValueError(f"a tri-encoder batch needs 3 columns (s1, s2, condition), got {len(features)}")
        c = embed(model, features[2])
        a, b = embed(model, features[0], c), embed(model, features[1], c)
    else:
        if len(features) != 2:
            raise ValueError(
                f"a bi-encoder batch needs 2 columns ((s1, c) and (s2, c) text pairs), got {len(features)}"
            )
        a, b = embed(model, features[0]), embed(model, features[1])
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)


def pair_cosines(model: Any, features: list[dict[str, Any]]) -> tuple[Tensor, Tensor]:
    """``(cos under the high condition, cos under the low condition)`` for a pairs-layout batch."""
    if len(features) != 4:
        raise ValueError(
            f"a condition-pair batch needs 4 columns, got {len(features)}: "
            "bi-encoder (s1,c_high), (s2,c_high), "
            "(s1,c_low), (s2,c_low); tri-encoder s1, s2, c_high, c_low"
        )
    cos = torch.nn.functional.cosine_similarity
    if is_tri(model):
        c_hi, c_lo = embed(model, features[2]), embed(model, features[3])
        high = cos(embed(model, features[0], c_hi), embed(model, features[1], c_hi), dim=-1)
        low = cos(embed(model, features[0], c_lo), embed(model, features[1], c_lo), dim=-1)
        return high, low
    high = cos(embed(model, features[0]), embed(model, features[1]), dim=-1)
    low = cos(embed(model, features[2]), embed(model, features[3]), dim=-1)
    return high, low


def pair_labels(labels: Tensor) -> tuple[Tensor, Tensor]:
    """Split ``(B, 2)`` labels ``[label_high, label_low]`` with a clear error for any other shape."""
    if labels is None or labels.dim() != 2 or labels.shape[1] != 2:
        shape = None if labels is None else tuple(labels.shape)
        raise ValueError(f"condition-pair losses need labels of shape (batch, 2) = [high, low], got {shape}")
    return labels[:, 0].float(), labels[:, 1].float()

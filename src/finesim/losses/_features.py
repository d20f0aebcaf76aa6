"""Shared plumbing of the conditional losses: run a (bi- or tri-encoder) model on a batch's columns.

Feature layouts (the column order the training runner produces, :mod:`finesim.training.encoders`):

- rows, bi-encoder: ``[(s1, c), (s2, c)]`` (each column a text pair)
- rows, tri-encoder: ``[s1, s2, c]``
- pairs, bi-encoder: ``[(s1, c_high), (s2, c_high), (s1, c_low), (s2, c_low)]``
- pairs, tri-encoder: ``[s1, s2, c_high, c_low]``; labels ``[l_high, l_low]``

Bi and tri are told apart by the model itself: a tri-encoder has a
:class:`~finesim.models.condition_head.ConditionHead`. For a tri-encoder the condition embedding is passed into the
model's forward as ``condition_embedding`` so the head runs inside the (possibly DDP-wrapped) forward pass.

Each view's output dict holds ``sentence_embedding`` (the conditional representation ``h`` scored by cosine) and,
when the model has a :class:`~finesim.models.projection_head.ProjectionHead`, ``projected_embedding`` (``g(h)``).

**Label scale of the condition-pair (CCL) losses.** CCL labels live on [0, 1]: C-STS labels 1-5 map to
``(y - 1) / 4`` (the recipe's ``labels: {scale: minmax, low: 1, high: 5}``). That is the scale the CCL paper
implies: its Table 1 shows labels 0.5 and 0.75, and BCL's weight ``1 - l`` and cut-off ``l >= sigma`` with ``sigma``
in [0, 1] only make sense there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from finesim.models.condition_head import CONDITION_KEY, find_condition_head

PROJECTION_HINT = "add a projection head with finesim.models.projection_head.add_projection_head(model)"


def run(model: Any, features: dict[str, Any], condition: Tensor | None = None) -> dict[str, Any]:
    """The model's output dict for one column; the condition embedding is fused in when given (tri-encoder)."""
    inputs = dict(features)
    if condition is not None:
        inputs[CONDITION_KEY] = condition
    return model(inputs)


def embed(model: Any, features: dict[str, Any], condition: Tensor | None = None) -> Tensor:
    """``sentence_embedding`` of one column; fused with ``condition`` when given (tri-encoder)."""
    return run(model, features, condition)["sentence_embedding"]


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


def pair_outputs(model: Any, features: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The model outputs of the four views ``(s1, c_high), (s2, c_high), (s1, c_low), (s2, c_low)``."""
    if len(features) != 4:
        raise ValueError(
            "a condition-pair loss expects the 4 condition-pair columns (4 columns: bi-encoder (s1,c_high), "
            f"(s2,c_high), (s1,c_low), (s2,c_low); tri-encoder s1, s2, c_high, c_low), got {len(features)}"
        )
    if is_tri(model):
        s1, s2, c_high, c_low = features
        ch = run(model, c_high)["sentence_embedding"]
        cl = run(model, c_low)["sentence_embedding"]
        return [run(model, s1, ch), run(model, s2, ch), run(model, s1, cl), run(model, s2, cl)]
    return [run(model, f) for f in features]


def pair_cosines(model: Any, features: list[dict[str, Any]]) -> tuple[Tensor, Tensor]:
    """``(cos under the high condition, cos under the low condition)`` for a pairs-layout batch."""
    e = [out["sentence_embedding"] for out in pair_outputs(model, features)]
    cos = torch.nn.functional.cosine_similarity
    return cos(e[0], e[1], dim=-1), cos(e[2], e[3], dim=-1)


def pair_labels(labels: Tensor) -> tuple[Tensor, Tensor]:
    """Split ``(B, 2)`` labels ``[label_high, label_low]`` with a clear error for any other shape."""
    if labels is None or labels.dim() != 2 or labels.shape[1] != 2:
        shape = None if labels is None else tuple(labels.shape)
        raise ValueError(f"condition-pair losses need labels of shape (batch, 2) = [high, low], got {shape}")
    return labels[:, 0].float(), labels[:, 1].float()


def check_label_order(label_pos: Tensor, label_neg: Tensor) -> None:
    """Raise when a pair's high-condition label is below its low one (the paper requires l_pos >= l_neg)."""
    bad = torch.nonzero(label_pos < label_neg).flatten()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(
            f"{bad.numel()} pairs have label_pos < label_neg (first at batch index {i}: "
            f"{float(label_pos[i]):g} < {float(label_neg[i]):g}); order each pair high condition first"
        )


def reduce(values: Tensor, reduction: str) -> Tensor:
    """Reduce per-sample losses with ``"mean"``, ``"sum"`` or ``"none"``."""
    if reduction == "mean":
        return values.mean()
    if reduction == "sum":
        return values.sum()
    if reduction == "none":
        return values
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def second_pass_projections(model: Any, features: list[dict[str, Any]]) -> Tensor:
    """``g(f'(s1, c))`` for the high then the low condition: a fresh forward pass (new dropout masks).

    For a tri-encoder the condition is re-encoded too, so the whole input ``(s1, c)`` gets new dropout noise.
    """
    if is_tri(model):
        s1, _, c_high, c_low = features
        outs = [run(model, s1, run(model, c)["sentence_embedding"]) for c in (c_high, c_low)]
    else:
        outs = [run(model, features[i]) for i in (0, 2)]
    if any("projected_embedding" not in o for o in outs):
        raise KeyError(f"BCL needs 'projected_embedding' in the model output; {PROJECTION_HINT}")
    return torch.cat([o["projected_embedding"] for o in outs])


class PairCosineLoss(nn.Module):
    """A sentence-transformers loss over the four condition-pair columns computed from the two cosines alone:
    subclasses set :attr:`loss_fn` ``(cos_pos, cos_neg, label_pos, label_neg, *, reduction) -> Tensor``."""

    loss_fn: Callable[..., Tensor]

    def __init__(self, model: Any, *, reduction: str = "mean") -> None:
        super().__init__()
        self.model = model
        self.reduction = reduction

    def forward(self, features: list[dict[str, Any]], labels: Tensor) -> Tensor:
        cos_pos, cos_neg = pair_cosines(self.model, features)
        label_pos, label_neg = pair_labels(labels)
        return self.loss_fn(cos_pos, cos_neg, label_pos, label_neg, reduction=self.reduction)

    def get_config_dict(self) -> dict[str, Any]:
        return {"reduction": self.reduction}

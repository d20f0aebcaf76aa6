"""Shared plumbing of the CCL losses: model outputs of a condition-pair batch, for bi- and tri-encoders.

The batch layout is the training runner's ``pairs`` layout (:mod:`finesim.training.registry`): one C-STS
sentence pair under both of its conditions, bi-encoder ``[(s1, c_high), (s2, c_high), (s1, c_low), (s2,
c_low)]``, tri-encoder ``[s1, s2, c_high, c_low]``; labels ``[l_high, l_low]``.

**Label scale.** CCL labels live on [0, 1]: C-STS labels 1-5 map to ``(y - 1) / 4`` (the recipe's ``labels:
{scale: minmax, low: 1, high: 5}``). That is the scale the CCL paper implies: its Table 1 shows labels 0.5 and
0.75, and BCL's weight ``1 - l`` and cut-off ``l >= sigma`` with ``sigma`` in [0, 1] only make sense there.

Each view's output dict holds ``sentence_embedding`` (the conditional representation ``h`` scored by cosine)
and, when the model has a :class:`finesim.models.projection_head.ProjectionHead`, ``projected_embedding``
(``g(h)``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from finesim.losses._cosine import is_tri, pair_labels
from finesim.models.heads import CONDITION_KEY

__all__ = ["check_label_order", "embed", "pair_labels", "pair_outputs", "reduce", "second_pass_projections"]

PROJECTION_HINT = "add a projection head with finesim.models.projection_head.add_projection_head(model)"


def check_pair_features(features: list[dict[str, Any]], *, loss_name: str) -> None:
    """Raise unless there are exactly the four condition-pair columns."""
    if len(features) != 4:
        raise ValueError(
            f"{loss_name} expects the 4 condition-pair columns (bi-encoder (s1,c_high), (s2,c_high), "
            "(s1,c_low), "
            f"(s2,c_low); tri-encoder s1, s2, c_high, c_low), got {len(features)}"
        )


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


def _run(model: Any, features: dict[str, Any], condition: Tensor | None = None) -> dict[str, Any]:
    inputs = dict(features)
    if condition is not None:
        inputs[CONDITION_KEY] = condition
    return model(inputs)


def embed(model: Any, features: dict[str, Any], key: str = "sentence_embedding") -> Tensor:
    """Run ``model`` on one column's features and return the output ``key`` (clear error if missing)."""
    out = _run(model, features)
    if key not in out:
        hint = f"; {PROJECTION_HINT}" if key == "projected_embedding" else ""
        raise KeyError(f"the model output has no {key!r} (it has {sorted(out)}){hint}")
    return out[key]


def pair_outputs(model: Any, features: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The model outputs of the four views ``(s1, c_high), (s2, c_high), (s1, c_low), (s2, c_low)``."""
    check_pair_features(features, loss_name="a condition-pair loss")
    if is_tri(model):
        s1, s2, c_high, c_low = features
        ch = _run(model, c_high)["sentence_embedding"]
        cl = _run(model, c_low)["sentence_embedding"]
        return [_run(model, s1, ch), _run(model, s2, ch), _run(model, s1, cl), _run(model, s2, cl)]
    return [_run(model, f) for f in features]


def second_pass_projections(model: Any, features: list[dict[str, Any]]) -> Tensor:
    """``g(f'(s1, c))`` for the high then the low condition: a fresh forward pass (new dropout masks).

    For a tri-encoder the condition is re-encoded too, so the whole input ``(s1, c)`` gets new dropout noise.
    """
    if is_tri(model):
        s1, _, c_high, c_low = features
        outs = [_run(model, s1, _run(model, c)["sentence_embedding"]) for c in (c_high, c_low)]
    else:
        outs = [_run(model, features[i]) for i in (0, 2)]
    if any("projected_embedding" not in o for o in outs):
        raise KeyError(f"BCL needs 'projected_embedding' in the model output; {PROJECTION_HINT}")
    return torch.cat([o["projected_embedding"] for o in outs])

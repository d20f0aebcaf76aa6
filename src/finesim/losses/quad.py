"""The C-STS quadruplet margin loss ("Quad").

``Quad(p1, p2, n1, n2) = max(0, λ + cos(n1, n2) - cos(p1, p2))`` averaged over the batch, where ``p`` are the
conditional encodings of a sentence pair under its higher-similarity condition and ``n`` under its lower one
(Deshpande et al. 2023, section 4.1; λ = 1 as in the reference code). Equivalent to the reference's distance
form ``max(0, λ + d(p) - d(n))`` with ``d = 1 - cos``.

Pairs whose two conditions have equal labels are kept by default (as in the reference); the training recipe's
``data.equal_labels`` (``keep``/``drop``/``error``) decides, at pairing time. With ``skip_equal=True`` this
loss additionally masks such pairs out of the Quad term (they still count for the MSE of Quad+MSE).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from finesim.losses._features import pair_cosines, pair_labels


def quad_loss(cos_high: Tensor, cos_low: Tensor, margin: float = 1.0, mask: Tensor | None = None) -> Tensor:
    """``mean(max(0, margin + cos_low - cos_high))``, over the rows where ``mask`` is true (all by default).

    Returns 0 (with a gradient graph) when the mask selects no rows.
    """
    if cos_high.shape != cos_low.shape:
        raise ValueError(f"cos_high {tuple(cos_high.shape)} and cos_low {tuple(cos_low.shape)} differ in shape")
    values = torch.clamp(margin + cos_low - cos_high, min=0.0)
    if mask is not None:
        if not mask.any():
            return values.sum() * 0.0
        values = values[mask]
    return values.mean()


class QuadLoss(nn.Module):
    """Quad over a pairs-layout batch (see :mod:`finesim.losses._features`); labels are ``(B, 2)``.

    Args:
        model: a bi- or tri-encoder ``SentenceTransformer``.
        margin: λ.
        skip_equal: leave pairs with equal high/low labels out of the margin term.
    """

    def __init__(self, model: Any, margin: float = 1.0, skip_equal: bool = False) -> None:
        super().__init__()
        self.model = model
        self.margin = float(margin)
        self.skip_equal = bool(skip_equal)

    def forward(self, features: list[dict[str, Any]], labels: Tensor) -> Tensor:
        high, low = pair_cosines(self.model, features)
        label_high, label_low = pair_labels(labels)
        mask = label_high != label_low if self.skip_equal else None
        return quad_loss(high, low, self.margin, mask)

    def get_config_dict(self) -> dict[str, Any]:
        return {"margin": self.margin, "skip_equal": self.skip_equal}

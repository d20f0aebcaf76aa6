"""Reverse Direction Loss (RDL, CCL paper Eq. 6).

::

    RDL = max(l_neg - l_pos - cos_neg + cos_pos, 0)

Non-zero exactly when the predicted gap ``cos_pos - cos_neg`` exceeds the label gap: it then pulls the
positive similarity down and the negative one up (the over-estimation FDL ignores). Labels on the [0, 1]
scale.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from finesim.losses._condition_pairs import reduce
from finesim.losses._cosine import pair_cosines, pair_labels


def reverse_direction_loss(
    cos_pos: Tensor, cos_neg: Tensor, label_pos: Tensor, label_neg: Tensor, *, reduction: str = "mean"
) -> Tensor:
    """Eq. 6 per pair, reduced with ``reduction`` (``"mean"``, ``"sum"`` or ``"none"``)."""
    return reduce((label_neg - label_pos - cos_neg + cos_pos).clamp(min=0), reduction)


class RDLLoss(nn.Module):
    """RDL as a sentence-transformers loss over the four condition-pair columns."""

    def __init__(self, model: Any, *, reduction: str = "mean") -> None:
        super().__init__()
        self.model = model
        self.reduction = reduction

    def forward(self, features: list[dict[str, Any]], labels: Tensor) -> Tensor:
        cos_pos, cos_neg = pair_cosines(self.model, features)
        label_pos, label_neg = pair_labels(labels)
        return reverse_direction_loss(cos_pos, cos_neg, label_pos, label_neg, reduction=self.reduction)

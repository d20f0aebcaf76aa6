"""Forward Directional Loss (FDL, CCL paper Eq. 5).

For one sentence pair under a positive (higher-label) and a negative condition::

    FDL = max(l_pos - l_neg + cos_neg - cos_pos, 0)

It is the Quad loss with its fixed margin 1 replaced by the label gap, so it stops pushing the two
similarities apart once their gap reaches the label gap. Labels on the [0, 1] scale (see
:mod:`finesim.losses._condition_pairs`).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from finesim.losses._condition_pairs import reduce
from finesim.losses._cosine import pair_cosines, pair_labels


def forward_directional_loss(
    cos_pos: Tensor, cos_neg: Tensor, label_pos: Tensor, label_neg: Tensor, *, reduction: str = "mean"
) -> Tensor:
    """Eq. 5 per pair, reduced with ``reduction`` (``"mean"``, ``"sum"`` or ``"none"``)."""
    return reduce((label_pos - label_neg + cos_neg - cos_pos).clamp(min=0), reduction)


class FDLLoss(nn.Module):
    """FDL as a sentence-transformers loss over the four condition-pair columns."""

    def __init__(self, model: Any, *, reduction: str = "mean") -> None:
        super().__init__()
        self.model = model
        self.reduction = reduction

    def forward(self, features: list[dict[str, Any]], labels: Tensor) -> Tensor:
        cos_pos, cos_neg = pair_cosines(self.model, features)
        label_pos, label_neg = pair_labels(labels)
        return forward_directional_loss(cos_pos, cos_neg, label_pos, label_neg, reduction=self.reduction)

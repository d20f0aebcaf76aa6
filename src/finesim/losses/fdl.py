"""Forward Directional Loss (FDL, CCL paper Eq. 5).

For one sentence pair under a positive (higher-label) and a negative condition::

    FDL = max(l_pos - l_neg + cos_neg - cos_pos, 0)

It is the Quad loss with its fixed margin 1 replaced by the label gap, so it stops pushing the two
similarities apart once their gap reaches the label gap. Labels on the [0, 1] scale (see
:mod:`finesim.losses._features`).
"""

from __future__ import annotations

from torch import Tensor

from finesim.losses._features import PairCosineLoss, reduce


def forward_directional_loss(
    cos_pos: Tensor, cos_neg: Tensor, label_pos: Tensor, label_neg: Tensor, *, reduction: str = "mean"
) -> Tensor:
    """Eq. 5 per pair, reduced with ``reduction`` (``"mean"``, ``"sum"`` or ``"none"``)."""
    return reduce((label_pos - label_neg + cos_neg - cos_pos).clamp(min=0), reduction)


class FDLLoss(PairCosineLoss):
    """FDL as a sentence-transformers loss over the four condition-pair columns."""

    loss_fn = staticmethod(forward_directional_loss)

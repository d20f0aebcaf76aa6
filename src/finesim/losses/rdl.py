"""Reverse Direction Loss (RDL, CCL paper Eq. 6).

::

    RDL = max(l_neg - l_pos - cos_neg + cos_pos, 0)

Non-zero exactly when the predicted gap ``cos_pos - cos_neg`` exceeds the label gap: it then pulls the
positive similarity down and the negative one up (the over-estimation FDL ignores). Labels on the [0, 1]
scale.
"""

from __future__ import annotations

from torch import Tensor

from finesim.losses._features import PairCosineLoss, reduce


def reverse_direction_loss(
    cos_pos: Tensor, cos_neg: Tensor, label_pos: Tensor, label_neg: Tensor, *, reduction: str = "mean"
) -> Tensor:
    """Eq. 6 per pair, reduced with ``reduction`` (``"mean"``, ``"sum"`` or ``"none"``)."""
    return reduce((label_neg - label_pos - cos_neg + cos_pos).clamp(min=0), reduction)


class RDLLoss(PairCosineLoss):
    """RDL as a sentence-transformers loss over the four condition-pair columns."""

    loss_fn = staticmethod(reverse_direction_loss)

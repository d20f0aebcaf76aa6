"""Adaptive Contrastive Loss (ACL, CCL paper Eq. 7/8).

``ACL = FDL + RDL = |l_pos - l_neg + cos_neg - cos_pos|`` (Eq. 8 is Eq. 7 rewritten: at most one of the two
hinges is non-zero). It drives the predicted gap ``cos_pos - cos_neg`` towards the label gap from either side.
Computed here as the literal sum of Eq. 5 and Eq. 6, which equals Eq. 8 value for value and gradient for
gradient.
"""

from __future__ import annotations

from torch import Tensor

from finesim.losses._features import PairCosineLoss, reduce
from finesim.losses.fdl import forward_directional_loss
from finesim.losses.rdl import reverse_direction_loss


def adaptive_contrastive_loss(
    cos_pos: Tensor, cos_neg: Tensor, label_pos: Tensor, label_neg: Tensor, *, reduction: str = "mean"
) -> Tensor:
    """Eq. 7 per pair (FDL + RDL), reduced with ``reduction`` (``"mean"``, ``"sum"`` or ``"none"``)."""
    fdl = forward_directional_loss(cos_pos, cos_neg, label_pos, label_neg, reduction="none")
    rdl = reverse_direction_loss(cos_pos, cos_neg, label_pos, label_neg, reduction="none")
    return reduce(fdl + rdl, reduction)


class ACLLoss(PairCosineLoss):
    """ACL as a sentence-transformers loss over the four condition-pair columns."""

    loss_fn = staticmethod(adaptive_contrastive_loss)

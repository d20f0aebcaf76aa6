"""Weighted Adaptive Contrastive Loss (W-ACL, CCL paper Eq. 9).

``W-ACL = (l_pos - l_neg) * |l_pos - l_neg + cos_neg - cos_pos|``: ACL weighted by the label gap, so pairs
whose two conditions differ more (more confident positive/negative samples) weigh more, and pairs with equal
labels weigh 0. Labels on the [0, 1] scale; the weight is the raw gap (no normalisation), reduced by the batch
mean by default.

For a pair with differing labels W-ACL is zero exactly when the cosine gap ``cos_pos - cos_neg`` equals the
label gap; for a pair with tied labels it is zero (with zero gradient) whatever the cosines.
"""

from __future__ import annotations

from torch import Tensor

from finesim.losses._features import PairCosineLoss, check_label_order, reduce
from finesim.losses.acl import adaptive_contrastive_loss


def weighted_adaptive_contrastive_loss(
    cos_pos: Tensor, cos_neg: Tensor, label_pos: Tensor, label_neg: Tensor, *, reduction: str = "mean"
) -> Tensor:
    """Eq. 9 per pair, reduced with ``reduction`` (``"mean"``, ``"sum"`` or ``"none"``).

    Raises:
        ValueError: if some pair has ``label_pos < label_neg`` (the weight would turn negative).
    """
    check_label_order(label_pos, label_neg)
    acl = adaptive_contrastive_loss(cos_pos, cos_neg, label_pos, label_neg, reduction="none")
    return reduce((label_pos - label_neg) * acl, reduction)


class WACLLoss(PairCosineLoss):
    """W-ACL as a sentence-transformers loss over the four condition-pair columns."""

    loss_fn = staticmethod(weighted_adaptive_contrastive_loss)

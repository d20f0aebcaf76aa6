"""L1 loss on the regression head's prediction (the STS-regression paper's baseline for Translated ReLU)."""

from __future__ import annotations

from torch import Tensor

from finesim.losses._regression import HeadRegressionLoss, check_pair_batch


def l1_loss(pred: Tensor, labels: Tensor) -> Tensor:
    """``mean(|pred - label|)``."""
    pred, labels = check_pair_batch(pred, labels, "l1_loss")
    return (pred - labels).abs().mean()


class L1RegressionLoss(HeadRegressionLoss):
    """L1 between the model's regression-head prediction and the label; see :class:`HeadRegressionLoss`."""

    loss_fn = staticmethod(l1_loss)

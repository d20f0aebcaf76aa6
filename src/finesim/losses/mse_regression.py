"""MSE on the regression head's prediction (the STS-regression paper's baseline for Smooth K2).

Not to be confused with MSE on the cosine similarity (sentence-transformers' ``CosineSimilarityLoss``), which
has no head.
"""

from __future__ import annotations

from torch import Tensor

from finesim.losses._regression import HeadRegressionLoss, check_pair_batch


def mse_regression_loss(pred: Tensor, labels: Tensor) -> Tensor:
    """``mean((pred - label)^2)``."""
    pred, labels = check_pair_batch(pred, labels, "mse_regression_loss")
    return (pred - labels).pow(2).mean()


class MSERegressionLoss(HeadRegressionLoss):
    """MSE between the model's regression-head prediction and the label; see :class:`HeadRegressionLoss`."""

    loss_fn = staticmethod(mse_regression_loss)

"""Smooth K2 loss (STS-regression paper, Eq. 2): MSE with a zero-gradient buffer zone.

With ``x = |pred - label|``: ``f(x) = k * (x - x0)^2`` for ``x >= x0`` and 0 below (the paper writes it as ``k
* (x^2 - 2 x0 x + x0^2)``; its derivative is ``2k (x - x0)``, continuous at ``x0``); averaged over the batch.
Defaults follow the reference code and the paper's BERT setting (``k = 2``, ``x0 = 0.25``).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from finesim.losses._regression import BufferZoneRegressionLoss, check_buffer_hparams, check_pair_batch


def smooth_k2_loss(pred: Tensor, labels: Tensor, *, k: float = 2.0, x0: float = 0.25) -> Tensor:
    """``mean(k * (|pred - label| - x0)^2 * 1[|pred - label| >= x0])``."""
    check_buffer_hparams(k, x0)
    pred, labels = check_pair_batch(pred, labels, "smooth_k2_loss")
    x = (pred - labels).abs()
    return (k * (x - x0).clamp_min(0.0).pow(2)).mean()


class SmoothK2Loss(BufferZoneRegressionLoss):
    """Smooth K2 on the model's regression-head prediction.

    Args:
        model: a ``SentenceTransformer`` with a ``RegressionHead``.
        k: curvature (default 2.0).
        x0: half-width of the zero-gradient buffer zone (default 0.25).
        clamp, label_range: see :class:`~finesim.losses._regression.HeadRegressionLoss`.
    """

    loss_fn = staticmethod(smooth_k2_loss)

    def __init__(self, model: Any, *, k: float = 2.0, x0: float = 0.25, **options: Any) -> None:
        super().__init__(model, k=k, x0=x0, **options)

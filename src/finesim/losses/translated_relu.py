"""Translated ReLU (STS-regression paper, Eq. 1): L1 with a zero-gradient buffer zone.

With ``x = |pred - label|``: ``f(x) = max(0, k * (x - x0))``; averaged over the batch. ``x0`` should not
exceed half the spacing between label values (``d / 2``). Defaults follow the reference code (``k = 1``, ``x0
= 0.25``); the paper's BERT setting is ``k = 2.5``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from finesim.losses._regression import BufferZoneRegressionLoss, check_buffer_hparams, check_pair_batch


def translated_relu_loss(pred: Tensor, labels: Tensor, *, k: float = 1.0, x0: float = 0.25) -> Tensor:
    """``mean(max(0, k * (|pred - label| - x0)))``; zero loss and gradient where ``|pred - label| < x0``."""
    check_buffer_hparams(k, x0)
    pred, labels = check_pair_batch(pred, labels, "translated_relu_loss")
    x = (pred - labels).abs()
    return (k * (x - x0)).clamp_min(0.0).mean()


class TranslatedReLULoss(BufferZoneRegressionLoss):
    """Translated ReLU on the model's regression-head prediction.

    Args:
        model: a ``SentenceTransformer`` with a ``RegressionHead``.
        k: slope (reference default 1.0).
        x0: half-width of the zero-gradient buffer zone (default 0.25).
        clamp, label_range: see :class:`~finesim.losses._regression.HeadRegressionLoss`.
    """

    loss_fn = staticmethod(translated_relu_loss)

    def __init__(self, model: Any, *, k: float = 1.0, x0: float = 0.25, **options: Any) -> None:
        super().__init__(model, k=k, x0=x0, **options)

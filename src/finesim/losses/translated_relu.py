"""Translated ReLU (STS-regression paper, Eq. 1): L1 with a zero-gradient buffer zone.

With ``x = |pred - label|``: ``f(x) = max(0, k * (x - x0))``; averaged over the batch. ``x0`` should not
exceed half the spacing between label values (``d / 2``). Defaults follow the reference code (``k = 1``, ``x0
= 0.25``); the paper's BERT setting is ``k = 2.5``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from finesim.losses._regression import ClampMode, HeadRegressionLoss, check_pair_batch


def _check_hparams(k: float, x0: float) -> None:
    if not k > 0:
        raise ValueError(f"k must be > 0, got {k}")
    if x0 < 0:
        raise ValueError(f"x0 must be >= 0, got {x0}")


def translated_relu_loss(pred: Tensor, labels: Tensor, *, k: float = 1.0, x0: float = 0.25) -> Tensor:
    """``mean(max(0, k * (|pred - label| - x0)))``; zero loss and gradient where ``|pred - label| < x0``."""
    _check_hparams(k, x0)
    pred, labels = check_pair_batch(pred, labels, "translated_relu_loss")
    x = (pred - labels).abs()
    return (k * (x - x0)).clamp_min(0.0).mean()


class TranslatedReLULoss(HeadRegressionLoss):
    """Translated ReLU on the model's regression-head prediction.

    Args:
        model: a ``SentenceTransformer`` with a ``RegressionHead``.
        k: slope (reference default 1.0).
        x0: half-width of the zero-gradient buffer zone (default 0.25).
        clamp, label_range: see :class:`~finesim.losses._regression.HeadRegressionLoss`.
    """

    loss_fn = staticmethod(translated_relu_loss)

    def __init__(
        self,
        model: Any,
        *,
        k: float = 1.0,
        x0: float = 0.25,
        clamp: ClampMode = "lower",
        label_range: tuple[float, float] = (0.0, 5.0),
    ) -> None:
        _check_hparams(k, x0)
        super().__init__(model, clamp=clamp, label_range=label_range)
        self.k, self.x0 = float(k), float(x0)

    def loss_kwargs(self) -> dict[str, float]:
        return {"k": self.k, "x0": self.x0}

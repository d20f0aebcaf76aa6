"""Shared plumbing for the Siamese regression losses (STS-regression paper, section 3).

Every regression loss here follows the same path: embed both columns with the model, score the pair with the
model's :class:`~finesim.models.regression_head.RegressionHead` (``Linear([u; v; |u-v|]) -> 1``), optionally
clamp the prediction to the label range, then apply a pure loss function to ``|prediction - label|``.

Clamping (``clamp``), a choice the paper leaves open ("it is advisable to consider reassigning predictions
that transcend the defined category range to the nearest boundary"):

- ``"lower"`` (default) -- what the reference code does: ``pred * (pred >= 0)``, i.e. predictions below the
  lowest label become that label with zero gradient; nothing is clamped at the top.
- ``"both"`` -- clamp to ``[low, high]`` (the paper's text); zero gradient outside the range.
- ``"none"`` -- no clamping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch
from torch import Tensor, nn

ClampMode = Literal["none", "lower", "both"]
CLAMP_MODES = ("none", "lower", "both")


def clamp_predictions(pred: Tensor, mode: ClampMode = "lower", label_range: tuple[float, float] = (0.0, 5.0)) -> Tensor:
    """Clamp predictions to the label range; clamped entries get zero gradient.

    ``"lower"`` reproduces the reference code's ``pred * (pred >= 0)`` generalised to ``low``:
    ``where(pred >= low, pred, low)``.
    """
    if mode not in CLAMP_MODES:
        raise ValueError(f"clamp must be one of {CLAMP_MODES}, got {mode!r}")
    low, high = label_range
    if not high > low:
        raise ValueError(f"label range [{low}, {high}] is empty")
    if mode == "none":
        return pred
    low_t = torch.full_like(pred, low)
    out = torch.where(pred >= low, pred, low_t)
    if mode == "both":
        out = torch.where(out <= high, out, torch.full_like(pred, high))
    return out


def check_buffer_hparams(k: float, x0: float) -> None:
    """Validate the slope/curvature ``k`` and buffer half-width ``x0`` of Translated ReLU and Smooth K2."""
    if not k > 0:
        raise ValueError(f"k must be > 0, got {k}")
    if x0 < 0:
        raise ValueError(f"x0 must be >= 0, got {x0}")


def check_pair_batch(pred: Tensor, labels: Tensor, name: str) -> tuple[Tensor, Tensor]:
    """Flatten predictions and labels to 1-D float tensors and check they align."""
    pred = pred.reshape(-1)
    labels = labels.reshape(-1).to(pred.dtype)
    if pred.numel() != labels.numel():
        raise ValueError(f"{name}: {pred.numel()} predictions but {labels.numel()} labels")
    if pred.numel() == 0:
        raise ValueError(f"{name}: empty batch")
    return pred, labels


class HeadRegressionLoss(nn.Module):
    """Base for the regression losses: ``forward(features, labels)`` as in sentence-transformers.

    The trainable head lives in the model (a :class:`~finesim.models.regression_head.RegressionHead` module);
    this loss only looks it up. Subclasses set :attr:`loss_fn` (a ``staticmethod``) and :meth:`loss_kwargs`.

    Args:
        model: a ``SentenceTransformer`` containing a ``RegressionHead`` with ``out_features=1``.
        clamp: ``"lower"`` (reference code), ``"both"`` or ``"none"``; see the module docstring.
        label_range: the declared label range used for clamping, e.g. ``(0, 2)`` for NLI, ``(0, 5)`` for STS.
    """

    loss_fn: Callable[..., Tensor]

    def __init__(
        self, model: Any, *, clamp: ClampMode = "lower", label_range: tuple[float, float] = (0.0, 5.0)
    ) -> None:
        super().__init__()
        from finesim.models.regression_head import get_regression_head

        if clamp not in CLAMP_MODES:
            raise ValueError(f"clamp must be one of {CLAMP_MODES}, got {clamp!r}")
        self.model = model
        self.head = get_regression_head(model)
        if self.head.out_features != 1:
            raise ValueError(
                f"{type(self).__name__} needs a regression head with out_features=1, "
                f"the model's head has {self.head.out_features}"
            )
        self.clamp = clamp
        self.label_range = (float(label_range[0]), float(label_range[1]))

    def loss_kwargs(self) -> dict[str, float]:
        """Hyper-parameters passed to :attr:`loss_fn` (none by default)."""
        return {}

    def predict(self, sentence_features: Iterable[dict[str, Tensor]]) -> Tensor:
        """Head predictions (before clamping) for a batch of pairs."""
        from finesim.models.regression_head import pair_inputs

        u, v = pair_inputs(self.model, sentence_features)
        return self.head.score_pair(u, v).reshape(-1)

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> Tensor:
        pred = clamp_predictions(self.predict(sentence_features), self.clamp, self.label_range)
        return self.loss_fn(pred, labels, **self.loss_kwargs())

    def get_config_dict(self) -> dict[str, Any]:
        return {"clamp": self.clamp, "label_range": list(self.label_range), **self.loss_kwargs()}


class BufferZoneRegressionLoss(HeadRegressionLoss):
    """Base for the losses with a zero-gradient buffer zone ``|pred - label| < x0`` and a scale ``k``
    (Translated ReLU, Smooth K2): stores and validates ``k`` and ``x0`` and passes them to :attr:`loss_fn`."""

    def __init__(
        self,
        model: Any,
        *,
        k: float,
        x0: float = 0.25,
        clamp: ClampMode = "lower",
        label_range: tuple[float, float] = (0.0, 5.0),
    ) -> None:
        check_buffer_hparams(k, x0)
        super().__init__(model, clamp=clamp, label_range=label_range)
        self.k, self.x0 = float(k), float(x0)

    def loss_kwargs(self) -> dict[str, float]:
        return {"k": self.k, "x0": self.x0}

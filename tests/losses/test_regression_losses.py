"""STS-regression losses: hand-computed values, zero-gradient buffer zones, clamping, errors."""

from __future__ import annotations

import math

import pytest
import torch

from finesim.losses._regression import clamp_predictions
from finesim.losses.l1 import l1_loss
from finesim.losses.mse_regression import mse_regression_loss
from finesim.losses.smooth_k2 import smooth_k2_loss
from finesim.losses.softmax_classification import softmax_classification_loss
from finesim.losses.translated_relu import translated_relu_loss

PRED = [1.0, 2.0, 0.1, 4.0]
GOLD = [1.1, 3.0, 0.0, 3.5]  # |diff| = 0.1, 1.0, 0.1, 0.5


def _t(values: list[float], grad: bool = False) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64, requires_grad=grad)


def test_l1_and_mse_values() -> None:
    assert l1_loss(_t(PRED), _t(GOLD)).item() == pytest.approx((0.1 + 1.0 + 0.1 + 0.5) / 4)
    assert mse_regression_loss(_t(PRED), _t(GOLD)).item() == pytest.approx((0.01 + 1.0 + 0.01 + 0.25) / 4)


def test_translated_relu_value() -> None:
    # k = 2, x0 = 0.25: only |diff| = 1.0 and 0.5 exceed x0 -> 2 * 0.75 + 2 * 0.25 = 2.0, mean over 4
    assert translated_relu_loss(_t(PRED), _t(GOLD), k=2.0, x0=0.25).item() == pytest.approx(0.5)


def test_smooth_k2_value() -> None:
    # k = 2, x0 = 0.25: 2 * 0.75^2 + 2 * 0.25^2 = 1.125 + 0.125 = 1.25, mean over 4
    assert smooth_k2_loss(_t(PRED), _t(GOLD), k=2.0, x0=0.25).item() == pytest.approx(0.3125)


def test_smooth_k2_equals_paper_polynomial() -> None:
    x = torch.linspace(0.25, 3.0, 12, dtype=torch.float64)
    k, x0 = 3.0, 0.25
    ours = torch.stack([smooth_k2_loss(xi.view(1), torch.zeros(1, dtype=torch.float64), k=k, x0=x0) for xi in x])
    paper = k * (x**2 - 2 * x0 * x + x0**2)
    assert torch.allclose(ours, paper)


@pytest.mark.parametrize("fn", [translated_relu_loss, smooth_k2_loss])
def test_zero_gradient_buffer_zone(fn) -> None:
    pred = _t([1.0, 2.2, 3.0], grad=True)
    gold = _t([1.2, 2.0, 3.0])  # all |diff| < x0 = 0.25
    loss = fn(pred, gold, k=2.0, x0=0.25)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.count_nonzero(pred.grad) == 0


def test_gradient_directions_outside_the_buffer() -> None:
    pred = _t([0.0, 5.0], grad=True)
    gold = _t([2.0, 3.0])  # first under-predicts, second over-predicts, both by 2
    translated_relu_loss(pred, gold, k=2.0, x0=0.25).backward()
    # d/dpred = k * sign(pred - gold) / N
    assert pred.grad.tolist() == pytest.approx([-1.0, 1.0])
    pred.grad = None
    smooth_k2_loss(pred, gold, k=2.0, x0=0.25).backward()
    # d/dpred = 2k (x - x0) sign / N = 2 * 2 * 1.75 / 2
    assert pred.grad.tolist() == pytest.approx([-3.5, 3.5])


def test_smooth_k2_gradient_is_continuous_at_x0() -> None:
    pred = _t([0.25 + 1e-6], grad=True)
    smooth_k2_loss(pred, _t([0.0]), k=2.0, x0=0.25).backward()
    assert abs(pred.grad.item()) < 1e-4


def test_clamp_lower_matches_reference() -> None:
    pred = _t([-0.5, 0.3, 6.0], grad=True)
    out = clamp_predictions(pred, "lower", (0.0, 5.0))
    assert out.tolist() == pytest.approx([0.0, 0.3, 6.0])  # no upper clamp, like the reference code
    out.sum().backward()
    assert pred.grad.tolist() == [0.0, 1.0, 1.0]


def test_clamp_both_and_none() -> None:
    pred = _t([-0.5, 0.3, 6.0], grad=True)
    out = clamp_predictions(pred, "both", (0.0, 5.0))
    assert out.tolist() == pytest.approx([0.0, 0.3, 5.0])
    out.sum().backward()
    assert pred.grad.tolist() == [0.0, 1.0, 0.0]
    assert clamp_predictions(pred, "none").tolist() == pytest.approx([-0.5, 0.3, 6.0])


def test_clamped_over_prediction_at_top_label_costs_nothing() -> None:
    # paper: predicting 3.57 for a label of 3 on a 0..3 scale needs no update once clamped to the range
    loss = smooth_k2_loss(clamp_predictions(_t([3.57]), "both", (0.0, 3.0)), _t([3.0]))
    assert loss.item() == 0.0


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="k must be > 0"):
        smooth_k2_loss(_t([1.0]), _t([1.0]), k=0.0)
    with pytest.raises(ValueError, match="x0 must be >= 0"):
        translated_relu_loss(_t([1.0]), _t([1.0]), x0=-0.1)
    with pytest.raises(ValueError, match="2 predictions but 3 labels"):
        l1_loss(_t([1.0, 2.0]), _t([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="clamp must be one of"):
        clamp_predictions(_t([1.0]), "upper")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        clamp_predictions(_t([1.0]), "both", (2.0, 2.0))


def test_softmax_classification_values_and_errors() -> None:
    logits = torch.zeros(2, 3)
    assert softmax_classification_loss(logits, torch.tensor([0, 2])).item() == pytest.approx(math.log(3))
    assert softmax_classification_loss(logits, torch.tensor([0.0, 2.0])).item() == pytest.approx(math.log(3))
    with pytest.raises(ValueError, match="integer class ids"):
        softmax_classification_loss(logits, torch.tensor([0.5, 1.0]))
    with pytest.raises(ValueError, match=r"class ids must lie in \[0, 2\]"):
        softmax_classification_loss(logits, torch.tensor([0, 3]))

"""Hand-computed values of the CCL losses (FDL, RDL, ACL, W-ACL, BCL, C-MSE) on small tensors."""

from __future__ import annotations

import math

import pytest
import torch

from finesim.losses.acl import adaptive_contrastive_loss
from finesim.losses.bcl import (
    balanced_contrastive_loss,
    bcl_alpha,
    bcl_from_similarities,
    pair_batch_partners,
)
from finesim.losses.cmse import cosine_mse
from finesim.losses.fdl import forward_directional_loss
from finesim.losses.rdl import reverse_direction_loss
from finesim.losses.wacl import weighted_adaptive_contrastive_loss

# pair 0: label gap 0.5, cosine gap 0.1 -> under-separated (FDL active)
# pair 1: label gap 0.5, cosine gap 0.8 -> over-separated (RDL active)
COS_POS = [0.6, 0.9]
COS_NEG = [0.5, 0.1]
L_POS = [0.75, 1.0]
L_NEG = [0.25, 0.5]


def _t(values: list[float], grad: bool = False) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64, requires_grad=grad)


def test_fdl_rdl_acl_wacl_values() -> None:
    args = (_t(COS_POS), _t(COS_NEG), _t(L_POS), _t(L_NEG))
    # FDL = max(l_pos - l_neg + cos_neg - cos_pos, 0): 0.5 + 0.5 - 0.6 = 0.4 ; 0.5 + 0.1 - 0.9 < 0 -> 0
    assert forward_directional_loss(*args, reduction="none").tolist() == pytest.approx([0.4, 0.0])
    # RDL = max(l_neg - l_pos - cos_neg + cos_pos, 0): -0.5 - 0.5 + 0.6 < 0 -> 0 ; -0.5 - 0.1 + 0.9 = 0.3
    assert reverse_direction_loss(*args, reduction="none").tolist() == pytest.approx([0.0, 0.3])
    assert adaptive_contrastive_loss(*args, reduction="none").tolist() == pytest.approx([0.4, 0.3])
    # W-ACL = gap * ACL = 0.5*0.4, 0.5*0.3 ; mean 0.175, sum 0.35
    assert weighted_adaptive_contrastive_loss(*args, reduction="none").tolist() == pytest.approx([0.2, 0.15])
    assert float(weighted_adaptive_contrastive_loss(*args)) == pytest.approx(0.175)
    assert float(weighted_adaptive_contrastive_loss(*args, reduction="sum")) == pytest.approx(0.35)


def test_acl_equals_eq8_absolute_value() -> None:
    g = torch.Generator().manual_seed(0)
    cp, cn = torch.rand(50, generator=g) * 2 - 1, torch.rand(50, generator=g) * 2 - 1
    lp = torch.rand(50, generator=g)
    ln = lp * torch.rand(50, generator=g)
    eq8 = (lp - ln + cn - cp).abs()
    assert torch.allclose(adaptive_contrastive_loss(cp, cn, lp, ln, reduction="none"), eq8)


def test_gradient_directions() -> None:
    cp, cn = _t(COS_POS, grad=True), _t(COS_NEG, grad=True)
    forward_directional_loss(cp, cn, _t(L_POS), _t(L_NEG), reduction="sum").backward()
    # pair 0 under-separated: descending the gradient raises cos_pos and lowers cos_neg; pair 1 gets none
    assert cp.grad.tolist() == [-1.0, 0.0] and cn.grad.tolist() == [1.0, 0.0]
    cp, cn = _t(COS_POS, grad=True), _t(COS_NEG, grad=True)
    reverse_direction_loss(cp, cn, _t(L_POS), _t(L_NEG), reduction="sum").backward()
    # pair 1 over-separated: lower cos_pos, raise cos_neg
    assert cp.grad.tolist() == [0.0, 1.0] and cn.grad.tolist() == [0.0, -1.0]
    cp, cn = _t(COS_POS, grad=True), _t(COS_NEG, grad=True)
    weighted_adaptive_contrastive_loss(cp, cn, _t(L_POS), _t(L_NEG), reduction="sum").backward()
    assert cp.grad.tolist() == pytest.approx([-0.5, 0.5]) and cn.grad.tolist() == pytest.approx([0.5, -0.5])


def test_wacl_with_differing_labels_is_zero_exactly_when_the_cosine_gap_equals_the_label_gap() -> None:
    # dyadic numbers: exact in floating point
    cp, cn = _t([0.75, 1.0]), _t([0.25, 0.0])
    lp, ln = _t([1.0, 1.0]), _t([0.5, 0.0])
    assert weighted_adaptive_contrastive_loss(cp, cn, lp, ln, reduction="none").tolist() == [0.0, 0.0]
    # any other cosine gap gives a positive loss when the labels differ
    for shift in (-0.25, -0.125, 0.125, 0.25):
        out = weighted_adaptive_contrastive_loss(cp[:1] + shift, cn[:1], lp[:1], ln[:1], reduction="none")
        assert float(out) == pytest.approx(0.5 * abs(shift)) and float(out) > 0


def test_wacl_with_tied_labels_is_zero_whatever_the_cosines() -> None:
    # weight l_pos - l_neg = 0: no loss and no gradient, even when the cosines disagree with the tie
    cp, cn = _t([0.5, 0.9, -0.3], grad=True), _t([0.5, 0.1, 0.8], grad=True)
    lp = ln = _t([0.75, 0.75, 0.25])
    out = weighted_adaptive_contrastive_loss(cp, cn, lp, ln, reduction="none")
    assert out.tolist() == [0.0, 0.0, 0.0]
    out.sum().backward()
    assert cp.grad.tolist() == [0.0, 0.0, 0.0] and cn.grad.tolist() == [0.0, 0.0, 0.0]


def test_wacl_rejects_swapped_pairs() -> None:
    with pytest.raises(ValueError, match="label_pos < label_neg"):
        weighted_adaptive_contrastive_loss(_t([0.5]), _t([0.5]), _t([0.25]), _t([0.75]))


# ------------------------------------------------------------------ BCL


def test_bcl_alpha_cases() -> None:
    labels = torch.tensor([0.8, 0.2, 0.5, 1.0])
    alpha = bcl_alpha(labels, 4, sigma=0.5)
    expected = torch.tensor(
        [
            [0.0, 1, 1, 1],  # l = 0.8 >= sigma: false negative, excluded
            [1, 0.8, 1, 1],  # l = 0.2 < sigma: hard negative, weight 1 - l
            [1, 1, 0.0, 1],  # l = sigma exactly: excluded (l >= sigma)
            [1, 1, 1, 0.0],
        ]
    )
    assert torch.equal(alpha, expected)
    # sigma = 0 excludes every own negative; sigma > 1 weights every own negative by 1 - l
    assert torch.equal(bcl_alpha(labels, 4, sigma=0.0).diagonal(), torch.zeros(4))
    assert torch.allclose(bcl_alpha(labels, 4, sigma=1.01).diagonal(), 1 - labels)
    # with gathered negatives the own negative sits at offset + i
    shifted = bcl_alpha(labels[:2], 6, sigma=0.5, offset=3)
    assert shifted[0, 3] == 0.0 and shifted[1, 4] == pytest.approx(0.8) and shifted.sum() == pytest.approx(10.8)
    with pytest.raises(ValueError, match="no own negative"):
        bcl_alpha(labels, 3, sigma=0.5)


def test_bcl_partner_negative_mask() -> None:
    # 2 sentence pairs -> 4 rows: high views (rows 0, 1), then low views (rows 2, 3); row i's partner is the same
    # sentence pair under its other condition
    partner = pair_batch_partners(4)
    assert partner.tolist() == [2, 3, 0, 1]
    labels = torch.tensor([0.8, 0.2, 0.5, 1.0])
    expected = torch.tensor(
        [
            [0.0, 1, 0, 1],  # own (l >= sigma) and partner (row 2) excluded
            [1, 0.8, 1, 0],  # own is a hard negative (1 - 0.2); partner (row 3) excluded
            [0, 1, 0.0, 1],
            [1, 0, 1, 0.0],
        ]
    )
    assert torch.equal(bcl_alpha(labels, 4, sigma=0.5, partner=partner), expected)
    # gathered negatives: own and partner both sit behind the rank's offset
    shifted = bcl_alpha(labels[:2], 6, sigma=0.5, offset=2, partner=torch.tensor([1, 0]))
    assert torch.equal(shifted, torch.tensor([[1.0, 1, 0, 0, 1, 1], [1, 1, 0, 0.8, 1, 1]]))
    # hand-computed loss, one pair (rows 0 and 1 are each other's partner)
    pos, neg = _t([1.0, 0.5]), _t([[0.2, 0.0], [0.1, 0.3]])
    alpha = bcl_alpha(_t([0.8, 0.2]), 2, sigma=0.5, partner=pair_batch_partners(2)).double()  # [[0, 0], [0, 0.8]]
    l0 = 0.0  # no negative left: -log(e^1 / e^1)
    l1 = -math.log(math.e**0.5 / (math.e**0.5 + 0.8 * math.e**0.3))
    got = bcl_from_similarities(pos, neg, alpha, temperature=1.0, reduction="none")
    assert got.tolist() == pytest.approx([l0, l1], abs=1e-7)  # alpha is float32: 0.8 to ~1e-8
    with pytest.raises(ValueError, match="partner must hold 2 row indices"):
        bcl_alpha(_t([0.8, 0.2]), 2, sigma=0.5, partner=torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="its own row"):
        bcl_alpha(_t([0.8, 0.2]), 2, sigma=0.5, partner=torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="even number of rows"):
        pair_batch_partners(3)


def test_bcl_hand_computed_value() -> None:
    pos = _t([1.0, 0.5])
    neg = _t([[0.2, 0.0], [0.1, 0.3]])
    labels = _t([0.8, 0.2])
    alpha = bcl_alpha(labels, 2, sigma=0.5).double()  # [[0, 1], [1, 0.8]]
    tau = 1.0
    l0 = -math.log(math.e**1.0 / (math.e**1.0 + math.e**0.0))
    l1 = -math.log(math.e**0.5 / (math.e**0.5 + math.e**0.1 + 0.8 * math.e**0.3))
    got = bcl_from_similarities(pos, neg, alpha, temperature=tau, reduction="none")
    assert got.tolist() == pytest.approx([l0, l1])
    assert float(bcl_from_similarities(pos, neg, alpha, temperature=tau)) == pytest.approx((l0 + l1) / 2)
    # the literal Eq. 10: -log(sum_i p_i)
    literal = bcl_from_similarities(pos, neg, alpha, temperature=tau, reduction="log_of_sum")
    assert float(literal) == pytest.approx(-math.log(math.exp(-l0) + math.exp(-l1)))
    # temperature divides the cosines
    t = 0.5
    l0_t = -math.log(math.e ** (1 / t) / (math.e ** (1 / t) + math.e**0.0))
    assert float(bcl_from_similarities(pos, neg, alpha, temperature=t, reduction="none")[0]) == pytest.approx(l0_t)


def test_bcl_gradients_eq13_14_and_identity_eq15() -> None:
    g = torch.Generator().manual_seed(1)
    n, m, tau = 3, 5, 0.3
    pos = (torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1).requires_grad_()
    neg = (torch.rand(n, m, generator=g, dtype=torch.float64) * 2 - 1).requires_grad_()
    labels = torch.tensor([0.9, 0.1, 0.4], dtype=torch.float64)
    alpha = bcl_alpha(labels, m, sigma=0.5, offset=1).double()
    bcl_from_similarities(pos, neg, alpha, temperature=tau, reduction="sum").backward()
    weighted = alpha * torch.exp(neg.detach() / tau)
    denominator = torch.exp(pos.detach() / tau) + weighted.sum(1)
    eq13 = -(1 / tau) * weighted.sum(1) / denominator
    eq14 = (1 / tau) * weighted / denominator[:, None]
    assert torch.allclose(pos.grad, eq13) and torch.allclose(neg.grad, eq14)
    # Eq. 15: the negatives' gradients sum to the positive's, anchor by anchor
    ratio = neg.grad.abs().sum(1) / pos.grad.abs()
    assert torch.allclose(ratio, torch.ones(n, dtype=torch.float64))
    # false negatives (alpha = 0) get exactly no gradient; hard negatives are damped by 1 - l
    assert neg.grad[0, 1] == 0.0 and float(alpha[1, 2]) == pytest.approx(0.9)


def test_bcl_on_embeddings_matches_similarity_form() -> None:
    g = torch.Generator().manual_seed(2)
    a, p, n = (torch.randn(4, 8, generator=g, dtype=torch.float64) for _ in range(3))
    labels = torch.tensor([0.0, 0.25, 0.75, 1.0], dtype=torch.float64)
    nn_ = torch.nn.functional
    pos = nn_.cosine_similarity(a, p, dim=-1)
    neg = nn_.normalize(a, dim=-1) @ nn_.normalize(n, dim=-1).T
    ref = bcl_from_similarities(pos, neg, bcl_alpha(labels, 4, sigma=0.5).double(), temperature=0.1)
    got = balanced_contrastive_loss(a, p, n, labels, sigma=0.5, temperature=0.1)
    assert float(got) == pytest.approx(float(ref))


def test_bcl_errors() -> None:
    pos, neg = _t([0.5]), _t([[0.1]])
    with pytest.raises(ValueError, match="temperature"):
        bcl_from_similarities(pos, neg, torch.ones(1, 1), temperature=0.0)
    with pytest.raises(ValueError, match="reduction"):
        bcl_from_similarities(pos, neg, torch.ones(1, 1), temperature=1.0, reduction="max")
    with pytest.raises(ValueError, match="labels on the \\[0, 1\\] scale"):
        bcl_from_similarities(pos, neg, -torch.ones(1, 1), temperature=1.0)


def test_bcl_small_temperature_stays_finite() -> None:
    pos, neg = _t([0.9]), _t([[0.99, -1.0]])
    alpha = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    assert torch.isfinite(bcl_from_similarities(pos, neg, alpha, temperature=1e-3))


def test_cosine_mse_value() -> None:
    a = _t([[1.0, 0.0], [1.0, 0.0]])
    b = _t([[1.0, 0.0], [0.0, 1.0]])
    # cosines 1 and 0 against labels 0.5 and 0.25: (0.25 + 0.0625) / 2
    assert float(cosine_mse(a, b, _t([0.5, 0.25]))) == pytest.approx(0.15625)

"""Conditional Contrastive Learning (CCL, Liu et al. 2025, Eq. 3): ``l1*W-ACL + l2*BCL + l3*MSE + l4*C-MSE``.

One training row is one C-STS sentence pair under both conditions: the training runner's ``pairs`` layout
(bi-encoder ``[(s1, c_high), (s2, c_high), (s1, c_low), (s2, c_low)]``, tri-encoder ``[s1, s2, c_high,
c_low]``), label ``[l_high, l_low]`` on the [0, 1] scale (``(y - 1) / 4`` for C-STS; see
:mod:`finesim.losses._features`).

- W-ACL (Eq. 9) on ``cos(h1, h2)`` of each pair under its high and low condition;
- BCL (Eq. 10-11) on the projected ``g(h)`` of every row (both conditions of every pair are BCL rows), with a
  second dropout forward pass of the ``s1`` inputs as positives and the ``s2`` inputs of all rows (gathered
  over processes) as negatives, including the anchor's own pair under its other condition (weight 1 as Eq. 11
  prints; ``partner_negative="mask"`` drops it);
- MSE: ``(cos(h1, h2) - l)^2`` over all rows; C-MSE: the same on ``g(h)`` (see :mod:`finesim.losses.cmse`).

The forward returns a dict of the weighted parts (``w_acl``, ``bcl``, ``mse``, ``c_mse``); the
sentence-transformers trainer sums them for the backward pass and logs each part separately. Parts with weight
0 are not computed (that is how the ablations of the paper's Table 4 run). The model must contain a
:class:`~finesim.models.projection_head.ProjectionHead` when ``lambda_bcl`` or ``lambda_cmse`` is non-zero.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from finesim.losses._features import PROJECTION_HINT, pair_labels, pair_outputs
from finesim.losses.bcl import BCL_REDUCTIONS, bcl_for_pair_batch, check_partner_negative
from finesim.losses.cmse import cosine_mse
from finesim.losses.wacl import weighted_adaptive_contrastive_loss

# BCL's reductions that give the one number a training loss is; "none" (one value per row) is for analysis
CCL_BCL_REDUCTIONS = tuple(r for r in BCL_REDUCTIONS if r != "none")


def check_ccl_options(
    weights: dict[str, float], sigma: float, temperature: float, bcl_reduction: str, partner_negative: str
) -> None:
    """The values :class:`CCLLoss` refuses, checked by the loss and by the recipe checks (before any model is built)."""
    if any(w < 0 for w in weights.values()) or not any(weights.values()):
        raise ValueError(f"CCL weights must be >= 0 and not all 0, got {weights}")
    if sigma < 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    if bcl_reduction not in CCL_BCL_REDUCTIONS:
        raise ValueError(f"bcl_reduction must be one of {CCL_BCL_REDUCTIONS}, got {bcl_reduction!r}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    check_partner_negative(partner_negative)


class CCLLoss(nn.Module):
    """The CCL objective as a sentence-transformers loss over the four condition-pair columns.

    Args:
        model: the SentenceTransformer being trained (bi-encoder, or a tri-encoder exposing the same forward).
        lambda_wacl, lambda_bcl, lambda_mse, lambda_cmse: the weights lambda1..4 of Eq. 3 (paper: all 1).
        sigma: BCL false-/hard-negative cut-off on the [0, 1] label scale.
        temperature: BCL temperature (divides the cosines).
        bcl_reduction: ``"mean"`` over anchors (default) or the literal Eq. 10 ``"log_of_sum"`` (see
            :mod:`finesim.losses.bcl`).
        gather_across_devices: all-gather BCL negatives across processes when distributed.
        partner_negative: BCL weight of the negative that is the anchor's own sentence pair under its other
            condition: ``"keep"`` (1, Eq. 11 as printed) or ``"mask"`` (0); see :mod:`finesim.losses.bcl`.
        return_dict: return the weighted parts as a dict (logged per part by the trainer), not their sum.
    """

    def __init__(
        self,
        model: Any,
        *,
        lambda_wacl: float = 1.0,
        lambda_bcl: float = 1.0,
        lambda_mse: float = 1.0,
        lambda_cmse: float = 1.0,
        sigma: float = 0.5,
        temperature: float = 0.05,
        bcl_reduction: str = "mean",
        gather_across_devices: bool = True,
        partner_negative: str = "keep",
        return_dict: bool = True,
    ) -> None:
        super().__init__()
        weights = {"w_acl": lambda_wacl, "bcl": lambda_bcl, "mse": lambda_mse, "c_mse": lambda_cmse}
        check_ccl_options(weights, sigma, temperature, bcl_reduction, partner_negative)
        self.model = model
        self.weights = weights
        self.sigma = sigma
        self.temperature = temperature
        self.bcl_reduction = bcl_reduction
        self.gather_across_devices = gather_across_devices
        self.partner_negative = partner_negative
        self.return_dict = return_dict

    def forward(self, features: list[dict[str, Any]], labels: Tensor) -> dict[str, Tensor] | Tensor:
        label_pos, label_neg = pair_labels(labels)
        outputs = pair_outputs(self.model, features)
        h = [o["sentence_embedding"] for o in outputs]
        w = self.weights
        parts: dict[str, Tensor] = {}
        if w["w_acl"]:
            cos = nn.functional.cosine_similarity
            cos_pos, cos_neg = cos(h[0], h[1], dim=-1), cos(h[2], h[3], dim=-1)
            parts["w_acl"] = w["w_acl"] * weighted_adaptive_contrastive_loss(cos_pos, cos_neg, label_pos, label_neg)
        row_labels = torch.cat([label_pos, label_neg])
        if w["mse"]:
            parts["mse"] = w["mse"] * cosine_mse(torch.cat([h[0], h[2]]), torch.cat([h[1], h[3]]), row_labels)
        if w["bcl"] or w["c_mse"]:
            if any("projected_embedding" not in o for o in outputs):
                raise KeyError(f"BCL and C-MSE need 'projected_embedding' in the model output; {PROJECTION_HINT}")
            z = [o["projected_embedding"] for o in outputs]
            anchors, negatives = torch.cat([z[0], z[2]]), torch.cat([z[1], z[3]])
            if w["c_mse"]:
                parts["c_mse"] = w["c_mse"] * cosine_mse(anchors, negatives, row_labels)
            if w["bcl"]:
                parts["bcl"] = w["bcl"] * bcl_for_pair_batch(
                    self.model,
                    features,
                    anchors,
                    negatives,
                    row_labels,
                    sigma=self.sigma,
                    temperature=self.temperature,
                    reduction=self.bcl_reduction,
                    gather_across_devices=self.gather_across_devices,
                    partner_negative=self.partner_negative,
                )
        if self.return_dict:
            return parts
        return torch.stack(list(parts.values())).sum()

    def get_config_dict(self) -> dict[str, Any]:
        return {
            **{f"lambda_{k.replace('_', '')}": v for k, v in self.weights.items()},
            "sigma": self.sigma,
            "temperature": self.temperature,
            "bcl_reduction": self.bcl_reduction,
            "partner_negative": self.partner_negative,
        }

    @property
    def citation(self) -> str:
        return (
            "Liu, Qin, Wang, Liang, Zong, Xu (2025). Conditional Semantic Textual Similarity via Conditional "
            "Contrastive Learning."
        )

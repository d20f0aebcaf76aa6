"""Quad + MSE: ``quad_weight * Quad + mse_weight * MSE`` (the C-STS "Quad+MSE" objective).

The MSE term covers every row of the batch, i.e. both conditions of each sentence pair (as the reference code
does); the reference weighs the terms 1:1, the default here. The two terms are returned separately so the trainer
logs them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from finesim.losses._features import pair_cosines, pair_labels
from finesim.losses.cosine_mse import cosine_mse_loss
from finesim.losses.quad import quad_loss


def quad_mse_loss(
    cos_high: Tensor,
    cos_low: Tensor,
    label_high: Tensor,
    label_low: Tensor,
    *,
    margin: float = 1.0,
    quad_weight: float = 1.0,
    mse_weight: float = 1.0,
    skip_equal: bool = False,
) -> dict[str, Tensor]:
    """``{"quad": quad_weight * Quad, "mse": mse_weight * MSE over all 2B rows}``."""
    mask = label_high != label_low if skip_equal else None
    quad = quad_loss(cos_high, cos_low, margin, mask)
    mse = cosine_mse_loss(torch.cat([cos_high, cos_low]), torch.cat([label_high, label_low]))
    return {"quad": quad_weight * quad, "mse": mse_weight * mse}


class QuadMSELoss(nn.Module):
    """Weighted Quad + cosine MSE over a pairs-layout batch; labels are ``(B, 2)`` = [high, low], scaled."""

    def __init__(
        self,
        model: Any,
        margin: float = 1.0,
        quad_weight: float = 1.0,
        mse_weight: float = 1.0,
        skip_equal: bool = False,
    ) -> None:
        super().__init__()
        self.model = model
        self.margin = float(margin)
        self.quad_weight = float(quad_weight)
        self.mse_weight = float(mse_weight)
        self.skip_equal = bool(skip_equal)

    def forward(self, features: list[dict[str, Any]], labels: Tensor) -> dict[str, Tensor]:
        high, low = pair_cosines(self.model, features)
        label_high, label_low = pair_labels(labels)
        return quad_mse_loss(
            high,
            low,
            label_high,
            label_low,
            margin=self.margin,
            quad_weight=self.quad_weight,
            mse_weight=self.mse_weight,
            skip_equal=self.skip_equal,
        )

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "margin": self.margin,
            "quad_weight": self.quad_weight,
            "mse_weight": self.mse_weight,
            "skip_equal": self.skip_equal,
        }

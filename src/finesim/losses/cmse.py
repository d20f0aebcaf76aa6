"""C-MSE: the MSE of CCL (paper Eq. 3) taken "in the contrastive learning space".

The paper names the loss but gives no formula. finesim reads it as the cosine-MSE of the *projected*
representations: ``C-MSE = mean_i (cos(g(h1_i), g(h2_i)) - l_i)^2`` with ``g`` the projection head BCL uses
and labels on the [0, 1] scale; the plain MSE of CCL is the same on ``h`` itself. ``space="embedding"`` gives
that plain cosine-MSE, for comparison.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from finesim.losses._features import PROJECTION_HINT, pair_labels, pair_outputs, reduce


def cosine_mse(a: Tensor, b: Tensor, labels: Tensor, *, reduction: str = "mean") -> Tensor:
    """``(cos(a_i, b_i) - l_i)^2`` per row, reduced; the formula of both MSE and C-MSE in CCL."""
    cos = nn.functional.cosine_similarity(a, b, dim=-1)
    return reduce((cos - labels.to(cos.dtype)) ** 2, reduction)


class CMSELoss(nn.Module):
    """C-MSE as a sentence-transformers loss over the four condition-pair columns (both conditions are rows).

    Args:
        model: the SentenceTransformer (with a projection head for ``space="projection"``).
        space: ``"projection"`` (C-MSE, on ``projected_embedding``) or ``"embedding"`` (plain MSE on ``h``).
    """

    def __init__(self, model: Any, *, space: str = "projection", reduction: str = "mean") -> None:
        super().__init__()
        if space not in ("projection", "embedding"):
            raise ValueError(f"space must be 'projection' or 'embedding', got {space!r}")
        self.model = model
        self.key = "projected_embedding" if space == "projection" else "sentence_embedding"
        self.reduction = reduction

    def forward(self, features: list[dict[str, Any]], labels: Tensor) -> Tensor:
        label_pos, label_neg = pair_labels(labels)
        outputs = pair_outputs(self.model, features)
        if any(self.key not in o for o in outputs):
            raise KeyError(f"CMSELoss needs {self.key!r} in the model output; {PROJECTION_HINT}")
        z = [o[self.key] for o in outputs]
        rows = torch.cat([label_pos, label_neg])
        return cosine_mse(torch.cat([z[0], z[2]]), torch.cat([z[1], z[3]]), rows, reduction=self.reduction)

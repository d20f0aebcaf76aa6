"""MSE between the conditional cosine similarity and the scaled label (the C-STS "MSE" objective).

For C-STS the label is min-max scaled to [0, 1], ``(y - 1) / 4``, by the training recipe (``labels:``
section), as the reference code does; this loss takes the label as it comes.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from finesim.losses._features import row_cosines


def cosine_mse_loss(cosines: Tensor, labels: Tensor) -> Tensor:
    """``mean((cos - y)^2)`` over the batch."""
    if cosines.shape != labels.shape:
        raise ValueError(f"cosines {tuple(cosines.shape)} and labels {tuple(labels.shape)} differ in shape")
    return (cosines - labels.to(cosines.dtype)).pow(2).mean()


class CosineMSELoss(nn.Module):
    """Bi-/tri-encoder MSE on ``cos(f(s1, c), f(s2, c))`` (rows layout, see :mod:`finesim.losses._features`)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, features: list[dict[str, Any]], labels: Tensor) -> Tensor:
        return cosine_mse_loss(row_cosines(self.model, features), labels.float().view(-1))

    def get_config_dict(self) -> dict[str, Any]:
        return {}

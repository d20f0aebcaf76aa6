"""The SBERT classification baseline: cross-entropy over classes from the pair head ``Linear([u; v;
|u-v|]) -> K``.

The classifier is the model's :class:`~finesim.models.regression_head.RegressionHead` built with
``out_features = K`` (the head lives in the model, not in the loss). Labels are integer class ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn


def softmax_classification_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy of ``logits`` (``N x K``) against integer ``labels`` (``N``)."""
    if logits.ndim != 2:
        raise ValueError(f"logits must be N x K, got shape {tuple(logits.shape)}")
    labels = labels.reshape(-1)
    if labels.numel() != logits.shape[0]:
        raise ValueError(f"{logits.shape[0]} rows of logits but {labels.numel()} labels")
    if torch.is_floating_point(labels):
        if not torch.equal(labels, labels.round()):
            raise ValueError("classification labels must be integer class ids, got fractional values")
        labels = labels.long()
    if labels.numel() and (labels.min() < 0 or labels.max() >= logits.shape[1]):
        raise ValueError(f"class ids must lie in [0, {logits.shape[1] - 1}], got {labels.min()}..{labels.max()}")
    return torch.nn.functional.cross_entropy(logits, labels)


class SoftmaxClassificationLoss(nn.Module):
    """Cross-entropy through the model's pair head (SBERT's ``SoftmaxLoss``, with the classifier in the
    model).

    Args:
        model: a ``SentenceTransformer`` containing a ``RegressionHead`` with ``out_features >= 2``.
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        from finesim.models.regression_head import get_regression_head

        self.model = model
        self.head = get_regression_head(model)
        if self.head.out_features < 2:
            raise ValueError(
                "SoftmaxClassificationLoss needs a head with out_features >= 2 (one per class); "
                f"the model's head has {self.head.out_features}"
            )

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> Tensor:
        from finesim.models.regression_head import pair_inputs

        u, v = pair_inputs(self.model, sentence_features)
        return softmax_classification_loss(self.head.score_pair(u, v), labels)

    def get_config_dict(self) -> dict[str, Any]:
        return {"num_labels": self.head.out_features}

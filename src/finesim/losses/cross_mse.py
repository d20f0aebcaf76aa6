"""MSE between a cross-encoder's raw output and the scaled label (the C-STS "MSE" objective for cross-encoders).

The computation is sentence-transformers' ``CrossEncoder`` ``MSELoss`` with an identity activation (the reference's
``MSE(logit, y')``), with one difference that makes it train under DDP: the tokenised batch goes into the model as a
plain ``dict``. sentence-transformers passes the tokenizer's ``BatchEncoding`` (not a ``dict``) through the model
and back; DDP with ``find_unused_parameters=True`` (what the transformers Trainer uses for a sentence-transformers
model) finds no tensors in such an output, marks every parameter unused and fails in backward ("marked as ready
twice").
"""

from __future__ import annotations

from typing import Any

from sentence_transformers.util import batch_to_device
from torch import Tensor, nn

from finesim.losses.cosine_mse import cosine_mse_loss


class CrossEncoderMSELoss(nn.Module):
    """``mean((score - y)^2)`` over a batch of ``(first, second)`` texts; ``model`` is a one-output CrossEncoder."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, inputs: list[list[str]], labels: Tensor, prompt: str | None = None, task: str | None = None
    ) -> Tensor:
        if len(inputs) != 2:
            raise ValueError(f"a cross-encoder batch needs 2 text columns (first, second), got {len(inputs)}")
        features = self.model.preprocess(list(zip(inputs[0], inputs[1])), prompt=prompt, task=task)
        features = dict(batch_to_device(features, self.model.device))
        scores = self.model(features)["scores"].view(-1)
        return cosine_mse_loss(scores, labels.float().view(-1))  # the same mean squared error as the cosine MSE

    def get_config_dict(self) -> dict[str, Any]:
        return {}

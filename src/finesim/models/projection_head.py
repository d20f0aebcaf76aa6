"""The projection head ``g`` of CCL's BCL and C-MSE, as a sentence-transformers module inside the model.

``ProjectionHead`` reads ``sentence_embedding`` (the representation ``h`` used for cosine scoring) and adds
``projected_embedding = g(h)`` next to it, leaving ``sentence_embedding`` unchanged: evaluation and ``encode``
still use ``h``, while the contrastive losses read ``g(h)``. Being a module of the model, it is saved and
reloaded with it and its parameters are synchronised by DDP like any other.

The paper does not describe ``g``. The default follows SimCSE's MLP: ``Linear(d, d)`` then ``tanh``
(``activation`` may be ``"tanh"``, ``"relu"``, ``"gelu"`` or ``"identity"``; ``out_features`` defaults to
``d``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from finesim.models.head_module import HeadModule

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "identity": nn.Identity}


class ProjectionHead(HeadModule):
    """Adds ``projected_embedding = act(Linear(sentence_embedding))``; ``sentence_embedding`` is kept."""

    # list[str] as sentence-transformers' Module declares it (overriding it with a ClassVar does not type-check)
    config_keys: list[str] = ["in_features", "out_features", "activation"]  # noqa: RUF012

    def __init__(self, in_features: int, out_features: int | None = None, activation: str = "tanh") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.in_features = in_features
        self.out_features = out_features or in_features
        self.activation = activation
        self.linear = nn.Linear(self.in_features, self.out_features)
        self.act = ACTIVATIONS[activation]()

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        embedding: Tensor = features["sentence_embedding"]
        features["projected_embedding"] = self.act(self.linear(embedding.to(self.linear.weight.dtype)))
        return features

    def get_embedding_dimension(self) -> int | None:
        """``None``: the head leaves the sentence embedding (and so its dimension) unchanged."""
        return None


def add_projection_head(
    model: Any, *, out_features: int | None = None, activation: str = "tanh", seed: int | None = None
) -> ProjectionHead:
    """Append a :class:`ProjectionHead` to ``model`` (in place) unless it has one; return the head.

    Args:
        model: a SentenceTransformer.
        out_features: projection size (default: the model's embedding size).
        activation: see :data:`ACTIVATIONS`.
        seed: seed for the head's initial weights (the default uses the global torch RNG).
    """
    for module in model.children():
        if isinstance(module, ProjectionHead):
            return module
    dim = model.get_embedding_dimension()
    if dim is None:
        raise ValueError("cannot size the projection head: the model does not report its embedding dimension")
    if seed is not None:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            head = ProjectionHead(dim, out_features, activation)
    else:
        head = ProjectionHead(dim, out_features, activation)
    device = next(model.parameters()).device
    model.append(head.to(device))
    return head

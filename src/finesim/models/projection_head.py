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

from typing import Any, ClassVar

import torch
from sentence_transformers.base.modules.module import Module
from torch import Tensor, nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "identity": nn.Identity}


class ProjectionHead(Module):
    """Adds ``projected_embedding = act(Linear(sentence_embedding))``; ``sentence_embedding`` is kept."""

    config_keys: ClassVar[list[str]] = ["in_features", "out_features", "activation"]

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

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs: Any) -> ProjectionHead:
        """Rebuild the head from its config and load its trained weights."""
        hub = {k: kwargs[k] for k in ("token", "cache_folder", "revision", "local_files_only") if k in kwargs}
        config = cls.load_config(model_name_or_path, subfolder=subfolder, **hub)
        head = cls(**config)
        cls.load_torch_weights(model_name_or_path, subfolder=subfolder, model=head, **hub)
        return head


def has_projection_head(model: Any) -> bool:
    """Whether ``model`` (a SentenceTransformer) contains a :class:`ProjectionHead`."""
    return any(isinstance(m, ProjectionHead) for m in model.children())


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


def finesim_module_classes() -> dict[str, type]:
    """``modules.json`` type -> class for finesim's own modules (projection, condition and regression heads, the
    prompt-templating transformer of decoder-LM encoders).

    Saved models that contain them then load without ``trust_remote_code``.
    """
    classes: dict[str, type] = {f"{ProjectionHead.__module__}.{ProjectionHead.__qualname__}": ProjectionHead}
    from finesim.models.heads import ConditionHead
    from finesim.models.prompt_lm import PromptTransformer
    from finesim.models.regression_head import RegressionHead

    for cls in (ConditionHead, RegressionHead, PromptTransformer):
        classes[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return classes


def load_model_with_projection_head(path: str, **kwargs: Any) -> Any:
    """Load a saved SentenceTransformer containing a :class:`ProjectionHead` (and maybe a condition head).

    sentence-transformers imports module classes outside its own package only with
    ``trust_remote_code=True``, which would also let the backbone run code from the folder. finesim's head
    classes are already imported, so they are handed over directly (the mechanism the sentence-transformers
    trainer uses to reload checkpoints).
    """
    from sentence_transformers import SentenceTransformer

    loader = getattr(SentenceTransformer, "_load_with_module_classes", None)
    if loader is None:  # older sentence-transformers: fall back to the flag
        kwargs.setdefault("trust_remote_code", True)
        return SentenceTransformer(path, **kwargs)
    return loader(str(path), finesim_module_classes(), **kwargs)

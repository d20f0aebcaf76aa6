"""The pooling mode of a loaded sentence-transformers model: what CASE's encoding cache and the weights
fingerprint record about a model besides its weights."""

from __future__ import annotations

from typing import Any


def model_pooling(model: Any) -> str | None:
    """The pooling mode of a SentenceTransformer's ``Pooling`` module (None when it has none)."""
    try:
        modules = list(model)
    except TypeError:
        return None
    for module in modules:
        mode = getattr(module, "pooling_mode", None)
        if isinstance(mode, str):
            return mode
        if hasattr(module, "get_pooling_mode_str"):
            return module.get_pooling_mode_str()
    return None

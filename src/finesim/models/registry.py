"""Saved finesim model types.

A finesim model folder that is not a plain sentence-transformers model carries ``finesim_model.json`` with at least
``{"model_type": NAME}``. Each model type registers a loader here; :func:`load_model` picks it, falling back to a
plain sentence-transformers model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODEL_CARD_FILE = "finesim_model.json"
_LOADERS: dict[str, Callable[..., Any]] = {}


def register_model_type(name: str, loader: Callable[..., Any]) -> None:
    """Register ``loader(path, **kwargs)`` for folders whose ``finesim_model.json`` names ``name``."""
    _LOADERS[name] = loader


def model_type_of(path: str | Path) -> str | None:
    """The finesim model type recorded in a folder, or None for a plain model / Hub id."""
    card = Path(path) / MODEL_CARD_FILE
    if not card.is_file():
        return None
    try:
        return str(json.loads(card.read_text(encoding="utf-8"))["model_type"])
    except (json.JSONDecodeError, KeyError) as err:
        raise ValueError(f"{card}: not a valid finesim model card ({err})") from None


def load_model(name: str, **kwargs: Any) -> Any:
    """Load any finesim model: a registered model type, else a SentenceTransformer via ``load_sentence_model``."""
    from finesim.models.loading import load_sentence_model

    kind = model_type_of(name) if Path(name).is_dir() else None
    if kind is None:
        return load_sentence_model(name, **kwargs)
    if kind not in _LOADERS:
        _import_builtin_types()
    if kind not in _LOADERS:
        raise ValueError(f"{name}: unknown finesim model type {kind!r}; known: {sorted(_LOADERS)}")
    return _LOADERS[kind](name, **kwargs)


BUILTIN_TYPE_MODULES: tuple[str, ...] = ("finesim.models.conditional", "finesim.case.model")


def _import_builtin_types() -> None:
    import importlib

    for module in BUILTIN_TYPE_MODULES:
        importlib.import_module(module)

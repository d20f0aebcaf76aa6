"""A hash identifying a loaded model's weights, so an index is never searched with another model and Ray actors
never score with different copies of one (:class:`finesim.evaluation.ray_scoring.RayScorer` checks it by default).

The fingerprint is the SHA-256 of every parameter and buffer (name, dtype, shape and bytes, in ``state_dict`` order)
and of the settings that shape the embeddings without being weights: the module classes in order, the maximum
sequence length and the pooling mode; for a CASE model also the prompt templates, "− c" and the normalisation
settings, and the projection's weights. An ONNX export (``finesim export``) hashes its runtime (format, quantization
and the ONNX file's recorded SHA-256) in place of its transformer's torch state, which is uninitialised storage
that the ONNX session replaces. Two loads of the same folder give the same fingerprint; a fine-tuned copy,
another head or another pooling gives another.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from finesim.models.weights import update_with_state


def _settings(model: Any) -> dict[str, Any]:
    """The non-weight settings of a ``SentenceTransformer`` that change its embeddings."""
    from finesim.models.pooling import model_pooling

    try:
        modules = [f"{type(m).__module__}.{type(m).__qualname__}" for m in model]
    except TypeError:
        modules = [f"{type(model).__module__}.{type(model).__qualname__}"]
    return {
        "modules": modules,
        "max_seq_length": getattr(model, "max_seq_length", None),
        "pooling": model_pooling(model),
    }


def model_fingerprint(model: Any) -> str:
    """SHA-256 hex digest identifying ``model`` (a ``SentenceTransformer`` or a CASE model): see the module
    docstring for what goes in."""
    from sentence_transformers import SentenceTransformer

    from finesim.evaluation.scoring import CASE_ENCODER, scorer_encoder

    digest = hashlib.sha256()
    if not isinstance(model, SentenceTransformer) and scorer_encoder(model) == CASE_ENCODER:
        encoder = model.encoder
        config = {k: v for k, v in encoder.config().items() if k != "encoder"}
        settings = {"case": config, "encoder": _settings(encoder.model)}
        digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
        update_with_state(digest, encoder.model, "encoder.")
        if model.projection is not None:
            digest.update(json.dumps(model.projection.config(), sort_keys=True, default=str).encode())
            update_with_state(digest, model.projection, "projection.")
        return digest.hexdigest()
    digest.update(json.dumps(_settings(model), sort_keys=True, default=str).encode())
    skip: tuple[str, ...] = ()
    runtime = getattr(model, "finesim_runtime", None)
    if runtime and runtime.get("format") == "onnx":
        from finesim.models.runtime import ExportedTransformer

        digest.update(json.dumps({"runtime": runtime}, sort_keys=True, default=str).encode())
        skip = tuple(f"{name}." for name, m in model.named_modules() if isinstance(m, ExportedTransformer))
    update_with_state(digest, model, "", skip)
    return digest.hexdigest()


def scorer_fingerprint(scorer: Any) -> str | None:
    """A hash of the weights behind a scorer (each member's, for an ensemble); None when it cannot be computed. What
    Ray scoring's actors report by default (:class:`finesim.evaluation.ray_scoring.RayScorer`)."""
    members = getattr(scorer, "members", None) or [scorer]
    try:
        parts = [model_fingerprint(member.model) for member in members]
    except Exception:  # a model type the fingerprint does not know: no check rather than no scoring
        return None
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()

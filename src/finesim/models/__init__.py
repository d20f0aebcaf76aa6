"""Model resolution and model types."""

from __future__ import annotations

from finesim.models.loading import ModelResolutionError, load_sentence_model, resolve_model_path

__all__ = ["ModelResolutionError", "load_sentence_model", "resolve_model_path"]

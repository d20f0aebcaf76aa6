"""Models: resolution of names (:mod:`~finesim.models.hub`), loading and saving (:mod:`~finesim.models.io`),
builders of the encoder types (:mod:`~finesim.models.builders`) and the trainable heads that live in the model
(condition, projection and regression heads)."""

from __future__ import annotations

from finesim.models.hub import ModelResolutionError, resolve_model_path
from finesim.models.io import load_sentence_model

__all__ = ["ModelResolutionError", "load_sentence_model", "resolve_model_path"]

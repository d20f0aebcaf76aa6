"""The weights hash of a loaded model, as the index layer names it: :mod:`finesim.evaluation.fingerprint` computes it
(the scoring layer, where Ray scoring checks it too); this module re-exports it for the index's modules."""

from __future__ import annotations

from finesim.evaluation.fingerprint import model_fingerprint, scorer_fingerprint

__all__ = ["model_fingerprint", "scorer_fingerprint"]

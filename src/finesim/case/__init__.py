"""CASE: condition-aware sentence embeddings with a supervised projection (Zhang, Zhou, Bollegala 2026).

Step 1 (:mod:`~finesim.case.encoding`): a frozen encoder embeds each sentence under its condition (prompt
formats per model family in ``prompts.yaml``), optionally minus the condition's own embedding, through an
on-disk cache (:mod:`~finesim.case.cache`). Step 2 (:mod:`~finesim.case.training`): a small linear or
non-linear projection is trained with MSE between the cosine and the scaled rating. :class:`CaseModel`
bundles both and scores pairs. The actions of ``finesim case`` are library functions in
:mod:`~finesim.case.pipeline`, taking options merged by :func:`finesim.case.options.resolve_options`.
"""

from __future__ import annotations

from finesim.case.cache import EmbeddingCache, text_key
from finesim.case.data import embed_pairs, split_by_pair
from finesim.case.encoding import ConditionAwareEncoder, describe_model
from finesim.case.isotropy import approximate_isotropy, cosine_to_mean, isotropy_summary, save_histograms
from finesim.case.model import CaseModel
from finesim.case.projection import CaseProjection
from finesim.case.prompts import FORMULATIONS, PromptFormat, load_prompt_families
from finesim.case.training import (
    PairEmbeddings,
    ProjectionResult,
    TrainConfig,
    evaluate_pairs,
    projected_cosine,
    scale_targets,
    sweep_dimensions,
    train_projection,
)

__all__ = [
    "FORMULATIONS",
    "CaseModel",
    "CaseProjection",
    "ConditionAwareEncoder",
    "EmbeddingCache",
    "PairEmbeddings",
    "ProjectionResult",
    "PromptFormat",
    "TrainConfig",
    "approximate_isotropy",
    "cosine_to_mean",
    "describe_model",
    "embed_pairs",
    "evaluate_pairs",
    "isotropy_summary",
    "load_prompt_families",
    "projected_cosine",
    "save_histograms",
    "scale_targets",
    "split_by_pair",
    "sweep_dimensions",
    "text_key",
    "train_projection",
]

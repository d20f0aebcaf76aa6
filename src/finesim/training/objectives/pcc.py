"""Pcc-tuning's stage-1 objective: ``infonce`` (alias ``mnrl``), InfoNCE with hard negatives (the paper's Eq. 8).

It is sentence-transformers' ``MultipleNegativesRankingLoss`` on ``(anchor, positive, negative)`` triplets: each
anchor is scored against every positive and every hard negative of the batch, cosine / temperature, cross-entropy
towards its own positive. Options: ``temperature`` (0.05, the reference code's; the paper does not state it),
``no_duplicates`` (true: sentence-transformers' ``NoDuplicatesBatchSampler``, so a batch never holds the same text
twice: SNLI triplets share premises, and a second copy of an anchor's premise would be an in-batch negative
identical to the anchor), ``gather_across_devices`` (true: embeddings of all processes are candidates, as in the
reference; no effect on one process). Stage 2 is the ``pearson`` objective (:mod:`finesim.training.objectives.sts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from finesim.models.card import Citation
from finesim.training.objectives.base import Objective

# the Pcc-tuning paper (stage 1 here, stage 2's ``pearson`` in sts.py); BibTeX fields from its title page
CITATION = Citation(
    "Pcc-tuning",
    "@inproceedings{zhang2024pcctuning,\n"
    "  title = {Pcc-tuning: Breaking the Contrastive Learning Ceiling in Semantic Textual Similarity},\n"
    "  author = {Zhang, Bowen and Li, Chunping},\n"
    "  booktitle = {Proceedings of the 2024 Conference on Empirical Methods in Natural Language Processing},\n"
    "  year = {2024}\n}",
)

INFONCE_DEFAULTS: dict[str, Any] = {"temperature": 0.05, "no_duplicates": True, "gather_across_devices": True}


def build_infonce(model: Any, options: Mapping[str, Any]) -> Any:
    """``MultipleNegativesRankingLoss`` with ``scale = 1 / temperature``."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    temperature = float(options["temperature"])
    if temperature <= 0:
        raise ValueError(f"infonce: temperature must be > 0, got {temperature}")
    return MultipleNegativesRankingLoss(
        model, scale=1.0 / temperature, gather_across_devices=bool(options["gather_across_devices"])
    )


def infonce_training_args(model: Any, loss: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """``batch_sampler=NO_DUPLICATES`` when ``no_duplicates`` (the default)."""
    from sentence_transformers.base.sampler import BatchSamplers

    return {"batch_sampler": BatchSamplers.NO_DUPLICATES} if options["no_duplicates"] else {}


def check_infonce(options: Mapping[str, Any], train: Any) -> None:
    """``no_duplicates`` brings its own batch sampler, which length grouping would replace."""
    if options["no_duplicates"] and getattr(train, "group_by_length", False):
        raise ValueError(
            "train.group_by_length and objective option no_duplicates exclude each other (both choose the "
            "batches); set one of them to false"
        )


OBJECTIVES = tuple(
    Objective(
        name=name,
        build=build_infonce,
        encoders=("bi", "prompt-lm"),
        layout="triplets",
        defaults=INFONCE_DEFAULTS,
        description="InfoNCE with hard negatives on (anchor, positive, negative) triplets (sentence-transformers "
        "MultipleNegativesRankingLoss, scale 1/temperature); Pcc-tuning stage 1",
        labels="none",
        training_args=infonce_training_args,
        check=check_infonce,
        citations=(CITATION,),
    )
    for name in ("infonce", "mnrl")
)

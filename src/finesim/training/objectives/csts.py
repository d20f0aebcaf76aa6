"""The C-STS paper's objectives (Deshpande et al. 2023): ``mse``, ``quad``, ``quad-mse``.

``mse`` is also the MSE-on-cosine objective for plain STS data (bi-encoder, labels scaled to [0, 1] by the recipe),
so it cites no paper of its own: a model trained on conditional data cites the C-STS paper (:data:`CITATION`, the
task's) whatever its objective (:func:`finesim.training.objectives.card_citations`). ``quad`` and ``quad-mse`` are
the paper's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from finesim.models.card import Citation
from finesim.training.objectives.base import Objective

# the C-STS paper (the task, its data and the quad loss); BibTeX fields from the paper's title page
CITATION = Citation(
    "C-STS",
    "@inproceedings{deshpande2023csts,\n"
    "  title = {{C-STS}: Conditional Semantic Textual Similarity},\n"
    "  author = {Deshpande, Ameet and Jimenez, Carlos E. and Chen, Howard and Murahari, Vishvak and Graf, Victoria"
    " and Rajpurohit, Tanmay and Kalyan, Ashwin and Chen, Danqi and Narasimhan, Karthik},\n"
    "  booktitle = {Proceedings of the 2023 Conference on Empirical Methods in Natural Language Processing},\n"
    "  year = {2023}\n}",
)


def build_mse(model: Any, options: Mapping[str, Any]) -> Any:
    """Cosine MSE for bi-/tri-encoders, MSE of the raw output for a cross-encoder."""
    from sentence_transformers import CrossEncoder

    if isinstance(model, CrossEncoder):
        from finesim.losses.cross_mse import CrossEncoderMSELoss

        return CrossEncoderMSELoss(model)
    from finesim.losses.cosine_mse import CosineMSELoss

    return CosineMSELoss(model)


def build_quad(model: Any, options: Mapping[str, Any]) -> Any:
    from finesim.losses.quad import QuadLoss

    return QuadLoss(model, **options)


def build_quad_mse(model: Any, options: Mapping[str, Any]) -> Any:
    from finesim.losses.quad_mse import QuadMSELoss

    return QuadMSELoss(model, **options)


OBJECTIVES = (
    Objective(
        "mse",
        build_mse,
        encoders=("bi", "tri", "cross"),
        layout="rows",
        description="MSE between cos(f(s1,c), f(s2,c)) (cross-encoder: its output) and the scaled label",
    ),
    Objective(
        "quad",
        build_quad,
        encoders=("bi", "tri"),
        layout="pairs",
        defaults={"margin": 1.0, "skip_equal": False},
        description="max(0, margin + cos(low pair) - cos(high pair)) per sentence pair",
        citations=(CITATION,),
    ),
    Objective(
        "quad-mse",
        build_quad_mse,
        encoders=("bi", "tri"),
        layout="pairs",
        defaults={"margin": 1.0, "quad_weight": 1.0, "mse_weight": 1.0, "skip_equal": False},
        description="quad_weight * Quad + mse_weight * cosine MSE over both rows of each pair",
        citations=(CITATION,),
    ),
)

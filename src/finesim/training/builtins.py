"""Built-in registrations: the C-STS encoder types (bi, cross, tri), objectives (mse, quad, quad-mse) and the
``csts`` data format."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from datasets import Dataset

from finesim.training.registry import (
    EncoderType,
    Objective,
    register_data_format,
    register_encoder,
    register_objective,
)

# ---------------------------------------------------------------- encoders


def _has_conditions(ds: Dataset) -> bool:
    return "condition" in ds.column_names


def _build_bi(spec: Any) -> Any:
    from finesim.models.conditional import build_bi_encoder

    return build_bi_encoder(spec.backbone, pooling=spec.pooling, transform=spec.transform, max_length=spec.max_length)


def _bi_rows(model: Any, ds: Dataset) -> Dataset:
    if not _has_conditions(ds):  # plain STS data: sentences alone
        return Dataset.from_dict({"sentence1": ds["sentence1"], "sentence2": ds["sentence2"], "label": ds["label"]})
    c = ds["condition"]
    return Dataset.from_dict(
        {
            "sentence1": [[s, ci] for s, ci in zip(ds["sentence1"], c)],
            "sentence2": [[s, ci] for s, ci in zip(ds["sentence2"], c)],
            "label": ds["label"],
        }
    )


def _bi_pairs(model: Any, ds: Dataset) -> Dataset:
    s1, s2, hi, lo = ds["sentence1"], ds["sentence2"], ds["condition_high"], ds["condition_low"]
    return Dataset.from_dict(
        {
            "s1_high": [[a, c] for a, c in zip(s1, hi)],
            "s2_high": [[b, c] for b, c in zip(s2, hi)],
            "s1_low": [[a, c] for a, c in zip(s1, lo)],
            "s2_low": [[b, c] for b, c in zip(s2, lo)],
            "label": [[h, low] for h, low in zip(ds["label_high"], ds["label_low"])],
        }
    )


def _headed_model_options(spec: Any) -> dict[str, Any]:
    """Builder keywords of an encoder with a head (tri, cross): head, pooling, transform, max_length, head options
    (checked against the encoder by the recipe validation)."""
    return dict(
        head=spec.head, pooling=spec.pooling, transform=spec.transform, max_length=spec.max_length, **spec.head_options
    )


def _build_tri(spec: Any) -> Any:
    from finesim.models.conditional import build_tri_encoder

    return build_tri_encoder(spec.backbone, **_headed_model_options(spec))


def _tri_rows(model: Any, ds: Dataset) -> Dataset:
    if not _has_conditions(ds):
        raise ValueError("a tri-encoder needs a condition column in the training data")
    return Dataset.from_dict(
        {
            "sentence1": ds["sentence1"],
            "sentence2": ds["sentence2"],
            "condition": ds["condition"],
            "label": ds["label"],
        }
    )


def _tri_pairs(model: Any, ds: Dataset) -> Dataset:
    return Dataset.from_dict(
        {
            "sentence1": ds["sentence1"],
            "sentence2": ds["sentence2"],
            "condition_high": ds["condition_high"],
            "condition_low": ds["condition_low"],
            "label": [[h, low] for h, low in zip(ds["label_high"], ds["label_low"])],
        }
    )


def _build_cross(spec: Any) -> Any:
    from finesim.models.conditional import build_cross_encoder

    return build_cross_encoder(spec.backbone, **_headed_model_options(spec))


def _cross_rows(model: Any, ds: Dataset) -> Dataset:
    from finesim.models.conditional import cross_second_text

    conds = ds["condition"] if _has_conditions(ds) else [None] * len(ds)
    return Dataset.from_dict(
        {
            "first": ds["sentence1"],
            "second": [cross_second_text(model, s2, c) for s2, c in zip(ds["sentence2"], conds)],
            "label": ds["label"],
        }
    )


register_encoder(EncoderType("bi", _build_bi, _bi_rows, _bi_pairs, trainer="sentence"))
register_encoder(EncoderType("tri", _build_tri, _tri_rows, _tri_pairs, trainer="sentence"))
register_encoder(EncoderType("cross", _build_cross, _cross_rows, None, trainer="cross"))

# ---------------------------------------------------------------- objectives


def _build_mse(model: Any, options: Mapping[str, Any]) -> Any:
    from sentence_transformers import CrossEncoder

    if isinstance(model, CrossEncoder):
        from finesim.losses.cross_mse import CrossEncoderMSELoss

        return CrossEncoderMSELoss(model)
    from finesim.losses.cosine_mse import CosineMSELoss

    return CosineMSELoss(model)


def _build_quad(model: Any, options: Mapping[str, Any]) -> Any:
    from finesim.losses.quad import QuadLoss

    return QuadLoss(model, **options)


def _build_quad_mse(model: Any, options: Mapping[str, Any]) -> Any:
    from finesim.losses.quad_mse import QuadMSELoss

    return QuadMSELoss(model, **options)


register_objective(
    Objective(
        "mse",
        _build_mse,
        encoders=("bi", "tri", "cross"),
        layout="rows",
        description="MSE between cos(f(s1,c), f(s2,c)) (cross-encoder: its output) and the scaled label",
    )
)
register_objective(
    Objective(
        "quad",
        _build_quad,
        encoders=("bi", "tri"),
        layout="pairs",
        defaults={"margin": 1.0, "skip_equal": False},
        description="max(0, margin + cos(low pair) - cos(high pair)) per sentence pair",
    )
)
register_objective(
    Objective(
        "quad-mse",
        _build_quad_mse,
        encoders=("bi", "tri"),
        layout="pairs",
        defaults={"margin": 1.0, "quad_weight": 1.0, "mse_weight": 1.0, "skip_equal": False},
        description="quad_weight * Quad + mse_weight * cosine MSE over both rows of each pair",
    )
)

# ---------------------------------------------------------------- data formats


def _load_csts(path: Path) -> tuple[Dataset, dict[str, Any]]:
    from finesim.data.csts import read_csts

    dataset, report = read_csts(path)
    info = report.as_dict() if hasattr(report, "as_dict") else {"rows_kept": len(dataset)}
    return dataset, info


register_data_format("csts", _load_csts)

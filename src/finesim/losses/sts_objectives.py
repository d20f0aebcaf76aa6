"""STS objectives by name: one place that builds a loss (adding the pair head to the model when it needs one).

Used by ``benchmarks/sts_finetune.py``, ``benchmarks/nli_regression.py`` and, through
:func:`register_with_runner`, by the recipe runner (:mod:`finesim.training.registry`).

Objectives (loss; head; labels):

- ``mse-cosine``: sentence-transformers ``CosineSimilarityLoss`` (MSE on cosine); no head; rescaled to [0, 1].
- ``cosent``: sentence-transformers ``CoSENTLoss``; no head; raw (only the order matters).
- ``pearson``: :class:`~finesim.losses.pearson.PearsonLoss` (Pcc-tuning); no head; raw (scale-free).
- ``l1``: :class:`~finesim.losses.l1.L1RegressionLoss`; ``Linear(3h -> 1)``; raw (0-5 STS, 0/1/2 NLI).
- ``translated-relu``: :class:`~finesim.losses.translated_relu.TranslatedReLULoss`; ``Linear(3h -> 1)``; raw.
- ``mse-regression``: :class:`~finesim.losses.mse_regression.MSERegressionLoss`; ``Linear(3h -> 1)``; raw.
- ``smooth-k2``: :class:`~finesim.losses.smooth_k2.SmoothK2Loss`; ``Linear(3h -> 1)``; raw.
- ``softmax``: :class:`~finesim.losses.softmax_classification.SoftmaxClassificationLoss` (SBERT);
  ``Linear(3h -> K)``; integer class ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class STSObjective:
    """How to build one objective and what labels it wants."""

    name: str
    head: str  # "none", "regression" or "classification"
    labels: str  # "unit" (rescaled to [0, 1]), "raw" or "class"
    defaults: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""


_REG = {"clamp": "lower", "label_range": (0.0, 5.0), "concat": ("u", "v", "|u-v|")}

STS_OBJECTIVES: dict[str, STSObjective] = {
    o.name: o
    for o in (
        STSObjective("mse-cosine", "none", "unit", {}, "MSE between cos(u, v) and the label rescaled to [0, 1]"),
        STSObjective("cosent", "none", "raw", {"scale": 20.0}, "CoSENT ranking loss on cos(u, v)"),
        STSObjective(
            "pearson",
            "none",
            "raw",
            {"gather": True, "reference_scaling": False},
            "1 - Pearson r (Pcc-tuning)",
        ),
        STSObjective("l1", "regression", "raw", dict(_REG), "L1 on the regression head"),
        STSObjective("translated-relu", "regression", "raw", {"k": 1.0, "x0": 0.25, **_REG}, "Translated ReLU"),
        STSObjective("mse-regression", "regression", "raw", dict(_REG), "MSE on the regression head"),
        STSObjective("smooth-k2", "regression", "raw", {"k": 2.0, "x0": 0.25, **_REG}, "Smooth K2"),
        STSObjective(
            "softmax", "classification", "class", {"num_labels": 3, "concat": ("u", "v", "|u-v|")}, "SBERT CE"
        ),
    )
}


def get_sts_objective(name: str) -> STSObjective:
    """The objective ``name``; a clear error listing the known ones."""
    if name not in STS_OBJECTIVES:
        raise ValueError(f"unknown STS objective {name!r}; choose from {sorted(STS_OBJECTIVES)}")
    return STS_OBJECTIVES[name]


def prepare_labels(name: str, labels: Any, label_range: tuple[float, float]) -> list[float]:
    """Labels in the form objective ``name`` expects (``unit``: min-max to ``[0, 1]`` over the declared
    range)."""
    from finesim.data.labels import minmax_scale

    obj = get_sts_objective(name)
    if obj.labels == "unit":
        return minmax_scale(labels, *label_range).tolist()
    if obj.labels == "class":
        arr = np.asarray(labels, dtype=np.float64)
        if not np.all(arr == np.round(arr)):
            raise ValueError(f"objective {name!r} needs integer class labels")
        return arr.astype(int).tolist()
    return np.asarray(labels, dtype=np.float64).tolist()


def build_sts_loss(name: str, model: Any, options: Mapping[str, Any] | None = None, *, seed: int | None = None) -> Any:
    """Build objective ``name`` for ``model``; adds a :class:`RegressionHead` when the objective needs
    one and the
    model has none. Unknown option names are errors."""
    obj = get_sts_objective(name)
    options = dict(options or {})
    unknown = sorted(set(options) - set(obj.defaults))
    if unknown:
        raise ValueError(f"objective {name!r} has no option(s) {unknown}; its options are {sorted(obj.defaults)}")
    opts = {**obj.defaults, **options}
    if obj.head != "none":
        from finesim.models.regression_head import add_regression_head, find_regression_head

        out = 1 if obj.head == "regression" else int(opts["num_labels"])
        head = find_regression_head(model)
        if head is None:
            add_regression_head(model, out_features=out, concat=opts["concat"], seed=seed)
        elif head.out_features != out:
            raise ValueError(f"objective {name!r} needs a head with {out} outputs; the model's has {head.out_features}")
    reg = {"clamp": opts.get("clamp"), "label_range": tuple(opts.get("label_range", (0.0, 5.0)))}
    if name == "mse-cosine":
        from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss

        return CosineSimilarityLoss(model)
    if name == "cosent":
        from sentence_transformers.sentence_transformer.losses import CoSENTLoss

        return CoSENTLoss(model, scale=float(opts["scale"]))
    if name == "pearson":
        from finesim.losses.pearson import PearsonLoss

        return PearsonLoss(model, gather=bool(opts["gather"]), reference_scaling=bool(opts["reference_scaling"]))
    if name == "l1":
        from finesim.losses.l1 import L1RegressionLoss

        return L1RegressionLoss(model, **reg)
    if name == "mse-regression":
        from finesim.losses.mse_regression import MSERegressionLoss

        return MSERegressionLoss(model, **reg)
    if name == "translated-relu":
        from finesim.losses.translated_relu import TranslatedReLULoss

        return TranslatedReLULoss(model, k=float(opts["k"]), x0=float(opts["x0"]), **reg)
    if name == "smooth-k2":
        from finesim.losses.smooth_k2 import SmoothK2Loss

        return SmoothK2Loss(model, k=float(opts["k"]), x0=float(opts["x0"]), **reg)
    from finesim.losses.softmax_classification import SoftmaxClassificationLoss

    return SoftmaxClassificationLoss(model)

"""The STS objectives: the STS-regression paper's head losses (Zhang & Li 2024) and the scale-free ones.

- ``smooth-k2`` (:class:`~finesim.losses.smooth_k2.SmoothK2Loss`), ``translated-relu``
  (:class:`~finesim.losses.translated_relu.TranslatedReLULoss`), ``l1`` (:class:`~finesim.losses.l1.L1RegressionLoss`),
  ``mse-regression`` (:class:`~finesim.losses.mse_regression.MSERegressionLoss`): through the head
  ``Linear([u; v; |u-v|]) -> 1``, raw labels (0-5 STS, 0/1/2 NLI).
- ``softmax`` (:class:`~finesim.losses.softmax_classification.SoftmaxClassificationLoss`, SBERT's): through the head
  ``Linear([u; v; |u-v|]) -> K``, integer class ids.
- ``pearson`` (:class:`~finesim.losses.pearson.PearsonLoss`, Pcc-tuning) and ``cosent`` (sentence-transformers'
  ``CoSENTLoss``): on the cosine, no head, raw labels (both are scale-free).

MSE on the cosine is the C-STS ``mse`` objective (:mod:`finesim.training.objectives.csts`).

The head objectives add a :class:`~finesim.models.regression_head.RegressionHead` to the model
(:func:`prepare_head_model`; ``concat`` its parts, ``seed`` its initialisation) and take, besides the loss's own
options:

- ``freeze_encoder: true``: stage 1 of the two-stage recipe (only the head trains).
- ``head_lr``: a learning rate for the head's parameters alone (through sentence-transformers'
  ``learning_rate_mapping`` training argument: the head gets its own optimizer parameter groups with the same
  schedule and weight decay rules); null (default) trains the head at ``train.learning_rate`` like the rest, as the
  reference code does (there the head shares the top layer's rate). Meant for stage 2, where a head calibrated on
  0-2 NLI labels meets 0-5 STS labels and its early errors would otherwise be corrected mostly by moving the encoder.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from finesim.models.card import Citation
from finesim.training.objectives.base import Objective
from finesim.training.objectives.pcc import CITATION as PCC_TUNING

# the STS-regression paper (Translated ReLU, Smooth K2 and the head objectives); BibTeX fields from its title page.
# ``pearson`` cites Pcc-tuning; ``softmax`` and ``cosent`` (SBERT's and sentence-transformers' losses) cite nothing
# of their own here (a sentence-transformers card adds what CoSENTLoss cites)
CITATION = Citation(
    "STS regression (Translated ReLU, Smooth K2)",
    "@misc{zhang2024stsregression,\n"
    "  title = {Advancing Semantic Textual Similarity Modeling: A Regression Framework with Translated {ReLU} and"
    " Smooth {K2} Loss},\n"
    "  author = {Zhang, Bowen and Li, Chunping},\n"
    "  year = {2024},\n"
    "  eprint = {2406.05326},\n"
    "  archivePrefix = {arXiv}\n}",
)

REGRESSION_DEFAULTS: dict[str, Any] = {"clamp": "lower", "label_range": [0.0, 5.0], "concat": ["u", "v", "|u-v|"]}
STAGE_DEFAULTS: dict[str, Any] = {"freeze_encoder": False, "seed": None, "head_lr": None}
# options that shape the head or the training, not the loss
HEAD_OPTIONS = ("concat", "num_labels", "freeze_encoder", "seed", "head_lr")


def prepare_head_model(model: Any, options: Mapping[str, Any]) -> None:
    """Add the pair head (``num_labels`` outputs for ``softmax``, else 1) unless the model has one of that size;
    freeze everything else when ``freeze_encoder``."""
    from finesim.models.regression_head import add_regression_head, find_regression_head, freeze_encoder

    out = int(options.get("num_labels", 1))
    head = find_regression_head(model)
    if head is None:
        add_regression_head(model, out_features=out, concat=tuple(options["concat"]), seed=options["seed"])
    elif head.out_features != out:
        raise ValueError(f"the objective needs a head with {out} outputs; the model's has {head.out_features}")
    if options["freeze_encoder"]:
        freeze_encoder(model)


def _regression_kwargs(options: Mapping[str, Any]) -> dict[str, Any]:
    kwargs = {k: v for k, v in options.items() if k not in HEAD_OPTIONS}
    kwargs["label_range"] = tuple(float(x) for x in kwargs["label_range"])
    return kwargs


def build_softmax(model: Any, options: Mapping[str, Any]) -> Any:
    from finesim.losses.softmax_classification import SoftmaxClassificationLoss

    return SoftmaxClassificationLoss(model)


def build_pearson(model: Any, options: Mapping[str, Any]) -> Any:
    from finesim.losses.pearson import PearsonLoss

    return PearsonLoss(model, gather=bool(options["gather"]), reference_scaling=bool(options["reference_scaling"]))


def build_cosent(model: Any, options: Mapping[str, Any]) -> Any:
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss

    return CoSENTLoss(model, scale=float(options["scale"]))


def check_head_lr(options: Mapping[str, Any], train: Any) -> None:
    """``head_lr`` is null or a positive number (checked before the model is built)."""
    head_lr = options.get("head_lr")
    if head_lr is None:
        return
    try:
        value = float(head_lr)
    except (TypeError, ValueError):
        raise ValueError(f"objective option head_lr must be a number > 0 or null, got {head_lr!r}") from None
    if not value > 0:
        raise ValueError(f"objective option head_lr must be > 0, got {head_lr!r}")


def head_training_args(model: Any, loss: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """``learning_rate_mapping`` giving the regression head's parameters ``options["head_lr"]`` (none when null).
    The pattern lists the head's exact parameter names as the trainer sees them (through the loss)."""
    head_lr = options.get("head_lr")
    if head_lr is None:
        return {}
    from finesim.models.regression_head import get_regression_head

    head_params = {id(p) for p in get_regression_head(model).parameters()}
    names = [n for n, p in loss.named_parameters() if id(p) in head_params]
    if not names:
        raise ValueError("head_lr: the loss does not reach the regression head's parameters")
    return {"learning_rate_mapping": {"^(?:" + "|".join(re.escape(n) for n in names) + ")$": float(head_lr)}}


def _head_objective(
    name: str,
    build: Any,
    defaults: dict[str, Any],
    description: str,
    labels: str = "raw",
    citations: tuple[Citation, ...] = (CITATION,),
) -> Objective:
    return Objective(
        name=name,
        build=build,
        encoders=("bi",),
        layout="rows",
        defaults={**defaults, **STAGE_DEFAULTS},
        description=description,
        labels=labels,
        prepare_model=prepare_head_model,
        training_args=head_training_args,
        check=check_head_lr,
        citations=citations,
    )


def _regression_objective(name: str, description: str, **defaults: float) -> Objective:
    """A head objective whose loss regresses the head's score on the label (imported when it builds, so a recipe
    check imports no torch), built with :func:`_regression_kwargs`; options ``defaults``, then
    :data:`REGRESSION_DEFAULTS`."""

    def build(model: Any, options: Mapping[str, Any]) -> Any:
        from finesim.losses import l1, mse_regression, smooth_k2, translated_relu

        loss = {
            "smooth-k2": smooth_k2.SmoothK2Loss,
            "translated-relu": translated_relu.TranslatedReLULoss,
            "l1": l1.L1RegressionLoss,
            "mse-regression": mse_regression.MSERegressionLoss,
        }[name]
        return loss(model, **_regression_kwargs(options))

    return _head_objective(name, build, {**defaults, **REGRESSION_DEFAULTS}, description)


OBJECTIVES = (
    _regression_objective("smooth-k2", "Smooth K2", k=2.0, x0=0.25),
    _regression_objective("translated-relu", "Translated ReLU", k=1.0, x0=0.25),
    _regression_objective("l1", "L1 on the regression head"),
    _regression_objective("mse-regression", "MSE on the regression head"),
    _head_objective(
        "softmax",
        build_softmax,
        {"num_labels": 3, "concat": ["u", "v", "|u-v|"]},
        "SBERT CE",
        labels="class",
        citations=(),
    ),
    Objective(
        "pearson",
        build_pearson,
        encoders=("bi", "prompt-lm"),
        layout="rows",
        defaults={"gather": True, "reference_scaling": False},
        description="1 - Pearson r (Pcc-tuning)",
        labels="raw",
        citations=(PCC_TUNING,),
    ),
    Objective(
        "cosent",
        build_cosent,
        encoders=("bi", "prompt-lm"),
        layout="rows",
        defaults={"scale": 20.0},
        description="CoSENT ranking loss on cos(u, v)",
        labels="raw",
    ),
)

"""Registers the STS objectives and data formats with the recipe runner (:mod:`finesim.training.registry`).

Objectives (layout ``rows``): ``smooth-k2``, ``translated-relu``, ``l1``, ``mse-regression``, ``softmax``
(these add a :class:`~finesim.models.regression_head.RegressionHead` to the model; encoder ``bi``), ``pearson``
and ``cosent`` (encoders ``bi`` and ``prompt-lm``). MSE on the cosine is the runner's own ``mse`` objective.

Options of the head-based objectives besides the loss's own:

- ``freeze_encoder: true``: stage 1 of the two-stage recipe (only the head trains).
- ``head_lr``: a learning rate for the head's parameters alone (through sentence-transformers'
  ``learning_rate_mapping`` training argument: the head gets its own optimizer parameter groups with the same
  schedule and weight decay rules); null (default) trains the head at ``train.learning_rate`` like the rest, as
  the reference code does (there the head shares the top layer's rate). Meant for stage 2, where a head
  calibrated on 0-2 NLI labels meets 0-5 STS labels and its early errors would otherwise be corrected mostly by
  moving the encoder.
- ``seed``: the head's initialisation seed.

Data formats:

- ``sts``: ``train:`` a data root folder (``.``) gives the overlap-filtered merged STS-B + SICK-R training set
  (0-5); an ``sts-*.csv`` path gives an STS-B split; a ``SICK_*.txt`` path gives SICK rescaled to 0-5.
- ``sts-unfiltered``: ``train:`` a data root folder gives STS-B train + SICK-R train (0-5) **without** the
  overlap filter: the 10,249 pairs of the Pcc-tuning paper (which contain pairs that also occur in STS12-16,
  since STS-B was drawn from them).
- ``snli-regression``: the SNLI folder (``nli/SNLI``), dev + test pairs as regression data (0 / 1 / 2).
- ``snli-classification``: the same pairs with integer class ids for ``softmax``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from datasets import Dataset

from finesim.losses.sts_objectives import STS_OBJECTIVES, build_sts_loss
from finesim.training.registry import Objective, register_data_format, register_objective

RUNNER_OBJECTIVES = ("smooth-k2", "translated-relu", "l1", "mse-regression", "softmax", "pearson", "cosent")


def _builder(name: str):
    def build(model: Any, options: Mapping[str, Any]) -> Any:
        opts = dict(options)
        freeze = bool(opts.pop("freeze_encoder", False))
        seed = opts.pop("seed", None)
        opts.pop("head_lr", None)  # a training argument (head_training_args), not a loss option
        if "label_range" in opts:
            opts["label_range"] = tuple(float(x) for x in opts["label_range"])
        if "concat" in opts:
            opts["concat"] = tuple(opts["concat"])
        loss = build_sts_loss(name, model, opts, seed=seed)
        if freeze:
            from finesim.models.regression_head import freeze_encoder

            freeze_encoder(model)
        return loss

    return build


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
    """``learning_rate_mapping`` giving the regression head's parameters ``options["head_lr"]`` (none when
    null). The pattern lists the head's exact parameter names as the trainer sees them (through the loss)."""
    import re

    head_lr = options.get("head_lr")
    if head_lr is None:
        return {}
    head_lr = float(head_lr)  # validated by check_head_lr when the recipe was checked
    from finesim.models.regression_head import get_regression_head

    head_params = {id(p) for p in get_regression_head(model).parameters()}
    names = [n for n, p in loss.named_parameters() if id(p) in head_params]
    if not names:
        raise ValueError("head_lr: the loss does not reach the regression head's parameters")
    return {"learning_rate_mapping": {"^(?:" + "|".join(re.escape(n) for n in names) + ")$": head_lr}}


for _name in RUNNER_OBJECTIVES:
    _obj = STS_OBJECTIVES[_name]
    _defaults: dict[str, Any] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in _obj.defaults.items()}
    _head = _obj.head != "none"
    if _head:
        _defaults.update(freeze_encoder=False, seed=None, head_lr=None)
    register_objective(
        Objective(
            name=_name,
            build=_builder(_name),
            encoders=("bi",) if _head else ("bi", "prompt-lm"),
            layout="rows",
            defaults=_defaults,
            description=_obj.description,
            training_args=head_training_args if _head else None,
            check=check_head_lr if _head else None,
        ),
        replace=True,
    )


def _cols(ds: Dataset) -> Dataset:
    return ds.select_columns(["sentence1", "sentence2", "label"])


def load_sts(path: Path) -> tuple[Dataset, dict[str, Any]]:
    """The ``sts`` data format (see the module docstring)."""
    from finesim.data.labels import sick_to_sts
    from finesim.data.sts import read_sick, read_stsb
    from finesim.data.sts_training import merged_sts_training_set

    path = Path(path)
    if path.is_dir():
        ds, report = merged_sts_training_set(path)
        return ds, report
    if path.name.startswith("SICK"):
        ds, report = read_sick(path)
        ds = _cols(ds).map(lambda b: {"label": sick_to_sts(b["label"]).tolist()}, batched=True)
        return ds, {"rows": len(ds), "label_scale": "0-5 (SICK rescaled)"}
    ds, report = read_stsb(path)
    return _cols(ds), {"rows": len(ds)}


def load_sts_unfiltered(path: Path) -> tuple[Dataset, dict[str, Any]]:
    """The ``sts-unfiltered`` data format (see the module docstring)."""
    from finesim.data.sts_training import merged_sts_training_set

    if not Path(path).is_dir():
        raise ValueError(f"data format 'sts-unfiltered' needs the data root folder as train:, got {path}")
    return merged_sts_training_set(path, filter_eval_overlap=False)


def _nli(kind: str):
    def load(path: Path) -> tuple[Dataset, dict[str, Any]]:
        from finesim.data.sts_training import nli_classification_pairs, nli_regression_pairs

        root = Path(path).parent.parent  # .../nli/SNLI -> data root
        fn = nli_regression_pairs if kind == "regression" else nli_classification_pairs
        ds, report = fn(root)
        ds = Dataset.from_dict({"sentence1": ds["premise"], "sentence2": ds["hypothesis"], "label": ds["label"]})
        return ds, report

    return load


register_data_format("sts", load_sts, replace=True)
register_data_format("sts-unfiltered", load_sts_unfiltered, replace=True)
register_data_format("snli-regression", _nli("regression"), replace=True)
register_data_format("snli-classification", _nli("classification"), replace=True)

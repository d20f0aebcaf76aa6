"""Encoder types of the recipe runner (``model.encoder``), declared in one table: :data:`ENCODERS`.

An encoder type says how to build the model from the recipe's ``model`` section and how to turn the data into the
trainer's columns for each layout (column order matters; the losses read them in this order):

- ``rows``: one C-STS row per example. bi: ``[(s1, c), (s2, c)]``; tri: ``[s1, s2, c]``; cross: ``[s1, "s2
  [SEP] c"]``; label: the scaled label. Data without conditions (STS) gives ``[s1, s2]``.
- ``pairs``: one sentence pair under both its conditions (from :func:`finesim.data.pairing.pair_conditions`).
  bi: ``[(s1, c_high), (s2, c_high), (s1, c_low), (s2, c_low)]``; tri: ``[s1, s2, c_high, c_low]``;
  label: ``[label_high, label_low]``.
- ``triplets``: the data format's ``anchor, positive, negative`` columns as they are (taken by the runner).

A new encoder type: write its ``build`` and ``rows`` (and ``pairs``) functions here and add an
:class:`EncoderType` to :data:`ENCODERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset

from finesim.options import resolve_options

TRIPLET_COLUMNS = ("anchor", "positive", "negative")


@dataclass(frozen=True)
class EncoderType:
    """How to build a model of one encoder type and turn canonical data into trainer columns.

    Attributes:
        name: the recipe's ``model.encoder``.
        build: ``build(model_spec) -> model`` (a SentenceTransformer or CrossEncoder).
        rows: ``rows(model, dataset) -> Dataset`` with the rows-layout columns plus ``label``.
        pairs: ``pairs(model, paired_dataset) -> Dataset`` with the pairs-layout columns plus ``label``, or None.
        trainer: ``"sentence"`` (SentenceTransformerTrainer) or ``"cross"`` (CrossEncoderTrainer).
        encoder: the encoder type (``bi``, ``cross`` or ``tri``) the trained model is validated, saved (its marker's
            ``encoder``) and scored as, when it differs from ``name`` (a decoder-LM ``prompt-lm`` model is scored
            like a ``bi`` encoder); empty: ``name``.
        defaults: default ``model.options`` of this encoder type; an option not listed here is an error.
        conditions: whether the model takes a condition with each pair; False (a prompt-based decoder LM):
            training or validation data with a ``condition`` column is an error.
    """

    name: str
    build: Callable[[Any], Any]
    rows: Callable[[Any, Dataset], Dataset]
    pairs: Callable[[Any, Dataset], Dataset] | None = None
    trainer: str = "sentence"
    encoder: str = ""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    conditions: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "encoder", self.encoder or self.name)

    def resolve_options(self, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """Defaults updated with the recipe's ``model.options``; unknown option names are errors."""
        return resolve_options(f"encoder type {self.name!r}", self.defaults, options, key="model.options")


# ---------------------------------------------------------------- bi


def _build_bi(spec: Any) -> Any:
    from finesim.models.builders import build_bi_encoder

    return build_bi_encoder(spec.backbone, pooling=spec.pooling, transform=spec.transform, max_length=spec.max_length)


def _bi_rows(model: Any, ds: Dataset) -> Dataset:
    if "condition" not in ds.column_names:  # plain STS data: sentences alone
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


# ---------------------------------------------------------------- tri and cross (encoders with a head)


def _headed_model_options(spec: Any) -> dict[str, Any]:
    """Builder keywords of an encoder with a head (tri, cross): head, pooling, transform, max_length, head options
    (checked against the encoder by the recipe validation)."""
    return dict(
        head=spec.head, pooling=spec.pooling, transform=spec.transform, max_length=spec.max_length, **spec.head_options
    )


def _build_tri(spec: Any) -> Any:
    from finesim.models.builders import build_tri_encoder

    return build_tri_encoder(spec.backbone, **_headed_model_options(spec))


def _tri_rows(model: Any, ds: Dataset) -> Dataset:
    if "condition" not in ds.column_names:
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
    from finesim.models.builders import build_cross_encoder

    return build_cross_encoder(spec.backbone, **_headed_model_options(spec))


def _cross_rows(model: Any, ds: Dataset) -> Dataset:
    from finesim.models.builders import cross_second_text

    conds = ds["condition"] if "condition" in ds.column_names else [None] * len(ds)
    return Dataset.from_dict(
        {
            "first": ds["sentence1"],
            "second": [cross_second_text(model, s2, c) for s2, c in zip(ds["sentence2"], conds)],
            "label": ds["label"],
        }
    )


# ---------------------------------------------------------------- prompt-lm (a decoder LM, Pcc-tuning)

LORA_DEFAULTS: dict[str, Any] = {"r": 64, "alpha": 16, "dropout": 0.05, "target_modules": "all-linear"}
PROMPT_LM_DEFAULTS: dict[str, Any] = {
    "template": None,  # None: a reloaded model keeps its saved value; a fresh one gets "sth" / True
    "add_bos": None,
    "sentence_max_tokens": None,
    "quantize": None,
    "lora": dict(LORA_DEFAULTS),
}


def _lora_options(value: Any) -> dict[str, Any] | None:
    if value is None or value is False:
        return None
    if value is True:
        return dict(LORA_DEFAULTS)
    if not isinstance(value, Mapping):
        raise ValueError(f"model.options.lora must be a mapping {sorted(LORA_DEFAULTS)} or null, got {value!r}")
    return resolve_options("model.options.lora", LORA_DEFAULTS, value, key="keys")


def _build_prompt_lm(spec: Any) -> Any:
    """Build the ``prompt-lm`` model of a recipe's ``model`` section.

    ``model.options``: ``template``, ``add_bos``, ``sentence_max_tokens``, ``quantize`` (null or ``4bit``), ``lora``
    (``{r, alpha, dropout, target_modules}`` or null for full fine-tuning). ``model.max_length`` limits the templated
    prompt (the sentence is shortened to fit). A ``backbone`` that is a saved prompt-lm model (the stage-1 output) is
    reloaded with its adapter, which keeps training; the options and ``max_length`` left unset keep its saved values.
    """
    from finesim.models.builders import add_lora, build_prompt_lm
    from finesim.models.prompt_transformer import has_lora

    opts = resolve_options("encoder type 'prompt-lm'", PROMPT_LM_DEFAULTS, spec.options, key="model.options")
    if spec.pooling not in (None, "lasttoken"):
        raise ValueError(f"encoder 'prompt-lm' pools the last token; model.pooling {spec.pooling!r} is not allowed")
    if spec.transform or spec.head or spec.head_options:
        raise ValueError("model.transform, model.head and model.head_options do not apply to encoder 'prompt-lm'")
    lora = _lora_options(opts["lora"])
    model = build_prompt_lm(
        spec.backbone,
        max_length=spec.max_length,
        quantize=opts["quantize"],
        template=None if opts["template"] is None else str(opts["template"]),
        add_bos=None if opts["add_bos"] is None else bool(opts["add_bos"]),
        sentence_max_tokens=opts["sentence_max_tokens"],
    )
    if lora is not None and not has_lora(model):  # a reloaded stage-1 model keeps (and trains) its adapter
        add_lora(model, **lora)
    return model


def _prompt_lm_rows(model: Any, ds: Dataset) -> Dataset:
    """Plain sentence pairs (data with conditions is refused by the runner: ``conditions=False``)."""
    return ds.select_columns(["sentence1", "sentence2", "label"])


# ---------------------------------------------------------------- the table

ENCODERS: dict[str, EncoderType] = {
    e.name: e
    for e in (
        EncoderType("bi", _build_bi, _bi_rows, _bi_pairs, trainer="sentence"),
        EncoderType("tri", _build_tri, _tri_rows, _tri_pairs, trainer="sentence"),
        EncoderType("cross", _build_cross, _cross_rows, None, trainer="cross"),
        EncoderType(
            "prompt-lm",
            _build_prompt_lm,
            _prompt_lm_rows,
            None,
            trainer="sentence",
            encoder="bi",
            conditions=False,
            defaults=PROMPT_LM_DEFAULTS,
        ),
    )
}


def get_encoder(name: str) -> EncoderType:
    """The encoder type ``name`` (a clear error listing the known ones)."""
    if name not in ENCODERS:
        raise ValueError(f"unknown encoder type {name!r}; registered: {sorted(ENCODERS)}")
    return ENCODERS[name]

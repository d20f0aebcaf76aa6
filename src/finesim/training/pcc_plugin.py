"""Registers Pcc-tuning's pieces with the recipe runner (:mod:`finesim.training.registry`).

- Objective ``infonce`` (alias ``mnrl``): stage 1, InfoNCE with hard negatives (the Pcc-tuning paper's Eq. 8),
  i.e. sentence-transformers' ``MultipleNegativesRankingLoss`` on ``(anchor, positive, negative)`` triplets:
  each anchor is scored against every positive and every hard negative of the batch, cosine / temperature,
  cross-entropy towards its own positive. Options: ``temperature`` (0.05, the reference code's; the paper does
  not state it), ``no_duplicates`` (true: sentence-transformers' ``NoDuplicatesBatchSampler``, so a batch never
  holds the same text twice — SNLI triplets share premises, and a second copy of an anchor's premise would be an
  in-batch negative identical to the anchor), ``gather_across_devices`` (true: embeddings of all processes are
  candidates, as in the reference; no effect on one process).
- Data formats for stage 1: ``snli-triplets`` (``train: nli/SNLI`` gives
  :func:`finesim.data.sts_training.nli_triplets`: premise, entailment hypothesis, contradiction hypothesis from
  SNLI dev + test, 6,339 triplets, 943 of them sharing their premise with another triplet) and
  ``simcse-nli-csv`` (``train:`` SimCSE's ``nli_for_simcse.csv``, the paper's stage-1 data, read by
  :func:`finesim.data.sts_training.read_simcse_nli`).
- Encoder type ``prompt-lm``: a decoder LM with a prompt template and last-token pooling
  (:func:`finesim.models.prompt_lm.build_prompt_lm`), optionally with a LoRA adapter; it is validated, saved and
  evaluated as a ``bi`` encoder (the template is part of the saved model). ``model.options``: ``template``,
  ``add_bos``, ``sentence_max_tokens``, ``quantize`` (null or ``4bit``), ``lora`` (``{r, alpha, dropout,
  target_modules}`` or null for full fine-tuning). ``model.max_length`` limits the templated prompt (the
  sentence is shortened to fit). A ``backbone`` that is a saved prompt-lm model (the stage-1 output) is reloaded
  with its adapter, which keeps training; the options and ``max_length`` left unset keep its saved values (a
  fresh model: template ``sth``, ``add_bos`` true).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from datasets import Dataset

from finesim.training.registry import (
    EncoderType,
    Objective,
    get_encoder,
    register_data_format,
    register_encoder,
    register_objective,
)

LORA_DEFAULTS: dict[str, Any] = {"r": 64, "alpha": 16, "dropout": 0.05, "target_modules": "all-linear"}

# ---------------------------------------------------------------- objective: InfoNCE with hard negatives


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


for _name in ("infonce", "mnrl"):
    register_objective(
        Objective(
            name=_name,
            build=build_infonce,
            encoders=("bi", "prompt-lm"),
            layout="triplets",
            defaults={"temperature": 0.05, "no_duplicates": True, "gather_across_devices": True},
            description="InfoNCE with hard negatives on (anchor, positive, negative) triplets (sentence-"
            "transformers MultipleNegativesRankingLoss, scale 1/temperature); Pcc-tuning stage 1",
            training_args=infonce_training_args,
            check=check_infonce,
        ),
        replace=True,
    )

# ---------------------------------------------------------------- data format: SNLI triplets


def load_snli_triplets(path: Path) -> tuple[Dataset, dict[str, Any]]:
    """The ``snli-triplets`` format: ``path`` is the SNLI folder (``nli/SNLI``)."""
    from finesim.data.sts_training import nli_triplets

    return nli_triplets(Path(path).parent.parent)  # .../nli/SNLI -> data root


def load_simcse_nli(path: Path) -> tuple[Dataset, dict[str, Any]]:
    """The ``simcse-nli-csv`` format: ``path`` is SimCSE's ``nli_for_simcse.csv``."""
    from finesim.data.sts_training import read_simcse_nli

    return read_simcse_nli(path)


register_data_format("snli-triplets", load_snli_triplets, replace=True)
register_data_format("simcse-nli-csv", load_simcse_nli, replace=True)

# ---------------------------------------------------------------- encoder type: prompt-based decoder LM


def _lora_options(value: Any) -> dict[str, Any] | None:
    if value is None or value is False:
        return None
    if value is True:
        return dict(LORA_DEFAULTS)
    if not isinstance(value, Mapping):
        raise ValueError(f"model.options.lora must be a mapping {sorted(LORA_DEFAULTS)} or null, got {value!r}")
    unknown = sorted(set(value) - set(LORA_DEFAULTS))
    if unknown:
        raise ValueError(f"model.options.lora has unknown key(s) {unknown}; allowed: {sorted(LORA_DEFAULTS)}")
    return {**LORA_DEFAULTS, **value}


def build_prompt_lm_encoder(spec: Any) -> Any:
    """Build the ``prompt-lm`` model of a recipe's ``model`` section."""
    from finesim.models.prompt_lm import add_lora, build_prompt_lm, has_lora

    opts = get_encoder("prompt-lm").resolve_options(spec.options)
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


def prompt_lm_rows(model: Any, ds: Dataset) -> Dataset:
    """Plain sentence pairs (data with conditions is refused by the runner: ``conditions=False``)."""
    return ds.select_columns(["sentence1", "sentence2", "label"])


register_encoder(
    EncoderType(
        "prompt-lm",
        build_prompt_lm_encoder,
        prompt_lm_rows,
        None,
        trainer="sentence",
        saved_as="bi",
        conditions=False,
        defaults={
            "template": None,  # None: a reloaded model keeps its saved value; a fresh one gets "sth" / True
            "add_bos": None,
            "sentence_max_tokens": None,
            "quantize": None,
            "lora": dict(LORA_DEFAULTS),
        },
    ),
    replace=True,
)

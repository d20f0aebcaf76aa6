"""A hash identifying a loaded model's weights, so an index is never searched with another model and Ray actors
never score with different copies of one (:class:`finesim.evaluation.ray_scoring.RayScorer` checks it by default).

The fingerprint is the SHA-256 of every parameter and buffer (name, dtype, shape and bytes, in ``state_dict`` order)
and of the settings that shape the embeddings without being weights: the module classes in order, the maximum
sequence length and the pooling mode; for a CASE model also the prompt templates, "− c" and the normalisation
settings, and the projection's weights. An ONNX export (``finesim export``) hashes its runtime (format, quantization
and the ONNX file's recorded SHA-256) in place of its transformer's torch state, which is uninitialised storage
that the ONNX session replaces. Two loads of the same folder give the same fingerprint; a fine-tuned copy,
another head or another pooling gives another.

What the model reads besides its weights has a fingerprint of its own, :func:`model_inputs_fingerprint`: one
SHA-256 per component, ``tokenizer`` (the ids each tokenizing module gives a fixed set of probe texts, with
sentence-transformers' ``do_lower_case``: what the model reads, whatever files the tokenizer was saved in, so a
re-saved copy is the same and a changed normaliser, vocabulary or special token is not) and ``prompts``
(sentence-transformers' non-empty prompts and ``default_prompt_name``). It is kept apart from the weights
fingerprint, whose value indexes already on disk record: an index built now records both (its manifest's
``model.inputs_sha256``), an older one only the weights', and each is checked when recorded
(:func:`inputs_differences`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from finesim.models.weights import update_with_state


def _settings(model: Any) -> dict[str, Any]:
    """The non-weight settings of a ``SentenceTransformer`` that change its embeddings."""
    from finesim.models.pooling import model_pooling

    try:
        modules = [f"{type(m).__module__}.{type(m).__qualname__}" for m in model]
    except TypeError:
        modules = [f"{type(model).__module__}.{type(model).__qualname__}"]
    return {
        "modules": modules,
        "max_seq_length": getattr(model, "max_seq_length", None),
        "pooling": model_pooling(model),
    }


# what a tokenizer is checked on: texts that exercise case, accents and other normalisation, punctuation, digits,
# URLs, whitespace, compatibility forms, rare words, other scripts and emoji. Two tokenizers that give these the same
# ids (special tokens included) are taken for the same; the vocabulary's size is the weights' (the embedding matrix)
TOKENIZER_PROBE = (
    "The Quick BROWN fox jumps over 13 lazy dogs.",
    "Café naïve résumé, São Paulo and Zürich; Ångström Œuvre.",
    "don't stop: e-mail @user #tag https://example.com/a?b=1&c=2 (x) [y] {z}",
    "  two  spaces\tand a tab\nand a new line  ",
    "ＦＵＬＬＷＩＤＴＨ ﬁ ligature ½ ① ™ …",
    "antidisestablishmentarianism pneumonoultramicroscopic supercalifragilistic",
    "東京 Москва القاهرة मुंबई 😀👍🏽 ∑∫√ ≤ ≥",
)
# the components of model_inputs_fingerprint, in the order messages name them
INPUT_PARTS = ("tokenizer", "prompts")


def tokenizer_behaviour(tokenizer: Any) -> list[list[int]]:
    """The ids ``tokenizer`` gives :data:`TOKENIZER_PROBE`, special tokens added, neither truncated nor padded:
    what the model reads of a text, unlike the tokenizer's files (a re-saved copy rewrites them) or its serialised
    state (which records the truncation and padding of its last call)."""
    encoded = tokenizer(list(TOKENIZER_PROBE), add_special_tokens=True, truncation=False, padding=False)
    return [list(map(int, ids)) for ids in encoded["input_ids"]]


def _sentence_model(model: Any) -> Any:
    """The sentence-transformers model behind ``model`` (a CASE model's encoder's), else ``model`` itself."""
    from sentence_transformers import SentenceTransformer

    from finesim.evaluation.scoring import CASE_ENCODER, scorer_encoder

    if not isinstance(model, SentenceTransformer) and scorer_encoder(model) == CASE_ENCODER:
        return model.encoder.model
    return model


def model_inputs(model: Any) -> dict[str, Any]:
    """What ``model`` (a ``SentenceTransformer``, a CASE model, or any model with a ``tokenizer``) reads besides its
    weights, by component (:data:`INPUT_PARTS`): ``tokenizer``, for each tokenizing module its
    :func:`tokenizer_behaviour` (with sentence-transformers' ``do_lower_case`` when it is on, applied before the
    tokenizer); ``prompts``, the non-empty sentence-transformers prompts and the default prompt's name (when its
    prompt is non-empty)."""
    target = _sentence_model(model)
    try:
        modules = list(target)
    except TypeError:
        modules = [target]
    tokenizers = []
    for position, module in enumerate(modules):
        tokenizer = getattr(module, "tokenizer", None)
        if tokenizer is None:
            continue
        entry: dict[str, Any] = {"module": position, "ids": tokenizer_behaviour(tokenizer)}
        if getattr(module, "do_lower_case", False) is True:  # sentence-transformers lowercases before tokenising
            entry["do_lower_case"] = True
        tokenizers.append(entry)
    prompts = {str(k): str(v) for k, v in (getattr(target, "prompts", None) or {}).items() if v}
    default = getattr(target, "default_prompt_name", None)
    return {
        "tokenizer": tokenizers,
        "prompts": {"prompts": prompts, "default_prompt_name": default if default in prompts else None},
    }


def model_inputs_fingerprint(model: Any) -> dict[str, str]:
    """One SHA-256 hex digest per component of :func:`model_inputs` (``tokenizer``, ``prompts``): what an index
    records as its model's ``inputs_sha256`` beside the weights fingerprint, and checks when recorded
    (:func:`inputs_differences`)."""
    return {
        part: hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
        for part, value in model_inputs(model).items()
    }


def inputs_differences(recorded: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> list[str]:
    """The components whose digest ``recorded`` (an ``inputs_sha256`` record) and ``now`` give otherwise, in
    :data:`INPUT_PARTS` order; none when either is None (an index built before finesim recorded them: not
    checked). Only components both have are compared (one recorded by a newer finesim is not)."""
    if not recorded or not now:
        return []
    known = [p for p in INPUT_PARTS if p in recorded] + sorted(set(recorded) - set(INPUT_PARTS))
    return [part for part in known if part in now and recorded[part] != now[part]]


def describe_inputs_differences(parts: list[str]) -> str:
    """``parts`` (from :func:`inputs_differences`) in words, for an error message."""
    words = {
        "tokenizer": "tokenizer (the ids it gives texts: its normaliser, vocabulary, special tokens, or do_lower_case)",
        "prompts": "prompts (config_sentence_transformers.json's prompts / default_prompt_name)",
    }
    return " nor the same ".join(words.get(part, part) for part in parts)


def scorer_inputs_fingerprint(scorer: Any) -> dict[str, str] | None:
    """:func:`model_inputs_fingerprint` of the model behind a scorer (over each member's, for an ensemble: the
    components every member has); None when it cannot be computed. What Ray scoring's actors report beside the
    weights hash by default."""
    members = getattr(scorer, "members", None) or [scorer]
    try:
        parts = [model_inputs_fingerprint(member.model) for member in members]
    except Exception:  # a model type this does not know: no check rather than no scoring
        return None
    common = [part for part in INPUT_PARTS if all(part in p for p in parts)]
    return {part: hashlib.sha256("\n".join(p[part] for p in parts).encode()).hexdigest() for part in common}


def model_fingerprint(model: Any) -> str:
    """SHA-256 hex digest identifying ``model`` (a ``SentenceTransformer`` or a CASE model): see the module
    docstring for what goes in."""
    from sentence_transformers import SentenceTransformer

    from finesim.evaluation.scoring import CASE_ENCODER, scorer_encoder

    digest = hashlib.sha256()
    if not isinstance(model, SentenceTransformer) and scorer_encoder(model) == CASE_ENCODER:
        encoder = model.encoder
        config = {k: v for k, v in encoder.config().items() if k != "encoder"}
        settings = {"case": config, "encoder": _settings(encoder.model)}
        digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
        update_with_state(digest, encoder.model, "encoder.")
        if model.projection is not None:
            digest.update(json.dumps(model.projection.config(), sort_keys=True, default=str).encode())
            update_with_state(digest, model.projection, "projection.")
        return digest.hexdigest()
    digest.update(json.dumps(_settings(model), sort_keys=True, default=str).encode())
    skip: tuple[str, ...] = ()
    runtime = getattr(model, "finesim_runtime", None)
    if runtime and runtime.get("format") == "onnx":
        from finesim.models.runtime import ExportedTransformer

        digest.update(json.dumps({"runtime": runtime}, sort_keys=True, default=str).encode())
        skip = tuple(f"{name}." for name, m in model.named_modules() if isinstance(m, ExportedTransformer))
    update_with_state(digest, model, "", skip)
    return digest.hexdigest()


def scorer_fingerprint(scorer: Any) -> str | None:
    """A hash of the weights behind a scorer (each member's, for an ensemble); None when it cannot be computed. What
    Ray scoring's actors report by default (:class:`finesim.evaluation.ray_scoring.RayScorer`)."""
    members = getattr(scorer, "members", None) or [scorer]
    try:
        parts = [model_fingerprint(member.model) for member in members]
    except Exception:  # a model type the fingerprint does not know: no check rather than no scoring
        return None
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()

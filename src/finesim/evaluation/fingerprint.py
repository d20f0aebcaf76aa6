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
SHA-256 per component, ``tokenizer`` (the tokenizer files of each module that tokenizes, found in the folder it was
loaded from: ``tokenizer.json``, ``tokenizer_config.json``, vocabularies, merges, special tokens, sentencepiece
models; and sentence-transformers' ``do_lower_case``), ``tokenizer_loaded`` (the tokenizer as loaded, compared only
where one side's folder was not found: a model loaded by a relative name from another working folder, or built in
memory) and ``prompts`` (sentence-transformers' non-empty prompts and ``default_prompt_name``). It is kept apart
from the weights fingerprint, whose value indexes already on disk record: an index built now records both (its
manifest's ``model.inputs_sha256``), an older one only the weights', and each is checked when recorded
(:func:`inputs_differences`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
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


# the files a tokenizer reads from its folder (transformers' names for fast and slow tokenizers: WordPiece, BPE,
# sentencepiece), hashed when present; any other ``*.model`` / ``*.spm`` file is a sentencepiece model too
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
)
SENTENCEPIECE_PATTERNS = ("*.model", "*.spm")
# the components of model_inputs_fingerprint, in the order messages name them: the tokenizer files (when every
# tokenizing module's folder is found), the tokenizer as loaded (always; compared only where either side has no
# files), the prompts
INPUT_PARTS = ("tokenizer", "tokenizer_loaded", "prompts")


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _tokenizer_folder(tokenizer: Any) -> Path | None:
    """The folder ``tokenizer`` was loaded from: its ``name_or_path`` when that is a folder, else (a Hub id) the
    local snapshot of that id; None when neither is found (a tokenizer built in memory, or loaded by a relative
    name from another working folder)."""
    name = getattr(tokenizer, "name_or_path", None)
    if not name:
        return None
    if Path(str(name)).is_dir():
        return Path(str(name))
    from finesim.models.hub import _cached_snapshot

    return _cached_snapshot(str(name))


def tokenizer_files(tokenizer: Any) -> dict[str, str] | None:
    """The SHA-256 of each tokenizer file (:data:`TOKENIZER_FILES`, sentencepiece models) in the folder
    ``tokenizer`` was loaded from, by name (the same files in another folder give the same record); None when the
    folder is not found or holds none."""
    folder = _tokenizer_folder(tokenizer)
    if folder is None:
        return None
    names = [*TOKENIZER_FILES, *(p.name for pattern in SENTENCEPIECE_PATTERNS for p in folder.glob(pattern))]
    files = {name: _file_sha256(folder / name) for name in sorted(set(names)) if (folder / name).is_file()}
    return files or None


def tokenizer_state(tokenizer: Any) -> str:
    """A SHA-256 of ``tokenizer`` as loaded: its serialised ``tokenizers`` state (vocabulary, normaliser,
    pre-tokeniser, post-processor, added tokens), or for a tokenizer without one its vocabulary, with its class
    name."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    state = str(backend.to_str()) if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)
    return hashlib.sha256(f"{type(tokenizer).__name__}\n{state}".encode()).hexdigest()


def _sentence_model(model: Any) -> Any:
    """The sentence-transformers model behind ``model`` (a CASE model's encoder's), else ``model`` itself."""
    from sentence_transformers import SentenceTransformer

    from finesim.evaluation.scoring import CASE_ENCODER, scorer_encoder

    if not isinstance(model, SentenceTransformer) and scorer_encoder(model) == CASE_ENCODER:
        return model.encoder.model
    return model


def model_inputs(model: Any) -> dict[str, Any]:
    """What ``model`` (a ``SentenceTransformer``, a CASE model, or any model with a ``tokenizer``) reads besides its
    weights, by component (:data:`INPUT_PARTS`), for each tokenizing module (with sentence-transformers'
    ``do_lower_case`` when it is on): ``tokenizer``, its :func:`tokenizer_files` (left out when a module's folder
    is not found), ``tokenizer_loaded``, its :func:`tokenizer_state`; and ``prompts``, the non-empty
    sentence-transformers prompts and the default prompt's name (when its prompt is non-empty)."""
    target = _sentence_model(model)
    try:
        modules = list(target)
    except TypeError:
        modules = [target]
    files: list[dict[str, Any]] | None = []
    loaded = []
    for position, module in enumerate(modules):
        tokenizer = getattr(module, "tokenizer", None)
        if tokenizer is None:
            continue
        entry: dict[str, Any] = {"module": position}
        if getattr(module, "do_lower_case", False) is True:  # sentence-transformers lowercases before tokenising
            entry["do_lower_case"] = True
        found = tokenizer_files(tokenizer)
        if files is not None:
            files = None if found is None else [*files, {**entry, "files": found}]
        loaded.append({**entry, "state": tokenizer_state(tokenizer)})
    prompts = {str(k): str(v) for k, v in (getattr(target, "prompts", None) or {}).items() if v}
    default = getattr(target, "default_prompt_name", None)
    out: dict[str, Any] = {"tokenizer": files} if files is not None else {}
    out["tokenizer_loaded"] = loaded
    out["prompts"] = {"prompts": prompts, "default_prompt_name": default if default in prompts else None}
    return out


def model_inputs_fingerprint(model: Any) -> dict[str, str]:
    """One SHA-256 hex digest per component of :func:`model_inputs` (``tokenizer`` when its files are found,
    ``tokenizer_loaded``, ``prompts``): what an index records as its model's ``inputs_sha256`` beside the weights
    fingerprint, and checks when recorded (:func:`inputs_differences`)."""
    return {
        part: hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
        for part, value in model_inputs(model).items()
    }


def inputs_differences(recorded: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> list[str]:
    """The components whose digest ``recorded`` (an ``inputs_sha256`` record) and ``now`` give otherwise, in
    :data:`INPUT_PARTS` order; none when either is None (an index built before finesim recorded them: not
    checked). Only components both have are compared (one recorded by a newer finesim is not), and the tokenizer
    by its files where both have them, else as loaded (``tokenizer_loaded``: a tokenizer whose folder was not
    found on one side), so that a library upgrade that serialises the same files otherwise changes nothing."""
    if not recorded or not now:
        return []
    known = [p for p in INPUT_PARTS if p in recorded] + sorted(set(recorded) - set(INPUT_PARTS))
    both = [part for part in known if part in now]
    if "tokenizer" in both and "tokenizer_loaded" in both:
        both.remove("tokenizer_loaded")
    return [part for part in both if recorded[part] != now[part]]


def describe_inputs_differences(parts: list[str]) -> str:
    """``parts`` (from :func:`inputs_differences`) in words, for an error message."""
    words = {
        "tokenizer": "tokenizer (tokenizer.json, tokenizer_config.json, vocabulary, ... or do_lower_case)",
        "tokenizer_loaded": "tokenizer (as loaded: vocabulary, normaliser, special tokens, ... or do_lower_case)",
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

"""Condition-aware encoding with a frozen sentence encoder (CASE step 1).

For each (sentence, condition) the encoder embeds the conditional text of the chosen formulation (see
:mod:`finesim.case.prompts`); with ``subtract_condition`` the unconditional embedding of the condition,
f(c; I(∅)), is subtracted ("minus condition", the paper's "− c"):

    x(s, c) = f(conditional text) - f(c; I(∅))        (or just f(conditional text) without "− c")

Pooling is the encoder's own (its ``Pooling`` module: mean, lasttoken, cls, ...), applied to the whole
input string, instruction included.

Normalisation (``normalize_before_subtract``): f(·) is the encoder's pooled output *without* a final
``Normalize`` module, so by default the vectors are subtracted un-normalised, as the reference code does (it
never L2-normalises). A sentence-transformers pipeline that ends in ``Normalize`` (all-MiniLM-L6-v2,
Qwen3-Embedding) has that module skipped. ``normalize_before_subtract=True`` L2-normalises both vectors first
(what such a pipeline would give if used as it comes), and, without "− c", the conditional vector itself. The
cache always stores the un-normalised vectors, so both settings share it.

Every distinct input string is encoded at most once per run, and never again across runs when a cache
folder is given.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from finesim.case.cache import EmbeddingCache
from finesim.case.prompts import PromptFormat
from finesim.models.encode import encode_distinct, rows
from finesim.models.pooling import model_pooling
from finesim.models.weights import weights_sha256

logger = logging.getLogger("finesim.case")

DEFAULT_FAMILY_FOR = {"cond": "case-instruct", "sent": "case-instruct", "conc_sc": "mlm", "conc_cs": "mlm"}


def describe_model(model: Any, name: str | None = None) -> dict[str, Any]:
    """What identifies an encoder for caching: name or path (an alias such as ``minilm`` as the name it stands for,
    as the command line names it: one namespace per model), pooling, maximum length, modules, width."""
    from finesim.models.hub import ALIASES

    if name is not None:
        name = ALIASES.get(name, name)
    if name is None:
        try:
            name = model[0].auto_model.config._name_or_path
        except (TypeError, AttributeError, IndexError, KeyError):
            name = type(model).__name__
    try:
        modules = [type(m).__name__ for m in model]
    except TypeError:
        modules = [type(model).__name__]
    dim_fn = getattr(model, "get_embedding_dimension", None) or getattr(model, "get_sentence_embedding_dimension", None)
    return {
        "model": str(name),
        "pooling": model_pooling(model),
        "max_seq_length": getattr(model, "max_seq_length", None),
        "modules": modules,
        "dimension": dim_fn() if dim_fn else None,
    }


def without_final_normalize(model: Any) -> tuple[Any, bool]:
    """``model`` without a final ``Normalize`` module, and whether one was dropped.

    The returned pipeline shares the model's modules (nothing is copied) and keeps its prompts; a model that is
    not a module sequence, or does not end in ``Normalize``, is returned unchanged.
    """
    try:
        modules = list(model)
    except TypeError:
        return model, False
    if not modules or type(modules[-1]).__name__ != "Normalize":
        return model, False
    from sentence_transformers import SentenceTransformer

    pipeline = SentenceTransformer(
        modules=modules[:-1],
        device=str(model.device),
        prompts=getattr(model, "prompts", None),
        default_prompt_name=getattr(model, "default_prompt_name", None),
    )
    return pipeline, True


class ConditionAwareEncoder:
    """Turn (sentence, condition) pairs into condition-aware embeddings with a frozen encoder.

    Args:
        model: a ``SentenceTransformer`` (anything with ``encode(list[str], ...)`` returning a matrix).
        prompt: the :class:`PromptFormat` (model family + formulation).
        subtract_condition: apply "minus condition", subtracting f(c; I(∅)).
        normalize_before_subtract: L2-normalise each encoder output before use (and so before "− c"); the
            default False subtracts un-normalised vectors, as the reference does (see the module docstring).
        cache_dir: an on-disk :class:`EmbeddingCache` root; None keeps embeddings in memory for this object
        only. model_name: the name recorded in the cache key (default: the checkpoint path the model was
        loaded from). batch_size: encoding batch size.
        show_progress: progress bar while encoding.

    Attributes:
        encoded: how many strings this object has passed to the model (0 on a full cache hit).
    """

    def __init__(
        self,
        model: Any,
        prompt: PromptFormat,
        *,
        subtract_condition: bool = True,
        normalize_before_subtract: bool = False,
        cache_dir: str | Path | None = None,
        model_name: str | None = None,
        batch_size: int = 64,
        show_progress: bool = False,
    ) -> None:
        self.model = model
        self.prompt = prompt
        self.subtract_condition = subtract_condition
        self.normalize_before_subtract = bool(normalize_before_subtract)
        self.batch_size = batch_size
        self.show_progress = show_progress
        # The cache holds un-normalised vectors: encode with the pipeline minus a final Normalize.
        self.pipeline, dropped = without_final_normalize(model)
        self.description = describe_model(self.pipeline, model_name)
        self.description["final_normalize_skipped"] = dropped
        # the weights themselves: a folder whose model was replaced under the same name gets another cache namespace
        # (its cached vectors were served as the new model's), and a saved CASE model checks its encoder by them
        stateful = hasattr(self.pipeline, "state_dict")  # a torch model (a test's stand-in has no weights)
        self.description["weights_sha256"] = weights_sha256(self.pipeline) if stateful else None
        self.cache = EmbeddingCache(cache_dir, self.description) if cache_dir is not None else None
        self._memory: dict[str, np.ndarray] = {}
        self.encoded = 0

    def _encode_now(self, texts: list[str]) -> np.ndarray:
        """Embeddings of ``texts`` (one row each), each distinct text encoded once."""
        embeddings, position = encode_distinct(
            self.pipeline, texts, batch_size=self.batch_size, show_progress=self.show_progress
        )
        self.encoded += len(position)
        return rows(embeddings, position, texts).numpy()

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Un-normalised embeddings of encoder input strings, each distinct string encoded once (and never
        again when cached)."""
        texts = list(texts)
        if self.cache is not None:
            return self.cache.get_or_encode(texts, self._encode_now)
        missing = [t for t in texts if t not in self._memory]
        if missing:
            self._memory.update(zip(missing, self._encode_now(missing)))
        return np.stack([self._memory[t] for t in texts]) if texts else np.zeros((0, 0), np.float32)

    def forget(self) -> None:
        """Drop the embeddings kept in memory (without an on-disk cache every text encoded so far is kept): a
        long-running caller with a bounded cache of its own (the server) calls it after each batch."""
        self._memory.clear()

    def conditional_texts(self, sentences: Sequence[str], conditions: Sequence[str]) -> list[str]:
        """The encoder inputs of the conditional embeddings."""
        return [self.prompt.conditional(s, c) for s, c in zip(sentences, conditions)]

    def _finish(self, x: np.ndarray) -> np.ndarray:
        if not (self.normalize_before_subtract and x.size):
            return x
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)  # rows to unit length; zero stays zero

    def embed_parts(self, sentences: Sequence[str], conditions: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The conditional embeddings and the unconditional condition embeddings f(c; I(∅)), row-aligned
        (each L2-normalised when ``normalize_before_subtract`` is set)."""
        if len(sentences) != len(conditions):
            raise ValueError(f"{len(sentences)} sentences but {len(conditions)} conditions")
        conditional_inputs = self.conditional_texts(sentences, conditions)
        unconditional_inputs = [self.prompt.unconditional(c) for c in conditions]
        both = self._finish(self.encode_texts(conditional_inputs + unconditional_inputs))
        n = len(sentences)
        return both[:n], both[n:]

    def embed(self, sentences: Sequence[str], conditions: Sequence[str]) -> np.ndarray:
        """Condition-aware embeddings: conditional minus unconditional when ``subtract_condition`` is set."""
        if len(sentences) != len(conditions):
            raise ValueError(f"{len(sentences)} sentences but {len(conditions)} conditions")
        if not self.subtract_condition:
            return self._finish(self.encode_texts(self.conditional_texts(sentences, conditions)))
        conditional, unconditional = self.embed_parts(sentences, conditions)
        return conditional - unconditional

    def config(self) -> dict[str, Any]:
        """A JSON-able description (model, prompt, "− c") for results files and saved models."""
        return {
            "encoder": self.description,
            "prompt": self.prompt.as_dict(),
            "subtract_condition": self.subtract_condition,
            "normalize_before_subtract": self.normalize_before_subtract,
        }

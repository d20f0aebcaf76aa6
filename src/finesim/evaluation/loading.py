"""Load any model finesim can score, by the marker of its folder.

:func:`load_scorer` (also ``finesim.load_scorer``; what ``finesim score`` and ``finesim serve`` use) always gives a
:class:`~finesim.evaluation.api.Scorer` (``score(sentences1, sentences2, conditions)``, ``similarity(...)``, ...):

- a folder whose ``finesim_model.json`` names the encoder ``bi``, ``cross`` or ``tri`` gives a
  :class:`~finesim.evaluation.scoring.ConditionalScorer`;
- a folder whose marker names ``case`` gives a :class:`~finesim.evaluation.scoring.ConditionalScorer` over the CASE
  model;
- a folder whose marker names ``ensemble`` gives an :class:`~finesim.evaluation.ensemble.EnsembleScorer` of its
  members;
- a Hub id, a sentence-transformers folder or a plain transformers checkpoint gives a bi-encoder
  ``ConditionalScorer`` (the cosine of the two texts, each paired with the condition when there is one).

:func:`load_model_or_scorer` is the same except that a plain model comes back as the ``SentenceTransformer`` itself:
what ``finesim evaluate`` uses, since its harness scores a plain model per task (condition paired or ignored).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from finesim.evaluation.api import Scorer
from finesim.evaluation.ensemble import ENSEMBLE, load_ensemble
from finesim.evaluation.scoring import CASE_ENCODER, ConditionalScorer, load_model_object
from finesim.models.hub import resolve_model_path
from finesim.models.io import check_declared_encoder, load_sentence_model, read_marker, undeclared_encoder

logger = logging.getLogger("finesim.evaluation")


def _kept_name(name: str | Path, max_length: int | None, pooling: str | None) -> str | Path | None:
    """The name a scorer keeps (an index built from it records it): None when a setting changed what the name loads
    (``max_length``, ``pooling``: reopening the index by the name would find another model)."""
    return name if max_length is None and pooling is None else None


def load_model_or_scorer(
    name: str | Path,
    *,
    encoder: str | None = None,
    device: str | None = None,
    max_length: int | None = None,
    pooling: str | None = None,
    batch_size: int = 64,
) -> Any:
    """The scorer for ``name``, or the ``SentenceTransformer`` of a plain model (see the module docstring);
    ``encoder`` forces a conditional scorer of that type.

    Args:
        name: Hub id, alias (``minilm``), or a folder.
        encoder: ``bi``, ``cross``, ``tri`` or ``case``; None decides by the folder's marker.
        device: torch device.
        max_length: truncate inputs to this many tokens (not for CASE models, whose length is fixed when saved).
        pooling: replace a plain model's pooling mode; a trained finesim model keeps its own (warned and ignored).
        batch_size: the conditional scorer's batch size.
    """
    path = resolve_model_path(name)
    source = _kept_name(name, max_length, pooling)
    marker = read_marker(path) if Path(path).is_dir() else None
    if marker is None and encoder is None and Path(path).is_dir():
        encoder = undeclared_encoder(path)  # a tri-encoder's training checkpoint: its modules name the condition head
    if marker is None and encoder is None:
        check_declared_encoder(Path(path), None, "bi")  # a cross-encoder folder is not a sentence model
        return load_sentence_model(path, device=device, max_length=max_length, pooling=pooling)
    marked = marker["encoder"] if marker else None  # checked by read_marker
    if marked == ENSEMBLE and marker is not None:
        if encoder is not None or max_length is not None or pooling is not None:
            raise ValueError(f"{name}: an ensemble takes its members as saved (no encoder, max_length or pooling)")
        return load_ensemble(path, marker, device=device, batch_size=batch_size)
    if marked == CASE_ENCODER or encoder == CASE_ENCODER:
        for fixed, value in (("pooling", pooling), ("max_length", max_length)):
            if value is not None:
                raise ValueError(f"{name}: {fixed} is fixed by the saved CASE model and cannot be overridden")
    elif pooling is not None and marker is None and encoder == "bi":  # a plain model scored as a bi-encoder
        check_declared_encoder(Path(path), None, "bi")
        plain = load_sentence_model(path, device=device, max_length=max_length, pooling=pooling)
        return ConditionalScorer(plain, encoder="bi", batch_size=batch_size, name=source)
    elif pooling is not None and marker is None:
        raise ValueError(f"{name}: pooling replaces a plain sentence model's pooling; a {encoder} model has none")
    elif pooling is not None:
        logger.warning("pooling=%r ignored: %s is a finesim model and keeps its trained pooling", pooling, name)
    model = load_model_object(path, encoder=encoder, device=device)
    if max_length is not None:
        model.max_seq_length = max_length
    return ConditionalScorer(model, encoder=encoder, batch_size=batch_size, name=source)


def load_scorer(
    name: str | Path,
    *,
    encoder: str | None = None,
    device: str | None = None,
    max_length: int | None = None,
    pooling: str | None = None,
    batch_size: int = 64,
) -> Scorer:
    """A scorer for any model (see the module docstring): a plain model is scored as a bi-encoder.

    The result satisfies :class:`~finesim.evaluation.api.Scorer` (``finesim.Scorer``): ``score``, ``similarity``,
    ``encoder``, ``embeds``, ... and works with :func:`finesim.similarity_matrix` and :func:`finesim.rank`.

    Args:
        name: Hub id, alias (``minilm``), or a folder.
        encoder: ``bi``, ``cross``, ``tri`` or ``case``; None decides by the folder's marker (``bi`` without one).
        device: torch device.
        max_length: truncate inputs to this many tokens (not for CASE models, whose length is fixed when saved).
        pooling: replace a plain model's pooling mode; a trained finesim model keeps its own (warned and ignored).
        batch_size: the scorer's encoding batch size.
    """
    scorer = load_model_or_scorer(
        name, encoder=encoder, device=device, max_length=max_length, pooling=pooling, batch_size=batch_size
    )
    if hasattr(scorer, "score"):
        return scorer
    return ConditionalScorer(scorer, encoder="bi", batch_size=batch_size, name=_kept_name(name, max_length, pooling))


def describe_scorer(scorer: Any) -> str:
    """What scores, in a few words: the model type and the runtime (``bi-encoder, torch on cpu``, ``tri-encoder,
    onnx int8 on cpu``, ``ensemble of 2 models``)."""
    from finesim.models.card import ENCODER_NAMES

    encoder = getattr(scorer, "encoder", None)
    members = getattr(scorer, "members", None)
    if members is not None:
        return f"ensemble of {len(members)} models"
    kind = ENCODER_NAMES.get(str(encoder), str(encoder or type(scorer).__name__))
    model = getattr(scorer, "model", None)
    runtime = getattr(model, "finesim_runtime", None) or {"format": "torch", "quantize": "none"}
    quantize = runtime.get("quantize", "none")
    where = runtime.get("format", "torch") + ("" if quantize in (None, "none") else f" {quantize}")
    device = getattr(model, "device", None)
    if device is None and encoder == "case":  # a CASE model's encoder runs its sentence-transformers pipeline
        device = getattr(getattr(getattr(model, "encoder", None), "pipeline", None), "device", None)
    if device is not None:
        where += f" on {device}"
    return f"{kind}, {where}"

"""What an index needs from a model, for each encoder type it can index.

- ``tri``: :meth:`IndexEncoder.stage` gives the condition-independent stored vectors of corpus texts
  (:mod:`finesim.index.tri`); :meth:`IndexEncoder.tri_query` prepares a (query, condition).
- ``bi``: the corpus embedding depends on the condition: ``encode((text, condition))``, as
  :class:`~finesim.evaluation.scoring.ConditionalScorer` encodes a bi-encoder's inputs (a text pair).
- ``case``: :meth:`CaseModel.embed` of (text, condition).

Bi and CASE vectors are L2-normalised, so a dot product is the cosine the scorer gives. A cross-encoder reads each
pair jointly and so cannot index a corpus (it can re-rank the results of an index).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from finesim.models.encode import encode_distinct, rows
from finesim.models.lock import ModelLock

INDEXABLE = ("bi", "tri", "case")


def check_indexable(encoder: str) -> str:
    """``encoder`` (an encoder type) when an index can be built for it; a clear error otherwise."""
    if encoder == "cross":
        raise ValueError(
            "a cross-encoder reads each (sentence, sentence, condition) jointly, so it has no corpus embeddings to "
            "index; index with a bi-, tri-encoder or CASE model and re-rank the top-k with the cross-encoder"
        )
    if encoder not in INDEXABLE:
        raise ValueError(f"cannot index encoder type {encoder!r}; choose one of {list(INDEXABLE)}")
    return encoder


def l2_rows(x: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit length (zero rows stay zero)."""
    return torch.nn.functional.normalize(x.float(), dim=-1)


class IndexEncoder:
    """Embed corpus texts and queries for an index.

    Args:
        model: the loaded model (``SentenceTransformer`` or :class:`~finesim.case.model.CaseModel`).
        encoder: the encoder type, ``bi``, ``tri`` or ``case`` (:func:`check_indexable`).
        batch_size: encoding batch size.
        lock: what each model call holds (a context manager; default: a :class:`~finesim.models.lock.ModelLock` of
            this object's own, granted in the order asked). Give the lock of every other user of ``model`` so that
            the model and its tokenizer serve one call at a time.

    Attributes:
        encoded: how many texts (corpus rows and queries) this object has embedded (every thread's;
            :meth:`encoded_by_this_thread` counts the calling thread's alone).
    """

    def __init__(self, model: Any, encoder: str, *, batch_size: int = 64, lock: Any = None) -> None:
        self.model = model
        self.encoder = check_indexable(encoder)
        self.batch_size = batch_size
        self.encoded = 0
        self._local = threading.local()  # this thread's count (a server's worker, beside a map fit's thread)
        self.head = None
        # one model call at a time, in the order asked (a background map fit's batches and a search's calls take
        # turns): searches may come from several threads, and a CASE encoder's in-memory store is cleared after each
        # corpus chunk; ``lock`` shares the lock with another user of the same model (a server's scoring worker)
        self._lock = lock if lock is not None else ModelLock()
        if encoder == "tri":
            from finesim.models.condition_head import find_condition_head

            self.head = find_condition_head(model)
            if self.head is None:
                raise ValueError("a tri-encoder index needs a model with a ConditionHead")

    def _counted(self, count: int) -> None:
        self.encoded += count
        self._local.encoded = getattr(self._local, "encoded", 0) + count

    def encoded_by_this_thread(self) -> int:
        """How many texts this object has embedded for calls made from the calling thread."""
        return int(getattr(self._local, "encoded", 0))

    # -------------------------------------------------------- descriptions

    @property
    def dim(self) -> int:
        """The width of the stored vectors."""
        if self.head is not None:  # a tri-encoder's
            return int(self.head.dimension)
        probe = self.conditioned(["a"], "a")
        self.encoded -= 1
        return int(probe.shape[1])

    def describe(self) -> dict[str, Any]:
        """What the manifest records about the encoder."""
        out: dict[str, Any] = {"type": self.encoder}
        if self.head is not None:  # a tri-encoder's
            from finesim.index.tri import STAGE_DESCRIPTION

            out["head"] = {
                "kind": self.head.kind,
                "transform": bool(self.head.transform),
                "rank": self.head.rank,
                "stored": STAGE_DESCRIPTION[self.head.kind],
            }
        return out

    # -------------------------------------------------------- tri-encoder

    def _pooled(self, texts: Sequence[str]) -> torch.Tensor:
        """Pooled embeddings (the head passes them through when no condition is given), each distinct text once."""
        with self._lock:
            was_training = self.model.training
            self.model.eval()
            try:
                embeddings, position = encode_distinct(self.model, list(texts), batch_size=self.batch_size)
            finally:
                self.model.train(was_training)
            self._counted(len(position))
        return rows(embeddings, position, list(texts))

    def stage(self, texts: Sequence[str]) -> np.ndarray:
        """Tri-encoder: the stored, condition-independent vectors of ``texts`` (float32, one row each)."""
        from finesim.index.tri import sentence_stage

        if self.encoder != "tri":
            raise ValueError(f"stage vectors exist for tri-encoders only, not {self.encoder}")
        return sentence_stage(self.head, self._pooled(texts)).numpy()

    def tri_query(self, query: str, condition: str) -> Any:
        """Tri-encoder: a :class:`~finesim.index.tri.TriQuery` for (query, condition)."""
        from finesim.index.tri import TriQuery

        pooled = self._pooled([query, condition])
        return TriQuery(self.head, pooled[0], pooled[1])

    # -------------------------------------------------------- bi-encoder and CASE

    def _bi(self, items: list[Any]) -> np.ndarray:
        """A bi-encoder's L2-normalised embeddings of ``items`` (texts or (text, condition) pairs), each distinct
        item once."""
        with self._lock:
            embeddings, position = encode_distinct(self.model, items, batch_size=self.batch_size)
            self._counted(len(position))
        return l2_rows(rows(embeddings, position, items)).numpy()

    def plain(self, texts: Sequence[str]) -> np.ndarray:
        """Bi-encoder: L2-normalised embeddings of ``texts`` alone, without a condition (a two-stage search's first
        stage, :mod:`finesim.index.two_stage`)."""
        if self.encoder != "bi":
            raise ValueError(f"a {self.encoder} model has no embedding of a text alone; only a bi-encoder has")
        return self._bi(list(texts))

    def conditioned(self, texts: Sequence[str], condition: str) -> np.ndarray:
        """Bi-encoder / CASE: L2-normalised embeddings of ``texts`` under ``condition`` (float32, one row each)."""
        if self.encoder == "tri":
            raise ValueError("a tri-encoder's corpus vectors do not depend on the condition: use stage()")
        texts = list(texts)
        if self.encoder == "bi":
            return self._bi([(t, condition) for t in texts])
        with self._lock:
            encoder = self.model.encoder
            before = encoder.encoded
            x = self.model.embed(texts, [condition] * len(texts))
            self._counted(len(texts))
            # the CASE encoder keeps every embedding it made in memory: a corpus would fill it
            forget = getattr(encoder, "forget", None)
            if forget is not None and encoder.encoded != before:
                forget()
        return l2_rows(torch.as_tensor(np.asarray(x, dtype=np.float32))).numpy()


class LoadedModel(NamedTuple):
    """A model loaded for an index: the object, its encoder type, the name as given and the resolved path."""

    model: Any
    encoder: str
    name: str | None
    resolved: str | None


def load_index_model(model: Any, encoder: str | None = None, device: str | None = None) -> LoadedModel:
    """Load ``model`` for an index: a loaded model is used as it is, a name (a folder, Hub id or alias) is loaded
    like :class:`~finesim.evaluation.scoring.ConditionalScorer` loads it; a :class:`LoadedModel` passes through."""
    from finesim.evaluation.ensemble import EnsembleScorer
    from finesim.evaluation.scoring import ConditionalScorer, load_model_object, scorer_encoder

    if isinstance(model, LoadedModel):
        return model
    if isinstance(model, EnsembleScorer):
        raise ValueError(
            "an ensemble scores with several models, so it cannot index a corpus (no one embedding per text); index "
            "with one of its members and re-rank with the ensemble"
        )
    name = resolved = None
    if isinstance(model, ConditionalScorer):  # what load_scorer returns: the model it wraps, as its type
        if encoder is not None and encoder != model.encoder:
            raise ValueError(f"encoder {encoder!r} given for a {model.encoder} scorer; leave encoder out")
        name, resolved = model.name, model.location  # where its model came from, as it was loaded: recorded
        encoder, model = model.encoder, model.model
    if isinstance(model, (str, Path)):
        from finesim.models.hub import model_location

        name, resolved = str(model), model_location(model)
        model = load_model_object(name, encoder=encoder, device=device)
    return LoadedModel(model, check_indexable(scorer_encoder(model, encoder)), name, resolved)

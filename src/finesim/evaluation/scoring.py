"""Pair scorers: the one interface the evaluation harness, ``finesim score`` and the server need from any model.

A scorer maps (sentence1, sentence2[, condition]) batches to similarity scores (:class:`PairScorer`). Embedding
models are wrapped by :class:`EmbeddingScorer`; :class:`ConditionalScorer` scores with a C-STS bi-, cross- or
tri-encoder or a CASE model. Every scorer encodes each distinct input of a batch once
(:func:`finesim.models.encode.encode_distinct`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import torch

from finesim.evaluation.inputs import ScorerBase
from finesim.models.encode import encode_distinct, rows

ConditionMode = Literal["pair", "ignore"]
Similarity = Literal["cosine", "dot", "euclidean", "manhattan"]


@runtime_checkable
class PairScorer(Protocol):
    """Anything that scores sentence pairs, optionally under a condition.

    Capability flags a scorer may declare (read with ``getattr`` and a default, so a minimal scorer needs none):

    - ``prediction_range = (low, high)``: the range of its scores that corresponds to labels on [0, 1] (cosine
      scorers: ``(0, 1)``), which analyses comparing scores with labels need (the over-estimation count); without
      it they are skipped unless the caller gives the range.
    - ``requires_condition = True``: it scores pairs only under a condition (a tri-encoder, a CASE model); tasks without
      conditions are skipped.
    """

    def score(
        self,
        sentences1: Sequence[str],
        sentences2: Sequence[str],
        conditions: Sequence[str] | None = None,
    ) -> np.ndarray:
        """Return one similarity score per pair (higher = more similar)."""
        ...


def pairwise_similarity(a: torch.Tensor, b: torch.Tensor, similarity: Similarity = "cosine") -> torch.Tensor:
    """Row-wise similarity of two equally shaped embedding matrices."""
    if similarity == "cosine":
        return torch.nn.functional.cosine_similarity(a, b, dim=-1)
    if similarity == "dot":
        return (a * b).sum(-1)
    if similarity == "euclidean":
        return -torch.linalg.vector_norm(a - b, dim=-1)
    if similarity == "manhattan":
        return -(a - b).abs().sum(-1)
    raise ValueError(f"unknown similarity {similarity!r}")


class EmbeddingScorer(ScorerBase):
    """Score pairs with a sentence-embedding model, encoding each distinct input once.

    Args:
        model: a ``SentenceTransformer`` (anything with a compatible ``encode``).
        condition_mode: with conditions, ``"pair"`` encodes ``(sentence, condition)`` as a text pair
            (``[CLS] s [SEP] c [SEP]``, the C-STS bi-encoder, zero-shot or trained); ``"ignore"`` encodes the
            sentence alone (the condition-ignored reference point).
        similarity: the similarity function; cosine by default.
        batch_size: encoding batch size (the model sorts inputs by length within a call).
        show_progress: show a progress bar while encoding.
    """

    def __init__(
        self,
        model: Any,
        *,
        condition_mode: ConditionMode = "pair",
        similarity: Similarity = "cosine",
        batch_size: int = 64,
        show_progress: bool = False,
    ) -> None:
        if condition_mode not in ("pair", "ignore"):
            raise ValueError(f"condition_mode must be 'pair' or 'ignore', got {condition_mode!r}")
        self.model = model
        self.condition_mode = condition_mode
        # not self.similarity: that would hide ScorerBase.similarity, the batch scoring method
        self.similarity_fn_name = similarity
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.last_encoded = 0

    @property
    def prediction_range(self) -> tuple[float, float] | None:
        """Cosine scores are compared with labels on [0, 1] as they are; other similarities have no known scale."""
        return (0.0, 1.0) if self.similarity_fn_name == "cosine" else None

    def _score(self, sentences1: list[str], sentences2: list[str], conditions: list[str] | None) -> np.ndarray:
        # what the model encodes for each sentence: the sentence, or the text pair (sentence, condition)
        left: list[Any] = sentences1
        right: list[Any] = sentences2
        if conditions is not None and self.condition_mode == "pair":
            left, right = list(zip(sentences1, conditions)), list(zip(sentences2, conditions))
        embeddings, position = encode_distinct(
            self.model, left + right, batch_size=self.batch_size, show_progress=self.show_progress
        )
        self.last_encoded = len(position)
        a, b = rows(embeddings, position, left), rows(embeddings, position, right)
        return pairwise_similarity(a, b, self.similarity_fn_name).numpy()


class ConditionalScorer(ScorerBase):
    """Score (sentence1, sentence2, condition) triples with any bi-, cross- or tri-encoder.

    Implements :class:`PairScorer`, so ``finesim evaluate`` and the harness can use it.

    Args:
        model: a loaded model (``SentenceTransformer``, ``CrossEncoder`` or
            :class:`~finesim.case.model.CaseModel`), or a name: a folder saved by finesim, a sentence-transformers
            folder or a Hub id (resolved offline like the command line; a model without finesim's marker is a
            bi-encoder unless ``encoder`` says otherwise).
        encoder: ``bi``, ``cross``, ``tri`` or ``case``; inferred from the model (or its marker) when None.
        batch_size: inference batch size.
        show_progress: progress bars while encoding.
        device: torch device when ``model`` is a name.
        name: where a loaded ``model`` came from (its folder, Hub id or alias), kept as :attr:`name` with
            :attr:`location` (the absolute folder or Hub id it resolved to as the scorer was made); a name given as
            ``model`` is kept by itself. An index built from the scorer records both.
    """

    def __init__(
        self,
        model: Any,
        *,
        encoder: str | None = None,
        batch_size: int = 64,
        show_progress: bool = False,
        device: str | None = None,
        name: str | Path | None = None,
    ) -> None:
        if isinstance(model, (str, Path)):
            name = model
            model = load_model_object(str(model), encoder=encoder, device=device)
        self.name = None if name is None else str(name)  # recorded by an index built from this scorer
        self.location: str | None = None
        if name is not None:
            from finesim.models.hub import model_location

            try:
                self.location = model_location(name)
            except OSError:  # a name that no longer resolves (a folder moved since it was loaded): none recorded
                self.location = None
        self.model = model
        self.encoder = scorer_encoder(model, encoder)
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.last_encoded = 0

    @property
    def prediction_range(self) -> tuple[float, float] | None:
        """Bi- and tri-encoders and CASE score by cosine, comparable with labels on [0, 1] as it is; a
        cross-encoder's regression output is on whatever scale it was trained on (unknown here: None)."""
        return None if self.encoder == "cross" else (0.0, 1.0)

    # ScorerBase declares a plain attribute (an ensemble sets it per instance); here it follows self.encoder
    @property
    def requires_condition(self) -> bool:  # type: ignore[override]
        """A tri-encoder (its head combines each sentence with the condition) and a CASE model score pairs only
        under a condition; ``finesim evaluate`` skips condition-free tasks for them."""
        return self.encoder in ("tri", "case")

    @property
    def embeds(self) -> bool:
        """Whether scores are cosines of per-(sentence, condition) embeddings (bi, tri, CASE): :meth:`embed` gives
        them. A cross-encoder reads each pair jointly and has none."""
        return self.encoder != "cross"

    def _score(self, sentences1: list[str], sentences2: list[str], conds: list[str] | None) -> np.ndarray:
        """One score per triple: cosine for bi/tri encoders and CASE, the raw regression output for cross-encoders."""
        if self.encoder == "cross":
            return self.cross_scores(sentences1, sentences2, conds)
        if self.encoder == "case":
            out = self.model.score(sentences1, sentences2, conds)
            self.last_encoded = self.model.last_encoded
            return out
        n = len(sentences1)
        both = None if conds is None else [*conds, *conds]
        embeddings = self.embed([*sentences1, *sentences2], both)
        return cosine_scores(embeddings[:n], embeddings[n:])

    def embed(self, sentences: Sequence[str], conditions: Sequence[str | None] | None = None) -> torch.Tensor:
        """The embeddings whose row-wise cosine is the score: one float32 CPU row per (sentence, condition).

        - bi: the model's embedding of the text pair ``(sentence, condition)``, of the sentence alone where the
          condition is None;
        - tri: the :class:`~finesim.models.condition_head.ConditionHead`'s fusion of the sentence's and the
          condition's embeddings, each encoded alone (a condition is required);
        - case: :meth:`finesim.case.model.CaseModel.embed` (a condition is required).

        Each distinct text (or text pair) goes through the model once; ``last_encoded`` counts them. The inputs are
        not checked here (:meth:`score` checks them). A cross-encoder has no such embeddings (``ValueError``).
        """
        conds: list[str | None] = [None] * len(sentences) if conditions is None else list(conditions)
        if len(conds) != len(sentences):
            raise ValueError(f"{len(sentences)} sentences but {len(conds)} conditions")
        if not sentences:
            return torch.zeros((0, 0))
        if self.encoder == "cross":
            raise ValueError("a cross-encoder scores each pair jointly: it has no per-sentence embeddings")
        if self.encoder != "bi" and any(c is None for c in conds):
            raise ValueError(f"a {self.encoder} model needs a condition for every sentence")
        if self.encoder == "case":
            before = self.model.encoder.encoded
            out = self.model.embed(list(sentences), conds)
            self.last_encoded = self.model.encoder.encoded - before
            return torch.as_tensor(np.asarray(out, dtype=np.float32))
        if self.encoder == "bi":
            items = [s if c is None else (s, c) for s, c in zip(sentences, conds)]
            embeddings, position = encode_distinct(
                self.model, items, batch_size=self.batch_size, show_progress=self.show_progress
            )
            self.last_encoded = len(position)
            return rows(embeddings, position, items)
        return self._embed_tri(sentences, conds)  # type: ignore[arg-type]  # no None: refused just above

    def _embed_tri(self, sentences: Sequence[str], conditions: Sequence[str]) -> torch.Tensor:
        from finesim.models.condition_head import find_condition_head

        head = find_condition_head(self.model)
        assert head is not None
        was_training = self.model.training
        self.model.eval()
        try:
            emb, position = encode_distinct(
                self.model, [*sentences, *conditions], batch_size=self.batch_size, show_progress=self.show_progress
            )
            self.last_encoded = len(position)
            with torch.no_grad():
                return head.fuse(rows(emb, position, sentences), rows(emb, position, conditions)).cpu()
        finally:
            self.model.train(was_training)

    def cross_scores(
        self, sentences1: Sequence[str], sentences2: Sequence[str], conditions: Sequence[str | None] | None
    ) -> np.ndarray:
        """A cross-encoder's raw output for each ``(s1, s2 [SEP] c)`` pair (``s2`` alone where the condition is
        None); the inputs are not checked here (:meth:`score` checks them)."""
        from finesim.models.builders import cross_second_text

        second = [
            cross_second_text(self.model, s2, None if conditions is None else conditions[i])
            for i, s2 in enumerate(sentences2)
        ]
        out = self.model.predict(
            list(zip(sentences1, second)),
            batch_size=self.batch_size,
            show_progress_bar=self.show_progress,
            convert_to_numpy=True,
        )
        self.last_encoded = len(second)
        return np.asarray(out, dtype=np.float32).reshape(-1)


def cosine_scores(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """Row-wise cosine of two embedding matrices from :meth:`ConditionalScorer.embed`: the bi-, tri-encoder and
    CASE score."""
    return pairwise_similarity(a, b, "cosine").numpy()


CASE_ENCODER = "case"


def scorer_encoder(model: Any, encoder: str | None = None) -> str:
    """The encoder type a :class:`ConditionalScorer` uses for a loaded model: ``encoder`` when given (checked),
    else inferred (``case`` for a CASE model, else bi / cross / tri from the model object)."""
    from finesim.case.model import CaseModel
    from finesim.models.io import check_encoder, encoder_type_of

    if isinstance(model, CaseModel):
        if encoder not in (None, CASE_ENCODER):
            raise ValueError(f"a CASE model cannot be scored as encoder {encoder!r}")
        return CASE_ENCODER
    if encoder == CASE_ENCODER:
        raise ValueError(f"encoder 'case' needs a CASE model, got {type(model).__name__}")
    return check_encoder(encoder or encoder_type_of(model))


def load_model_object(name: str, *, encoder: str | None = None, device: str | None = None) -> Any:
    """Load a conditional model by name: a folder finesim saved by its marker (``csts-*`` or ``case``), anything else
    (a Hub id or sentence-transformers folder, resolved offline like the command line) as ``encoder`` (default
    ``bi``)."""
    from finesim.models.hub import resolve_model_path
    from finesim.models.io import load_conditional_model, plain_encoder, read_marker

    path = resolve_model_path(name)
    marker = read_marker(path) if Path(path).is_dir() else None
    if marker is not None and marker["encoder"] == CASE_ENCODER:
        from finesim.case.cache import configured_cache_dir
        from finesim.case.model import CaseModel

        return CaseModel.load(path, device=device, cache_dir=configured_cache_dir())
    if marker is not None and marker["encoder"] == "ensemble":
        raise ValueError(
            f"{name} is an ensemble of several models, not one model: load it with finesim.load_scorer({name!r})"
        )
    if encoder == CASE_ENCODER:
        raise ValueError(f"{name} is not a CASE model folder (no case marker)")
    if encoder is None and marker is None:
        encoder = plain_encoder(path)
    return load_conditional_model(path, encoder=encoder, device=device)

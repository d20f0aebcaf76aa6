"""The practitioner's Python API over any finesim scorer: the :class:`Scorer` protocol, a many-to-many
:func:`similarity_matrix` and :func:`rank` (all three public as ``finesim.Scorer``, ``finesim.similarity_matrix``,
``finesim.rank``).

What they mirror in sentence-transformers: ``SentenceTransformer.similarity(a, b)`` (an ``(n, m)`` matrix) and
``CrossEncoder.rank(query, documents, top_k=...)`` / ``util.semantic_search`` (``[{"corpus_id", "score"}, ...]``
best first). Here every score is taken under one condition (or none), and the values are exactly what
``scorer.score`` gives for the same pair, scored one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from finesim.evaluation.inputs import check_texts
from finesim.evaluation.scoring import PairScorer

ENCODER_NAMES = {
    "bi": "a bi-encoder",
    "tri": "a tri-encoder",
    "cross": "a cross-encoder",
    "case": "a CASE model",
    "ensemble": "an ensemble",
}


@runtime_checkable
class Scorer(PairScorer, Protocol):
    """What every scorer :func:`finesim.load_scorer` returns offers (a
    :class:`~finesim.evaluation.scoring.ConditionalScorer` or an
    :class:`~finesim.evaluation.ensemble.EnsembleScorer`): a :class:`~finesim.evaluation.scoring.PairScorer`
    (``score``) with ``similarity`` and these facts about itself.

    - ``encoder``: ``bi``, ``tri``, ``cross``, ``case`` or ``ensemble``.
    - ``embeds``: whether its scores are cosines of per-(sentence, condition) embeddings, which it then gives with
      ``embed(sentences, conditions)`` (bi, tri, CASE); a cross-encoder or an ensemble scores each pair jointly.
    - ``requires_condition``: it scores only under a condition (a tri-encoder, a CASE model, an ensemble with one).
    - ``prediction_range``: the range of its scores that corresponds to labels on [0, 1], or None when unknown.
    - ``last_encoded``: distinct inputs the model computed in the last call.

    ``isinstance(x, finesim.Scorer)`` checks that ``x`` has all of them (not their types).
    """

    @property
    def encoder(self) -> str:
        """The model type."""
        ...

    @property
    def embeds(self) -> bool:
        """Whether scores are cosines of embeddings that ``embed`` gives."""
        ...

    @property
    def requires_condition(self) -> bool:
        """Whether a condition is mandatory."""
        ...

    @property
    def prediction_range(self) -> tuple[float, float] | None:
        """The score range that corresponds to labels on [0, 1], or None."""
        ...

    @property
    def last_encoded(self) -> int:
        """Distinct inputs computed by the last call."""
        ...

    def similarity(
        self,
        sentences1: Sequence[str] | str,
        sentences2: Sequence[str] | str,
        condition: Sequence[str] | str | None = None,
    ) -> np.ndarray:
        """One score per pair; a single string condition applies to every pair, single sentences are allowed."""
        ...


def similarity_matrix(
    scorer: Scorer, sentences1: Sequence[str], sentences2: Sequence[str], condition: str | None = None
) -> np.ndarray:
    """The ``(len(sentences1), len(sentences2))`` float32 matrix of every pair's score under ``condition``, as
    ``SentenceTransformer.similarity`` gives for embeddings (a NumPy array, like ``scorer.score``).

    Entry ``[i, j]`` equals ``scorer.score([sentences1[i]], [sentences2[j]], [condition])[0]`` (up to float rounding
    of batched encoding, ~1e-7).

    - Bi- and tri-encoders and CASE models (``scorer.embeds``): each distinct ``(sentence, condition)`` is embedded
      **once** (``n + m`` inputs, not ``n × m`` pairs), and the matrix is the cosine of every row pair.
    - Cross-encoders and ensembles read each pair jointly: all ``n × m`` pairs are scored, pair by pair (in the
      scorer's batches), so the cost grows with the product.

    Args:
        scorer: any :class:`Scorer` (what :func:`finesim.load_scorer` returns).
        sentences1, sentences2: the rows and the columns; non-empty strings.
        condition: one condition for every pair, or None (not for a scorer that requires one).

    Raises:
        ValueError: a text is empty or not a string, ``condition`` is not one string, or the scorer needs a
            condition and none was given.
        TypeError: ``scorer`` is not a scorer.
    """
    return _matrix(scorer, sentences1, sentences2, condition, "similarity_matrix")


def _matrix(scorer: Any, sentences1: Any, sentences2: Any, condition: Any, what: str) -> np.ndarray:
    """:func:`similarity_matrix`, its errors naming ``what`` was called."""
    cond = _checked_condition(scorer, condition, what)
    rows = check_texts(sentences1, "sentences1" if what == "similarity_matrix" else "query")
    cols = check_texts(sentences2, "sentences2" if what == "similarity_matrix" else "candidates")
    if not rows or not cols:
        return np.zeros((len(rows), len(cols)), dtype=np.float32)
    if getattr(scorer, "embeds", False):
        both = rows + cols
        embeddings = scorer.embed(both, None if cond is None else [cond] * len(both))
        vectors = np.asarray(embeddings, dtype=np.float32)
        # rows scaled to length 1 (a zero row stays zero), so their dot products are cosines, as
        # finesim.evaluation.scoring.cosine_scores computes them (norms clamped at 1e-8)
        unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-8)
        return (unit[: len(rows)] @ unit[len(rows) :].T).astype(np.float32)
    left = [s for s in rows for _ in cols]
    right = cols * len(rows)
    scores = scorer.score(left, right, None if cond is None else [cond] * len(left))
    return np.asarray(scores, dtype=np.float32).reshape(len(rows), len(cols))


def rank(
    scorer: Scorer,
    query: str,
    candidates: Sequence[str],
    condition: str | None = None,
    *,
    top_k: int | None = None,
    return_documents: bool = False,
) -> list[dict[str, Any]]:
    """``candidates`` ordered by their score with ``query`` under ``condition``, best first, as
    ``CrossEncoder.rank`` returns them: ``[{"corpus_id": i, "score": s}, ...]`` where ``i`` is the position in
    ``candidates`` (equal scores keep the candidates' order), with ``"text"`` added when ``return_documents``.

    The scores are :func:`similarity_matrix`'s one row: the query and the candidates embedded once each for bi- and
    tri-encoders and CASE models, each (query, candidate) pair scored for cross-encoders and ensembles.

    Args:
        scorer: any :class:`Scorer`.
        query: a non-empty string.
        candidates: the texts to rank.
        condition: one condition for every pair, or None (not for a scorer that requires one).
        top_k: keep the best ``top_k`` (a whole number >= 1; more than the candidates keeps them all); None: all.
        return_documents: add each candidate's ``text``.

    Raises:
        ValueError: ``query`` is not one non-empty string, ``top_k`` is not a whole number >= 1, or as
            :func:`similarity_matrix`.
    """
    if not isinstance(query, str):
        raise ValueError(f"query must be one string, got {type(query).__name__}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1):
        raise ValueError(f"top_k must be a whole number >= 1 or None, got {top_k!r}")
    top_k = None if top_k is None else int(top_k)
    texts = check_texts(candidates, "candidates")
    scores = _matrix(scorer, [query], texts, condition, "rank")[0]
    order = np.argsort(-scores, kind="stable")[:top_k]
    out: list[dict[str, Any]] = []
    for i in order:
        hit: dict[str, Any] = {"corpus_id": int(i), "score": float(scores[i])}
        if return_documents:
            hit["text"] = texts[i]
        out.append(hit)
    return out


def _checked_condition(scorer: Any, condition: Any, what: str) -> str | None:
    if not callable(getattr(scorer, "score", None)):
        raise TypeError(f"{what} needs a finesim scorer (finesim.load_scorer(...)), got {type(scorer).__name__}")
    if condition is None:
        if getattr(scorer, "requires_condition", False):
            kind = ENCODER_NAMES.get(getattr(scorer, "encoder", ""), "this model")
            raise ValueError(f"{kind} scores sentence pairs only under a condition: pass condition='...' to {what}")
        return None
    if not isinstance(condition, str):
        raise ValueError(
            f"{what} takes one condition string for every pair, got {type(condition).__name__}; "
            "for one condition per pair use scorer.score(sentences1, sentences2, conditions)"
        )
    return check_texts([condition], "condition")[0]

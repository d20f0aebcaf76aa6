"""Adaptive re-ranking depth for two-stage search: re-rank the first stage's candidates best first, a chunk at a time,
and stop once further chunks stop changing the top k.

A two-stage search re-ranks ``N`` candidates, and its time is the ``N`` encodes of ``(text, condition)``
(docs/search.md). The candidates come best first, so the texts of the exact top k tend to sit early in that order;
how early varies a lot between queries. :class:`RerankDepth` re-ranks ``first`` candidates, then ``step`` more at a
time, and stops after ``patience`` consecutive chunks of which no candidate entered the top k (or when all ``N`` are
re-ranked): an easy query pays for fewer candidates, a hard one still gets up to ``N``. Every returned score is still
exact; only fewer candidates may be looked at. ``benchmarks/two_stage_adaptive_depth.py`` chose the settings
(:data:`ADAPTIVE_DEPTH`) on C-STS train conditions and measures recall and candidates re-ranked against re-ranking all
``N``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from finesim.index.topk import best_rows


@dataclass(frozen=True)
class RerankDepth:
    """How deep a two-stage search re-ranks: ``first`` candidates, then ``step`` more at a time, until ``patience``
    chunks in a row add no candidate to the top k. All three are whole numbers >= 1."""

    first: int
    step: int
    patience: int

    def __post_init__(self) -> None:
        for name in ("first", "step", "patience"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"rerank_depth: {name.upper()} must be a whole number >= 1, got {value!r}")

    @classmethod
    def parse(cls, text: str) -> RerankDepth:
        """``"FIRST,STEP,PATIENCE"``, e.g. ``"25,25,3"``; a clear error, echoing ``text``, for anything else."""
        parts = [p.strip() for p in str(text).split(",")]
        if len(parts) != 3 or not all(p.isascii() and p.isdecimal() for p in parts):
            raise ValueError(
                f"rerank_depth {text!r}: expected 'all' or three whole numbers FIRST,STEP,PATIENCE (e.g. 25,25,3)"
            )
        try:
            return cls(*(int(p) for p in parts))
        except ValueError as err:
            raise ValueError(f"rerank_depth {text!r}: {str(err).removeprefix('rerank_depth: ')}") from None

    def __str__(self) -> str:
        return f"{self.first},{self.step},{self.patience}"

    def rerank(
        self, rows: np.ndarray, k: int, score: Callable[[np.ndarray], np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """The top ``k`` ``(rows, scores)`` of the candidates ``rows`` (best first, as the first stage ranked them),
        scoring them chunk by chunk with ``score`` (the exact scores of a slice of rows) and stopping as the class
        says; also how many candidates were scored. Ties are broken as :func:`~finesim.index.topk.best_rows` breaks
        them, so re-ranking every candidate gives exactly ``best_rows`` of all of them."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a whole number >= 1, got {k!r}")
        rows = np.asarray(rows, dtype=np.int64)
        top_rows, top_scores = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        done, idle = 0, 0
        while done < len(rows) and idle < self.patience:
            stop = min(len(rows), done + (self.first if done == 0 else self.step))
            chunk = rows[done:stop]
            scores = np.asarray(score(chunk), dtype=np.float32)
            if scores.shape != (len(chunk),):
                raise ValueError(f"rerank_depth: {len(chunk)} candidates gave scores of shape {scores.shape}")
            top_rows, top_scores = best_rows(np.concatenate([top_scores, scores]), np.concatenate([top_rows, chunk]), k)
            entered = bool(np.isin(top_rows, chunk).any())
            idle = 0 if entered else idle + 1
            done = stop
        return top_rows, top_scores, done


# the default of ConditionalIndex.rerank_depth: None (every candidate re-ranked) until the selection of
# benchmarks/two_stage_adaptive_depth.py says otherwise (its rule, on C-STS train conditions)
ADAPTIVE_DEPTH: RerankDepth | None = None


def parse_rerank_depth(value: RerankDepth | str | None) -> RerankDepth | None:
    """A rerank depth as a user gives it: ``"all"`` or None (None: every candidate re-ranked), ``"FIRST,STEP,PATIENCE"``
    (:meth:`RerankDepth.parse`) or a :class:`RerankDepth`; a clear error for anything else."""
    if value is None or isinstance(value, RerankDepth):
        return value
    if not isinstance(value, str):
        raise ValueError(f"rerank_depth must be 'all', 'FIRST,STEP,PATIENCE' or a RerankDepth, got {value!r}")
    if value.strip().casefold() == "all":
        return None
    return RerankDepth.parse(value)

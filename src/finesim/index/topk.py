"""Exact top-k over score chunks: best first, ties broken by the lower row (deterministic)."""

from __future__ import annotations

import numpy as np


def best_rows(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best ``(rows, scores)`` sorted by score descending, then row ascending."""
    scores = np.asarray(scores, dtype=np.float32)
    rows = np.asarray(rows, dtype=np.int64)
    if len(scores) > k:
        # everything tied with the k-th best stays, so the tie-break by row is exact
        threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= threshold
        scores, rows = scores[keep], rows[keep]
    order = np.lexsort((rows, -scores))[:k]
    return rows[order], scores[order]


class TopK:
    """Collect the ``k`` best rows over chunks of scores."""

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = k
        self._rows: list[np.ndarray] = []
        self._scores: list[np.ndarray] = []

    def push(self, scores: np.ndarray, rows: np.ndarray) -> None:
        """Add a chunk's scores for ``rows``."""
        if len(scores):
            r, s = best_rows(scores, rows, self.k)
            self._rows.append(r)
            self._scores.append(s)

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, scores)`` of the best ``k`` seen, best first."""
        if not self._rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return best_rows(np.concatenate(self._scores), np.concatenate(self._rows), self.k)

"""Exact top-k: best first, ties broken by the lower row (deterministic)."""

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

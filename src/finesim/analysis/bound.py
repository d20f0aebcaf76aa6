"""The contrastive ceiling (Pcc-tuning, section 2.3): the best Spearman a two-class predictor can reach.

A predictor that only separates "similar" from "dissimilar" outputs two values. Its best Spearman against gold
scores is reached by calling the top ``k`` pairs (by gold score) similar and choosing the best ``k``.

Two quantities are computed, and they differ:

- :func:`paper_bound` -- the paper's closed form. It plugs the mean ranks of the two predicted groups
  into ``rho = 1 - 6 sum d_i^2 / (n (n^2 - 1))`` for ``n`` distinct gold scores and minimises over
  ``k``; for even ``n`` this is ``(7 n^2 - 4) / (8 (n^2 - 1))``, tending to ``7/8 = 0.875``.
- :func:`exact_bound` -- Spearman as every toolkit computes it (scipy's ``spearmanr``): Pearson
  correlation of average ranks, the correct definition when there are ties -- and a two-class predictor
  ties every pair within a class. For distinct gold scores this tends to ``sqrt(3) / 2 = 0.866``, not
  0.875, because the ``6 sum d^2`` shortcut is only valid without ties. Gold ties are handled exactly.

Proof sketch of the exact optimum: with ``m`` predicted positives the predictor's ranks are an affine
function of the 0/1 indicator ``b``, so ``rho = cov(R, b) / (sd(R) sd(b))`` where ``R`` are the gold
average ranks. For fixed ``m``, ``sd(b)`` is fixed and ``cov(R, b)`` is maximised by the ``m`` largest
``R`` (any choice within a gold tie group gives the same value). Hence the optimum is the maximum over
``m = 1..n-1`` of the top-``m`` split, an ``O(n log n)`` computation; tests/analysis/test_bound.py checks
it by enumerating all assignments on small inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Bound:
    """The best two-class Spearman and the split that reaches it."""

    spearman: float
    positives: int
    n: int
    method: str

    def as_dict(self) -> dict[str, float | int | str]:
        return {"spearman": self.spearman, "positives": self.positives, "n": self.n, "method": self.method}


def paper_sum_d2(n: int, k: int) -> float:
    """The paper's Eq. 5: ``sum d_i^2`` for ``n`` distinct gold ranks with the top ``k`` predicted
    positive."""
    if n < 2 or not 0 <= k <= n:
        raise ValueError(f"need n >= 2 and 0 <= k <= n, got n={n}, k={k}")
    return n * (n + 1) * (2 * n + 1) / 6 + n / 4 * (k * k - n * k - (n + 1) ** 2)


def paper_bound(n: int) -> Bound:
    """The paper's closed form: ``max_k 1 - 6 sum d^2 / (n (n^2 - 1))`` over integer ``k`` (Eq. 5-7).

    For even ``n`` the optimum is ``k = n / 2`` and equals ``(7 n^2 - 4) / (8 (n^2 - 1))``.
    """
    if n < 2:
        raise ValueError(f"need at least 2 pairs, got {n}")
    # sum d^2 is n/4 (k^2 - n k) plus terms without k: least at k = n/2, and for odd n equal at (n -+ 1)/2, of which
    # the smaller is taken (a loop over every k took minutes at --n 1e8)
    best_k = n // 2
    rho = 1.0 - 6.0 * paper_sum_d2(n, best_k) / (n * (n * n - 1))
    return Bound(spearman=rho, positives=best_k, n=n, method="paper closed form (6 sum d^2 without tie correction)")


def paper_limit() -> float:
    """The paper's limit for ``n -> infinity``: 7/8."""
    return 7.0 / 8.0


def exact_limit() -> float:
    """The tie-correct limit for distinct gold scores, ``n -> infinity``: ``sqrt(3) / 2``."""
    return math.sqrt(3.0) / 2.0


def _gold(gold: Sequence[float] | np.ndarray) -> np.ndarray:
    g = np.asarray(gold, dtype=np.float64).ravel()
    if g.size < 2:
        raise ValueError(f"need at least 2 gold scores, got {g.size}")
    if not np.all(np.isfinite(g)):
        raise ValueError("gold scores contain NaN or infinite values")
    if np.all(g == g[0]):
        raise ValueError("all gold scores are equal: Spearman is undefined for every predictor")
    return g


def exact_bound_distinct(n: int) -> Bound:
    """:func:`exact_bound` of ``n`` distinct gold scores, in closed form (no arrays: any ``n``). Centred ranks
    ``i - (n + 1) / 2``; the top ``m`` sum to ``m (n - m) / 2``, so ``rho(m) = sqrt(3 m (n - m) / (n^2 - 1))``,
    largest at ``m = n // 2`` (the first of two equal ones for odd ``n``, as :func:`exact_bound` takes)."""
    if n < 2:
        raise ValueError(f"need at least 2 pairs, got {n}")
    m = n // 2
    rho = math.sqrt(3.0 * m * (n - m) / (float(n) * n - 1.0))
    return Bound(spearman=rho, positives=m, n=n, method="exact (average ranks, scipy)")


def exact_bound(gold: Sequence[float] | np.ndarray) -> Bound:
    """The best tie-corrected Spearman (as scipy computes it) of any two-valued predictor against ``gold``."""
    g = _gold(gold)
    n = g.size
    ranks = stats.rankdata(g)  # average ranks, ties share their mean rank
    centred = ranks - ranks.mean()
    sd_r = math.sqrt(float(np.sum(centred**2)))
    top = np.sort(centred)[::-1]
    prefix = np.cumsum(top)[:-1]  # sum of the m largest centred ranks, m = 1..n-1
    m = np.arange(1, n)
    # b centred: 1 - m/n on positives, -m/n on negatives; sum(centred) = 0, so cov = sum_top centred
    sd_b = np.sqrt(m * (n - m) / n)
    rho = prefix / (sd_r * sd_b)
    best = int(np.argmax(rho))
    return Bound(spearman=float(rho[best]), positives=int(m[best]), n=n, method="exact (average ranks, scipy)")

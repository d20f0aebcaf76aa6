"""Correlation metrics (x100) that stay defined for constant predictions, with an optional bootstrap CI."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats


def _as_arrays(pred: Sequence[float] | np.ndarray, gold: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(pred, dtype=np.float64).ravel()
    g = np.asarray(gold, dtype=np.float64).ravel()
    if p.shape != g.shape:
        raise ValueError(f"predictions ({p.size}) and gold labels ({g.size}) differ in length")
    if p.size < 2:
        raise ValueError(f"need at least 2 pairs to correlate, got {p.size}")
    if not np.all(np.isfinite(p)):
        raise ValueError(f"{int(np.sum(~np.isfinite(p)))} predictions are NaN or infinite")
    return p, g


def _correlation(correlate: Any, pred: Sequence[float] | np.ndarray, gold: Sequence[float] | np.ndarray) -> float:
    p, g = _as_arrays(pred, gold)
    if np.all(p == p[0]) or np.all(g == g[0]):  # a constant side: 0.0, not NaN
        return 0.0
    return float(correlate(p, g).statistic * 100.0)


def spearman(pred: Sequence[float] | np.ndarray, gold: Sequence[float] | np.ndarray) -> float:
    """Spearman rank correlation x100; 0.0 (not NaN) when either side is constant."""
    return _correlation(stats.spearmanr, pred, gold)


def pearson(pred: Sequence[float] | np.ndarray, gold: Sequence[float] | np.ndarray) -> float:
    """Pearson correlation x100; 0.0 (not NaN) when either side is constant."""
    return _correlation(stats.pearsonr, pred, gold)


METRICS = {"spearman": spearman, "pearson": pearson}

# Fewer resamples put the 2.5% and 97.5% percentiles on a handful of values (one resample: a point, not an interval);
# 1000 is the usual count.
MIN_RESAMPLES = 100


def check_resamples(resamples: int, what: str = "resamples") -> int:
    """``resamples`` when it is 0 (no interval) or at least :data:`MIN_RESAMPLES`; else a ``ValueError``."""
    if resamples != 0 and not resamples >= MIN_RESAMPLES:
        raise ValueError(
            f"{what} must be 0 (no interval) or at least {MIN_RESAMPLES} (1000 is usual), got {resamples}: fewer "
            "resamples put the interval's ends on a handful of values"
        )
    return resamples


@dataclass(frozen=True)
class Interval:
    """A percentile bootstrap confidence interval; ``unit``: what was resampled (``row`` or ``sentence pair``)."""

    low: float
    high: float
    level: float
    resamples: int
    unit: str = "row"

    def as_dict(self) -> dict[str, float | int | str]:
        return {"low": self.low, "high": self.high, "level": self.level, "resamples": self.resamples, "unit": self.unit}


def bootstrap_interval(
    metric: str,
    pred: Sequence[float] | np.ndarray,
    gold: Sequence[float] | np.ndarray,
    *,
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    groups: Sequence[Hashable] | None = None,
    unit: str = "row",
) -> Interval:
    """Percentile bootstrap CI of ``metric`` ("spearman" or "pearson") over resampled rows.

    ``groups`` (one key per row) resamples whole groups instead of rows: C-STS labels each sentence pair under two
    conditions, and its two rows are not independent draws (resampling rows alone gives too narrow an interval).
    ``unit`` names what a group is in the interval (``sentence pair``). At least :data:`MIN_RESAMPLES` resamples.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose from {sorted(METRICS)}")
    if check_resamples(resamples) == 0:
        raise ValueError(f"resamples must be at least {MIN_RESAMPLES}, got 0")
    p, g = _as_arrays(pred, gold)
    rng = np.random.default_rng(seed)
    fn = METRICS[metric]
    values = np.empty(resamples)
    if groups is None:
        for i in range(resamples):
            idx = rng.integers(0, p.size, p.size)
            values[i] = fn(p[idx], g[idx])
    else:
        if len(groups) != p.size:
            raise ValueError(f"groups ({len(groups)}) and predictions ({p.size}) differ in length")
        rows: dict[Hashable, list[int]] = {}  # first-seen order: the same resamples in every process
        for row, key in enumerate(groups):
            rows.setdefault(key, []).append(row)
        members = [np.asarray(r) for r in rows.values()]
        for i in range(resamples):
            idx = np.concatenate([members[k] for k in rng.integers(0, len(members), len(members))])
            values[i] = fn(p[idx], g[idx])
    alpha = (1.0 - level) / 2.0
    return Interval(
        low=float(np.quantile(values, alpha)),
        high=float(np.quantile(values, 1.0 - alpha)),
        level=level,
        resamples=resamples,
        unit=unit if groups is not None else "row",
    )

"""Correlation metrics (x100) that stay defined for constant predictions, with an optional bootstrap CI."""

from __future__ import annotations

from collections.abc import Sequence
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


@dataclass(frozen=True)
class Interval:
    """A percentile bootstrap confidence interval."""

    low: float
    high: float
    level: float
    resamples: int

    def as_dict(self) -> dict[str, float | int]:
        return {"low": self.low, "high": self.high, "level": self.level, "resamples": self.resamples}


def bootstrap_interval(
    metric: str,
    pred: Sequence[float] | np.ndarray,
    gold: Sequence[float] | np.ndarray,
    *,
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap CI of ``metric`` ("spearman" or "pearson") over resampled pairs."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose from {sorted(METRICS)}")
    if resamples < 1:
        raise ValueError("resamples must be >= 1")
    p, g = _as_arrays(pred, gold)
    rng = np.random.default_rng(seed)
    fn = METRICS[metric]
    values = np.empty(resamples)
    for i in range(resamples):
        idx = rng.integers(0, p.size, p.size)
        values[i] = fn(p[idx], g[idx])
    alpha = (1.0 - level) / 2.0
    return Interval(
        low=float(np.quantile(values, alpha)),
        high=float(np.quantile(values, 1.0 - alpha)),
        level=level,
        resamples=resamples,
    )

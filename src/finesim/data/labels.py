"""Label scaling. Ranges are always declared by the caller, never guessed from the data."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def minmax_scale(values: Sequence[float] | np.ndarray, low: float, high: float) -> np.ndarray:
    """Map ``[low, high]`` linearly onto ``[0, 1]`` (the C-STS reference's ``(y - min) / (max - min)``).

    Raises:
        ValueError: if the range is empty or a value lies outside it.
    """
    if not high > low:
        raise ValueError(f"label range [{low}, {high}] is empty")
    arr = np.asarray(values, dtype=np.float64)
    bad = np.flatnonzero((arr < low) | (arr > high))
    if bad.size:
        raise ValueError(f"{bad.size} labels lie outside [{low:g}, {high:g}], first at index {bad[0]}: {arr[bad[0]]:g}")
    return (arr - low) / (high - low)


def rescale(
    values: Sequence[float] | np.ndarray, source: tuple[float, float], target: tuple[float, float]
) -> np.ndarray:
    """Map the declared ``source`` range linearly onto ``target``."""
    unit = minmax_scale(values, *source)
    return target[0] + unit * (target[1] - target[0])


def sick_to_sts(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Rescale SICK relatedness (1-5) to the STS scale (0-5): ``(y - 1) * 5 / 4``."""
    return rescale(values, (1.0, 5.0), (0.0, 5.0))

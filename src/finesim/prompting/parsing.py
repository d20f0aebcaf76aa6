"""Turn generated replies into scores, and score them against gold labels.

Parsing follows the C-STS paper (App. A, "Processing Prompting Baseline Generations") and its reference code:
the score is the first unsigned number in the reply (``\\d+\\.\\d+`` or ``\\d+``), so ``"The Answer is 2.0."``
gives 2.0. Quirks of that regex are kept so scores reproduce the reference: the sign is not read (``"-1"``
gives 1.0), ``".5"`` gives 5.0, ``"1,5"`` gives 1.0 and ``"1-5"`` gives 1.0.
A reply without a number is *invalid*: its score is replaced by a uniform draw in the label range (seeded) and
counted. A parsed score outside the label range is *out of range*: it is kept as is (not clipped) and counted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from finesim.evaluation.metrics import pearson, spearman

NUMBER = re.compile(r"\d+\.\d+|\d+")


def parse_score(reply: str | None) -> float | None:
    """The first number in ``reply``, or None when there is none."""
    if not reply:
        return None
    match = NUMBER.search(reply)
    return float(match.group(0)) if match else None


@dataclass
class ParsedReplies:
    """Scores for a list of replies, with the invalid and out-of-range positions."""

    scores: np.ndarray
    invalid: np.ndarray
    out_of_range: np.ndarray
    label_range: tuple[float, float]
    parsed: list[float | None] = field(default_factory=list)

    @property
    def n(self) -> int:
        return int(self.scores.size)


def resolve_replies(
    replies: Sequence[str | None],
    label_range: tuple[float, float],
    *,
    seed: int = 0,
) -> ParsedReplies:
    """Parse every reply; invalid ones get a seeded uniform draw in ``label_range``.

    ``None`` (a request that failed, see the backends' ``on_error="invalid"``) counts as invalid too.
    """
    low, high = label_range
    if not low < high:
        raise ValueError(f"label range must have low < high, got {label_range}")
    rng = np.random.default_rng(seed)
    parsed = [parse_score(r) for r in replies]
    invalid = np.array([p is None for p in parsed], dtype=bool)
    draws = rng.uniform(low, high, size=len(parsed))
    scores = np.array([draws[i] if p is None else p for i, p in enumerate(parsed)], dtype=np.float64)
    out_of_range = ~invalid & ((scores < low) | (scores > high))
    return ParsedReplies(scores, invalid, out_of_range, (low, high), parsed)


def prompting_metrics(parsed: ParsedReplies, gold: Sequence[float] | np.ndarray) -> dict[str, Any]:
    """Spearman and Pearson (x100), MSE, invalid and out-of-range counts and percentages."""
    g = np.asarray(gold, dtype=np.float64)
    n = parsed.n
    if g.shape != parsed.scores.shape:
        raise ValueError(f"{n} replies but {g.size} gold labels")
    return {
        "spearman": spearman(parsed.scores, g),
        "pearson": pearson(parsed.scores, g),
        "mse": float(np.mean((parsed.scores - g) ** 2)),
        "n": n,
        "invalid": int(parsed.invalid.sum()),
        "invalid_percent": 100.0 * float(parsed.invalid.sum()) / n,
        "out_of_range": int(parsed.out_of_range.sum()),
        "out_of_range_percent": 100.0 * float(parsed.out_of_range.sum()) / n,
    }

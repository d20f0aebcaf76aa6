"""Running sums of the pairs a condition's searches have re-ranked: what a ridge map of that condition is fitted from.

A condition's ridge map (:func:`~finesim.index.two_stage.fit_condition_map`, ``W = I + (XᵀX + λI)⁻¹ Xᵀ(Y − X)``)
depends on its pairs only through two ``d x d`` sums: ``XᵀX`` (the first-stage vectors' Gram matrix) and
``Xᵀ(Y − X)`` (how the condition moves them). :class:`PairMoments` keeps both per condition as searches re-rank
candidates, so local-map feedback (:mod:`finesim.index.feedback`) can fit on every pair the condition's earlier
searches re-ranked at the cost of one ``d x d`` solve, however many pairs that is, without keeping or re-reading the
pairs themselves.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

# conditions whose sums are kept (least recently used dropped first): two d x d float64 matrices each, 2.4 MB at
# width 384, 9.4 MB at 768
EARLIER_CONDITIONS = 16
# pairs summed per condition at most; later pairs of a condition whose sums are full are not added (by then the map
# rests on more pairs than the mapped first stage's 2048-text sample)
EARLIER_ROWS = 65_536


Matrix = torch.Tensor | np.ndarray


def pair_sums(plain: Matrix, conditioned: Matrix) -> tuple[torch.Tensor, torch.Tensor]:
    """``(XᵀX, Xᵀ(Y − X))`` in float64 for pairs ``X = plain``, ``Y = conditioned`` (rows, d)."""
    x, y = _float64(plain), _float64(conditioned)
    return x.T @ x, x.T @ (y - x)


def _float64(values: Matrix) -> torch.Tensor:
    return torch.as_tensor(values).to(torch.float64)


def map_from_moments(gram: torch.Tensor, cross: torch.Tensor, ridge: float) -> torch.Tensor:
    """The ridge map ``W = I + (gram + ridge I)⁻¹ cross`` (float64), from the sums ``gram = XᵀX`` and
    ``cross = Xᵀ(Y − X)`` of a condition's pairs (:func:`~finesim.index.two_stage.fit_condition_map`)."""
    if not ridge > 0:
        raise ValueError(f"ridge must be > 0, got {ridge!r}")
    gram = gram.to(torch.float64)
    eye = torch.eye(gram.shape[0], dtype=torch.float64)
    return eye + torch.linalg.solve(gram + ridge * eye, cross.to(torch.float64))


@dataclass(frozen=True)
class MomentsSnapshot:
    """A condition's sums at one moment (copies: later searches do not change them).

    Attributes:
        gram: ``XᵀX`` (``d x d``, float64). cross: ``Xᵀ(Y − X)``. count: the pairs summed. held: per row asked
        about, whether its pair is among them (so a search does not add it a second time).
    """

    gram: torch.Tensor
    cross: torch.Tensor
    count: int
    held: np.ndarray


class _Sums:
    """One condition's sums, their count, and which corpus rows they hold (a flag per row up to the largest row
    added, grown by doubling: at most 2 bytes per corpus row)."""

    def __init__(self, dim: int) -> None:
        self.gram = torch.zeros(dim, dim, dtype=torch.float64)
        self.cross = torch.zeros(dim, dim, dtype=torch.float64)
        self.count = 0
        self.summed = np.zeros(0, dtype=bool)  # per corpus row, grown on demand

    def holds(self, rows: np.ndarray) -> np.ndarray:
        inside = rows < len(self.summed)
        out = np.zeros(len(rows), dtype=bool)
        out[inside] = self.summed[rows[inside]]
        return out


class PairMoments:
    """Per condition key, the sums ``XᵀX`` and ``Xᵀ(Y − X)`` over the distinct corpus rows whose pair (first-stage
    vector ``x``, embedding under the condition ``y``) searches have added, and their count; at most
    ``max_conditions`` conditions (the least recently used dropped first) and ``max_rows`` pairs per condition.
    Thread-safe."""

    def __init__(self, max_conditions: int = EARLIER_CONDITIONS, max_rows: int = EARLIER_ROWS) -> None:
        self.max_conditions = max_conditions
        self.max_rows = max_rows
        self._sums: OrderedDict[str, _Sums] = OrderedDict()
        self._lock = threading.Lock()

    def snapshot(self, key: str, rows: np.ndarray) -> MomentsSnapshot | None:
        """The sums of ``key`` and which of ``rows`` they hold; None when no pair of ``key`` is held."""
        rows = np.asarray(rows, dtype=np.int64)
        with self._lock:
            sums = self._sums.get(key)
            if sums is None or sums.count == 0:
                return None
            self._sums.move_to_end(key)
            return MomentsSnapshot(sums.gram.clone(), sums.cross.clone(), sums.count, sums.holds(rows))

    def add(self, key: str, rows: np.ndarray, plain: torch.Tensor | np.ndarray,
            conditioned: torch.Tensor | np.ndarray) -> int:  # fmt: skip
        """Add the pairs of ``rows`` (``plain[i]``, ``conditioned[i]``) not held yet, in order, until ``max_rows``;
        how many joined."""
        rows = np.asarray(rows, dtype=np.int64)
        x, y = _float64(plain), _float64(conditioned)
        if x.ndim != 2 or tuple(x.shape) != tuple(y.shape) or x.shape[0] != len(rows):
            raise ValueError(f"{len(rows)} rows need matching (rows, d) pairs, got {tuple(x.shape)} and "
                             f"{tuple(y.shape)}")  # fmt: skip
        with self._lock:
            sums = self._sums.get(key)
            if sums is None:
                sums = self._sums[key] = _Sums(x.shape[1])
                while len(self._sums) > self.max_conditions:
                    self._sums.popitem(last=False)
            elif sums.gram.shape[0] != x.shape[1]:
                raise ValueError(f"condition {key}: pairs of width {x.shape[1]}, its sums have width "
                                 f"{sums.gram.shape[0]}")  # fmt: skip
            self._sums.move_to_end(key)
            order = np.sort(np.unique(rows, return_index=True)[1])  # a row given twice joins once
            fresh = order[~sums.holds(rows[order])][: max(0, self.max_rows - sums.count)]
            if len(fresh) == 0:
                return 0
            if int(rows[fresh].max()) >= len(sums.summed):
                grown = np.zeros(max(int(rows[fresh].max()) + 1, 2 * len(sums.summed)), dtype=bool)
                grown[: len(sums.summed)] = sums.summed
                sums.summed = grown
            index = torch.as_tensor(fresh)
            gram, cross = pair_sums(x[index], y[index])
            sums.gram += gram
            sums.cross += cross
            sums.count += len(fresh)
            sums.summed[rows[fresh]] = True
            return len(fresh)

    def drop(self, key: str) -> None:
        """Forget the sums of ``key``."""
        with self._lock:
            self._sums.pop(key, None)

    def count(self, key: str) -> int:
        """How many pairs of ``key`` are summed."""
        with self._lock:
            sums = self._sums.get(key)
            return 0 if sums is None else sums.count

    def of(self, key: str) -> ConditionPairs:
        """``key``'s sums as feedback uses them (:class:`ConditionPairs`)."""
        return ConditionPairs(self, key)


@dataclass(frozen=True)
class ConditionPairs:
    """The sums of one condition (:class:`PairMoments` and a key), as one search reads and extends them."""

    moments: PairMoments
    key: str

    def snapshot(self, rows: np.ndarray) -> MomentsSnapshot | None:
        """:meth:`PairMoments.snapshot` of this condition."""
        return self.moments.snapshot(self.key, rows)

    def add(self, rows: np.ndarray, plain: torch.Tensor | np.ndarray, conditioned: torch.Tensor | np.ndarray) -> int:
        """:meth:`PairMoments.add` to this condition."""
        return self.moments.add(self.key, rows, plain, conditioned)

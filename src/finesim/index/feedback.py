"""Local-map feedback for two-stage search: the candidates re-ranked so far steer which ones are re-ranked next.

The ``conditioned`` first stage ranks each text's embedding *alone* against the ``(query, condition)`` embedding, so
under a condition that moves the texts' embeddings it leaves some of the exact top k far down its order
(docs/search.md). Every re-ranked candidate also yields its embedding under the condition, beside its stored
first-stage vector: a sample of how the condition moves texts, right where the query looks, at no extra encode.
:class:`LocalMapFeedback` spends a search's ``N`` re-ranks in ``rounds``: the first round re-ranks the first stage's
best candidates; before each later round a map of the first-stage vectors under the condition is fitted on every
candidate re-ranked so far (:func:`~finesim.index.two_stage.fit_condition_map`, ridge ``ridge`` toward the
identity: the `mapped` first stage's fit on a local sample instead of a random one), and the round takes the
unscored candidates whose mapped vectors have the highest cosine with the query, from a pool: the ranking's next
``pool x N`` candidates not yet re-ranked (so the first stage fetches its top ``(pool + 1) x N``; no pass over the
corpus). Every returned score is still the re-ranker's exact score; only the
choice of candidates changes.

``benchmarks/two_stage_feedback.py`` chose the settings (:data:`LOCAL_MAP_FEEDBACK`) on C-STS train conditions by a
rule written before the run, and reports recall on never-seen validation conditions: for the ``conditioned`` first
stage recall@10 rose by 0.06-0.08 at N = 50-200. On a ``mapped`` or ``borrowed`` ranking the local map is a
residual on the condition's map: fitted from the *mapped* first-stage vectors (unit ``x W``), it ranks the mapped
ranking's pool (``benchmarks/two_stage_feedback_maps.py``: a borrowed map's recall@10 at N = 100 rose from 0.850
to 0.892, the condition's own map's stayed level, 0.918 -> 0.922). Fitted from the unmapped vectors instead, it
had lowered the own map's recall (0.918 -> 0.878).

A condition's later searches also fit on the pairs its earlier searches re-ranked (``earlier``, the default): the
re-ranking cache sums them per condition (:class:`~finesim.index.moments.PairMoments`), so a round's fit is one
``d x d`` solve however many pairs there are. ``benchmarks/two_stage_feedback_cache.py`` chose it by a rule written
before its simulation (+0.030 on train conditions); real searches of never-seen validation conditions, queries after
each condition's first, went from recall@10 0.822 to 0.861 at N = 100 and 0.874 to 0.909 at N = 200. Only the
``conditioned`` ranking uses them: a map's ranking fits in its mapped space, which changes with the map.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from finesim.index.moments import ConditionPairs, map_from_moments, pair_sums
from finesim.index.rerank_depth import RerankDepth
from finesim.index.topk import best_rows
from finesim.index.two_stage import fit_condition_map

NAME = "local-map"
PAIRS = ("earlier", "own")  # the fit's pairs: also the condition's earlier searches', or this search's own only
# earlier pairs a condition needs before a search's first round is chosen by their map rather than the first stage's
# order (benchmarks/two_stage_feedback_cache.py simulated this value; not tuned)
MIN_EARLIER = 100


@dataclass(frozen=True)
class LocalMapFeedback:
    """Re-rank ``N`` candidates in ``rounds`` rounds, each after the first chosen by a map fitted (ridge ``ridge``) on
    the candidates re-ranked so far, from the ranking's next ``pool x N`` candidates not yet re-ranked. ``rounds`` and
    ``pool``: whole numbers >= 1; ``ridge``: a finite number > 0. ``earlier`` (the default): the fit also takes the
    pairs the condition's earlier searches re-ranked, when the search is given them (:meth:`rerank`'s ``earlier``),
    and once they number :data:`MIN_EARLIER` the first round is chosen by the map too; False: this search's pairs
    only."""

    rounds: int = 4
    ridge: float = 0.1
    pool: int = 10
    earlier: bool = True

    def __post_init__(self) -> None:
        for name in ("rounds", "pool"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"rerank_feedback: {name.upper()} must be a whole number >= 1, got {value!r}")
        ridge = self.ridge
        if isinstance(ridge, bool) or not isinstance(ridge, (int, float, np.floating)) or not math.isfinite(ridge) \
                or ridge <= 0:  # fmt: skip
            raise ValueError(f"rerank_feedback: RIDGE must be a finite number > 0, got {ridge!r}")
        if not isinstance(self.earlier, (bool, np.bool_)):
            raise ValueError(f"rerank_feedback: earlier must be True or False, got {self.earlier!r}")

    @classmethod
    def parse(cls, text: str) -> LocalMapFeedback:
        """``"local-map"`` (the defaults) or ``"local-map:ROUNDS,RIDGE,POOL[,PAIRS]"``, PAIRS ``earlier`` (the
        default) or ``own`` (``earlier`` False), e.g. ``"local-map:4,0.1,10,own"``; a clear error, echoing
        ``text``, for anything else."""
        name, _, values = str(text).strip().partition(":")
        usage = (f"expected 'none', '{NAME}' or '{NAME}:ROUNDS,RIDGE,POOL[,{'|'.join(PAIRS)}]' "
                 f"(e.g. {NAME}:4,0.1,10,{PAIRS[0]})")  # fmt: skip
        if name.strip().casefold() != NAME:
            raise ValueError(f"rerank_feedback {text!r}: {usage}")
        if not values.strip():
            if _:
                raise ValueError(f"rerank_feedback {text!r}: {usage}")
            return cls()
        parts = [p.strip() for p in values.split(",")]
        if len(parts) not in (3, 4) or not all(p.isascii() and p.isdecimal() for p in (parts[0], parts[2])):
            raise ValueError(f"rerank_feedback {text!r}: {usage}")
        if len(parts) == 4 and parts[3].casefold() not in PAIRS:
            raise ValueError(f"rerank_feedback {text!r}: PAIRS must be {' or '.join(PAIRS)}; {usage}")
        try:
            ridge = float(parts[1])
        except ValueError:
            raise ValueError(f"rerank_feedback {text!r}: RIDGE must be a number; {usage}") from None
        earlier = len(parts) == 3 or parts[3].casefold() == PAIRS[0]
        try:
            return cls(int(parts[0]), ridge, int(parts[2]), earlier)
        except ValueError as err:
            raise ValueError(f"rerank_feedback {text!r}: {str(err).removeprefix('rerank_feedback: ')}") from None

    def __str__(self) -> str:  # repr: the ridge reads back exactly
        return f"{NAME}:{self.rounds},{float(self.ridge)!r},{self.pool},{PAIRS[0] if self.earlier else PAIRS[1]}"

    def fetch(self, n: int) -> int:
        """How many of the first stage's candidates a search of ``n`` re-ranks needs (best first): the pool and the
        candidates re-ranked from it."""
        return (self.pool + 1) * n

    def rerank(
        self,
        rows: np.ndarray,
        n: int,
        k: int,
        query: np.ndarray,
        first_stage: Callable[[np.ndarray], np.ndarray],
        conditioned: Callable[[np.ndarray], np.ndarray],
        depth: RerankDepth | None = None,
        pairs: ConditionPairs | None = None,
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """The top ``k`` ``(rows, scores)`` after re-ranking at most ``n`` of the candidates ``rows`` (the first
        stage's, best first: :meth:`fetch` of them), and how many were re-ranked. ``query``: the ``(query,
        condition)`` embedding (unit length); ``first_stage(rows)``: the rows' vectors whose cosine with ``query``
        ranked them (first-stage vectors, or mapped ones for a map's ranking);
        ``conditioned(rows)``: their embeddings under the condition (the re-ranking: the exact score is their dot
        product with ``query``). Rounds of equal size by default; with ``depth`` its chunks (``first``, then
        ``step``) are the rounds and it stops after ``patience`` rounds that add nothing to the top ``k``. The
        first stage's own order breaks ties between candidates of equal mapped cosine. ``pairs``: the sums of the
        pairs the condition's earlier searches re-ranked, in the space of ``first_stage`` (used when
        :attr:`earlier` is True: every fit adds this search's pairs to them, and the search adds its pairs to them
        when it ends)."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a whole number >= 1, got {k!r}")
        rows = np.asarray(rows, dtype=np.int64)
        n = min(n, len(rows))
        # products in torch (the model's own thread pool): numpy's BLAS threads, left spinning after a product, slowed
        # the next round's model call by up to 1.8x on a 2-core CPU
        vectors = torch.as_tensor(np.asarray(first_stage(rows), dtype=np.float32))
        query_t = torch.as_tensor(np.asarray(query, dtype=np.float32))
        pairs = pairs if self.earlier else None
        # the fit's sums (XᵀX, Xᵀ(Y - X)): the earlier searches' pairs, plus each round's own ones not among them;
        # None: no earlier pairs, so each fit takes this search's pairs alone (fit_condition_map's dual form)
        known = pairs.snapshot(rows) if pairs is not None else None
        sums = (known.gram, known.cross) if known is not None else None
        scored = np.zeros(len(rows), dtype=bool)  # positions in rows
        seen: list[np.ndarray] = []  # positions re-ranked, a round at a time
        seen_y: list[torch.Tensor] = []
        top_rows, top_scores = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        done, idle, round_index = 0, 0, 0
        while done < n and (depth is None or idle < depth.patience):
            size = self._round_size(round_index, done, n, depth)
            if round_index == 0 and (known is None or known.count < MIN_EARLIER):
                chosen = np.arange(size)
            else:
                if sums is None:
                    so_far = torch.as_tensor(np.concatenate(seen))
                    weights = torch.as_tensor(
                        fit_condition_map(vectors[so_far].numpy(), torch.cat(seen_y).numpy(), self.ridge)
                    )
                else:
                    weights = map_from_moments(*sums, self.ridge).to(torch.float32)
                pool = np.flatnonzero(~scored)[: self.pool * n]
                mapped = vectors[torch.as_tensor(pool)] @ weights
                norms = torch.linalg.vector_norm(mapped, dim=1)
                cosine = ((mapped @ query_t) / torch.where(norms > 0, norms, torch.ones_like(norms))).numpy()
                chosen = pool[np.argsort(-cosine, kind="stable")[:size]]
            scored[chosen] = True
            embedded = torch.as_tensor(np.asarray(conditioned(rows[chosen]), dtype=np.float32))
            if tuple(embedded.shape) != (len(chosen), vectors.shape[1]):
                raise ValueError(
                    f"rerank_feedback: {len(chosen)} candidates gave embeddings of shape {tuple(embedded.shape)}, "
                    f"expected {(len(chosen), vectors.shape[1])}"
                )
            scores = (embedded @ query_t).numpy()
            seen.append(chosen)
            seen_y.append(embedded)
            if sums is not None and known is not None:  # (known is not None whenever sums is not: for mypy)
                new = torch.as_tensor(~known.held[chosen])
                gram, cross = pair_sums(vectors[torch.as_tensor(chosen)][new], embedded[new])
                sums = (sums[0] + gram, sums[1] + cross)
            chunk = rows[chosen]
            top_rows, top_scores = best_rows(np.concatenate([top_scores, scores]), np.concatenate([top_rows, chunk]), k)
            idle = 0 if bool(np.isin(top_rows, chunk).any()) else idle + 1
            done += len(chosen)
            round_index += 1
        if pairs is not None and seen:
            every = np.concatenate(seen)
            pairs.add(rows[every], vectors[torch.as_tensor(every)], torch.cat(seen_y))
        return top_rows, top_scores, done

    def _round_size(self, index: int, done: int, n: int, depth: RerankDepth | None) -> int:
        if depth is not None:
            return min(n - done, depth.first if index == 0 else depth.step)
        end = n if index >= self.rounds - 1 else round(n * (index + 1) / self.rounds)
        return max(1, end - done)


# the default of ConditionalIndex.rerank_feedback for an index whose first stage is the bi-encoder's own embedding
# ("self"), chosen by benchmarks/two_stage_feedback.py's rule on C-STS train conditions
LOCAL_MAP_FEEDBACK = LocalMapFeedback(rounds=4, ridge=0.1, pool=10)


def parse_rerank_feedback(value: LocalMapFeedback | str | None) -> LocalMapFeedback | None:
    """A feedback setting as a user gives it: ``"none"`` or None (no feedback: the first stage's top N re-ranked),
    ``"local-map"`` / ``"local-map:ROUNDS,RIDGE,POOL[,earlier|own]"`` (:meth:`LocalMapFeedback.parse`) or a
    :class:`LocalMapFeedback`; a clear error for anything else."""
    if value is None or isinstance(value, LocalMapFeedback):
        return value
    if not isinstance(value, str):
        raise ValueError(f"rerank_feedback must be 'none', '{NAME}[:ROUNDS,RIDGE,POOL[,earlier|own]]' or a "
                         f"LocalMapFeedback, got {value!r}")  # fmt: skip
    if value.strip().casefold() == "none":
        return None
    return LocalMapFeedback.parse(value)

"""Tri-encoder search: the condition-independent part of the head is applied once at build time, the condition is
fused at query time.

A tri-encoder scores ``cos(f(q, c), f(x, c))`` with :meth:`ConditionHead.fuse` (``T`` the sentence transform, ``C``
the condition transform). What is stored per corpus sentence, its *stage* vector, and what a query does:

- ``hadamard``: ``f(x, c) = T(x) ⊙ w`` with ``w = C(c)``. Stored: ``T(x)``. Query: no corpus vector is fused;
  ``cos = (T(x) · (T(q) ⊙ w²)) / (‖T(q) ⊙ w‖ · sqrt(T(x)² · w²))``: two matrix-vector products per chunk.
- ``concat``: ``f(x, c) = GELU(W_s T(x) + W_c C(c) + b)``. Stored: ``W_s T(x)`` (the sentence half of the fusion
  layer, linear in ``x``). Query: ``u = W_c C(c) + b`` once, then ``GELU(stored + u)`` chunk by chunk: an addition and a
  GELU per element instead of a ``2h x h`` matrix product per row.
- ``hypernet``: ``f(x, c) = T(x) A_c B_c`` (rank ``K``). Stored: ``T(x)``. Query: ``A_c``, ``B_c`` once, then
  ``(stored A_c) B_c`` chunk by chunk (``2 h K`` operations per row instead of building ``W_c``).

The stored vectors are computed in eval mode (no dropout), as scoring does. Scores equal
``ConditionalScorer(model).similarity(q, x, c)`` up to float32 rounding.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

# torch.from_numpy warns about a read-only array (a memory-mapped index file, which as_float_tensor only reads): one
# filter, set at import and narrowed to this module's calls, rather than warnings.catch_warnings per call, which is
# not thread-safe (an exact scan calls it from several threads, and an overlapping exit can leave the filter behind
# for the whole process)
warnings.filterwarnings(
    "ignore", message="The given NumPy array is not writable", category=UserWarning, module=__name__
)

STAGE_DESCRIPTION = {
    "hadamard": "T(s): the head's sentence transform of the pooled embedding",
    "concat": "W_s T(s): the sentence half of the concat fusion layer applied to T(s)",
    "hypernet": "T(s): the head's sentence transform of the pooled embedding",
}


def _fusion_linear(head: Any) -> torch.nn.Linear:
    linears = [m for m in head.fusion if isinstance(m, torch.nn.Linear)]
    if len(linears) != 1:
        raise ValueError("the concat head's fusion block should hold exactly one Linear layer")
    return linears[0]


@torch.no_grad()
def sentence_stage(head: Any, pooled: torch.Tensor) -> torch.Tensor:
    """The stored, condition-independent vectors of pooled sentence embeddings (see the module docstring), computed
    on the head's device and returned on the CPU."""
    was_training = head.training
    head.eval()
    try:
        t = head.sentence_transform(pooled.float().to(head.device))
        if head.kind == "concat":
            linear = _fusion_linear(head)
            t = t @ linear.weight[:, : head.dimension].T
        return t.cpu()
    finally:
        head.train(was_training)


def as_float_tensor(block: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A float32 tensor over a block of stored rows, sharing memory when it is float32 already (a read-only memory
    map is only read here, so torch's warning about non-writable arrays does not apply: it is filtered below)."""
    if isinstance(block, torch.Tensor):
        return block.float()
    return torch.from_numpy(np.asarray(block, dtype=np.float32))


# torch's half matrix-vector product on CPU sums in float32 on all of torch's threads since about torch 2.6 (measured
# here on 2.13); an older torch runs the float32 product instead
HALF_PRODUCT = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 6)


def candidate_dot(block: np.ndarray, vector: torch.Tensor) -> torch.Tensor:
    """``block @ vector`` as float32, for a scan by the product of stored rows with one vector. A float16 ``block``
    (an index stored as float16) is multiplied in float16: torch's half matrix-vector product runs on all of torch's
    threads, and a whole first-stage scan of 1M x 384 rows (its top 1,100 kept) took 50 ms p50 on the 2-core host of
    ``benchmarks/first_stage_scan.py``, against 98 ms for the float32 index split over 2 threads and 442 ms for
    converting each float16 chunk to float32 first (``first_stage_scan_1m.json``). Its products are rounded to
    float16 (about 3 significant digits; equal products are then ordered by row): the scan kept 0.998 of the float32
    scan's top 1,100 rows. A block whose half product is not finite (a value beyond float16's range) is multiplied in
    float32 instead, and so is every block on a torch older than 2.6 (:data:`HALF_PRODUCT`)."""
    if HALF_PRODUCT and block.dtype == np.float16 and vector.dtype in (torch.float32, torch.float16):
        half = torch.from_numpy(np.ascontiguousarray(block)) @ vector.to(torch.float16)
        if bool(torch.isfinite(half).all()):
            return half.float()
    return as_float_tensor(block) @ vector.float()


def half_product_bound(top: float, vector_norm: float, row_norm: float = 1.0) -> float:
    """An upper bound on ``|candidate_dot(x, q) - float32(x) . q|`` for a float16 row ``x`` (norm at most
    ``row_norm``) whose half product is ``top`` in absolute value: half of float16's spacing at ``top`` (the
    product's rounding), ``|x| |q| 2^-11`` (``q`` rounded to float16) and a float32 sum's error, doubled for
    safety."""
    spacing = 2.0 ** (np.floor(np.log2(max(abs(top), 2.0**-14))) - 10)
    return 2.0 * (spacing / 2 + row_norm * vector_norm * 2.0**-11 + 1e-6 * row_norm * vector_norm)


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine of ``a`` (n, d) with a single vector ``b`` (d,), as ``torch.nn.functional.cosine_similarity``."""
    return torch.nn.functional.cosine_similarity(a, b.unsqueeze(0).expand_as(a), dim=-1)


class TriQuery:
    """One (query, condition) against stored stage vectors: exact scores chunk by chunk, and a vector for
    approximate candidate generation.

    Args:
        head: the tri-encoder's :class:`~finesim.models.condition_head.ConditionHead`.
        query_pooled: the pooled embedding of the query, shape ``(h,)``.
        condition_pooled: the pooled embedding of the condition, shape ``(h,)``.
    """

    @torch.no_grad()
    def __init__(self, head: Any, query_pooled: torch.Tensor, condition_pooled: torch.Tensor) -> None:
        self.kind = head.kind
        was_training = head.training
        head.eval()
        try:
            q_stage = sentence_stage(head, query_pooled.float().unsqueeze(0))[0]
            c = head.condition_transform(condition_pooled.float().unsqueeze(0).to(head.device))[0]
            h = head.dimension
            self.q_stage = q_stage
            if self.kind == "hadamard":
                c = c.cpu()
                self.w2 = c * c
                self.numerator = q_stage * self.w2
                self.q_norm = torch.linalg.vector_norm(q_stage * c)
                self.fused_query = q_stage * c
            elif self.kind == "concat":
                linear = _fusion_linear(head)
                self.u = (c @ linear.weight[:, h:].T + linear.bias).cpu()
                self.fused_query = torch.nn.functional.gelu(q_stage + self.u)
            elif self.kind == "hypernet":
                self.a = head.generate_a(c).view(h, head.rank).cpu()
                self.b = head.generate_b(c).view(head.rank, h).cpu()
                self.fused_query = (q_stage @ self.a) @ self.b
            else:
                raise ValueError(f"unknown tri-encoder head kind {self.kind!r}")
        finally:
            head.train(was_training)

    @torch.no_grad()
    def scores(self, stage: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Exact scores of stored stage vectors ``(n, d)`` (any float dtype; computed in float32)."""
        x = as_float_tensor(stage)
        if self.kind == "hadamard":
            numerator = x @ self.numerator
            x_norm = torch.sqrt((x * x) @ self.w2)
            eps = 1e-8
            return numerator / (torch.clamp(x_norm, min=eps) * torch.clamp(self.q_norm, min=eps))
        if self.kind == "concat":
            return _cos(torch.nn.functional.gelu(x + self.u), self.fused_query)
        return _cos((x @ self.a) @ self.b, self.fused_query)

    def candidate_vector(self) -> np.ndarray:
        """A query vector for inner-product candidate search over L2-normalised stage vectors.

        ``hadamard`` and ``hypernet``: the direction whose inner product with a stage vector is the exact numerator of
        the fused cosine (``T(q) ⊙ w²``; ``A B Bᵀ Aᵀ T(q)``), so only the corpus-side norm is approximated.
        ``concat``: the query's own stage vector (the fusion is not linear).
        """
        with torch.no_grad():
            if self.kind == "hadamard":
                v = self.numerator
            elif self.kind == "hypernet":
                v = (self.fused_query @ self.b.T) @ self.a.T
            else:
                v = self.q_stage
        return v.float().numpy()

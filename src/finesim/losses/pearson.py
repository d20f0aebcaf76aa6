"""Pearson loss ``1 - r`` over a batch of cosine similarities and gold labels (Pcc-tuning, Eq. 9).

``r`` is the sample Pearson correlation of the batch, so the loss is scale-free in the labels (raw 0-5 STS
scores need no normalisation) and lies in ``[0, 2]``. Under ``torch.distributed`` the similarities and labels
of all processes are gathered first, so ``r`` is computed over the global batch; the local shard keeps its
gradient (as in the reference code), the other shards are constants.

Choice made explicit: the reference code divides the mean cross-product by the square roots of *unbiased*
variances, which yields ``r * (N - 1) / N``. The default here is the true Pearson ``r`` (equal to scipy's);
``reference_scaling=True`` reproduces the reference value.

A batch of a single pair (the last batch when the number of pairs leaves a remainder of 1) has no Pearson
correlation. :class:`PearsonLoss` then returns a zero that stays attached to the graph (``0 * sum(sims)``): the
step changes nothing, the trainer's backward pass still works, and no row is dropped silently from the data
(``drop_last`` would drop up to ``batch - 1`` rows every epoch). :func:`pearson_r` itself still raises.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import torch
from torch import Tensor, nn

from finesim.losses._distributed import all_gather, distributed
from finesim.losses._regression import check_pair_batch

Similarity = Literal["cosine", "dot"]


def pearson_r(x: Tensor, y: Tensor, *, eps: float = 1e-20, reference_scaling: bool = False) -> Tensor:
    """Differentiable Pearson correlation of two 1-D tensors (needs at least 2 entries).

    A constant side (squared centred norm at most ``eps``) gives ``r = 0`` with a zero gradient, instead of NaN: r
    depends only on the direction of the centred vectors, so it has no gradient there (the clamped norm alone would
    give one of about ``1 / sqrt(eps)``, which would blow up Adam's moment estimates without a word).
    """
    x, y = check_pair_batch(x, y, "pearson_r")
    n = x.numel()
    if n < 2:
        raise ValueError(f"pearson_r needs at least 2 pairs, got {n}")
    xc = x - x.mean()
    yc = y - y.mean()
    sx, sy = xc.pow(2).sum(), yc.pow(2).sum()
    # clamped before the square root (no NaN), and r zeroed with its gradient when a side is constant
    r = (xc * yc).sum() / (sx.clamp_min(eps).sqrt() * sy.clamp_min(eps).sqrt())
    r = r * ((sx > eps) & (sy > eps)).to(r.dtype)
    if reference_scaling:
        r = r * (n - 1) / n
    return r


def pearson_loss(x: Tensor, y: Tensor, *, reference_scaling: bool = False) -> Tensor:
    """``1 - pearson_r(x, y)``; minimised at ``r = 1``."""
    return 1.0 - pearson_r(x, y, reference_scaling=reference_scaling)


def gather_with_grad(t: Tensor) -> Tensor:
    """Concatenate a 1-D tensor across processes; the local shard keeps its gradient, the others are constants
    (as in the reference code). Without an initialised process group (or with one process) it is unchanged."""
    return all_gather(t.reshape(-1), grad="local")[0] if distributed() else t


class PearsonLoss(nn.Module):
    """``1 - r`` between pair similarities and labels, sentence-transformers' ``forward(features,
    labels)`` contract.

    Args:
        model: a ``SentenceTransformer``.
        similarity: ``"cosine"`` (Pcc-tuning) or ``"dot"``.
        gather: gather similarities and labels across processes before computing ``r`` (no-op on one process).
        reference_scaling: multiply ``r`` by ``(N - 1) / N`` like the reference code.
    """

    def __init__(
        self,
        model: Any,
        *,
        similarity: Similarity = "cosine",
        gather: bool = True,
        reference_scaling: bool = False,
    ) -> None:
        super().__init__()
        if similarity not in ("cosine", "dot"):
            raise ValueError(f"similarity must be 'cosine' or 'dot', got {similarity!r}")
        self.model = model
        self.similarity = similarity
        self.gather = gather
        self.reference_scaling = reference_scaling

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> Tensor:
        from sentence_transformers.base.losses.merged_forward import embed_columns

        u, v = embed_columns(self.model, sentence_features)
        if self.similarity == "cosine":
            sims = torch.nn.functional.cosine_similarity(u, v, dim=-1)
        else:
            sims = (u * v).sum(-1)
        labels = labels.reshape(-1).to(sims.dtype)
        if self.gather:
            sims, labels = gather_with_grad(sims), gather_with_grad(labels)
        if sims.numel() < 2:  # no correlation for one pair: a zero that keeps the graph (module docstring)
            return sims.sum() * 0.0
        return pearson_loss(sims, labels, reference_scaling=self.reference_scaling)

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "similarity": self.similarity,
            "gather": self.gather,
            "reference_scaling": self.reference_scaling,
        }

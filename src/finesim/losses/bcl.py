"""Balanced Contrastive Loss (BCL, CCL paper Eq. 10-11).

For row ``i`` (sentence pair ``(s1_i, s2_i)`` under condition ``c_i``, label ``l_i`` on the [0, 1] scale):

- anchor ``a_i = g(f(s1_i, c_i))``; positive ``p_i = g(f'(s1_i, c_i))``, a second forward pass of the same
  input with fresh dropout masks (SimCSE-style);
- negatives ``n_j = g(f(s2_j, c_j))`` for every row ``j`` of the batch (of all processes when distributed);
- ``cos_ii = cos(a_i, p_i)``, ``cos_ij = cos(a_i, n_j)``, and per anchor::

      BCL_i = -log( e^{cos_ii/tau} / (e^{cos_ii/tau} + sum_j alpha_ij e^{cos_ij/tau}) )

  with ``alpha_ij = 1`` for ``j != i``; for ``j == i`` (same pair, same condition) ``alpha = 0`` when ``l_i >=
  sigma`` (false negative) and ``1 - l_i`` when ``l_i < sigma`` (hard negative).

Choices where the paper is vague (all options):

- ``reduction="mean"`` averages ``BCL_i`` over anchors: the usual InfoNCE form and the per-anchor loss of the
  paper's gradient analysis (Eq. 12-15). Eq. 10 as printed puts the sum over ``i`` inside the log;
  ``reduction="log_of_sum"`` implements that literal form (``-log sum_i p_i``) for comparison.
- ``temperature`` divides the cosines. The paper's Table 2 lists tau = 3 ... 10; ``docs/ccl.md`` says how the
  recipes read those values.
- In-batch negatives are all-gathered across processes (gradient kept for the local shard and returned by the
  gather's backward); ``j == i`` is then the anchor's own row at its global index.
- Both conditions of every sentence pair are rows, so anchor ``(s1_i, c_high)`` also meets ``(s2_i, c_low)``,
  the same sentence pair under its other condition, as a negative. Eq. 11 gives every ``j != i`` the weight 1,
  and so does the default ``partner_negative="keep"``; ``"mask"`` sets that one weight to 0 (the partner row
  is neither a false nor a hard negative in the paper's terms, and its label is the other condition's).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from finesim.losses._distributed import all_gather
from finesim.losses._features import (
    PROJECTION_HINT,
    pair_labels,
    pair_outputs,
    reduce,
    second_pass_projections,
)

BCL_REDUCTIONS = ("mean", "sum", "none", "log_of_sum")
PARTNER_NEGATIVE = ("keep", "mask")


def bcl_alpha(
    labels: Tensor,
    num_negatives: int,
    *,
    sigma: float,
    offset: int = 0,
    partner: Tensor | None = None,
) -> Tensor:
    """Eq. 11 weights as an ``(N, num_negatives)`` matrix.

    Args:
        labels: ``(N,)`` labels of the anchors' rows, on the [0, 1] scale.
        num_negatives: number of negative columns ``M``.
        sigma: the false-/hard-negative cut-off.
        offset: global index of the first anchor's own negative (the rank's start when negatives are
        gathered).
        partner: optional ``(N,)`` local row index, per anchor, of a negative to exclude (weight 0): the same
        sentence pair under its other condition (``partner_negative="mask"``). Like the own negative, it sits
        at ``offset + partner[i]``.
    """
    n = labels.shape[0]
    if offset < 0 or offset + n > num_negatives:
        raise ValueError(f"anchors {offset}..{offset + n - 1} have no own negative among {num_negatives} columns")
    labels = labels.detach().float()
    alpha = torch.ones(n, num_negatives, dtype=labels.dtype, device=labels.device)
    diagonal = torch.where(labels >= sigma, torch.zeros_like(labels), 1.0 - labels)
    rows = torch.arange(n, device=labels.device)
    alpha[rows, rows + offset] = diagonal
    if partner is not None:
        partner = partner.to(device=labels.device, dtype=torch.long)
        if partner.shape != (n,) or bool((partner < 0).any()) or bool((offset + partner >= num_negatives).any()):
            raise ValueError(
                f"partner must hold {n} row indices in 0..{num_negatives - offset - 1}, got {partner.tolist()}"
            )
        if bool((partner == rows).any()):
            raise ValueError("an anchor's partner cannot be its own row")
        alpha[rows, partner + offset] = 0.0
    return alpha


def bcl_from_similarities(
    pos_sim: Tensor,
    neg_sim: Tensor,
    alpha: Tensor,
    *,
    temperature: float,
    reduction: str = "mean",
) -> Tensor:
    """Eq. 10/12 from similarities: ``pos_sim`` (N,) = cos_ii, ``neg_sim`` (N, M) = cos_ij, ``alpha`` (N, M).

    Computed in log space (``log alpha`` added to the logits; ``alpha = 0`` gives ``-inf``, i.e. no term and
    no gradient), so it stays finite for small temperatures.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if reduction not in BCL_REDUCTIONS:
        raise ValueError(f"reduction must be one of {BCL_REDUCTIONS}, got {reduction!r}")
    if neg_sim.shape != alpha.shape or neg_sim.shape[0] != pos_sim.shape[0]:
        raise ValueError(
            f"shape mismatch: pos {tuple(pos_sim.shape)}, neg {tuple(neg_sim.shape)}, alpha {tuple(alpha.shape)}"
        )
    if (alpha < 0).any():
        raise ValueError("alpha must be >= 0 (labels above 1? BCL expects labels on the [0, 1] scale)")
    pos_logit = pos_sim / temperature
    neg_logit = neg_sim / temperature + torch.log(alpha.to(neg_sim.dtype))
    log_denominator = torch.logsumexp(torch.cat([pos_logit.unsqueeze(1), neg_logit], dim=1), dim=1)
    per_anchor = log_denominator - pos_logit  # -log p_i
    if reduction == "log_of_sum":
        return -torch.logsumexp(-per_anchor, dim=0)
    return reduce(per_anchor, reduction)


def balanced_contrastive_loss(
    anchors: Tensor,
    positives: Tensor,
    negatives: Tensor,
    labels: Tensor,
    *,
    sigma: float,
    temperature: float,
    offset: int = 0,
    reduction: str = "mean",
    partner: Tensor | None = None,
) -> Tensor:
    """BCL over embeddings: anchors/positives (N, d), negatives (M, d); row ``offset + i`` is anchor i's.

    ``partner`` (see :func:`bcl_alpha`) excludes one more negative per anchor.
    """
    a = nn.functional.normalize(anchors, dim=-1)
    pos_sim = (a * nn.functional.normalize(positives, dim=-1)).sum(-1)
    neg_sim = a @ nn.functional.normalize(negatives, dim=-1).T
    alpha = bcl_alpha(labels, negatives.shape[0], sigma=sigma, offset=offset, partner=partner)
    return bcl_from_similarities(pos_sim, neg_sim, alpha, temperature=temperature, reduction=reduction)


def gather_with_offset(local: Tensor) -> tuple[Tensor, int]:
    """All-gather ``local`` ``(n_rank, d)`` from every process, every shard keeping its gradient; returns the
    concatenation in rank order and the global index of this rank's first row (``(local, 0)`` on one process)."""
    return all_gather(local, grad="all")


class BCLLoss(nn.Module):
    """BCL as a sentence-transformers loss over the four condition-pair columns (bi- or tri-encoder).

    Both conditions of every sentence pair are BCL rows (``2B`` anchors per batch). The model needs a
    :class:`~finesim.models.projection_head.ProjectionHead`.

    Args:
        model: the SentenceTransformer being trained.
        sigma: false-/hard-negative cut-off on the [0, 1] label scale.
        temperature: divides the cosines.
        reduction: see :data:`BCL_REDUCTIONS` and the module docstring.
        gather_across_devices: all-gather negatives when training distributed.
        partner_negative: ``"keep"`` (Eq. 11: weight 1) or ``"mask"`` (weight 0) for the negative that is the
            anchor's own sentence pair under its other condition.
    """

    def __init__(
        self,
        model: Any,
        *,
        sigma: float = 0.5,
        temperature: float = 0.05,
        reduction: str = "mean",
        gather_across_devices: bool = True,
        partner_negative: str = "keep",
    ) -> None:
        super().__init__()
        check_partner_negative(partner_negative)
        self.model = model
        self.sigma = sigma
        self.temperature = temperature
        self.reduction = reduction
        self.gather_across_devices = gather_across_devices
        self.partner_negative = partner_negative

    def forward(self, features: list[dict[str, Any]], labels: Tensor) -> Tensor:
        label_pos, label_neg = pair_labels(labels)
        outputs = pair_outputs(self.model, features)
        if any("projected_embedding" not in o for o in outputs):
            raise KeyError(f"BCLLoss needs 'projected_embedding' in the model output; {PROJECTION_HINT}")
        z = [o["projected_embedding"] for o in outputs]
        return bcl_for_pair_batch(
            self.model,
            features,
            torch.cat([z[0], z[2]]),
            torch.cat([z[1], z[3]]),
            torch.cat([label_pos, label_neg]),
            sigma=self.sigma,
            temperature=self.temperature,
            reduction=self.reduction,
            gather_across_devices=self.gather_across_devices,
            partner_negative=self.partner_negative,
        )


def check_partner_negative(value: str) -> None:
    """Raise unless ``value`` is one of :data:`PARTNER_NEGATIVE`."""
    if value not in PARTNER_NEGATIVE:
        raise ValueError(f"partner_negative must be one of {PARTNER_NEGATIVE}, got {value!r}")


def pair_batch_partners(rows: int, device: Any = None) -> Tensor:
    """For the ``2B`` rows of a condition-pair batch (all high views, then all low views), each row's index
    of the same sentence pair under its other condition: ``(i + B) mod 2B``."""
    if rows % 2:
        raise ValueError(f"a condition-pair batch has an even number of rows, got {rows}")
    return (torch.arange(rows, device=device) + rows // 2) % rows


def bcl_for_pair_batch(
    model: Any,
    features: list[dict[str, Any]],
    anchors: Tensor,
    negatives: Tensor,
    row_labels: Tensor,
    *,
    sigma: float,
    temperature: float,
    reduction: str = "mean",
    gather_across_devices: bool = True,
    partner_negative: str = "keep",
) -> Tensor:
    """BCL of a condition-pair batch given its first-pass projections (rows: all high, then all low views).

    Runs the second (dropout) forward pass of the ``s1`` views for the positives and, when distributed,
    gathers the negatives of all processes. ``partner_negative="mask"`` gives weight 0 to each anchor's
    negative from the same sentence pair under the other condition.
    """
    check_partner_negative(partner_negative)
    partner = pair_batch_partners(anchors.shape[0], anchors.device) if partner_negative == "mask" else None
    positives = second_pass_projections(model, features)
    offset = 0
    if gather_across_devices:
        negatives, offset = gather_with_offset(negatives)
    return balanced_contrastive_loss(
        anchors,
        positives,
        negatives,
        row_labels,
        sigma=sigma,
        temperature=temperature,
        offset=offset,
        reduction=reduction,
        partner=partner,
    )

"""The one all-gather of finesim's losses: in-batch negatives (BCL) and correlation batches (Pearson) of all
processes under ``torch.distributed``.

Shards may differ in size (a short last batch): their sizes are exchanged first, each shard is padded to the largest
for the collective and trimmed afterwards. Without an initialised process group (or with one process) the local
tensor comes back unchanged with offset 0.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def distributed() -> bool:
    """Whether more than one process takes part in an initialised process group."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_gather(local: Tensor, *, grad: str = "all") -> tuple[Tensor, int]:
    """Concatenate ``local`` (first dimension = rows) from every process in rank order.

    Args:
        local: this process's shard.
        grad: ``"all"``: every shard keeps its gradient (each process's backward returns the gradient of its own
            shard from all processes' losses: sentence-transformers' ``all_gather_with_grad``); ``"local"``: only
            the local shard keeps its gradient, the other shards are constants.

    Returns:
        The gathered tensor and the global row index of this process's first row.
    """
    if grad not in ("all", "local"):
        raise ValueError(f"grad must be 'all' or 'local', got {grad!r}")
    if not distributed():
        return local, 0
    world, rank = dist.get_world_size(), dist.get_rank()
    size = torch.tensor([local.shape[0]], device=local.device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    counts = [int(s.item()) for s in sizes]
    longest = max(counts)
    padded = local
    if local.shape[0] < longest:
        pad = local.new_zeros((longest - local.shape[0], *local.shape[1:]))
        padded = torch.cat([local, pad], dim=0)
    if grad == "all":
        from sentence_transformers.util import all_gather_with_grad

        shards = list(all_gather_with_grad(padded).split(longest, dim=0))
    else:
        shards = [torch.zeros_like(padded) for _ in range(world)]
        dist.all_gather(shards, padded.detach())
    parts = [shard[:count] for shard, count in zip(shards, counts)]
    if grad == "local":
        parts[rank] = local
    return torch.cat(parts, dim=0), sum(counts[:rank])

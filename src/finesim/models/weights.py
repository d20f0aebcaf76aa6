"""Hashing a torch module's weights: the state (names, dtypes, shapes, bytes, in ``state_dict`` order) fed into a
SHA-256. :mod:`finesim.evaluation.fingerprint` builds a model's fingerprint on it; a CASE encoder records its weights'
hash (:func:`weights_sha256`) so a cache or a saved projection is never used with another model of the same name."""

from __future__ import annotations

import hashlib
from typing import Any


def update_with_state(digest: Any, module: Any, prefix: str, skip: tuple[str, ...] = ()) -> None:
    """Feed a ``torch.nn.Module``'s state (names, dtypes, shapes, bytes) into ``digest``, less names under ``skip``."""
    import torch

    for name, tensor in module.state_dict().items():
        if name.startswith(skip):
            continue
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{prefix}{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        if t.numel():
            digest.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()))


def weights_sha256(module: Any) -> str:
    """SHA-256 of a ``torch.nn.Module``'s state alone: which weights it holds."""
    digest = hashlib.sha256()
    update_with_state(digest, module, "")
    return digest.hexdigest()

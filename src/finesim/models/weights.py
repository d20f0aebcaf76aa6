"""Hashing a torch module's weights: the state (names, dtypes, shapes, bytes, in ``state_dict`` order) fed into a
SHA-256. :mod:`finesim.evaluation.fingerprint` builds a model's fingerprint on it; a CASE encoder records its weights'
hash (:func:`weights_sha256`) so a cache or a saved projection is never used with another model of the same name."""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
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


def is_unreadable_weights_error(err: BaseException) -> bool:
    """Whether ``err`` is a weights file that cannot be read: safetensors' ``SafetensorError`` (a truncated or
    corrupt header) or torch's zip reader failing on a ``pytorch_model.bin``."""
    if type(err).__name__ == "SafetensorError":
        return True
    return isinstance(err, RuntimeError) and "PytorchStreamReader" in str(err)


def damaged_weights_files(folder: str | Path) -> list[Path]:
    """The weights files under ``folder`` (sub-folders of a module included) whose header cannot be read: a
    ``*.safetensors`` that safetensors cannot open, a ``*.bin`` that is not a whole zip archive."""
    root = Path(folder)
    if not root.is_dir():
        return []
    damaged = []
    for file in sorted(root.rglob("*.safetensors")):
        from safetensors import safe_open

        try:
            with safe_open(str(file), framework="pt"):
                pass
        except Exception:  # SafetensorError is not importable by name in every safetensors version
            damaged.append(file)
    damaged += [file for file in sorted(root.rglob("*.bin")) if not zipfile.is_zipfile(file)]
    return damaged


@contextmanager
def readable_weights(folder: str | Path) -> Iterator[None]:
    """Load a model from ``folder`` inside this block: a weights file that cannot be read (an interrupted download
    or copy) becomes a ``ValueError`` naming the file, instead of the reader's error that names none."""
    try:
        yield
    except Exception as err:
        known = is_unreadable_weights_error(err)
        # torch reads a cut pytorch_model.bin with "[Errno 22] Invalid argument" (an OSError): any OSError or
        # RuntimeError counts when a weights file of the folder is damaged
        if not known and not isinstance(err, (OSError, RuntimeError)):
            raise
        damaged = damaged_weights_files(folder)
        if not known and not damaged:
            raise
        where = ", ".join(str(f) for f in damaged) or str(folder)
        raise ValueError(
            f"{where}: the model's weights cannot be read ({' '.join(str(err).split())}); the file is damaged or "
            "incomplete (an interrupted download or copy?): copy or download the model again"
        ) from err

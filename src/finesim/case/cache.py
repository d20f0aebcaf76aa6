"""On-disk embedding cache keyed by model, prompt and text.

Layout: ``<root>/<namespace>/`` holds ``meta.json`` (the model description the namespace was made from) and
shards ``part-<id>.npy`` (float32, one row per text) with ``part-<id>.keys.json`` (the SHA-256 of each
row's exact encoder input string, which already contains the prompt). The namespace is a hash of the model
description (name or path, pooling, maximum length, normalisation), so the full key is model + prompt +
text. A shard's keys file is written (atomically) after its matrix, so a crash never leaves keys pointing
at missing rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from finesim.results import atomic_write


def configured_cache_dir() -> Path | None:
    """The embedding cache folder set in the environment: ``$FINESIM_CASE_CACHE``, else ``$FINESIM_CACHE/case``,
    else None (no cache configured)."""
    if os.environ.get("FINESIM_CASE_CACHE"):
        return Path(os.environ["FINESIM_CASE_CACHE"]).expanduser()
    if os.environ.get("FINESIM_CACHE"):
        return Path(os.environ["FINESIM_CACHE"]).expanduser() / "case"
    return None


def text_key(text: str) -> str:
    """SHA-256 hex digest of the exact encoder input string."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def namespace_for(model_description: dict[str, Any]) -> str:
    """A readable, collision-safe folder name for a model description."""
    blob = json.dumps(model_description, sort_keys=True, default=str)
    digest = hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
    name = str(model_description.get("model", "model")).rstrip("/").split("/")[-1]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name)[:48] or "model"
    return f"{slug}-{digest}"


class EmbeddingCache:
    """Embeddings of encoder input strings for one model description, persisted under ``root``.

    Args:
        root: the cache folder (shared by all models; each model gets its own namespace inside).
        model_description: what identifies the encoder (see :func:`finesim.case.encoding.describe_model`).

    Attributes:
        hits, misses: over the :meth:`get_or_encode` calls of this object, ``misses`` counts distinct texts
            that had to be encoded and ``hits`` every other requested text (served without encoding).
    """

    def __init__(self, root: str | Path, model_description: dict[str, Any]) -> None:
        self.root = Path(root).expanduser()  # "~/.cache/..." from Python or a recipe, as from the environment
        self.model_description = dict(model_description)
        self.folder = self.root / namespace_for(self.model_description)
        self.folder.mkdir(parents=True, exist_ok=True)
        meta = self.folder / "meta.json"
        if meta.is_file():
            stored = json.loads(meta.read_text(encoding="utf-8"))
            if stored.get("model") != json.loads(json.dumps(self.model_description, default=str)):
                raise ValueError(f"{meta}: cache namespace collision (stored model description differs)")
        else:
            payload = json.dumps({"model": self.model_description}, indent=2, default=str).encode("utf-8")
            atomic_write(meta, lambda fh: fh.write(payload))
        self._index: dict[str, tuple[str, int]] = {}
        self._parts: dict[str, np.ndarray] = {}
        self._loaded_parts: set[str] = set()
        self.hits = 0
        self.misses = 0
        self._load_index()

    def _load_index(self) -> None:
        """Index the shards not indexed yet (including those written since by other objects or processes)."""
        for keys_file in sorted(self.folder.glob("part-*.keys.json")):
            number = keys_file.name[len("part-") : -len(".keys.json")]
            if number in self._loaded_parts:
                continue
            self._loaded_parts.add(number)
            keys = json.loads(keys_file.read_text(encoding="utf-8"))
            matrix_file = self.folder / f"part-{number}.npy"
            if not matrix_file.is_file():
                raise ValueError(f"{keys_file}: its matrix {matrix_file.name} is missing; delete the keys file")
            for row, key in enumerate(keys):
                self._index.setdefault(key, (number, row))

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, text: str) -> bool:
        return text_key(text) in self._index

    def _matrix(self, part: str) -> np.ndarray:
        if part not in self._parts:
            self._parts[part] = np.load(self.folder / f"part-{part}.npy", mmap_mode="r")
        return self._parts[part]

    def get(self, texts: Sequence[str]) -> np.ndarray:
        """Stored embeddings of ``texts`` (all must be cached), one row each."""
        rows = []
        for text in texts:
            loc = self._index.get(text_key(text))
            if loc is None:
                raise KeyError(f"not in the embedding cache: {text[:80]!r}")
            rows.append(np.asarray(self._matrix(loc[0])[loc[1]], dtype=np.float32))
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack(rows)

    def put(self, texts: Sequence[str], embeddings: np.ndarray) -> None:
        """Store embeddings (one row per text) as a new shard; texts already stored are skipped."""
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if embeddings.ndim != 2 or embeddings.shape[0] != len(texts):
            raise ValueError(f"expected a ({len(texts)}, d) matrix, got shape {embeddings.shape}")
        keep = [i for i, t in enumerate(texts) if text_key(t) not in self._index]
        keep = list({text_key(texts[i]): i for i in keep}.values())
        if not keep:
            return
        # A unique shard name (time + process + random), so concurrent writers never overwrite each other.
        number = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        matrix = np.ascontiguousarray(embeddings[keep])
        keys = [text_key(texts[i]) for i in keep]
        atomic_write(self.folder / f"part-{number}.npy", lambda fh: np.save(fh, matrix))
        payload = json.dumps(keys).encode("utf-8")
        atomic_write(self.folder / f"part-{number}.keys.json", lambda fh: fh.write(payload))
        self._loaded_parts.add(number)
        for row, key in enumerate(keys):
            self._index[key] = (number, row)

    def get_or_encode(
        self,
        texts: Sequence[str],
        encode: Callable[[list[str]], np.ndarray],
        *,
        chunk_size: int = 2048,
    ) -> np.ndarray:
        """Embeddings of ``texts``; only texts not yet cached are passed to ``encode`` (each distinct one
        once).

        New embeddings are stored every ``chunk_size`` texts, so an interrupted run keeps its progress.
        """
        missing = list(dict.fromkeys(t for t in texts if text_key(t) not in self._index))
        if missing:
            self._load_index()
            missing = [t for t in missing if text_key(t) not in self._index]
        self.misses += len(missing)
        self.hits += len(texts) - len(missing)
        for start in range(0, len(missing), chunk_size):
            chunk = missing[start : start + chunk_size]
            self.put(chunk, encode(chunk))
        return self.get(texts)

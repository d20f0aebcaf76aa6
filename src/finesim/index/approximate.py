"""Approximate search with faiss (``faiss-cpu``): inner-product IVF or HNSW indexes over L2-normalised vectors.

- Bi-encoder and CASE indexes keep one faiss index per stored condition, over that condition's corpus embeddings
  (normalised, so the inner product is the cosine the scorer gives).
- Tri-encoder indexes keep one faiss index over the normalised stage vectors; a query asks it for candidates with
  :meth:`TriQuery.candidate_vector` and re-scores them exactly with the condition fused.

A faiss index is a derived file in ``ann/`` (``<name>.faiss`` and ``<name>.json``, which records what it covers:
kind, parameters, row count). When the corpus has grown since (``add``), the next approximate search adds the new
rows to it and writes it again (atomically). :func:`recall_at_k` measures the result against exact search.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from finesim.index.errors import IndexFormatError
from finesim.index.store import TempHold, temp_path, writer_lock
from finesim.results import file_sha256, write_json_atomic

logger = logging.getLogger(__name__)
ANN_KINDS = ("hnsw", "ivf")
DEFAULT_PARAMS: dict[str, dict[str, int | None]] = {
    # ef_search_per_result / ef_search_max: a search for n rows uses efSearch = max(ef_search, min(ef_search_per_result
    # * n, ef_search_max)). faiss sizes its result queue to n but stops the graph walk by efSearch alone, so with a
    # fixed ef_search of 128 a two-stage first stage asking for N = 200 or 400 candidates returned only part of the
    # exact first stage's top N (benchmarks/results/two_stage_search_hnsw_ef.json, "first_stage_coverage"). The cap
    # bounds the walk when thousands of rows are asked (a tri-encoder first stage over-fetches 10 N). 0 per result
    # keeps ef_search fixed (the rule before).
    "hnsw": {"m": 32, "ef_construction": 64, "ef_search": 128, "ef_search_per_result": 4, "ef_search_max": 4096},
    "ivf": {"nlist": None, "nprobe": 16},  # nlist None: about sqrt(n), at most n // 39 (faiss's training rule)
}
# the parameters a search reads (changing them needs no rebuild of a stored index); the others shape the build
SEARCH_PARAMS: dict[str, tuple[str, ...]] = {
    "hnsw": ("ef_search", "ef_search_per_result", "ef_search_max"),
    "ivf": ("nprobe",),
}


def import_faiss() -> Any:
    """``faiss`` (the ``faiss-cpu`` package), or an ImportError saying what to install."""
    try:
        import faiss
    except ImportError:
        raise ImportError("approximate search needs faiss: pip install faiss-cpu") from None
    return faiss


def ann_params(kind: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The parameters of an approximate index: the defaults of ``kind`` updated with ``params`` (names checked)."""
    if kind not in ANN_KINDS:
        raise ValueError(f"unknown approximate index {kind!r}; choose one of {list(ANN_KINDS)}")
    out = dict(DEFAULT_PARAMS[kind])
    for key, value in (params or {}).items():
        if key not in out:
            raise ValueError(f"unknown {kind} parameter {key!r}; known: {sorted(out)}")
        out[key] = value
    return out


def build_params(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of ``params`` that shape a built index (the search-time ones left out): a stored index whose
    build parameters match is reused whatever the search parameters are now."""
    return {key: value for key, value in params.items() if key not in SEARCH_PARAMS[kind]}


def hnsw_ef_search(params: dict[str, Any], n: int) -> int:
    """HNSW ``efSearch`` for a search of ``n`` rows: ``ef_search``, widened to ``ef_search_per_result * n`` up to
    ``ef_search_max``."""
    widened = min(int(params["ef_search_per_result"]) * n, int(params["ef_search_max"]))
    return max(int(params["ef_search"]), widened)


def ivf_lists(n: int, requested: int | None) -> int:
    """IVF list count: ``requested``, else about sqrt(n); never more than n // 39 (at least 1)."""
    wanted = requested if requested else round(math.sqrt(n))
    return max(1, min(int(wanted), n // 39))


def normalized(x: np.ndarray) -> np.ndarray:
    """float32 rows scaled to unit length (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.ascontiguousarray(x / np.maximum(norms, 1e-12))


def new_ann(kind: str, dim: int, n: int, params: dict[str, Any], sample: Callable[[int], np.ndarray]) -> Any:
    """An empty (trained, for IVF) inner-product faiss index; ``sample(m)`` gives up to ``m`` normalised rows."""
    faiss = import_faiss()
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, int(params["m"]), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(params["ef_construction"])
        return index
    nlist = ivf_lists(n, params.get("nlist"))
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    index.train(sample(max(64 * nlist, 1)))
    return index


class AnnFile:
    """One faiss index in ``ann/`` and its description.

    Args:
        folder: the ``ann`` folder. name: the file stem. kind: ``hnsw`` or ``ivf``. params: its parameters.
    """

    def __init__(self, folder: Path, name: str, kind: str, params: dict[str, Any]) -> None:
        self.folder = Path(folder)
        self.name = name
        self.kind = kind
        self.params = ann_params(kind, params)
        self.index: Any = None
        self.count = 0

    @property
    def index_file(self) -> Path:
        return self.folder / f"{self.name}.faiss"

    @property
    def meta_file(self) -> Path:
        return self.folder / f"{self.name}.json"

    def load(self) -> bool:
        """Read the stored index when there is one with the same kind and parameters; whether one was read.

        Read without a lock (a read-only folder, a slow read of a large file). A pair that disagrees on the row
        count is read again under the ``ann/`` folder's lock, which :meth:`save` holds while it replaces the two
        (it may have been caught between them); still disagreeing (a writer killed between its two renames), or
        with no lock to take (a read-only folder), it is not read: it is rebuilt, with a warning."""
        found = self._read()
        if found is None:
            return False
        index, meta = found
        if int(index.ntotal) != int(meta.get("count", -1)):
            with contextlib.suppress(OSError):  # a read-only folder: no writer to wait for
                with writer_lock(self.folder):
                    found = self._read()
                if found is None:
                    return False
                index, meta = found
        if int(index.ntotal) != int(meta.get("count", -1)):
            logger.warning(
                "%s holds %d vectors but %s says %s: the pair was not written together; rebuilding it",
                self.index_file, index.ntotal, self.meta_file.name, meta.get("count"),
            )  # fmt: skip
            return False
        self.index, self.count = index, int(index.ntotal)
        return True

    def _read(self) -> tuple[Any, dict[str, Any]] | None:
        """The stored faiss index and its description, or None when there is none of this kind and parameters."""
        if not (self.index_file.is_file() and self.meta_file.is_file()):
            return None
        try:
            meta = json.loads(self.meta_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise IndexFormatError(self.meta_file, f"not valid JSON ({err}); delete it to rebuild") from None
        if not self._same_build(meta):
            return None
        faiss = import_faiss()
        try:
            index = faiss.read_index(str(self.index_file))
        except RuntimeError as err:
            problem = f"unreadable faiss index ({err}); delete it to rebuild"
            raise IndexFormatError(self.index_file, problem) from None
        return index, meta

    def update(
        self,
        total: int,
        dim: int,
        rows: Callable[[int, int], Iterator[np.ndarray]],
        sample: Callable[[int], np.ndarray],
        extra: dict[str, Any] | None = None,
    ) -> bool:
        """Make the index cover rows ``0 .. total - 1``: build it, or add the rows it lacks; save when changed.

        ``rows(start, stop)`` yields normalised row blocks in order. Returns whether anything was added. A stored
        index that covers more than ``total`` rows was written by a process that sees rows added to the corpus since
        this one opened it (parts are only ever appended): this process builds its own in memory for the rows it
        sees and leaves the stored one, which is newer, as it is.
        """
        save = True
        if self.index is not None and self.count > total:
            logger.info(
                "%s covers %d rows, %d more than this process's view of the index (rows added by another process "
                "since it was opened): building one for this view in memory",
                self.index_file, self.count, self.count - total,
            )  # fmt: skip
            self.index, save = None, False
        if self.index is None:
            self.index, self.count = new_ann(self.kind, dim, total, self.params, sample), 0
        if self.count == total:
            return False
        try:
            for block in rows(self.count, total):
                self.index.add(block)
        finally:  # a block that failed to read (a damaged file, a part not embedded yet): a retry goes on from here
            self.count = int(self.index.ntotal)
        if save:
            self.save(extra)
        return True

    def save(self, extra: dict[str, Any] | None = None) -> None:
        """Write the faiss index and its description, with the index file's SHA-256 (each through a temporary file
        named with this process's pid, held locked while written (:class:`~finesim.index.store.TempHold`), and a
        rename), both under the ``ann/`` folder's lock so that no other writer comes between the two. A stored index
        that covers more rows than this one (saved meanwhile by a process that sees rows added since this one
        opened the index) is left in place."""
        faiss = import_faiss()
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = temp_path(self.index_file)
        hold = TempHold(tmp, create=True)  # live to remove_leftovers in any pid namespace while it is written
        try:
            faiss.write_index(self.index, str(tmp))
            digest = file_sha256(tmp)
            with writer_lock(self.folder):
                if self._stored_count() > self.count:
                    logger.info("%s: a newer index covering more rows is stored; leaving it", self.index_file)
                    tmp.unlink(missing_ok=True)
                    return
                tmp.replace(self.index_file)
                write_json_atomic(
                    self.meta_file,
                    {"kind": self.kind, "params": self.params, "count": self.count, "sha256": digest, **(extra or {})},
                    fsync=True,
                )
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            hold.release()

    def _stored_count(self) -> int:
        """The row count the stored description records for an index of this kind and build parameters (-1: none,
        another kind or parameters, unreadable)."""
        try:
            meta = json.loads(self.meta_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return -1
        return int(meta.get("count", -1)) if self._same_build(meta) else -1

    def _same_build(self, meta: Any) -> bool:
        """Whether a stored description is of an index of this kind and build parameters (search ones may differ)."""
        if not isinstance(meta, dict) or meta.get("kind") != self.kind or not isinstance(meta.get("params"), dict):
            return False
        return build_params(self.kind, meta["params"]) == build_params(self.kind, self.params)

    def search(self, vector: np.ndarray, n: int) -> np.ndarray:
        """Row ids of the (up to) ``n`` best inner products with ``vector``, with the search-time parameters (HNSW
        ``efSearch`` from :func:`hnsw_ef_search`, IVF ``nprobe``) passed per call, so concurrent searches of
        different ``n`` do not change each other's."""
        faiss = import_faiss()
        n = min(n, self.count)
        if n <= 0:
            return np.zeros(0, dtype=np.int64)
        if self.kind == "hnsw":
            search_params = faiss.SearchParametersHNSW(efSearch=hnsw_ef_search(self.params, n))
        else:
            search_params = faiss.SearchParametersIVF(nprobe=min(int(self.params["nprobe"]), int(self.index.nlist)))
        query = np.ascontiguousarray(np.asarray(vector, dtype=np.float32).reshape(1, -1))
        _, ids = self.index.search(query, n, params=search_params)
        return ids[0][ids[0] >= 0].astype(np.int64)


def recall_at_k(exact: Iterable[int], approximate: Iterable[int], k: int = 10) -> float:
    """Share of the exact top-``k`` found in the approximate top-``k`` (1.0 when the exact list is empty)."""
    truth = [int(i) for i in list(exact)[:k]]
    if not truth:
        return 1.0
    found = {int(i) for i in list(approximate)[:k]}
    return sum(1 for i in truth if i in found) / len(truth)

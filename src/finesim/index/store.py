"""The index folder on disk: manifest, parts, condition caches; validation and atomic commits.

Layout (see docs/search.md)::

    DIR/
      manifest.json                     what the index is: model, encoder, dims, dtype, count, parts, corpus files
      parts/<part>/texts.jsonl          one JSON string per line: the texts of one build or add, in order
      parts/<part>/offsets.npy          int64 (count + 1,): byte offset of each line (reads one text without a scan)
      parts/<part>/sentences.npy        tri-encoders: (count, dim) condition-independent sentence vectors
      conditions/<key>/condition.json   bi / CASE: one folder per condition (key: hash of model and condition)
      conditions/<key>/<part>.npy       ... its (count, dim) L2-normalised corpus embeddings, one file per part
      ann/<name>.faiss, ann/<name>.json approximate-search indexes (faiss) and what they cover
      .lock                             writers (build, add) hold an exclusive lock on it

Parts are immutable once written. A writer builds a part in ``parts/.tmp-<part>/`` and renames it into place, then
replaces ``manifest.json`` atomically: the manifest is the commit point, and a crash before it leaves the old index
(the old manifest and the parts it lists) valid. Opening checks every file the manifest lists: present, the expected
shape and dtype, the exact byte length (a truncated file is refused, naming it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from finesim.index.errors import IndexFormatError
from finesim.results import atomic_write, write_json_atomic

FORMAT = "finesim-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
PARTS = "parts"
CONDITIONS = "conditions"
ANN = "ann"
LOCK = ".lock"
TEXTS = "texts.jsonl"
OFFSETS = "offsets.npy"
SENTENCES = "sentences"  # the array name of the tri-encoder's sentence vectors
DTYPES = ("float32", "float16")
STALE_SECONDS = 24 * 3600


@dataclass(frozen=True)
class Part:
    """One immutable slice of the corpus: rows ``start .. start + count - 1``."""

    id: str
    start: int
    count: int

    @property
    def stop(self) -> int:
        return self.start + self.count


# ---------------------------------------------------------------- .npy files


def npy_layout(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, header bytes)`` of a ``.npy`` file, read from its header; an unreadable header is an
    :class:`IndexFormatError` naming the file."""
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            offset = fh.tell()
    except FileNotFoundError:
        raise IndexFormatError(path, "missing") from None
    except (ValueError, OSError, EOFError) as err:
        raise IndexFormatError(path, f"not a readable .npy array ({err})") from None
    if fortran:
        raise IndexFormatError(path, "stored in Fortran order; the index writes C order")
    return tuple(shape), np.dtype(dtype), offset


def check_npy(path: Path, shape: tuple[int, ...], dtype: str | np.dtype, what: str = "array") -> None:
    """Refuse (naming the file) a ``.npy`` file that is missing, has another shape or dtype, or is truncated or
    padded (its byte length is not header + shape x itemsize)."""
    if not path.is_file():
        raise IndexFormatError(path, f"missing ({what} listed in the manifest)")
    found_shape, found_dtype, offset = npy_layout(path)
    if found_shape != tuple(shape):
        raise IndexFormatError(path, f"{what} has shape {found_shape}, expected {tuple(shape)}")
    if found_dtype != np.dtype(dtype):
        raise IndexFormatError(path, f"{what} has dtype {found_dtype}, expected {np.dtype(dtype)}")
    expected = offset + int(np.prod(shape, dtype=np.int64)) * found_dtype.itemsize
    size = path.stat().st_size
    if size < expected:
        raise IndexFormatError(path, f"truncated: {size} bytes, expected {expected} ({what} of shape {tuple(shape)})")
    if size > expected:
        raise IndexFormatError(path, f"{size - expected} bytes longer than its header says ({what})")


def load_npy(path: Path, shape: tuple[int, ...], dtype: str | np.dtype, what: str = "array") -> np.ndarray:
    """A checked (:func:`check_npy`), read-only memory map of a ``.npy`` file."""
    check_npy(path, shape, dtype, what)
    return np.load(path, mmap_mode="r")


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def write_npy_atomic(path: Path, array: np.ndarray) -> Path:
    """Write ``array`` as ``.npy`` through a temporary file and a rename (never half-written)."""
    data = np.ascontiguousarray(array)
    return atomic_write(path, lambda fh: np.save(fh, data))


# ---------------------------------------------------------------- part writer


def new_part_id(sequence: int) -> str:
    """A part name: its sequence number and a random tag (a crashed writer's leftovers never collide)."""
    return f"{sequence:06d}-{uuid.uuid4().hex[:8]}"


class PartWriter:
    """Write one part (texts and arrays) into ``parts/.tmp-<id>/``; :meth:`finish` renames it into place.

    Args:
        root: the index folder. part_id: the part's name. count: its number of rows.
        arrays: array name -> ``(dim, dtype)`` of the ``(count, dim)`` arrays the part holds.
    """

    def __init__(self, root: Path, part_id: str, count: int, arrays: dict[str, tuple[int, str]]) -> None:
        self.root = Path(root)
        self.part_id = part_id
        self.count = count
        self.tmp = self.root / PARTS / f".tmp-{part_id}"
        self.tmp.mkdir(parents=True, exist_ok=False)
        self._texts = open(self.tmp / TEXTS, "wb")
        self._digest = hashlib.sha256()
        self._offsets = np.zeros(count + 1, dtype=np.int64)
        self._written_texts = 0
        self._arrays = {
            name: np.lib.format.open_memmap(self.tmp / f"{name}.npy", mode="w+", dtype=dtype, shape=(count, dim))
            for name, (dim, dtype) in arrays.items()
        }
        self.meta = {name: {"dim": dim, "dtype": dtype} for name, (dim, dtype) in arrays.items()}

    def write_texts(self, texts: Sequence[str]) -> None:
        """Append texts (in corpus order)."""
        for text in texts:
            if self._written_texts >= self.count:
                raise ValueError(f"more texts than the {self.count} this part was opened for")
            line = json.dumps(text, ensure_ascii=False).encode("utf-8") + b"\n"
            self._texts.write(line)
            self._digest.update(line)
            self._written_texts += 1
            self._offsets[self._written_texts] = self._offsets[self._written_texts - 1] + len(line)

    def write_rows(self, name: str, start: int, rows: np.ndarray) -> None:
        """Put ``rows`` into array ``name`` at rows ``start ..``."""
        self._arrays[name][start : start + len(rows)] = rows

    def finish(self) -> dict[str, Any]:
        """Flush, fsync and move the part into place; returns its manifest entry (without ``start``)."""
        if self._written_texts != self.count:
            raise ValueError(f"part {self.part_id}: {self._written_texts} texts written, {self.count} expected")
        self._texts.flush()
        os.fsync(self._texts.fileno())
        self._texts.close()
        np.save(self.tmp / OFFSETS, self._offsets)
        _fsync(self.tmp / OFFSETS)
        arrays = {}
        for name, array in self._arrays.items():
            array.flush()
            del array
            _fsync(self.tmp / f"{name}.npy")
            arrays[name] = {"file": f"{name}.npy", "dim": self.meta[name]["dim"], "dtype": self.meta[name]["dtype"]}
        self._arrays = {}
        final = self.root / PARTS / self.part_id
        os.replace(self.tmp, final)
        return {
            "id": self.part_id,
            "count": self.count,
            "texts_bytes": int(self._offsets[-1]),
            "texts_sha256": self._digest.hexdigest(),
            "arrays": arrays,
        }

    def abort(self) -> None:
        """Remove the temporary folder (after a failure)."""
        with contextlib.suppress(Exception):
            self._texts.close()
        self._arrays = {}
        shutil.rmtree(self.tmp, ignore_errors=True)


class ArrayWriter:
    """Write one ``(count, dim)`` array through a temporary file next to ``path``; :meth:`finish` renames it."""

    def __init__(self, path: Path, count: int, dim: int, dtype: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:8]}.tmp")
        self._array = np.lib.format.open_memmap(self.tmp, mode="w+", dtype=dtype, shape=(count, dim))

    def write_rows(self, start: int, rows: np.ndarray) -> None:
        self._array[start : start + len(rows)] = rows

    def finish(self) -> None:
        self._array.flush()
        self._array = None
        _fsync(self.tmp)
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self._array = None
        self.tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------- the store


class IndexStore:
    """Read access to a committed index folder (one manifest version) and the writes around it.

    ``IndexStore.open(root)`` reads and validates the manifest and every file it lists. The object keeps that
    manifest: a concurrent ``add`` by another process becomes visible when the index is opened again.
    """

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = Path(root)
        self.manifest = manifest
        self.parts: list[Part] = []
        start = 0
        for entry in manifest["parts"]:
            self.parts.append(Part(str(entry["id"]), start, int(entry["count"])))
            start += int(entry["count"])
        self._maps: dict[tuple[str, str], np.ndarray] = {}
        self._offsets: dict[str, np.ndarray] = {}

    # -------------------------------------------------------- opening and checking

    @classmethod
    def open(cls, root: str | Path) -> IndexStore:
        """Open and check an index folder (:meth:`validate`)."""
        folder = Path(root)
        manifest_file = folder / MANIFEST
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: no such index folder")
        if not manifest_file.is_file():
            raise IndexFormatError(manifest_file, "missing: not an index folder (or its build never finished)")
        try:
            manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise IndexFormatError(manifest_file, f"not valid JSON ({err})") from None
        check_manifest(manifest_file, manifest)
        store = cls(folder, manifest)
        store.validate()
        return store

    def validate(self) -> None:
        """Check every file the manifest lists (presence, shape, dtype, byte length) and that the counts add up."""
        total = sum(p.count for p in self.parts)
        if total != int(self.manifest["count"]):
            raise IndexFormatError(
                self.root / MANIFEST, f"count is {self.manifest['count']} but its parts hold {total} rows"
            )
        for part, entry in zip(self.parts, self.manifest["parts"]):
            folder = self.part_dir(part)
            if not folder.is_dir():
                raise IndexFormatError(folder, "missing (a part listed in the manifest)")
            texts = folder / TEXTS
            if not texts.is_file():
                raise IndexFormatError(texts, "missing (the texts of a part listed in the manifest)")
            size = texts.stat().st_size
            if size != int(entry["texts_bytes"]):
                problem = "truncated" if size < int(entry["texts_bytes"]) else "longer than recorded"
                raise IndexFormatError(texts, f"{problem}: {size} bytes, the manifest says {entry['texts_bytes']}")
            offsets = load_npy(folder / OFFSETS, (part.count + 1,), np.int64, "text offsets")
            if int(offsets[-1]) != size:
                raise IndexFormatError(folder / OFFSETS, f"ends at byte {int(offsets[-1])}, {TEXTS} has {size}")
            for name, meta in entry.get("arrays", {}).items():
                check_npy(folder / meta["file"], (part.count, int(meta["dim"])), meta["dtype"], f"{name} embeddings")

    def verify_hashes(self) -> None:
        """Recompute the SHA-256 of every texts file against the manifest (slow on large corpora)."""
        from finesim.results import file_sha256

        for part, entry in zip(self.parts, self.manifest["parts"]):
            texts = self.part_dir(part) / TEXTS
            if file_sha256(texts) != entry["texts_sha256"]:
                raise IndexFormatError(texts, "content differs from the SHA-256 recorded in the manifest")

    # -------------------------------------------------------- reading

    @property
    def count(self) -> int:
        return int(self.manifest["count"])

    @property
    def dim(self) -> int:
        return int(self.manifest["dims"]["index"])

    @property
    def dtype(self) -> str:
        return str(self.manifest["dtype"])

    def part_dir(self, part: Part) -> Path:
        return self.root / PARTS / part.id

    def array(self, part: Part, name: str = SENTENCES) -> np.ndarray:
        """The (validated at open) memory-mapped array ``name`` of a part."""
        key = (part.id, name)
        if key not in self._maps:
            self._maps[key] = np.load(self.part_dir(part) / f"{name}.npy", mmap_mode="r")
        return self._maps[key]

    def _part_offsets(self, part: Part) -> np.ndarray:
        if part.id not in self._offsets:
            self._offsets[part.id] = np.load(self.part_dir(part) / OFFSETS, mmap_mode="r")
        return self._offsets[part.id]

    def locate(self, row: int) -> tuple[Part, int]:
        """The part holding global row ``row`` and the row within it."""
        if not 0 <= row < self.count:
            raise IndexError(f"row {row} is outside the index (0 .. {self.count - 1})")
        for part in self.parts:
            if row < part.stop:
                return part, row - part.start
        raise AssertionError("unreachable")

    def texts(self, rows: Sequence[int]) -> list[str]:
        """The texts of global rows ``rows`` (read one line each through the offsets)."""
        out = []
        handles: dict[str, Any] = {}
        try:
            for row in rows:
                part, local = self.locate(int(row))
                offsets = self._part_offsets(part)
                fh = handles.get(part.id)
                if fh is None:
                    fh = handles[part.id] = open(self.part_dir(part) / TEXTS, "rb")
                fh.seek(int(offsets[local]))
                out.append(json.loads(fh.read(int(offsets[local + 1] - offsets[local]))))
        finally:
            for fh in handles.values():
                fh.close()
        return out

    def iter_texts(self, part: Part, chunk: int) -> Iterator[list[str]]:
        """The texts of a part in chunks of at most ``chunk``."""
        batch: list[str] = []
        with open(self.part_dir(part) / TEXTS, encoding="utf-8") as fh:
            for line in fh:
                batch.append(json.loads(line))
                if len(batch) == chunk:
                    yield batch
                    batch = []
        if batch:
            yield batch

    # -------------------------------------------------------- condition caches

    def condition_dir(self, key: str) -> Path:
        return self.root / CONDITIONS / key

    def condition_file(self, key: str, part: Part) -> Path:
        return self.condition_dir(key) / f"{part.id}.npy"

    def condition_array(self, key: str, part: Part) -> np.ndarray | None:
        """The cached embeddings of a part under a condition (checked), or None when not computed yet."""
        path = self.condition_file(key, part)
        if not path.exists():
            return None
        cache_key = (part.id, f"condition:{key}")
        if cache_key not in self._maps:
            try:
                self._maps[cache_key] = load_npy(path, (part.count, self.dim), self.dtype, "condition embeddings")
            except IndexFormatError as err:
                raise IndexFormatError(path, f"{err.problem}; delete the file to compute it again") from None
        return self._maps[cache_key]

    def write_condition_meta(self, key: str, meta: dict[str, Any]) -> None:
        path = self.condition_dir(key) / "condition.json"
        if not path.is_file():
            write_json_atomic(path, meta)

    def write_condition_array(self, key: str, part: Part, array: np.ndarray) -> None:
        """Store a part's embeddings under a condition (atomically: a reader sees all of it or nothing)."""
        write_npy_atomic(self.condition_file(key, part), np.asarray(array, dtype=self.dtype))

    def stored_conditions(self) -> list[dict[str, Any]]:
        """The condition caches present: condition text, key, and how many of the parts they cover."""
        out = []
        folder = self.root / CONDITIONS
        if not folder.is_dir():
            return out
        for sub in sorted(folder.iterdir()):
            meta_file = sub / "condition.json"
            if not meta_file.is_file():
                continue
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
            if meta.get("model_sha256") != self.manifest["model"]["sha256"]:
                continue
            covered = sum(1 for p in self.parts if (sub / f"{p.id}.npy").is_file())
            out.append({"condition": meta["condition"], "key": sub.name, "parts": covered})
        return out

    def describe(self) -> dict[str, Any]:
        """The manifest's description, the stored conditions and approximate indexes, and the size on disk."""
        manifest = self.manifest
        ann = self.root / ANN
        return {
            "path": str(self.root),
            "model": manifest["model"],
            "encoder": manifest["encoder"],
            "dims": manifest["dims"],
            "dtype": manifest["dtype"],
            "count": manifest["count"],
            "parts": [{"id": p.id, "start": p.start, "count": p.count} for p in self.parts],
            "corpus": manifest.get("corpus", []),
            "conditions": self.stored_conditions(),
            "approximate": manifest.get("approximate"),
            "approximate_indexes": sorted(p.stem for p in ann.glob("*.faiss")) if ann.is_dir() else [],
            "finesim_version": manifest.get("finesim_version"),
            "created": manifest.get("created"),
            "updated": manifest.get("updated"),
            "bytes": sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file()),
        }

    # -------------------------------------------------------- writing

    @contextlib.contextmanager
    def write_lock(self) -> Iterator[None]:
        """Hold the index's exclusive writer lock (a no-op where ``fcntl`` is missing)."""
        with writer_lock(self.root):
            yield

    def commit(self, manifest: dict[str, Any]) -> None:
        """Replace the manifest atomically (the commit point of build and add)."""
        write_json_atomic(self.root / MANIFEST, manifest)
        with contextlib.suppress(OSError):
            fd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


@contextlib.contextmanager
def writer_lock(root: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``root/.lock`` for the duration of a write."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def remove_leftovers(root: Path, manifest: dict[str, Any] | None) -> list[str]:
    """Delete what a crashed writer left (temporary part folders, parts the manifest does not list, condition
    files of such parts, temporary files older than a day); call it holding the writer lock. Returns the names
    removed."""
    listed = {str(p["id"]) for p in manifest["parts"]} if manifest else set()
    removed = []
    parts = root / PARTS
    if parts.is_dir():
        for sub in parts.iterdir():
            if sub.name not in listed:
                shutil.rmtree(sub, ignore_errors=True)
                removed.append(f"{PARTS}/{sub.name}")
    conditions = root / CONDITIONS
    if conditions.is_dir():
        for sub in conditions.iterdir():
            for file in sub.glob("*.npy"):
                if file.stem not in listed:
                    file.unlink(missing_ok=True)
                    removed.append(f"{CONDITIONS}/{sub.name}/{file.name}")
    # temporary files of condition caches and faiss indexes: a search in another process may be writing one now,
    # so only those untouched for a day are a crash's leftovers
    stale = time.time() - STALE_SECONDS
    for file in [*root.glob(f"{CONDITIONS}/*/.*.tmp"), *root.glob(f"{ANN}/.*.tmp")]:
        with contextlib.suppress(OSError):
            if file.stat().st_mtime < stale:
                file.unlink()
                removed.append(str(file.relative_to(root)))
    return removed


def check_manifest(path: Path, manifest: Any) -> None:
    """Refuse a manifest that is not a finesim index manifest of a known version, naming what is wrong."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise IndexFormatError(path, f"not a finesim index manifest (format is not {FORMAT!r})")
    if int(manifest.get("format_version", 0)) > FORMAT_VERSION:
        raise IndexFormatError(path, f"format version {manifest['format_version']} is newer than this finesim")
    for key in ("model", "encoder", "dims", "dtype", "count", "parts"):
        if key not in manifest:
            raise IndexFormatError(path, f"has no {key!r} entry")
    if manifest["dtype"] not in DTYPES:
        raise IndexFormatError(path, f"dtype {manifest['dtype']!r} is not one of {list(DTYPES)}")
    if not isinstance(manifest["parts"], list) or not manifest["parts"]:
        raise IndexFormatError(path, "lists no parts")

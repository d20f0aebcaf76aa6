"""The index folder on disk: manifest, parts, condition caches; validation and atomic commits.

Layout (see docs/search.md)::

    DIR/
      manifest.json                     what the index is: model, encoder, dims, dtype, count, parts, corpus files
      parts/<part>/texts.jsonl          one JSON string per line: the texts of one build or add, in order
      parts/<part>/offsets.npy          int64 (count + 1,): byte offset of each line (reads one text without a scan)
      parts/<part>/sentences.npy        tri-encoders: (count, dim) condition-independent sentence vectors
      parts/<part>/meta.jsonl           with IDs / metadata: one JSON object a row, {"id": ..., "metadata": {...}}
      parts/<part>/meta_offsets.npy     ... int64 (count + 1,): byte offset of each line
      conditions/<key>/condition.json   bi / CASE: one folder per condition (key: hash of model and condition)
      conditions/<key>/<part>.npy       ... its (count, dim) L2-normalised corpus embeddings, one file per part
      conditions/<key>/<part>.sha256    ... the SHA-256 of that file (``sha256sum`` format), written before it
      ann/<name>.faiss, ann/<name>.json approximate-search indexes (faiss) and what they cover
      maps/<key>-<digest>.npz           a "mapped" first stage's fitted map of one condition (written by a search,
                                        reused by later processes; the digest names the rows, sample and ridge)
      .lock                             writers (build, add) hold an exclusive lock on it

Parts are immutable once written. A writer builds a part in ``parts/.tmp-<part>.<pid>/`` and renames it into place, then
replaces ``manifest.json`` atomically: the manifest is the commit point, and a crash before it leaves the old index
(the old manifest and the parts it lists) valid. Opening checks every file the manifest lists: present, the expected
shape and dtype, the exact byte length (a truncated file is refused, naming it). Every file a writer produces has its
SHA-256 recorded (part files in the manifest's part entry, a condition cache in its ``.sha256`` sidecar, a faiss
index in its ``.json``); :meth:`IndexStore.verify_hashes` checks them all.

Temporary files are named ``.<name>.<pid>-<random>.tmp``: a later writer removes those of a process that is no
longer running at once, and one without a pid (an older finesim's) once it is a day old. Part folders being written
are ``parts/.tmp-<part>.<pid>``; a writer (holding the lock) removes every part folder the manifest does not list.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from finesim.index.errors import IndexFormatError
from finesim.results import TEMP_NAME, atomic_write, file_sha256, pid_alive, write_json_atomic

FORMAT = "finesim-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
PARTS = "parts"
CONDITIONS = "conditions"
ANN = "ann"
MAPS = "maps"
LOCK = ".lock"
TEXTS = "texts.jsonl"
OFFSETS = "offsets.npy"
META = "meta.jsonl"
META_OFFSETS = "meta_offsets.npy"
CHECKSUM = ".sha256"  # suffix of a condition cache's checksum sidecar: conditions/<key>/<part>.sha256
SENTENCES = "sentences"  # the array name of the tri-encoder's sentence vectors
DTYPES = ("float32", "float16")
STALE_SECONDS = 24 * 3600
TEMP_PID = TEMP_NAME  # .<name>.<pid>-<random>.tmp, as finesim.results names every temporary file


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


def check_npy(path: Path, shape: tuple[int, ...], dtype: DTypeLike, what: str = "array") -> None:
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


def load_npy(path: Path, shape: tuple[int, ...], dtype: DTypeLike, what: str = "array") -> np.ndarray:
    """A checked (:func:`check_npy`), read-only memory map of a ``.npy`` file."""
    check_npy(path, shape, dtype, what)
    return np.load(path, mmap_mode="r")


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def temp_path(path: Path) -> Path:
    """A temporary name next to ``path`` that carries this process's pid: ``.<name>.<pid>-<random>.tmp`` (so a
    later writer can tell that the process which left it is gone, :func:`remove_leftovers`)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


class TempHold:
    """An exclusive ``flock`` on a temporary file for as long as this process writes it: it marks the file as a live
    writer's for :func:`remove_leftovers` whatever the writer's pid namespace (a server in a container and a
    command on the host share the folder, and the pid in the name means nothing across them). ``create``: the file
    is created here (it must not exist) and locked before anything is written to it. The lock goes with the open
    file (a rename keeps it); :meth:`release` closes it. A no-op where ``flock`` is missing or refused (the pid in
    the name then decides alone)."""

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self._fd: int | None = None
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            if create:
                Path(path).touch(exist_ok=False)
            return
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits only for a temp_held probe, which holds it for a moment
        except OSError:  # pragma: no cover - a file system without flock
            os.close(fd)
            return
        self._fd = fd

    def release(self) -> None:
        """Let go of the lock (close the file); idempotent."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def temp_held(path: Path) -> bool:
    """Whether a live process holds ``path`` (:class:`TempHold`): its exclusive lock cannot be taken now."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return False
    try:
        fd = os.open(path, os.O_RDWR)  # an exclusive lock over NFS needs a file open for writing
    except OSError:  # gone meanwhile, or not ours to open: the pid decides
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # pragma: no cover - a file system without flock: the pid decides alone
        return False
    finally:
        os.close(fd)
    return False


def _recorded_faiss_sha256(file: Path) -> str | None:
    """The SHA-256 a faiss index's ``.json`` records (None: no description, or none recorded); an unreadable
    description is an :class:`IndexFormatError` naming it."""
    described = file.with_suffix(".json")
    try:
        text = described.read_text(encoding="utf-8")
    except OSError:
        return None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as err:
        raise IndexFormatError(described, f"not valid JSON ({err}); delete it and its .faiss file to rebuild") from None
    return meta.get("sha256") if isinstance(meta, dict) else None


def _rewritten_since(file: Path, recorded: str) -> bool:
    """Whether a derived file (a condition cache, a faiss index) whose content did not match ``recorded`` was
    replaced, with its record, by another process while it was read: its record now differs and matches it."""
    now = _recorded_faiss_sha256(file) if file.suffix == ".faiss" else read_checksum(file)
    return now is not None and now != recorded and file_sha256(file) == now


def checksum_file(array_file: Path) -> Path:
    """The checksum sidecar of a condition cache file: ``<part>.sha256`` next to ``<part>.npy``."""
    return Path(array_file).with_suffix(CHECKSUM)


def write_checksum(array_file: Path, digest: str) -> None:
    """Record ``digest`` for ``array_file`` in its sidecar (``sha256sum`` format, so ``sha256sum -c`` reads it)."""
    atomic_write(checksum_file(array_file), lambda fh: fh.write(f"{digest}  {array_file.name}\n".encode()), fsync=True)


def read_checksum(array_file: Path) -> str | None:
    """The SHA-256 recorded for ``array_file``; None when it has no sidecar (written before finesim recorded
    checksums)."""
    sidecar = checksum_file(array_file)
    try:
        text = sidecar.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    digest = text.split()[0] if text.split() else ""
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise IndexFormatError(sidecar, "not a SHA-256 checksum file; delete it and the array it describes")
    return digest


def json_line(value: Any) -> bytes:
    """One line of a ``.jsonl`` file of the index (UTF-8, no ASCII escaping)."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8") + b"\n"


# ---------------------------------------------------------------- part writer


def utc_now() -> str:
    """The current UTC time as a manifest records it (``created``, ``updated``), to the second."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_part_id(sequence: int) -> str:
    """A part name: its sequence number and a random tag (a crashed writer's leftovers never collide)."""
    return f"{sequence:06d}-{uuid.uuid4().hex[:8]}"


class _Lines:
    """A ``.jsonl`` file written line by line, with the byte offset of each line and the SHA-256 of them all."""

    def __init__(self, path: Path, count: int, what: str) -> None:
        self.path = path
        self.what = what
        self.count = count
        self.fh = open(path, "wb")
        self.digest = hashlib.sha256()
        self.offsets = np.zeros(count + 1, dtype=np.int64)
        self.written = 0

    def write(self, value: Any) -> None:
        if self.written >= self.count:
            raise ValueError(f"more {self.what} than the {self.count} this part was opened for")
        line = json_line(value)
        self.fh.write(line)
        self.digest.update(line)
        self.written += 1
        self.offsets[self.written] = self.offsets[self.written - 1] + len(line)

    def close(self) -> None:
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()


class PartWriter:
    """Write one part (texts, IDs / metadata, arrays) into ``parts/.tmp-<id>.<pid>/``; :meth:`finish` renames it
    into place.

    Args:
        root: the index folder. part_id: the part's name. count: its number of rows.
        arrays: array name -> ``(dim, dtype)`` of the ``(count, dim)`` arrays the part holds.
        meta: whether the part has a ``meta.jsonl`` (the index has IDs or metadata).
    """

    def __init__(
        self, root: Path, part_id: str, count: int, arrays: dict[str, tuple[int, str]], *, meta: bool = False
    ) -> None:
        self.root = Path(root)
        self.part_id = part_id
        self.count = count
        self.tmp = self.root / PARTS / f".tmp-{part_id}.{os.getpid()}"
        self.tmp.mkdir(parents=True, exist_ok=False)
        self._meta: _Lines | None = None
        self._keys: set[str] = set()
        self._arrays: dict[str, np.memmap] = {}
        try:
            self._texts = _Lines(self.tmp / TEXTS, count, "texts")
            self._meta = _Lines(self.tmp / META, count, "metadata rows") if meta else None
            for name, (dim, dtype) in arrays.items():  # a failed allocation (a full disk) removes the folder
                self._arrays[name] = np.lib.format.open_memmap(
                    self.tmp / f"{name}.npy", mode="w+", dtype=dtype, shape=(count, dim)
                )
        except BaseException:
            self.abort()
            raise
        self.meta = {name: {"dim": dim, "dtype": dtype} for name, (dim, dtype) in arrays.items()}

    def write_texts(self, texts: Sequence[str]) -> None:
        """Append texts (in corpus order)."""
        for text in texts:
            self._texts.write(text)

    def write_meta(self, rows: Sequence[dict[str, Any]]) -> None:
        """Append the rows' ``{"id": ..., "metadata": {...}}`` objects (in corpus order)."""
        if self._meta is None:
            raise ValueError("this part was opened without IDs or metadata")
        for row in rows:
            self._meta.write(row)
            self._keys.update(row.get("metadata") or {})

    def write_rows(self, name: str, start: int, rows: np.ndarray) -> None:
        """Put ``rows`` into array ``name`` at rows ``start ..``."""
        self._arrays[name][start : start + len(rows)] = rows

    def _save_offsets(self, name: str, offsets: np.ndarray) -> str:
        np.save(self.tmp / name, offsets)
        _fsync(self.tmp / name)
        return file_sha256(self.tmp / name)

    def finish(self) -> dict[str, Any]:
        """Flush, fsync, checksum and move the part into place; returns its manifest entry (without ``start``)."""
        if self._texts.written != self.count:
            raise ValueError(f"part {self.part_id}: {self._texts.written} texts written, {self.count} expected")
        if self._meta is not None and self._meta.written != self.count:
            raise ValueError(f"part {self.part_id}: {self._meta.written} metadata rows written, {self.count} expected")
        self._texts.close()
        entry: dict[str, Any] = {
            "id": self.part_id,
            "count": self.count,
            "texts_bytes": int(self._texts.offsets[-1]),
            "texts_sha256": self._texts.digest.hexdigest(),
            "offsets_sha256": self._save_offsets(OFFSETS, self._texts.offsets),
        }
        if self._meta is not None:
            self._meta.close()
            entry["meta"] = {
                "file": META,
                "bytes": int(self._meta.offsets[-1]),
                "sha256": self._meta.digest.hexdigest(),
                "offsets_sha256": self._save_offsets(META_OFFSETS, self._meta.offsets),
                "keys": sorted(self._keys),
            }
        arrays = {}
        for name, array in self._arrays.items():
            array.flush()
            del array
            file = self.tmp / f"{name}.npy"
            _fsync(file)
            meta = self.meta[name]
            arrays[name] = {"file": file.name, "dim": meta["dim"], "dtype": meta["dtype"], "sha256": file_sha256(file)}
        self._arrays = {}
        entry["arrays"] = arrays
        os.replace(self.tmp, self.root / PARTS / self.part_id)
        return entry

    def abort(self) -> None:
        """Remove the temporary folder (after a failure)."""
        for lines in (getattr(self, "_texts", None), self._meta):  # _texts is missing when its file could not open
            with contextlib.suppress(Exception):
                if lines is not None:
                    lines.fh.close()
        self._arrays = {}
        shutil.rmtree(self.tmp, ignore_errors=True)


class ArrayWriter:
    """Write one ``(count, dim)`` array through a temporary file next to ``path`` (:func:`temp_path`); :meth:`finish`
    records its SHA-256 in the sidecar (:func:`write_checksum`) and then renames it into place."""

    def __init__(self, path: Path, count: int, dim: int, dtype: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = temp_path(self.path)
        self._hold = TempHold(self.tmp, create=True)  # live to remove_leftovers in any pid namespace
        try:
            self._array: np.memmap | None = np.lib.format.open_memmap(
                self.tmp, mode="w+", dtype=dtype, shape=(count, dim)
            )
        except BaseException:  # a full disk: nothing of it stays
            self._hold.release()
            self.tmp.unlink(missing_ok=True)
            raise

    def write_rows(self, start: int, rows: np.ndarray) -> None:
        assert self._array is not None, "rows written after finish() or abort()"
        self._array[start : start + len(rows)] = rows

    def finish(self) -> None:
        assert self._array is not None, "finish() after finish() or abort()"
        self._array.flush()
        self._array = None
        _fsync(self.tmp)
        digest = file_sha256(self.tmp)
        # the checksum first: an array in place always has its checksum (two processes computing the same cache
        # write the pair under the folder's lock, so the pair never mixes their files)
        with writer_lock(self.path.parent):
            write_checksum(self.path, digest)
            os.replace(self.tmp, self.path)
        self._hold.release()

    def abort(self) -> None:
        self._array = None
        self.tmp.unlink(missing_ok=True)
        self._hold.release()


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
        fields = self.fields
        for part, entry in zip(self.parts, self.manifest["parts"]):
            folder = self.part_dir(part)
            if not folder.is_dir():
                raise IndexFormatError(folder, "missing (a part listed in the manifest)")
            self._check_lines(part, TEXTS, OFFSETS, int(entry["texts_bytes"]), "texts")
            meta = entry.get("meta")
            if (fields["id"] or fields["metadata"]) and meta is None:
                raise IndexFormatError(self.root / MANIFEST, f"part {part.id} has no IDs / metadata ({META})")
            if meta is not None:
                self._check_lines(part, META, META_OFFSETS, int(meta["bytes"]), "IDs / metadata")
            for name, array in entry.get("arrays", {}).items():
                check_npy(folder / array["file"], (part.count, int(array["dim"])), array["dtype"], f"{name} embeddings")

    def _check_lines(self, part: Part, name: str, offsets_name: str, recorded: int, what: str) -> None:
        """A ``.jsonl`` file of a part has the recorded byte length and its offsets end there."""
        file = self.part_dir(part) / name
        if not file.is_file():
            raise IndexFormatError(file, f"missing (the {what} of a part listed in the manifest)")
        size = file.stat().st_size
        if size != recorded:
            problem = "truncated" if size < recorded else "longer than recorded"
            raise IndexFormatError(file, f"{problem}: {size} bytes, the manifest says {recorded}")
        offsets = load_npy(self.part_dir(part) / offsets_name, (part.count + 1,), np.int64, f"{what} offsets")
        if int(offsets[-1]) != size:
            raise IndexFormatError(
                self.part_dir(part) / offsets_name, f"ends at byte {int(offsets[-1])}, {name} has {size}"
            )

    def checksummed_files(self) -> Iterator[tuple[Path, str | None, str]]:
        """``(file, recorded SHA-256 or None, where it is recorded)`` for every file of the index: each part's texts,
        offsets, IDs / metadata and arrays (the manifest), every condition cache of a listed part (its sidecar) and
        every faiss index (its ``.json``). None: written before finesim recorded checksums."""
        for part, entry in zip(self.parts, self.manifest["parts"]):
            folder = self.part_dir(part)
            yield folder / TEXTS, entry["texts_sha256"], MANIFEST
            yield folder / OFFSETS, entry.get("offsets_sha256"), MANIFEST
            meta = entry.get("meta")
            if meta is not None:
                yield folder / META, meta["sha256"], MANIFEST
                yield folder / META_OFFSETS, meta.get("offsets_sha256"), MANIFEST
            for array in entry.get("arrays", {}).values():
                yield folder / array["file"], array.get("sha256"), MANIFEST
        conditions = self.root / CONDITIONS
        if conditions.is_dir():
            for sub in sorted(p for p in conditions.iterdir() if p.is_dir()):
                for part in self.parts:
                    file = sub / f"{part.id}.npy"
                    if file.is_file():
                        yield file, read_checksum(file), checksum_file(file).name
        ann = self.root / ANN
        if ann.is_dir():
            for file in sorted(ann.glob("*.faiss")):
                yield file, _recorded_faiss_sha256(file), file.with_suffix(".json").name

    def verify_hashes(self) -> dict[str, Any]:
        """Recompute the SHA-256 of every file of the index (:meth:`checksummed_files`) against the one recorded; the
        first that differs is an :class:`IndexFormatError` naming it. Slow on large corpora (it reads every byte).

        Returns ``{"verified": n, "unrecorded": [paths relative to the folder]}`` (files without a recorded checksum).
        """
        verified, unrecorded = 0, []
        for file, recorded, where in self.checksummed_files():
            if recorded is None:
                unrecorded.append(str(file.relative_to(self.root)))
                continue
            if file_sha256(file) != recorded and not (where != MANIFEST and _rewritten_since(file, recorded)):
                hint = "delete it to compute it again" if where != MANIFEST else "the index is damaged: build it again"
                raise IndexFormatError(file, f"content differs from the SHA-256 recorded in {where} ({hint})")
            verified += 1
        return {"verified": verified, "unrecorded": unrecorded}

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

    @property
    def fields(self) -> dict[str, bool]:
        """Whether the rows carry an ``id`` and ``metadata`` (fixed at build; every part then has ``meta.jsonl``)."""
        fields = self.manifest.get("fields") or {}
        return {"id": bool(fields.get("id")), "metadata": bool(fields.get("metadata"))}

    def metadata_keys(self) -> list[str]:
        """The metadata keys any row has (recorded per part at write time)."""
        keys: set[str] = set()
        for entry in self.manifest["parts"]:
            keys.update((entry.get("meta") or {}).get("keys", []))
        return sorted(keys)

    def part_dir(self, part: Part) -> Path:
        return self.root / PARTS / part.id

    def array(self, part: Part, name: str = SENTENCES) -> np.ndarray:
        """The (validated at open) memory-mapped array ``name`` of a part."""
        return self._mmap(part, f"{name}.npy")

    def _mmap(self, part: Part, file: str) -> np.ndarray:
        """A part's ``.npy`` file memory-mapped (once per store)."""
        key = (part.id, file)
        if key not in self._maps:
            self._maps[key] = np.load(self.part_dir(part) / file, mmap_mode="r")
        return self._maps[key]

    def locate(self, row: int) -> tuple[Part, int]:
        """The part holding global row ``row`` and the row within it."""
        if not 0 <= row < self.count:
            raise IndexError(f"row {row} is outside the index (0 .. {self.count - 1})")
        for part in self.parts:
            if row < part.stop:
                return part, row - part.start
        raise AssertionError("unreachable")

    def _lines(self, rows: Iterable[int], name: str, offsets_name: str) -> list[Any]:
        """The JSON values on the lines of global rows ``rows`` of each part's ``name`` (one seek each)."""
        out = []
        handles: dict[str, Any] = {}
        try:
            for row in rows:
                part, local = self.locate(int(row))
                offsets = self._mmap(part, offsets_name)
                fh = handles.get(part.id)
                if fh is None:
                    fh = handles[part.id] = open(self.part_dir(part) / name, "rb")
                fh.seek(int(offsets[local]))
                line = fh.read(int(offsets[local + 1] - offsets[local]))
                try:
                    out.append(json.loads(line))
                except (json.JSONDecodeError, UnicodeDecodeError):
                    raise IndexFormatError(self.part_dir(part) / name, f"line {local + 1} is not valid JSON") from None
        finally:
            for fh in handles.values():
                fh.close()
        return out

    def texts(self, rows: Iterable[int]) -> list[str]:
        """The texts of global rows ``rows`` (read one line each through the offsets)."""
        return self._lines(rows, TEXTS, OFFSETS)

    def row_meta(self, rows: Iterable[int]) -> list[dict[str, Any]]:
        """``{"id": ..., "metadata": {...}}`` of global rows ``rows`` (what the index has of the two; ``[{}, ...]``
        for an index without IDs or metadata)."""
        if not (self.fields["id"] or self.fields["metadata"]):
            return [{} for _ in rows]
        return self._lines(rows, META, META_OFFSETS)

    def iter_texts(self, part: Part, chunk: int) -> Iterator[list[str]]:
        """The texts of a part in chunks of at most ``chunk``."""
        return self._iter_lines(part, TEXTS, chunk)

    def iter_meta(self, part: Part, chunk: int) -> Iterator[list[dict[str, Any]]]:
        """The ``{"id", "metadata"}`` rows of a part (with IDs or metadata) in chunks of at most ``chunk``."""
        return self._iter_lines(part, META, chunk)

    def _iter_lines(self, part: Part, name: str, chunk: int) -> Iterator[list[Any]]:
        batch: list[Any] = []
        path = self.part_dir(part) / name
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                try:
                    batch.append(json.loads(line))
                except json.JSONDecodeError:
                    raise IndexFormatError(path, f"line {number} is not valid JSON") from None
                if len(batch) == chunk:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def ids(self) -> dict[str, int]:
        """Every row's ID (as a string, the key of uniqueness) -> its global row (empty without IDs)."""
        out: dict[str, int] = {}
        if not self.fields["id"]:
            return out
        for part in self.parts:
            row = part.start
            for batch in self.iter_meta(part, 65536):
                for item in batch:
                    out[str(item.get("id"))] = row
                    row += 1
        return out

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

    def write_condition_meta(self, key: str, condition: str) -> None:
        """Record (once) the condition and the model of the embeddings in ``conditions/<key>/``."""
        path = self.condition_dir(key) / "condition.json"
        if not path.is_file():
            model, encoder = self.manifest["model"]["sha256"], self.manifest["encoder"]["type"]
            write_json_atomic(path, {"condition": condition, "model_sha256": model, "encoder": encoder}, fsync=True)

    def stored_conditions(self) -> list[dict[str, Any]]:
        """The condition caches present: condition text, key, and how many of the parts they cover."""
        out: list[dict[str, Any]] = []
        folder = self.root / CONDITIONS
        if not folder.is_dir():
            return out
        for sub in sorted(folder.iterdir()):
            meta_file = sub / "condition.json"
            if not meta_file.is_file():
                continue
            try:
                meta = json.loads(meta_file.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise IndexFormatError(meta_file, f"not a readable condition record ({err})") from None
            if not isinstance(meta, dict) or not isinstance(meta.get("condition"), str):
                raise IndexFormatError(meta_file, "not a condition record: it has no 'condition' text")
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
            "fields": {**self.fields, "metadata_keys": self.metadata_keys()},
            "parts": [{"id": p.id, "start": p.start, "count": p.count} for p in self.parts],
            "corpus": manifest.get("corpus", []),
            "conditions": self.stored_conditions(),
            "approximate": manifest.get("approximate"),
            "first_stage": manifest.get("first_stage"),  # two-stage search's first stage (None: none)
            "approximate_indexes": sorted(p.stem for p in ann.glob("*.faiss")) if ann.is_dir() else [],
            "finesim_version": manifest.get("finesim_version"),
            "created": manifest.get("created"),
            "updated": manifest.get("updated"),
            "bytes": folder_bytes(self.root),
        }

    # -------------------------------------------------------- writing

    def commit(self, manifest: dict[str, Any]) -> None:
        """Replace the manifest atomically (the commit point of build and add)."""
        write_json_atomic(self.root / MANIFEST, manifest, fsync=True)
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


def folder_bytes(root: Path) -> int:
    """The bytes of the files under ``root``; a file removed meanwhile (a search replacing a map) counts 0."""
    total = 0
    for path in root.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file():
                total += path.stat().st_size
    return total


def _leftover(name: str, pattern: re.Pattern[str], mtime: float, stale: float) -> bool:
    """Whether a temporary file or folder is a dead writer's: its pid (in the name) is not running, or, without a
    pid, it is older than a day (a reader in another process may be writing it now)."""
    found = pattern.match(name)
    if found is not None:
        return not pid_alive(int(found.group("pid")))
    return mtime < stale


def remove_leftovers(root: Path, manifest: dict[str, Any] | None) -> list[str]:
    """Delete what a crashed writer left; call it holding the writer lock. Returns the names removed (relative).

    - part folders the manifest does not list (a writer's ``.tmp-<part>.<pid>`` folder, or a part renamed into
      place whose manifest commit never happened), and the condition files and checksums of such parts;
    - temporary files (``.<name>.<pid>-<random>.tmp``) of the manifest, condition caches, faiss indexes and maps whose
      process is no longer running and which no live writer holds locked (:class:`TempHold`: a condition cache or
      faiss index written by a process in another pid namespace); one without a pid (an older finesim's) once it is
      a day old.
    """
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
            for file in [*sub.glob("*.npy"), *sub.glob(f"*{CHECKSUM}")]:
                if file.stem not in listed:
                    file.unlink(missing_ok=True)
                    removed.append(f"{CONDITIONS}/{sub.name}/{file.name}")
    stale = time.time() - STALE_SECONDS
    temporary = [*root.glob(".*.tmp"), *root.glob(f"{CONDITIONS}/*/.*.tmp"), *root.glob(f"{ANN}/.*.tmp"),
                 *root.glob(f"{MAPS}/.*.tmp")]  # fmt: skip
    for file in temporary:
        with contextlib.suppress(OSError):
            # a pid that looks dead may be a live writer's in another pid namespace: its lock says (TempHold)
            if _leftover(file.name, TEMP_PID, file.stat().st_mtime, stale) and not temp_held(file):
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


def lines_sha256(values: Sequence[Any]) -> str:
    """The SHA-256 a part records for a ``.jsonl`` file of ``values`` (its ``texts_sha256`` for texts)."""
    digest = hashlib.sha256()
    for value in values:
        digest.update(json_line(value))
    return digest.hexdigest()


def find_duplicate(
    manifest: dict[str, Any],
    *,
    corpus: Sequence[dict[str, Any]] = (),
    texts_sha256: str | None = None,
    meta_sha256: str | None = None,
) -> dict[str, Any] | None:
    """What an add would duplicate: a corpus file whose SHA-256 (and text column) the manifest records, or a part
    with the same texts (and the same IDs / metadata). ``{"what", "part", "start", "stop"}`` (rows ``start ..
    stop - 1``) or None."""
    starts, start = {}, 0
    for entry in manifest["parts"]:
        starts[str(entry["id"])] = (start, start + int(entry["count"]))
        start += int(entry["count"])
    for record in corpus:
        digest = record.get("sha256")
        if not digest:
            continue
        for known in manifest.get("corpus", []):
            same_column = known.get("text_column") == record.get("text_column")
            if known.get("sha256") == digest and same_column and str(known.get("part")) in starts:
                a, b = starts[str(known["part"])]
                name = Path(str(record.get("path") or "the corpus file")).name
                return {"what": name, "part": known["part"], "start": a, "stop": b}
    if texts_sha256 is not None:
        for entry in manifest["parts"]:
            if entry.get("texts_sha256") == texts_sha256 and (entry.get("meta") or {}).get("sha256") == meta_sha256:
                a, b = starts[str(entry["id"])]
                return {"what": f"these {b - a} texts", "part": entry["id"], "start": a, "stop": b}
    return None


def duplicate_message(duplicate: dict[str, Any]) -> str:
    """``corpus.csv is already in the index (part X, rows a..b): nothing added``."""
    rows = f"rows {duplicate['start']}..{duplicate['stop'] - 1}"
    verb = "are" if duplicate["what"].startswith("these ") else "is"
    return f"{duplicate['what']} {verb} already in the index (part {duplicate['part']}, {rows}): nothing added"

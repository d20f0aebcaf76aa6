"""Copy an index into a new folder with its vectors stored as another dtype (``finesim index convert``).

A float16 index takes half the disk and page cache of a float32 one, and its first stage scans in float16
(:func:`~finesim.index.tri.candidate_dot`). Building one again embeds the whole corpus (about an hour per million
texts on a 2-core CPU); converting casts the stored vectors instead, which is what a build with that dtype stores:
the model's float32 output cast on write. Every file of the source is first checked against its recorded SHA-256
(a damaged source is not copied under fresh checksums). Texts, IDs and metadata, the corpus records and every stored
condition (for each part it covers) are carried over; faiss indexes and fitted maps are not (they are built or fitted
again on first use, from the converted vectors). The new folder gets its manifest last, and a failure removes what
the conversion wrote (the folder stays, empty but for its lock file); the source is only read.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from finesim.index.conditional_index import Batch, part_array_shapes, prepare_new_folder, write_part
from finesim.index.errors import IndexFormatError
from finesim.index.store import (
    CONDITIONS,
    DTYPES,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    PARTS,
    IndexStore,
    Part,
    remove_leftovers,
    utc_now,
    writer_lock,
)

CHUNK = 16_384  # rows read, cast and written per step


def convert_index(source: str | Path, target: str | Path, dtype: str, *, show_progress: bool = False) -> IndexStore:
    """Write the index at ``source`` into the new folder ``target`` with its vectors stored as ``dtype``
    (``float32`` or ``float16``); returns the new store. Refused: an index already stored as ``dtype``, a ``target``
    that holds anything or lies inside the source (or the source inside it), a source vector that is not finite
    (:class:`~finesim.index.errors.IndexFormatError`) or beyond ``dtype``'s range, and a part whose texts or IDs /
    metadata, vectors or condition caches no longer match their recorded SHA-256 (checked first: the whole source is
    read once more); each error names the file (and row)."""
    from finesim._version import __version__

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    store = IndexStore.open(source)
    if store.dtype == dtype:
        raise ValueError(f"{store.root} is stored as {dtype} already: nothing to convert")
    folder = Path(target)
    src, dst = store.root.resolve(), folder.resolve()
    if dst == src or dst.is_relative_to(src) or src.is_relative_to(dst):
        raise ValueError(f"{folder}: the converted index needs a folder outside its source {store.root} (and not "
                         "holding it)")  # fmt: skip
    store.verify_hashes()  # a source damaged since it was written is not copied under fresh checksums
    covered = {c["key"]: c["condition"] for c in store.stored_conditions()}  # read before any folder is made
    prepare_new_folder(folder)
    manifest: dict[str, Any] = copy.deepcopy(store.manifest)
    now = utc_now()
    manifest.update(
        format=FORMAT, format_version=FORMAT_VERSION, finesim_version=__version__, created=now, updated=now,
        dtype=dtype, count=0, parts=[], corpus=[],
        converted_from={"dtype": store.dtype, "created": store.manifest.get("created")},
    )  # fmt: skip
    names = list(part_array_shapes(manifest))
    corpus = list(store.manifest.get("corpus") or [])
    part_ids = {p.id for p in store.parts}
    with writer_lock(folder):
        if (folder / MANIFEST).exists():  # another writer took the folder since it was checked
            raise FileExistsError(f"{folder} already holds an index ({MANIFEST}): choose another folder")
        try:
            remove_leftovers(folder, None)
            for part in store.parts:
                keys = {k: c for k, c in covered.items() if store.condition_array(k, part) is not None}
                batches = _cast_batches(store, part, names, keys, dtype)
                entry = write_part(
                    folder, manifest, part.count, batches, keys, show_progress=show_progress, label="converting"
                )
                manifest["parts"] = [*manifest["parts"], entry]
                manifest["count"] = int(manifest["count"]) + part.count
                manifest["corpus"] += [{**c, "part": entry["id"]} for c in corpus if c.get("part") == part.id]
            manifest["corpus"] += [c for c in corpus if c.get("part") not in part_ids]  # of no part: as is
            new = IndexStore(folder, manifest)
            for key, condition in covered.items():
                new.write_condition_meta(key, condition)
            new.commit(manifest)
        except BaseException:
            if not (folder / MANIFEST).exists():  # nothing committed: remove what this conversion wrote (locked)
                for name in (PARTS, CONDITIONS):
                    shutil.rmtree(folder / name, ignore_errors=True)
            raise
    return IndexStore.open(folder)


def _cast_batches(store: IndexStore, part: Part, names: list[str], keys: dict[str, str], dtype: str) -> Iterator[Batch]:
    """The part's rows in chunks: texts, IDs / metadata, and every array cast to ``dtype`` (the source checked
    finite, the cast checked within range)."""
    arrays = {name: store.array(part, name) for name in names}
    for key in keys:
        found = store.condition_array(key, part)
        assert found is not None  # keys holds the conditions this part has
        arrays[key] = found
    texts = store.iter_texts(part, CHUNK)
    meta = store.iter_meta(part, CHUNK) if any(store.fields.values()) else None
    for start in range(0, part.count, CHUNK):
        stop = min(start + CHUNK, part.count)
        cast = {}
        for name, array in arrays.items():
            path = store.condition_file(name, part) if name in keys else store.part_dir(part) / f"{name}.npy"
            block = np.asarray(array[start:stop])
            bad = ~np.isfinite(block).all(axis=1)
            if bad.any():
                row = start + int(np.flatnonzero(bad)[0])
                raise IndexFormatError(path, f"row {row} holds NaN or infinite values (the index is damaged)")
            with np.errstate(over="ignore"):  # an overflow is refused next, naming its row
                block = block.astype(dtype)
            bad = ~np.isfinite(block).all(axis=1)
            if bad.any():
                row = start + int(np.flatnonzero(bad)[0])
                raise ValueError(f"{path}: row {row} does not fit {dtype} (a value beyond its range)")
            cast[name] = block
        chunk_texts, chunk_meta = next(texts, None), None if meta is None else next(meta, None)
        if (
            chunk_texts is None
            or len(chunk_texts) != stop - start
            or (meta is not None and (chunk_meta is None or len(chunk_meta) != stop - start))
        ):
            short = chunk_texts is None or len(chunk_texts) != stop - start
            missing = store.part_dir(part) / ("texts.jsonl" if short else "meta.jsonl")
            raise IndexFormatError(missing, f"fewer lines than the part's {part.count} rows")
        yield Batch(chunk_texts, cast, chunk_meta)

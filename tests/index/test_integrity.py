"""Index integrity: every file a writer produces has a SHA-256 that ``verify_hashes`` checks; NaN / infinite vectors
are an error naming the file on every search; ``add`` embeds the stored conditions before its commit and adds
nothing twice; temporary files of dead writers are removed."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from index_helpers import assert_matches_brute_force, build_model_dirs, make_corpus, overwrite_with_garbage

from finesim import ConditionalIndex
from finesim.index import IndexFormatError
from finesim.index import conditional_index as ci
from finesim.index.store import ArrayWriter, IndexStore, TempHold, remove_leftovers, temp_held, temp_path
from finesim.index.two_stage import FIRST_STAGE


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return make_corpus(90, seed=21)


def _condition_files(folder: Path) -> list[Path]:
    return sorted((folder / "conditions").glob("*/*.npy"))


def test_every_file_has_a_recorded_checksum(model_dirs, corpus, tmp_path):
    folder = tmp_path / "index"
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus[:60], folder, conditions=["the sport"])
    index.add(corpus[60:])
    index.search("a dog", "the animal", strategy="exact")  # a condition cache written by a search
    manifest = json.loads((folder / "manifest.json").read_text())
    for entry in manifest["parts"]:
        assert len(entry["texts_sha256"]) == 64 and len(entry["offsets_sha256"]) == 64
        assert all(len(array["sha256"]) == 64 for array in entry["arrays"].values())
    files = _condition_files(folder)
    assert len(files) == 4  # two conditions x two parts
    for file in files:
        digest, name = file.with_suffix(".sha256").read_text().split()
        assert name == file.name and len(digest) == 64  # sha256sum's format
    report = IndexStore.open(folder).verify_hashes()
    # per part: texts, offsets, first-stage vectors; and the four condition caches
    assert report == {"verified": 2 * 3 + 4, "unrecorded": []}


def test_nan_vectors_of_a_condition_are_an_error_naming_the_file(model_dirs, corpus, tmp_path):
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["bi"]), corpus, folder, conditions=["the sport"])
    (cached,) = _condition_files(folder)
    overwrite_with_garbage(cached)
    index = ConditionalIndex.open(folder)  # same length and header: opening cannot tell
    with pytest.raises(IndexFormatError, match=r"row 0 holds NaN or infinite values \(delete it") as err:
        index.search("a dog", "the sport")
    assert err.value.path == str(cached)
    with pytest.raises(IndexFormatError, match="content differs from the SHA-256 recorded in") as err:
        index.store.verify_hashes()
    assert err.value.path == str(cached)
    # deleting the file, as the message says, computes it again
    cached.unlink()
    assert_matches_brute_force(index.search("a dog", "the sport"), model_dirs["bi"], "a dog", corpus, "the sport", 10)
    assert IndexStore.open(folder).verify_hashes()["unrecorded"] == []


def test_finite_garbage_is_found_by_verify(model_dirs, corpus, tmp_path):
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus, folder)
    array = next((folder / "parts").glob("*/sentences.npy"))
    overwrite_with_garbage(array, nan=False)
    with pytest.raises(IndexFormatError, match=r"recorded in manifest\.json") as err:
        IndexStore.open(folder).verify_hashes()
    assert err.value.path == str(array)


@pytest.mark.parametrize(("name", "array", "options"), [
    ("tri-hadamard", "sentences.npy", {}),
    ("bi", f"{FIRST_STAGE}.npy", {"strategy": "two-stage"}),
])  # fmt: skip
def test_nan_part_vectors_are_an_error_naming_the_file(name, array, options, model_dirs, corpus, tmp_path):
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs[name]), corpus, folder)
    damaged = next((folder / "parts").glob(f"*/{array}"))
    overwrite_with_garbage(damaged)
    with pytest.raises(IndexFormatError, match="holds NaN or infinite values") as err:
        ConditionalIndex.open(folder).search("a dog", "the animal", **options)
    assert err.value.path == str(damaged)


def test_nan_vectors_are_refused_by_approximate_search(model_dirs, corpus, tmp_path):
    pytest.importorskip("faiss")
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus, folder)
    damaged = next((folder / "parts").glob("*/sentences.npy"))
    overwrite_with_garbage(damaged)
    with pytest.raises(IndexFormatError, match="holds NaN") as err:
        ConditionalIndex.open(folder).search("a dog", "the animal", approximate="hnsw")
    assert err.value.path == str(damaged)


def test_add_embeds_stored_conditions_before_its_commit(model_dirs, corpus, tmp_path, monkeypatch):
    """A kill between the commit and the conditions' embedding cannot happen: the new part's condition arrays are
    written before the manifest names the part, and nothing is embedded after the commit."""
    folder = tmp_path / "index"
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus[:50], folder, conditions=["the sport"])
    manifest_before = (folder / "manifest.json").read_bytes()
    seen: dict[str, list[str]] = {}

    def killed(self, manifest):
        new = manifest["parts"][-1]["id"]
        seen["files"] = [p.name for p in _condition_files(folder) if p.stem == new]
        raise KeyboardInterrupt  # killed at the commit

    monkeypatch.setattr(ci.IndexStore, "commit", killed)
    with pytest.raises(KeyboardInterrupt):
        index.add(corpus[50:])
    monkeypatch.undo()
    assert len(seen["files"]) == 1  # the stored condition was embedded for the new part before the commit
    assert (folder / "manifest.json").read_bytes() == manifest_before
    reopened = ConditionalIndex.open(folder)
    assert len(reopened) == 50 and reopened.has_condition("the sport")
    reopened.search("a dog", "the sport")
    assert reopened.embedder.encoded == 1  # only the query: nothing left to embed

    monkeypatch.setattr(ConditionalIndex, "prepare", lambda self, conditions: pytest.fail("embedded after commit"))
    assert reopened.add(corpus[50:]) == len(corpus)
    monkeypatch.undo()
    assert len(_condition_files(folder)) == 2  # the killed add's file was replaced, not kept beside
    fresh = ConditionalIndex.open(folder)
    results = fresh.search("a dog", "the sport")
    assert fresh.embedder.encoded == 1
    assert_matches_brute_force(results, model_dirs["bi"], "a dog", corpus, "the sport", 10)


def test_adding_the_same_rows_or_file_twice_adds_nothing(model_dirs, corpus, tmp_path, caplog):
    folder = tmp_path / "index"
    index = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus[:50], folder)
    record = {"path": "more.csv", "sha256": "ab" * 32, "rows": 40, "text_column": "text"}
    assert index.add(corpus[50:], corpus=[record]) == 90
    part = index.store.parts[1]
    with caplog.at_level(logging.WARNING, logger="finesim.index"):
        assert index.add(corpus[50:]) == 90  # the same texts as part 1
    assert f"these 40 texts are already in the index (part {part.id}, rows 50..89): nothing added" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="finesim.index"):
        assert index.add(["another text"], corpus=[record]) == 90  # the same file (SHA-256) again
    assert f"more.csv is already in the index (part {part.id}, rows 50..89): nothing added" in caplog.text
    assert index.add(corpus[:50]) == 90  # the build's rows
    reopened = ConditionalIndex.open(folder)
    assert len(reopened) == 90 and len(reopened.store.parts) == 2
    assert sorted(p.name for p in (folder / "parts").iterdir()) == sorted(p.id for p in reopened.store.parts)
    assert index.add(corpus[50:70]) == 110  # a subset is new rows


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_temporary_files_of_dead_writers_are_removed(model_dirs, corpus, tmp_path):
    folder = tmp_path / "index"
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus[:20], folder, conditions=["the sport"])
    (cached,) = _condition_files(folder)
    # a writer's temporary file carries its pid
    writer = ArrayWriter(cached, 3, 4, "float32")
    assert writer.tmp.name.startswith(f".{cached.name}.{os.getpid()}-") and writer.tmp.name.endswith(".tmp")
    writer.abort()
    assert temp_path(folder / "manifest.json").name.startswith(f".manifest.json.{os.getpid()}-")

    dead = _dead_pid()
    old = time.time() - 2 * 24 * 3600
    (folder / "ann").mkdir()
    files = {
        "dead": [
            cached.with_name(f".{cached.name}.{dead}-0123abcd.tmp"),
            folder / "ann" / f".condition-x-hnsw.faiss.{dead}-89abcdef.tmp",
            folder / f".manifest.json.{dead}-00000000.tmp",
        ],
        "alive": [cached.with_name(f".{cached.name}.{os.getpid()}-0123abcd.tmp")],
        "recent, no pid": [cached.with_name(f".{cached.name}.k2j_x9ab.tmp")],
        "old, no pid": [folder / "ann" / ".sentences-hnsw.faiss.q1w2e3r4.tmp"],
    }
    for group in files.values():
        for file in group:
            file.write_bytes(b"\0" * 64)
    os.utime(files["old, no pid"][0], (old, old))
    removed = remove_leftovers(folder, index.store.manifest)
    assert sorted(removed) == sorted(str(f.relative_to(folder)) for f in files["dead"] + files["old, no pid"])
    assert all(f.exists() for f in files["alive"] + files["recent, no pid"])
    # an add runs the same clean-up
    files["dead"][0].write_bytes(b"\0")
    index.add(corpus[20:30])
    assert not files["dead"][0].exists() and files["alive"][0].exists()


def test_a_part_being_written_is_named_with_the_pid(model_dirs, corpus, tmp_path, monkeypatch):
    folder = tmp_path / "index"
    index = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus[:20], folder)
    names: list[str] = []
    finish = ci.PartWriter.finish

    def spy(self):
        names.append(self.tmp.name)
        return finish(self)

    monkeypatch.setattr(ci.PartWriter, "finish", spy)
    index.add(corpus[20:30])
    assert len(names) == 1 and names[0].startswith(".tmp-") and names[0].endswith(f".{os.getpid()}")


def test_a_build_killed_during_its_commit_leaves_a_folder_the_next_build_takes(model_dirs, corpus, tmp_path):
    """A build killed while writing its manifest leaves only a temporary manifest: the next build into the folder is
    not refused as 'not empty', and removes it under the lock; a file of the user's is still refused."""
    folder = tmp_path / "index"
    folder.mkdir()
    left = folder / f".manifest.json.{_dead_pid()}-00000000.tmp"
    left.write_text("{", encoding="utf-8")
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus[:5], folder)
    assert len(index) == 5 and not left.exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / ".manifest.json.tmp").write_text("{", encoding="utf-8")  # not a finesim temporary name
    with pytest.raises(FileExistsError, match=r"not empty \(\.manifest\.json\.tmp\)"):
        ConditionalIndex.build(str(model_dirs["bi"]), corpus[:5], other)


def test_a_temporary_file_held_by_a_live_writer_stays_whatever_its_pid(model_dirs, corpus, tmp_path):
    """A writer in another pid namespace (a server in a container, the folder shared with the host) has a pid that
    looks dead here: the lock it holds on its temporary file (TempHold, as a condition cache or a faiss index being
    written holds) keeps the file; once released, it is a leftover like any other."""
    folder = tmp_path / "index"
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus[:20], folder, conditions=["the sport"])
    (cached,) = _condition_files(folder)
    writing = cached.with_name(f".{cached.name}.{_dead_pid()}-0123abcd.tmp")
    writing.write_bytes(b"\0" * 64)
    hold = TempHold(writing)
    assert temp_held(writing)
    assert remove_leftovers(folder, index.store.manifest) == [] and writing.exists()
    hold.release()
    assert not temp_held(writing)
    assert remove_leftovers(folder, index.store.manifest) == [str(writing.relative_to(folder))]
    # the writers hold their temporary files while they write them, and let go once renamed or aborted
    writer = ArrayWriter(cached.with_name("extra.npy"), 3, 4, "float32")
    assert temp_held(writer.tmp)
    writer.abort()
    assert not writer.tmp.exists()


def test_a_faiss_index_is_held_while_it_is_written(tmp_path, monkeypatch):
    faiss = pytest.importorskip("faiss")
    from finesim.index.approximate import AnnFile

    held = []
    write = faiss.write_index

    def spy(index, path):
        write(index, path)
        held.append(temp_held(Path(path)))

    monkeypatch.setattr(faiss, "write_index", spy)
    data = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    ann = AnnFile(tmp_path, "test", "hnsw", {"m": 8})
    ann.update(len(data), 8, lambda a, b: iter([data[a:b]]), lambda m: data[:m])
    assert held == [True] and (tmp_path / "test.faiss").is_file()
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("failing_call", [1, 2])
def test_a_full_disk_while_a_part_is_allocated_leaves_no_temporary_files(
    model_dirs, corpus, tmp_path, monkeypatch, failing_call
):
    """The first-stage array of the part (call 1) or the condition cache beside it (call 2) cannot be allocated: the
    build fails with the disk's error and leaves no temporary folder or file of this process behind (a retry in the
    same process would otherwise meet them, since a live pid's leftovers are kept)."""
    import errno

    real = np.lib.format.open_memmap
    calls = []

    def allocate(*args, **kwargs):
        array = real(*args, **kwargs)  # the file exists now, as when the disk fills while it is sized
        if kwargs.get("mode") == "w+":
            calls.append(args[0])
            if len(calls) == failing_call:
                del array
                raise OSError(errno.ENOSPC, "No space left on device")
        return array

    folder = tmp_path / "index"
    monkeypatch.setattr(np.lib.format, "open_memmap", allocate)
    with pytest.raises(OSError, match="No space left on device"):
        ConditionalIndex.build(str(model_dirs["bi"]), corpus[:20], folder, conditions=["the sport"])
    assert len(calls) == failing_call
    left = [p for p in folder.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".tmp-")]
    assert left == [] and not (folder / "manifest.json").exists()


def test_verify_tells_a_cache_replaced_while_read_from_a_damaged_one(model_dirs, corpus, tmp_path, monkeypatch):
    """A condition cache another process replaces (with its checksum) between the check's reading of the record and
    of the file is not damage; a file that matches no record is; an unreadable faiss description is named."""
    import finesim.index.store as store_module
    from finesim.index.errors import IndexFormatError
    from finesim.index.store import read_checksum, write_checksum

    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["bi"]), corpus[:20], folder, conditions=["the sport"])
    (cached,) = _condition_files(folder)
    store = IndexStore.open(folder)
    listed = list(store.checksummed_files())  # records read now, as verify_hashes reads them first
    data = np.load(cached)
    data[0, 0] += 0.5
    np.save(cached, data)  # replaced, with its new checksum, by "another process"
    write_checksum(cached, store_module.file_sha256(cached))
    monkeypatch.setattr(IndexStore, "checksummed_files", lambda self: iter(listed))
    assert store.verify_hashes()["verified"] == len(listed)
    data[0, 0] += 0.5
    np.save(cached, data)  # changed, its checksum not
    with pytest.raises(IndexFormatError, match="content differs from the SHA-256 recorded"):
        store.verify_hashes()
    assert read_checksum(cached) is not None
    monkeypatch.undo()
    write_checksum(cached, store_module.file_sha256(cached))  # recorded again: whole
    (folder / "ann").mkdir()
    (folder / "ann" / "x.faiss").write_bytes(b"\0")
    (folder / "ann" / "x.json").write_text("{", encoding="utf-8")
    with pytest.raises(IndexFormatError, match=r"x\.json: not valid JSON"):
        IndexStore.open(folder).verify_hashes()

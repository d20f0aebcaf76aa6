"""``finesim index convert`` (finesim.index.convert): an index copied with its vectors cast to another dtype, every
text, ID, metadata row, corpus record and complete stored condition carried over, the source untouched."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from index_helpers import build_model_dirs, make_corpus

from finesim import ConditionalIndex
from finesim.cli.main import main
from finesim.index.convert import convert_index
from finesim.index.errors import IndexFormatError
from finesim.index.store import IndexStore
from finesim.index.two_stage import FIRST_STAGE


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


def arrays(store: IndexStore, name: str) -> np.ndarray:
    return np.concatenate([np.asarray(store.array(p, name)) for p in store.parts])


def condition(store: IndexStore, key: str) -> np.ndarray:
    return np.concatenate([np.asarray(store.condition_array(key, p)) for p in store.parts])


def write_row(source: Path, path: Path, row: int, value: float, rehash: bool = True) -> None:
    """Set one value of a stored first-stage row, then (``rehash``) record the file's new SHA-256 in the manifest, as
    if it had been written so."""
    from finesim.results import file_sha256

    array = np.load(path, mmap_mode="r+")
    array[row, 3] = value
    array.flush()
    del array
    if rehash:
        manifest = json.loads((source / "manifest.json").read_text(encoding="utf-8"))
        manifest["parts"][0]["arrays"][FIRST_STAGE]["sha256"] = file_sha256(path)
        (source / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def test_a_converted_bi_encoder_index_holds_the_cast_vectors_and_everything_else(model_dirs, tmp_path):
    texts = make_corpus(90, seed=5)
    source = tmp_path / "source"
    index = ConditionalIndex.build(
        str(model_dirs["bi"]), texts[:60], source, conditions=["the sport"], ids=[f"t{i}" for i in range(60)],
        metadata=[{"n": i} for i in range(60)],
    )  # fmt: skip
    index.add(texts[60:], ids=[f"t{i}" for i in range(60, 90)], metadata=[{"n": i} for i in range(60, 90)])
    index.search("a dog", "the animal", k=3, strategy="exact")  # a condition stored after the build: all parts too
    manifest_before = (source / "manifest.json").read_bytes()
    old = IndexStore.open(source)
    assert len(old.parts) == 2 and len(old.stored_conditions()) == 2

    new = convert_index(source, tmp_path / "half", "float16")
    assert (source / "manifest.json").read_bytes() == manifest_before  # the source is only read
    assert new.dtype == "float16" and new.count == 90 and len(new.parts) == 2
    assert new.manifest["converted_from"] == {"dtype": "float32", "created": old.manifest["created"]}
    assert new.texts(range(90)) == texts and new.row_meta(range(90)) == old.row_meta(range(90))
    assert arrays(new, FIRST_STAGE).dtype == np.float16
    np.testing.assert_array_equal(arrays(new, FIRST_STAGE), arrays(old, FIRST_STAGE).astype(np.float16))
    assert {c["condition"]: c["parts"] for c in new.stored_conditions()} == {"the sport": 2, "the animal": 2}
    for stored in old.stored_conditions():
        np.testing.assert_array_equal(condition(new, stored["key"]), condition(old, stored["key"]).astype(np.float16))
    assert new.verify_hashes()["verified"] > 0

    half = ConditionalIndex.open(tmp_path / "half")
    assert half._strategy("auto", "the sport") == "exact"  # the stored condition is used, not embedded again
    before = half.embedder.encoded
    got = half.search("a man plays guitar", "the sport", k=5)
    assert half.embedder.encoded - before == 1  # the query alone
    exact = index.search("a man plays guitar", "the sport", k=5)
    np.testing.assert_allclose([r["score"] for r in got], [r["score"] for r in exact], atol=5e-3)
    assert [r["id"] for r in got][:1] == [r["id"] for r in exact][:1]

    # and back: float16 to float32 gives the halves exactly
    back = convert_index(tmp_path / "half", tmp_path / "back", "float32")
    np.testing.assert_array_equal(arrays(back, FIRST_STAGE), arrays(new, FIRST_STAGE).astype(np.float32))


def test_a_condition_is_carried_for_the_parts_it_covers_and_a_tri_encoder_index_converts(model_dirs, tmp_path):
    texts = make_corpus(40, seed=6)
    source = tmp_path / "source"
    index = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), texts[:30], source)
    index.add(texts[30:])
    new = convert_index(source, tmp_path / "half", "float16")
    np.testing.assert_array_equal(arrays(new, "sentences"), arrays(index.store, "sentences").astype(np.float16))
    bi = ConditionalIndex.build(str(model_dirs["bi"]), texts[:30], tmp_path / "bi", conditions=["the sport"])
    bi.add(texts[30:])
    key = bi.key("the sport")
    first, second = bi.store.parts
    expected = np.asarray(bi.store.condition_array(key, second)).astype(np.float16)
    bi.store.condition_file(key, first).unlink()  # as if embedded for the second part only
    copied = convert_index(tmp_path / "bi", tmp_path / "bi-half", "float16")
    assert [c["parts"] for c in copied.stored_conditions()] == [1]
    np.testing.assert_array_equal(copied.condition_array(key, copied.parts[1]), expected)
    half = ConditionalIndex.open(tmp_path / "bi-half")
    before = half.embedder.encoded
    half.search("a dog", "the sport", k=3, strategy="exact")  # embeds the first part's 30 rows only
    assert half.embedder.encoded - before == 30 + 1


def test_refusals_leave_no_index_behind(model_dirs, tmp_path):
    texts = make_corpus(30, seed=7)
    source = tmp_path / "source"
    ConditionalIndex.build(str(model_dirs["bi"]), texts, source)
    with pytest.raises(ValueError, match="stored as float32 already: nothing to convert"):
        convert_index(source, tmp_path / "same", "float32")
    with pytest.raises(ValueError, match=r"dtype must be one of \['float32', 'float16'\], got 'int8'"):
        convert_index(source, tmp_path / "int8", "int8")
    with pytest.raises(ValueError, match="needs a folder outside its source"):
        convert_index(source, source, "float16")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="is not empty"):
        convert_index(source, tmp_path / "busy", "float16")
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"

    store = IndexStore.open(source)
    path = store.part_dir(store.parts[0]) / f"{FIRST_STAGE}.npy"
    write_row(source, path, 17, 1e6, rehash=False)  # changed since written: its recorded SHA-256 no longer matches
    with pytest.raises(IndexFormatError, match=r"first_stage\.npy: content differs from the SHA-256 recorded"):
        convert_index(source, tmp_path / "damaged", "float16")
    assert not (tmp_path / "damaged" / "parts").exists()
    write_row(source, path, 17, 1e6)  # beyond float16's 65504, its checksum recorded again
    with pytest.raises(ValueError, match=f"{path}: row 17 does not fit float16"):
        convert_index(source, tmp_path / "overflow", "float16")
    assert {p.name for p in (tmp_path / "overflow").iterdir()} <= {".lock"}  # what it wrote is gone
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="does not fit float16"):
        convert_index(source, tmp_path / "empty", "float16")
    assert {p.name for p in (tmp_path / "empty").iterdir()} <= {".lock"}  # the folder given stays, reusable
    with pytest.raises(ValueError, match="needs a folder outside its source"):
        convert_index(source, source / "parts" / "copy", "float16")
    with pytest.raises(ValueError, match="needs a folder outside its source"):
        convert_index(source, tmp_path, "float16")

    write_row(source, path, 17, np.nan)
    with pytest.raises(IndexFormatError, match="row 17 holds NaN or infinite values"):
        convert_index(source, tmp_path / "nan", "float16")


def test_a_part_whose_texts_changed_since_written_is_refused_and_nothing_is_written(model_dirs, tmp_path):
    texts = make_corpus(30, seed=9)
    source = tmp_path / "source"
    index = ConditionalIndex.build(str(model_dirs["bi"]), texts[:20], source)
    index.add(texts[20:])
    second = IndexStore.open(source).parts[1]
    lines = IndexStore.open(source).part_dir(second) / "texts.jsonl"
    content = lines.read_text(encoding="utf-8")
    lines.write_text(content.replace(content[2], "X" if content[2] != "X" else "Y", 1), encoding="utf-8")  # same size
    with pytest.raises(IndexFormatError, match=r"texts\.jsonl: content differs from the SHA-256 recorded"):
        convert_index(source, tmp_path / "copy", "float16")
    assert not (tmp_path / "copy" / "parts").exists()


def test_an_unreadable_condition_record_is_refused_naming_it_before_any_folder_is_made(model_dirs, tmp_path, capsys):
    texts = make_corpus(20, seed=10)
    source = tmp_path / "source"
    ConditionalIndex.build(str(model_dirs["bi"]), texts, source, conditions=["the sport"])
    (record,) = (source / "conditions").glob("*/condition.json")
    record.write_text('{"condition": "the sp', encoding="utf-8")  # cut short
    with pytest.raises(IndexFormatError, match=r"condition\.json: not a readable condition record"):
        convert_index(source, tmp_path / "copy", "float16")
    assert not (tmp_path / "copy").exists()
    record.write_text('["the sport"]', encoding="utf-8")
    assert main(["index", "info", str(source)]) == 1
    err = capsys.readouterr().err
    assert f"{record}: not a condition record: it has no 'condition' text" in err and "Traceback" not in err


def test_convert_on_the_command_line(model_dirs, tmp_path, capsys):
    texts = make_corpus(30, seed=8)
    ConditionalIndex.build(str(model_dirs["bi"]), texts, tmp_path / "source", conditions=["color"])
    argv = ["index", "convert", str(tmp_path / "source"), "-o", str(tmp_path / "half"), "--dtype", "float16"]
    assert main([*argv, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'half'}: 30 x " in out and "float16 in 1 part(s), 1 stored condition(s)" in out
    assert json.loads((tmp_path / "half" / "manifest.json").read_text())["dtype"] == "float16"
    assert main([*argv, "--no-progress"]) == 1  # the folder holds an index now
    err = capsys.readouterr().err
    assert "already holds an index" in err and len(err.strip().splitlines()) == 1
    assert main(["index", "convert", str(tmp_path / "nowhere"), "-o", str(tmp_path / "x"), "--dtype", "float16"]) == 1
    assert "no such index folder" in capsys.readouterr().err

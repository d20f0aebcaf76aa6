"""IDs and metadata: stored per part in meta.jsonl (its SHA-256 in the manifest), carried by search results, IDs
unique across the index, and ``where`` filters (before the top k in exact search, on the candidates otherwise)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from index_helpers import brute_force, build_model_dirs, make_corpus

from conftest import import_or_skip
from finesim import ConditionalIndex
from finesim.data.errors import DataFormatError
from finesim.index.corpus import read_corpus
from finesim.index.store import IndexStore

LANGS = ("en", "de", "fr")


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return make_corpus(80, seed=31)


def ids_of(n: int, start: int = 0) -> list[str]:
    return [f"doc-{i}" for i in range(start, start + n)]


def metadata_of(n: int, start: int = 0) -> list[dict]:
    return [{"lang": LANGS[i % 3], "year": 2000 + i % 5} for i in range(start, start + n)]


def filtered_brute_force(model, query, texts, condition, keep, k):
    """The brute-force top k among the rows ``keep`` says."""
    rows, scores = brute_force(model, query, texts, condition, len(texts))
    kept = [(r, s) for r, s in zip(rows, scores) if keep[r]]
    return [r for r, _ in kept[:k]], np.array([s for _, s in kept[:k]])


def test_results_carry_ids_and_metadata(model_dirs, corpus, tmp_path):
    folder = tmp_path / "index"
    index = ConditionalIndex.build(
        str(model_dirs["tri-hadamard"]), corpus[:50], folder, ids=ids_of(50), metadata=metadata_of(50)
    )
    index.add(corpus[50:], ids=ids_of(30, 50), metadata=metadata_of(30, 50))
    results = ConditionalIndex.open(folder).search("a dog", "the animal", k=80)
    assert len(results) == 80 and json.loads(json.dumps(results)) == results
    for result in results:
        row = result["index"]
        assert set(result) == {"index", "text", "score", "id", "metadata"}
        assert result["text"] == corpus[row] and result["id"] == f"doc-{row}"
        assert result["metadata"] == {"lang": LANGS[row % 3], "year": 2000 + row % 5}
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["fields"] == {"id": True, "metadata": True}
    first = manifest["parts"][0]
    assert first["meta"]["keys"] == ["lang", "year"] and len(first["meta"]["sha256"]) == 64
    line = (folder / "parts" / first["id"] / "meta.jsonl").read_text().splitlines()[1]
    assert json.loads(line) == {"id": "doc-1", "metadata": {"lang": "de", "year": 2001}}
    assert IndexStore.open(folder).verify_hashes()["unrecorded"] == []
    # an index without them answers as before
    plain = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus[:5], tmp_path / "plain")
    assert set(plain.search("a dog", "the animal")[0]) == {"index", "text", "score"}


def test_ids_are_checked_and_unique_across_the_index(model_dirs, corpus, tmp_path):
    model = str(model_dirs["tri-hadamard"])
    with pytest.raises(ValueError, match=r"corpus row 2: duplicate ID 'a' \(row 0 has it too\)"):
        ConditionalIndex.build(model, corpus[:3], tmp_path / "a", ids=["a", "b", "a"])
    with pytest.raises(ValueError, match="corpus row 1: an ID must be a non-empty string or an integer"):
        ConditionalIndex.build(model, corpus[:2], tmp_path / "b", ids=["a", None])
    with pytest.raises(ValueError, match="2 IDs for 3 texts"):
        ConditionalIndex.build(model, corpus[:3], tmp_path / "c", ids=["a", "b"])
    with pytest.raises(ValueError, match="corpus row 0: metadata must be a dict"):
        ConditionalIndex.build(model, corpus[:1], tmp_path / "d", metadata=["en"])
    index = ConditionalIndex.build(model, corpus[:3], tmp_path / "e", ids=[1, 2, 3])
    with pytest.raises(ValueError, match=r"added corpus row 1: ID 3 is already in the index \(row 2\)"):
        index.add(corpus[3:5], ids=[4, 3])
    with pytest.raises(ValueError, match="has IDs for every row: give them for the added rows"):
        index.add(corpus[3:5])
    with pytest.raises(ValueError, match="built without metadata"):
        index.add(corpus[3:5], ids=[4, 5], metadata=[{}, {}])
    assert index.add(corpus[3:5], ids=[4, "5"]) == 5
    with pytest.raises(ValueError, match=r"ID '5' is already in the index \(row 4\)"):
        index.add(corpus[5:6], ids=["5"])
    assert len(ConditionalIndex.open(tmp_path / "e")) == 5


def test_read_corpus_returns_ids_and_metadata(tmp_path):
    path = tmp_path / "c.jsonl"
    rows = [{"text": "a dog", "key": "x1", "lang": "en", "n": 3}, {"text": "a cat", "key": "x2", "lang": None, "n": 4}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    corpus = read_corpus(path, id_column="key", metadata_columns=["lang", "n"])
    assert corpus.ids == ["x1", "x2"] and corpus.metadata == [{"lang": "en", "n": 3}, {"lang": None, "n": 4}]
    assert corpus.record["id_column"] == "key" and corpus.record["metadata_columns"] == ["lang", "n"]
    with pytest.raises(DataFormatError, match=r"c\.jsonl, column 'nope': no column 'nope'.*--metadata-columns"):
        read_corpus(path, metadata_columns=["nope"])
    path.write_text(path.read_text() + json.dumps({"text": "a cow", "key": "x1"}) + "\n")
    with pytest.raises(DataFormatError, match=r"row 3, column 'key': duplicate ID 'x1' \(row 1 has it too\)"):
        read_corpus(path, id_column="key")


@pytest.mark.parametrize("name", ["tri-hadamard", "bi"])
def test_where_filters_before_the_top_k(name, model_dirs, corpus, tmp_path):
    metadata = metadata_of(len(corpus))
    index = ConditionalIndex.build(str(model_dirs[name]), corpus, tmp_path / "index", metadata=metadata)
    keep = [m["lang"] == "de" for m in metadata]
    results = index.search("a dog", "the animal", k=7, strategy="exact", where={"lang": "de"})
    rows, scores = filtered_brute_force(model_dirs[name], "a dog", corpus, "the animal", keep, 7)
    assert [r["index"] for r in results] == rows
    np.testing.assert_allclose([r["score"] for r in results], scores, atol=2e-5)
    assert all(r["metadata"]["lang"] == "de" for r in results)
    # every key must hold; a string matches a number spelled that way (the CLI's values)
    both = index.search("a dog", "the animal", k=80, strategy="exact", where={"lang": "de", "year": "2001"})
    expected = {i for i, m in enumerate(metadata) if m["lang"] == "de" and m["year"] == 2001}
    assert {r["index"] for r in both} == expected and expected
    # a numpy value (from a DataFrame) filters as its Python value: it was refused as not a number
    numpy_year = index.search(
        "a dog", "the animal", k=80, strategy="exact", where={"lang": "de", "year": np.int64(2001)}
    )
    assert {r["index"] for r in numpy_year} == expected
    with pytest.raises(ValueError, match="the value of 'year' must be a string, number, boolean or null"):
        index.search("a dog", "the animal", where={"year": np.datetime64("2001")})  # not read as a number
    assert index.search("a dog", "the animal", where={"lang": "xx"}) == []
    with pytest.raises(ValueError, match="no row has the metadata key 'lnag'; the keys are: lang, year"):
        index.search("a dog", "the animal", where={"lnag": "de"})


def test_where_applies_to_two_stage_candidates(model_dirs, corpus, tmp_path):
    metadata = metadata_of(len(corpus))
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", metadata=metadata)
    keep = [m["year"] == 2003 for m in metadata]
    results = index.search(
        "a dog", "the color", k=5, strategy="two-stage", candidates=len(corpus), where={"year": 2003}
    )
    rows, _ = filtered_brute_force(model_dirs["bi"], "a dog", corpus, "the color", keep, 5)
    assert [r["index"] for r in results] == rows
    # a small exact first stage filters before taking its candidates: all of them match
    few = index.search_rows("a dog", "the color", k=5, strategy="two-stage", candidates=5, where={"year": 2003})[0]
    assert len(few) == 5 and all(keep[r] for r in few)


def test_where_on_approximate_search_filters_the_candidates(model_dirs, corpus, tmp_path):
    import_or_skip("faiss")
    metadata = metadata_of(len(corpus))
    index = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus, tmp_path / "index", metadata=metadata)
    results = index.search("a dog", "the animal", k=10, approximate="hnsw", candidates=12, where={"lang": "fr"})
    assert len(results) <= 10 and all(r["metadata"]["lang"] == "fr" for r in results)


def test_where_needs_metadata(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus[:5], tmp_path / "index", ids=ids_of(5))
    with pytest.raises(ValueError, match="this index has no metadata to filter on"):
        index.search("a dog", "the animal", where={"lang": "en"})
    assert len(index.search("a dog", "the animal", where={})) == 5

"""A tri-encoder (e.g. a distilled student) as the first stage of two-stage search (issue 41): its corpus vectors
are embedded once, its own top N under the condition are the candidates, and the index's bi-encoder (or CASE model)
re-ranks them exactly. The references are a separate tri-encoder index and brute-force scoring."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from index_helpers import assert_matches_brute_force, brute_force, build_model_dirs, make_corpus

from conftest import import_or_skip
from finesim import ConditionalIndex
from finesim.evaluation.fingerprint import model_fingerprint, model_inputs_fingerprint
from finesim.index.errors import ModelMismatchError
from finesim.index.store import SENTENCES
from finesim.index.two_stage import FIRST_STAGE, FirstStageSpec, resolve_first_stage

QUERIES = [("a man plays guitar", "the sport"), ("the dog runs in the park", "the animal"), ("a red car", "color")]


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return make_corpus(120)


def candidates(index: ConditionalIndex, query: str, condition: str, n: int, approximate: bool | str = False) -> set:
    """The first stage's N candidates: a two-stage search for k = N returns exactly them (re-ranked)."""
    rows, _ = index.search_rows(query, condition, k=n, candidates=n, strategy="two-stage", approximate=approximate)
    assert len(rows) == n
    return set(rows.tolist())


@pytest.mark.parametrize("head", ["tri-hadamard", "tri-concat", "tri-hypernet"])
def test_candidates_are_the_tri_encoders_own_top_n(head, model_dirs, corpus, tmp_path):
    tri = str(model_dirs[head])
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "two", first_stage=tri)
    reference = ConditionalIndex.build(tri, corpus, tmp_path / "tri")
    assert index.first_stage_spec.query == "tri"
    # the stored first-stage vectors are the tri-encoder index's stage vectors
    stored = np.concatenate([index.store.array(p, FIRST_STAGE) for p in index.store.parts])
    np.testing.assert_allclose(stored, reference.store.array(reference.store.parts[0], SENTENCES), atol=1e-6)
    for query, condition in QUERIES:
        n = 9
        found = candidates(index, query, condition, n)
        assert found == set(reference.search_rows(query, condition, k=n)[0].tolist())
        # ... which is the tri-encoder's brute-force top N (its ConditionalScorer scores of every row)
        assert found == set(brute_force(tri, query, corpus, condition, n)[0])
        # re-ranked by the bi-encoder: each score is the bi-encoder's exact score of that row
        rows, scores = index.search_rows(query, condition, k=4, candidates=n, strategy="two-stage")
        bi_rows, bi_scores = brute_force(model_dirs["bi"], query, corpus, condition, len(corpus))
        exact = dict(zip(bi_rows, bi_scores))
        assert set(rows.tolist()) <= found
        np.testing.assert_allclose(scores, [exact[int(r)] for r in rows], atol=2e-5)
        assert list(rows) == sorted(found, key=lambda r: (-exact[r], r))[:4]


def test_approximate_candidates_are_the_tri_index_approximate_top_n(model_dirs, corpus, tmp_path):
    import_or_skip("faiss")
    tri = str(model_dirs["tri-hadamard"])
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "two", first_stage=tri)
    reference = ConditionalIndex.build(tri, corpus, tmp_path / "tri")
    for query, condition in QUERIES:
        found = candidates(index, query, condition, 6, approximate="hnsw")
        assert found == set(reference.search_rows(query, condition, k=6, approximate="hnsw")[0].tolist())
    assert (tmp_path / "two" / "ann" / f"{FIRST_STAGE}-hnsw.faiss").is_file()
    report = index.recall([q for q, _ in QUERIES], [c for _, c in QUERIES], k=5, approximate="hnsw",
                          strategy="two-stage", candidates=len(corpus))  # fmt: skip
    assert report["recall"] == 1.0


def test_all_candidates_is_exact_search(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(
        str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage=str(model_dirs["tri-concat"])
    )
    for query, condition in QUERIES:
        results = index.search(query, condition, k=7, strategy="two-stage", candidates=len(corpus))
        assert_matches_brute_force(results, model_dirs["bi"], query, corpus, condition, 7)
    assert index.conditions == []  # nothing embedded on disk for the conditions


def test_case_index_with_a_tri_first_stage(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(
        str(model_dirs["case"]), corpus, tmp_path / "index", first_stage=str(model_dirs["tri-hadamard"])
    )
    assert index.first_stage_spec.query == "tri"
    query, condition = QUERIES[0]
    results = index.search(query, condition, k=6, candidates=len(corpus))  # auto: two-stage
    assert_matches_brute_force(results, model_dirs["case"], query, corpus, condition, 6)


def test_manifest_records_it_and_reopen_searches_the_same(model_dirs, corpus, tmp_path):
    from finesim.models.io import load_conditional_model

    tri = str(model_dirs["tri-hadamard"])
    folder = tmp_path / "index"
    built = ConditionalIndex.build(str(model_dirs["bi"]), corpus, folder, first_stage=tri)
    entry = json.loads((folder / "manifest.json").read_text())["first_stage"]
    sha = model_fingerprint(load_conditional_model(tri))
    assert entry == {
        "model": tri,
        "query": "tri",
        "dim": 32,  # the tiny tri-encoder head's width
        "sha256": sha,
        "resolved": str(Path(tri).resolve()),
        "head": "hadamard",
        "inputs_sha256": model_inputs_fingerprint(load_conditional_model(tri)),  # tokenizer files and state, prompts
    }
    assert sorted(entry["inputs_sha256"]) == ["prompts", "tokenizer"]
    assert FirstStageSpec.from_manifest(entry).to_manifest() == entry
    assert built.info()["first_stage"] == entry
    reopened = ConditionalIndex.open(folder)
    assert reopened.first_stage_spec == built.first_stage_spec
    assert reopened.first_stage().query_mode == "tri" and reopened.first_stage().sha256 == sha
    for query, condition in QUERIES:
        assert reopened.search(query, condition, k=5, candidates=8) == built.search(query, condition, k=5, candidates=8)
    # another model's manifest carries no "head" entry (as before tri-encoder first stages)
    other = ConditionalIndex.build(str(model_dirs["bi"]), corpus[:10], tmp_path / "self")
    assert "head" not in json.loads((tmp_path / "self" / "manifest.json").read_text())["first_stage"]
    assert other.first_stage_spec.head is None


def test_reopen_with_other_tri_weights_is_refused(model_dirs, corpus, tmp_path):
    import shutil

    tri = tmp_path / "student"
    shutil.copytree(model_dirs["tri-hadamard"], tri)
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["bi"]), corpus[:20], folder, first_stage=str(tri))
    shutil.rmtree(tri)
    shutil.copytree(model_dirs["tri-hadamard-2"], tri)  # same path, another head
    index = ConditionalIndex.open(folder)  # the first stage is loaded (and checked) on first use only
    index.search("a dog", "the animal", k=3, strategy="exact")  # which needs none
    with pytest.raises(ModelMismatchError, match=r"the first-stage model .* has other weights"):
        index.search("a dog", "the animal", k=3, strategy="two-stage")


def test_add_extends_the_tri_first_stage(model_dirs, tmp_path):
    texts = make_corpus(80, seed=5)
    tri = str(model_dirs["tri-hypernet"])
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["bi"]), texts[:50], folder, first_stage=tri)
    index = ConditionalIndex.open(folder)
    index.add(texts[50:])
    assert [p.count for p in index.store.parts] == [50, 30]
    reference = ConditionalIndex.build(tri, texts[50:], tmp_path / "tri")
    np.testing.assert_allclose(
        index.store.array(index.store.parts[1], FIRST_STAGE),
        reference.store.array(reference.store.parts[0], SENTENCES),
        atol=1e-6,
    )
    # an added row is a candidate: its own text under any condition is the tri-encoder's top 1 here
    whole = ConditionalIndex.build(tri, texts, tmp_path / "tri-all")
    found = candidates(index, texts[70], "the color", 5)
    assert found == set(whole.search_rows(texts[70], "the color", k=5)[0].tolist())
    results = index.search("a cat", "the animal", k=8, candidates=len(texts))
    assert_matches_brute_force(results, model_dirs["bi"], "a cat", texts, "the animal", 8)


def test_errors(model_dirs, corpus, tmp_path):
    bi, tri = str(model_dirs["bi"]), str(model_dirs["tri-hadamard"])
    assert resolve_first_stage("bi", tri, None) == (tri, "tri")
    assert resolve_first_stage("case", tri, "tri") == (tri, "tri")
    assert resolve_first_stage("bi", bi, None) == (bi, "plain")
    with pytest.raises(ValueError, match=f"needs a finesim tri-encoder folder .* but {bi} is not one"):
        ConditionalIndex.build(bi, corpus[:5], tmp_path / "a", first_stage=bi, first_stage_query="tri")
    with pytest.raises(ValueError, match="'self' is the index's own bi-encoder"):
        resolve_first_stage("bi", "self", "tri")
    with pytest.raises(ValueError, match=f"{tri} is a tri-encoder: .* query 'plain' needs a model that embeds"):
        ConditionalIndex.build(bi, corpus[:5], tmp_path / "b", first_stage=tri, first_stage_query="plain")
    with pytest.raises(ValueError, match="query 'conditioned' needs a model that embeds a text alone"):
        resolve_first_stage("bi", tri, "conditioned")
    with pytest.raises(ValueError, match="a tri-encoder index needs no first stage"):
        ConditionalIndex.build(tri, corpus[:5], tmp_path / "c", first_stage=tri)
    with pytest.raises(ValueError, match="must be one of \\['conditioned', 'plain', 'tri', 'mapped'\\]"):
        resolve_first_stage("bi", tri, "head")
    assert not (tmp_path / "a" / "manifest.json").exists() and not (tmp_path / "b" / "manifest.json").exists()


def test_as_float_tensor_leaves_the_warning_filters_alone(monkeypatch) -> None:
    """An exact scan calls it from several threads, where warnings.catch_warnings (not thread-safe) could leave a
    filter behind for the whole process: it must not touch the filters at all."""
    import warnings

    from finesim.index.tri import as_float_tensor

    def refused(*args, **kwargs):
        raise AssertionError("as_float_tensor changed the warning filters")

    for name in ("catch_warnings", "simplefilter", "filterwarnings", "resetwarnings"):
        monkeypatch.setattr(warnings, name, refused)
    block = np.arange(12, dtype=np.float32).reshape(3, 4)
    block.flags.writeable = False  # as a read-only memory map: torch.from_numpy notes it
    assert as_float_tensor(block)[2, 3] == 11.0
    assert as_float_tensor(block.astype(np.float16)).dtype == torch.float32


def test_candidate_dot_multiplies_a_float16_block_in_float16_and_falls_back_where_it_overflows() -> None:
    from finesim.index.tri import candidate_dot

    block = np.array([[0.5, 0.25, -1.0], [0.1, 0.2, 0.3], [1.0, 1.0, 1.0]], dtype=np.float16)
    block.flags.writeable = False  # as a read-only memory map
    vector = torch.tensor([0.3, -0.7, 0.1])
    out = candidate_dot(block, vector)
    assert out.dtype == torch.float32
    # by hand: the stored halves times the vector rounded to float16, each product rounded to float16
    by_hand = (block.astype(np.float64) @ vector.numpy().astype(np.float16).astype(np.float64)).astype(np.float16)
    np.testing.assert_array_equal(out.numpy(), by_hand.astype(np.float32))
    # a float32 block: the float32 product, unrounded
    np.testing.assert_allclose(candidate_dot(block.astype(np.float32), vector).numpy(),
                               block.astype(np.float32) @ vector.numpy(), rtol=1e-6)  # fmt: skip
    # products beyond float16's range (65504): the block is multiplied in float32 instead of returning inf
    big = np.full((2, 4), 200.0, dtype=np.float16)
    np.testing.assert_array_equal(candidate_dot(big, torch.full((4,), 100.0)).numpy(), [80000.0, 80000.0])


def test_a_tri_encoder_checkpoint_is_a_tri_first_stage(model_dirs, corpus, tmp_path):
    """A tri-encoder's training checkpoint (no finesim marker) as the first stage: once tri-encoder checkpoints were
    loaded as tri-encoders, is_tri_encoder still read the marker alone, took it for a bi-encoder and loaded it so,
    which is refused. Its modules name the condition head: it is a tri first stage, with the marked model's
    candidates."""
    from finesim.models.io import load_conditional_model

    checkpoint = tmp_path / "checkpoint"
    load_conditional_model(model_dirs["tri-hadamard"]).save(str(checkpoint))  # as the trainer saves: no marker
    assert not (checkpoint / "finesim_model.json").exists()
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "a", first_stage=str(checkpoint))
    marked = ConditionalIndex.build(
        str(model_dirs["bi"]), corpus, tmp_path / "b", first_stage=str(model_dirs["tri-hadamard"])
    )
    assert index.first_stage_spec.query == "tri"
    for query, condition in QUERIES:
        assert candidates(index, query, condition, 9) == candidates(marked, query, condition, 9)

"""Adaptive re-ranking depth (finesim.index.rerank_depth): candidates re-ranked best first, a chunk at a time, until
the chunks stop changing the top k; every score stays exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from index_helpers import brute_force, build_model_dirs, make_corpus

from finesim import ConditionalIndex
from finesim.index.rerank_depth import ADAPTIVE_DEPTH, RerankDepth, parse_rerank_depth
from finesim.index.topk import best_rows
from finesim.index.two_stage import FIRST_STAGE

# candidate rows in first-stage order and each row's exact score (by hand: the top 2 are rows 12 and 11)
ROWS = np.array([10, 11, 12, 13, 14, 15, 16, 17, 18, 19])
SCORES = {10: 0.5, 11: 0.7, 12: 0.9, 13: 0.1, 14: 0.2, 15: 0.3, 16: 0.95, 17: 0.0, 18: 0.0, 19: 0.0}


def scorer(seen: list[list[int]]):
    def score(rows: np.ndarray) -> np.ndarray:
        seen.append([int(r) for r in rows])
        return np.array([SCORES[int(r)] for r in rows], dtype=np.float32)

    return score


def test_it_stops_after_patience_chunks_that_change_nothing():
    seen: list[list[int]] = []
    rows, scores, count = RerankDepth(first=3, step=2, patience=2).rerank(ROWS, 2, scorer(seen))
    # chunk [10 11 12]: top {12, 11}; [13 14]: nothing enters (idle 1); [15 16]: 16 enters (idle 0);
    # [17 18]: nothing (idle 1); [19]: nothing (idle 2): every candidate scored
    assert seen == [[10, 11, 12], [13, 14], [15, 16], [17, 18], [19]]
    assert rows.tolist() == [16, 12] and count == 10
    np.testing.assert_allclose(scores, [0.95, 0.9])
    seen.clear()
    rows, _, count = RerankDepth(first=3, step=2, patience=1).rerank(ROWS, 2, scorer(seen))
    # patience 1: the first chunk that changes nothing ([13 14]) ends it, before row 16 is seen
    assert seen == [[10, 11, 12], [13, 14]] and count == 5
    assert rows.tolist() == [12, 11]


@pytest.mark.parametrize("depth", [RerankDepth(7, 3, 10**6), RerankDepth(1, 1, 10**6), RerankDepth(200, 1, 1)])
def test_every_candidate_scored_is_best_rows_of_all_of_them(depth):
    """Chunks merged one by one give best_rows of all the rows, ties included: small whole-number scores put many
    ties inside the top k, broken by the lower row across chunks."""
    rng = np.random.default_rng(0)
    rows = rng.permutation(200)
    values = rng.integers(0, 6, 200).astype(np.float32)  # about 33 rows share the best score: ties in the top 10
    expected = best_rows(values[rows], rows, 10)
    got_rows, got_scores, count = depth.rerank(rows, 10, lambda r: values[r])
    assert count == 200
    assert got_rows.tolist() == expected[0].tolist()
    np.testing.assert_array_equal(got_scores, expected[1])
    assert len(set(got_scores.tolist())) == 1  # the top 10 is all one tied score: the tie-break decided it


def test_no_candidates_and_fewer_than_k():
    rows, scores, count = RerankDepth(5, 5, 1).rerank(np.zeros(0, dtype=np.int64), 3, lambda r: np.zeros(len(r)))
    assert rows.tolist() == [] and scores.tolist() == [] and count == 0
    rows, _, count = RerankDepth(2, 1, 1).rerank(np.array([4, 9]), 5, lambda r: np.array([0.1, 0.2]))
    assert rows.tolist() == [9, 4] and count == 2


def test_a_scorer_of_the_wrong_shape_is_an_error():
    with pytest.raises(ValueError, match=r"2 candidates gave scores of shape \(3,\)"):
        RerankDepth(2, 1, 1).rerank(np.array([1, 2]), 1, lambda r: np.zeros(3))


def test_k_must_be_at_least_one():
    with pytest.raises(ValueError, match="k must be a whole number >= 1, got 0"):
        RerankDepth(1, 1, 1).rerank(np.array([1]), 0, lambda r: np.zeros(len(r)))


def test_options_are_checked_with_clear_messages():
    assert parse_rerank_depth("all") is None and parse_rerank_depth(" ALL ") is None
    assert parse_rerank_depth("25, 25, 3") == RerankDepth(25, 25, 3)
    assert str(RerankDepth(25, 25, 3)) == "25,25,3"
    for bad in ("25,25", "a,b,c", "25,25,3,1", "-1,2,3", "", "²,1,1"):
        with pytest.raises(ValueError, match=r"expected 'all' or three whole numbers FIRST,STEP,PATIENCE"):
            parse_rerank_depth(bad)
    with pytest.raises(ValueError, match="rerank_depth '25,25,0': PATIENCE must be a whole number >= 1, got 0"):
        parse_rerank_depth("25,25,0")
    with pytest.raises(ValueError, match="FIRST must be a whole number >= 1, got True"):
        RerankDepth(True, 1, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rerank_depth must be 'all', 'FIRST,STEP,PATIENCE' or a RerankDepth, got 3"):
        parse_rerank_depth(3)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


def test_the_index_default_rerank_depth_is_every_candidate():
    # benchmarks/two_stage_adaptive_depth.py's rule kept "all" the default (results/two_stage_adaptive_depth.json)
    assert ADAPTIVE_DEPTH is None


def test_an_index_with_a_rerank_depth_embeds_fewer_candidates_and_scores_exactly(model_dirs, tmp_path):
    corpus = make_corpus(120)
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index")
    assert index.rerank_depth is None
    index.rerank_feedback = None  # the first stage's own order, chunk by chunk (with feedback: test_feedback.py)
    exact_rows, exact_scores = brute_force(model_dirs["bi"], "a man plays guitar", corpus, "the sport", len(corpus))
    exact = dict(zip(exact_rows, exact_scores))
    full = index.search("a man plays guitar", "the sport", k=5, candidates=100)
    index.rerank_cache.__init__()  # empty: every search below pays its own encodes
    index.rerank_depth = RerankDepth(10, 10, 1)
    before = index.embedder.encoded
    results = index.search("a man plays guitar", "the sport", k=5, candidates=100)
    encoded = index.embedder.encoded - before - 1  # less the (query, condition)
    assert 10 <= encoded < 100 and encoded % 10 == 0
    np.testing.assert_allclose([r["score"] for r in results], [exact[r["index"]] for r in results], atol=2e-5)
    # what was re-ranked is the first stage's first `encoded` candidates, best first: the top 5 is theirs, exactly
    stored = np.concatenate([index.store.array(p, FIRST_STAGE) for p in index.store.parts])
    query = index.embedder.conditioned(["a man plays guitar"], "the sport")[0]
    first = best_rows(stored @ query, np.arange(len(corpus)), encoded)[0]
    expected = best_rows(np.array([exact[int(r)] for r in first]), first, 5)[0]
    assert [r["index"] for r in results] == expected.tolist()
    assert index.last_first_stage() == "conditioned"  # the depth's search keeps its bookkeeping
    # a depth deep enough to see every candidate gives what re-ranking all of them gives
    index.rerank_depth = "100,1,100"  # as written on the command line: parsed when set
    assert index.rerank_depth == RerankDepth(100, 1, 100)
    deep = index.search("a man plays guitar", "the sport", k=5, candidates=100)
    assert [r["index"] for r in deep] == [r["index"] for r in full]
    np.testing.assert_allclose([r["score"] for r in deep], [r["score"] for r in full], atol=1e-6)
    index.rerank_depth = "all"
    assert index.rerank_depth is None
    with pytest.raises(ValueError, match="rerank_depth '25,25': expected 'all' or three whole numbers"):
        index.rerank_depth = "25,25"
    assert index.rerank_depth is None  # a refused value leaves the setting as it was


def test_an_index_without_a_first_stage_refuses_a_depth(model_dirs, tmp_path, monkeypatch):
    """It searches exactly, so a depth would be ignored: refused when set, "all" included, in Python as on the
    command line and in the server; None (no setting) is accepted. Opening such an index never sets a depth, even
    when the library's default is one."""
    import finesim.index.conditional_index as module

    index = ConditionalIndex.build(str(model_dirs["bi"]), make_corpus(12), tmp_path / "index", first_stage=None)
    for value in ("10,10,1", RerankDepth(10, 10, 1), "all"):
        with pytest.raises(ValueError, match=r"this index has no first stage \(it searches exactly\): leave it out"):
            index.rerank_depth = value
        assert index.rerank_depth is None
    with pytest.raises(ValueError, match="rerank_depth '25,25': expected 'all' or three whole numbers"):
        index.rerank_depth = "25,25"  # a malformed value says what is wrong with it first
    index.rerank_depth = None
    assert index.rerank_depth is None
    monkeypatch.setattr(module, "ADAPTIVE_DEPTH", RerankDepth(25, 25, 2))
    assert ConditionalIndex.open(tmp_path / "index").rerank_depth is None
    two_stage = ConditionalIndex.build(str(model_dirs["bi"]), make_corpus(12), tmp_path / "two-stage")
    assert two_stage.rerank_depth == RerankDepth(25, 25, 2)


def test_a_mapped_first_stage_with_a_rerank_depth_and_a_filter(model_dirs, tmp_path):
    """The depth re-ranks the mapped first stage's candidates in their order; a filter still applies to them."""
    corpus = make_corpus(120)
    meta = [{"half": str(i % 2)} for i in range(len(corpus))]
    index = ConditionalIndex.build(
        str(model_dirs["bi"]), corpus, tmp_path / "index", metadata=meta, first_stage_query="mapped"
    )
    index.map_sample = 40
    index.rerank_depth = RerankDepth(5, 5, 1)
    results = index.search("a dog", "the animal", k=3, candidates=60, where={"half": "1"})
    assert index.last_first_stage() == "mapped"
    assert results and all(int(r["index"]) % 2 == 1 for r in results)
    exact_rows, exact_scores = brute_force(model_dirs["bi"], "a dog", corpus, "the animal", len(corpus))
    exact = dict(zip(exact_rows, exact_scores))
    np.testing.assert_allclose([r["score"] for r in results], [exact[r["index"]] for r in results], atol=2e-5)

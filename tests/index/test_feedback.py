"""Local-map feedback in two-stage search (finesim.index.feedback): the N re-ranks in rounds, each after the first
taken by a map fitted on the candidates re-ranked so far; every score stays exact."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from index_helpers import brute_force, build_model_dirs, make_corpus

import finesim.index.feedback as feedback_module
from finesim import ConditionalIndex
from finesim.index.feedback import LOCAL_MAP_FEEDBACK, LocalMapFeedback, parse_rerank_feedback
from finesim.index.moments import PairMoments, map_from_moments
from finesim.index.rerank_depth import RerankDepth
from finesim.index.topk import best_rows
from finesim.index.two_stage import FIRST_STAGE, RerankCache, fit_condition_map

# By hand, in 2-d: the query is (1, 0); each row's embedding under the condition is its first-stage vector rotated by
# -90 degrees, (a, b) -> (b, -a), so its exact score is b / 1 (unit vectors) and a map fitted on any two rows that span
# the plane is that rotation. Rows in first-stage order (the first stage ranks by a, the condition by b):
ROWS = np.array([10, 11, 12, 13, 14, 15, 16])
FIRST = {10: (1.0, 0.0), 11: (0.8, 0.6), 12: (0.6, -0.8), 13: (0.0, 1.0), 14: (0.28, 0.96), 15: (0.6, 0.8),
         16: (-1.0, 0.0)}  # fmt: skip
QUERY = np.array([1.0, 0.0], dtype=np.float32)


def first_stage(rows: np.ndarray) -> np.ndarray:
    return np.array([FIRST[int(r)] for r in rows], dtype=np.float32)


def conditioned(seen: list[list[int]]):
    def embed(rows: np.ndarray) -> np.ndarray:
        seen.append([int(r) for r in rows])
        return np.array([(FIRST[int(r)][1], -FIRST[int(r)][0]) for r in rows], dtype=np.float32)

    return embed


def test_the_second_round_takes_the_rows_the_fitted_map_ranks_first():
    # exact scores (b): 10: 0, 11: 0.6, 12: -0.8, 13: 1.0, 14: 0.96, 15: 0.8, 16: 0. Round 1 re-ranks the first
    # stage's best two (10, 11); their map is the rotation, so the mapped cosine with the query is b: round 2 takes
    # 13 (1.0) and 14 (0.96) from the pool, where the first stage's own next two were 12 and 13
    seen: list[list[int]] = []
    feedback = LocalMapFeedback(rounds=2, ridge=1e-6, pool=10)
    rows, scores, count = feedback.rerank(ROWS, 4, 2, QUERY, first_stage, conditioned(seen))
    assert seen == [[10, 11], [13, 14]] and count == 4
    assert rows.tolist() == [13, 14]
    np.testing.assert_allclose(scores, [1.0, 0.96], atol=1e-6)
    # without feedback, the same 4 re-ranks (the first stage's top 4: 10..13) miss row 14
    plain_top = best_rows(np.array([0.0, 0.6, -0.8, 1.0]), ROWS[:4], 2)[0]
    assert plain_top.tolist() == [13, 11]


def test_the_pool_bounds_where_a_round_looks():
    # row 14 moved last in the first stage's order; N = 4: with a pool of 1 x N round 2 chooses among the first 4
    # unscored rows (12, 13, 15, 16) and takes 13 and 15; with 10 x N it reaches 14 and takes 13 and 14
    order = np.array([10, 11, 12, 13, 15, 16, 14])
    seen: list[list[int]] = []
    LocalMapFeedback(rounds=2, ridge=1e-6, pool=1).rerank(order, 4, 2, QUERY, first_stage, conditioned(seen))
    assert seen == [[10, 11], [13, 15]]
    seen.clear()
    LocalMapFeedback(rounds=2, ridge=1e-6, pool=10).rerank(order, 4, 2, QUERY, first_stage, conditioned(seen))
    assert seen == [[10, 11], [13, 14]]


def test_a_depth_sets_the_rounds_and_its_patience_stops_them():
    # chunks of 2, then 1 at a time: [10 11], then 13 (enters), 14 (enters), 15 (0.8: not in the top 2 {13, 14}):
    # patience 1 stops there, before row 16, with 5 of the 7 re-ranked
    seen: list[list[int]] = []
    rows, _, count = LocalMapFeedback(rounds=4, ridge=1e-6).rerank(
        ROWS, 7, 2, QUERY, first_stage, conditioned(seen), RerankDepth(2, 1, 1)
    )
    assert seen == [[10, 11], [13], [14], [15]] and count == 5 and rows.tolist() == [13, 14]


def test_equal_rounds_cover_n_exactly():
    seen: list[list[int]] = []
    _, _, count = LocalMapFeedback(rounds=3).rerank(ROWS, 7, 1, QUERY, first_stage, conditioned(seen))
    assert [len(s) for s in seen] == [2, 3, 2] and count == 7  # round(7/3) = 2, round(14/3) = 5, then 7
    seen.clear()
    _, _, count = LocalMapFeedback(rounds=4).rerank(ROWS[:2], 2, 1, QUERY, first_stage, conditioned(seen))
    assert [len(s) for s in seen] == [1, 1] and count == 2  # more rounds than candidates: one at a time
    assert len({r for s in seen for r in s}) == 2  # nothing re-ranked twice


def test_settings_parse_and_bad_ones_are_refused_with_the_text():
    assert parse_rerank_feedback("local-map") == LOCAL_MAP_FEEDBACK == LocalMapFeedback(4, 0.1, 10)
    assert parse_rerank_feedback(" Local-Map:2,0.5,3 ") == LocalMapFeedback(2, 0.5, 3)
    assert parse_rerank_feedback("none") is None and parse_rerank_feedback(None) is None
    assert str(LocalMapFeedback(2, 0.5, 3)) == "local-map:2,0.5,3,earlier"
    assert str(LocalMapFeedback(2, 0.5, 3, earlier=False)) == "local-map:2,0.5,3,own"
    assert parse_rerank_feedback("local-map:2,0.5,3,OWN") == LocalMapFeedback(2, 0.5, 3, earlier=False)
    assert parse_rerank_feedback("local-map:2,0.5,3, earlier") == LocalMapFeedback(2, 0.5, 3, earlier=True)
    for setting in (LOCAL_MAP_FEEDBACK, LocalMapFeedback(3, 0.25, 2, earlier=False)):
        assert parse_rerank_feedback(str(setting)) == setting  # its text reads back
    for text, message in [
        (
            "rocchio",
            "rerank_feedback 'rocchio': expected 'none', 'local-map' or "
            "'local-map:ROUNDS,RIDGE,POOL\\[,earlier\\|own\\]'",
        ),
        ("local-map:4,0.1,10,all", "rerank_feedback 'local-map:4,0.1,10,all': PAIRS must be earlier or own"),
        ("local-map:4,0.1,10,own,x", "rerank_feedback 'local-map:4,0.1,10,own,x': expected"),
        ("local-map:", "rerank_feedback 'local-map:': expected"),
        ("local-map:4,0.1", "rerank_feedback 'local-map:4,0.1': expected"),
        ("local-map:4,x,10", "RIDGE must be a number"),
        ("local-map:4,0,10", "RIDGE must be a finite number > 0, got 0.0"),
        ("local-map:4,nan,10", "RIDGE must be a finite number > 0"),
        ("local-map:0,0.1,10", "ROUNDS must be a whole number >= 1, got 0"),
        ("local-map:4,0.1,-1", "expected"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_rerank_feedback(text)
    with pytest.raises(ValueError, match="must be 'none'"):
        parse_rerank_feedback(4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="POOL must be a whole number >= 1, got True"):
        LocalMapFeedback(pool=True)
    with pytest.raises(ValueError, match="earlier must be True or False, got 'own'"):
        LocalMapFeedback(earlier="own")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


def test_a_self_index_searches_with_feedback_by_default_and_scores_exactly(model_dirs, tmp_path):
    """The default of a bi-encoder index; what it returns is LocalMapFeedback run by hand on the stored first-stage
    vectors and the model's own embeddings; N + 1 encodes, as without feedback."""
    corpus = make_corpus(150)
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index")
    assert index.rerank_feedback == LOCAL_MAP_FEEDBACK
    query, condition = "a man plays guitar", "the sport"
    before = index.embedder.encoded
    results = index.search(query, condition, k=5, candidates=12)
    assert index.embedder.encoded - before == 12 + 1 and index.last_first_stage() == "conditioned"
    exact_rows, exact_scores = brute_force(model_dirs["bi"], query, corpus, condition, len(corpus))
    exact = dict(zip(exact_rows, exact_scores))
    np.testing.assert_allclose([r["score"] for r in results], [exact[r["index"]] for r in results], atol=2e-5)
    stored = np.concatenate([index.store.array(p, FIRST_STAGE) for p in index.store.parts])
    q = index.embedder.conditioned([query], condition)[0]
    order = best_rows(stored @ q, np.arange(len(corpus)), len(corpus))[0]
    by_hand = LOCAL_MAP_FEEDBACK.rerank(
        order, 12, 5, q, lambda rows: stored[rows], lambda rows: index.embedder.conditioned([corpus[r] for r in rows],
                                                                                              condition),
    )[0]  # fmt: skip
    assert [r["index"] for r in results] == by_hand.tolist()
    # it looked beyond the first stage's top 12 here, so the check can tell the two apart
    plain = best_rows(np.array([exact[int(r)] for r in order[:12]]), order[:12], 5)[0]
    index.rerank_feedback = "none"
    assert index.rerank_feedback is None
    without = index.search(query, condition, k=5, candidates=12)
    assert [r["index"] for r in without] == plain.tolist()
    assert set(by_hand.tolist()) != set(plain.tolist())
    with pytest.raises(ValueError, match="rerank_feedback 'local-map:1': expected"):
        index.rerank_feedback = "local-map:1"
    assert index.rerank_feedback is None  # a refused value leaves the setting as it was


def test_a_mapped_index_steers_its_conditioned_fallback_and_its_map_as_a_residual(model_dirs, tmp_path):
    """A mapped index's fallback (no map yet, none borrowed) is the conditioned ranking, with its feedback; once the
    map is held, the local map is fitted from the *mapped* unit vectors and ranks the mapped ranking's pool: what
    LocalMapFeedback gives by hand on those vectors, and not what the unmapped vectors would give."""
    corpus = make_corpus(150)
    conditioned_index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "conditioned")
    mapped = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "mapped", first_stage_query="mapped")
    assert mapped.rerank_feedback == LOCAL_MAP_FEEDBACK
    mapped.map_sample, mapped.map_wait, mapped.map_borrow = 40, False, False
    query, condition = "the dog runs in the park", "the animal"
    fallback = mapped.search(query, condition, k=5, candidates=12)
    assert mapped.last_first_stage() == "conditioned"
    same = conditioned_index.search(query, condition, k=5, candidates=12)  # both with feedback
    assert [r["index"] for r in fallback] == [r["index"] for r in same]
    np.testing.assert_allclose([r["score"] for r in fallback], [r["score"] for r in same], atol=1e-6)
    assert mapped.wait_for_maps(timeout=120)
    results = mapped.search(query, condition, k=5, candidates=12)
    assert mapped.last_first_stage() == "mapped"
    fitted = mapped._condition_map(condition, mapped.key(condition))
    stored = np.concatenate([mapped.store.array(p, FIRST_STAGE) for p in mapped.store.parts])
    unit = stored @ fitted.weights
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    q = mapped.embedder.conditioned([query], condition)[0]
    order = best_rows(unit @ q, np.arange(len(corpus)), len(corpus))[0]

    def under(rows: np.ndarray) -> np.ndarray:
        return mapped.embedder.conditioned([corpus[r] for r in rows], condition)

    residual = LOCAL_MAP_FEEDBACK.rerank(order, 12, 5, q, lambda rows: unit[rows], under)[0]
    unmapped = LOCAL_MAP_FEEDBACK.rerank(order, 12, 5, q, lambda rows: stored[rows], under)[0]
    assert [r["index"] for r in results] == residual.tolist()
    assert residual.tolist() != unmapped.tolist()  # the vectors the local map is fitted from matter here
    mapped.rerank_feedback = None
    plain_top = best_rows(np.array([float(v @ q) for v in under(order[:12])]), order[:12], 5)[0]
    assert [r["index"] for r in mapped.search(query, condition, k=5, candidates=12)] == plain_top.tolist()


@pytest.mark.parametrize("kind", ["none", "tri", "plain"])
def test_an_index_whose_first_stage_cannot_take_feedback_refuses_it(model_dirs, tmp_path, kind):
    """No first stage, a tri-encoder's, or the plain query (another space than the re-ranker's): None, and any
    setting refused, "none" included (as rerank_depth refuses "all" where nothing is re-ranked)."""
    corpus = make_corpus(20)
    if kind == "none":
        index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage=None)
        words = "none (it searches exactly)"
    elif kind == "tri":
        index = ConditionalIndex.build(
            str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage=str(model_dirs["tri-hadamard"])
        )
        words = "query mode 'tri'"
    else:
        index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="plain")
        words = "'self' (query mode 'plain')"
    assert index.rerank_feedback is None
    index.rerank_feedback = None  # no setting: accepted
    with pytest.raises(ValueError, match="rerank_feedback needs a two-stage index"):
        index.rerank_feedback = "none"
    expected = f"rerank_feedback needs a two-stage index whose first stage .*{re.escape(words)}"
    with pytest.raises(ValueError, match=expected):
        index.rerank_feedback = "local-map"
    assert index.rerank_feedback is None


def test_feedback_keeps_a_filter_an_approximate_first_stage_and_a_depth(model_dirs, tmp_path):
    """With a `where` filter every re-ranked row satisfies it; with an HNSW first stage N are re-ranked and the scores
    stay exact; with a depth the rounds are its chunks, stopped by its patience: what LocalMapFeedback gives by hand
    with that depth on the exact first stage's order."""
    corpus = make_corpus(150)
    meta = [{"half": "a" if i % 2 else "b"} for i in range(len(corpus))]
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", metadata=meta)
    query, condition = "a man plays guitar", "the sport"
    key = index.key(condition)
    exact_rows, exact_scores = brute_force(model_dirs["bi"], query, corpus, condition, len(corpus))
    exact = dict(zip(exact_rows, exact_scores))
    filtered = index.search(query, condition, k=5, candidates=12, where={"half": "a"})
    assert len(filtered) == 5 and all(r["index"] % 2 == 1 for r in filtered)
    np.testing.assert_allclose([r["score"] for r in filtered], [exact[r["index"]] for r in filtered], atol=2e-5)
    reranked = index.rerank_cache.lookup(key, np.arange(len(corpus)))[0]
    assert len(reranked) == 12 and all(row % 2 == 1 for row in reranked)  # every re-ranked row passed the filter
    index.rerank_cache = RerankCache()
    stored = np.concatenate([index.store.array(p, FIRST_STAGE) for p in index.store.parts])
    q = index.embedder.conditioned([query], condition)[0]
    order = best_rows(stored @ q, np.arange(len(corpus)), len(corpus))[0]
    depth = RerankDepth(4, 4, 1)
    index.rerank_depth = depth
    before = index.embedder.encoded
    deep = index.search(query, condition, k=5, candidates=100)
    encoded = index.embedder.encoded - before - 1
    by_hand, _, count = LOCAL_MAP_FEEDBACK.rerank(
        order, 100, 5, q, lambda rows: stored[rows],
        lambda rows: index.embedder.conditioned([corpus[r] for r in rows], condition), depth,
    )  # fmt: skip
    assert [r["index"] for r in deep] == by_hand.tolist() and encoded == count < 100  # stopped by its patience
    index.rerank_depth = None
    pytest.importorskip("faiss")
    index.rerank_cache = RerankCache()
    before = index.embedder.encoded
    approximate = index.search(query, condition, k=5, candidates=12, approximate="hnsw")
    assert index.embedder.encoded - before == 12 + 1
    np.testing.assert_allclose([r["score"] for r in approximate], [exact[r["index"]] for r in approximate], atol=2e-5)


def test_embeddings_of_the_wrong_shape_are_refused_saying_so():
    with pytest.raises(ValueError, match=r"2 candidates gave embeddings of shape \(2, 3\), expected \(2, 2\)"):
        LocalMapFeedback(rounds=2).rerank(ROWS, 4, 1, QUERY, first_stage, lambda rows: np.zeros((len(rows), 3)))


def rotation_pairs(rows: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The first-stage vectors of ``rows`` and their embeddings under the by-hand condition (rotated by -90 deg)."""
    x = first_stage(np.array(rows))
    return x, np.stack([x[:, 1], -x[:, 0]], axis=1)


def test_earlier_pairs_choose_the_first_round_once_there_are_enough(monkeypatch):
    # the earlier searches re-ranked rows 13 and 16, whose pairs fit the rotation: with MIN_EARLIER at 2 the first
    # round is already the map's best two (13: b = 1.0, 14: 0.96) instead of the first stage's (10, 11)
    monkeypatch.setattr(feedback_module, "MIN_EARLIER", 2)
    moments = PairMoments()
    moments.add("c", np.array([13, 16]), *rotation_pairs([13, 16]))
    seen: list[list[int]] = []
    feedback = LocalMapFeedback(rounds=2, ridge=1e-6, pool=10)
    rows, _, _ = feedback.rerank(ROWS, 4, 2, QUERY, first_stage, conditioned(seen), pairs=moments.of("c"))
    assert seen[0] == [13, 14] and rows.tolist() == [13, 14]
    # the search added its own pairs, each row once (13 was held already): 13, 16 + the 3 others it re-ranked
    assert moments.count("c") == 2 + 3
    # "own": the same search without the earlier pairs starts from the first stage's order and adds nothing
    seen.clear()
    own = LocalMapFeedback(rounds=2, ridge=1e-6, pool=10, earlier=False)
    own.rerank(ROWS, 4, 2, QUERY, first_stage, conditioned(seen), pairs=moments.of("c"))
    assert seen[0] == [10, 11] and moments.count("c") == 5
    # below MIN_EARLIER (now 10) the first round is the first stage's again; the later rounds still fit on them
    monkeypatch.setattr(feedback_module, "MIN_EARLIER", 10)
    seen.clear()
    feedback.rerank(ROWS, 4, 2, QUERY, first_stage, conditioned(seen), pairs=moments.of("c"))
    assert seen == [[10, 11], [13, 14]]


def test_a_fit_with_earlier_pairs_is_the_fit_on_every_distinct_pair():
    """The sums hold each row once; the map a round fits from them and the search's own pairs is fit_condition_map
    on the union of the rows (the earlier pairs here are not a rotation, so the union matters)."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    moments = PairMoments()
    assert moments.add("c", np.array([0, 1, 2, 1]), x[[0, 1, 2, 1]], y[[0, 1, 2, 1]]) == 3  # row 1 given twice
    assert moments.add("c", np.array([2, 3]), x[[2, 3]], y[[2, 3]]) == 1  # row 2 held already
    snap = moments.snapshot("c", np.array([3, 4, 0]))
    assert snap is not None and snap.count == 4 and snap.held.tolist() == [True, False, True]
    by_hand = fit_condition_map(x[:4], y[:4], 0.5)  # rows 0..3, once each
    np.testing.assert_allclose(map_from_moments(snap.gram, snap.cross, 0.5).numpy(), by_hand, atol=1e-6)
    np.testing.assert_allclose(snap.gram.numpy(), x[:4].T @ x[:4], atol=1e-12)
    # widths must match; a full condition takes no more pairs
    with pytest.raises(ValueError, match="condition c: pairs of width 2, its sums have width 3"):
        moments.add("c", np.array([5]), np.zeros((1, 2)), np.zeros((1, 2)))
    with pytest.raises(ValueError, match=r"2 rows need matching \(rows, d\) pairs, got \(1, 3\) and \(1, 3\)"):
        moments.add("c", np.array([4, 5]), x[[4]], y[[4]])
    small = PairMoments(max_conditions=2, max_rows=2)
    assert small.add("a", np.array([0, 1, 2]), x[:3], y[:3]) == 2 and small.count("a") == 2
    small.add("b", np.array([0]), x[:1], y[:1])
    small.add("c", np.array([0]), x[:1], y[:1])  # three conditions: the least recently used ("a") goes
    assert small.count("a") == 0 and small.count("b") == small.count("c") == 1
    assert small.snapshot("a", np.array([0])) is None


def test_the_rerank_cache_drops_a_conditions_sums_with_it():
    cache = RerankCache(max_rows=2)
    for key in ("a", "b"):
        cache.moments.add(key, np.array([0]), np.ones((1, 2)), np.ones((1, 2)))
        cache.store(key, [0], np.ones((1, 2), dtype=np.float32))
    assert cache.moments.count("a") == cache.moments.count("b") == 1
    cache.store("b", [1], np.ones((1, 2), dtype=np.float32))  # over the limit: condition "a" is dropped
    assert cache.moments.count("a") == 0 and cache.moments.count("b") == 1


def test_an_index_fits_a_conditions_later_searches_on_its_earlier_pairs(model_dirs, tmp_path):
    """The second search under a condition is LocalMapFeedback by hand given the first search's pairs (and not the
    search without them); a search under the `own` setting adds nothing; a map's ranking neither reads nor adds."""
    corpus = make_corpus(150)
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index")
    condition = "the sport"
    key = index.key(condition)
    index.search("a man plays guitar", condition, k=5, candidates=12)
    assert index.rerank_cache.moments.count(key) == 12
    stored = np.concatenate([index.store.array(p, FIRST_STAGE) for p in index.store.parts])
    first_rows = [int(r) for r in index.rerank_cache.lookup(key, np.arange(len(corpus)))[0]]
    query = "a woman rides a bike"
    q = index.embedder.conditioned([query], condition)[0]
    order = best_rows(stored @ q, np.arange(len(corpus)), len(corpus))[0]

    reranked: list[int] = []

    def under(rows: np.ndarray) -> np.ndarray:
        reranked.extend(int(r) for r in rows)
        return index.embedder.conditioned([corpus[r] for r in rows], condition)

    held = PairMoments()
    held.add(key, np.array(first_rows), stored[first_rows], under(np.array(first_rows)))
    reranked.clear()
    with_earlier = LOCAL_MAP_FEEDBACK.rerank(order, 12, 5, q, lambda rows: stored[rows], under, None, held.of(key))[0]
    chosen_with, reranked[:] = set(reranked), []
    LOCAL_MAP_FEEDBACK.rerank(order, 12, 5, q, lambda rows: stored[rows], under)
    assert set(reranked) != chosen_with  # the earlier pairs change which candidates are re-ranked
    results = index.search(query, condition, k=5, candidates=12)
    assert [r["index"] for r in results] == with_earlier.tolist()
    assert index.rerank_cache.moments.count(key) == held.count(key) == len(set(first_rows) | chosen_with)
    after = index.rerank_cache.moments.snapshot(key, np.zeros(0))
    assert after is not None
    np.testing.assert_allclose(after.gram.numpy(), held.snapshot(key, np.zeros(0)).gram.numpy(), atol=1e-9)
    index.rerank_feedback = "local-map:4,0.1,10,own"
    before = index.rerank_cache.moments.count(key)
    index.search("two dogs play", condition, k=5, candidates=12)
    assert index.rerank_cache.moments.count(key) == before
    mapped = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "mapped", first_stage_query="mapped")
    mapped.map_sample = 40
    mapped.search(query, condition, k=5, candidates=12)
    assert mapped.last_first_stage() == "mapped" and mapped.rerank_cache.moments.count(key) == 0


def test_every_fit_with_earlier_pairs_is_the_fit_on_the_union_of_distinct_rows(monkeypatch):
    """Random pairs (no map fits them exactly, so weights matter): each round's map is fit_condition_map on the
    earlier rows plus the rows re-ranked so far, each once, though the search re-ranks rows the earlier ones hold."""
    rng = np.random.default_rng(3)
    plain, under = rng.normal(size=(60, 4)), rng.normal(size=(60, 4))
    moments = PairMoments()
    earlier = np.array([0, 1, 2, 3, 4, 5, 40, 41])  # rows 0-5 are the first stage's best too
    moments.add("c", earlier, plain[earlier], under[earlier])
    reranked: list[int] = []
    fits: list[tuple[np.ndarray, list[int]]] = []
    original = feedback_module.map_from_moments

    def spy(gram, cross, ridge):
        weights = original(gram, cross, ridge)
        fits.append((weights.numpy(), sorted(set(earlier.tolist()) | set(reranked))))
        return weights

    def embed(rows: np.ndarray) -> np.ndarray:
        reranked.extend(int(r) for r in rows)
        return under[rows]

    monkeypatch.setattr(feedback_module, "map_from_moments", spy)
    LocalMapFeedback(rounds=3, ridge=0.5, pool=3).rerank(
        np.arange(60), 12, 3, under[7] / np.linalg.norm(under[7]), lambda rows: plain[rows], embed,
        pairs=moments.of("c"),
    )  # fmt: skip
    # 8 earlier pairs, under MIN_EARLIER: the first round is the first stage's best 4, rows 0-3, all held already;
    # the two later rounds fit on the sums plus this search's pairs not held
    assert reranked[:4] == [0, 1, 2, 3] and len(fits) == 2 and fits[0][1] == sorted(earlier.tolist())
    for weights, union in fits:
        np.testing.assert_allclose(weights, fit_condition_map(plain[union], under[union], 0.5), atol=1e-5)
    assert moments.count("c") == len(set(earlier.tolist()) | set(reranked))


def test_a_mapped_index_ranking_as_conditioned_meanwhile_adds_its_pairs(model_dirs, tmp_path):
    """No map yet and none to borrow: the search ranks as `conditioned` and its pairs join the condition's sums."""
    corpus = make_corpus(150)
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "mapped", first_stage_query="mapped")
    index.map_sample, index.map_wait, index.map_borrow = 40, False, False
    condition = "the animal"
    index.search("the dog runs in the park", condition, k=5, candidates=12)
    assert index.last_first_stage() == "conditioned"
    assert index.rerank_cache.moments.count(index.key(condition)) == 12
    assert index.wait_for_maps(timeout=120)


def test_recall_runs_each_search_as_its_conditions_first(model_dirs, tmp_path):
    """ConditionalIndex.recall sets the earlier pairs aside: the same figure twice, and the sums left as they were."""
    corpus = make_corpus(150)
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index")
    condition = "the sport"
    index.search("a man plays guitar", condition, k=5, candidates=12)
    key = index.key(condition)
    queries = ["a woman rides a bike", "two dogs play", "a child sings"]
    first = index.recall(queries, condition, k=5, candidates=12, strategy="two-stage", approximate=False)
    again = index.recall(queries, condition, k=5, candidates=12, strategy="two-stage", approximate=False)
    assert first["per_query"] == again["per_query"]
    assert index.rerank_cache.moments.count(key) == 12  # the measured searches added nothing

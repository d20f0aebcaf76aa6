"""Two-stage conditional search (finesim.index.two_stage): candidates from the condition-independent first stage,
re-ranked exactly under the condition; the exact full-corpus search stays the reference."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from index_helpers import assert_matches_brute_force, brute_force, build_model_dirs, make_corpus

from conftest import import_or_skip
from finesim import ConditionalIndex
from finesim.index.tri import candidate_dot
from finesim.index.two_stage import FIRST_STAGE, RerankCache, fit_condition_map, map_sample_rows, resolve_first_stage

QUERIES = [("a man plays guitar", "the sport"), ("the dog runs in the park", "the animal"), ("a red car", "color")]


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return make_corpus(120)


def test_every_candidate_reranked_is_exact_search(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index")
    assert index.first_stage_spec is not None and index.first_stage_spec.model == "self"
    for query, condition in QUERIES:
        results = index.search(query, condition, k=7, strategy="two-stage", candidates=len(corpus))
        assert_matches_brute_force(results, model_dirs["bi"], query, corpus, condition, 7)
    assert json.loads(json.dumps(results)) == results


def test_a_new_condition_embeds_only_the_candidates(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index")
    assert index.embedder.encoded == len(corpus)  # the first-stage vectors, once
    before = index.embedder.encoded
    results = index.search("a man plays guitar", "the sport", k=5, candidates=20)  # auto: two-stage
    assert index.embedder.encoded - before == 20 + 1  # the candidates and the (query, condition)
    assert index.conditions == []  # nothing stored on disk for the condition
    # each score is the exact conditional score of that row
    rows, scores = brute_force(model_dirs["bi"], "a man plays guitar", corpus, "the sport", len(corpus))
    exact = dict(zip(rows, scores))
    np.testing.assert_allclose([r["score"] for r in results], [exact[r["index"]] for r in results], atol=2e-5)
    # the same search again, its feedback fitted on this search's pairs alone as the first was (with the earlier
    # pairs, the default, its later rounds may choose other candidates): cached candidates are not embedded again
    index.rerank_feedback = "local-map:4,0.1,10,own"
    before = index.embedder.encoded
    index.search("a man plays guitar", "the sport", k=5, candidates=20)
    assert index.embedder.encoded - before == 1
    assert index.rerank_cache.hits == 20


def test_the_first_stage_ranks_by_the_conditioned_query(model_dirs, corpus, tmp_path):
    """The candidates are the rows whose stored first-stage vectors are nearest the (query, condition) vector (without
    feedback, which picks some of them otherwise: tests/index/test_feedback.py)."""
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index")
    index.rerank_feedback = None
    stored = np.concatenate([index.store.array(p, FIRST_STAGE) for p in index.store.parts])
    expected = index.embedder.plain(corpus)
    np.testing.assert_allclose(stored, expected, atol=1e-6)
    query = index.embedder.conditioned(["a red car"], "color")[0]
    nearest = set(np.argsort(-(stored @ query), kind="stable")[:10].tolist())
    cands = index.search_rows("a red car", "color", k=10, candidates=10, strategy="two-stage")[0]
    assert set(cands.tolist()) == nearest


def test_a_float16_index_ranks_its_first_stage_by_the_half_product(model_dirs, corpus, tmp_path, monkeypatch):
    """A float16 index's first stage scores every row in float16 (finesim.index.tri.candidate_dot, whose values
    tests/index/test_tri_first_stage.py checks), in one run (not split over Python threads): the candidates are the
    top rows by the stored halves times the query rounded to float16, each product rounded to float16, ties to the
    lower row; the re-ranked scores stay the model's exact ones."""
    import finesim.index.conditional_index as module

    blocks: list[np.dtype] = []

    def spy(block, vector):
        blocks.append(block.dtype)
        return candidate_dot(block, vector)

    monkeypatch.setattr(module, "candidate_dot", spy)
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", dtype="float16")
    index.rerank_feedback = None
    index.scan_threads = 2  # split for a float32 index; a float16 one scans in one run
    monkeypatch.setattr(module, "SCORE_CHUNK", 16)  # 8 chunks, which a float32 index would split
    monkeypatch.setattr(module, "ThreadPoolExecutor", None)  # a split scan would fail here
    stored = np.concatenate([index.store.array(p, FIRST_STAGE) for p in index.store.parts])
    assert stored.dtype == np.float16
    for query, condition in QUERIES:
        vector = index.embedder.conditioned([query], condition)[0]
        by_hand = (stored.astype(np.float64) @ vector.astype(np.float16).astype(np.float64)).astype(np.float16)
        order = np.lexsort((np.arange(len(corpus)), -by_hand.astype(np.float64)))
        cands = index.search_rows(query, condition, k=10, candidates=10, strategy="two-stage")[0]
        assert set(cands.tolist()) == set(order[:10].tolist())
        results = index.search(query, condition, k=5, candidates=len(corpus), strategy="two-stage")
        assert_matches_brute_force(results, model_dirs["bi"], query, corpus, condition, 5)
    assert blocks and set(blocks) == {np.dtype(np.float16)}


def test_auto_is_exact_for_a_stored_condition(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", conditions=["the sport"])
    assert index._strategy("auto", "the sport") == "exact"
    assert index._strategy("auto", "the animal") == "two-stage"
    results = index.search("a man plays guitar", "the sport", k=5, candidates=3)  # exact: candidates unused
    assert_matches_brute_force(results, model_dirs["bi"], "a man plays guitar", corpus, "the sport", 5)
    with pytest.raises(ValueError, match="strategy must be one of"):
        index.search("a", "b", strategy="fast")


def test_without_a_first_stage_two_stage_is_refused(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus[:10], tmp_path / "index", first_stage=None)
    assert "first_stage" not in index.store.manifest
    with pytest.raises(ValueError, match="has no first stage"):
        index.search("a dog", "the animal", strategy="two-stage")
    assert index._strategy("auto", "the animal") == "exact"


def test_first_stage_options_are_checked():
    assert resolve_first_stage("bi", "auto", None) == ("self", "conditioned")
    assert resolve_first_stage("case", "auto", None) == (None, "plain")
    assert resolve_first_stage("case", "minilm", None) == ("minilm", "plain")
    assert resolve_first_stage("bi", "self", "plain") == ("self", "plain")
    with pytest.raises(ValueError, match="needs a bi-encoder"):
        resolve_first_stage("case", "self", None)
    with pytest.raises(ValueError, match="needs no first stage"):
        resolve_first_stage("tri", "self", None)
    with pytest.raises(ValueError, match="must be one of"):
        resolve_first_stage("bi", "self", "both")
    # a query mode for an index that gets no first stage would be ignored: refused, saying why
    with pytest.raises(ValueError, match="query 'mapped' needs a first stage, and first_stage is none: drop"):
        resolve_first_stage("bi", "none", "mapped")
    with pytest.raises(ValueError, match="query 'plain' needs a first stage, and a tri-encoder index has none"):
        resolve_first_stage("tri", "auto", "plain")
    with pytest.raises(ValueError, match="query 'mapped' needs a first stage, and a case index has none unless named"):
        resolve_first_stage("case", "auto", "mapped")
    assert resolve_first_stage("bi", None, "auto") == (None, "plain")  # "auto" asks for nothing


def test_case_with_another_first_stage_model(model_dirs, corpus, tmp_path):
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["case"]), corpus, folder, first_stage=str(model_dirs["bi"]))
    spec = json.loads((folder / "manifest.json").read_text())["first_stage"]
    assert spec["model"] == str(model_dirs["bi"]) and spec["query"] == "plain" and spec["sha256"]
    reopened = ConditionalIndex.open(folder)
    for query, condition in QUERIES[:2]:
        results = reopened.search(query, condition, k=6, candidates=len(corpus))
        assert_matches_brute_force(results, model_dirs["case"], query, corpus, condition, 6)
    assert reopened.conditions == []


def test_add_extends_the_first_stage(model_dirs, tmp_path):
    texts = make_corpus(80, seed=5)
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["bi"]), texts[:50], folder)
    index = ConditionalIndex.open(folder)
    index.add(texts[50:])
    assert [p.count for p in index.store.parts] == [50, 30]
    assert index.store.array(index.store.parts[1], FIRST_STAGE).shape[0] == 30
    results = index.search("a cat", "the animal", k=8, candidates=len(texts))
    assert_matches_brute_force(results, model_dirs["bi"], "a cat", texts, "the animal", 8)


def test_approximate_first_stage_and_recall(model_dirs, corpus, tmp_path):
    import_or_skip("faiss")
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index")
    report = index.recall(
        [q for q, _ in QUERIES], [c for _, c in QUERIES], k=5, approximate="hnsw", strategy="two-stage",
        candidates=len(corpus),
    )  # fmt: skip
    assert report["recall"] == 1.0 and report["strategy"] == "two-stage"
    assert (tmp_path / "index" / "ann" / f"{FIRST_STAGE}-hnsw.faiss").is_file()
    small = index.recall([q for q, _ in QUERIES], [c for _, c in QUERIES], k=5, strategy="two-stage", candidates=5)
    assert 0.0 <= small["recall"] <= 1.0


def test_recall_measures_two_stage_search_not_the_stored_condition(model_dirs, corpus, tmp_path):
    """recall(strategy='auto') resolves the strategy before the exact reference stores the condition, so it measures
    two-stage search (with few candidates it misses some of the exact top-k on a random tiny model)."""
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index")
    queries = [q for q, _ in QUERIES]
    report = index.recall(queries, [c for _, c in QUERIES], k=10, approximate=False, candidates=10)
    assert report["strategy"] == "two-stage"
    assert report["recall"] < 1.0  # the 10 first-stage candidates are not all of the exact top 10
    assert sorted(index.conditions) == sorted(c for _, c in QUERIES)  # the reference stored them
    again = index.recall(queries, [c for _, c in QUERIES], k=10, approximate=False, candidates=10)
    assert again["strategy"] == "exact" and again["recall"] == 1.0  # now stored: auto is exact


def test_added_rows_are_candidates(model_dirs, tmp_path):
    """After add, the first stage covers the new part: a query equal to an added text finds it among few candidates."""
    texts = make_corpus(80, seed=7)
    index = ConditionalIndex.build(str(model_dirs["bi"]), texts[:60], tmp_path / "index")
    index.add(texts[60:])
    for approximate in (False, "hnsw") if import_faiss_or_none() else (False,):
        assert 70 in set(index.search_rows(texts[70], "the color", k=3, candidates=3, strategy="two-stage",
                                           approximate=approximate)[0].tolist())  # fmt: skip


def import_faiss_or_none():
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def test_a_tri_encoder_index_refuses_two_stage(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(str(model_dirs["tri-hadamard"]), corpus[:20], tmp_path / "index")
    with pytest.raises(ValueError, match="a tri-encoder index has no two-stage search"):
        index.search("a dog", "the animal", strategy="two-stage")
    with pytest.raises(ValueError, match="strategy must be one of"):
        index.search("a dog", "the animal", strategy="bogus")


def test_rerank_cache_holds_at_most_its_rows_with_one_condition():
    cache = RerankCache(max_rows=4)
    cache.store("a", list(range(10)), np.zeros((10, 2)))
    found, missing = cache.lookup("a", np.arange(10))
    assert sorted(found) == [6, 7, 8, 9] and missing == [0, 1, 2, 3, 4, 5]  # the oldest rows went


def test_rerank_cache_drops_the_least_recent_condition():
    cache = RerankCache(max_rows=4)
    cache.store("a", [0, 1, 2], np.zeros((3, 2)))
    cache.store("b", [0, 1], np.ones((2, 2)))  # 5 rows held > 4: "a" goes
    found, missing = cache.lookup("a", np.array([0, 1]))
    assert found == {} and missing == [0, 1]
    found, missing = cache.lookup("b", np.array([1, 5]))
    assert list(found) == [1] and missing == [5]


# The "mapped" first stage: the corpus vectors mapped under the condition by a linear map fitted per condition


def test_the_condition_map_by_hand():
    """x = I (two texts, two dims), their embeddings under the condition swapped: B = (I + r I)^-1 (Y - X), so with
    r = 1 each row of W = I + B is (0.5, 0.5); with r = 3 it is (0.75, 0.25) / (0.25, 0.75)."""
    plain = np.eye(2)
    conditioned = np.array([[0.0, 1.0], [1.0, 0.0]])
    np.testing.assert_allclose(fit_condition_map(plain, conditioned, ridge=1.0), [[0.5, 0.5], [0.5, 0.5]])
    np.testing.assert_allclose(fit_condition_map(plain, conditioned, ridge=3.0), [[0.75, 0.25], [0.25, 0.75]])
    np.testing.assert_allclose(fit_condition_map(plain, plain, ridge=0.3), np.eye(2))  # nothing moves: identity
    # not symmetric, so a transposed W shows: B = ([[1, 2], [0, 1]] - I) / 2 = [[0, 1], [0, 0]]
    np.testing.assert_allclose(fit_condition_map(plain, np.array([[1.0, 2.0], [0.0, 1.0]]), ridge=1.0),
                               [[1.0, 1.0], [0.0, 1.0]])  # fmt: skip
    with pytest.raises(ValueError, match="matching"):
        fit_condition_map(plain, conditioned[:1])
    with pytest.raises(ValueError, match="ridge must be > 0"):
        fit_condition_map(plain, conditioned, ridge=0.0)


def test_map_sample_rows_are_fixed_and_cover_a_small_corpus():
    assert map_sample_rows(5, 8).tolist() == [0, 1, 2, 3, 4]
    rows = map_sample_rows(1000, 50)
    assert len(set(rows.tolist())) == 50 and rows.tolist() == sorted(rows.tolist()) and rows.max() < 1000
    assert rows.tolist() == map_sample_rows(1000, 50).tolist()


def test_the_mapped_first_stage_ranks_by_the_mapped_cosine(model_dirs, corpus, tmp_path):
    """The candidates are the rows with the highest cosine between x W (W fitted by hand on the sample's stored
    vectors and their embeddings under the condition) and the (query, condition) embedding (feedback off: the
    ranking's own top N; with feedback: tests/index/test_feedback.py)."""
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["bi"]), corpus, folder, first_stage_query="mapped")
    assert json.loads((folder / "manifest.json").read_text())["first_stage"]["query"] == "mapped"
    index = ConditionalIndex.open(folder)
    index.map_sample, index.rerank_feedback = 40, None
    stored = np.concatenate([index.store.array(p, FIRST_STAGE) for p in index.store.parts])
    sample = map_sample_rows(len(corpus), 40)
    under = index.embedder.conditioned([corpus[i] for i in sample], "color")
    weights = fit_condition_map(stored[sample], under, ridge=index.map_ridge)
    mapped = stored @ weights
    query = index.embedder.conditioned(["a red car"], "color")[0]
    cosine = (mapped @ query) / np.linalg.norm(mapped, axis=1)
    nearest = set(np.argsort(-cosine, kind="stable")[:10].tolist())
    cands = index.search_rows("a red car", "color", k=10, candidates=10, strategy="two-stage")[0]
    assert set(cands.tolist()) == nearest
    # the map moves the ranking here: the conditioned first stage (the unmapped vectors) has other candidates
    assert nearest != set(np.argsort(-(stored @ query), kind="stable")[:10].tolist())


def test_the_mapped_first_stage_fits_once_per_condition_and_again_after_add(model_dirs, tmp_path):
    texts = make_corpus(90, seed=3)
    index = ConditionalIndex.build(str(model_dirs["bi"]), texts[:70], tmp_path / "index", first_stage_query="mapped")
    index.map_sample = 30
    before = index.embedder.encoded
    index.search_rows("a cat", "the animal", k=5, candidates=20, strategy="two-stage")
    sample = set(map_sample_rows(70, 30).tolist())
    first = index.embedder.encoded - before
    assert first >= 30 + 1 and first <= 30 + 20 + 1  # the sample, the candidates not in it, the query
    fitted = index._maps[index.key("the animal")]
    before = index.embedder.encoded
    index.search_rows("a dog", "the animal", k=5, candidates=20, strategy="two-stage")
    assert index.embedder.encoded - before <= 20 + 1  # at most the new candidates and the query
    assert index._maps[index.key("the animal")] is fitted  # the same map: not fitted again
    assert fitted.count == 70 and set(fitted.sample.tolist()) == sample and fitted.inverse_norms.shape == (70,)
    index.add(texts[70:])
    index.search_rows("a cat", "the animal", k=5, candidates=20, strategy="two-stage")
    assert index._maps[index.key("the animal")].count == 90  # the index grew: fitted again over every row
    # every candidate re-ranked is exact search, whatever the first stage
    results = index.search("a cat", "the animal", k=6, candidates=len(texts), strategy="two-stage")
    assert_matches_brute_force(results, model_dirs["bi"], "a cat", texts, "the animal", 6)


def test_prepare_map_fits_ahead_what_the_first_search_would_fit(model_dirs, corpus, tmp_path):
    """map_needed says whether an 'auto' search would fit (or read) a map first; prepare_map does that step now, so
    the search after it embeds only its query and candidates; neither applies to an index that needs no map."""
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="mapped")
    index.map_sample = 30
    assert index.map_needed("the animal")
    before = index.embedder.encoded
    assert index.prepare_map("the animal") is True
    assert index.embedder.encoded - before >= 30  # the sample, embedded under the condition
    assert not index.map_needed("the animal") and index.prepare_map("the animal") is False
    fitted = index._maps[index.key("the animal")]
    before = index.embedder.encoded
    index.search_rows("a cat", "the animal", k=5, candidates=10)  # 'auto': two-stage, the map held
    assert index.embedder.encoded - before <= 10 + 1 and index._maps[index.key("the animal")] is fitted
    index.map_sample = 40  # another sample size: fitted again
    assert index.map_needed("the animal")
    index.prepare(["the color"])  # stored: 'auto' searches it exactly, no map
    assert not index.map_needed("the color") and index.prepare_map("the color") is False
    with pytest.raises(ValueError, match="condition"):
        index.prepare_map("   ")
    plain = ConditionalIndex.build(str(model_dirs["bi"]), corpus[:20], tmp_path / "conditioned")
    assert not plain.map_needed("the animal") and plain.prepare_map("the animal") is False


def test_the_approximate_mapped_first_stage_matches_the_exact_one_when_its_pool_holds_every_row(
    model_dirs, corpus, tmp_path
):
    """An approximate "mapped" first stage re-ranks faiss's MAP_POOL x N rows by the map: with a pool as large as
    the corpus (and faiss exact on 120 rows), it returns the exact first stage's candidates."""
    import_or_skip("faiss")
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="mapped")
    index.map_sample = 40
    for query, condition in QUERIES:
        exact = index.search_rows(query, condition, k=12, candidates=12, strategy="two-stage")[0]
        approx = index.search_rows(query, condition, k=12, candidates=12, strategy="two-stage", approximate="hnsw")[0]
        assert set(approx.tolist()) == set(exact.tolist())


def test_mapped_needs_the_self_first_stage(model_dirs, corpus, tmp_path):
    assert resolve_first_stage("bi", "self", "mapped") == ("self", "mapped")
    with pytest.raises(ValueError, match=r"'mapped' .* needs first_stage='self'"):
        resolve_first_stage("case", str(model_dirs["bi"]), "mapped")


def test_a_changed_map_sample_or_ridge_fits_the_map_again(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="mapped")
    index.map_sample = 30
    index.search_rows("a cat", "the animal", k=5, candidates=10, strategy="two-stage")
    first = index._maps[index.key("the animal")]
    assert len(first.sample) == 30 and first.ridge == index.map_ridge
    index.map_ridge = 2.0
    index.search_rows("a cat", "the animal", k=5, candidates=10, strategy="two-stage")
    assert index._maps[index.key("the animal")].ridge == 2.0
    index.map_sample = 50
    index.search_rows("a cat", "the animal", k=5, candidates=10, strategy="two-stage")
    assert len(index._maps[index.key("the animal")].sample) == 50
    index.map_sample = 0
    with pytest.raises(ValueError, match="map_sample must be a whole number >= 1, got 0"):
        index.search_rows("a cat", "the color", k=5, candidates=10, strategy="two-stage")


def test_without_waiting_a_new_condition_ranks_as_conditioned_until_its_map_is_fitted(model_dirs, corpus, tmp_path):
    """map_wait False: the first query of a condition takes the conditioned first stage's
    candidates and starts the fit in the background; once fitted, queries take the mapped ones (feedback off: the
    conditioned ranking's candidates as they are)."""
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="mapped")
    index.map_sample, index.map_wait, index.rerank_feedback = 40, False, None
    stored = np.concatenate([index.store.array(p, FIRST_STAGE) for p in index.store.parts])
    query = index.embedder.conditioned(["a red car"], "color")[0]
    conditioned = set(np.argsort(-(stored @ query), kind="stable")[:10].tolist())
    first = index.search_rows("a red car", "color", k=10, candidates=10, strategy="two-stage")[0]
    assert set(first.tolist()) == conditioned and index.last_first_stage() == "conditioned"
    assert index.wait_for_maps(timeout=120)
    fitted = index._maps[index.key("color")]
    mapped = stored @ fitted.weights
    cosine = (mapped @ query) / np.linalg.norm(mapped, axis=1)
    expected = set(np.argsort(-cosine, kind="stable")[:10].tolist())
    assert expected != conditioned  # the two first stages differ here, so the check below can fail
    again = index.search_rows("a red car", "color", k=10, candidates=10, strategy="two-stage")[0]
    assert set(again.tolist()) == expected and index.last_first_stage() == "mapped"
    index.search_rows("a red car", "color", k=10, strategy="exact")
    assert index.last_first_stage() is None  # every row scored: no first stage
    with pytest.raises(ValueError):
        index.search_rows("a red car", "color", k=0, candidates=10, strategy="two-stage")
    assert index.last_first_stage() is None  # a failed search leaves none behind


def test_without_waiting_a_new_condition_borrows_the_map_of_the_nearest_condition_held(model_dirs, corpus, tmp_path):
    """map_wait False and maps held for other conditions: a new condition's first query ranks with the map of the
    held condition whose text embedding is nearest its own (by hand: cosines of the plain embeddings of the condition
    texts, then the mapped cosine with that map's weights) and says "borrowed"; below map_borrow_min_cosine, or with
    map_borrow False, it ranks as "conditioned"; its own fit's failure still raises on the next query (feedback off:
    the conditioned ranking's candidates as they are)."""
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="mapped")
    index.map_sample, index.rerank_feedback = 40, None
    held = ("color", "the animal")
    for condition in held:  # fitted while waiting, as earlier searches would have
        index.search_rows("a red car", condition, k=5, candidates=10, strategy="two-stage")
    index.map_wait = False
    stored = np.concatenate([index.store.array(p, FIRST_STAGE) for p in index.store.parts])
    new = "the colour of the car"
    texts = index.embedder.plain([new, *held])
    cosines = texts[1:] @ texts[0]
    assert abs(cosines[0] - cosines[1]) > 1e-4  # the nearest is decided
    query = index.embedder.conditioned(["a red car"], new)[0]

    def top(weights: np.ndarray) -> set[int]:
        mapped = stored @ weights
        return set(np.argsort(-(mapped @ query) / np.linalg.norm(mapped, axis=1), kind="stable")[:10].tolist())

    donors = [top(index._maps[index.key(c)].weights) for c in held]
    assert donors[0] != donors[1]  # the donor matters here, so picking the wrong one fails
    index.map_borrow = False
    first = index.search_rows("a red car", new, k=10, candidates=10, strategy="two-stage")[0]
    assert set(first.tolist()) == set(np.argsort(-(stored @ query), kind="stable")[:10].tolist())
    assert index.last_first_stage() == "conditioned"
    assert index.wait_for_maps(timeout=120)
    index._maps.pop(index.key(new))  # as if its fit had not ended yet (the map file stays behind: removed too)
    for kept in (index.store.root / "maps").glob("*.npz"):
        if index.key(new) in kept.name:
            kept.unlink()
    index.map_borrow = True
    index.map_borrow_min_cosine = float(cosines.max()) + 1e-3  # the nearest held condition is too far: none borrowed
    index._fit_condition_map = lambda *args, **kwargs: (_ for _ in ()).throw(RuntimeError("held up"))
    index.search_rows("a red car", new, k=10, candidates=10, strategy="two-stage")
    assert index.last_first_stage() == "conditioned"
    assert index.wait_for_maps(timeout=120)
    with pytest.raises(RuntimeError, match="held up"):  # the background fit's failure, on the next query
        index.search_rows("a red car", new, k=10, candidates=10, strategy="two-stage")
    index.map_borrow_min_cosine = float(cosines.max()) - 1e-3
    second = index.search_rows("a red car", new, k=10, candidates=10, strategy="two-stage")[0]
    assert set(second.tolist()) == donors[int(np.argmax(cosines))] and index.last_first_stage() == "borrowed"
    assert index.wait_for_maps(timeout=120)
    index.map_sample = 41  # the held maps were fitted on another sample: none of them is borrowed
    with pytest.raises(RuntimeError, match="held up"):
        index.search_rows("a red car", new, k=10, candidates=10, strategy="two-stage")  # the last failure, raised
    index.search_rows("a red car", new, k=10, candidates=10, strategy="two-stage")
    assert index.last_first_stage() == "conditioned"
    assert index.wait_for_maps(timeout=120)
    with pytest.raises(RuntimeError, match="held up"):  # the background fit's failure, on the next query
        index.search_rows("a red car", new, k=10, candidates=10, strategy="two-stage")


def test_background_fits_of_several_new_conditions_take_turns(model_dirs, corpus, tmp_path, monkeypatch):
    """map_wait False and new conditions queried at once: each is answered at once, at most MAP_PENDING fits wait (a
    condition beyond them is queued by its next query), each map is fitted once, never two fits at the same time
    (they share the model: one at a time, as a server's), and a saved map is read without waiting for a fit's turn."""
    import threading
    import time

    import finesim.index.conditional_index as module

    monkeypatch.setattr(module, "MAP_PENDING", 3)
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="mapped")
    index.map_sample, index.map_wait = 40, False
    fit, running, most, fitted = index._fit_condition_map, [0], [0], []
    count, queued = threading.Lock(), threading.Event()

    def one_at_a_time(condition, *args, **kwargs):
        with count:
            running[0] += 1
            most[0] = max(most[0], running[0])
        assert queued.wait(60)  # no fit ends before the four conditions were searched
        time.sleep(0.2)  # long enough for another thread's fit to start, were it allowed to
        try:
            return fit(condition, *args, **kwargs)
        finally:
            with count:
                running[0] -= 1
                fitted.append(condition)

    index._fit_condition_map = one_at_a_time
    for condition in ("color", "size", "the animal", "the place"):  # the fourth is beyond MAP_PENDING
        index.search_rows("a red car", condition, k=5, candidates=10, strategy="two-stage")
    assert len(index._map_threads) == 3
    queued.set()
    assert index.wait_for_maps(timeout=120)
    assert sorted(fitted) == ["color", "size", "the animal"] and most[0] == 1
    assert not any(index.map_needed(c) for c in ("color", "size", "the animal")) and index.map_needed("the place")
    index.search_rows("a red car", "the place", k=5, candidates=10, strategy="two-stage")  # now there is room
    assert index.wait_for_maps(timeout=120) and not index.map_needed("the place") and len(fitted) == 4
    again = ConditionalIndex.open(index.store.root)  # a later process: the maps are in maps/
    again.map_sample, again.map_wait = 40, False
    with again._background_fit_turn:  # a fit holding the turn does not hold up reading a saved map
        again.search_rows("a red car", "color", k=5, candidates=10, strategy="two-stage")
        assert again.wait_for_maps(timeout=30) and not again.map_needed("color")


def test_a_background_fit_that_fails_raises_on_the_next_query(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="mapped")
    index.map_sample, index.map_ridge, index.map_wait = 40, 0.0, False  # a ridge the fit refuses
    index.search_rows("a cat", "the animal", k=5, candidates=10, strategy="two-stage")  # answered meanwhile
    assert index.wait_for_maps(timeout=120)
    with pytest.raises(ValueError, match="ridge must be > 0"):
        index.search_rows("a cat", "the animal", k=5, candidates=10, strategy="two-stage")
    index.map_ridge = 0.5  # fixed: the next query starts a good fit
    index.search_rows("a cat", "the animal", k=5, candidates=10, strategy="two-stage")
    assert index.wait_for_maps(timeout=120) and index._maps[index.key("the animal")].ridge == 0.5


def test_a_fitted_map_is_kept_in_the_index_folder_for_later_processes(model_dirs, tmp_path, monkeypatch, caplog):
    texts = make_corpus(70, seed=9)
    folder = tmp_path / "index"
    ConditionalIndex.build(str(model_dirs["bi"]), texts[:60], folder, first_stage_query="mapped")
    first = ConditionalIndex.open(folder)
    first.map_sample = 30
    rows = first.search_rows("a cat", "the animal", k=5, candidates=8, strategy="two-stage")[0]
    saved = sorted((folder / "maps").glob("*.npz"))
    assert [f.name.split("-")[0] for f in saved] == [first.key("the animal")]
    # another process (a new object): the map is read, not fitted: only the candidates and the query are embedded
    later = ConditionalIndex.open(folder)
    later.map_sample = 30
    before = later.embedder.encoded
    found = later.search_rows("a cat", "the animal", k=5, candidates=8, strategy="two-stage")[0]
    assert found.tolist() == rows.tolist() and later.embedder.encoded - before == 8 + 1
    key = first.key("the animal")
    np.testing.assert_array_equal(later._maps[key].weights, first._maps[key].weights)
    # another sample size is another map (fitted; its file beside the first, which another process may use)
    later.map_sample = 20
    later.search_rows("a cat", "the animal", k=5, candidates=8, strategy="two-stage")
    both = sorted((folder / "maps").glob("*.npz"))
    assert len(both) == 2 and saved[0] in both
    # a damaged file is fitted again, not trusted
    damaged = next(f for f in both if f != saved[0])
    damaged.write_bytes(b"not a map")
    again = ConditionalIndex.open(folder)
    again.map_sample = 20
    before = again.embedder.encoded
    again.search_rows("a cat", "the animal", k=5, candidates=8, strategy="two-stage")
    assert again.embedder.encoded - before >= 20 + 1  # the sample embedded again
    assert damaged.read_bytes().startswith(b"PK")  # rewritten whole (an .npz is a zip)
    # a file that is no map at all (an .npy renamed) is fitted again too
    np.save(saved[0].with_suffix(".tmp.npy"), np.zeros(3))
    saved[0].with_suffix(".tmp.npy").replace(saved[0])
    again.map_sample = 30
    again.search_rows("a cat", "the animal", k=5, candidates=8, strategy="two-stage")
    assert len(again._maps[again.key("the animal")].sample) == 30
    assert saved[0].read_bytes().startswith(b"PK")  # fitted again (its sample partly cached) and rewritten whole
    # added rows: the maps of the old rows go, and another map is fitted
    again.add(texts[60:])
    assert list((folder / "maps").glob("*.npz")) == []
    again.search_rows("a cat", "the animal", k=5, candidates=8, strategy="two-stage")
    assert again._maps[again.key("the animal")].count == 70
    # a folder the map cannot be written to: the search still answers, with a warning
    import finesim.index.conditional_index as module

    def refuse(path, fitted):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(module, "save_condition_map", refuse)
    again.map_sample = 25
    with caplog.at_level("WARNING", logger="finesim.index"):
        assert len(again.search_rows("a cat", "the animal", k=5, candidates=8, strategy="two-stage")[0]) == 5
    assert "could not keep the fitted map" in caplog.text


def test_a_background_fit_embeds_its_sample_a_batch_at_a_time(model_dirs, corpus, tmp_path):
    """The fit embeds its sample in calls of at most map_fit_batch texts, each taking the model's lock on its own,
    so other searches get the model between them."""
    import threading

    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="mapped")
    index.map_sample, index.map_wait = 64, False
    index.map_fit_batch = 8
    calls = []
    original = index.embedder.conditioned

    def conditioned(texts, condition):
        calls.append((threading.current_thread().name, len(texts)))
        return original(texts, condition)

    index.embedder.conditioned = conditioned
    index.search_rows("a cat", "the animal", k=3, candidates=5, strategy="two-stage")  # starts the fit
    assert index.wait_for_maps(timeout=120)
    fit_batches = [n for name, n in calls if name.startswith("finesim-map-")]
    assert max(fit_batches) <= 8 and sum(fit_batches) >= 64 - 5  # the sample (less rows the search embedded)


def test_the_maps_dual_form_gives_the_same_map_with_fewer_rows_than_dimensions():
    """Fewer rows than dimensions: the dual (rows x rows) solve gives the primal (d x d) formula's W, checked against
    numpy's primal solve; a reversed (negative-stride) view is accepted."""
    rng = np.random.default_rng(3)
    plain, conditioned = rng.normal(size=(5, 8)), rng.normal(size=(5, 8))
    primal = np.eye(8) + np.linalg.solve(plain.T @ plain + 0.1 * np.eye(8), plain.T @ (conditioned - plain))
    np.testing.assert_allclose(fit_condition_map(plain, conditioned, ridge=0.1), primal, atol=1e-5)
    np.testing.assert_allclose(fit_condition_map(plain[::-1], conditioned[::-1], ridge=0.1), primal, atol=1e-5)
    np.testing.assert_allclose(fit_condition_map(np.zeros((0, 3)), np.zeros((0, 3))), np.eye(3))  # no rows: identity


def test_a_background_fit_embeds_map_fit_batch_texts_per_model_call_a_foreground_one_the_encoders(
    model_dirs, corpus, tmp_path
):
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="mapped")
    index.map_sample = 40
    index.embedder.batch_size = 32
    index.map_fit_batch = 12
    calls: list[int] = []
    real = index.embedder.conditioned
    index.embedder.conditioned = lambda texts, condition: calls.append(len(texts)) or real(texts, condition)
    background = index._condition_map("the sport", index.key("the sport"), in_background=True)
    assert calls == [12, 12, 12, 4]  # each call holds the model lock: small ones let searches in between
    calls.clear()
    foreground = index._condition_map("the animal", index.key("the animal"))
    assert calls == [32, 8]
    # the batch changes the calls, not the map (the same texts embedded, one at a time in the model's batches)
    index.rerank_cache = RerankCache()
    index._maps.clear()
    for file in (tmp_path / "index" / "maps").glob("*.npz"):
        file.unlink()
    again = index._condition_map("the sport", index.key("the sport"))
    np.testing.assert_allclose(again.weights, background.weights, atol=1e-4)
    assert foreground.count == background.count == len(corpus)
    for bad in (0, -2, 1.5, None, "8", True):
        with pytest.raises(ValueError, match="map_fit_batch must be a positive integer"):
            index.map_fit_batch = bad
    assert index.map_fit_batch == 12


def test_a_background_fit_waits_while_a_search_runs_and_a_fit_a_request_waits_for_does_not(
    model_dirs, corpus, tmp_path
):
    """map_fit_yield: a background fit embeds nothing while a search of the index runs (here one held open), then
    finishes once it ends; with 0 it goes on beside the search; a foreground fit never waits."""
    import threading

    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="mapped")
    index.map_sample, index.map_wait, index.map_fit_yield = 30, False, 60.0
    fitted: list[int] = []
    real = index.embedder.conditioned

    def conditioned(texts, condition):
        if threading.current_thread().name.startswith("finesim-map-"):
            fitted.append(len(texts))
        return real(texts, condition)

    index.embedder.conditioned = conditioned
    with index._traffic.search():  # a search of another thread, still running
        index.search_rows("a cat", "the animal", k=3, candidates=5, strategy="two-stage")  # starts the fit
        assert not index.wait_for_maps(timeout=1.0)
        assert fitted == []  # it waits for the gap (60 s at most per step)
    assert index.wait_for_maps(timeout=120) and sum(fitted) >= 30 - 5
    index.map_fit_yield = 0
    fitted.clear()
    with index._traffic.search():
        index.search_rows("a cat", "the sport", k=3, candidates=5, strategy="two-stage")
        assert index.wait_for_maps(timeout=120) and sum(fitted) >= 30 - 5  # no waiting
    index.map_fit_yield, index.map_wait = 60.0, True
    with index._traffic.search():
        start = time.monotonic()
        index.search_rows("a cat", "the colour", k=3, candidates=5, strategy="two-stage")  # fits inline
        assert time.monotonic() - start < 60 and index.key("the colour") in index._maps
    for bad in (-1, 60.5, 1e10, float("inf"), float("nan"), None, "1", True):
        with pytest.raises(ValueError, match="map_fit_yield must be a number of seconds from 0 to 60, got"):
            index.map_fit_yield = bad
    index.map_fit_yield = np.float32(0.5)
    assert index.map_fit_yield == 0.5 and type(index.map_fit_yield) is float


def test_a_search_is_counted_while_it_runs_and_released_after_an_error(model_dirs, corpus, tmp_path):
    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="mapped")
    index.map_sample = 30
    seen: list[int] = []
    real = index.embedder.conditioned
    index.embedder.conditioned = lambda texts, condition: seen.append(index._traffic.running) or real(texts, condition)
    index.search_rows("a cat", "the animal", k=3, candidates=5, strategy="two-stage")
    assert seen and set(seen) == {1} and index._traffic.running == 0  # the map's inline fit and the re-ranking
    with pytest.raises(ValueError, match="k must be a whole number >= 1"):
        index.search_rows("a cat", "the animal", k=0)
    assert index._traffic.running == 0


def test_a_background_fit_waits_before_each_batch_and_each_chunk_of_its_pass_a_foreground_one_never(
    model_dirs, corpus, tmp_path, monkeypatch
):
    import finesim.index.conditional_index as module

    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="mapped")
    index.map_sample, index.map_fit_batch = 30, 8
    monkeypatch.setattr(module, "SCORE_CHUNK", 16)
    waits: list[float] = []
    index._traffic.wait_for_gap = lambda limit: waits.append(limit) or 0.0
    index._condition_map("the sport", index.key("the sport"), in_background=True)
    assert waits == [1.0] * (-(-30 // 8) + -(-len(corpus) // 16))  # 4 batches, then every chunk of the pass
    waits.clear()
    index._condition_map("the animal", index.key("the animal"))
    assert waits == []


def test_a_search_waiting_for_a_background_fit_of_its_own_map_does_not_hold_that_fit_off(model_dirs, corpus, tmp_path):
    """map_wait switched on while a background fit of the condition runs: the search that waits for that fit is
    not counted as running meanwhile, so the fit (which would wait 60 s a step for a gap) goes on."""
    import threading

    index = ConditionalIndex.build(str(model_dirs["bi"]), corpus, tmp_path / "index", first_stage_query="mapped")
    index.map_sample, index.map_wait, index.map_fit_yield, index.map_fit_batch = 30, False, 60.0, 8
    inside, go = threading.Event(), threading.Event()
    real = index.embedder.conditioned

    def conditioned(texts, condition):
        if threading.current_thread().name.startswith("finesim-map-") and not inside.is_set():
            inside.set()
            go.wait(30)
        return real(texts, condition)

    index.embedder.conditioned = conditioned
    index.search_rows("a cat", "the animal", k=3, candidates=5, strategy="two-stage")  # starts the fit
    assert inside.wait(30)  # the fit is in its first batch, holding the condition's fit lock
    index.map_wait = True
    found: list = []
    waiter = threading.Thread(
        target=lambda: found.append(index.search_rows("a dog", "the animal", k=3, candidates=5, strategy="two-stage"))
    )
    waiter.start()
    time.sleep(0.5)  # the waiting search reaches the fit lock
    go.set()
    waiter.join(30)
    assert not waiter.is_alive() and len(found) == 1 and index._traffic.running == 0

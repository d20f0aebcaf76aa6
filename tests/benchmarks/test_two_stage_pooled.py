"""benchmarks/two_stage_pooled.py: the pooled reference and the pool's first stages, on small random data."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
from claims_scripts import load_benchmark

from finesim.index import recall_at_k
from finesim.index.two_stage import RerankCache, fit_condition_map

pooled = load_benchmark("two_stage_pooled.py")


def unit(rng: np.random.Generator, n: int, d: int = 8) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_the_pooled_top_is_the_exact_top_when_the_pool_is_every_row_and_leaves_the_own_text_out() -> None:
    rng = np.random.default_rng(0)
    under, q = unit(rng, 300), unit(rng, 1)[0]
    rows = np.arange(300)
    own = int(np.argmax(under @ q))  # the query's own text would be first
    exact = [int(r) for r in np.argsort(-(under @ q)) if r != own][:10]
    assert pooled.pooled_top(rows, under, q, own) == exact
    assert own not in pooled.pooled_top(rows, under, q, own)
    assert pooled.pooled_top(rows, under, q, None)[0] == own


def test_recall_against_the_pooled_reference_never_understates_recall_against_the_exact_one() -> None:
    rng = np.random.default_rng(1)
    under = unit(rng, 500)
    for _ in range(50):
        q = unit(rng, 1)[0]
        exact = [int(r) for r in np.argsort(-(under @ q))[:10]]
        pool = np.sort(rng.choice(500, 120, replace=False))  # misses some of the exact top 10 (mostly)
        returned = rng.choice(pool, 10, replace=False)  # a search's top 10 from re-ranked (pooled) rows
        rows = np.union1d(pool, returned)
        reference = pooled.pooled_top(rows, under[rows], q, None)
        assert recall_at_k(reference, returned, 10) >= recall_at_k(exact, returned, 10)
        if set(exact) <= set(rows.tolist()):  # the pool holds the exact top 10: the two references agree
            assert reference == exact


def test_the_pool_takes_each_first_stages_top_rows_and_the_map_as_the_library_fits_it() -> None:
    rng = np.random.default_rng(2)
    first, under = unit(rng, 400), unit(rng, 400)
    sample = np.arange(0, 400, 4)
    weights, inverse = pooled.map_parts(first, under[sample], sample, 0.1)
    expected = fit_condition_map(first[sample], under[sample], 0.1)
    np.testing.assert_allclose(weights, expected, rtol=1e-6)
    np.testing.assert_allclose(inverse, 1 / np.linalg.norm(first @ expected, axis=1), rtol=1e-5)
    q = unit(rng, 2)
    per_query = pooled.pool_of(first, q, weights, inverse, 25)
    for vector, tops in zip(q, per_query):
        assert tops["conditioned"].tolist() == np.argsort(-(first @ vector), kind="stable")[:25].tolist()
        mapped = (first @ (weights @ vector)) * inverse
        assert tops["mapped"].tolist() == np.argsort(-mapped, kind="stable")[:25].tolist()


class FakeIndex:
    """What ``timed_searches`` touches of a ConditionalIndex: each search returns rows 0..k-1 (row 0 the query's own
    text for query "q0") after putting their vectors into the cache it finds, and records the state it ran in."""

    def __init__(self) -> None:
        self.rerank_cache = RerankCache()
        self.rerank_feedback: str | None = "kept"
        self.scan_threads: int | None = None
        self._condition_vectors = {"c": np.ones(2), "donor": np.ones(2)}
        self.calls: list[dict[str, object]] = []

    def key(self, condition: str) -> str:
        return f"key-{condition}"

    def search_rows(self, query, condition, k, *, strategy, candidates, approximate):
        cached, _ = self.rerank_cache.lookup(self.key(condition), np.arange(100))
        self.calls.append({
            "query": query, "n": candidates, "approximate": approximate, "feedback": self.rerank_feedback,
            "threads": self.scan_threads, "cached": len(cached), "vectors": set(self._condition_vectors),
        })  # fmt: skip
        rows = list(range(k))
        self.rerank_cache.store(self.key(condition), rows, np.full((k, 2), float(candidates), np.float32))
        return np.asarray(rows), np.zeros(k)

    def last_first_stage(self) -> str:
        return "borrowed"


def test_timed_searches_start_cold_take_turns_and_hand_the_returned_rows_to_the_pool() -> None:
    index = FakeIndex()
    pool = index.rerank_cache
    pool.store("key-c", [3], np.zeros((1, 2), np.float32))  # a pool row: its vector must stay the pool's
    draws = SimpleNamespace(conditions=["c"], queries={"c": ["q0", "q1"]})
    points = [
        {"search": "exact", "approximate": False, "feedback": "none", "n": 100, "scan_threads": 1},
        {"search": "exact", "approximate": False, "feedback": "local-map", "n": 100, "scan_threads": 0},
        {"search": "hnsw", "approximate": "hnsw", "feedback": "local-map", "n": 200, "scan_threads": 0},
    ]
    timed = pooled.timed_searches(index, draws, {"q0": 0}, "borrowed", points)
    # every search found an empty cache and no embedding of its condition's text (the donor's kept)
    assert all(call["cached"] == 0 and call["vectors"] == {"donor"} for call in index.calls)
    # the points took turns, their order reversed for the second query
    assert [(c["query"], c["n"], c["threads"], c["feedback"]) for c in index.calls] == [
        ("q0", 100, 1, None), ("q0", 100, None, "local-map"), ("q0", 200, None, "local-map"),
        ("q1", 200, None, "local-map"), ("q1", 100, None, "local-map"), ("q1", 100, 1, None),
    ]  # fmt: skip
    assert index.rerank_cache is pool and index.scan_threads is None and index.rerank_feedback == "kept"
    first = timed[("borrowed", "exact", "none", 100, 1)]
    assert first["got"] == {("q0", "c"): list(range(1, 11)), ("q1", "c"): list(range(10))}  # own text left out
    assert len(first["seconds"]) == 2 and first["took"] == {"borrowed": 2}
    held, missing = pool.lookup("key-c", np.arange(11))
    assert missing == [] and held[3].tolist() == [0.0, 0.0]  # every returned row, the pool's own vector kept


def test_the_first_queries_during_the_fit_borrow_first_and_leave_the_index_as_found(tiny_bert_dir, tmp_path) -> None:
    from finesim.index import ConditionalIndex

    words = ["dogs", "cats", "cars", "music", "food", "rain"]
    corpus = [f"a note {i} about {words[i % 6]}" for i in range(60)]
    folder = tmp_path / "index"
    index = ConditionalIndex.build(str(tiny_bert_dir), corpus, folder, first_stage_query="mapped")
    index.map_sample = 16
    donor, condition = "the animal", "the pet"
    index._condition_map(donor, index.key(donor))  # held: the map a server fitted for an earlier condition
    index._condition_map(condition, index.key(condition))  # saved by an earlier run: moved aside, then back
    maps_before = sorted(f.name for f in (folder / "maps").iterdir())
    index._maps.pop(index.key(condition))
    index.map_wait = False
    index.map_borrow_min_cosine = -1.0  # a random tiny model: borrow whatever the cosine
    stub = index._map_or_fit_later = lambda c, k: None  # as hold_donor_maps leaves it
    index.rerank_feedback = "local-map"
    pool = index.rerank_cache
    draws = SimpleNamespace(conditions=[condition], queries={condition: ["a dog", "a cat", "a car"]})
    fits = []
    real_fit = index._fit_condition_map
    index._fit_condition_map = lambda *a, **kw: fits.append(a[0]) or real_fit(*a, **kw)  # fitted, not read
    index._save_map = lambda file, fitted: None  # the new map is not kept: the saved one must be put back

    entry = pooled.timed_during_fit(index, draws, {"a cat": 1}, 10, "none")

    assert len(entry["seconds"]) == 3 and sum(entry["took"].values()) == 3
    assert entry["took"]["borrowed"] >= 1 and set(entry["took"]) <= {"borrowed", "mapped"}  # the first borrowed
    assert entry["fit_seconds"][condition] is not None  # its own map was fitted in the background, and held
    assert 1 not in entry["got"][("a cat", condition)]  # the query's own text left out
    assert fits == [condition]  # its saved map was out of the way: the background thread fitted it
    assert index._map_or_fit_later is stub and index.rerank_cache is pool and index.key(condition) not in index._maps
    assert str(index.rerank_feedback).startswith("local-map")
    assert sorted(f.name for f in (folder / "maps").iterdir()) == maps_before  # put back, nothing left aside
    returned = sorted({r for rows in entry["got"].values() for r in rows})
    assert pool.lookup(index.key(condition), np.asarray(returned))[1] == []  # every returned row joins the pool


def test_the_fit_settings_take_turns_condition_by_condition_and_are_put_back(monkeypatch) -> None:
    """Each condition runs once per (batch, yield) setting, the order reversed every other condition; one merged
    entry per setting; the index's own settings restored."""
    calls = []

    def one(index, draws, position, n, feedback, conditions):
        (condition,) = conditions
        calls.append((condition, index.map_fit_batch, index.map_fit_yield))
        seconds = float(len(calls))
        return {"seconds": [seconds], "got": {("q", condition): [len(calls)]}, "took": Counter(borrowed=1),
                "fit_seconds": {condition: 10 * seconds}}  # fmt: skip

    monkeypatch.setattr(pooled, "timed_during_fit", one)
    index = SimpleNamespace(map_fit_batch=16, map_fit_yield=1.0)
    draws = SimpleNamespace(conditions=["a", "b", "c"], queries={})
    entries = pooled.during_fit_in_turns(index, draws, {}, 75, "none", [(None, 0.0), (None, None)])
    assert calls == [("a", 16, 0.0), ("a", 16, 1.0), ("b", 16, 1.0), ("b", 16, 0.0), ("c", 16, 0.0), ("c", 16, 1.0)]
    assert [e["seconds"] for e in entries] == [[1.0, 4.0, 5.0], [2.0, 3.0, 6.0]]
    assert entries[0]["fit_seconds"] == {"a": 10.0, "b": 40.0, "c": 50.0} and entries[1]["took"] == {"borrowed": 3}
    assert [(e["fit_batch"], e["fit_yield"]) for e in entries] == [(16, 0.0), (16, 1.0)]
    assert (index.map_fit_batch, index.map_fit_yield) == (16, 1.0)

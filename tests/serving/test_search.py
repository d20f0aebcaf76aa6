"""``POST /search`` over an index given with ``--index``: results equal ``ConditionalIndex.search`` and brute-force
scoring, it runs on the model's worker thread, the API key is required, 404 ``NoIndex`` without an index, 422 for a
bad request, /info describes the index, and an index of another model stops the server with one error line. A
request with ``"condition": null`` answers the plain ranking, ``ConditionalIndex.search(query, None)``; one that leaves
the field out is a 422 (a forgotten field is never an unconditioned search)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from serving_support import assert_error, saved_models, scorers, serving, time_limit, wait_until  # noqa: F401

from conftest import WORDS

CORPUS = [
    "a man plays guitar",
    "a woman plays piano",
    "a dog runs in the park",
    "a cat sits in the house",
    "a girl eats food",
    "a boy eats food",
    "the red car on the street",
    "a small blue ball",
    "two old men walk with a dog",
    "a happy girl sings music",
    "the weather is sad and green",
    *[" ".join(WORDS[i : i + 4]) for i in range(0, 60, 5)],
]
QUERIES = [("a man plays the piano", "the activity"), ("a dog walks", "the animal")]
PAIR = {"sentence1": ["a dog runs"], "sentence2": ["a cat sits"], "condition": "the animal"}


@pytest.fixture(scope="module")
def indexes(saved_models, tmp_path_factory) -> dict[str, Path]:  # noqa: F811
    """An index of CORPUS per indexable model type, built with the saved folder by name."""
    from finesim import ConditionalIndex

    root = tmp_path_factory.mktemp("serving-indexes")
    return {
        kind: ConditionalIndex.build(str(saved_models[kind]), CORPUS, root / kind).store.root
        for kind in ("bi", "tri", "case")
    }


def _same_hits(*answers: list[dict]) -> bool:
    """The same hits in the same order (every field equal) with scores equal up to float rounding: an embedding
    can differ in its last bits with the batch it was encoded in (AVX-512 kernels block by the padded length).
    Raises AssertionError naming the first difference."""
    first = answers[0]
    for n, other in enumerate(answers[1:], start=1):
        assert len(other) == len(first), f"answer {n} has {len(other)} hits, answer 0 {len(first)}"
        for rank, (a, b) in enumerate(zip(first, other)):
            fields_a = {k: v for k, v in a.items() if k != "score"}
            fields_b = {k: v for k, v in b.items() if k != "score"}
            assert fields_a == fields_b, f"answer {n}, hit {rank}: {b} against answer 0's {a}"
            assert a["score"] == pytest.approx(b["score"], abs=1e-6), f"answer {n}, hit {rank}: {b} against {a}"
    return True


def _brute_force(scorer, query: str, condition: str, k: int) -> tuple[list[int], np.ndarray]:
    scores = scorer.similarity([query] * len(CORPUS), CORPUS, condition)
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return [int(i) for i in order], scores[order]


@pytest.mark.parametrize("kind", ["bi", "tri", "case"])
def test_search_equals_the_index_and_brute_force(kind, indexes, saved_models, scorers) -> None:  # noqa: F811
    from finesim import ConditionalIndex

    reference = ConditionalIndex.open(indexes[kind])
    with serving(scorers[kind], model=str(saved_models[kind]), index=str(indexes[kind])) as client:
        for query, condition in QUERIES:
            got = client.post("/search", json={"query": query, "condition": condition, "k": 5})
            assert got.status_code == 200, got.text
            results = got.json()
            expected = reference.search(query, condition, 5)
            assert [(r["index"], r["text"]) for r in results] == [(e["index"], e["text"]) for e in expected]
            np.testing.assert_allclose([r["score"] for r in results], [e["score"] for e in expected], atol=1e-6)
            rows, scores = _brute_force(scorers[kind], query, condition, 5)
            assert [r["index"] for r in results] == rows
            assert [r["text"] for r in results] == [CORPUS[i] for i in rows]
            np.testing.assert_allclose([r["score"] for r in results], scores, atol=2e-5)
        default = client.post("/search", json={"query": "a dog", "condition": "the animal"}).json()
        assert len(default) == 10 and set(default[0]) == {"index", "text", "score"}  # k defaults to 10
        everything = client.post("/search", json={"query": "a dog", "condition": "the animal", "k": 200}).json()
        assert len(everything) == len(CORPUS)  # k over the corpus size: every text, best first
        assert [r["score"] for r in everything] == sorted((r["score"] for r in everything), reverse=True)


def test_search_runs_on_the_model_worker_thread(indexes, saved_models, scorers) -> None:  # noqa: F811
    """The index encodes the query with the served model: it must run where every other model call runs."""
    threads: list[str] = []
    with serving(scorers["tri"], model=str(saved_models["tri"]), index=str(indexes["tri"])) as client:
        index = client.app.state.model.index
        original = index.search

        def recorded(*args, **kwargs):
            threads.append(threading.current_thread().name)
            return original(*args, **kwargs)

        index.search = recorded
        for _ in range(3):
            assert client.post("/search", json={"query": "a dog", "condition": "the animal", "k": 2}).status_code == 200
    assert threads == ["finesim-batcher"] * 3


def test_a_search_job_runs_alone_beside_the_combined_batch(indexes, saved_models, scorers) -> None:  # noqa: F811
    """In one micro-batch the pair jobs still share one model call; each search is one more call; a failing search
    fails only its own job."""
    from finesim import ConditionalIndex
    from finesim.serving.cache import LRUCache
    from finesim.serving.engine import PairJob, ScoringEngine, SearchJob

    scorer = scorers["tri"]
    index = ConditionalIndex.open(indexes["tri"], model=scorer.model)
    engine = ScoringEngine(scorer, LRUCache(0), index=index)
    pair = PairJob(["a dog"], ["a cat"], ["the animal"])
    jobs = [SearchJob("a dog", "the animal", 3), pair, SearchJob("a dog", "the animal", 0), pair]
    results, stats = engine.run(jobs)
    assert results[0].results == index.search("a dog", "the animal", 3)
    assert results[0].first_stage is None  # a tri-encoder index: no two-stage search
    assert isinstance(results[2], ValueError) and "k must be" in str(results[2])
    np.testing.assert_allclose(results[1], scorer.similarity(["a dog"], ["a cat"], "the animal"), atol=1e-6)
    np.testing.assert_allclose(results[3], results[1])
    assert stats.requests == 4 and stats.model_calls == 2 and stats.encoded == 3 + 2


def test_bi_encoder_conditions_prepared_at_start_and_on_first_query(saved_models, scorers, tmp_path) -> None:  # noqa: F811
    from finesim import ConditionalIndex

    folder = ConditionalIndex.build(str(saved_models["bi"]), CORPUS, tmp_path / "index").store.root
    settings = {"model": str(saved_models["bi"]), "index": str(folder), "index_conditions": ("the animal",)}
    with serving(scorers["bi"], **settings) as client:
        index = client.app.state.model.index
        assert index.conditions == ["the animal"]  # embedded before /health answered 200
        before = index.embedder.encoded
        stored = client.post("/search", json={"query": "a dog", "condition": "the animal", "k": 3})
        assert stored.status_code == 200 and "x-finesim-first-stage" not in stored.headers  # exact: stored
        assert index.embedder.encoded == before + 1  # only the query
        answer = client.post("/search", json={"query": "a dog", "condition": "the color", "k": 3})
        assert answer.status_code == 200 and answer.headers["X-Finesim-First-Stage"] == "conditioned"
        # a new condition: two-stage search re-ranks the candidates (here the whole small corpus) in memory
        assert index.embedder.encoded == before + 2 + len(CORPUS)
        assert index.conditions == ["the animal"]
        assert _same_hits(answer.json(), index.search("a dog", "the color", 3, strategy="exact"))


def test_startup_conditions_progress(indexes, saved_models, scorers, tmp_path, capfd, caplog) -> None:  # noqa: F811
    """--conditions embeds the corpus under each at start-up (an hour each at a million texts): a progress bar with
    its total, unless progress is off; a tri-encoder index embeds nothing per condition, and says so."""
    from finesim import ConditionalIndex

    folder = ConditionalIndex.build(str(saved_models["bi"]), CORPUS, tmp_path / "index").store.root
    settings = {"model": str(saved_models["bi"]), "index": str(folder), "index_conditions": ("the animal",)}
    capfd.readouterr()
    with serving(scorers["bi"], **settings, progress=True) as client:
        assert client.app.state.model.index.conditions == ["the animal"]
    bar = capfd.readouterr().err
    assert "corpus for condition 'the animal': 100%" in bar and f"{len(CORPUS)}/{len(CORPUS)}" in bar  # its total
    with serving(scorers["bi"], **{**settings, "index_conditions": ("the color",)}) as client:
        assert client.app.state.model.index.has_condition("the color")
    assert "corpus for condition" not in capfd.readouterr().err  # progress off: the library's default
    tri = {"model": str(saved_models["tri"]), "index": str(indexes["tri"]), "index_conditions": ("the animal",)}
    with caplog.at_level("WARNING", logger="finesim.serving"), serving(scorers["tri"], **tri) as client:
        assert client.get("/health").status_code == 200
    assert "--conditions: 1 condition(s) not embedded: a tri-encoder index embeds its corpus once" in caplog.text


def test_search_needs_the_api_key(indexes, saved_models, scorers) -> None:  # noqa: F811
    body = {"query": "a dog", "condition": "the animal", "k": 2}
    with serving(scorers["tri"], model=str(saved_models["tri"]), index=str(indexes["tri"]), api_key="s3cret") as client:
        assert_error(client.post("/search", json=body), 401, "Unauthorized")
        wrong = client.post("/search", json=body, headers={"Authorization": "Bearer nope"})
        assert_error(wrong, 401, "Unauthorized")
        assert client.post("/search", json=body, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert client.get("/info").json()["index"]["count"] == len(CORPUS)  # /info stays public


def test_without_an_index_search_is_404_no_index(scorers) -> None:  # noqa: F811
    with serving(scorers["tri"]) as client:
        body = assert_error(client.post("/search", json={"query": "a dog", "condition": "the animal"}), 404, "NoIndex")
        assert "--index" in body["error"]
        assert client.get("/info").json()["index"] is None


def test_bad_search_requests_are_422(indexes, saved_models, scorers) -> None:  # noqa: F811
    settings = {"model": str(saved_models["tri"]), "index": str(indexes["tri"]), "max_items": 8}
    with serving(scorers["tri"], max_text_chars=50, **settings) as client:

        def post(**body):
            return client.post("/search", json={"query": "a dog", "condition": "the animal", **body})

        for k in (0, -3):
            assert_error(post(k=k), 422, "Validation", contains="k: Input should be greater than or equal to 1")
        for k in ("5", 2.5, True, None):
            assert_error(post(k=k), 422, "Validation", contains="k:")
        assert_error(post(k=9), 422, "Validation", contains="k is 9; the server returns at most 8 results")
        assert post(k=8).status_code == 200
        assert_error(post(query=""), 422, "Validation", contains="query is empty")
        assert_error(post(condition="   "), 422, "Validation", contains="condition is empty")
        assert_error(post(query="x" * 51), 422, "Validation", contains="query has 51 characters")
        assert_error(post(condition=7), 422, "Validation", contains="condition: Input should be a valid string")
        assert_error(post(top_n=3), 422, "Validation", contains="top_n: Extra inputs are not permitted")
        assert_error(post(condition=["the animal"]), 422, "Validation", contains="condition: Input should be a valid")
        missing = client.post("/search", json={"query": "a dog", "k": 3})
        body = assert_error(missing, 422, "Validation")
        assert body["error"] == (
            'condition: Field required: send the condition to search under, or "condition": null for the plain '
            "similarity ranking (the texts alone, without a condition)"
        )
        plain = client.post("/search", json={"query": "a dog", "condition": None, "k": 3})
        assert plain.status_code == 200 and all(r["condition"] is None for r in plain.json())
        schema = client.get("/openapi.json").json()["components"]["schemas"]["SearchRequest"]
        assert "condition" in schema["required"] and "default" not in schema["properties"]["condition"]


def test_the_search_schema_says_condition_is_required_and_nullable() -> None:
    """``condition`` of ``/search`` is required (no default; it once said optional while a body without it was a
    422) and may be null."""
    from finesim.serving.schemas import SearchRequest

    schema = SearchRequest.model_json_schema()
    assert schema["required"] == ["query", "condition"]
    assert {"type": "null"} in schema["properties"]["condition"]["anyOf"]
    assert SearchRequest.model_validate({"query": "q", "condition": None}).condition is None


@pytest.mark.parametrize("kind", ["bi", "tri"])
def test_search_without_a_condition_is_the_plain_ranking(kind, indexes, saved_models, scorers) -> None:  # noqa: F811
    from finesim import ConditionalIndex

    reference = ConditionalIndex.open(indexes[kind])
    model = scorers[kind].model
    corpus = np.asarray(model.encode(CORPUS, convert_to_numpy=True), dtype=np.float64)
    with serving(scorers[kind], model=str(saved_models[kind]), index=str(indexes[kind])) as client:
        assert client.get("/info").json()["index"]["plain_search"] is True
        for query, _ in QUERIES:
            null = client.post("/search", json={"query": query, "condition": None, "k": 5})
            assert null.status_code == 200, null.text
            results = null.json()
            assert all(set(r) == {"index", "text", "score", "condition"} and r["condition"] is None for r in results)
            expected = reference.search(query, None, 5)
            assert [r["index"] for r in results] == [e["index"] for e in expected]
            np.testing.assert_allclose([r["score"] for r in results], [e["score"] for e in expected], atol=1e-6)
            # brute force: the cosine of the model's embeddings of the query and of each text alone
            q = np.asarray(model.encode([query], convert_to_numpy=True), dtype=np.float64)[0]
            scores = corpus @ q / (np.linalg.norm(corpus, axis=1) * np.linalg.norm(q))
            order = np.lexsort((np.arange(len(scores)), -scores))[:5]
            assert [r["index"] for r in results] == [int(i) for i in order]
            assert [r["text"] for r in results] == [CORPUS[i] for i in order]
            np.testing.assert_allclose([r["score"] for r in results], scores[order], atol=2e-5)


def test_a_case_index_refuses_a_search_without_a_condition(indexes, saved_models, scorers) -> None:  # noqa: F811
    with serving(scorers["case"], model=str(saved_models["case"]), index=str(indexes["case"])) as client:
        assert client.get("/info").json()["index"]["plain_search"] is False
        index = client.app.state.model.index
        calls = index.embedder.encoded
        plain = client.post("/search", json={"query": "a dog", "condition": None, "k": 3})
        body = assert_error(plain, 422, "Validation")
        assert body["error"] == (
            "the served index cannot search without a condition: a CASE model embeds a text only together with a "
            "condition, so it has no similarity of the texts alone: search with a condition, or index the corpus "
            'with a bi-encoder to search without one; send "condition"'
        )
        assert str(indexes["case"]) not in body["error"]  # no server path
        assert index.embedder.encoded == calls  # refused before the model ran
        assert client.post("/search", json={"query": "a dog", "condition": "the animal", "k": 3}).status_code == 200


def test_info_describes_the_index(indexes, saved_models, scorers) -> None:  # noqa: F811
    with serving(scorers["case"], model=str(saved_models["case"]), index=str(indexes["case"])) as client:
        info = client.get("/info").json()
    index = info["index"]
    assert index["path"] == str(indexes["case"]) and index["encoder"] == "case"
    assert index["count"] == len(CORPUS) and index["dimension"] == 8 and index["dtype"] == "float32"
    assert index["built_with"] == str(saved_models["case"]) and len(index["model_sha256"]) == 64
    assert index["search"] == "exact"
    assert index["first_stage"] is None and index["first_stage_query"] is None  # CASE: no first stage by default
    assert index["rerank_depth"] is None and index["rerank_feedback"] is None  # nothing is re-ranked


def test_info_reports_the_first_stage_and_its_query_mode(indexes, saved_models, scorers, tmp_path) -> None:  # noqa: F811
    """/info names the first stage's model and its query mode: a bi-encoder's own (``self``, ``conditioned``), and a
    tri-encoder folder's (``tri``, the mode its marker picks)."""
    from finesim import ConditionalIndex

    tri = str(saved_models["tri"])
    staged = ConditionalIndex.build(str(saved_models["bi"]), CORPUS, tmp_path / "tri-staged", first_stage=tri)
    for folder, model, query in ((indexes["bi"], "self", "conditioned"), (staged.store.root, tri, "tri")):
        with serving(scorers["bi"], model=str(saved_models["bi"]), index=str(folder)) as client:
            index = client.get("/info").json()["index"]
        assert (index["search"], index["first_stage"], index["first_stage_query"]) == ("auto", model, query)
        assert index["rerank_depth"] == "all"  # the default: every candidate re-ranked
        # feedback needs the bi-encoder's own first stage: the default there, not applicable to a tri-encoder's
        assert index["rerank_feedback"] == ("local-map:4,0.1,10,earlier" if model == "self" else None)


def test_rerank_depth_reaches_the_served_index(indexes, saved_models, scorers) -> None:  # noqa: F811
    """``rerank_depth`` (``finesim serve --rerank-depth``) is the served index's, shown by /info; a search re-ranks
    by it (fewer candidates embedded than re-ranking all of them), and the scores stay exact."""
    from finesim.index.rerank_depth import RerankDepth
    from finesim.serving import ServeSettings
    from finesim.serving.search import IndexOpenError, open_served_index

    served = {"model": str(saved_models["bi"]), "index": str(indexes["bi"])}
    body = {"query": "a dog", "condition": "a colour never stored", "k": 2}
    with serving(scorers["bi"], **served, rerank_depth="2,2,1") as client:
        assert client.get("/info").json()["index"]["rerank_depth"] == "2,2,1"
        index = client.app.state.model.index
        assert index.rerank_depth == RerankDepth(2, 2, 1)
        before = index.embedder.encoded
        answer = client.post("/search", json=body)
        assert answer.status_code == 200, answer.text
        assert 2 <= index.embedder.encoded - before - 1 < len(CORPUS)  # re-ranking all would embed every text
        everything = index.search("a dog", body["condition"], len(CORPUS), strategy="exact")
        exact = {r["index"]: r["score"] for r in everything}
        for row in answer.json():
            assert row["score"] == pytest.approx(exact[row["index"]], abs=2e-5)
    with pytest.raises(IndexOpenError, match="rerank_depth applies to two-stage searches, and this index has no"):
        open_served_index(ServeSettings(model=str(saved_models["case"]), index=str(indexes["case"]),
                                        rerank_depth="2,2,1"), scorers["case"])  # fmt: skip
    with pytest.raises(ValueError, match="rerank_depth needs an index"):
        ServeSettings(model="m", rerank_depth="2,2,1")
    with pytest.raises(ValueError, match="rerank_feedback needs an index"):
        ServeSettings(model="m", rerank_feedback="none")
    with pytest.raises(ValueError, match="map_fit_yield needs map_wait False"):
        ServeSettings(model="m", index="i", map_fit_yield=1.0)
    for bad in (-0.5, 61, float("inf"), float("nan"), True, "1"):
        with pytest.raises(ValueError, match="map_fit_yield must be a number of seconds from 0 to 60"):
            ServeSettings(model="m", index="i", map_wait=False, map_fit_yield=bad)
    with pytest.raises(ValueError, match="rerank_feedback 'map': expected 'none'"):
        ServeSettings(model="m", index="i", rerank_feedback="map")
    with serving(scorers["bi"], **served, rerank_feedback="none") as client:
        assert client.get("/info").json()["index"]["rerank_feedback"] == "none"
        assert client.app.state.model.index.rerank_feedback is None
    with pytest.raises(ValueError, match="expected 'all' or three whole numbers"):
        ServeSettings(model="m", index="i", rerank_depth="2,2")


@pytest.mark.parametrize("tokens", [None, 4096], ids=["no-token-budget", "token-budget"])
def test_a_mapped_index_fits_a_new_conditions_map_beside_the_worker(tokens, saved_models, scorers, tmp_path) -> None:  # noqa: F811
    """A served "mapped" index fits a new condition's map before that condition's first search, in a thread other
    than the scoring worker, taking turns with it at the model lock: /similarity is answered while the fit is paused
    half-way (on a fit held by the worker it would wait for the whole fit), with a token budget too (its counts use
    a tokenizer of their own). The map is kept for the next search, and every answer re-ranks exactly."""
    from finesim import ConditionalIndex

    folder = ConditionalIndex.build(str(saved_models["bi"]), CORPUS, tmp_path / "mapped", first_stage_query="mapped")
    served = {"model": str(saved_models["bi"]), "index": str(folder.store.root), "max_batch_tokens": tokens}
    with serving(scorers["bi"], **served) as client:
        assert client.get("/info").json()["index"]["first_stage_query"] == "mapped"
        assert client.get("/info").json()["index"]["map_fit_yield"] is None  # the server waits: no background fit
        index = client.app.state.model.index
        assert index.embedder._lock is client.app.state.model.batcher.engine.model_lock  # one lock for both
        index.embedder.batch_size = 4  # the fit embeds its sample (the whole small corpus) 4 texts at a time
        fitters: list[threading.Thread] = []
        paused, go = threading.Event(), threading.Event()
        fit, rows = index._fit_condition_map, index._conditioned_rows

        def watched_fit(*args, **kwargs):
            fitters.append(threading.current_thread())
            return fit(*args, **kwargs)

        def paused_rows(key, condition, chunk):
            if threading.current_thread() in fitters and len(chunk) and not paused.is_set():
                out = rows(key, condition, chunk)  # one batch embedded, the lock released again
                paused.set()
                assert go.wait(30)
                return out
            return rows(key, condition, chunk)

        held = {"query": "a dog", "condition": "the animal", "k": 3}
        assert client.post("/search", json=held).status_code == 200  # its map fitted before the paused fit
        index._fit_condition_map, index._conditioned_rows = watched_fit, paused_rows
        body = {"query": "a dog", "condition": "the color", "k": 3}
        assert index.map_needed("the color")
        answers: dict[str, object] = {}
        searching = threading.Thread(target=lambda: answers.update(first=client.post("/search", json=body)))
        searching.start()
        try:
            wait_until(paused.is_set, timeout=30, what="the map fit to start")
            scoring = threading.Thread(
                target=lambda: answers.update(scored=client.post("/similarity", json=PAIR)), daemon=True
            )
            scoring.start()
            scoring.join(15)
            assert not scoring.is_alive(), "/similarity waited for the map fit"
            other = threading.Thread(target=lambda: answers.update(held=client.post("/search", json=held)), daemon=True)
            other.start()
            other.join(15)
            assert not other.is_alive(), "a search under a condition whose map is held waited for another's fit"
            assert answers["scored"].status_code == 200 and answers["held"].status_code == 200
            assert searching.is_alive()
        finally:
            go.set()
            searching.join(60)
        assert [t.name for t in fitters] == ["finesim-map"]
        assert answers["first"].status_code == 200, answers["first"].text
        assert answers["first"].headers["X-Finesim-First-Stage"] == "mapped"  # it waited for the map
        assert not index.map_needed("the color")
        second = client.post("/search", json=body)
        assert len(fitters) == 1  # kept: the second search fits nothing
        # the whole small corpus is re-ranked either way, so both equal exact search
        exact = index.search("a dog", "the color", 3, strategy="exact")
        assert answers["first"].json() == second.json() and _same_hits(second.json(), exact)


def test_without_map_wait_a_new_condition_is_answered_while_its_map_is_fitted(saved_models, scorers, tmp_path) -> None:  # noqa: F811
    """``map_wait=False`` (``finesim serve --no-map-wait``): a new condition's searches are answered while its map's
    fit is paused half-way in the index's own background thread (ranked by the ``conditioned`` first stage), /info
    says so, the fit then ends and keeps the map, and later searches fit nothing; every answer re-ranks exactly."""
    from finesim import ConditionalIndex

    folder = ConditionalIndex.build(str(saved_models["bi"]), CORPUS, tmp_path / "mapped", first_stage_query="mapped")
    served = {"model": str(saved_models["bi"]), "index": str(folder.store.root), "map_wait": False}
    with serving(scorers["bi"], **served) as client:
        assert client.get("/info").json()["index"]["map_wait"] is False
        assert client.get("/info").json()["index"]["map_borrow"] is True
        assert client.get("/info").json()["index"]["map_fit_yield"] == 1.0  # the index's default
        index = client.app.state.model.index
        assert index.map_wait is False and index.embedder._lock is client.app.state.model.batcher.engine.model_lock
        index.embedder.batch_size = 4
        fitters: list[str] = []
        paused, go = threading.Event(), threading.Event()
        fit, rows = index._fit_condition_map, index._conditioned_rows

        def watched_fit(*args, **kwargs):
            fitters.append(threading.current_thread().name)
            return fit(*args, **kwargs)

        def paused_rows(key, condition, chunk):
            out = rows(key, condition, chunk)
            if threading.current_thread().name.startswith("finesim-map-") and not paused.is_set():
                paused.set()  # one batch of the sample embedded, the model lock released again
                assert go.wait(30)
            return out

        index._fit_condition_map, index._conditioned_rows = watched_fit, paused_rows
        body = {"query": "a dog", "condition": "the color", "k": 3}
        answers: dict[str, object] = {}

        def answered(name: str, path: str, payload: dict) -> None:
            sending = threading.Thread(target=lambda: answers.update({name: client.post(path, json=payload)}))
            sending.daemon = True
            sending.start()
            sending.join(15)
            assert not sending.is_alive(), f"{name} waited for the map fit"

        try:
            answered("first", "/search", body)
            wait_until(paused.is_set, timeout=30, what="the background fit to start")
            answered("again", "/search", body)  # the fit is paused half-way meanwhile
            answered("scored", "/similarity", PAIR)
            assert index.map_needed("the color")  # the fit has not ended
        finally:
            go.set()
        assert index.wait_for_maps(60)
        first, again, scored = answers["first"], answers["again"], answers["scored"]
        assert first.status_code == again.status_code == scored.status_code == 200, first.text
        assert len(fitters) == 1 and fitters[0].startswith("finesim-map-")
        assert not index.map_needed("the color") and any((folder.store.root / "maps").iterdir())
        later = client.post("/search", json=body)
        assert len(fitters) == 1  # kept: nothing fitted again
        # each answer says which first stage found its candidates: the interim one until the map was held
        assert [a.headers["X-Finesim-First-Stage"] for a in (first, again, later)] == ["conditioned"] * 2 + ["mapped"]
        # the whole small corpus is re-ranked either way, so every answer equals exact search (which stores the
        # condition's embeddings: last)
        exact = index.search("a dog", "the color", 3, strategy="exact")
        assert _same_hits(first.json(), again.json(), later.json(), exact)
        # another new condition now borrows the map held (the tiny model's condition cosines are arbitrary: any
        # cosine is near enough here)
        index.map_borrow_min_cosine = -1.0
        borrowed = client.post("/search", json={**body, "condition": "the colour"})
        assert borrowed.status_code == 200 and borrowed.headers["X-Finesim-First-Stage"] == "borrowed"
        assert index.wait_for_maps(60)
    # finesim serve --no-map-borrow --map-fit-yield 0.25
    with serving(scorers["bi"], **served, map_borrow=False, map_fit_yield=0.25) as client:
        assert client.get("/info").json()["index"]["map_borrow"] is False
        assert client.app.state.model.index.map_borrow is False
        assert client.get("/info").json()["index"]["map_fit_yield"] == 0.25
        assert client.app.state.model.index.map_fit_yield == 0.25


def test_one_new_condition_searched_twice_at_once_is_fitted_once(saved_models, scorers, tmp_path) -> None:  # noqa: F811
    """Two /search requests under one new condition, sent together: one map fit, both answered alike."""
    from finesim import ConditionalIndex

    folder = ConditionalIndex.build(str(saved_models["bi"]), CORPUS, tmp_path / "mapped", first_stage_query="mapped")
    with serving(scorers["bi"], model=str(saved_models["bi"]), index=str(folder.store.root)) as client:
        index = client.app.state.model.index
        fits, fit = [], index._fit_condition_map
        index._fit_condition_map = lambda *a, **k: (fits.append(1), fit(*a, **k))[1]
        body = {"query": "a dog", "condition": "the size", "k": 3}
        answers: list = []
        threads = [threading.Thread(target=lambda: answers.append(client.post("/search", json=body))) for _ in "ab"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert [a.status_code for a in answers] == [200, 200] and answers[0].json() == answers[1].json()
        assert fits == [1]


def test_a_failed_map_fit_is_a_500_naming_the_file_in_the_index(saved_models, scorers, tmp_path) -> None:  # noqa: F811
    """A fit that meets a damaged file answers 500 with the file named relative to the index folder (never the
    server's path); nothing is kept, so the next search under the condition tries again."""
    from finesim import ConditionalIndex
    from finesim.index import IndexFormatError

    folder = ConditionalIndex.build(str(saved_models["bi"]), CORPUS, tmp_path / "mapped", first_stage_query="mapped")
    root = folder.store.root
    with serving(scorers["bi"], model=str(saved_models["bi"]), index=str(root)) as client:
        index = client.app.state.model.index
        fit = index._fit_condition_map

        def damaged(*args, **kwargs):
            raise IndexFormatError(root / "parts" / "000000" / "first_stage.npy", "row 3 holds NaN")

        index._fit_condition_map = damaged
        body = {"query": "a dog", "condition": "the size", "k": 3}
        failed = client.post("/search", json=body)
        assert_error(failed, 500, "Backend", contains="parts/000000/first_stage.npy: row 3 holds NaN")
        assert str(root) not in failed.text and str(tmp_path) not in failed.text
        index._fit_condition_map = fit
        assert client.post("/search", json=body).status_code == 200


def _failed_start(scorer, **settings):
    from fastapi.testclient import TestClient

    from finesim.serving import ServeSettings, create_app

    failed = threading.Event()
    app = create_app(ServeSettings(**settings), loader=lambda: scorer, on_load_error=lambda err: failed.set())
    client = TestClient(app)
    return client, failed


def test_an_index_of_another_model_stops_the_start(indexes, saved_models) -> None:  # noqa: F811
    """Other weights (the hash differs) or another encoder type: /health names the index and the reason."""
    import torch

    from finesim.evaluation.scoring import ConditionalScorer

    changed = ConditionalScorer(str(saved_models["bi"]))
    with torch.no_grad():
        next(changed.model.parameters()).add_(0.01)
    client, failed = _failed_start(changed, model="changed-bi", index=str(indexes["bi"]))
    with client:
        assert failed.wait(60)
        body = assert_error(client.get("/health"), 503, "Unhealthy", contains=f"the index {indexes['bi']}")
        assert "weights sha256" in body["error"] and "changed-bi" in body["error"]
        assert client.get("/info").json()["status"] == "failed"
        search = client.post("/search", json={"query": "a dog", "condition": "the animal"})
        assert_error(search, 503, "Unhealthy", contains="cannot be served")

    client, failed = _failed_start(ConditionalScorer(str(saved_models["tri"])), model="tri", index=str(indexes["bi"]))
    with client:
        assert failed.wait(60)
        body = assert_error(client.get("/health"), 503, "Unhealthy")
        assert "holds bi-encoder embeddings (built with " in body["error"]
        assert "but the server scores with tri as a tri-encoder" in body["error"]


def test_cli_index_errors_are_one_line(indexes, saved_models, tmp_path, capsys) -> None:  # noqa: F811
    pytest.importorskip("uvicorn")
    from finesim.cli.main import main

    # an index of another model type: the server stops at once, exit 1, one line
    argv = ["serve", "--model", str(saved_models["tri"]), "--index", str(indexes["bi"]), "--port", "0"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"finesim serve: error: could not serve {saved_models['tri']} with its index: the index" in err
    assert "holds bi-encoder embeddings" in err and "Traceback" not in err
    # a finesim tri-encoder cannot be served as a bi-encoder: the advice was --encoder bi, which is then refused
    assert "serve the model the index was built with" in err and "--encoder" not in err
    # no such folder: refused before the model loads or the port opens
    missing = tmp_path / "nowhere"
    assert main(["serve", "--model", str(saved_models["tri"]), "--index", str(missing)]) == 1
    err = capsys.readouterr().err
    assert f"finesim serve: error: {missing}: no such index folder" in err and "serving" not in err
    # --conditions without --index: a usage error
    conditions = tmp_path / "conditions.txt"
    conditions.write_text("the animal\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", str(saved_models["tri"]), "--conditions", str(conditions)])
    assert exit_.value.code == 2 and "--conditions needs --index" in capsys.readouterr().err


def test_search_results_carry_ids_and_metadata(saved_models, scorers, tmp_path) -> None:  # noqa: F811
    from finesim import ConditionalIndex

    ids = [f"doc-{i}" for i in range(len(CORPUS))]
    metadata = [{"lang": "en" if i % 2 else "de"} for i in range(len(CORPUS))]
    folder = ConditionalIndex.build(str(saved_models["tri"]), CORPUS, tmp_path / "index", ids=ids, metadata=metadata)
    with serving(scorers["tri"], model=str(saved_models["tri"]), index=str(folder.store.root)) as client:
        results = client.post("/search", json={"query": "a dog", "condition": "the animal", "k": 4}).json()
        assert results == folder.search("a dog", "the animal", 4)
        assert all(r["id"] == f"doc-{r['index']}" and r["metadata"] == metadata[r["index"]] for r in results)
        info = client.get("/info").json()["index"]
        assert info["ids"] is True and info["metadata_keys"] == ["lang"]
        body = {"query": "a dog", "condition": "the animal", "k": 30, "where": {"lang": "en"}}
        filtered = client.post("/search", json=body).json()
        assert filtered == folder.search("a dog", "the animal", 30, where={"lang": "en"})
        assert {r["index"] for r in filtered} == {i for i in range(len(CORPUS)) if i % 2}
        unknown = client.post("/search", json={**body, "where": {"lnag": "en"}})
        assert_error(unknown, 422, "Validation", contains="where: no row has the metadata key 'lnag'")
        nested = client.post("/search", json={**body, "where": {"lang": ["en"]}})
        assert_error(nested, 422, "Validation", contains="where.lang")


def test_a_damaged_index_is_a_500_without_server_paths(saved_models, scorers, tmp_path) -> None:  # noqa: F811
    """A condition's vectors overwritten with same-length garbage (NaNs among them): the search is a 5xx naming the
    file relative to the index folder, never a 200 with [] and never the server's path."""
    from finesim import ConditionalIndex
    from finesim.index.store import npy_layout

    folder = tmp_path / "index"
    ConditionalIndex.build(str(saved_models["bi"]), CORPUS, folder, conditions=["the animal"])
    (cached,) = (folder / "conditions").glob("*/*.npy")
    offset, data = npy_layout(cached)[2], cached.read_bytes()
    garbage = np.random.default_rng(0).standard_normal((len(data) - offset) // 4).astype(np.float32)
    garbage[::7] = np.nan
    cached.write_bytes(data[:offset] + garbage.tobytes())
    with serving(scorers["bi"], model=str(saved_models["bi"]), index=str(folder)) as client:
        answer = client.post("/search", json={"query": "a dog", "condition": "the animal", "k": 3})
        body = assert_error(answer, 500, "Backend")
    relative = f"conditions/{cached.parent.name}/{cached.name}"
    assert f"IndexFormatError: {relative}: row 0 holds NaN or infinite values" in body["error"]
    assert str(tmp_path) not in body["error"] and "/" + relative not in body["error"]

"""Micro-batching: the worker gathers queued jobs up to the item budget, concurrent requests share model calls,
one request at a time with ``max_batch_inputs`` 1, and the metrics that show it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError

import numpy as np
import pytest
from serving_support import Gate, fresh_bi, metric, saved_models, scorers, serving, time_limit, wait_until  # noqa: F401

from finesim.serving.batching import MicroBatcher, ShuttingDown
from finesim.serving.engine import PairJob, SearchJob
from finesim.serving.metrics import BatchStats


class RecordingEngine:
    """Scores each input as the number it is named by, records the batches (input counts and the inputs); the first
    batch waits for ``release``; an input named ``bad`` fails its job; ``item_tokens`` reads ``tokens``."""

    def __init__(self, tokens: dict[str, int] | None = None) -> None:
        self.batches: list[list[int]] = []
        self.inputs: list[list[str]] = []
        self.release = threading.Event()
        self.entered = threading.Event()
        self.tokens = tokens or {}

    def run(self, jobs):
        self.entered.set()
        assert self.release.wait(30)
        self.batches.append([job.size for job in jobs])
        self.inputs.append([s for job in jobs for s in job.sentences1])
        results = [
            ValueError("unlucky") if "bad" in job.sentences1 else np.array([float(s) for s in job.sentences1])
            for job in jobs
        ]
        return results, _stats(jobs)

    def item_tokens(self, job) -> list[int]:
        return [self.tokens[s] for s in job.sentences1]


def _stats(jobs) -> BatchStats:
    return BatchStats(len(jobs), sum(j.size for j in jobs), 0, 1, 0, 0)


def _job(first: int, n: int) -> PairJob:
    """``n`` inputs named ``first``, ``first + 1``, ...: a job's result is those numbers, in order."""
    names = [str(first + i) for i in range(n)]
    return PairJob(names, ["b"] * n, [None] * n)


def test_worker_fills_each_batch_to_the_item_budget_splitting_jobs() -> None:
    """Budget 10: a job that does not fit in what is left is split (the part that fits goes now, the rest opens
    the next batch); a job of 20 spans three batches; each job gets all its rows back, in order."""
    engine = RecordingEngine()
    seen: list[BatchStats] = []
    batcher = MicroBatcher(engine, max_items=10, max_wait_s=0.0, on_batch=seen.append).start()
    sizes = {100: 4, 200: 5, 300: 3, 400: 20, 500: 2}
    try:
        first = batcher.submit(_job(0, 1))
        assert engine.entered.wait(10)  # the worker holds the first batch; the next jobs queue up
        futures = {start: batcher.submit(_job(start, n)) for start, n in sizes.items()}
        engine.release.set()
        np.testing.assert_array_equal(first.result(10), [0.0])
        for start, n in sizes.items():
            np.testing.assert_array_equal(futures[start].result(10), np.arange(start, start + n, dtype=float))
    finally:
        batcher.stop(10)
    # 4 + 5 + the first of the 3; the other 2 + 8 of the 20; 10 more of them; the last 2 of them + the 2
    assert engine.batches == [[1], [4, 5, 1], [2, 8], [10], [2, 2]]
    assert [s.items for s in seen] == [1, 10, 10, 10, 4]
    assert [s.requests for s in seen] == [1, 3, 2, 1, 2]
    assert [s.split for s in seen] == [0, 1, 2, 1, 1]  # pieces of split jobs in each batch
    assert all(s.tokens is None for s in seen)  # no token budget: tokens are not counted


def test_worker_fills_each_batch_to_the_token_budget() -> None:
    """Budget 10 tokens (and 100 inputs): jobs are cut where their tokens reach the budget; one input over the
    budget on its own forms a batch alone."""
    tokens = {"0": 1, "10": 3, "11": 3, "12": 3, "13": 3, "20": 4, "21": 4, "30": 12, "40": 1}
    engine = RecordingEngine(tokens)
    seen: list[BatchStats] = []
    batcher = MicroBatcher(engine, max_items=100, max_tokens=10, max_wait_s=0.0, on_batch=seen.append).start()
    try:
        first = batcher.submit(_job(0, 1))
        assert engine.entered.wait(10)
        futures = [batcher.submit(_job(start, n)) for start, n in ((10, 4), (20, 2), (30, 1), (40, 1))]
        engine.release.set()
        np.testing.assert_array_equal(first.result(10), [0.0])
        expected = [[10.0, 11.0, 12.0, 13.0], [20.0, 21.0], [30.0], [40.0]]
        for future, values in zip(futures, expected):
            np.testing.assert_array_equal(future.result(10), values)
    finally:
        batcher.stop(10)
    assert engine.inputs == [["0"], ["10", "11", "12"], ["13", "20"], ["21"], ["30"], ["40"]]
    assert [s.tokens for s in seen] == [1, 9, 7, 4, 12, 1]  # 3 + 4 + 4 = 11 > 10: "21" waits for the next batch
    assert [s.split for s in seen] == [0, 1, 2, 1, 0, 0]


def test_max_requests_bounds_the_requests_per_batch() -> None:
    """With room for 100 inputs, at most 2 requests per batch; 1 scores one whole request at a time."""
    for max_requests, expected in ((2, [[1], [3, 4], [5]]), (1, [[1], [3], [4], [5]])):
        engine = RecordingEngine()
        batcher = MicroBatcher(engine, max_items=100, max_requests=max_requests, max_wait_s=0.0).start()
        try:
            first = batcher.submit(_job(0, 1))
            assert engine.entered.wait(10)
            futures = [batcher.submit(_job(start, n)) for start, n in ((10, 3), (20, 4), (30, 5))]
            engine.release.set()
            first.result(10)
            for future, start, n in zip(futures, (10, 20, 30), (3, 4, 5)):
                np.testing.assert_array_equal(future.result(10), np.arange(start, start + n, dtype=float))
        finally:
            batcher.stop(10)
        assert engine.batches == expected


def test_one_failing_job_fails_alone_and_cancelled_jobs_are_skipped() -> None:
    engine = RecordingEngine()
    batcher = MicroBatcher(engine, max_items=100, max_wait_s=0.0).start()
    try:
        blocker = batcher.submit(_job(0, 1))
        assert engine.entered.wait(10)
        bad = batcher.submit(PairJob(["1", "bad"], ["b", "b"], [None, None]))
        good, gone = batcher.submit(_job(5, 2)), batcher.submit(_job(7, 7))
        assert gone.cancel()  # its client went away before the batch ran
        engine.release.set()
        np.testing.assert_array_equal(blocker.result(10), [0.0])
        np.testing.assert_array_equal(good.result(10), [5.0, 6.0])
        with pytest.raises(ValueError, match="unlucky"):
            bad.result(10)
        with pytest.raises(CancelledError):
            gone.result(10)
    finally:
        batcher.stop(10)
    assert engine.batches == [[1], [2, 2]]
    with pytest.raises(ShuttingDown):
        batcher.submit(_job(0, 1))


def test_a_failed_piece_fails_its_request_and_its_other_pieces_are_skipped() -> None:
    engine = RecordingEngine()
    batcher = MicroBatcher(engine, max_items=2, max_wait_s=0.0).start()
    try:
        blocker = batcher.submit(_job(0, 1))
        assert engine.entered.wait(10)
        bad = batcher.submit(PairJob(["1", "bad", "3", "4", "5"], ["b"] * 5, [None] * 5))
        after = batcher.submit(_job(9, 1))
        engine.release.set()
        blocker.result(10)
        with pytest.raises(ValueError, match="unlucky"):
            bad.result(10)
        np.testing.assert_array_equal(after.result(10), [9.0])
    finally:
        batcher.stop(10)
    assert engine.inputs == [["0"], ["1", "bad"], ["9"]]  # "3", "4", "5" were never scored


def test_a_split_request_cancelled_after_its_first_piece_scores_no_further_pieces() -> None:
    """Budget 2: the first piece of a 6-input request is in the model when its client goes; ``cancel`` cannot
    cancel a running future, but it abandons the request: its other 4 inputs are never scored, and the request
    queued behind it is."""
    engine = RecordingEngine()
    seen: list[BatchStats] = []
    batcher = MicroBatcher(engine, max_items=2, max_wait_s=0.0, on_batch=seen.append).start()
    try:
        gone = batcher.submit(_job(0, 6))
        assert engine.entered.wait(10)  # its first piece ("0", "1") is being scored
        after = batcher.submit(_job(9, 1))
        assert gone.running() and not gone.cancel()  # too late to cancel, not too late to abandon
        assert gone.abandoned
        engine.release.set()
        np.testing.assert_array_equal(after.result(10), [9.0])
        with pytest.raises(CancelledError):
            gone.result(10)  # resolved for nobody rather than left running forever
    finally:
        batcher.stop(10)
    assert engine.inputs == [["0", "1"], ["9"]]  # "2" to "5" were dropped
    assert [s.items for s in seen] == [2, 1]


class SearchingEngine:
    """Pairs score as the numbers they are named by; a search answers its query's name. The first batch waits for
    ``release``; a search for ``slow`` waits for ``slow_release``. ``runs`` records each run's jobs."""

    def __init__(self) -> None:
        self.runs: list[list[str]] = []
        self.release, self.entered = threading.Event(), threading.Event()
        self.slow_started, self.slow_release = threading.Event(), threading.Event()

    def run(self, jobs):
        self.runs.append([job.query if isinstance(job, SearchJob) else "pairs" for job in jobs])
        if len(self.runs) == 1:
            self.entered.set()
            assert self.release.wait(30)
        if any(isinstance(job, SearchJob) and job.query == "slow" for job in jobs):
            self.slow_started.set()
            assert self.slow_release.wait(30)
        results = [
            f"found {job.query}" if isinstance(job, SearchJob) else np.array([float(x) for x in job.sentences1])
            for job in jobs
        ]
        return results, _stats(jobs)


def test_searches_run_after_the_scoring_jobs_each_answered_when_done_and_dropped_when_abandoned() -> None:
    """A batch of [search, pair, search]: the pair is answered while the first search still runs (it waited for
    the batch's last search), and the second search, whose client went while the first ran, is never run."""
    engine = SearchingEngine()
    batcher = MicroBatcher(engine, max_items=100, max_wait_s=0.0).start()
    try:
        blocker = batcher.submit(_job(0, 1))
        assert engine.entered.wait(10)
        slow = batcher.submit(SearchJob("slow", "c", 3))
        pair = batcher.submit(_job(4, 2))
        gone = batcher.submit(SearchJob("gone", "c", 3))
        engine.release.set()
        blocker.result(10)
        np.testing.assert_array_equal(pair.result(10), [4.0, 5.0])  # while "slow" is still searching
        assert engine.slow_started.wait(10) and not slow.done()
        assert gone.running() or not gone.done()
        gone.cancel()  # its client goes while "slow" runs
        engine.slow_release.set()
        assert slow.result(10) == "found slow"
        with pytest.raises(CancelledError):
            gone.result(10)
    finally:
        batcher.stop(10)
    assert engine.runs == [["pairs"], ["pairs"], ["slow"]]  # "gone" was never searched


def test_a_batch_counts_the_tokens_of_live_pieces_only() -> None:
    """A request cancelled while the worker waits for more jobs to fill its batch is dropped from that batch, and so
    are its tokens: the batch's ``tokens`` are those of what the model scored."""
    engine = RecordingEngine({"10": 4, "11": 4, "20": 3})
    engine.release.set()
    seen: list[BatchStats] = []
    batcher = MicroBatcher(
        engine, max_items=100, max_tokens=100, max_requests=2, max_wait_s=10.0, on_batch=seen.append
    ).start()
    try:
        gone = batcher.submit(_job(10, 2))
        wait_until(lambda: batcher.queued() == 0, what="the worker to take the first job")
        assert gone.cancel()  # not started yet: cancelled outright
        kept = batcher.submit(_job(20, 1))  # the second request fills the batch (max_requests 2): it runs now
        np.testing.assert_array_equal(kept.result(10), [20.0])
    finally:
        batcher.stop(10)
    assert engine.inputs == [["20"]]
    assert [(s.requests, s.items, s.tokens) for s in seen] == [(1, 1, 3)]  # not 4 + 4 + 3 = 11


def test_the_worker_waits_for_more_jobs_up_to_max_wait() -> None:
    engine = RecordingEngine()
    engine.release.set()
    batcher = MicroBatcher(engine, max_items=100, max_wait_s=0.5).start()
    try:
        first = batcher.submit(_job(0, 1))
        time.sleep(0.05)
        second = batcher.submit(_job(1, 2))  # arrives within the wait: same batch
        np.testing.assert_array_equal(first.result(10), [0.0])
        np.testing.assert_array_equal(second.result(10), [1.0, 2.0])
    finally:
        batcher.stop(10)
    assert engine.batches == [[1, 2]]


def test_concurrent_requests_share_model_calls(fresh_bi, scorers) -> None:  # noqa: F811
    """Nine concurrent requests: the first holds the model while eight queue; the eight are then encoded in one
    model call (fewer calls than requests, seen in /metrics), and each gets its own scores, equal to the Python
    scorer's."""
    gate = Gate()
    gate.wrap(fresh_bi)
    n = 9
    bodies = [
        {"sentence1": [f"a man plays guitar {i}", "a dog"], "sentence2": ["a woman", f"a cat {i}"], "condition": "x"}
        for i in range(n)
    ]
    results: dict[int, list[float]] = {}
    with serving(fresh_bi, max_batch_inputs=64, batch_wait_ms=0, cache_size=0) as client:

        def post(i: int) -> None:
            results[i] = client.post("/similarity", json=bodies[i]).json()["scores"]

        threads = [threading.Thread(target=post, args=(0,), daemon=True)]
        threads[0].start()
        assert gate.entered.wait(30)
        threads += [threading.Thread(target=post, args=(i,), daemon=True) for i in range(1, n)]
        for t in threads[1:]:
            t.start()
        wait_until(lambda: metric(client, "finesim_batch_queue_depth") == n - 1, what="eight requests queued")
        gate.open()
        for t in threads:
            t.join(30)
        calls = metric(client, "finesim_model_calls_total")
        batches = metric(client, "finesim_batch_requests_count")
        in_batches = metric(client, "finesim_batch_requests_sum")
        pairs = metric(client, "finesim_items_scored_total", 'endpoint="/similarity"')
    assert len(results) == n
    assert calls == 2 < n and batches == 2 and in_batches == n and pairs == 2 * n
    for i, body in enumerate(bodies):
        expected = scorers["bi"].similarity(body["sentence1"], body["sentence2"], body["condition"])
        np.testing.assert_allclose(results[i], expected, rtol=1e-5, atol=1e-6)


def test_batch_size_one_serves_one_request_at_a_time(fresh_bi) -> None:  # noqa: F811
    gate = Gate()
    gate.wrap(fresh_bi)
    n = 4
    with serving(fresh_bi, max_batch_inputs=1, cache_size=0) as client:
        threads = [
            threading.Thread(
                target=client.post,
                args=("/similarity",),
                kwargs={"json": {"sentence1": [f"text {i}"], "sentence2": ["other"]}},
                daemon=True,
            )
            for i in range(n)
        ]
        for t in threads:
            t.start()
        wait_until(lambda: metric(client, "finesim_requests_in_flight") == n, what="all requests queued")
        gate.open()
        for t in threads:
            t.join(30)
        assert metric(client, "finesim_model_calls_total") == n
        assert metric(client, "finesim_batch_requests_sum") == metric(client, "finesim_batch_requests_count") == n


@pytest.mark.parametrize("kind", ["bi", "cross"])
def test_the_cache_answers_repeated_inputs(kind, scorers) -> None:  # noqa: F811
    body = {"sentence1": ["a man plays guitar", "a dog"], "sentence2": ["a woman", "a cat"], "condition": "x"}
    with serving(scorers[kind], cache_size=100) as client:
        first = client.post("/similarity", json=body).json()["scores"]
        misses = metric(client, "finesim_cache_misses_total")
        assert misses == (4 if kind == "bi" else 2) and metric(client, "finesim_cache_hits_total") == 0
        calls = metric(client, "finesim_model_calls_total")
        again = client.post("/similarity", json=body).json()["scores"]
        assert again == first
        assert metric(client, "finesim_cache_hits_total") == misses
        assert metric(client, "finesim_cache_misses_total") == misses
        assert metric(client, "finesim_model_calls_total") == calls  # no model call for a fully cached request
        if kind == "bi":  # the cache is keyed by (text, condition): another condition is a miss
            client.post("/similarity", json={**body, "condition": "y"})
            assert metric(client, "finesim_cache_misses_total") == 2 * misses


def test_metrics_text(scorers) -> None:  # noqa: F811
    with serving(scorers["bi"]) as client:
        client.post("/similarity", json={"sentence1": ["a dog"], "sentence2": ["a cat"]})
        client.post("/v1/embeddings", json={"input": ["a dog", "a cat", "a cow"]})
        client.post("/similarity", json={"sentence1": []})
        response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    for line in (
        'finesim_requests_total{endpoint="/similarity",status="200"} 1.0',
        'finesim_requests_total{endpoint="/similarity",status="422"} 1.0',
        'finesim_requests_total{endpoint="/v1/embeddings",status="200"} 1.0',
        'finesim_items_scored_total{endpoint="/similarity"} 1.0',
        'finesim_items_scored_total{endpoint="/v1/embeddings"} 3.0',
        "finesim_batch_requests_count 2.0",
        "finesim_batch_items_sum 4.0",
        "finesim_cache_misses_total 3.0",  # "a dog" and "a cat" alone were cached by the first request
        "finesim_cache_hits_total 2.0",
        "finesim_model_calls_total 2.0",
    ):
        assert line in text, line
    assert 'finesim_request_duration_seconds_bucket{endpoint="/similarity",le="0.005"}' in text
    assert "finesim_requests_in_flight 0.0" in text and "finesim_batch_queue_depth 0.0" in text


def test_a_request_over_the_budget_is_split_and_answered_whole(scorers) -> None:  # noqa: F811
    """``max_batch_inputs`` 3 and a request of 4 pairs: two micro-batches (3 + 1 pairs), one answer with the 4 scores in
    order, equal to the Python scorer's."""
    from serving_support import S1, S2, C

    with serving(scorers["bi"], max_batch_inputs=3, cache_size=0) as client:
        answer = client.post("/similarity", json={"sentence1": S1, "sentence2": S2, "condition": C})
        assert answer.status_code == 200, answer.text
        assert metric(client, "finesim_batch_items_count") == 2 and metric(client, "finesim_batch_items_sum") == 4
        assert metric(client, "finesim_batch_split_pieces_total") == 2
        assert metric(client, "finesim_items_scored_total", 'endpoint="/similarity"') == 4
        batching = client.get("/info").json()["batching"]
        assert batching["max_batch_tokens"] is None and batching["max_batch_requests"] is None
        assert batching["inference_batch_size"] == 64  # the default forward batch
    np.testing.assert_allclose(answer.json()["scores"], scorers["bi"].similarity(S1, S2, C), rtol=1e-5, atol=1e-6)


def test_small_requests_are_gathered_up_to_the_token_budget(fresh_bi, scorers) -> None:  # noqa: F811
    """Nine one-pair requests of 14 tokens each ([CLS] a X [SEP] the animal [SEP], twice) under a 60-token budget:
    the first holds the model; the eight queued behind it are scored 4 per batch (56 tokens; a fifth would make 70).
    Each gets its own score, equal to the Python scorer's."""
    gate = Gate()
    gate.wrap(fresh_bi)
    words = ["man", "boy", "girl", "woman", "car", "ball", "house", "park", "dog"]
    bodies = [{"sentence1": [f"a {w}"], "sentence2": ["a cat"], "condition": "the animal"} for w in words]
    results: dict[int, list[float]] = {}
    with serving(fresh_bi, max_batch_inputs=64, max_batch_tokens=60, batch_wait_ms=0, cache_size=0) as client:

        def post(i: int) -> None:
            results[i] = client.post("/similarity", json=bodies[i]).json()["scores"]

        threads = [threading.Thread(target=post, args=(0,), daemon=True)]
        threads[0].start()
        assert gate.entered.wait(30)
        threads += [threading.Thread(target=post, args=(i,), daemon=True) for i in range(1, len(bodies))]
        for t in threads[1:]:
            t.start()
        wait_until(lambda: metric(client, "finesim_batch_queue_depth") == 8, what="eight requests queued")
        gate.open()
        for t in threads:
            t.join(30)
        assert metric(client, "finesim_batch_requests_count") == 3  # 1, then 4 + 4
        assert metric(client, "finesim_batch_requests_sum") == 9
        assert metric(client, "finesim_batch_tokens_count") == 3
        assert metric(client, "finesim_batch_tokens_sum") == 9 * 14
        assert metric(client, "finesim_batch_tokens_bucket", 'le="64.0"') == 3  # no batch over the budget
        assert metric(client, "finesim_batch_split_pieces_total") == 0
        assert client.get("/info").json()["batching"]["max_batch_tokens"] == 60
    for i, body in enumerate(bodies):
        expected = scorers["bi"].similarity(body["sentence1"], body["sentence2"], body["condition"])
        np.testing.assert_allclose(results[i], expected, rtol=1e-5, atol=1e-6)


def test_a_token_budget_needs_a_tokenizer() -> None:
    """A scorer whose model has no tokenizer cannot be served with a token budget: the start fails saying why."""
    from finesim.evaluation.scoring import ConditionalScorer

    class Bare:
        tokenizer = None
        max_seq_length = 32

        def get_embedding_dimension(self) -> int:
            return 8

    scorer = ConditionalScorer.__new__(ConditionalScorer)
    scorer.model, scorer.encoder = Bare(), "bi"
    with serving(scorer, ready=False, max_batch_tokens=100) as client:
        wait_until(lambda: client.get("/info").json()["status"] == "failed", what="the start to fail")
        health = client.get("/health").json()
    assert "max_batch_tokens (--max-batch-tokens) counts tokens with the model's tokenizer" in health["error"]
    assert "Bare has no tokenizer" in health["error"]


def test_the_forward_batch_reaches_the_loaded_scorer_and_info(saved_models) -> None:  # noqa: F811
    """--inference-batch-size: the scorer the server loads encodes that many inputs at a time, and /info says so."""
    from finesim.serving.app import default_loader
    from finesim.serving.settings import ServeSettings

    settings = ServeSettings(model=str(saved_models["bi"]), inference_batch_size=16)
    scorer = default_loader(settings)()
    assert scorer.batch_size == 16
    with serving(scorer, inference_batch_size=16, cache_size=0) as client:
        assert client.get("/info").json()["batching"]["inference_batch_size"] == 16

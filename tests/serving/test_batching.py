"""Micro-batching: the worker gathers queued jobs up to the item budget, concurrent requests share model calls,
one request at a time with ``batch_size`` 1, and the metrics that show it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError

import numpy as np
import pytest
from serving_support import Gate, fresh_bi, metric, saved_models, scorers, serving, time_limit, wait_until  # noqa: F401

from finesim.serving.batching import MicroBatcher, ShuttingDown
from finesim.serving.engine import PairJob
from finesim.serving.metrics import BatchStats


class RecordingEngine:
    """Answers each job with its size; records the batches; the first batch waits for ``release``."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = threading.Event()
        self.entered = threading.Event()

    def run(self, jobs):
        self.entered.set()
        assert self.release.wait(30)
        self.batches.append([job.size for job in jobs])
        if any(job.size == 13 for job in jobs):
            return [ValueError("unlucky") if job.size == 13 else job.size for job in jobs], _stats(jobs)
        return [job.size for job in jobs], _stats(jobs)


def _stats(jobs) -> BatchStats:
    return BatchStats(len(jobs), sum(j.size for j in jobs), 0, 1, 0, 0)


def _job(n: int) -> PairJob:
    return PairJob(["a"] * n, ["b"] * n, [None] * n)


def test_worker_gathers_queued_jobs_up_to_the_item_budget() -> None:
    engine = RecordingEngine()
    seen: list[BatchStats] = []
    batcher = MicroBatcher(engine, max_items=10, max_wait_s=0.0, on_batch=seen.append).start()
    try:
        first = batcher.submit(_job(1))
        assert engine.entered.wait(10)  # the worker holds the first batch; the next jobs queue up
        futures = [batcher.submit(_job(n)) for n in (4, 5, 3, 20, 2)]
        engine.release.set()
        assert first.result(10) == 1
        assert [f.result(10) for f in futures] == [4, 5, 3, 20, 2]
    finally:
        batcher.stop(10)
    # 4 + 5 fill the budget; 3 would overflow it; 20 is over budget alone and forms its own batch
    assert engine.batches == [[1], [4, 5], [3], [20], [2]]
    assert [s.requests for s in seen] == [1, 2, 1, 1, 1]


def test_one_failing_job_fails_alone_and_cancelled_jobs_are_skipped() -> None:
    engine = RecordingEngine()
    batcher = MicroBatcher(engine, max_items=100, max_wait_s=0.0).start()
    try:
        blocker = batcher.submit(_job(1))
        assert engine.entered.wait(10)
        bad, good, gone = batcher.submit(_job(13)), batcher.submit(_job(2)), batcher.submit(_job(7))
        assert gone.cancel()  # its client went away before the batch ran
        engine.release.set()
        assert blocker.result(10) == 1 and good.result(10) == 2
        with pytest.raises(ValueError, match="unlucky"):
            bad.result(10)
        with pytest.raises(CancelledError):
            gone.result(10)
    finally:
        batcher.stop(10)
    assert engine.batches == [[1], [13, 2]]
    with pytest.raises(ShuttingDown):
        batcher.submit(_job(1))


def test_the_worker_waits_for_more_jobs_up_to_max_wait() -> None:
    engine = RecordingEngine()
    engine.release.set()
    batcher = MicroBatcher(engine, max_items=100, max_wait_s=0.5).start()
    try:
        first = batcher.submit(_job(1))
        time.sleep(0.05)
        second = batcher.submit(_job(2))  # arrives within the wait: same batch
        assert first.result(10) == 1 and second.result(10) == 2
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
    with serving(fresh_bi, batch_size=64, batch_wait_ms=0, cache_size=0) as client:

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
    with serving(fresh_bi, batch_size=1, cache_size=0) as client:
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

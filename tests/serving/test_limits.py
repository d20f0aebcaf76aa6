"""Limits and access: 413 before the body is parsed, the 422 checks, 429 for one request too many in flight,
401 without the API key."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from serving_support import (  # noqa: F401
    S1,
    S2,
    C,
    Gate,
    assert_error,
    fresh_bi,
    metric,
    saved_models,
    scorers,
    serving,
    time_limit,
    wait_until,
)

from finesim.serving.limits import BodySizeLimitMiddleware


def test_413_from_content_length_before_the_body_is_read() -> None:
    """A declared length over the limit is refused without reading a byte (``receive`` is never called) and
    without calling the application."""
    called = []

    async def app(scope, receive, send):
        called.append("app")

    async def receive():
        called.append("receive")
        return {"type": "http.request", "body": b"", "more_body": False}

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/similarity", "headers": [(b"content-length", b"999999")]}
    asyncio.run(BodySizeLimitMiddleware(app, max_bytes=100)(scope, receive, send))
    assert called == []
    assert sent[0]["status"] == 413
    assert b'"error_type":"PayloadTooLarge"' in sent[1]["body"]


def test_413_for_a_streamed_body_while_counting() -> None:
    """Without a length the chunks are counted: the limit is hit at the second chunk; the rest of the body is read and
    dropped (up to 16 times the limit) before the 413 goes out, since the server closes the connection after it and a
    connection closed with the body still arriving is reset: the client lost the 413."""
    chunks = [b"x" * 60, b"y" * 60, b"z" * 60, b"w" * 60]
    events = []

    async def receive():
        n = sum(e == "read" for e in events)
        events.append("read")
        return {"type": "http.request", "body": chunks[n], "more_body": n < 3}

    async def app(scope, receive, send):
        raise AssertionError("the application must not see an over-limit body")

    sent = []

    async def send(message):
        events.append(message["type"])
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/similarity", "headers": []}
    asyncio.run(BodySizeLimitMiddleware(app, max_bytes=100)(scope, receive, send))
    assert sent[0]["status"] == 413
    assert events == ["read", "read", "read", "read", "http.response.start", "http.response.body"]

    endless = []

    async def forever():
        endless.append(1)
        return {"type": "http.request", "body": b"x" * 50, "more_body": True}

    asyncio.run(BodySizeLimitMiddleware(app, max_bytes=100)(scope, forever, send))
    assert len(endless) == 3 + 16 * 100 // 50  # 3 chunks pass the limit, then 1,600 bytes are drained


def _half_body_then_silence():
    """An ASGI ``receive`` of a client that sends 13 bytes of its body, then nothing more."""
    sent = []

    async def receive():
        if not sent:
            sent.append(True)
            return {"type": "http.request", "body": b'{"sentence1":', "more_body": True}
        await asyncio.sleep(3600)

    return receive


def test_408_for_a_body_that_stops_arriving() -> None:
    """Half a body, then silence: answered 408 once ``timeout_s`` has passed since the request began, the
    application never called; a body that arrives in time reaches it whole."""
    called = []

    async def app(scope, receive, send):
        called.append((await receive())["body"])

    silent = _half_body_then_silence()
    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/similarity", "headers": []}
    started = time.monotonic()
    asyncio.run(BodySizeLimitMiddleware(app, max_bytes=100, timeout_s=0.3)(scope, silent, send))
    assert 0.25 < time.monotonic() - started < 5
    assert called == [] and sent[0]["status"] == 408
    assert b"the request body did not arrive whole within 0.3 s (13 bytes came)" in sent[1]["body"]
    assert b'"error_type":"RequestTimeout"' in sent[1]["body"]

    async def whole():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    asyncio.run(BodySizeLimitMiddleware(app, max_bytes=100, timeout_s=0.3)(scope, whole, send))
    assert called == [b"{}"]


def test_a_client_sending_half_a_body_holds_no_scoring_slot() -> None:
    """The server's middleware reads the body before the concurrency limit counts the request: with a limit of 1, a
    client whose body stops half-way leaves the slot to another client, which is answered, and is let go with 408."""
    from finesim.serving import ServeSettings, create_app
    from finesim.serving.limits import ConcurrencyLimitMiddleware
    from finesim.serving.metrics import ServerMetrics

    app = create_app(ServeSettings(model="tiny"), loader=lambda: None)
    order = [m.cls for m in app.user_middleware]  # outermost first
    assert order.index(BodySizeLimitMiddleware) < order.index(ConcurrencyLimitMiddleware)

    async def scored(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    limited = ConcurrencyLimitMiddleware(scored, limit=1, public_paths=(), metrics=ServerMetrics(("/similarity",)))
    stack = BodySizeLimitMiddleware(limited, max_bytes=100, timeout_s=0.5)
    scope = {"type": "http", "method": "POST", "path": "/similarity", "headers": []}

    half = _half_body_then_silence()

    async def whole():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    silent_sent: list = []
    good_sent: list = []

    async def both():
        async def record(into, message):
            into.append(message)

        silent = asyncio.create_task(stack(scope, half, lambda m: record(silent_sent, m)))
        await asyncio.sleep(0.1)  # the silent client's half body is in
        await stack(scope, whole, lambda m: record(good_sent, m))
        assert not silent.done()
        await silent

    asyncio.run(both())
    assert good_sent[0]["status"] == 200  # not 429: the silent client held no slot
    assert silent_sent[0]["status"] == 408


def test_413_through_the_app(scorers) -> None:  # noqa: F811
    with serving(scorers["bi"], max_request_bytes=200) as client:
        # not even JSON: a parser would answer 422, the limit answers first
        assert_error(client.post("/similarity", content=b"{" * 300), 413, "PayloadTooLarge", contains="200 bytes")
        chunked = client.post("/similarity", content=iter([b"[" * 150, b"[" * 150]))  # no Content-Length
        assert_error(chunked, 413, "PayloadTooLarge")
        small = client.post("/similarity", json={"sentence1": ["a dog"], "sentence2": ["a cat"]})
        assert small.status_code == 200
        streamed_ok = client.post(
            "/similarity",
            content=iter([b'{"sentence1": ["a dog"], ', b'"sentence2": ["a cat"]}']),
            headers={"Content-Type": "application/json"},
        )
        assert streamed_ok.status_code == 200, streamed_ok.text
        assert metric(client, "finesim_requests_total", 'endpoint="/similarity",status="413"') == 2


BAD_REQUESTS = [
    ("/similarity", {"sentence1": ["a"] * 6, "sentence2": ["b"] * 6}, "at most 5"),
    ("/similarity", {"sentence1": ["a" * 51], "sentence2": ["b"]}, "sentence1[0] has 51 characters"),
    ("/similarity", {"sentence1": ["a", "b"], "sentence2": ["b"]}, "2 first sentences but 1 second"),
    ("/similarity", {"sentence1": ["a", ""], "sentence2": ["b", "c"]}, "sentence1[1] is empty"),
    ("/similarity", {"sentence1": ["a"], "sentence2": ["   "]}, "sentence2[0] is empty"),
    ("/similarity", {"sentence1": ["a", 3], "sentence2": ["b", "c"]}, "sentence1[1]: Input should be a valid string"),
    ("/similarity", {"sentence1": ["a"]}, "sentence2: Field required"),
    ("/similarity", {"sentence1": [], "sentence2": []}, "sentence1 is empty"),
    ("/similarity", {"sentence1": "a", "sentence2": ["b"]}, "sentence1: Input should be a valid list"),
    ("/similarity", {"sentence1": ["a", "b"], "sentence2": ["b", "c"], "condition": ["x"]}, "1 conditions"),
    ("/similarity", {"sentence1": ["a"], "sentence2": ["b"], "condition": ""}, "condition is empty"),
    # a lone UTF-16 surrogate has no UTF-8 form: the tokenizer failed on it (500 Backend, a traceback in the log)
    (
        "/similarity",
        {"sentence1": ["a", "b\ud800c"], "sentence2": ["b", "c"]},
        "sentence1[1] is not valid Unicode: a lone surrogate '\\ud800' at character 1",
    ),
    ("/similarity", {"sentence1": ["a"], "sentence2": ["b"], "condition": "\udfff"}, "condition is not valid Unicode"),
    ("/rerank", {"query": "\ud800", "texts": ["b"]}, "query is not valid Unicode"),
    ("/v1/embeddings", {"input": ["a", "\ud800"]}, "input[1] is not valid Unicode"),
    ("/similarity", {"sentence1": ["a"], "sentence2": ["b"], "sentences2": ["b"]}, "sentences2: Extra inputs"),
    ("/rerank", {"query": "a", "texts": ["b"], "top_n": 0}, "top_n: Input should be greater than or equal to 1"),
    ("/rerank", {"query": "", "texts": ["b"]}, "query is empty"),
    ("/rerank", {"query": "a", "texts": ["b"] * 6}, "texts has 6 items"),
    ("/rerank", {"texts": ["b"]}, "query: Field required"),
    ("/v1/embeddings", {"input": ["a", None]}, "input[1]"),
    ("/v1/embeddings", {"input": []}, "input is empty"),
    ("/v1/embeddings", {"model": "x"}, "input: Field required"),
    ("/v1/embeddings", {"input": "a", "encoding_format": "int8"}, "encoding_format"),
]


@pytest.mark.parametrize(("path", "body", "says"), BAD_REQUESTS)
def test_422_checks(path, body, says, scorers) -> None:  # noqa: F811
    with serving(scorers["bi"], max_items=5, max_text_chars=50) as client:
        # JSON as clients send it, non-ASCII escaped (a lone surrogate can only travel as an escape)
        sent = client.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})
        assert_error(sent, 422, "Validation", contains=says)


@pytest.mark.parametrize("kind", ["tri", "case"])
def test_422_without_a_condition_where_one_is_needed(kind, scorers) -> None:  # noqa: F811
    with serving(scorers[kind]) as client:
        body = assert_error(client.post("/similarity", json={"sentence1": S1, "sentence2": S2}), 422, "Validation")
        assert "only under a condition" in body["error"]
        assert_error(client.post("/rerank", json={"query": "a", "texts": ["b"]}), 422, "Validation")


def test_429_when_too_many_requests_are_in_flight(fresh_bi) -> None:  # noqa: F811
    """Two requests held in the model fill ``--max-concurrent 2``: a third is refused at once, not queued; once
    they finish, requests are accepted again. Public endpoints are never refused."""
    gate = Gate()
    gate.wrap(fresh_bi)
    results: dict[int, int] = {}
    with serving(fresh_bi, max_concurrent=2, max_batch_inputs=1) as client:

        def post(i: int) -> None:
            body = {"sentence1": [f"a man plays {i}"], "sentence2": ["a dog"], "condition": "the activity"}
            results[i] = client.post("/similarity", json=body).status_code

        threads = [threading.Thread(target=post, args=(i,), daemon=True) for i in range(2)]
        for t in threads:
            t.start()
        assert gate.entered.wait(30)
        wait_until(lambda: metric(client, "finesim_requests_in_flight") == 2, what="two requests in flight")
        start = time.monotonic()
        refused = client.post("/similarity", json={"sentence1": ["x"], "sentence2": ["y"]})
        assert time.monotonic() - start < 5  # answered at once, not after the held requests
        assert_error(refused, 429, "Overloaded")
        assert refused.headers["retry-after"] == "1"
        assert client.get("/health").status_code == 200 and client.get("/info").status_code == 200
        gate.open()
        for t in threads:
            t.join(30)
        assert results == {0: 200, 1: 200}
        assert client.post("/similarity", json={"sentence1": ["x"], "sentence2": ["y"]}).status_code == 200


def test_401_without_the_api_key(scorers) -> None:  # noqa: F811
    key = "s3cret-key-for-tests"
    body = {"sentence1": ["a dog"], "sentence2": ["a cat"]}
    with serving(scorers["bi"], api_key=key) as client:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": key},
            {"Authorization": f"Basic {key}"},
        ):
            refused = client.post("/similarity", json=body, headers=headers)
            assert_error(refused, 401, "Unauthorized")
            assert key not in refused.text and refused.headers["www-authenticate"] == "Bearer"
        # 401 comes before the body is looked at: a malformed or oversized body still gets 401 without the key
        assert_error(client.post("/similarity", content=b"{oops"), 401, "Unauthorized")
        for path in ("/rerank", "/v1/embeddings"):
            assert_error(client.post(path, json={}), 401, "Unauthorized")
        ok = client.post("/similarity", json=body, headers={"Authorization": f"Bearer {key}"})
        assert ok.status_code == 200, ok.text
        ok = client.post("/similarity", json=body, headers={"authorization": f"bearer  {key}"})
        assert ok.status_code == 200
        for public in ("/health", "/info", "/metrics"):
            response = client.get(public)
            assert response.status_code == 200 and key not in response.text
        assert client.get("/info").json()["auth"] is True


def test_settings_never_show_the_key() -> None:
    from finesim.serving import ServeSettings

    settings = ServeSettings(model="m", api_key="hidden-value")
    assert "hidden-value" not in repr(settings) and "hidden-value" not in str(settings.describe())
    with pytest.raises(ValueError, match="empty"):
        ServeSettings(model="m", api_key="  ")
    with pytest.raises(ValueError, match="unknown encoder"):
        ServeSettings(model="m", encoder="quad")


def _call(app, messages: list[dict]) -> list[dict]:
    """Run one POST /similarity through the ASGI ``app`` whose client sends ``messages``; what the app sent back."""
    incoming = iter(messages)
    sent: list[dict] = []

    async def receive():
        return next(incoming)

    async def send(message):
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", b"1000")]
    scope = {"type": "http", "method": "POST", "path": "/similarity", "headers": headers, "query_string": b""}
    asyncio.run(app(scope, receive, send))
    return sent


def test_a_client_that_disconnects_mid_body_is_a_499_not_a_server_error() -> None:
    """Content-Length 1000, 12 bytes sent, then the connection closes: nobody to answer, and the metrics count it
    as 499 (client closed request); it used to count as a 500."""
    from finesim.serving import ServeSettings, create_app

    app = create_app(ServeSettings(model="tiny"), loader=lambda: None)
    partial = {"type": "http.request", "body": b'{"sentence1"', "more_body": True}
    sent = _call(app, [partial, {"type": "http.disconnect"}])
    assert sent == []
    text = app.state.metrics.exposition()[0].decode()
    assert 'finesim_requests_total{endpoint="/similarity",status="499"} 1.0' in text
    assert 'status="5' not in text


def test_an_app_that_fails_without_answering_is_still_a_500() -> None:
    """Only a client that left makes it a 499: an application that returns (or raises) without answering a client
    still there is a server error."""
    from finesim.serving.limits import MetricsMiddleware
    from finesim.serving.metrics import ServerMetrics

    async def silent(scope, receive, send):
        await receive()

    async def failing(scope, receive, send):
        raise RuntimeError("bug")

    metrics = ServerMetrics(("/similarity",))
    whole = {"type": "http.request", "body": b"{}", "more_body": False}
    assert _call(MetricsMiddleware(silent, metrics), [whole]) == []
    with pytest.raises(RuntimeError, match="bug"):
        _call(MetricsMiddleware(failing, metrics), [whole])
    with pytest.raises(RuntimeError, match="bug"):  # a disconnect the app never read does not excuse it
        _call(MetricsMiddleware(failing, metrics), [{"type": "http.disconnect"}])
    text = metrics.exposition()[0].decode()
    assert 'finesim_requests_total{endpoint="/similarity",status="500"} 3.0' in text
    assert 'status="499"' not in text


def _run(app, messages: list[dict]) -> tuple[list[dict], float]:
    """Run ``app`` for a POST whose client sends ``messages`` and then stays connected (the next receive waits);
    what the app sent and the seconds it took."""
    incoming = iter(messages)
    sent: list[dict] = []

    async def receive():
        message = next(incoming, None)
        if message is None:
            await asyncio.sleep(3600)
        return message

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/similarity", "headers": [], "query_string": b""}
    start = time.perf_counter()
    asyncio.run(app(scope, receive, send))
    return sent, time.perf_counter() - start


def _slow_app(events: list[str], answer: bool):
    async def app(scope, receive, send):
        assert (await receive())["type"] == "http.request"  # the body, passed through
        if answer:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            await asyncio.sleep(0.5)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise
        await send({"type": "http.response.body", "body": b"{}"})
        events.append("answered")

    return app


def test_a_request_is_cancelled_when_its_client_disconnects_after_the_body() -> None:
    """uvicorn does not cancel a handler whose client has gone: the middleware does, at once, so the batcher's job
    is abandoned (its future cancelled) rather than scored for nobody; nothing is sent."""
    from finesim.serving.limits import CancelOnDisconnectMiddleware

    body = {"type": "http.request", "body": b"{}", "more_body": False}
    events: list[str] = []
    sent, seconds = _run(
        CancelOnDisconnectMiddleware(_slow_app(events, answer=False)), [body, {"type": "http.disconnect"}]
    )
    assert events == ["cancelled"] and sent == [] and seconds < 0.4
    # a client that stays is answered; a disconnect once the answer has started (what a server reports after the
    # response) cancels nothing
    for messages, answer in (([body], False), ([body, {"type": "http.disconnect"}], True)):
        events = []
        sent, _ = _run(CancelOnDisconnectMiddleware(_slow_app(events, answer)), messages)
        assert events == ["answered"] and sent[-1]["type"] == "http.response.body"


def test_a_cancelled_request_cancels_its_handler_and_waits_for_its_clean_up() -> None:
    """The server cancels the request itself (e.g. its shutdown timeout) while the handler runs: the handler is
    cancelled and its clean-up finishes before the cancellation leaves the middleware (the outer middleware free the
    request's slot only then)."""
    from finesim.serving.limits import CancelOnDisconnectMiddleware

    events: list[str] = []

    async def app(scope, receive, send):
        await receive()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # a clean-up that awaits
            events.append("cleaned")
            raise

    async def main() -> None:
        body = iter([{"type": "http.request", "body": b"{}", "more_body": False}])

        async def receive():
            message = next(body, None)
            if message is None:
                await asyncio.sleep(3600)  # the client stays
            return message

        async def send(message):
            pass

        scope = {"type": "http", "method": "POST", "path": "/similarity", "headers": [], "query_string": b""}
        task = asyncio.ensure_future(CancelOnDisconnectMiddleware(app)(scope, receive, send))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        events.append("middleware done")

    asyncio.run(main())
    assert events == ["cleaned", "middleware done"]

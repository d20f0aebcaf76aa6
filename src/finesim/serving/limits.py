"""ASGI middleware that answers before the application sees a request: metrics, auth, concurrency and body size.

Outermost first (:func:`finesim.serving.app.create_app` installs them in this order):

1. :class:`MetricsMiddleware`: counts every answered request by endpoint and status, with its latency; a request
   whose client disconnected before it was answered (e.g. mid-body) counts as 499 ``client closed request``, not
   as a server error.
2. :class:`AuthMiddleware`: with an API key, every path but the public ones needs ``Authorization: Bearer KEY``
   (compared with :func:`hmac.compare_digest`; the key is never logged or echoed): 401 otherwise.
3. :class:`BodySizeLimitMiddleware`: a body over the limit is answered 413 before anything parses it: at once
   when ``Content-Length`` says so, else while the chunks of a streamed (chunked) body are counted; a body that has
   not arrived whole within ``timeout_s`` is answered 408. It reads the body before the concurrency limit counts the
   request, so clients that send half a body and go silent hold no scoring slot (64 of them held every one, and
   every other client was answered 429, for as long as they kept their sockets open).
4. :class:`ConcurrencyLimitMiddleware`: more than ``limit`` scoring requests in flight: 429 at once, not queued.
5. :class:`CancelOnDisconnectMiddleware`: once a request's body is in, its handler is cancelled when the client
   disconnects before the answer starts (an ASGI server such as uvicorn does not cancel it), so the batching worker
   drops the request's pieces not yet scored (:mod:`finesim.serving.batching`) instead of scoring them for nobody.

They are plain ASGI callables, so they work under any ASGI server and with FastAPI's test client; the last one
runs the handler as an asyncio task, so it needs an asyncio server (uvicorn, as ``finesim serve`` runs).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from typing import Any

from finesim.serving.errors import (
    OVERLOADED,
    PAYLOAD_TOO_LARGE,
    REQUEST_TIMEOUT,
    UNAUTHORIZED,
    VALIDATION,
    json_error,
)
from finesim.serving.metrics import ServerMetrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger("finesim.serving")

# nginx's "client closed request": what a request counts as when its client disconnected before it was answered
# (e.g. mid-body); never sent (nobody is listening), only recorded in the metrics.
CLIENT_CLOSED = 499
# a streamed body over the limit is read to its end before its 413, so that the client gets the answer: this many
# times the limit at most, for at most DRAIN_S seconds (or until the body timeout)
DRAIN_FACTOR = 16
DRAIN_S = 10.0


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _receive_by(receive: Receive, deadline: float | None) -> Message | None:
    """The next ASGI message, or None when ``deadline`` (``time.monotonic()``; None: no limit) passes first."""
    try:
        return await asyncio.wait_for(receive(), None if deadline is None else max(0.0, deadline - time.monotonic()))
    except asyncio.TimeoutError:  # TimeoutError from Python 3.11 on; another class on 3.10
        return None


class MetricsMiddleware:
    """Record each HTTP request's endpoint, status and latency in ``metrics``."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status: int | None = None
        disconnected = False

        async def receive_watch() -> Message:
            nonlocal disconnected
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected = True
            return message

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive_watch, send_status)
        finally:
            if status is None and disconnected:  # the client left before it was answered: no server error
                status = CLIENT_CLOSED
                logger.info("%s: the client closed the connection before it was answered", scope.get("path"))
            self.metrics.observe_request(
                scope.get("path", ""), 500 if status is None else status, time.perf_counter() - start
            )


class AuthMiddleware:
    """401 for a request to a non-public path without ``Authorization: Bearer <api_key>``."""

    def __init__(self, app: ASGIApp, api_key: str, public_paths: Collection[str]) -> None:
        if not api_key:
            raise ValueError("the API key is empty")
        self.app = app
        self._key = api_key.encode("utf-8")
        self.public_paths = frozenset(public_paths)

    def __repr__(self) -> str:
        return f"AuthMiddleware(public_paths={sorted(self.public_paths)})"  # never the key

    def authorized(self, scope: Scope) -> bool:
        """Whether the request carries the key (constant-time comparison)."""
        header = _header(scope, b"authorization") or ""
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(token.strip().encode("utf-8"), self._key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.public_paths or self.authorized(scope):
            await self.app(scope, receive, send)
            return
        response = json_error(
            401,
            "missing or wrong API key: send the header 'Authorization: Bearer <key>'",
            UNAUTHORIZED,
            headers={"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)


class ConcurrencyLimitMiddleware:
    """429 at once when ``limit`` requests (public paths excepted) are already in flight."""

    def __init__(self, app: ASGIApp, limit: int, public_paths: Collection[str], metrics: ServerMetrics) -> None:
        self.app = app
        self.limit = limit
        self.public_paths = frozenset(public_paths)
        self.metrics = metrics
        self.active = 0  # only touched on the event loop thread

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.public_paths:
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            response = json_error(
                429,
                f"the server is answering {self.active} requests, its limit; retry later",
                OVERLOADED,
                headers={"Retry-After": "1"},
            )
            await response(scope, receive, send)
            return
        self.active += 1
        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1
            self.metrics.in_flight.dec()


class BodySizeLimitMiddleware:
    """413 for a body over ``max_bytes``, before the application reads or parses any of it.

    A ``Content-Length`` over the limit is refused without reading the body. Otherwise the body is read here,
    chunk by chunk, counting bytes (a chunked body has no length up front): over the limit it is refused at
    once; within it, the application receives the buffered body as one message. A body not whole ``timeout_s``
    seconds after the request began is answered 408 (``None``: no limit).
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, size: str) -> None:
        response = json_error(
            413,
            f"the request body ({size}) is over the server's limit of {self.max_bytes} bytes",
            PAYLOAD_TOO_LARGE,
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)

    async def _drain(self, receive: Receive, deadline: float | None) -> None:
        """Read and drop the rest of a streamed body over the limit before its 413 is sent, up to
        :data:`DRAIN_FACTOR` times the limit and until the body's deadline (else :data:`DRAIN_S`): the server closes
        the connection once the answer is out, and a connection closed with the body still arriving is reset, so the
        client lost the 413 (curl: "Recv failure")."""
        left = DRAIN_FACTOR * self.max_bytes
        end = deadline if deadline is not None else time.monotonic() + DRAIN_S
        while left > 0:
            message = await _receive_by(receive, end)
            if message is None or message["type"] != "http.request" or not message.get("more_body", False):
                return
            left -= len(message.get("body", b""))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                await json_error(400, "invalid Content-Length header", VALIDATION)(scope, receive, send)
                return
            if length > self.max_bytes:
                await self._too_large(scope, receive, send, f"{length} bytes")
                return
        chunks: list[bytes] = []
        total = 0
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        while True:
            message = await _receive_by(receive, deadline)
            if message is None:
                response = json_error(
                    408,
                    f"the request body did not arrive whole within {self.timeout_s:g} s ({total} bytes came)",
                    REQUEST_TIMEOUT,
                    headers={"Connection": "close"},
                )
                await response(scope, receive, send)
                return
            if message["type"] == "http.disconnect":
                return  # the client has gone: nobody to answer
            body = message.get("body", b"")
            total += len(body)
            if total > self.max_bytes:
                if message.get("more_body", False):
                    await self._drain(receive, deadline)
                await self._too_large(scope, receive, send, f"more than {self.max_bytes} bytes")
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class CancelOnDisconnectMiddleware:
    """Cancel the application's handling of a request whose client disconnects after sending its body and before
    the answer starts (module docstring, 5). While the body is read, every message goes to the application as
    usual; afterwards this middleware alone reads the connection, where the next message can only be the
    disconnect (ASGI servers also send it once the answer is complete, which is then ignored). GET and HEAD
    requests (no body; health, info and metrics) pass straight through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD"):  # no body, quick answers: no tasks
            await self.app(scope, receive, send)
            return
        body_in = asyncio.Event()
        answering = False

        async def receive_body() -> Message:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_in.set()
            return message

        async def send_watch(message: Message) -> None:
            nonlocal answering
            answering = answering or message["type"] == "http.response.start"
            await send(message)

        async def client_left() -> None:
            await body_in.wait()
            while (await receive())["type"] != "http.disconnect":
                pass

        handler = asyncio.ensure_future(self.app(scope, receive_body, send_watch))
        watcher = asyncio.ensure_future(client_left())
        for task in (handler, watcher):  # every outcome is read, whichever way the request ends
            task.add_done_callback(_retrieve)
        cancelled = False
        try:
            await asyncio.wait({handler, watcher}, return_when=asyncio.FIRST_COMPLETED)
            left = watcher.done() and not watcher.cancelled() and watcher.exception() is None
            if left and not handler.done() and not answering:
                cancelled = True
                handler.cancel()  # the client has gone: awaiting the batcher's future cancels (abandons) its job
                logger.info("%s: the client disconnected; its request is abandoned", scope.get("path"))
                await asyncio.wait({handler})  # its end, without its CancelledError (our own cancellation passes)
                if not handler.cancelled() and handler.exception() is not None:
                    logger.error("%s: the handler failed while being cancelled", scope.get("path"),
                                 exc_info=handler.exception())  # fmt: skip
                return
            await handler
        finally:
            watcher.cancel()
            if not handler.done():  # this middleware was cancelled (e.g. the server's shutdown timeout)
                if not cancelled:
                    handler.cancel()
                await asyncio.wait({handler})  # its clean-up ends before the outer middleware free its slot


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Read a finished task's outcome, so that no path leaves an exception "never retrieved"."""
    if not task.cancelled():
        task.exception()

"""Any OpenAI-compatible HTTP endpoint (OpenAI, vLLM, llama.cpp server, TGI, hosted APIs), over ``httpx``.

* ``api="chat"`` POSTs ``{base_url}/chat/completions`` with the prompt as one user message and reads
  ``choices[0].message.content``; ``api="completions"`` POSTs ``{base_url}/completions`` and reads
  ``choices[0].text``.
* Decoding: ``temperature=0``, ``top_p=1``, ``max_tokens`` (default 20, the paper's limit; the reference code
  used 5 with the OpenAI API).
* Each request has a timeout (``httpx``'s connect, read, write and pool timeouts). Connection errors, timeouts,
  broken replies, HTTP 408/409/425/429/500/502/503/504 and malformed replies (not JSON, no ``choices``) are retried
  up to ``max_retries`` times with exponential backoff and jitter (``Retry-After`` is honoured, capped at
  ``max_backoff``); every attempt counts in :meth:`describe`, so httpx's own transport retries are not used.
  Other HTTP errors (400, 401, 403, 404, ...) and a host name that does not resolve fail at once.
* At most ``concurrency`` requests are in flight (a thread pool over one connection pool of that size).
* The API key is read from the environment variable named by ``api_key_env`` when the backend is built, sent
  only in the ``Authorization`` header, and never stored in settings, logs, errors or results. Server replies
  quoted in errors and log lines (the first 300 bytes of an HTTP error body, 200 of a malformed reply) have
  every occurrence of the key replaced by ``[redacted]`` first, since some servers echo the request headers.
  No key = no header (a local vLLM server needs none).
* When a request still fails after its retries, ``on_error="fail"`` stops the run with :class:`BackendError`
  (replies already received stay in the cache, so a rerun resumes); ``on_error="invalid"`` records ``None``
  for that prompt, which is scored as an invalid reply, counted separately as a failed request, and not
  cached.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Literal

from finesim.prompting.backends.base import BackendError, ReplyCallback

logger = logging.getLogger("finesim.prompting")

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
DEFAULT_BASE_URL = "https://api.openai.com/v1"
REDACTED = b"[redacted]"


def quote_reply(raw: bytes, limit: int, secret: str | None) -> str:
    """The first ``limit`` bytes of a server reply as text, with every occurrence of ``secret`` redacted.

    Occurrences are found in ``raw`` at their original positions, so one that starts before the cut is removed
    whole and never leaks in part; ``raw`` must therefore hold ``limit + len(secret)`` bytes when the reply is
    that long.
    """
    if not secret:
        return raw[:limit].decode("utf-8", "replace")
    key = secret.encode("utf-8")
    pieces: list[bytes] = []
    i = 0
    while i < limit:
        j = raw.find(key, i)
        if j == -1 or j >= limit:
            pieces.append(raw[i:limit])
            break
        pieces += [raw[i:j], REDACTED]
        i = j + len(key)
    return b"".join(pieces).decode("utf-8", "replace")


class _Retryable(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _unresolvable(err: BaseException | None) -> socket.gaierror | None:
    """The DNS failure under a connection error (httpx chains the socket's error), if any."""
    while err is not None and not isinstance(err, socket.gaierror):
        err = err.__cause__ or err.__context__
    return err


@functools.cache
def _tls() -> ssl.SSLContext:
    """The system's certificate store, as urllib used it; made once (loading it costs ~25 ms per client)."""
    return ssl.create_default_context()


class OpenAICompatibleBackend:
    """Generate replies through an OpenAI-compatible HTTP API.

    Args:
        model: the model name the server expects (e.g. ``gpt-4o-mini``, or the name vLLM serves).
        base_url: API root up to and including ``/v1``.
        api: ``"chat"`` (``/chat/completions``) or ``"completions"`` (``/completions``).
        api_key_env: the environment variable that holds the key (read once; absent = no auth header).
        max_tokens: reply length limit.
        timeout: timeout per request, in seconds (to connect, and between bytes of the reply).
        max_retries: retries after the first attempt.
        backoff: first retry delay in seconds; doubles per retry, with jitter in [50%, 100%].
        max_backoff: cap on any single delay (also on ``Retry-After``).
        concurrency: requests in flight at most.
        on_error: ``"fail"`` or ``"invalid"`` (see module docstring).
        system_prompt: optional system message for ``api="chat"`` (part of the cache key).
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api: Literal["chat", "completions"] = "chat",
        api_key_env: str = "OPENAI_API_KEY",
        max_tokens: int = 20,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        concurrency: int = 4,
        on_error: Literal["fail", "invalid"] = "fail",
        system_prompt: str | None = None,
        show_progress: bool = True,
    ) -> None:
        if api not in ("chat", "completions"):
            raise ValueError(f"unknown api {api!r}; choose 'chat' or 'completions'")
        if on_error not in ("fail", "invalid"):
            raise ValueError(f"unknown on_error {on_error!r}; choose 'fail' or 'invalid'")
        if concurrency < 1 or max_retries < 0 or timeout <= 0 or max_tokens < 1:
            raise ValueError("need concurrency >= 1, max_retries >= 0, timeout > 0 and max_tokens >= 1")
        try:
            import httpx
        except ImportError as err:
            raise ImportError(
                f"the OpenAI-compatible backend needs httpx: pip install 'finesim[api]' (httpx) ({err})"
            ) from None
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api = api
        self.api_key_env = api_key_env
        self.__api_key = os.environ.get(api_key_env) or None
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.concurrency = concurrency
        self.on_error = on_error
        self.system_prompt = system_prompt
        self.show_progress = show_progress
        self.failed: list[int] = []
        self.requests_sent = 0
        self.retries = 0
        self._stats_lock = threading.Lock()
        auth = {} if self.__api_key is None else {"Authorization": f"Bearer {self.__api_key}"}
        limits = httpx.Limits(max_connections=concurrency)  # the pool holds every request in flight
        self._client = httpx.Client(headers=auth, timeout=timeout, verify=_tls(), limits=limits)

    def __repr__(self) -> str:
        return f"OpenAICompatibleBackend(model={self.model!r}, base_url={self.base_url!r}, api={self.api!r})"

    @property
    def url(self) -> str:
        return f"{self.base_url}/{'chat/completions' if self.api == 'chat' else 'completions'}"

    def settings(self) -> dict[str, Any]:
        """Options that shape the replies (part of the cache key; the endpoint and key are not)."""
        out: dict[str, Any] = {"api": self.api, "temperature": 0, "top_p": 1, "max_tokens": self.max_tokens}
        if self.system_prompt is not None:
            out["system_prompt"] = self.system_prompt
        return out

    def describe(self) -> dict[str, Any]:
        """Backend facts for a results file: the key's variable name and whether it is set, never the key."""
        return {
            "backend": self.name,
            "model": self.model,
            **self.settings(),
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "api_key_set": self.__api_key is not None,
            "timeout_s": self.timeout,
            "max_retries": self.max_retries,
            "concurrency": self.concurrency,
            "on_error": self.on_error,
            "requests_sent": self.requests_sent,
            "retries": self.retries,
            "failed_requests": len(self.failed),
        }

    def _payload(self, prompt: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "temperature": 0, "top_p": 1, "max_tokens": self.max_tokens}
        if self.api == "chat":
            messages = [] if self.system_prompt is None else [{"role": "system", "content": self.system_prompt}]
            body["messages"] = [*messages, {"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body

    def _extract(self, raw: bytes) -> str:
        try:
            data = json.loads(raw.decode("utf-8"))
            choice = data["choices"][0]
            text = choice["message"]["content"] if self.api == "chat" else choice["text"]
        except (ValueError, KeyError, IndexError, TypeError) as err:
            snippet = quote_reply(raw, 200, self.__api_key)
            raise _Retryable(f"malformed reply ({type(err).__name__}): {snippet!r}") from None
        if text is None:  # some servers send null content (e.g. a refusal or tool call)
            return ""
        if not isinstance(text, str):
            raise _Retryable(f"malformed reply: the text is a {type(text).__name__}, not a string")
        return text

    def _request_once(self, prompt: str) -> str:
        import httpx

        with self._stats_lock:
            self.requests_sent += 1
        try:
            response = self._client.post(self.url, json=self._payload(prompt))
        except httpx.TimeoutException:
            raise _Retryable(f"no reply from {self.url} within {self.timeout:g} s") from None
        except httpx.RemoteProtocolError as err:  # e.g. the connection dropped mid-reply
            raise _Retryable(f"broken reply from {self.url}: {err}") from None
        except httpx.TransportError as err:
            if (dns := _unresolvable(err)) is not None:  # the host name does not resolve: retrying will not help
                raise BackendError(
                    f"cannot reach {self.url}: its host name does not resolve ({dns.strerror}); check --base-url "
                    "and the network"
                ) from None
            raise _Retryable(f"cannot reach {self.url}: {err}") from None
        if response.is_success:
            return self._extract(response.content)
        message = f"HTTP {response.status_code} from {self.url}: {quote_reply(response.content, 300, self.__api_key)}"
        if response.status_code in RETRY_STATUS:
            raise _Retryable(message, _retry_after(response.headers.get("Retry-After")))
        raise BackendError(message)

    def complete(self, prompt: str) -> str:
        """One reply, with retries; raises :class:`BackendError` when they are exhausted."""
        attempt = 0
        while True:
            try:
                return self._request_once(prompt)
            except _Retryable as err:
                if attempt >= self.max_retries:
                    raise BackendError(f"{err} (gave up after {attempt + 1} attempts)") from None
                delay = min(self.max_backoff, self.backoff * 2**attempt) * random.uniform(0.5, 1.0)
                if err.retry_after is not None:
                    delay = min(self.max_backoff, max(delay, err.retry_after))
                attempt += 1
                with self._stats_lock:
                    self.retries += 1
                logger.warning("%s; retry %d/%d in %.2f s", err, attempt, self.max_retries, delay)
                time.sleep(delay)

    def generate(self, prompts: Sequence[str], on_reply: ReplyCallback | None = None) -> list[str | None]:
        """Replies in prompt order, at most ``concurrency`` requests at a time.

        With ``on_error="fail"``, the first failure stops new requests; the requests already in flight are
        still collected (and passed to ``on_reply``, i.e. cached) before :class:`BackendError` is raised.
        """
        from tqdm.auto import tqdm

        replies: list[str | None] = [None] * len(prompts)
        if not prompts:
            return replies
        errors: list[BackendError] = []
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="finesim-http") as pool:
            futures = {pool.submit(self.complete, p): i for i, p in enumerate(prompts)}
            done = as_completed(futures)
            try:
                for future in tqdm(done, "requests", len(futures), unit="req", disable=not self.show_progress):
                    i = futures[future]
                    if future.cancelled():
                        continue
                    try:
                        reply = replies[i] = future.result()
                    except BackendError as err:
                        if self.on_error == "invalid":
                            logger.warning("prompt %d: %s; scored as invalid", i, err)
                            self.failed.append(i)
                        else:  # stop: cancel what has not started, collect what is in flight
                            errors.append(err)
                            for other in futures:
                                other.cancel()
                        continue
                    if on_reply is not None:
                        on_reply(i, reply)
            except BaseException:  # an interrupt: start no new request
                pool.shutdown(wait=False, cancel_futures=True)
                raise
        if errors:
            raise errors[0]
        return replies

"""What a server is started with: the model, the limits, micro-batching and the cache (one checked dataclass)."""

from __future__ import annotations

import ipaddress
import json
import os
import warnings
from dataclasses import InitVar, asdict, dataclass, field
from typing import Any

ENCODERS = ("bi", "tri", "cross", "case")


DEFAULT_MAX_BATCH_INPUTS = 64


@dataclass(frozen=True)
class ServeSettings:
    """Settings of one ``finesim serve`` server.

    Args:
        model: Hub id, alias, sentence-transformers folder or a folder saved by finesim, as given.
        encoder: ``bi``, ``tri``, ``cross`` or ``case``; None decides by the folder's marker (a model without one
            is a bi-encoder).
        host, port: where to listen (port 0: a free port chosen by the system).
        api_key: the bearer key every non-public endpoint requires; None: no authentication. Never shown in
            ``repr`` or :meth:`describe`.
        max_request_bytes: largest accepted request body (413 above it, checked before the body is parsed).
        max_items: most pairs (``/similarity``), texts (``/rerank``) or inputs (``/v1/embeddings``) per request,
            and most results (``k``) of ``/search``.
        max_concurrent: most requests in flight on the scoring endpoints; one more is answered 429 at once.
        max_text_chars: longest accepted text, in characters.
        body_timeout_s: seconds a request's body may take to arrive whole (408 after them; a client that sends half a
            body and goes silent is let go); None: no limit. The body is read before the request counts towards
            ``max_concurrent``.
        max_batch_inputs: most model inputs (pairs or texts) in one micro-batch; requests are gathered up to it and a
            request larger than what is left is split over several batches (1: one input at a time).
        max_batch_tokens: most tokens (what the model reads for the inputs, counted with its tokenizer) in one
            micro-batch, as text-embeddings-inference's ``max_batch_tokens``; None: inputs alone bound a batch.
        max_batch_requests: most requests (or pieces of one) in one micro-batch, as text-embeddings-inference's
            ``max_batch_requests``; None: no bound. 1 with ``max_batch_inputs`` >= ``max_items`` serves one request at a
            time.
        batch_wait_ms: how long the worker waits for more requests after the first one of a micro-batch.
        cache_size: entries of the LRU cache of embeddings (cross-encoders: of pair scores); 0 turns it off.
        device: torch device (None: automatic).
        inference_batch_size: the model's own forward batch size inside one micro-batch.
        index: a :class:`~finesim.index.ConditionalIndex` folder built with this model, served on ``POST /search``
            (None: ``/search`` answers 404 ``NoIndex``).
        index_conditions: bi-encoder / CASE indexes: conditions whose corpus embeddings are computed at start-up
            (before ``/health`` answers 200) instead of on their first query.
        progress: show a progress bar (stderr) while ``index_conditions`` are embedded at start-up.
        map_wait: a "mapped" index: a new condition's first search waits for its map's fit (True), or is answered
            at once while the map is fitted in the background, as are the condition's other searches until the fit
            ends (False; ``ConditionalIndex.map_wait``): with the map of the nearest condition the index holds
            (``map_borrow``), else by the ``conditioned`` first stage.
        map_borrow: with ``map_wait`` False, whether such searches may use the map of the nearest condition held
            (``ConditionalIndex.map_borrow``); False: always the ``conditioned`` first stage.
        map_fit_yield: with ``map_wait`` False, the seconds a background fit waits before each step for a moment
            when no search runs (``ConditionalIndex.map_fit_yield``); None: the index's default.
        rerank_depth: how deep ``/search``'s two-stage searches re-rank (``ConditionalIndex.rerank_depth``): ``"all"``
            or ``"FIRST,STEP,PATIENCE"`` (:func:`finesim.index.rerank_depth.parse_rerank_depth`); None: the index's
            default.
        rerank_feedback: which candidates ``/search``'s two-stage searches re-rank on an index whose first stage is
            ``self`` (``ConditionalIndex.rerank_feedback``): ``"none"``, ``"local-map"`` or
            ``"local-map:ROUNDS,RIDGE,POOL[,earlier|own]"`` (:func:`finesim.index.feedback.parse_rerank_feedback`);
            None: the index's default.
        docs: serve FastAPI's interactive API page at ``/docs`` (with ``/openapi.json``, both then public); None: on
            when ``host`` is a loopback address, off otherwise (the page loads its scripts from a CDN).
        workers: server processes behind the one port (uvicorn's multi-process supervisor; each loads the model and
            batches its own connections' requests). 1: one process (the default).
        threads: torch threads per process; None: torch's own choice with one worker, else the machine's cores
            divided among the workers (at least 1).
        first_stage: where the index's first-stage model (another model than the served one, recorded when the index
            was built) is now, when its recorded folder has moved (``ConditionalIndex.open``'s ``first_stage``);
            None: the recorded one.
        batch_size: ``max_batch_inputs``'s old name, still read (with a ``FutureWarning``).
    """

    model: str
    encoder: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = field(default=None, repr=False)
    max_request_bytes: int = 1 << 20
    max_items: int = 256
    max_concurrent: int = 64
    max_text_chars: int = 4096
    body_timeout_s: float | None = 30.0
    max_batch_inputs: int = DEFAULT_MAX_BATCH_INPUTS
    max_batch_tokens: int | None = None
    max_batch_requests: int | None = None
    batch_wait_ms: float = 5.0
    cache_size: int = 10_000
    device: str | None = None
    inference_batch_size: int = 64
    index: str | None = None
    index_conditions: tuple[str, ...] = ()
    progress: bool = False
    map_wait: bool = True
    map_borrow: bool = True
    map_fit_yield: float | None = None
    rerank_depth: str | None = None
    rerank_feedback: str | None = None
    docs: bool | None = None
    workers: int = 1
    threads: int | None = None
    first_stage: str | None = None
    batch_size: InitVar[int | None] = None  # max_batch_inputs's name until 0.1: read, with a warning

    def __post_init__(self, batch_size: int | None) -> None:
        if batch_size is not None:
            if self.max_batch_inputs not in (DEFAULT_MAX_BATCH_INPUTS, batch_size):
                raise ValueError(
                    f"batch_size {batch_size} and max_batch_inputs {self.max_batch_inputs}: batch_size is "
                    "max_batch_inputs's old name; give one"
                )
            warnings.warn(
                "ServeSettings(batch_size=...) is now max_batch_inputs (the micro-batch's most inputs)",
                FutureWarning,
                stacklevel=3,
            )
            object.__setattr__(self, "max_batch_inputs", int(batch_size))
        if self.encoder is not None and self.encoder not in ENCODERS:
            raise ValueError(f"unknown encoder {self.encoder!r}; choose one of {list(ENCODERS)}")
        for name in (
            "max_request_bytes",
            "max_items",
            "max_concurrent",
            "max_text_chars",
            "max_batch_inputs",
            "workers",
        ):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("threads", "max_batch_tokens", "max_batch_requests"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.inference_batch_size < 1:
            raise ValueError(f"inference_batch_size must be >= 1, got {self.inference_batch_size}")
        if self.body_timeout_s is not None and not self.body_timeout_s > 0:
            raise ValueError(f"body_timeout_s must be > 0 (None: no limit), got {self.body_timeout_s}")
        if self.batch_wait_ms < 0 or self.cache_size < 0:
            raise ValueError("batch_wait_ms and cache_size must be >= 0")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("the API key is empty")
        if self.index_conditions and self.index is None:
            raise ValueError("index_conditions need an index")
        if self.rerank_depth is not None:
            from finesim.index.rerank_depth import parse_rerank_depth

            if self.index is None:
                raise ValueError("rerank_depth needs an index")
            parse_rerank_depth(self.rerank_depth)  # a bad value fails here, before the model loads
        if self.rerank_feedback is not None:
            from finesim.index.feedback import parse_rerank_feedback

            if self.index is None:
                raise ValueError("rerank_feedback needs an index")
            parse_rerank_feedback(self.rerank_feedback)  # a bad value fails here, before the model loads
        if self.map_fit_yield is not None:
            if self.map_wait:
                raise ValueError("map_fit_yield needs map_wait False: only a map fitted in the background waits")
            from finesim.index.two_stage import check_map_fit_yield

            check_map_fit_yield(self.map_fit_yield)  # a bad value fails here, before the model loads
        for condition in self.index_conditions:
            if not isinstance(condition, str) or not condition.strip():
                raise ValueError(f"index_conditions: {condition!r} is not a non-empty string")

    def limits(self) -> dict[str, float | None]:
        """The request limits, as ``/info`` reports them."""
        return {
            "max_request_bytes": self.max_request_bytes,
            "max_items": self.max_items,
            "max_concurrent": self.max_concurrent,
            "max_text_chars": self.max_text_chars,
            "body_timeout_s": self.body_timeout_s,
        }

    def worker_threads(self) -> int | None:
        """Torch threads of each server process (see ``threads``)."""
        if self.threads is not None or self.workers == 1:
            return self.threads
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(1, cores // self.workers)

    def to_environment(self) -> str:
        """These settings as JSON, for the worker processes of a multi-process server (the API key included)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_environment(cls, text: str) -> ServeSettings:
        """The settings :meth:`to_environment` wrote."""
        values = json.loads(text)
        values["index_conditions"] = tuple(values.get("index_conditions") or ())
        return cls(**values)

    def describe(self) -> dict[str, Any]:
        """Every setting except the API key (only whether one is required)."""
        out = asdict(self)
        out.pop("api_key")
        out["auth"] = self.api_key is not None
        return out


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

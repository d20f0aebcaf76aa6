"""Dynamic micro-batching by budget: one worker thread owns the model; requests queue jobs and wait on futures.

The worker fills each micro-batch from the queue, first come first served, up to a **budget**: at most
``max_items`` inputs (pairs or texts) and, when ``max_tokens`` is set, at most that many tokens (what the model reads
for the inputs, counted with its tokenizer: :meth:`~finesim.serving.engine.ScoringEngine.item_tokens`), as
text-embeddings-inference's ``max_batch_tokens`` does. A job that does not fit in what is left of the budget is
**split**: the inputs that fit go into this batch, the rest opens the next one (a job larger than the budget is
scored over several batches). The pieces' results are put back together in the job's order, so a request gets
exactly the rows it would get scored alone. One input over the token budget on its own forms a batch alone.
``max_requests`` optionally bounds the requests (or pieces of one) per batch. After the first job the worker waits
at most ``max_wait_s`` for more, then runs what it has.

Each batch goes to :meth:`finesim.serving.engine.ScoringEngine.run`, which computes each distinct input once;
every request's future is resolved once all its pieces are scored. ``max_items`` 1 scores one input at a time;
``max_requests`` 1 (with ``max_items`` at least the largest request) one request at a time.

A request whose client has gone is **abandoned**: cancelling its future (what ``asyncio.wrap_future`` does when the
awaiting task is cancelled) marks it even once its first piece has started, when ``Future.cancel`` itself can no
longer cancel it, and the worker drops its remaining pieces instead of scoring them to the end.

A ``/search`` job (:class:`~finesim.serving.engine.SearchJob`) is never combined with others: the batch's scoring
jobs run first, in one model call, and are answered at once; then each search runs on its own and is answered when
it ends, and a search whose client has gone meanwhile is dropped, not run. Each of these runs is one batch in the
metrics. (A batch of several searches and one pair held the pair's answer, and every search's, until the last search
ended, and ran searches nobody waited for any more.)
"""

from __future__ import annotations

import bisect
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field, replace
from typing import Any

from finesim.serving.engine import Job, ScoringEngine, SearchJob, merge_results, piece_of
from finesim.serving.metrics import BatchStats

logger = logging.getLogger("finesim.serving")

_STOP = object()


class ShuttingDown(RuntimeError):
    """A job was submitted after the worker was told to stop."""


class RequestFuture(Future):
    """The future of a submitted job. :meth:`cancel` also marks it :attr:`abandoned`, which the worker reads before
    each piece: a split request whose client has gone stops being scored even after its first piece started (a
    running ``Future`` cannot be cancelled, so ``cancel`` alone would let the rest be scored for nobody)."""

    def __init__(self) -> None:
        super().__init__()
        self.abandoned = False

    def cancel(self) -> bool:
        """Mark the request abandoned (its remaining pieces are dropped); cancel it when it has not started yet."""
        self.abandoned = True
        return super().cancel()


@dataclass(eq=False)
class _Request:
    """A submitted job, its future, and the results of its pieces scored so far."""

    job: Job
    future: RequestFuture
    tokens: list[int] | None = None  # per-input tokens, counted by the worker when a token budget is set
    prefix: list[int] = field(default_factory=list)  # prefix sums of ``tokens``
    parts: dict[int, Any] = field(default_factory=dict)  # start -> result of the piece starting there
    scored: int = 0  # inputs whose piece has been scored
    state: str = "queued"  # queued | running | done (answered, failed or cancelled)

    def finished(self) -> bool:
        """Whether nothing more of this request is to be scored: answered, failed, or abandoned by its client (an
        abandoned request that had started is resolved here with a ``CancelledError`` nobody reads)."""
        if self.future.abandoned and self.state != "done":
            self.state = "done"
            if self.future.running():
                self.future.set_exception(CancelledError("the client abandoned the request"))
        return self.state == "done"

    def begin(self) -> bool:
        """Whether a piece of this request should be scored (its client still waits and nothing failed)."""
        if self.finished():
            return False
        if self.state == "queued":
            self.state = "running" if self.future.set_running_or_notify_cancel() else "done"
        return self.state == "running"

    def deliver(self, start: int, stop: int, result: Any) -> None:
        """Record one piece's result; resolve the future when the last piece is in (or at the first error)."""
        if self.state != "running":
            return
        if isinstance(result, BaseException):
            self.state = "done"
            self.future.set_exception(result)
            return
        self.parts[start] = result
        self.scored += stop - start
        if self.scored >= self.job.size:
            self.state = "done"
            try:
                merged = merge_results([self.parts[k] for k in sorted(self.parts)])
            except Exception as err:  # a bug: answer it as a failed request, keep serving
                self.future.set_exception(err)
                return
            self.future.set_result(merged)

    def span_tokens(self, start: int, stop: int) -> int:
        """Tokens of inputs ``start:stop`` (0 without a token budget)."""
        return 0 if self.tokens is None else self.prefix[stop] - self.prefix[start]


@dataclass
class _Piece:
    """Inputs ``start:stop`` of a request."""

    request: _Request
    start: int
    stop: int


class MicroBatcher:
    """The worker thread and its queue.

    Args:
        engine: what computes a batch.
        max_items: most inputs (pairs or texts) per micro-batch.
        max_wait_s: how long to wait for more jobs after the first one of a batch (0: take only what is queued).
        max_tokens: most tokens per micro-batch (None: no token budget); needs a model whose tokenizer the engine
            can count with.
        max_requests: most requests (or pieces of one) per micro-batch (None: no bound); 1 with a large
            ``max_items`` scores one request at a time.
        on_batch: called with each batch's :class:`BatchStats` (the metrics).
    """

    def __init__(
        self,
        engine: ScoringEngine,
        *,
        max_items: int,
        max_wait_s: float,
        max_tokens: int | None = None,
        max_requests: int | None = None,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> None:
        self.engine = engine
        self.max_items = max_items
        self.max_tokens = max_tokens
        self.max_requests = max_requests
        self.max_wait_s = max_wait_s
        self.on_batch = on_batch
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="finesim-batcher", daemon=True)
        self._stopping = False
        self._lock = threading.Lock()

    def start(self) -> MicroBatcher:
        """Start the worker thread; returns self."""
        self._thread.start()
        return self

    def submit(self, job: Job) -> RequestFuture:
        """Queue ``job``; the future gets its result (or exception) once all of it has been scored. Cancelling the
        future abandons the job: pieces not yet scored are dropped, even once its first piece has started."""
        future = RequestFuture()
        with self._lock:
            if self._stopping:
                raise ShuttingDown("the server is shutting down")
            self._queue.put(_Piece(_Request(job, future), 0, job.size))
        return future

    def queued(self) -> int:
        """Jobs waiting for the worker (not counting the batch it is computing)."""
        return self._queue.qsize()

    def stop(self, timeout: float | None = None) -> None:
        """Finish the queued jobs, then end the worker thread (waits up to ``timeout`` seconds)."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            self._queue.put(_STOP)
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        held: _Piece | None = None  # the rest of a job split at the end of the last batch
        while True:
            nxt = held if held is not None else self._queue.get()
            held = None
            if nxt is _STOP:
                return
            batch: list[_Piece] = []
            items = tokens = 0
            stop = False
            deadline = time.monotonic() + self.max_wait_s
            while True:
                if self._costed(nxt):  # else its token count failed: the request got that error, nothing to batch
                    take, rest = self._fit(nxt, items, tokens, first=not batch)
                    if take is not None:
                        batch.append(take)
                        items += take.stop - take.start
                        tokens += take.request.span_tokens(take.start, take.stop)
                    if rest is not None:
                        held = rest
                        break
                if items >= self.max_items or (self.max_tokens is not None and tokens >= self.max_tokens):
                    break
                if self.max_requests is not None and len(batch) >= self.max_requests:
                    break
                remaining = deadline - time.monotonic()
                try:
                    nxt = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
            if batch:
                self._process(batch)
            if stop:
                return

    def _costed(self, piece: _Piece) -> bool:
        """Count the request's tokens once (with a token budget); False when that failed (the request is failed)."""
        request = piece.request
        if self.max_tokens is None or request.tokens is not None:
            return True
        try:
            request.tokens = [int(t) for t in self.engine.item_tokens(request.job)]
        except Exception as err:
            logger.exception("counting a request's tokens failed")
            if request.begin():
                request.deliver(0, request.job.size, err)
            return False
        request.prefix = list(itertools.accumulate(request.tokens, initial=0))
        return True

    def _fit(self, piece: _Piece, items: int, tokens: int, *, first: bool) -> tuple[_Piece | None, _Piece | None]:
        """What of ``piece`` goes into a batch holding ``items`` inputs and ``tokens`` tokens, and what is left."""
        request, start, stop = piece.request, piece.start, piece.stop
        if request.finished():  # failed, or its client has gone: drop the rest
            return None, None
        if stop == start:  # an empty job (nothing to split): it rides along
            return piece, None
        room = max(0, min(stop - start, self.max_items - items))
        if self.max_tokens is not None:  # the most inputs from ``start`` whose tokens fit in what is left
            limit = request.prefix[start] + self.max_tokens - tokens
            room = max(0, bisect.bisect_right(request.prefix, limit, start, start + room + 1) - 1 - start)
        if room == 0 and first:
            room = 1  # one input over the token budget on its own: a batch of its own
        if room == 0:
            return None, piece
        cut = start + room
        return _Piece(request, start, cut), (_Piece(request, cut, stop) if cut < stop else None)

    def _process(self, batch: list[_Piece]) -> None:
        live = [p for p in batch if p.request.begin()]  # skip jobs whose client has gone or that failed already
        scoring = [p for p in live if not isinstance(p.request.job, SearchJob)]
        if scoring:
            self._run(scoring)
        for piece in live:
            # each search alone, after the scoring jobs; its client may have gone while the ones before it ran
            if isinstance(piece.request.job, SearchJob) and piece.request.begin():
                self._run([piece])

    def _run(self, live: list[_Piece]) -> None:
        """Compute ``live`` pieces in one :meth:`ScoringEngine.run`, record its stats, deliver each piece's result."""
        tokens = None if self.max_tokens is None else sum(p.request.span_tokens(p.start, p.stop) for p in live)
        split = sum(p.stop - p.start < p.request.job.size for p in live)
        try:
            results, stats = self.engine.run([piece_of(p.request.job, p.start, p.stop) for p in live])
        except BaseException as err:  # engine.run catches model errors; this is a bug: fail the batch, keep serving
            logger.exception("micro-batch failed")
            for p in live:
                p.request.deliver(p.start, p.stop, err)
            return
        if self.on_batch is not None:  # before any answer goes out: a client that saw its reply sees the metrics
            try:
                self.on_batch(replace(stats, tokens=tokens, split=split))
            except Exception:
                logger.exception("recording a micro-batch failed")
        for p, result in zip(live, results):
            p.request.deliver(p.start, p.stop, result)

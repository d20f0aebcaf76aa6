"""Dynamic micro-batching: one worker thread owns the model; requests queue jobs and wait on futures.

The worker takes the first queued job, then keeps taking jobs until the batch holds ``max_items`` inputs or
``max_wait_s`` has passed since the first one (a job that would overflow the batch waits for the next one; a job
larger than ``max_items`` forms a batch alone). The whole batch goes to
:meth:`finesim.serving.engine.ScoringEngine.run`, which computes each distinct input once, and every job's
future is resolved with its own result. ``max_items`` 1 serves one request at a time.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from finesim.serving.engine import Job, ScoringEngine
from finesim.serving.metrics import BatchStats

logger = logging.getLogger("finesim.serving")

_STOP = object()


@dataclass
class _Pending:
    job: Job
    future: Future


class ShuttingDown(RuntimeError):
    """A job was submitted after the worker was told to stop."""


class MicroBatcher:
    """The worker thread and its queue.

    Args:
        engine: what computes a batch.
        max_items: most inputs (pairs or texts) per micro-batch.
        max_wait_s: how long to wait for more jobs after the first one of a batch (0: take only what is queued).
        on_batch: called with each batch's :class:`BatchStats` (the metrics).
    """

    def __init__(
        self,
        engine: ScoringEngine,
        *,
        max_items: int,
        max_wait_s: float,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> None:
        if max_items < 1 or max_wait_s < 0:
            raise ValueError("max_items must be >= 1 and max_wait_s >= 0")
        self.engine = engine
        self.max_items = max_items
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

    def submit(self, job: Job) -> Future:
        """Queue ``job``; the future gets its result (or exception) once its batch has run."""
        future: Future = Future()
        with self._lock:
            if self._stopping:
                raise ShuttingDown("the server is shutting down")
            self._queue.put(_Pending(job, future))
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
        held: Any = None
        while True:
            first = held if held is not None else self._queue.get()
            held = None
            if first is _STOP:
                return
            batch, items, stop = [first], first.job.size, False
            deadline = time.monotonic() + self.max_wait_s
            while items < self.max_items:
                remaining = deadline - time.monotonic()
                try:
                    nxt = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                if items + nxt.job.size > self.max_items:
                    held = nxt
                    break
                batch.append(nxt)
                items += nxt.job.size
            self._process(batch)
            if stop:
                return

    def _process(self, batch: list[_Pending]) -> None:
        live = [p for p in batch if p.future.set_running_or_notify_cancel()]  # skip jobs whose client has gone
        if not live:
            return
        try:
            results, stats = self.engine.run([p.job for p in live])
        except BaseException as err:  # engine.run catches model errors; this is a bug: fail the batch, keep serving
            logger.exception("micro-batch failed")
            for p in live:
                p.future.set_exception(err)
            return
        if self.on_batch is not None:  # before any answer goes out: a client that saw its reply sees the metrics
            try:
                self.on_batch(stats)
            except Exception:
                logger.exception("recording a micro-batch failed")
        for p, result in zip(live, results):
            if isinstance(result, BaseException):
                p.future.set_exception(result)
            else:
                p.future.set_result(result)

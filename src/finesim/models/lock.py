"""A lock for a model shared by threads, granted in the order it was asked for.

A server's scoring worker, its search requests and a map fitted in the background
(:class:`~finesim.index.ConditionalIndex`) all call the same model, whose tokenizer refuses concurrent use: each call
holds the :class:`ModelLock`.
"""

from __future__ import annotations

import threading
from types import TracebackType


class ModelLock:
    """A lock granted in the order it was asked for (first come, first served), for a model shared by threads.

    A plain :class:`threading.Lock` lets the thread that releases it take it again at once, so a loop of model calls
    (a map fit) could hold off a waiting scorer for its whole length; here the waiter goes next. Not re-entrant; a
    wait cut short by an exception gives its turn up, and only the holder may release it.
    """

    def __init__(self) -> None:
        self._state = threading.Condition(threading.Lock())
        self._next = 0  # the next ticket handed out
        self._serving = 0  # the ticket that holds the lock
        self._abandoned: set[int] = set()  # tickets whose waits were cut short: skipped
        self._owner: int | None = None

    def acquire(self) -> None:
        with self._state:
            ticket = self._next
            self._next += 1
            try:
                while ticket != self._serving:
                    self._state.wait()
            except BaseException:
                self._abandoned.add(ticket)
                self._skip_abandoned()
                raise
            self._owner = threading.get_ident()

    def release(self) -> None:
        with self._state:
            if self._owner != threading.get_ident():
                raise RuntimeError("ModelLock.release() by a thread that does not hold it")
            self._owner = None
            self._serving += 1
            self._skip_abandoned()
            self._state.notify_all()

    def _skip_abandoned(self) -> None:
        while self._serving in self._abandoned:
            self._abandoned.discard(self._serving)
            self._serving += 1
        self._state.notify_all()

    def __enter__(self) -> ModelLock:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()

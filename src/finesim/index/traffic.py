"""The searches running in an index, so that work done in the background can wait for a gap between them.

A map fitted in the background (:class:`~finesim.index.ConditionalIndex` with ``map_wait`` False) embeds its sample a
batch at a time and then scans the first-stage vectors a chunk at a time. Each of those steps takes the model lock or
both cores from a search that is running. :class:`SearchTraffic` lets the fit wait before each step until no search
runs, for at most a bounded time, so that a steady stream of searches slows the fit down without stopping it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class SearchTraffic:
    """Counts the searches running now, over all threads, and lets other work wait until none does."""

    def __init__(self) -> None:
        self._running = 0
        self._state = threading.Condition(threading.Lock())
        self._local = threading.local()  # this thread's searches running (nested ones counted once each)

    @property
    def running(self) -> int:
        """How many searches are running now."""
        with self._state:
            return self._running

    @contextmanager
    def search(self) -> Iterator[None]:
        """Count one search for the length of the ``with`` block."""
        depth, added = getattr(self._local, "depth", 0), 0
        try:
            self._add(1)
            added = 1
            self._local.depth = depth + 1
            yield
        finally:
            self._local.depth = depth
            self._add(-added)

    @contextmanager
    def aside(self) -> Iterator[None]:
        """Within :meth:`search`: the calling thread's searches not counted for the length of the block (a search
        waiting for work that itself waits for a gap, such as the fit of the map it needs); elsewhere nothing."""
        depth, removed = getattr(self._local, "depth", 0), 0
        try:
            self._add(-depth)
            removed = depth
            yield
        finally:
            self._add(removed)

    def _add(self, change: int) -> None:
        if not change:
            return
        with self._state:
            self._running += change
            if self._running <= 0:
                self._state.notify_all()

    def wait_for_gap(self, limit: float) -> float:
        """Wait until no search runs, at most ``limit`` seconds (0: do not wait); the seconds waited. Returning
        after ``limit`` with searches still running is what bounds the delay of the work that waits."""
        if limit <= 0:
            return 0.0
        start = time.monotonic()
        with self._state:
            self._state.wait_for(lambda: self._running <= 0, timeout=limit)  # <= 0: a count gone wrong blocks nothing
        return time.monotonic() - start

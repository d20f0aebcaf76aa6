"""A small least-recently-used cache of the model's recent outputs.

The batching worker is its only user (one thread), so it has no lock. Keys are ``(text, condition)`` for
embeddings and ``(sentence1, sentence2, condition)`` for a cross-encoder's pair scores.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class LRUCache:
    """At most ``capacity`` entries; the least recently used one is dropped first. ``capacity`` 0 stores nothing.

    Attributes:
        hits, misses: lookups answered from the cache and lookups that were not.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def get(self, key: Hashable) -> Any | None:
        """The value of ``key`` (now the most recently used), or None; counts a hit or a miss."""
        if key in self._data:
            self._data.move_to_end(key)
            self.hits += 1
            return self._data[key]
        self.misses += 1
        return None

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value`` under ``key`` as the most recently used entry."""
        if self.capacity == 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

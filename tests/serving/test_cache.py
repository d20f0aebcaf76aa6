"""The LRU cache: capacity, recency, hit and miss counts, off at 0."""

from __future__ import annotations

import pytest

from finesim.serving.cache import LRUCache


def test_least_recently_used_entry_goes_first() -> None:
    cache = LRUCache(2)
    cache.put(("a", None), 1)
    cache.put(("b", "c"), 2)
    assert cache.get(("a", None)) == 1  # now "a" is the most recent
    cache.put(("d", "c"), 3)
    assert ("b", "c") not in cache and ("a", None) in cache and len(cache) == 2
    assert cache.get(("b", "c")) is None
    assert (cache.hits, cache.misses) == (1, 1)


def test_capacity_zero_stores_nothing() -> None:
    cache = LRUCache(0)
    cache.put("k", 1)
    assert len(cache) == 0 and cache.get("k") is None
    with pytest.raises(ValueError):
        LRUCache(-1)

"""SearchTraffic: searches counted over threads; a wait for a gap ends when the last search ends, or at its limit."""

from __future__ import annotations

import threading
import time

from finesim.index.traffic import SearchTraffic


def test_searches_are_counted_while_they_run_and_after_an_error() -> None:
    traffic = SearchTraffic()
    with traffic.search():
        with traffic.search():
            assert traffic.running == 2
        assert traffic.running == 1
    try:
        with traffic.search():
            raise KeyError("a search that failed")
    except KeyError:
        pass
    assert traffic.running == 0


def test_a_wait_for_a_gap_ends_when_the_last_search_ends() -> None:
    traffic = SearchTraffic()
    inside, leave, waited = threading.Event(), threading.Event(), []

    def search() -> None:
        with traffic.search():
            inside.set()
            leave.wait(30)

    thread = threading.Thread(target=search, daemon=True)
    thread.start()
    assert inside.wait(30)
    waiter = threading.Thread(target=lambda: waited.append(traffic.wait_for_gap(60)), daemon=True)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and waited == []  # a search runs: the wait goes on
    leave.set()
    waiter.join(30)
    assert len(waited) == 1 and 0.25 <= waited[0] < 30


def test_a_search_set_aside_is_not_counted_and_aside_outside_a_search_changes_nothing() -> None:
    traffic = SearchTraffic()
    with traffic.aside():
        assert traffic.running == 0
    with traffic.search():
        with traffic.search():  # nested: both set aside, both back after
            with traffic.aside():
                assert traffic.running == 0 and traffic.wait_for_gap(5) < 1
            assert traffic.running == 2
    assert traffic.running == 0


def test_a_wait_for_a_gap_stops_at_its_limit_and_a_limit_of_0_does_not_wait() -> None:
    traffic = SearchTraffic()
    assert traffic.wait_for_gap(5) < 1  # no search: at once
    with traffic.search():
        start = time.monotonic()
        assert traffic.wait_for_gap(0) == 0.0
        assert time.monotonic() - start < 0.1
        waited = traffic.wait_for_gap(0.2)
    assert 0.2 <= waited < 5 and traffic.running == 0

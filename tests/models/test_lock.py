"""ModelLock: granted in the order asked, a waiter before a releasing loop, a wait cut short gives its turn up."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def _waiting(lock, holders: int) -> bool:
    return lock._next == holders  # tickets handed out: the holder's and each waiter's


def test_the_model_lock_is_granted_in_the_order_asked() -> None:
    """Three threads ask while the lock is held: they get it in the order they asked, not the order the scheduler
    happens to wake them."""
    import threading

    from finesim.models.lock import ModelLock

    lock, order = ModelLock(), []
    lock.acquire()
    threads = []
    for count, name in enumerate(("b", "c", "d"), start=1):
        thread = threading.Thread(target=lambda n=name: (lock.acquire(), order.append(n), lock.release()), daemon=True)
        thread.start()
        threads.append(thread)
        wait_until(lambda k=count: _waiting(lock, 1 + k), timeout=10, what=f"{name} waiting")
    assert order == []
    lock.release()
    for thread in threads:
        thread.join(10)
    assert order == ["b", "c", "d"]


def test_a_thread_that_releases_the_model_lock_cannot_take_it_back_before_a_waiter() -> None:
    """A loop of model calls (a map fit) releases and asks again at once: the waiting scorer goes first."""
    import threading

    from finesim.models.lock import ModelLock

    lock, order = ModelLock(), []
    lock.acquire()
    waiter = threading.Thread(target=lambda: (lock.acquire(), order.append("waiter"), lock.release()), daemon=True)
    waiter.start()
    wait_until(lambda: _waiting(lock, 2), timeout=10, what="the waiter")
    lock.release()
    with lock:  # asked after the waiter: granted after it
        order.append("loop")
    waiter.join(10)
    assert order == ["waiter", "loop"]


def test_a_model_lock_wait_cut_short_gives_its_turn_up_and_only_the_holder_releases() -> None:
    import threading

    from finesim.models.lock import ModelLock

    lock, got, errors = ModelLock(), [], []
    lock.acquire()
    wait = lock._state.wait

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    lock._state.wait = interrupted  # the next waiter's wait is cut short (as Ctrl-C would)
    try:
        lock.acquire()
    except KeyboardInterrupt:
        errors.append("cut short")
    lock._state.wait = wait
    later = threading.Thread(target=lambda: (lock.acquire(), got.append("later"), lock.release()), daemon=True)
    later.start()
    wait_until(lambda: _waiting(lock, 3), timeout=10, what="the later waiter")
    stranger = threading.Thread(target=lambda: errors.append(_release_error(lock)), daemon=True)
    stranger.start()
    stranger.join(10)
    lock.release()  # the cut-short ticket is skipped: the later waiter goes next
    later.join(10)
    assert errors == ["cut short", "ModelLock.release() by a thread that does not hold it"] and got == ["later"]


def _release_error(lock) -> str:
    try:
        lock.release()
    except RuntimeError as err:
        return str(err)
    return "released"

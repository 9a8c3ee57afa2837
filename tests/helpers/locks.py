"""A lock held by another thread, for the tests of what a timed or non-blocking acquire
does meanwhile (the group locks', StepLock's)."""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator


@contextlib.contextmanager
def held_by_another_thread(lock, wait_s: float = 10) -> Iterator[None]:
    """`lock` taken (with `with`) by a thread of its own for the length of the block;
    released, and the thread joined, when the block ends, even on a failure."""
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with lock:
            held.set()
            release.wait(wait_s)

    t = threading.Thread(target=holder, daemon=True)
    t.start()
    try:
        assert held.wait(wait_s), "the holder thread never took the lock"
        yield
    finally:
        release.set()
        t.join(wait_s)

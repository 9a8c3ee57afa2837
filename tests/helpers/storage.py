"""Small blocking helpers over the callback store interface (tests and benchmarks)."""
from __future__ import annotations

import threading
from typing import Optional

from fastcoord.core.errors import Errors

__all__ = ["Waiter", "store_offsets_sync", "store_group_sync"]


class Waiter:
    """A `done` callback that can be waited for: `error = waiter.wait(timeout)`. The default
    bound is generous because one fsync can stall for seconds on a busy disk."""

    __slots__ = ("event", "error")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.error: Optional[Errors] = None

    def __call__(self, error: Errors) -> None:
        self.error = error
        self.event.set()

    def wait(self, timeout: float = 60.0) -> Errors:
        if not self.event.wait(timeout):
            raise TimeoutError(f"the store did not answer within {timeout} s")
        return self.error


def store_offsets_sync(store, group_id: str, offsets: dict, timeout: float = 60.0) -> Errors:
    waiter = Waiter()
    store.store_offsets(group_id, offsets, waiter)
    return waiter.wait(timeout)


def store_group_sync(store, group_id: str, record: Optional[dict], timeout: float = 60.0) -> Errors:
    waiter = Waiter()
    store.store_group(group_id, record, waiter)
    return waiter.wait(timeout)

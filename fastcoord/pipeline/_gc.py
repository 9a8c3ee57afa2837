"""Fewer cyclic-GC passes while a shard is replayed or simulated.

A shard's run allocates millions of short-lived objects while it holds a large state
that hardly changes (members, groups, the trace's join rows). At CPython's default
thresholds the cyclic collector runs every 700 net allocations and keeps rescanning
that state, a share of the run that grows with the state. The runs make next to no
cyclic garbage (`gc.collect()` after a run with collection off found none on the
synthetic traces), so they collect about 70 times less often, not never: memory stays
bounded if some path does make cycles.

The thresholds are the process's: the first run to enter sets them, the last to leave
puts back what was there before, so runs in several threads nest correctly.
"""
from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator, Optional, Tuple

THRESHOLDS = (50_000, 20, 100)      # CPython's defaults: (700, 10, 10)

_lock = threading.Lock()
_inside = 0
_saved: Optional[Tuple[int, ...]] = None


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    global _inside, _saved
    with _lock:
        if _inside == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*THRESHOLDS)
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0:
                gc.set_threshold(*_saved)
                _saved = None

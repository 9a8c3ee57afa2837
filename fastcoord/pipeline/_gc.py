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

A finished shard leaves its coordinator behind as cyclic garbage (the group logic, its
member table, timer and purgatory, and each group and its record hold one another,
through bound methods and back references), which only the collector frees. Left to the
default thresholds, the first collection after a run scans that graph while the caller
still holds the replay, promotes it, and scans it again once it is dead (and, promoted
again, in a full collection). `collected_after` spans a shard's whole life instead (its
replay made, run and dropped inside), then collects the young generations once, where
the graph is dead: each of its objects is scanned once, and none outlives its shard.
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


def _enter() -> None:
    global _inside, _saved
    with _lock:
        if _inside == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*THRESHOLDS)
        _inside += 1


def _leave() -> bool:
    """Whether this was the last scope to leave (it put the thresholds back)."""
    global _inside, _saved
    with _lock:
        _inside -= 1
        if _inside:
            return False
        gc.set_threshold(*_saved)
        _saved = None
        return True


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    _enter()
    try:
        yield
    finally:
        _leave()


@contextlib.contextmanager
def collected_after() -> Iterator[None]:
    """fewer_collections over a shard's whole life, then one collection of generations 0
    and 1 (where a run's objects are: a shard's stay far below the thresholds' first two
    steps) by the scope that puts the thresholds back; none with the collector off (the
    caller's choice) or while another thread's scope is still inside (the defaults then
    take the garbage, as before)."""
    _enter()
    try:
        yield
    finally:
        if _leave() and gc.isenabled():
            gc.collect(1)

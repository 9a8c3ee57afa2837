"""fastcoord against the speed of light (benchmarks/floors.py) at 1k, 10k, 100k, 1M members.

Per size, three workloads, each with the C floor first, then native, then pure:
  heartbeat_batch    coord.heartbeat_batch over every member, random order
                     floor: random store into an array of 40-byte member structs
  heartbeat          coord.heartbeat(group, member, gen) for every member, random order
                     floor: hash lookup of a 64-bit key, then the store (a C loop: no
                     Python call per operation, which is what the fraction shows)
  timer_reschedule   handle.cancel() + timer.schedule_at(new deadline) for every pending
                     timer, random order; floor: unlink + link in doubly linked buckets
Each fastcoord row reports `pct_of_floor` = 100 x its ops/s / the floor's ops/s at the
same size (the floor row of the same run). Quick mode (--benchmark-disable): tiny sizes.
"""
from __future__ import annotations

import gc
import statistics
import time

import numpy as np
import pytest

import fastcoord
from fastcoord import Errors, _twins
from fastcoord.core.clock import ManualClock

import floors
from builders import build_stable

SIZES = [1_000, 10_000, 100_000, 1_000_000]
QUICK_SIZES = [100, 1_000]
PEERS = ["floor"] + (["native"] if fastcoord.NATIVE_AVAILABLE else []) + ["pure"]
PATHS = ["heartbeat_batch", "heartbeat", "timer_reschedule"]
PURE_MAX = 100_000            # the pure twin takes minutes to build 1M members
ROUNDS = {"floor": 20, "native": 5, "pure": 3}

_floor_median: dict = {}
_state: dict = {}


def quick(request) -> bool:
    return bool(request.config.getoption("benchmark_disable"))


def coordinator(impl, members):
    key = ("coord", impl, members)
    if key not in _state:
        _state.clear()
        gc.collect()
        coord, calls, handles, gens = build_stable(impl, max(1, members // 10), 10)
        order = np.random.default_rng(5).permutation(len(calls))
        _state[key] = (coord, [calls[i] for i in order], np.ascontiguousarray(handles[order]),
                       np.ascontiguousarray(gens[order]))
    return _state[key]


def _noop():
    pass


class TimerWorkload:
    def __init__(self, impl, n):
        rng = np.random.default_rng(9)
        self.timer = _twins.module(impl, "core.timer").Timer(ManualClock(0))
        at = self.timer.schedule_at
        self.handles = [at(int(d), _noop) for d in rng.integers(1, 30_000, n)]
        self.order = [int(i) for i in rng.permutation(n)]
        self.deadlines = [int(d) for d in rng.integers(1, 30_000, n)]

    def run(self):
        at = self.timer.schedule_at
        handles = self.handles
        for i, d in zip(self.order, self.deadlines):
            handles[i].cancel()
            handles[i] = at(d, _noop)


def make_runner(path, peer, size):
    """A zero-argument function doing `size` operations of `path` on `peer`."""
    if peer == "floor":
        return floors.FLOORS[path](size).run
    if path == "timer_reschedule":
        return TimerWorkload(peer, size).run
    coord, calls, handles, gens = coordinator(peer, size)
    if path == "heartbeat_batch":
        return lambda: coord.heartbeat_batch(handles, gens)
    hb = coord.heartbeat

    def run():
        for g, m, gen in calls:
            hb(g, m, gen)
    return run


def _median_seconds(fn, rounds=7):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# size-major order: each coordinator is built once per size and twin, floors come first
CASES = [(i, path, peer) for i in range(len(SIZES)) for peer in PEERS for path in PATHS]


@pytest.mark.parametrize("size_i,path,peer", CASES,
                         ids=[f"{SIZES[i] // 1000}k-{path}-{peer}" for i, path, peer in CASES])
def test_floor(benchmark, request, peer, path, size_i):
    size = (QUICK_SIZES[min(size_i, len(QUICK_SIZES) - 1)] if quick(request) else SIZES[size_i])
    if quick(request) and size_i >= len(QUICK_SIZES):
        pytest.skip("quick mode runs the two smallest sizes")
    if peer == "pure" and size > PURE_MAX:
        pytest.skip(f"the pure twin is measured up to {PURE_MAX:,} members")
    run = make_runner(path, peer, size)
    benchmark.group = f"floor-{path}-{size // 1000 if size >= 1000 else size / 1000:g}k"
    benchmark.extra_info.update(peer=peer if peer == "floor" else peer, ops=size, members=size)
    gc.disable()
    try:
        benchmark.pedantic(run, rounds=1 if quick(request) else ROUNDS[peer], iterations=1,
                           warmup_rounds=0 if quick(request) else 1)
    finally:
        gc.enable()
    stats = getattr(benchmark, "stats", None)
    median = stats.stats.median if stats is not None else None
    if peer == "floor":
        _floor_median[(path, size)] = median or _median_seconds(run, 3)
        return
    floor = _floor_median.get((path, size))
    if floor is None:
        floor = _median_seconds(floors.FLOORS[path](size).run)
        _floor_median[(path, size)] = floor
    mine = median or _median_seconds(run, 1)
    # percent of the floor's ops/s (summarize.py prints one decimal)
    benchmark.extra_info["pct_of_floor"] = round(100 * floor / mine, 3)
    if path == "heartbeat":
        coord, calls, _, _ = coordinator(peer, size)
        assert coord.heartbeat(*calls[0]) == Errors.NONE

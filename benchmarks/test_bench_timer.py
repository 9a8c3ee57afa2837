"""Timer benchmarks: native vs pure twin vs heapq (lazy deletion) vs asyncio.

Workload (fixed seed): N timers with random deadlines in [0, 30 s).
  schedule    schedule all N                              ops = N
  cancel      cancel every other one                      ops = N/2
  reschedule  for half of the rest: cancel + schedule     ops = N/4
              5 s later (what a heartbeat does)
  expire      advance time past the end, firing the rest  ops = N/2
Each phase is its own benchmark; its setup builds the state before the phase.

asyncio is driven without sleeping: its loop's ``time`` is replaced by a
function returning the end of the run, then ``loop._run_once()`` is called until
no handle is left (one call moves every due handle to the ready queue and runs
them), i.e. exactly the loop's own expiry path without the selector wait.

With ``--benchmark-disable`` (``make test``) N is small so this runs as a test.
"""
import asyncio
import gc
import heapq
import random
import tracemalloc

import pytest

from fastcoord import _twins
from fastcoord.core.clock import ManualClock

PEERS = (["native"] if _twins.NATIVE_AVAILABLE else []) + ["pure", "heapq", "asyncio"]
ROUNDS = {"native": 5, "pure": 2, "heapq": 3, "asyncio": 2}
END_MS = 40_000


def noop():
    pass


@pytest.fixture(scope="module")
def n_timers(request):
    return 2_000 if request.config.getoption("benchmark_disable") else 1_000_000


@pytest.fixture(scope="module")
def workload(n_timers):
    rng = random.Random(20240601)
    deadlines = [rng.randrange(30_000) for _ in range(n_timers)]
    cancel_idx = list(range(0, n_timers, 2))
    resched_idx = list(range(1, n_timers, 4))
    return deadlines, cancel_idx, resched_idx


# ------------------------------------------------------------------ peers
class WheelPeer:
    def __init__(self, impl):
        self.timer = _twins.module(impl, "core.timer").Timer(ManualClock(0))

    def schedule(self, deadlines):
        at = self.timer.schedule_at
        return [at(d, noop) for d in deadlines]

    def cancel(self, handles, idx):
        for i in idx:
            handles[i].cancel()

    def reschedule(self, handles, idx, deadlines):
        at = self.timer.schedule_at
        for i in idx:
            handles[i].cancel()
            handles[i] = at(deadlines[i] + 5_000, noop)

    def expire(self):
        return self.timer.advance_to(END_MS)


class HeapqPeer:
    """A heap of [deadline, seq, fn, cancelled] lists; cancel sets the flag."""

    def __init__(self):
        self.heap = []
        self.seq = 0

    def schedule(self, deadlines):
        heap = self.heap
        push = heapq.heappush
        out = []
        seq = self.seq
        for d in deadlines:
            e = [d, seq, noop, False]
            seq += 1
            push(heap, e)
            out.append(e)
        self.seq = seq
        return out

    def cancel(self, handles, idx):
        for i in idx:
            handles[i][3] = True

    def reschedule(self, handles, idx, deadlines):
        heap = self.heap
        push = heapq.heappush
        seq = self.seq
        for i in idx:
            handles[i][3] = True
            e = [deadlines[i] + 5_000, seq, noop, False]
            seq += 1
            push(heap, e)
            handles[i] = e
        self.seq = seq

    def expire(self):
        heap = self.heap
        pop = heapq.heappop
        n = 0
        while heap and heap[0][0] <= END_MS:
            e = pop(heap)
            if not e[3]:
                e[2]()
                n += 1
        return n


class AsyncioPeer:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.base = self.loop.time()

    def schedule(self, deadlines):
        call_at = self.loop.call_at
        base = self.base
        return [call_at(base + d / 1000.0, noop) for d in deadlines]

    def cancel(self, handles, idx):
        for i in idx:
            handles[i].cancel()

    def reschedule(self, handles, idx, deadlines):
        call_at = self.loop.call_at
        base = self.base
        for i in idx:
            handles[i].cancel()
            handles[i] = call_at(base + (deadlines[i] + 5_000) / 1000.0, noop)

    def expire(self):
        loop = self.loop
        end = self.base + END_MS / 1000.0 + 1.0
        loop.time = lambda: end
        while loop._scheduled or loop._ready:
            loop._run_once()
        return None

    def close(self):
        self.loop.close()


def make_peer(peer):
    if peer in ("native", "pure"):
        return WheelPeer(peer)
    if peer == "heapq":
        return HeapqPeer()
    return AsyncioPeer()


def build(peer, workload, upto):
    """The state just before phase `upto`."""
    deadlines, cancel_idx, resched_idx = workload
    p = make_peer(peer)
    handles = p.schedule(deadlines) if upto != "schedule" else None
    if upto in ("reschedule", "expire"):
        p.cancel(handles, cancel_idx)
    if upto == "expire":
        p.reschedule(handles, resched_idx, deadlines)
    return p, handles


def run_phase(benchmark, peer, phase, workload, ops, fn):
    benchmark.group = f"timer-{phase}"
    benchmark.extra_info["peer"] = peer
    benchmark.extra_info["ops"] = ops
    state = {}

    def setup():
        old = state.pop("peer", None)
        if isinstance(old, AsyncioPeer):
            old.close()
        state.clear()
        gc.collect()
        p, handles = build(peer, workload, phase)
        state["peer"] = p
        return (p, handles), {}

    gc.disable()
    try:
        result = benchmark.pedantic(fn, setup=setup, rounds=ROUNDS[peer], iterations=1)
    finally:
        gc.enable()
        p = state.pop("peer", None)
        if isinstance(p, AsyncioPeer):
            p.close()
    return result


@pytest.mark.parametrize("peer", PEERS)
def test_timer_schedule(benchmark, peer, workload):
    deadlines = workload[0]
    out = run_phase(benchmark, peer, "schedule", workload, len(deadlines),
                    lambda p, h: p.schedule(deadlines))
    assert out is None or len(out) == len(deadlines)


@pytest.mark.parametrize("peer", PEERS)
def test_timer_cancel(benchmark, peer, workload):
    cancel_idx = workload[1]
    run_phase(benchmark, peer, "cancel", workload, len(cancel_idx),
              lambda p, h: p.cancel(h, cancel_idx))


@pytest.mark.parametrize("peer", PEERS)
def test_timer_reschedule(benchmark, peer, workload):
    deadlines, _, resched_idx = workload
    run_phase(benchmark, peer, "reschedule", workload, len(resched_idx),
              lambda p, h: p.reschedule(h, resched_idx, deadlines))


@pytest.mark.parametrize("peer", PEERS)
def test_timer_expire(benchmark, peer, workload):
    deadlines, cancel_idx, resched_idx = workload
    n_live = len(deadlines) - len(cancel_idx)
    fired = run_phase(benchmark, peer, "expire", workload, n_live, lambda p, h: p.expire())
    assert fired is None or fired == n_live


# ------------------------------------------------------------ tag entries
class _Sink:
    def on_timer(self, tag, deadline_ms):
        pass


def _tag_phase(benchmark, impl, api, phase, workload, fn):
    """One round = the whole phase over all N tag entries (ops = N): `batch` is one
    schedule_tags / cancel_ids call, `loop` one schedule_tag_at / cancel_id per entry,
    over lists of ints made by the setup (numpy's tolist() of 1M ints costs about as
    much as the calls: it is not the timer's). The setup of `cancel` schedules the N
    entries (by a batch); `cancel-random` cancels them in a random order (fixed seed):
    each call's entry, and its neighbours in the bucket, are then apart in memory."""
    import numpy as np

    deadlines = np.array(workload[0], dtype=np.int64)
    tags = np.arange(len(deadlines), dtype=np.int64)
    order = np.random.default_rng(20240601).permutation(len(deadlines))
    benchmark.group = f"timer-tags-{phase}"
    benchmark.extra_info["peer"] = impl
    benchmark.extra_info["api"] = api
    benchmark.extra_info["ops"] = len(deadlines)
    Timer = _twins.module(impl, "core.timer").Timer

    def setup():
        gc.collect()
        t = Timer(ManualClock(0))
        sink = _Sink()
        ids = t.schedule_tags(deadlines, tags, sink) if phase != "schedule" else None
        if phase == "cancel-random":
            ids = ids[order]
        if api == "loop":
            return (t, sink, deadlines.tolist(), tags.tolist(),
                    None if ids is None else ids.tolist()), {}
        return (t, sink, deadlines, tags, ids), {}

    gc.disable()
    try:
        return benchmark.pedantic(fn, setup=setup, rounds=ROUNDS[impl], iterations=1)
    finally:
        gc.enable()


def _schedule_batch(t, sink, deadlines, tags, ids):
    return len(t.schedule_tags(deadlines, tags, sink))


def _schedule_loop(t, sink, deadlines, tags, ids):
    at = t.schedule_tag_at
    for d, tag in zip(deadlines, tags):
        at(d, sink, tag)
    return len(t)


def _cancel_batch(t, sink, deadlines, tags, ids):
    return t.cancel_ids(ids)


def _cancel_loop(t, sink, deadlines, tags, ids):
    cancel = t.cancel_id
    return sum(cancel(i) for i in ids)


TAG_PHASES = {("schedule", "batch"): _schedule_batch, ("schedule", "loop"): _schedule_loop,
              ("cancel", "batch"): _cancel_batch, ("cancel", "loop"): _cancel_loop,
              ("cancel-random", "batch"): _cancel_batch, ("cancel-random", "loop"): _cancel_loop}


@pytest.mark.parametrize("impl", [p for p in PEERS if p in ("native", "pure")])
@pytest.mark.parametrize("api", ["batch", "loop"])
@pytest.mark.parametrize("phase", ["schedule", "cancel", "cancel-random"])
def test_timer_tags(benchmark, impl, api, phase, workload):
    n = len(workload[0])
    assert _tag_phase(benchmark, impl, api, phase, workload, TAG_PHASES[phase, api]) == n


# ----------------------------------------------------------------- memory


def _bytes_per_entry(impl, n, deadlines, keep_handles):
    Timer = _twins.module(impl, "core.timer").Timer
    gc.collect()
    tracemalloc.start()
    try:
        t = Timer(ManualClock(0))
        sink = _Sink()
        before = tracemalloc.get_traced_memory()[0]
        if keep_handles:
            at = t.schedule_at
            kept = [at(d, noop) for d in deadlines]
        else:
            at = t.schedule_tag_at
            for i, d in enumerate(deadlines):
                at(d, sink, i)
            kept = None
        after = tracemalloc.get_traced_memory()[0]
        assert len(t) == n
    finally:
        tracemalloc.stop()
    if kept is not None:
        # the list that keeps the handles is the caller's, not the timer's
        after -= 8 * n
    del kept, t
    return (after - before) / n


@pytest.mark.parametrize("impl", [p for p in PEERS if p in ("native", "pure")])
@pytest.mark.parametrize("api", ["handles", "tags"])
def test_timer_memory(benchmark, impl, api, workload):
    deadlines = workload[0]
    n = len(deadlines)
    benchmark.group = "timer-memory"
    benchmark.extra_info["peer"] = impl
    benchmark.extra_info["api"] = api
    benchmark.extra_info["ops"] = n
    result = {}

    def measure():
        result["b"] = _bytes_per_entry(impl, n, deadlines, api == "handles")

    benchmark.pedantic(measure, rounds=1, iterations=1)
    benchmark.extra_info["bytes_per_entry"] = round(result["b"], 1)
    assert result["b"] > 0
    if impl == "native" and api == "tags" and n >= 100_000:
        assert result["b"] <= 64  # at small n the fixed wheel structures dominate

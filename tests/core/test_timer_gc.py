"""A Timer in a reference cycle is collected, as a pure-Python object would be.

The native Timer keeps callbacks and sinks in C arrays; its tp_traverse reports them to
the cycle collector, and TimerHandle is traversed too. Without that, a timer whose
pending callback closes over the timer (a periodic task) or keeps its own handle, or a
sink that refers back to its timer, would leak with everything it holds.
"""
from __future__ import annotations

import gc
import threading

from fastcoord import ManualClock, Timer
from fastcoord._twins import module


def _alive(impl) -> int:
    cls = module(impl, "core.timer").Timer
    return sum(1 for o in gc.get_objects() if type(o) is cls)


def _leaked(impl, make, n: int = 50) -> int:
    gc.collect()
    before = _alive(impl)
    for _ in range(n):
        make(impl)
    gc.collect()
    return _alive(impl) - before


def _closure_over_timer(impl):
    t = Timer(ManualClock(), impl=impl)
    t.schedule(1000, lambda: t.schedule(5, print))


def _callback_keeps_its_handle(impl):
    t = Timer(ManualClock(), impl=impl)
    box = {}
    box["handle"] = t.schedule(1000, lambda: box["handle"].cancel())


class _Sink:
    def __init__(self, timer):
        self.timer = timer            # sink -> timer, timer -> sink: a cycle

    def on_timer(self, tag, deadline_ms):
        pass


def _sink_refers_to_its_timer(impl):
    t = Timer(ManualClock(), impl=impl)
    t.schedule_tag_at(1000, _Sink(t), 7)


def test_timer_in_a_cycle_through_a_callback_is_collected(impl):
    assert _leaked(impl, _closure_over_timer) == 0


def test_timer_in_a_cycle_through_its_handle_is_collected(impl):
    assert _leaked(impl, _callback_keeps_its_handle) == 0


def test_timer_in_a_cycle_through_a_sink_is_collected(impl):
    assert _leaked(impl, _sink_refers_to_its_timer) == 0


def test_live_timer_and_its_callbacks_survive_collection(impl):
    """Traversal must only report references: a reachable timer keeps every pending
    callback, and they fire after any number of collections."""
    t = Timer(ManualClock(), impl=impl)
    fired = []
    handles = [t.schedule(10 + i, (lambda i=i: fired.append(i))) for i in range(200)]
    for h in handles[::2]:
        h.cancel()
    del handles
    for _ in range(3):
        gc.collect()
    assert t.advance_to(1000) == 100
    assert fired == list(range(1, 200, 2))


def test_collection_while_other_threads_schedule_and_fire(impl):
    """gc.collect() in a loop while two threads schedule, cancel and fire: no crash,
    every callback whose cancel() did not succeed fires exactly once, and none whose
    cancel() did. (The other thread may fire an entry before it is cancelled: then
    cancel() answers False and the entry counts as fired.)"""
    clock = ManualClock()
    t = Timer(clock, impl=impl)
    fired = []
    lock = threading.Lock()
    stop = threading.Event()
    expected = [0]
    cancelled = set()

    def worker(base):
        for round_ in range(200):
            hs = [t.schedule(1 + (i % 7), (lambda k=(base, round_, i): fired.append(k)))
                  for i in range(20)]
            gone = {(base, round_, i) for i in range(0, 20, 4) if hs[i].cancel()}
            with lock:
                cancelled.update(gone)
                expected[0] += 20 - len(gone)
                clock.advance(10)
                t.advance_to(clock.now_ms())

    def collector():
        while not stop.is_set():
            gc.collect(0)

    g = threading.Thread(target=collector)
    g.start()
    workers = [threading.Thread(target=worker, args=(b,)) for b in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    stop.set()
    g.join(timeout=30)
    with lock:
        clock.advance(100)
        t.advance_to(clock.now_ms())
    assert not any(w.is_alive() for w in workers)
    assert len(fired) == expected[0]
    assert 2 * 200 * 15 <= expected[0] <= 2 * 200 * 20
    assert len(set(fired)) == len(fired)
    assert not cancelled & set(fired)

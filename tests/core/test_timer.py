"""Timer (hierarchical timing wheel): behaviours of Kafka's TimerTest and
TimerTaskListTest, plus fastcoord's own rules (never early, exact order,
callbacks outside the lock, step_clock, reaper), against both twins."""
import logging
import random
import threading
import time

import numpy as np
import pytest

from fastcoord import _twins
from fastcoord.core.clock import ManualClock, SystemClock
from fastcoord import Timer
from helpers.locks import held_by_another_thread


def make(impl, start=0, **kw):
    clock = ManualClock(start)
    return clock, Timer(clock, impl=impl, **kw)


# ---------------------------------------------------------------- TimerTest
def test_already_expired_tasks_fire_at_next_advance(impl):
    clock, t = make(impl)
    fired = []
    for i in range(-5, 0):
        t.schedule(i, lambda i=i: fired.append(i))
    assert len(t) == 5
    assert fired == []
    assert t.advance_to(0) == 5
    assert sorted(fired) == list(range(-5, 0))
    assert fired == sorted(fired)  # deadline order
    assert len(t) == 0


def test_each_task_of_many_fires_exactly_once(impl):
    clock, t = make(impl)
    counts = [0] * 300
    for i in range(300):
        def fn(i=i):
            counts[i] += 1
        t.schedule(i * 7 % 997, fn)
    total = 0
    now = 0
    while now < 1000:
        now += 13
        total += t.advance_to(now)
    assert total == 300
    assert counts == [1] * 300
    assert t.advance_to(5000) == 0


def test_tasks_in_different_levels_all_fire_at_their_deadline(impl):
    clock, t = make(impl, tick_ms=1, wheel_size=3)
    fired = []
    deadlines = [0, 1, 2, 3, 5, 8, 9, 26, 27, 28, 80, 81, 300, 1000]
    for d in deadlines:
        t.schedule(d, lambda d=d: fired.append((d, now[0])))
    now = [0]
    for step in range(0, 1001):
        now[0] = step
        t.advance_to(step)
    assert [d for d, _ in fired] == deadlines
    for d, at in fired:
        assert at == d, "fired at the first advance that reached its deadline"


def test_cancelled_tasks_do_not_fire(impl):
    clock, t = make(impl)
    fired = []
    hs = [t.schedule(10 + i, lambda i=i: fired.append(i)) for i in range(20)]
    for h in hs[::2]:
        assert h.cancel() is True
    assert len(t) == 10
    assert t.advance_to(100) == 10
    assert fired == list(range(1, 20, 2))


def test_cancel_is_true_only_once_and_false_after_firing(impl):
    clock, t = make(impl)
    h = t.schedule(5, lambda: None)
    assert h.cancel() is True
    assert h.cancel() is False
    h2 = t.schedule(5, lambda: None)
    t.advance_to(5)
    assert h2.cancel() is False
    assert len(t) == 0


def test_handle_deadline(impl):
    clock, t = make(impl, start=100)
    h = t.schedule(25, lambda: None)
    assert h.deadline_ms == 125
    h2 = t.schedule_at(7, lambda: None)
    assert h2.deadline_ms == 7
    t.advance_to(200)
    assert h.deadline_ms == 125  # still readable after firing


# ------------------------------------------------------- TimerTaskListTest
def test_rescheduling_moves_entries_and_counts(impl):
    clock, t = make(impl)
    fired = []
    hs = [t.schedule(10, lambda i=i: fired.append(i)) for i in range(10)]
    assert len(t) == 10
    # "move" the first five to a later deadline: cancel + schedule
    for i, h in enumerate(hs[:5]):
        assert h.cancel()
        hs[i] = t.schedule(20, lambda i=i: fired.append(100 + i))
    assert len(t) == 10
    assert t.advance_to(10) == 5
    assert fired == [5, 6, 7, 8, 9]
    assert len(t) == 5
    assert t.advance_to(20) == 5
    assert fired[5:] == [100, 101, 102, 103, 104]
    assert len(t) == 0


def test_len_counts_scheduled_not_fired_not_cancelled(impl):
    clock, t = make(impl)
    hs = [t.schedule(i, lambda: None) for i in range(1, 101)]
    assert len(t) == 100
    for h in hs[:30]:
        h.cancel()
    assert len(t) == 70
    t.advance_to(50)
    assert len(t) == 50
    t.advance_to(100)
    assert len(t) == 0


# ------------------------------------------------------ fastcoord's rules
@pytest.mark.parametrize("tick", [1, 3, 10, 64])
def test_never_fires_before_its_deadline(impl, tick):
    clock, t = make(impl, tick_ms=tick, wheel_size=4)
    rng = random.Random(tick)
    fired = []
    now = [0]
    for _ in range(500):
        d = rng.randrange(0, 3000)
        t.schedule_at(d, lambda d=d: fired.append((d, now[0])))
    while now[0] < 3100:
        now[0] += rng.randrange(1, 7)
        t.advance_to(now[0])
    assert len(fired) == 500
    for d, at in fired:
        assert d <= at
        assert at - d < 7  # fired at the first advance that reached it
    ds = [d for d, _ in fired]
    assert ds == sorted(ds)


def test_partial_tick_entries_wait_for_exact_deadline(impl):
    clock, t = make(impl, tick_ms=10)
    fired = []
    for d in (3, 7, 9, 10, 14):
        t.schedule_at(d, lambda d=d: fired.append(d))
    assert t.advance_to(5) == 1
    assert fired == [3]
    assert t.advance_to(8) == 1
    assert t.advance_to(9) == 1
    assert t.advance_to(12) == 1
    assert fired == [3, 7, 9, 10]
    # scheduled into the current partial tick after the wheel moved there
    t.schedule_at(13, lambda: fired.append(13))
    assert t.next_deadline_ms() == 13
    assert t.advance_to(13) == 1
    assert t.advance_to(14) == 1
    assert fired == [3, 7, 9, 10, 13, 14]


def test_delay_counts_from_timer_current_time(impl):
    clock, t = make(impl)
    t.advance_to(100)  # the clock stays at 0: the timer's time is 100
    h = t.schedule(10, lambda: None)
    assert h.deadline_ms == 110
    clock.advance(500)  # now the clock is later
    h2 = t.schedule(10, lambda: None)
    assert h2.deadline_ms == 510


def test_zero_and_negative_delay_fire_at_next_advance_even_if_earlier(impl):
    clock, t = make(impl)
    t.advance_to(100)
    fired = []
    t.schedule(0, lambda: fired.append("zero"))
    t.schedule(-30, lambda: fired.append("neg"))
    assert t.advance_to(50) == 2  # earlier than the current time: overdue ones still fire
    assert fired == ["neg", "zero"]


def test_advance_backwards_fires_nothing_new(impl):
    clock, t = make(impl)
    t.schedule_at(120, lambda: None)
    t.advance_to(100)
    assert t.advance_to(60) == 0
    assert len(t) == 1
    assert t.advance_to(120) == 1


def test_callback_scheduled_entries_due_in_same_call_fire_in_order(impl):
    clock, t = make(impl)
    fired = []

    def chain(d):
        fired.append(d)
        if d < 50:
            t.schedule(7, lambda: chain(d + 7))  # counts from the firing deadline

    t.schedule_at(1, lambda: chain(1))
    t.schedule_at(30, lambda: fired.append("x30"))
    n = t.advance_to(50)
    assert fired == [1, 8, 15, 22, 29, "x30", 36, 43, 50]
    assert n == 9


def test_callback_may_cancel_a_due_entry(impl):
    clock, t = make(impl)
    fired = []
    later = []
    t.schedule_at(5, lambda: fired.append(later[0].cancel()))
    later.append(t.schedule_at(6, lambda: fired.append("should not fire")))
    assert t.advance_to(10) == 1
    assert fired == [True]
    assert len(t) == 0


# ----------------------------------------------- whole-due buckets (the run)
def big_bucket_scenario(impl, n=20_000, seed=11):
    """n entries in one level-3 bucket ([8000, 16000) with tick 1, size 20) plus a
    few elsewhere, a quarter cancelled before the advance; during the one advance
    callbacks schedule entries inside the advanced range and cancel later ones.
    Returns the (key, deadline) firing sequence and len(t) after it."""
    rng = random.Random(seed)
    clock, t = make(impl, tick_ms=1, wheel_size=20)
    fired = []
    handles = {}

    def fn(key):
        def run():
            d = handles[key].deadline_ms
            fired.append((key, d))
            # what a callback does depends on its key only (not on the firing order of ties)
            if key[0] == "e" and key[1] % 7 == 0:
                k = ("c", key[1])
                handles[k] = t.schedule((0, 1, 5, 300, 4000, 30_000)[key[1] % 6], fn(k))
            if key[0] == "e" and key[1] % 11 == 0:
                victim = handles[("e", key[1] * 7919 % n)]
                if victim.deadline_ms > d:
                    victim.cancel()
        return run

    for i in range(n):
        d = rng.randrange(8000, 16000) if i % 10 else rng.choice([rng.randrange(0, 8000), rng.randrange(16000, 40000)])
        handles[("e", i)] = t.schedule_at(d, fn(("e", i)))
    for i in range(0, n, 4):
        handles[("e", i)].cancel()
    assert t.advance_to(20_000) == len(fired)
    return fired, len(t)


def test_big_whole_bucket_fires_in_exact_order_with_callbacks(impl):
    fired, left = big_bucket_scenario(impl)
    deadlines = [d for _, d in fired]
    assert deadlines == sorted(deadlines)
    assert all(d <= 20_000 for d in deadlines)
    assert len(set(k for k, _ in fired)) == len(fired)  # each at most once
    assert not any(k[0] == "e" and k[1] % 4 == 0 for k, _ in fired)  # cancelled before
    assert any(k[0] == "c" and 8000 <= d < 16000 for k, d in fired)  # scheduled inside the run
    assert left > 0  # children and entries beyond the target


@pytest.mark.skipif(not _twins.NATIVE_AVAILABLE, reason="needs the native twin")
def test_big_whole_bucket_twins_fire_identically():
    assert big_bucket_scenario("native") == big_bucket_scenario("pure")


@pytest.mark.skipif(not _twins.NATIVE_AVAILABLE, reason="needs the native twin")
@pytest.mark.parametrize("collect_cap,radix_n", [(256, None), (600, None), (None, 40), (300, 100)])
def test_native_without_memory_for_a_whole_bucket_falls_back(collect_cap, radix_n):
    """Out of memory for a bucket's batch: the bucket is cascaded as before (left
    exactly as it was); no scratch for the radix sort: qsort (stable on position)."""
    from fastcoord.core._native.engines import Timer as NativeTimer
    expect, expect_left = big_bucket_scenario("pure", n=5000)
    NativeTimer._test_alloc_limits(collect_cap, radix_n)
    try:
        got, left = big_bucket_scenario("native", n=5000)
    finally:
        NativeTimer._test_alloc_limits()
    assert sorted(got) == sorted(expect) and left == expect_left
    deadlines = [d for _, d in got]
    assert deadlines == sorted(deadlines)
    if collect_cap is None:  # only the sort changed: stable, so the same ties
        assert got == expect


def test_cancel_of_an_entry_waiting_in_the_run(impl):
    clock, t = make(impl, tick_ms=1, wheel_size=4)  # levels of 1, 4, 16, 64 ms
    fired = []
    hs = {}
    nexts = []

    def first():
        fired.append(100)
        assert hs[102].cancel() is True   # waits in the run: cancelled, skipped
        assert hs[102].cancel() is False
        assert hs[100].cancel() is False  # fired
        nexts.append(t.next_deadline_ms())
        assert len(t) == 2

    hs[100] = t.schedule_at(100, first)
    for d in (102, 105):
        hs[d] = t.schedule_at(d, lambda d=d: fired.append(d))
    assert t.advance_to(200) == 2
    assert fired == [100, 105]
    assert nexts == [105]
    assert len(t) == 0


def test_entry_scheduled_inside_the_run_before_its_next_entry(impl):
    clock, t = make(impl, tick_ms=1, wheel_size=20)
    fired = []
    t.schedule_at(9000, lambda: (fired.append(9000), t.schedule(1, lambda: fired.append(9001)),
                                 t.schedule(0, lambda: fired.append("9000b"))))
    t.schedule_at(9002, lambda: fired.append(9002))
    t.schedule_at(9001, lambda: fired.append("9001a"))
    t.schedule_at(15999, lambda: fired.append(15999))
    assert t.advance_to(16000) == 6
    assert fired == [9000, "9000b", "9001a", 9001, 9002, 15999]


def test_raising_callback_is_logged_and_others_fire(impl, caplog):
    clock, t = make(impl)
    fired = []

    def boom():
        raise RuntimeError("boom in callback")

    t.schedule_at(1, lambda: fired.append(1))
    t.schedule_at(2, boom)
    t.schedule_at(3, lambda: fired.append(3))
    with caplog.at_level(logging.ERROR, logger="fastcoord.timer"):
        assert t.advance_to(5) == 3
    assert fired == [1, 3]
    assert any("boom in callback" in (r.exc_text or "") or (r.exc_info and "boom" in str(r.exc_info[1]))
               for r in caplog.records if r.name == "fastcoord.timer")
    # still consistent afterwards
    t.schedule(2, lambda: fired.append("after"))
    assert len(t) == 1
    assert t.advance_to(7) == 1
    assert fired[-1] == "after"


def test_step_clock_reads_each_deadline_and_does_not_move_clock_past_it(impl):
    clock, t = make(impl)
    seen = []
    for d in (5, 17, 17, 40):
        t.schedule_at(d, lambda d=d: seen.append((d, clock.now_ms())))
    assert t.advance_to(100, step_clock=True) == 4
    assert seen == [(5, 5), (17, 17), (17, 17), (40, 40)]
    assert clock.now_ms() == 40  # the caller sets the final time, not advance_to
    clock.set_ms(100)
    assert clock.now_ms() == 100


def test_step_clock_never_moves_the_clock_back(impl):
    """An entry fires with the clock at its deadline unless the clock is already past it
    (ManualClock.set_ms); a time set by hand that is not an int is the clock's to judge."""
    clock, t = make(impl)
    seen = []
    t.schedule_at(5, lambda: clock.advance(20))
    t.schedule_at(17, lambda: seen.append(clock.now_ms()))
    assert t.advance_to(100, step_clock=True) == 2
    assert seen == [25]
    clock._now = 30.0
    t.schedule_at(120, lambda: seen.append(clock.now_ms()))
    t.schedule_at(140, lambda: seen.append(clock.now_ms()))
    assert t.advance_to(200, step_clock=True) == 2
    assert seen == [25, 120, 140] and type(seen[1]) is int


def test_step_clock_new_entries_count_from_the_firing_deadline(impl):
    clock, t = make(impl)
    seen = []
    t.schedule_at(10, lambda: t.schedule(15, lambda: seen.append(clock.now_ms())))
    t.advance_to(30, step_clock=True)
    assert seen == [25]


def test_next_deadline(impl):
    clock, t = make(impl, tick_ms=1, wheel_size=20)
    assert t.next_deadline_ms() is None
    t.schedule_at(5, lambda: None)
    assert t.next_deadline_ms() == 5
    h = t.schedule_at(1000, lambda: None)
    assert t.next_deadline_ms() == 5
    t.advance_to(5)
    nd = t.next_deadline_ms()
    assert nd is not None and nd <= 1000
    h.cancel()
    t.advance_to(2000)
    assert t.next_deadline_ms() is None


def test_far_deadlines_create_levels_lazily(impl):
    clock, t = make(impl, tick_ms=1, wheel_size=2)
    fired = []
    for d in (1, 2 ** 10, 2 ** 20, 2 ** 40):
        t.schedule_at(d, lambda d=d: fired.append(d))
    assert t.advance_to(2 ** 20) == 3
    assert t.advance_to(2 ** 40 - 1) == 0
    assert t.advance_to(2 ** 40) == 1
    assert fired == [1, 2 ** 10, 2 ** 20, 2 ** 40]


def test_negative_clock_times(impl):
    clock, t = make(impl, start=-1000, tick_ms=3)
    fired = []
    for d in (-990, -500, -1, 0, 7):
        t.schedule_at(d, lambda d=d: fired.append(d))
    assert t.advance_to(-500) == 2
    assert t.advance_to(10) == 3
    assert fired == [-990, -500, -1, 0, 7]


# ------------------------------------------------------------ tag entries
class Sink:
    def __init__(self):
        self.calls = []

    def on_timer(self, tag, deadline_ms):
        self.calls.append((tag, deadline_ms))


def test_tag_entries_fire_on_sink_and_cancel_by_id(impl):
    clock, t = make(impl)
    sink = Sink()
    ids = [t.schedule_tag_at(10 + i, sink, 1000 + i) for i in range(5)]
    assert len(set(ids)) == 5
    assert t.cancel_id(ids[1]) is True
    assert t.cancel_id(ids[1]) is False
    assert len(t) == 4
    assert t.advance_to(20) == 4
    assert sink.calls == [(1000, 10), (1002, 12), (1003, 13), (1004, 14)]
    assert t.cancel_id(ids[0]) is False  # fired


def test_stale_entry_id_never_cancels_a_new_entry(impl):
    clock, t = make(impl)
    sink = Sink()
    old = t.schedule_tag_at(10, sink, 1)
    assert t.cancel_id(old)
    new = [t.schedule_tag_at(10, sink, 2) for _ in range(3)]  # likely reuses the slot
    assert t.cancel_id(old) is False
    assert len(t) == 3
    assert t.advance_to(10) == 3
    assert sink.calls == [(2, 10)] * 3
    assert all(t.cancel_id(i) is False for i in new)
    assert t.cancel_id(123456789) is False


def test_many_sinks_are_released_and_reused(impl):
    clock, t = make(impl)
    sinks = [Sink() for _ in range(100)]
    for round_ in range(3):
        for i, s in enumerate(sinks):
            t.schedule_tag_at(round_ * 10 + 5, s, i)
        assert t.advance_to(round_ * 10 + 5) == 100
    assert all(s.calls == [(i, 5), (i, 15), (i, 25)] for i, s in enumerate(sinks))


class Stripped:
    """A sink whose on_timer is an attribute of the instance (so it can be taken away)."""

    def __init__(self):
        self.calls = []
        self.on_timer = lambda tag, deadline_ms: self.calls.append((tag, deadline_ms))


def test_sink_is_checked_unless_the_timer_just_took_it(impl):
    # The check costs an attribute lookup per call; a run of entries for one sink pays it
    # once. A sink other than the last one taken is checked again.
    clock, t = make(impl)
    a, b = Stripped(), Sink()
    t.schedule_tag_at(5, a, 1)
    del a.on_timer
    t.schedule_tag_at(6, a, 2)                  # the last sink taken: not checked again
    t.schedule_tag_at(7, b, 3)
    with pytest.raises(TypeError, match="sink"):
        t.schedule_tag_at(8, a, 4)              # no longer the last one: checked
    with pytest.raises(TypeError, match="sink"):
        t.schedule_tag_at(8, Stripped.__new__(Stripped), 5)
    t.schedule_tags(np.array([9], np.int64), np.array([6], np.int64), b)
    t.schedule_tag_at(9, b, 7)
    assert len(t) == 5
    a.on_timer = lambda tag, deadline_ms: a.calls.append((tag, deadline_ms))
    assert t.advance_to(10) == 5
    assert a.calls == [(1, 5), (2, 6)] and b.calls == [(3, 7), (6, 9), (7, 9)]


@pytest.mark.skipif(not _twins.NATIVE_AVAILABLE, reason="TimerSink is the native cdef base class")
def test_native_timer_sink_subclass():
    impl = "native"
    from fastcoord.core._native.engines import TimerSink

    class PySink(TimerSink):
        def __init__(self):
            self.calls = []

        def on_timer(self, tag, deadline_ms):
            self.calls.append((tag, deadline_ms))

    clock, t = make(impl)
    s = PySink()
    t.schedule_tag_at(3, s, 7)
    assert t.advance_to(3) == 1
    assert s.calls == [(7, 3)]


# -------------------------------------------------------------- bad input
@pytest.mark.parametrize("kw,exc,name", [
    ({"tick_ms": 0}, ValueError, "tick_ms"),
    ({"tick_ms": -1}, ValueError, "tick_ms"),
    ({"tick_ms": 1.5}, TypeError, "tick_ms"),
    ({"tick_ms": True}, TypeError, "tick_ms"),
    ({"wheel_size": 0}, ValueError, "wheel_size"),
    ({"wheel_size": 1}, ValueError, "wheel_size"),
    ({"wheel_size": "20"}, TypeError, "wheel_size"),
])
def test_bad_constructor_arguments(impl, kw, exc, name):
    with pytest.raises(exc, match=name):
        Timer(ManualClock(0), impl=impl, **kw)


def test_bad_schedule_arguments(impl):
    clock, t = make(impl)
    with pytest.raises(TypeError, match="fn"):
        t.schedule(5, 42)
    with pytest.raises(TypeError, match="delay_ms"):
        t.schedule(5.0, lambda: None)
    with pytest.raises(TypeError, match="delay_ms"):
        t.schedule(True, lambda: None)
    with pytest.raises(TypeError, match="delay_ms"):
        t.schedule("5", lambda: None)
    with pytest.raises(ValueError, match="delay_ms"):
        t.schedule(2 ** 70, lambda: None)
    with pytest.raises(TypeError, match="deadline_ms"):
        t.schedule_at(1.0, lambda: None)
    with pytest.raises(TypeError, match="fn"):
        t.schedule_at(1, None)
    with pytest.raises(TypeError, match="now_ms"):
        t.advance_to(1.5)
    with pytest.raises(TypeError, match="now_ms"):
        t.advance_to(False)
    with pytest.raises(TypeError, match="sink"):
        t.schedule_tag_at(1, object(), 1)
    with pytest.raises(TypeError, match="tag"):
        t.schedule_tag_at(1, Sink(), 1.0)
    with pytest.raises(TypeError, match="entry_id"):
        t.cancel_id("x")
    assert len(t) == 0  # nothing half-inserted
    assert t.advance_to(10) == 0


def test_bad_clock(impl):
    with pytest.raises(TypeError, match="clock"):
        Timer(object(), impl=impl)


# ----------------------------------------------------------- concurrency
def test_schedule_cancel_advance_from_many_threads(impl):
    clock, t = make(impl)
    fired = []
    lock = threading.Lock()
    kept = []

    def worker(seed):
        rng = random.Random(seed)
        mine = []
        for i in range(400):
            h = t.schedule_at(rng.randrange(0, 2000), lambda: fired.append(1))
            if rng.random() < 0.3:
                assert h.cancel()
            else:
                mine.append(h)
            if i % 50 == 0:
                t.advance_to(rng.randrange(0, 500))
        with lock:
            kept.extend(mine)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    t.advance_to(3000)
    assert len(t) == 0
    assert len(fired) == len(kept)
    assert not any(h.cancel() for h in kept)


# ---------------------------------------------------------------- reaper
def test_reaper_fires_on_system_clock_and_closes_promptly(impl):
    t = Timer(SystemClock(), impl=impl)
    done = threading.Event()
    start = time.monotonic()
    with t.start(max_wait_ms=50):
        t.schedule(30, done.set)
        assert done.wait(2.0)
        elapsed = time.monotonic() - start
        assert elapsed >= 0.029
        t.schedule(60_000, lambda: None)  # far away: close must not wait for it
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 0.5
    assert len(t) == 1


def test_reaper_wakes_early_for_an_earlier_deadline(impl):
    t = Timer(SystemClock(), impl=impl)
    t.schedule(10_000, lambda: None)
    t.start(max_wait_ms=5_000)
    try:
        time.sleep(0.02)  # the reaper now sleeps until the far deadline (capped at 5 s)
        done = threading.Event()
        t0 = time.monotonic()
        t.schedule(20, done.set)
        assert done.wait(2.0)
        assert time.monotonic() - t0 < 1.0
    finally:
        t.close()
    with pytest.raises(RuntimeError):
        t.start().start()
    t.close()


def test_reaper_with_manual_clock_and_restart(impl):
    clock, t = make(impl)
    fired = threading.Event()
    t.schedule(5, fired.set)
    t.start(max_wait_ms=10)
    clock.advance(5)
    assert fired.wait(2.0)
    t.close()
    t.close()  # idempotent


def test_twin_types(impl):
    clock, t = make(impl)
    mod = _twins.module(impl, "core.timer")
    assert isinstance(t, mod.Timer)
    assert isinstance(t.schedule(1, lambda: None), mod.TimerHandle)


# ------------------------------------------------------------- ManualStepper
def stepper(impl, start=0, lock=None):
    """A ManualStepper over a fresh timer (under a threading.Lock unless given one),
    with what it called recorded."""
    clock = ManualClock(start)
    wheel = _twins.module(impl, "core.timer")
    timer = wheel.Timer(clock)
    calls = []
    lock = threading.Lock() if lock is None else lock
    step = wheel.ManualStepper(timer, lock, lambda: calls.append("after"),
                               lambda ms: calls.append(("fallback", ms)) or -7)
    return clock, timer, step, calls, lock


def test_stepper_fires_with_the_clock_at_each_deadline_then_sets_the_target(impl):
    clock, timer, step, calls, _ = stepper(impl, start=10)
    seen = []
    for d in (12, 30, 30):
        timer.schedule_at(d, lambda d=d: seen.append((d, clock.now_ms())))
    assert step.advance(5) == 1 and clock.now_ms() == 15 and seen == [(12, 12)]
    assert step.advance(85) == 2 and clock.now_ms() == 100
    assert seen == [(12, 12), (30, 30), (30, 30)]
    assert step.advance(0) == 0 and clock.now_ms() == 100
    assert step.advance(7) == 0 and clock.now_ms() == 107
    assert calls == ["after"] * 2               # after each step that fired something


def test_stepper_lets_go_of_the_time_it_replaces(impl):
    """The native stepper sets the clock's time in its field (clock.pxd): the value it
    replaces is released once (no leak, no premature free), the new one held, exactly
    as the attribute's assignment does."""
    import sys
    start = 10**15 + 1                  # a fresh int object, not one of the cached small ones
    clock, timer, step, calls, _ = stepper(impl, start=start)
    held = clock._now
    assert held is start
    before = sys.getrefcount(held)
    assert step.advance(5) == 0 and clock.now_ms() == start + 5
    after = sys.getrefcount(held)
    # the clock's reference is gone (the pure timer also held that int as its own time),
    # ours remain: `held`, `start` and getrefcount's argument
    assert after == before - 1 if impl == "native" else 3 <= after < before
    now = clock.now_ms()
    assert sys.getrefcount(now) >= 3 and now == 10**15 + 6     # held by the clock too


def test_stepper_hands_every_unusual_step_to_its_fallback(impl):
    class Ms(int):
        pass
    clock, timer, step, calls, lock = stepper(impl, start=10)
    for odd in (True, 1.0, "1", None, -1, Ms(3), 2**62 + 1, 2**80):
        assert step.advance(odd) == -7
    assert calls == [("fallback", odd) for odd in (True, 1.0, "1", None, -1, Ms(3),
                                                   2**62 + 1, 2**80)]
    assert clock.now_ms() == 10 and timer.current_ms() == 10
    # a target beyond 2**62: the fallback answers, after the lock is released
    assert step.advance(2**62 - 5) == -7 and calls[-1] == ("fallback", 2**62 - 5)
    assert lock.acquire(timeout=5)
    lock.release()
    assert step.advance(1) == 0 and clock.now_ms() == 11


def test_stepper_under_its_twins_step_lock_steps_and_lets_the_lock_go(impl):
    """With the twin's StepLock (GroupCoordinator's time lock; the native stepper takes
    it by C calls), as under a threading.Lock: entries fire at their deadlines, every
    unusual step goes to the fallback, and the lock is free after each step."""
    wheel = _twins.module(impl, "core.timer")
    clock, timer, step, calls, lock = stepper(impl, start=10, lock=wheel.StepLock())
    seen = []
    timer.schedule_at(12, lambda: seen.append((clock.now_ms(), lock.locked())))
    assert step.advance(5) == 1 and seen == [(12, True)] and not lock.locked()
    assert step.advance(-1) == -7 and step.advance(2**62 - 5) == -7
    assert calls == ["after", ("fallback", -1), ("fallback", 2**62 - 5)]
    assert not lock.locked() and clock.now_ms() == 15
    assert step.advance(1) == 0 and clock.now_ms() == 16


def test_step_lock_is_a_lock(impl):
    """StepLock: taken by `with` or acquire(), released by release(); one holder at a
    time (another thread waits until it is released); releasing it unheld is an error."""
    lock = _twins.module(impl, "core.timer").StepLock()
    assert not lock.locked()
    with lock:
        assert lock.locked()
    assert not lock.locked()
    assert lock.acquire() is True and lock.locked()
    order = []

    def waiter():
        with lock:
            order.append("waiter")
    t = threading.Thread(target=waiter)
    t.start()
    t.join(0.2)
    assert t.is_alive() and order == []          # blocked while this thread holds it
    order.append("holder")
    lock.release()
    t.join(5)
    assert not t.is_alive() and order == ["holder", "waiter"]
    with pytest.raises(RuntimeError):
        lock.release()


def test_step_lock_acquire_keeps_threading_locks_contract(impl):
    """Both twins' StepLock.acquire as threading.Lock's: a non-blocking try and a timed
    wait give up on a lock another thread holds, and the same bad arguments fail."""
    import time
    lock = _twins.module(impl, "core.timer").StepLock()
    with held_by_another_thread(lock):
        assert lock.acquire(blocking=False) is False
        t0 = time.monotonic()
        assert lock.acquire(timeout=0.05) is False
        assert time.monotonic() - t0 >= 0.04
    assert lock.acquire(timeout=5) is True and lock.locked()
    lock.release()
    with pytest.raises(ValueError):
        lock.acquire(blocking=False, timeout=1)
    with pytest.raises(ValueError):
        lock.acquire(timeout=-2)
    with pytest.raises(OverflowError):
        lock.acquire(timeout=threading.TIMEOUT_MAX * 2)
    assert not lock.locked()


def test_stepper_needs_a_manual_clock(impl):
    wheel = _twins.module(impl, "core.timer")

    class Later(ManualClock):
        __slots__ = ()
    for clock in (SystemClock(), Later(0)):
        with pytest.raises(TypeError, match="ManualClock"):
            wheel.ManualStepper(wheel.Timer(clock), threading.Lock(), list, list)


def test_both_twins_share_the_deadline_range(impl):
    """Deadlines lie in [-(2**62 - 1), 2**62 - 1] in both twins (the native one needs
    that to stay inside int64 arithmetic): one past either end is a ValueError, the
    ends themselves are accepted, alone or in a batch."""
    import numpy as np

    class Sink:
        def on_timer(self, tag, deadline_ms):
            pass

    timer = Timer(ManualClock(0), impl=impl)
    sink = Sink()
    top = (1 << 62) - 1
    for bad in (top + 1, -top - 1):
        with pytest.raises(ValueError):
            timer.schedule_tag_at(bad, sink, 1)
        with pytest.raises(ValueError):
            timer.schedule_tags(np.array([0, bad], np.int64), np.array([1, 2], np.int64), sink)
        with pytest.raises(ValueError):
            timer.schedule_at(bad, lambda: None)
    assert len(timer) == 0
    timer.schedule_tag_at(top, sink, 1)
    timer.schedule_tag_at(-top, sink, 2)
    timer.schedule_tags(np.array([top, -top], np.int64), np.array([3, 4], np.int64), sink)
    assert len(timer) == 4


def test_cancelled_entries_leave_no_trace_in_order_or_next_deadline(impl):
    # (The native twin unlinks cancelled entries later, in runs of up to 256: until then
    # they stay in their lists, the ready list's head included. Guards that nothing sees
    # them: next_deadline_ms, the firing order, the count, slot reuse, stale ids.)
    clock, t = make(impl)
    sink = Sink()
    t.advance_to(100)
    now = [t.schedule_tag_at(100, sink, k) for k in range(5)]     # due now: the ready list
    later = [t.schedule_tag_at(101 + k % 700, sink, 1000 + k) for k in range(1000)]
    rng = random.Random(7)
    gone = set(rng.sample(range(1000), 600)) | set(range(0, 1000, 7))
    assert all(t.cancel_id(later[k]) for k in sorted(gone, key=lambda k: rng.random()))
    assert all(t.cancel_id(i) for i in now)     # the last ones: still linked (native)
    assert not any(t.cancel_id(later[k]) for k in gone) and not any(map(t.cancel_id, now))
    left = sorted((101 + k % 700, k) for k in range(1000) if k not in gone)
    assert len(t) == len(left)
    assert 100 < t.next_deadline_ms() <= left[0][0]    # (a bucket's start: a lower bound)
    again = [t.schedule_tag_at(100, sink, 5000 + k) for k in range(300)]    # reused slots
    assert len(set(again) | set(later) | set(now)) == 300 + 1000 + 5
    assert t.next_deadline_ms() == 100
    assert t.advance_to(2000) == 300 + len(left)
    assert sink.calls == [(5000 + k, 100) for k in range(300)] + [(1000 + k, d) for d, k in left]

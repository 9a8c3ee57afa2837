"""Property tests: both twins against a trivially correct model (a sorted list),
and native vs pure on the same random stream."""
import itertools
import random

import pytest
from hypothesis import given, settings, strategies as st

from fastcoord import _twins
from fastcoord.core.clock import ManualClock
from fastcoord import Timer

IMPLS = ["native", "pure"] if _twins.NATIVE_AVAILABLE else ["pure"]


class Model:
    """Entries as (deadline, seq) in a list; fire = pop every deadline <= target."""

    def __init__(self, clock):
        self.clock = clock
        self.time = clock.now_ms()
        self.live = {}  # seq -> deadline

    def current(self):
        return max(self.clock.now_ms(), self.time)

    def schedule_at(self, seq, deadline):
        self.live[seq] = deadline

    def cancel(self, seq):
        return self.live.pop(seq, None) is not None

    def advance_to(self, now):
        target = max(now, self.current())
        due = sorted((d, s) for s, d in self.live.items() if d <= target)
        for _, s in due:
            del self.live[s]
        self.time = max(self.time, target)
        return due


op_strategy = st.one_of(
    st.tuples(st.just("delay"), st.integers(-5, 3000)),
    st.tuples(st.just("at"), st.integers(-50, 30000)),
    st.tuples(st.just("far"), st.integers(0, 10 ** 7)),
    st.tuples(st.just("cancel"), st.integers(0, 10 ** 6)),
    st.tuples(st.just("advance"), st.integers(0, 400)),
    st.tuples(st.just("jump"), st.integers(0, 10 ** 6)),
    st.tuples(st.just("clock"), st.integers(0, 50)),
)


def run_against_model(impl, tick, size, ops):
    clock = ManualClock(0)
    t = Timer(clock, tick_ms=tick, wheel_size=size, impl=impl)
    m = Model(clock)
    handles = {}
    fired = []
    seq = 0
    for kind, v in ops:
        if kind in ("delay", "at", "far"):
            s = seq
            seq += 1
            fn = (lambda s=s: fired.append(s))
            if kind == "delay":
                h = t.schedule(v, fn)
                assert h.deadline_ms == m.current() + v
            else:
                h = t.schedule_at(v, fn)
            handles[s] = h
            m.schedule_at(s, h.deadline_ms)
        elif kind == "cancel":
            if handles:
                s = sorted(handles)[v % len(handles)]
                assert handles[s].cancel() == m.cancel(s)
        elif kind in ("advance", "jump"):
            target = m.current() + v
            fired.clear()
            n = t.advance_to(target)
            due = m.advance_to(target)
            assert n == len(due)
            assert sorted(fired) == sorted(s for _, s in due)  # same set
            deadlines = [handles[s].deadline_ms for s in fired]
            assert deadlines == sorted(deadlines)  # deadline order
        else:
            clock.advance(v)
        assert len(t) == len(m.live)
    fired.clear()
    due = m.advance_to(10 ** 8)
    assert t.advance_to(10 ** 8) == len(due)
    assert sorted(fired) == sorted(s for _, s in due)
    assert len(t) == 0


@pytest.mark.parametrize("tick", [1, 3, 10])
@pytest.mark.parametrize("size", [2, 4, 20])
@settings(max_examples=40, deadline=None)
@given(ops=st.lists(op_strategy, max_size=80))
def test_matches_model(impl, tick, size, ops):
    run_against_model(impl, tick, size, ops)


@settings(max_examples=60, deadline=None)
@given(tick=st.sampled_from([1, 3, 10]), size=st.sampled_from([2, 4, 20]),
       ops=st.lists(op_strategy, min_size=20, max_size=150))
def test_matches_model_random_geometry(impl, tick, size, ops):
    run_against_model(impl, tick, size, ops)


def firing_sequence(impl, seed, tick, size, n=3000):
    rng = random.Random(seed)
    clock = ManualClock(0)
    t = Timer(clock, tick_ms=tick, wheel_size=size, impl=impl)
    out = []
    handles = []
    for i in range(n):
        r = rng.random()
        if r < 0.5:
            d = rng.choice([rng.randrange(0, 100), rng.randrange(0, 5000), rng.randrange(0, 10 ** 6)])
            handles.append(t.schedule(d, lambda i=i: out.append(i)))
        elif r < 0.6:
            handles.append(t.schedule_at(rng.randrange(0, 2000), lambda i=i: out.append(i)))
        elif r < 0.75 and handles:
            out.append(("c", handles[rng.randrange(len(handles))].cancel()))
        else:
            out.append(("n", t.advance_to(t.current_ms() + rng.randrange(0, 300)), len(t)))
    out.append(("end", t.advance_to(10 ** 7), len(t)))
    return out


@pytest.mark.skipif(not _twins.NATIVE_AVAILABLE, reason="needs the native twin")
@pytest.mark.parametrize("seed,tick,size", [(1, 1, 20), (2, 3, 4), (3, 10, 2), (4, 1, 2), (5, 7, 3)])
def test_native_and_pure_fire_identically(seed, tick, size):
    assert firing_sequence("native", seed, tick, size) == firing_sequence("pure", seed, tick, size)


def test_tag_entries_match_model(impl):
    rng = random.Random(7)
    clock = ManualClock(0)
    t = Timer(clock, tick_ms=3, wheel_size=4, impl=impl)

    class Sink:
        def __init__(self):
            self.got = []

        def on_timer(self, tag, deadline):
            self.got.append((deadline, tag))

    sink = Sink()
    live = {}
    for i in range(3000):
        if rng.random() < 0.6:
            d = t.current_ms() + rng.randrange(0, 2000)
            live[t.schedule_tag_at(d, sink, i)] = (d, i)
        elif live and rng.random() < 0.5:
            eid = rng.choice(list(live))
            assert t.cancel_id(eid)
            del live[eid]
        else:
            target = t.current_ms() + rng.randrange(0, 100)
            sink.got.clear()
            t.advance_to(target)
            expect = sorted(v for v in live.values() if v[0] <= target)
            assert sorted(sink.got) == expect
            assert [d for d, _ in sink.got] == sorted(d for d, _ in sink.got)
            live = {k: v for k, v in live.items() if v[0] > target}
        assert len(t) == len(live)


# ------------------------------------------- large advances with callbacks
# Entries spread over many levels are fired by a few large advance_to calls; a
# firing callback schedules children (delay counted from its own deadline, some
# inside the advanced range so they fire in the same call, some beyond it), a
# child may schedule a grandchild, and a callback may cancel an entry that is
# due later.  The model is an event simulation on a sorted list.
delay_strategy = st.one_of(st.integers(0, 30), st.integers(0, 3000), st.integers(0, 2 * 10 ** 6))
child_strategy = st.tuples(delay_strategy, st.one_of(st.none(), delay_strategy))
entry_strategy = st.tuples(
    st.one_of(st.integers(-20, 60), st.integers(0, 8000), st.integers(0, 3 * 10 ** 6)),  # deadline
    st.lists(child_strategy, max_size=3),                                                 # children
    st.one_of(st.none(), st.integers(0, 10 ** 6)),                                       # cancel target
)


def run_callback_model(entries, advances):
    """Sorted-list model: list of (target, fired keys with their deadlines) per advance."""
    live = {}  # key -> deadline
    for i, (d, _, _) in enumerate(entries):
        live[(i,)] = d
    now = 0  # the timer's current time: the clock stays at 0
    out = []
    for target in advances:
        target = max(target, now)
        fired = []
        while True:
            due = [(d, k) for k, d in live.items() if d <= target]
            if not due:
                break
            d = min(due)[0]
            # all entries with this deadline (they fire before any child of theirs
            # with delay 0, which has a larger key path; the check below is by set)
            for dd, k in sorted(due):
                if dd != d or k not in live:
                    continue
                del live[k]
                fired.append((k, d))
                now = max(now, d)  # a past deadline fires at the current time
                for key, deadline in callback_effects(entries, k, now, live):
                    live[key] = deadline
        now = target
        out.append((fired, dict(live)))
    return out


def callback_effects(entries, key, now, live):
    """What the callback of key does at time now (model side): new (key, deadline)
    pairs; cancels in live."""
    new = []
    if len(key) == 1:
        _, children, cancel = entries[key[0]]
        for c, (delay, _) in enumerate(children):
            new.append((key + (c,), now + delay))
        if cancel is not None:
            victim = (cancel % len(entries),)
            if live.get(victim, now) > now:  # only entries due strictly later
                del live[victim]
    elif len(key) == 2:
        grand = entries[key[0]][1][key[1]][1]
        if grand is not None:
            new.append((key + (0,), now + grand))
    return new


def run_callback_timer(impl, tick, size, entries, advances):
    clock = ManualClock(0)
    t = Timer(clock, tick_ms=tick, wheel_size=size, impl=impl)
    handles = {}
    fired = []

    def make_fn(key):
        def fn():
            d = handles[key].deadline_ms
            fired.append((key, d))
            now = t.current_ms()
            assert now == max(d, 0)  # the firing deadline (the clock stays at 0)
            if len(key) == 1:
                _, children, cancel = entries[key[0]]
                for c, (delay, _) in enumerate(children):
                    k = key + (c,)
                    handles[k] = t.schedule(delay, make_fn(k))
                if cancel is not None:
                    victim = (cancel % len(entries),)
                    h = handles[victim]
                    if h.deadline_ms > now:
                        h.cancel()  # False when it already fired at an earlier advance
            elif len(key) == 2:
                grand = entries[key[0]][1][key[1]][1]
                if grand is not None:
                    k = key + (0,)
                    handles[k] = t.schedule(grand, make_fn(k))
        return fn

    for i, (d, _, _) in enumerate(entries):
        handles[(i,)] = t.schedule_at(d, make_fn((i,)))
    out = []
    for target in advances:
        fired.clear()
        n = t.advance_to(target)
        assert n == len(fired)
        out.append((list(fired), len(t)))
    return out


@pytest.mark.parametrize("tick,size", [(1, 2), (1, 4), (1, 20), (3, 4), (10, 2), (7, 3)])
@settings(max_examples=30, deadline=None)
@given(entries=st.lists(entry_strategy, min_size=1, max_size=120),
       advances=st.lists(st.one_of(st.integers(0, 100), st.integers(0, 5 * 10 ** 6)), min_size=1, max_size=3))
def test_large_advances_with_callbacks_match_model(impl, tick, size, entries, advances):
    """One advance crosses many levels (whole buckets are taken at once) while
    callbacks schedule entries inside the advanced range and cancel later ones."""
    targets = list(itertools.accumulate(advances))  # non-decreasing absolute targets
    model = run_callback_model(entries, targets)
    got = run_callback_timer(impl, tick, size, entries, targets)
    for target, (m_fired, m_live), (t_fired, t_len) in zip(targets, model, got):
        assert sorted(t_fired) == sorted(m_fired)  # the same entries, at the same deadlines
        deadlines = [d for _, d in t_fired]
        assert deadlines == sorted(deadlines)  # exact deadline order
        assert all(d <= target for d in deadlines)  # never early
        assert t_len == len(m_live)
    if _twins.NATIVE_AVAILABLE and impl == "native":
        # ties included, the twins fire in the same order
        assert got == run_callback_timer("pure", tick, size, entries, targets)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("min_delay", [0, 25, 399, 400, 6000])
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_idle_through_then_moving_the_clock_is_as_if_advanced(impl, min_delay, seed):
    """Two timers get the same random schedule. One is advanced before every schedule;
    the other has only its clock moved whenever idle_through(now, min_delay) says so
    (every delay scheduled is at least min_delay). Both fire the same entries in the
    same order (equal deadlines included) at the same times."""
    rng = random.Random(seed)
    start = rng.randrange(0, 5000)
    clocks = [ManualClock(start) for _ in range(2)]
    fired = [[], []]
    size = rng.choice((2, 4, 20))
    timers = [Timer(c, impl=impl, tick_ms=1, wheel_size=size) for c in clocks]
    skipped = 0
    for step in range(300):
        now = clocks[0].now_ms() + rng.choice((0, 1, 2, 7, 19, 20, 150, 399, 401, 3000))
        for which, (timer, clock) in enumerate(zip(timers, clocks)):
            if which == 1 and timer.idle_through(now, min_delay):
                clock.set_ms(max(now, clock.now_ms()))
                skipped += 1
            else:
                timer.advance_to(now)
                clock.set_ms(max(now, clock.now_ms()))
        for _ in range(rng.randrange(0, 4)):
            delay = min_delay + rng.choice((0, 0, 1, 5, 20, 400, 8000))
            for which, timer in enumerate(timers):
                timer.schedule(delay, lambda which=which, s=step, d=delay:
                               fired[which].append((s, d, timers[which].current_ms())))
    for timer, clock in zip(timers, clocks):
        timer.advance_to(clock.now_ms() + 100_000)
    assert fired[0] == fired[1]
    assert len(fired[0]) > 0

"""Property tests: both twins against a trivially correct model (a sorted list),
and native vs pure on the same random stream."""
import random

import pytest
from hypothesis import given, settings, strategies as st

from fastcoord import _compat
from fastcoord.clock import ManualClock
from fastcoord.timing import Timer

IMPLS = ["native", "pure"] if _compat.NATIVE_AVAILABLE else ["pure"]


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


@pytest.mark.skipif(not _compat.NATIVE_AVAILABLE, reason="needs the native twin")
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

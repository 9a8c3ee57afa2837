"""Timer.schedule_tags / cancel_ids (docs/api.md, "Batch timer entry points"): each is
its one-at-a-time call per element, in order (schedule_tag_at, cancel_id), with every
argument checked before anything is scheduled; both twins."""
import array

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fastcoord import Timer, _twins
from fastcoord.core.clock import ManualClock

LIMIT = 1 << 62  # (the pure twin accepts it, the native one up to LIMIT - 1)


class Recorder:
    def __init__(self):
        self.calls = []

    def on_timer(self, tag, deadline_ms):
        self.calls.append((tag, deadline_ms))


def make(impl, **kw):
    return Timer(ManualClock(0), impl=impl, **kw)


def i64(values):
    return np.array(values, dtype=np.int64)


def test_batch_ids_fire_and_cancel_as_one_at_a_time(impl):
    a, b = make(impl, wheel_size=4), make(impl, wheel_size=4)
    sa, sb = Recorder(), Recorder()
    deadlines = [5, -3, 70, 5, 0, 1_000, 64, 2]
    tags = [10, 11, 12, 13, -(1 << 63), (1 << 63) - 1, 16, 17]
    ids = a.schedule_tags(i64(deadlines), i64(tags), sa)
    one = [b.schedule_tag_at(d, sb, t) for d, t in zip(deadlines, tags)]
    assert isinstance(ids, np.ndarray) and ids.dtype == np.int64
    assert ids.tolist() == one
    assert len(a) == len(b) == 8
    assert a.cancel_ids(ids[[2, 5, 2]]) == sum(b.cancel_id(one[i]) for i in (2, 5, 2)) == 2
    assert a.advance_to(2_000) == b.advance_to(2_000) == 6
    assert sa.calls == sb.calls
    assert sa.calls[0] == (11, -3)


def test_empty_arrays(impl):
    t = make(impl)
    ids = t.schedule_tags(i64([]), i64([]), Recorder())
    assert isinstance(ids, np.ndarray) and ids.dtype == np.int64 and ids.shape == (0,)
    assert t.cancel_ids(i64([])) == 0
    assert len(t) == 0 and t.next_deadline_ms() is None


def test_other_buffer_kinds(impl):
    t = make(impl)
    sink = Recorder()
    base = np.arange(20, dtype=np.int64)
    ro = base.copy()
    ro.flags.writeable = False
    kinds = [
        (array.array("q", [1, 2, 3]), array.array("q", [7, 8, 9])),
        (memoryview(array.array("q", [4])), memoryview(array.array("q", [10]))),
        (base[::5], base[1::5]),                                  # strided
        (ro[:2], np.array([20, 21], dtype="=i8")),                # read-only, explicit order
        (memoryview(bytes(8)).cast("q"), array.array("l", [30]) if array.array("l").itemsize == 8
         else array.array("q", [30])),
    ]
    expected = []
    for deadlines, tags in kinds:
        ids = t.schedule_tags(deadlines, tags, sink)
        assert len(ids) == len(memoryview(deadlines))
        expected += list(zip(memoryview(tags).tolist(), memoryview(deadlines).tolist()))
    assert t.cancel_ids(array.array("q", [])) == 0
    assert t.advance_to(100) == len(expected)
    assert sorted(sink.calls, key=lambda c: c[1]) == sorted(expected, key=lambda c: c[1])


class NoSink:
    pass


BAD_SCHEDULES = [
    (lambda: ([1, 2], i64([1, 2]), Recorder()), TypeError, "deadlines_ms"),
    (lambda: (i64([1, 2]), (1, 2), Recorder()), TypeError, "tags"),
    (lambda: (np.array([1.0, 2.0]), i64([1, 2]), Recorder()), TypeError, "deadlines_ms"),
    (lambda: (i64([1, 2]), np.array([1, 2], dtype=np.int32), Recorder()), TypeError, "tags"),
    (lambda: (np.array([1, 2], dtype=np.uint64), i64([1, 2]), Recorder()), TypeError, "deadlines_ms"),
    (lambda: (i64([[1, 2]]), i64([1, 2]), Recorder()), TypeError, "deadlines_ms"),
    (lambda: (i64([1, 2, 3]), i64([1, 2]), Recorder()), ValueError, "length"),
    (lambda: (i64([1, 2, LIMIT + 1]), i64([1, 2, 3]), Recorder()), ValueError, "deadlines_ms"),
    (lambda: (i64([-LIMIT - 1, 2]), i64([1, 2]), Recorder()), ValueError, "deadlines_ms"),
    (lambda: (i64([1, 2]), i64([1, 2]), NoSink()), TypeError, "sink"),
    (lambda: (i64([]), i64([]), NoSink()), TypeError, "sink"),
]


@pytest.mark.parametrize("case", range(len(BAD_SCHEDULES)))
def test_bad_arguments_schedule_nothing(impl, case):
    make_args, exc, word = BAD_SCHEDULES[case]
    t, twin = make(impl), make(impl)
    sink, twin_sink = Recorder(), Recorder()
    first = t.schedule_tag_at(7, sink, 1)
    assert twin.schedule_tag_at(7, twin_sink, 1) == first
    with pytest.raises(exc, match=word):
        t.schedule_tags(*make_args())
    assert len(t) == 1 and t.next_deadline_ms() == 7
    # nothing was taken either: the next id is the one the untouched twin gives
    assert t.schedule_tag_at(9, sink, 2) == twin.schedule_tag_at(9, twin_sink, 2)
    assert t.advance_to(1 << 61) == 2
    assert sink.calls == [(1, 7), (2, 9)]


def test_bad_ids_cancel_nothing(impl):
    t = make(impl)
    ids = t.schedule_tags(i64([3, 4]), i64([1, 2]), Recorder())
    for bad in ([int(i) for i in ids], ids.astype(np.float64), ids.astype(np.int32),
                ids.reshape(1, 2), None):
        with pytest.raises(TypeError, match="ids"):
            t.cancel_ids(bad)
    assert len(t) == 2


def test_cancel_unknown_cancelled_and_fired_ids(impl):
    t = make(impl)
    sink = Recorder()
    ids = t.schedule_tags(i64([1, 2, 50]), i64([1, 2, 3]), sink)
    assert t.cancel_ids(ids[:1]) == 1
    assert t.advance_to(10) == 1                              # fires ids[1]
    stale = i64([ids[0], ids[1], ids[0], -1, 0, (1 << 63) - 1, (1 << 40) + 5])
    assert t.cancel_ids(stale) == 0
    assert len(t) == 1
    assert t.cancel_ids(i64([ids[2], ids[2]])) == 1
    assert len(t) == 0 and sink.calls == [(2, 2)]


# ------------------------------------------------------------------ property
deadline = st.integers(-20, 3_000)
tag = st.integers(-(1 << 63), (1 << 63) - 1)
op = st.one_of(
    st.tuples(st.just("schedule"), st.lists(st.tuples(deadline, tag), max_size=40)),
    st.tuples(st.just("cancel"), st.lists(st.integers(-3, 200), max_size=30)),
    st.tuples(st.just("advance"), st.integers(0, 700)),
)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(op, max_size=25), wheel_size=st.sampled_from([2, 4, 20]))
def test_batch_calls_equal_one_at_a_time_calls(impl, ops, wheel_size):
    """A timer driven by batch calls and a twin driven by the one-at-a-time calls:
    every return value and every on_timer call equal."""
    a, b = make(impl, wheel_size=wheel_size), make(impl, wheel_size=wheel_size)
    sa, sb = Recorder(), Recorder()
    known = []                                  # every id handed out, fired or not
    now = 0
    for kind, arg in ops:
        if kind == "schedule":
            base = a.current_ms()
            ds = [base + d for d, _ in arg]
            ts = [t for _, t in arg]
            ids = a.schedule_tags(i64(ds), i64(ts), sa)
            one = [b.schedule_tag_at(d, sb, t) for d, t in zip(ds, ts)]
            assert ids.tolist() == one
            known += one
        elif kind == "cancel":
            pick = [known[i % len(known)] if known and i >= 0 else i for i in arg]
            assert a.cancel_ids(i64(pick)) == sum(b.cancel_id(i) for i in pick)
        else:
            now += arg
            assert a.advance_to(now) == b.advance_to(now)
        assert len(a) == len(b)
        assert a.next_deadline_ms() == b.next_deadline_ms()
        assert sa.calls == sb.calls
    assert a.advance_to(now + 10_000) == b.advance_to(now + 10_000)
    assert sa.calls == sb.calls


@pytest.mark.skipif(not _twins.NATIVE_AVAILABLE, reason="the native twin is not built")
def test_native_batch_grows_the_pool_once_and_raw_slots_name_nothing():
    # A batch on a fresh timer takes its slots from the pool's never-used tail: the pool
    # grows once, to the batch's size and some room, not by doubling past it; the slots
    # beyond those ever handed out are raw memory, and no id reaches them.
    t = make("native")
    n = 100_000
    ids = t.schedule_tags(i64(range(1, n + 1)), i64(range(n)), Recorder())
    cap = t._pool_capacity()
    assert n < cap < 1.25 * n
    top = int(ids.max()) & 0xFFFFFFFF
    assert top < cap - 1000
    assert not any(t.cancel_id(slot) for slot in range(top + 1, cap))
    assert not any(t.cancel_id(slot | gen << 32) for slot in (top + 1, cap - 1) for gen in (0, 1, 7))
    assert t.cancel_ids(ids) == n and len(t) == 0

"""Purgatory and DelayedOperation: behaviours of Kafka's DelayedOperationTest,
against both twins (and across twins)."""
import random
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastcoord import _twins
from fastcoord.core.clock import ManualClock
from fastcoord import Purgatory, Timer

IMPLS = ["native", "pure"] if _twins.NATIVE_AVAILABLE else ["pure"]


def op_class(impl):
    base = _twins.module(impl, "core.purgatory").DelayedOperation

    class MockOp(base):
        def __init__(self, delay_ms, lock=None):
            super().__init__(delay_ms, lock)
            self.completable = False
            self.completions = 0
            self.expirations = 0
            self.lock_held_in_try = None

        def try_complete(self):
            if self.completable:
                return self.force_complete()
            return False

        def on_complete(self):
            self.completions += 1

        def on_expiration(self):
            self.expirations += 1

    return MockOp


@pytest.fixture
def env(impl):
    clock = ManualClock(0)
    timer = Timer(clock, impl=impl)
    purg = Purgatory("mock", timer, impl=impl)
    return clock, timer, purg, op_class(impl)


def test_request_satisfaction(env):
    clock, timer, purg, Op = env
    r1, r2 = Op(100000), Op(100000)
    assert purg.check_and_complete("test1") == 0
    assert purg.try_complete_else_watch(r1, ["test1"]) is False
    assert purg.check_and_complete("test1") == 0
    assert purg.try_complete_else_watch(r2, ["test2"]) is False
    assert purg.check_and_complete("test2") == 0
    r1.completable = True
    assert purg.check_and_complete("test1") == 1
    assert purg.check_and_complete("test1") == 0
    r2.completable = True
    assert purg.check_and_complete("test2") == 1
    assert purg.check_and_complete("test2") == 0
    assert r1.completions == r2.completions == 1
    assert r1.expirations == r2.expirations == 0
    assert purg.delayed == 0
    assert len(timer) == 0


def test_request_expiry_not_before_deadline(env):
    clock, timer, purg, Op = env
    r1, r2 = Op(20), Op(200000)
    assert not purg.try_complete_else_watch(r1, ["test1"])
    assert not purg.try_complete_else_watch(r2, ["test2"])
    assert timer.advance_to(19) == 0
    assert not r1.is_completed
    assert timer.advance_to(20) == 1
    assert r1.is_completed and r1.expirations == 1 and r1.completions == 1
    assert not r2.is_completed
    assert purg.delayed == 1


def test_immediately_completable_is_not_watched(env):
    clock, timer, purg, Op = env
    op = Op(1000)
    op.completable = True
    assert purg.try_complete_else_watch(op, ["k"]) is True
    assert op.is_completed
    assert purg.watched == 0
    assert purg.delayed == 0
    assert len(timer) == 0


def test_request_purge_counts(env):
    clock, timer, purg, Op = env
    r1, r2, r3 = Op(100000), Op(100000), Op(100000)
    purg.try_complete_else_watch(r1, ["test1"])
    purg.try_complete_else_watch(r2, ["test1", "test2"])
    purg.try_complete_else_watch(r3, ["test1", "test2", "test3"])
    assert purg.delayed == 3
    assert purg.watched == 6
    r2.completable = True
    r2.try_complete()
    assert purg.delayed == 2
    r3.completable = True
    r3.try_complete()
    assert purg.delayed == 1
    purg.check_and_complete("test1")
    assert purg.watched == 4
    purg.check_and_complete("test2")
    assert purg.watched == 2
    purg.check_and_complete("test3")
    assert purg.watched == 1


def test_cancel_for_key_returns_cancelled_operations(env):
    clock, timer, purg, Op = env
    ops = [Op(10000), Op(10000), Op(10000)]
    purg.try_complete_else_watch(ops[0], ["key"])
    purg.try_complete_else_watch(ops[1], ["key"])
    purg.try_complete_else_watch(ops[2], ["key2"])
    cancelled = purg.cancel_for_key("key")
    assert len(cancelled) == 2 and set(map(id, cancelled)) == {id(ops[0]), id(ops[1])}
    assert purg.delayed == 1
    assert purg.watched == 1
    assert not ops[0].is_completed  # cancelled, not completed
    assert timer.advance_to(20000) == 1
    assert ops[2].expirations == 1 and ops[0].expirations == 0


def test_cancel_for_unknown_key_is_empty(env):
    clock, timer, purg, Op = env
    assert purg.cancel_for_key("key") == []


def test_lock_is_held_in_try_complete_else_watch(env):
    clock, timer, purg, Op = env
    lock = threading.RLock()
    seen = []

    class LockCheck(Op):
        def try_complete(self):
            # an RLock held by this thread can be re-acquired without blocking;
            # held by nobody it could be too, so also check _is_owned
            seen.append(lock._is_owned())
            return False

    op = LockCheck(100000, lock=lock)
    assert op.lock is lock
    purg.try_complete_else_watch(op, ["key"])
    assert seen == [True, True]
    seen.clear()
    purg.check_and_complete("key")
    assert seen == [True]


class _CountingLock:
    """A lock that is neither threading's: the purgatory takes it by `with`."""

    def __init__(self):
        self.inner = threading.Lock()
        self.acquired = 0

    def acquire(self, blocking=True, timeout=-1):
        self.acquired += 1
        return self.inner.acquire(blocking, timeout)

    def release(self):
        self.inner.release()

    def locked(self):
        return self.inner.locked()

    __enter__ = acquire

    def __exit__(self, *exc):
        self.release()


class _RLockSubclass(type(threading.RLock())):
    pass


@pytest.mark.parametrize("make_lock", [threading.Lock, threading.RLock, _CountingLock,
                                       _RLockSubclass])
def test_every_kind_of_lock_is_held_around_try_complete_and_released(env, make_lock):
    # (threading's two lock types are taken by their unbound methods in the native
    # twin, any other lock by `with`: each is held in try_complete, free after)
    clock, timer, purg, Op = env
    lock = make_lock()
    held = []

    class LockCheck(Op):
        def try_complete(self):
            held.append(lock._is_owned() if hasattr(lock, "_is_owned") else lock.locked())
            return self.force_complete() if self.completable else False

    op = LockCheck(100000, lock=lock)
    assert purg.try_complete_else_watch(op, ("key",)) is False
    op.completable = True
    assert purg.check_and_complete("key") == 1
    assert held == [True, True, True]
    assert lock.acquire(False)
    lock.release()
    if make_lock is _CountingLock:
        assert lock.acquired == 4
    assert purg.watched == 0 and purg.delayed == 0


def test_an_operation_watched_twice_on_one_key_is_listed_twice(env):
    # (a key's list of one operation, then the same operation again, then another)
    clock, timer, purg, Op = env
    a, b = Op(100000), Op(100000)
    assert purg.try_complete_else_watch(a, ["k", "k"]) is False
    assert purg.watched == 2
    assert purg.try_complete_else_watch(b, ["k"]) is False
    assert purg.watched == 3
    a.completable = b.completable = True
    assert purg.check_and_complete("k") == 2
    assert a.completions == b.completions == 1
    assert purg.watched == 0 and purg.delayed == 0
    c = Op(100000)
    purg.try_complete_else_watch(c, ["only"])
    assert purg.watched == 1
    assert list(map(id, purg.cancel_for_key("only"))) == [id(c)]
    assert purg.watched == 0 and purg.delayed == 0


def test_completed_in_check_but_not_reported_leaves_its_list_to_a_purge(env):
    # try_complete completes the op yet answers False: the check completed nothing, so
    # it purges nothing; the op's key is left for the next purge (one visit)
    clock, timer, purg, Op = env

    class Quiet(Op):
        def try_complete(self):
            if self.completable:
                self.force_complete()
            return False

    op = Quiet(100000)
    key = ("group", "member")
    purg.try_complete_else_watch(op, [key])
    op.completable = True
    assert purg.check_and_complete(key) == 0
    assert op.is_completed and op.completions == 1
    assert purg.watched == 1 and purg.delayed == 0
    visits = purg.purge_visits
    assert purg.purge_completed() == 1
    assert purg.purge_visits == visits + 1 and purg.watched == 0


def test_force_complete_exactly_once(env):
    clock, timer, purg, Op = env
    op = Op(50)
    purg.try_complete_else_watch(op, ["k"])
    assert op.force_complete() is True
    assert op.force_complete() is False
    assert op.completions == 1
    assert purg.delayed == 0
    assert timer.advance_to(100) == 0  # its timer entry was cancelled
    assert op.expirations == 0


def test_completion_racing_expiry(env):
    clock, timer, purg, Op = env
    ops = [Op(10) for _ in range(50)]
    for i, op in enumerate(ops):
        purg.try_complete_else_watch(op, [i % 5])
    for op in ops[::2]:
        op.completable = True
    for k in range(5):
        purg.check_and_complete(k)
    assert timer.advance_to(10) == 25
    assert all(op.completions == 1 for op in ops)
    assert sum(op.expirations for op in ops) == 25
    assert purg.delayed == 0


def test_many_threads_complete_each_operation_exactly_once(env):
    clock, timer, purg, Op = env
    ops = [Op(10000) for _ in range(100)]
    for i, op in enumerate(ops):
        purg.try_complete_else_watch(op, [f"key{i}", "all"])
    for op in ops:
        op.completable = True
    results = []
    barrier = threading.Barrier(8)

    def worker(seed):
        rng = random.Random(seed)
        barrier.wait()
        n = 0
        for _ in range(20):
            i = rng.randrange(100)
            n += purg.check_and_complete(f"key{i}")
            n += sum(op.force_complete() for op in rng.sample(ops, 3))
        n += purg.check_and_complete("all")
        results.append(n)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == 100
    assert all(op.completions == 1 for op in ops)
    assert purg.delayed == 0
    assert len(timer) == 0


def test_check_and_complete_when_completable_later_from_threads(env):
    """Kafka's testTryCompleteWithMultipleThreads: ops become completable after
    some attempts; concurrent check_and_complete calls must complete all."""
    clock, timer, purg, Op = env
    attempts = 10
    ops = [Op(10000) for _ in range(40)]
    remaining = {id(op): attempts for op in ops}
    rlock = threading.Lock()
    for i, op in enumerate(ops):
        purg.try_complete_else_watch(op, [f"key{i}"])

    def attempt(i):
        op = ops[i]
        with rlock:
            remaining[id(op)] -= 1
            if remaining[id(op)] == 0:
                op.completable = True
        purg.check_and_complete(f"key{i}")

    jobs = [i for _ in range(attempts) for i in range(40)]
    random.Random(3).shuffle(jobs)
    chunks = [jobs[k::6] for k in range(6)]
    threads = [threading.Thread(target=lambda c=c: [attempt(i) for i in c]) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(op.is_completed for op in ops)
    assert purg.watched == 0


def test_purge_when_watched_exceeds_delayed_by_interval(impl):
    clock = ManualClock(0)
    timer = Timer(clock, impl=impl)
    purg = Purgatory("p", timer, purge_interval=10, impl=impl)
    Op = op_class(impl)
    ops = [Op(1000) for _ in range(30)]
    for i, op in enumerate(ops):
        purg.try_complete_else_watch(op, [i, i + 1000])
    assert purg.watched == 60
    for op in ops[:25]:
        op.force_complete()  # completed but still listed
    assert purg.watched == 60
    assert purg.delayed == 5
    purg.try_complete_else_watch(Op(1000), ["new"])  # triggers a purge
    assert purg.watched == 11
    assert purg.purge_completed() == 0


def test_operations_of_the_other_twin_are_accepted(impl):
    for other in IMPLS:
        clock = ManualClock(0)
        timer = Timer(clock, impl=impl)
        purg = Purgatory("x", timer, impl=impl)
        Op = op_class(other)
        a, b = Op(10), Op(10)
        assert not purg.try_complete_else_watch(a, ["k"])
        assert not purg.try_complete_else_watch(b, ["k"])
        assert purg.delayed == 2
        a.completable = True
        assert purg.check_and_complete("k") == 1
        assert purg.delayed == 1
        assert timer.advance_to(10) == 1
        assert b.expirations == 1 and purg.delayed == 0


def test_delay_counts_from_timer_time_and_expires_with_step_clock(env):
    clock, timer, purg, Op = env
    clock.advance(100)
    seen = []

    class Stamp(Op):
        def on_expiration(self):
            seen.append(clock.now_ms())

    purg.try_complete_else_watch(Stamp(25), ["k"])
    timer.advance_to(1000, step_clock=True)
    assert seen == [125]


def test_bad_arguments(impl):
    clock = ManualClock(0)
    timer = Timer(clock, impl=impl)
    Op = op_class(impl)
    with pytest.raises(TypeError, match="delay_ms"):
        Op(1.5)
    with pytest.raises(TypeError, match="lock"):
        Op(1, lock=42)
    with pytest.raises(TypeError, match="purge_interval"):
        Purgatory("p", timer, purge_interval="x", impl=impl)
    with pytest.raises(ValueError, match="purge_interval"):
        Purgatory("p", timer, purge_interval=-1, impl=impl)
    with pytest.raises(TypeError, match="timer"):
        Purgatory("p", object(), impl=impl)
    purg = Purgatory("p", timer, impl=impl)
    with pytest.raises(ValueError, match="keys"):
        purg.try_complete_else_watch(Op(1), [])


def test_shutdown_cancels_timer_entries(env):
    clock, timer, purg, Op = env
    ops = [Op(100) for _ in range(5)]
    for i, op in enumerate(ops):
        purg.try_complete_else_watch(op, [i])
    purg.shutdown()
    assert purg.watched == 0 and purg.delayed == 0
    assert timer.advance_to(1000) == 0


def test_base_try_complete_is_abstract(impl):
    base = _twins.module(impl, "core.purgatory").DelayedOperation
    with pytest.raises(NotImplementedError):
        base(10).try_complete()


# ---------------------------------------------------------------- purges
class CountingKey:
    """A key that counts how often it is hashed: a purge that looks a list up
    hashes its key."""
    hashes = 0

    def __init__(self, n):
        self.n = n

    def __hash__(self):
        CountingKey.hashes += 1
        return self.n

    def __eq__(self, other):
        return isinstance(other, CountingKey) and other.n == self.n


def test_purge_visits_only_lists_holding_completed_operations(env):
    clock, timer, purg, Op = env
    ops = [Op(100000) for _ in range(100)]
    for i, op in enumerate(ops):
        purg.try_complete_else_watch(op, [CountingKey(i)])
    both = Op(100000)
    purg.try_complete_else_watch(both, [200, 201])
    ops[3].force_complete()
    both.force_complete()  # listed on two keys: both lists need a purge
    assert purg.watched == 102
    CountingKey.hashes = 0
    assert purg.purge_completed() == 3
    assert CountingKey.hashes < 10  # the 100 other lists were not looked up
    visits = purg.purge_visits
    assert purg.purge_completed() == 0
    assert CountingKey.hashes < 10
    assert purg.watched == 99
    assert visits == 3  # not the 102 lists


def test_purge_after_check_and_complete_visits_no_list(env):
    """Kafka's heartbeat design: check_and_complete(key) completes and unlists the
    old operation, then a new one is watched on the key; nothing is left to purge."""
    clock, timer, purg, Op = env
    ops = {CountingKey(k): Op(30000) for k in range(50)}
    for k, op in ops.items():
        purg.try_complete_else_watch(op, [k])
    for k, op in ops.items():
        op.completable = True
        assert purg.check_and_complete(k) == 1
        ops[k] = Op(30000)
        purg.try_complete_else_watch(ops[k], [k])
    CountingKey.hashes = 0
    assert purg.purge_completed() == 0
    assert CountingKey.hashes == 0  # no list was looked up
    assert purg.purge_visits == 0
    assert purg.watched == 50 and purg.delayed == 50


def test_expired_operation_is_purged_from_its_lists(env):
    clock, timer, purg, Op = env
    short, long_ = Op(10), Op(100000)
    purg.try_complete_else_watch(short, ["a", "b"])
    purg.try_complete_else_watch(long_, ["b"])
    assert timer.advance_to(10) == 1
    assert purg.watched == 3
    assert purg.purge_completed() == 2
    assert purg.purge_visits == 2
    assert purg.watched == 1 and purg.delayed == 1


def test_operation_of_the_other_twin_completed_while_watched_is_purged(impl):
    for other in IMPLS:
        purg = Purgatory("x", Timer(ManualClock(0), impl=impl), impl=impl)
        Op = op_class(other)
        a, b = Op(1000), Op(1000)
        purg.try_complete_else_watch(a, ["k"])
        purg.try_complete_else_watch(b, ["j"])
        a.force_complete()
        assert purg.purge_completed() == 1
        assert purg.purge_visits == 1
        assert purg.watched == 1


def test_purge_runs_on_the_reaper_thread_when_the_timer_has_one(impl):
    timer = Timer(ManualClock(0), impl=impl)
    purg = Purgatory("p", timer, purge_interval=1, impl=impl)
    Op = op_class(impl)
    hashed_by = []

    class ThreadKey(CountingKey):
        def __hash__(self):
            hashed_by.append(threading.current_thread().name)
            return self.n

    ops = [Op(100000) for _ in range(3)]
    timer.start(max_wait_ms=50)
    try:
        assert timer.reaping
        for i, op in enumerate(ops):
            purg.try_complete_else_watch(op, [ThreadKey(i)])
        for op in ops:
            op.force_complete()
        hashed_by.clear()
        purg.try_complete_else_watch(Op(100000), ["trigger"])  # 4 listed, 1 delayed
        deadline = time.monotonic() + 5
        while purg.purge_visits < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        timer.close()
    assert not timer.reaping
    assert purg.purge_visits == 3
    assert purg.watched == 1
    assert hashed_by and set(hashed_by) == {"fastcoord-timer-reaper"}


# Random sequences: ("watch", keys) a new operation; ("ready", n) makes the n-th
# operation completable; ("force", n); ("check", key); ("cancel", key); ("advance",
# ms) the timer; ("purge",).
_KEYS = st.integers(0, 3)
_STEP = st.one_of(
    st.tuples(st.just("watch"), st.lists(_KEYS, min_size=1, max_size=3, unique=True)),
    st.tuples(st.just("ready"), st.integers(0, 30)),
    st.tuples(st.just("force"), st.integers(0, 30)),
    st.tuples(st.just("check"), _KEYS),
    st.tuples(st.just("cancel"), _KEYS),
    st.tuples(st.just("advance"), st.integers(1, 60)),
    st.tuples(st.just("purge")),
)


def _run_sequence(impl, steps):
    """Run steps on impl's purgatory against a model of its watcher lists; return
    what the purgatory answered."""
    timer = Timer(ManualClock(0), impl=impl)
    purg = Purgatory("p", timer, purge_interval=10**9, impl=impl)
    Op = op_class(impl)
    ops, lists, armed, trace = [], {}, [], []
    for step in steps:
        kind = step[0]
        if kind == "watch":
            op = Op(100)
            ops.append(op)
            assert purg.try_complete_else_watch(op, step[1]) is False
            for k in step[1]:
                lists.setdefault(k, []).append(op)
            armed.append(op)
            out = None
        elif kind in ("ready", "force"):
            if not ops:
                continue
            op = ops[step[1] % len(ops)]
            if kind == "ready":
                op.completable = True
                out = None
            else:
                out = op.force_complete()
        elif kind == "check":
            out = purg.check_and_complete(step[1])
            lists[step[1]] = [op for op in lists.get(step[1], []) if not op.is_completed]
        elif kind == "cancel":
            cancelled = purg.cancel_for_key(step[1])
            gone = lists.pop(step[1], [])
            assert list(map(id, cancelled)) == list(map(id, gone))
            armed = [op for op in armed if all(op is not c for c in gone)]
            out = len(cancelled)
        elif kind == "advance":
            out = timer.advance_to(timer.current_ms() + step[1])
        else:
            stale = sum(op.is_completed for lst in lists.values() for op in lst)
            dirty = sum(any(op.is_completed for op in lst) for lst in lists.values())
            visits = purg.purge_visits
            out = purg.purge_completed()
            assert out == stale
            assert dirty <= purg.purge_visits - visits <= len(lists)
            lists = {k: [op for op in lst if not op.is_completed] for k, lst in lists.items()}
            assert purg.purge_completed() == 0
        assert purg.watched == sum(map(len, lists.values()))
        assert purg.delayed == sum(not op.is_completed for op in armed)
        trace.append((out, purg.watched, purg.delayed))
    purg.purge_completed()
    live = sum(not op.is_completed for lst in lists.values() for op in lst)
    assert purg.watched == live
    return trace


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_STEP, max_size=40))
def test_random_sequences_keep_watched_and_delayed_exact(impl, steps):
    trace = _run_sequence(impl, steps)
    for other in IMPLS:
        assert _run_sequence(other, steps) == trace


# ---------------------------------------------------------------- batch calls
def test_watch_many_answers_each_operation_in_order(env):
    clock, timer, purg, Op = env
    ops = [Op(100) for _ in range(4)]
    ops[1].completable = True
    out = purg.try_complete_else_watch_many(ops, [["a"], ["a", "b"], ("b",), iter(["c"])])
    assert out == [False, True, False, False]
    assert purg.watched == 3 and purg.delayed == 3 and len(timer) == 3
    assert ops[1].completions == 1
    assert purg.try_complete_else_watch_many([], []) == []
    assert timer.advance_to(100) == 3
    assert [op.expirations for op in ops] == [1, 0, 1, 1]


def test_check_and_complete_keys_counts_what_every_key_completed(env):
    clock, timer, purg, Op = env
    ops = [Op(100) for _ in range(5)]
    purg.try_complete_else_watch_many(ops, [["a"], ["a", "b"], ["b"], ["c"], ["d"]])
    for op in ops[:4]:
        op.completable = True
    assert purg.check_and_complete_keys(["a", "b", "x", "b"]) == 3
    assert purg.check_and_complete_keys(iter(["c", "c"])) == 1
    assert purg.check_and_complete_keys([]) == 0
    assert purg.watched == 1 and purg.delayed == 1
    assert [op.completions for op in ops] == [1, 1, 1, 1, 0]


def test_batch_calls_accept_operations_of_either_twin_and_any_iterables(impl):
    for other in IMPLS:
        timer = Timer(ManualClock(0), impl=impl)
        purg = Purgatory("x", timer, impl=impl)
        Op = op_class(other)
        ops = [Op(10) for _ in range(3)]
        ops[2].completable = True
        assert purg.try_complete_else_watch_many(iter(ops), (("k",), ["k", "j"], {"j"})) == [
            False, False, True]
        assert purg.watched == 3 and purg.delayed == 2
        ops[0].completable = True
        assert purg.check_and_complete_keys(("j", "k")) == 1
        assert timer.advance_to(10) == 1
        assert ops[1].expirations == 1 and purg.delayed == 0
        assert purg.purge_completed() == 2 and purg.watched == 0


@pytest.mark.parametrize("ops_keys, error, match", [
    (([0], [["a"], ["b"]]), ValueError, "differ in length"),
    (([0, 1], [["a"], []]), ValueError, r"keys_per_op\[1\] must not be empty"),
    (([0, 1], [["a"], "ab"]), TypeError, r"keys_per_op\[1\] must be an iterable"),
    (([0, 1], [["a"], 7]), TypeError, r"keys_per_op\[1\] must be iterable"),
    (([0, 1], [["a"], ["b", []]]), TypeError, r"keys_per_op\[1\]\[1\] must be hashable"),
    (([0, "op"], [["a"], ["b"]]), TypeError, r"ops\[1\] must be a DelayedOperation"),
    ((5, [["a"]]), TypeError, "ops must be iterable"),
])
def test_watch_many_checks_every_argument_before_watching(env, ops_keys, error, match):
    clock, timer, purg, Op = env
    first = Op(100)
    ops, keys_per_op = ops_keys
    if isinstance(ops, list):
        ops = [first if o == 0 else Op(100) if o == 1 else o for o in ops]
    with pytest.raises(error, match=match):
        purg.try_complete_else_watch_many(ops, keys_per_op)
    assert purg.watched == 0 and purg.delayed == 0 and len(timer) == 0
    first.completable = True
    assert purg.check_and_complete("a") == 0 and first.completions == 0


def test_check_and_complete_keys_checks_every_key_first(env):
    clock, timer, purg, Op = env
    op = Op(100)
    purg.try_complete_else_watch(op, ["a"])
    op.completable = True
    with pytest.raises(TypeError, match=r"keys\[1\] must be hashable"):
        purg.check_and_complete_keys(["a", {}])
    with pytest.raises(TypeError, match="keys must be an iterable"):
        purg.check_and_complete_keys("a")
    with pytest.raises(TypeError, match="keys must be iterable"):
        purg.check_and_complete_keys(None)
    assert op.completions == 0 and purg.watched == 1


# Random batches: ("watch", [(keys, ready), ...]) new operations, each ready to complete
# or not; ("check", [key, ...]); ("ready", n); ("ready_all",); ("budget", n): n more completions for the
# operations that spend the budget (so the order of the calls decides which complete);
# ("advance", ms); ("purge",).
_BATCH_STEP = st.one_of(
    st.tuples(st.just("watch"), st.lists(
        st.tuples(st.lists(_KEYS, min_size=1, max_size=3), st.sampled_from([False, True, "budget"])),
        max_size=6)),
    st.tuples(st.just("check"), st.lists(_KEYS, max_size=6)),
    st.tuples(st.just("ready"), st.integers(0, 30)),
    st.tuples(st.just("ready_all")),
    st.tuples(st.just("budget"), st.integers(0, 3)),
    st.tuples(st.just("advance"), st.integers(1, 60)),
    st.tuples(st.just("purge")),
)


def _run_batches(impl, steps, purge_interval, batch, box=list):
    """Run steps on impl's purgatory, each batch by one batch call (batch=True; its
    arguments in `box`es) or by the one-at-a-time calls in order; return what it
    answered, its state after every step and the order in which operations completed
    and expired."""
    timer = Timer(ManualClock(0), impl=impl)
    purg = Purgatory("p", timer, purge_interval=purge_interval, impl=impl)
    base = op_class(impl)
    log, budget, ops, trace = [], [0], [], []

    class Op(base):
        def try_complete(self):
            if self.completable == "budget" and budget[0] > 0:
                budget[0] -= 1
                return self.force_complete()
            return super().try_complete() if self.completable is True else False

        def on_complete(self):
            log.append(("complete", self.n))

        def on_expiration(self):
            log.append(("expire", self.n))

    for step in steps:
        kind = step[0]
        if kind == "watch":
            new = []
            for keys, ready in step[1]:
                op = Op(50)
                op.n, op.completable = len(ops), ready
                ops.append(op)
                new.append(op)
            keys_per_op = [keys for keys, _ in step[1]]
            if batch:
                out = purg.try_complete_else_watch_many(box(new), box(map(box, keys_per_op)))
            else:
                out = [purg.try_complete_else_watch(op, keys) for op, keys in zip(new, keys_per_op)]
        elif kind == "check":
            if batch:
                out = purg.check_and_complete_keys(box(step[1]))
            else:
                out = sum(purg.check_and_complete(key) for key in step[1])
        elif kind == "ready":
            out = None
            if ops:
                ops[step[1] % len(ops)].completable = True
        elif kind == "ready_all":
            out = None
            for op in ops:
                if op.completable is False:
                    op.completable = True
        elif kind == "budget":
            budget[0] += step[1]
            out = None
        elif kind == "advance":
            out = timer.advance_to(timer.current_ms() + step[1])
        else:
            out = purg.purge_completed()
        trace.append((out, purg.watched, purg.delayed, len(timer), purg.purge_visits))
    return trace, log


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_BATCH_STEP, max_size=25), purge_interval=st.integers(0, 4),
       box=st.sampled_from([list, tuple]))
def test_batch_calls_equal_one_at_a_time_calls_in_order(impl, steps, purge_interval, box):
    want = _run_batches(impl, steps, purge_interval, batch=False)
    assert _run_batches(impl, steps, purge_interval, batch=True, box=box) == want
    for other in IMPLS:
        assert _run_batches(other, steps, purge_interval, batch=True, box=box) == want

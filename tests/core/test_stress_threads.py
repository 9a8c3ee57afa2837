"""Many threads against one coordinator: 4 heartbeating (2 scalar, 2 batch) while others
join, leave and advance time. Bounded in operations and time; no deadlock, every parked
request answered exactly once, every group consistent at the end."""
from __future__ import annotations

import itertools
import random
import threading

import numpy as np

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock

from helpers.locks import held_by_another_thread
from helpers.invariants import group_invariants

GROUPS = 40
PER_GROUP = 5
OPS = 300


def test_threads_heartbeat_join_leave_advance(impl):
    ids = itertools.count()
    id_lock = threading.Lock()

    def new_id(prefix):
        with id_lock:
            return f"{prefix}-{next(ids)}"

    coord = GroupCoordinator(
        CoordinatorConfig(group_min_session_timeout_ms=10, group_initial_rebalance_delay_ms=0),
        clock=ManualClock(), impl=impl, member_id_factory=new_id)
    answered = {}                        # request id -> how many times its callback ran
    answered_lock = threading.Lock()
    request_ids = itertools.count()

    def callback_for():
        rid = next(request_ids)
        with answered_lock:
            answered[rid] = 0

        def cb(_result):
            with answered_lock:
                answered[rid] += 1
        return cb

    # Form stable groups first (single thread).
    members = {}
    for g in range(GROUPS):
        gid = f"g{g}"
        box = []
        for _ in range(PER_GROUP):
            coord.join_group(gid, "", "consumer", [("range", b"")], session_timeout_ms=5000,
                             require_known_member_id=False, callback=box.append)
        members[gid] = box
    coord.advance_time(0)
    for gid, results in members.items():
        leader = results[0].leader_id
        for r in results:
            coord.sync_group(gid, r.generation_id, r.member_id,
                             {x.member_id: b"p" for x in results} if r.member_id == leader else None,
                             callback=callback_for())
    stable = [(gid, r.member_id, r.generation_id) for gid, rs in members.items() for r in rs]
    errors: list = []

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as exc:       # surfaced by the main thread's assertion
                errors.append(exc)
        return run

    def scalar_heartbeats(seed):
        rng = random.Random(seed)
        for _ in range(OPS):
            gid, mid, gen = rng.choice(stable)
            assert coord.heartbeat(gid, mid, gen) in set(Errors)

    def batch_heartbeats(seed):
        rng = np.random.default_rng(seed)
        for _ in range(OPS // 10):
            picks = rng.integers(0, len(stable), 50)
            h = np.array([coord.member_handle(stable[i][0], stable[i][1]) for i in picks],
                         dtype=np.int64)
            gens = np.array([stable[i][2] for i in picks], dtype=np.int32)
            out = coord.heartbeat_batch(h, gens)
            assert out.shape == (50,)

    def joiners_and_leavers(seed):
        rng = random.Random(seed)
        for i in range(OPS // 3):
            gid = f"churn{rng.randrange(5)}"
            coord.join_group(gid, "", "consumer", [("range", b"")], session_timeout_ms=20,
                             require_known_member_id=rng.random() < 0.5, callback=callback_for())
            if rng.random() < 0.3:
                victim = rng.choice(stable)
                coord.leave_group(victim[0], [(victim[1], None)])

    def time_mover():
        for _ in range(OPS // 3):
            coord.advance_time(7)

    threads = [threading.Thread(target=guarded(lambda s=s: scalar_heartbeats(s))) for s in (1, 2)]
    threads += [threading.Thread(target=guarded(lambda s=s: batch_heartbeats(s))) for s in (3, 4)]
    threads += [threading.Thread(target=guarded(lambda: joiners_and_leavers(5))),
                threading.Thread(target=guarded(time_mover))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread is stuck: deadlock"
    assert not errors, errors
    # Let every parked join/sync complete or expire, then check exactly-once delivery.
    coord.advance_time(400_000)
    with answered_lock:
        counts = list(answered.values())
    assert counts and all(c == 1 for c in counts), \
        f"{sum(c == 0 for c in counts)} never answered, {sum(c > 1 for c in counts)} answered twice"
    group_invariants(coord)


def test_in_memory_store_keeps_every_concurrent_write():
    """InMemoryStore has no lock: threads writing offsets to the same new groups at once,
    by both writes, must lose none. (A lost write needs a thread switch inside a few
    bytecodes, which this does not reliably force: the store makes a group's dict by
    setdefault so that there is no such window. What this catches is a write path that
    replaces or drops what another thread wrote.)"""
    import sys

    from fastcoord.core.store import InMemoryStore
    store = InMemoryStore()
    threads, groups, per_thread = 4, 200, 50
    answers = []
    fresh = [threading.Barrier(threads) for _ in range(groups)]

    def write(t):
        for g in range(groups):
            fresh[g].wait()                    # every thread's first write to a new group
            for k in range(per_thread):
                tp = (f"t{t}", k)
                if k % 2:
                    store.store_offsets(f"g{g}", {tp: (g, k)}, answers.append)
                else:
                    answers.append(store.store_offset_now(f"g{g}", tp, (g, k)))
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)                # switch threads as often as possible
    try:
        workers = [threading.Thread(target=write, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=60)
    finally:
        sys.setswitchinterval(old)
    assert not any(w.is_alive() for w in workers)
    assert len(answers) == threads * groups * per_thread
    assert set(answers) == {Errors.NONE}
    for g in range(groups):
        assert store.offsets[f"g{g}"] == {(f"t{t}", k): (g, k) for t in range(threads)
                                          for k in range(per_thread)}


def test_a_callback_of_the_creating_thread_does_not_hold_up_another_threads_answers(impl):
    """Each thread answers its own calls (its own outbox): while a callback run by the
    coordinator's creating thread waits, another thread's call is answered in that other
    thread. (Were the creating thread's outbox, which it reaches without the thread-local
    look-up, handed to the other thread too, its answer would wait behind that callback
    and then run in the creating thread.)"""
    coord = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(), impl=impl)
    other_answered = threading.Event()
    where = {}

    def other_callback(result):
        where["other"] = (threading.get_ident(), result.error)
        other_answered.set()

    def other_thread():
        coord.join_group("g2", "", "consumer", [("range", b"")], session_timeout_ms=10_000,
                         callback=other_callback)

    other = threading.Thread(target=other_thread)

    def home_callback(result):
        other.start()
        where["waited"] = other_answered.wait(5)      # the other thread's answer meanwhile
        where["home"] = (threading.get_ident(), result.error)

    coord.join_group("g1", "", "consumer", [("range", b"")], session_timeout_ms=10_000,
                     callback=home_callback)
    other.join(10)
    assert where["waited"]
    assert where["home"] == (threading.get_ident(), Errors.MEMBER_ID_REQUIRED)
    assert where["other"] == (other.ident, Errors.MEMBER_ID_REQUIRED)


def test_a_group_lock_held_elsewhere_honours_a_timeout(impl):
    """A group record's acquire keeps threading.RLock's contract in both twins: while
    another thread holds it, a timed acquire gives up (False) after about its timeout
    and a non-blocking one at once; once released, they take it; the holder re-enters
    it; a timeout with blocking=False, a negative one or NaN is a ValueError."""
    import time

    import pytest

    c = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(0), impl=impl)
    rec = c._logic.table.new_group("g", 0)
    with held_by_another_thread(rec):
        t0 = time.monotonic()
        assert rec.acquire(timeout=0.2) is False
        waited = time.monotonic() - t0
        assert 0.15 <= waited < 5, waited
        assert rec.acquire(False) is False
        assert rec.acquire(timeout=0) is False
    assert rec.acquire(timeout=1) is True
    assert rec.acquire(timeout=0) is True                  # re-entered by its holder
    rec.release()
    rec.release()
    for kwargs in ({"blocking": False, "timeout": 1}, {"timeout": -2}, {"timeout": float("nan")}):
        with pytest.raises(ValueError):
            rec.acquire(**kwargs)

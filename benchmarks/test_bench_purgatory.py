"""Purgatory benchmark: Kafka's heartbeat design on the purgatory alone.

Each member has a DelayedHeartbeat watched on its key. A heartbeat marks the
member satisfied, ``check_and_complete(key)`` completes (and unwatches) the old
operation, then ``try_complete_else_watch`` watches a new one with a 30 s
expiry: what Kafka 3.x's GroupCoordinator does per heartbeat, with the
group's lock as every operation's lock. One round heartbeats every member once,
in a fixed random order; ops = members.

With ``--benchmark-disable`` (``make test``) the member counts are small so this
runs as a test.

What bounds the heartbeat design (its instructions per heartbeat, the purgatory's part
and the Python user code's, against a C floor and a Python floor):
docs/purgatory-heartbeat.md; the floors are in benchmarks/floors/.
"""
import gc
import random
import threading

import pytest

from fastcoord import _twins
from fastcoord.core.clock import ManualClock

IMPLS = ["native", "pure"] if _twins.NATIVE_AVAILABLE else ["pure"]
ROUNDS = {"native": 5, "pure": 3}
MEMBERS_PER_GROUP = 10


class Member:
    __slots__ = ("key", "lock", "satisfied", "beats", "op")

    def __init__(self, key, lock):
        self.key = key
        self.lock = lock
        self.satisfied = False
        self.beats = 0
        self.op = None      # (the floors' own record of its operation)


def heartbeat_class(base):
    """Kafka's DelayedHeartbeat on a DelayedOperation class `base`."""

    class DelayedHeartbeat(base):
        __slots__ = ("member",)

        def __init__(self, member):
            super().__init__(30_000, member.lock)
            self.member = member

        def try_complete(self):
            return self.force_complete() if self.member.satisfied else False

    return DelayedHeartbeat


def heartbeat_design(impl, members):
    """The purgatory, its members (each with one operation watched) and heartbeat()."""
    purgatory = _twins.module(impl, "core.purgatory")
    timer = _twins.module(impl, "core.timer").Timer(ManualClock(0))
    purg = purgatory.Purgatory("Heartbeat", timer)
    DelayedHeartbeat = heartbeat_class(purgatory.DelayedOperation)
    ms = make_members(members)
    check, watch = purg.check_and_complete, purg.try_complete_else_watch

    def heartbeat(member):
        member.satisfied = True
        check(member.key)
        member.satisfied = False
        watch(DelayedHeartbeat(member), [member.key])

    for m in ms:
        heartbeat(m)
    order = ms[:]
    random.Random(3).shuffle(order)
    return purg, order, heartbeat


def make_members(members):
    locks = [threading.RLock() for _ in range(members // MEMBERS_PER_GROUP + 1)]
    return [Member(("group-%d" % (i // MEMBERS_PER_GROUP), "member-%d" % i),
                   locks[i // MEMBERS_PER_GROUP]) for i in range(members)]


def burst_design(impl, members, batch):
    """The heartbeat design by bursts: every member heartbeats once (a broker's burst
    of requests), then the burst's old operations complete and new ones are watched,
    by check_and_complete_keys and try_complete_else_watch_many (batch) or by the
    one-at-a-time calls in the same order. Returns the purgatory, next_burst() (the
    heartbeats and the new operations, outside the measure) and complete_and_watch."""
    purgatory = _twins.module(impl, "core.purgatory")
    timer = _twins.module(impl, "core.timer").Timer(ManualClock(0))
    purg = purgatory.Purgatory("Heartbeat", timer)

    class DelayedHeartbeat(purgatory.DelayedOperation):
        __slots__ = ("member", "beat")

        def __init__(self, member):
            super().__init__(30_000, member.lock)
            self.member = member
            self.beat = member.beats

        def try_complete(self):
            # done when its member heartbeat again since it was armed
            return self.force_complete() if self.member.beats != self.beat else False

    order = make_members(members)
    random.Random(3).shuffle(order)
    keys = [m.key for m in order]
    keys_per_op = [[k] for k in keys]

    def next_burst():
        for m in order:
            m.beats += 1
        return ([DelayedHeartbeat(m) for m in order],), {}

    if batch:
        def complete_and_watch(ops):
            purg.check_and_complete_keys(keys)
            purg.try_complete_else_watch_many(ops, keys_per_op)
    else:
        check, watch = purg.check_and_complete, purg.try_complete_else_watch

        def complete_and_watch(ops):
            for k in keys:
                check(k)
            for op, kk in zip(ops, keys_per_op):
                watch(op, kk)

    complete_and_watch(*next_burst()[0])
    return purg, next_burst, complete_and_watch


@pytest.fixture(scope="module")
def quick(request):
    return request.config.getoption("benchmark_disable")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("members", [10_000, 100_000])
def test_purgatory_kafka_heartbeat(benchmark, impl, members, quick):
    if quick:
        members //= 100
    purg, order, heartbeat = heartbeat_design(impl, members)

    def run():
        for m in order:
            heartbeat(m)

    benchmark.group = f"purgatory-heartbeat-{members}"
    benchmark.extra_info.update(ops=members, peer=f"kafka-design-{impl}")
    gc.collect()
    gc.disable()
    try:
        benchmark.pedantic(run, rounds=ROUNDS[impl], iterations=1, warmup_rounds=1)
    finally:
        gc.enable()
    assert purg.delayed == members
    assert purg.watched == members


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("members", [10_000, 100_000])
@pytest.mark.parametrize("calls", ["batch", "one-at-a-time"])
def test_purgatory_heartbeat_burst(benchmark, impl, members, calls, quick):
    if quick:
        members //= 100
    purg, next_burst, complete_and_watch = burst_design(impl, members, calls == "batch")
    benchmark.group = f"purgatory-burst-{members}"
    benchmark.extra_info.update(ops=members, peer=f"{calls}-{impl}")
    gc.collect()
    gc.disable()
    try:
        benchmark.pedantic(complete_and_watch, setup=next_burst, rounds=ROUNDS[impl],
                           iterations=1, warmup_rounds=1)
    finally:
        gc.enable()
    assert purg.delayed == members
    assert purg.watched == members

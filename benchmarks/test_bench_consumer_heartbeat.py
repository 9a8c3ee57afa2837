"""The steady ConsumerGroupHeartbeat (KIP-848), native vs pure: 100k settled members in
10k groups, in random order, through the Python API (the member table's fast path), by
handle one call each and in one batch, and the same requests through the checked slow
path (core/consumer.py) for reference.

`make test` runs each once on small sizes (--benchmark-disable); `make bench` runs
them for real on the sizes the issue names.
"""
from __future__ import annotations

import collections
import gc

import numpy as np
import pytest

import fastcoord
from builders import build_consumer_groups
from fastcoord import Errors, GroupCoordinator

IMPLS = ["native", "pure"] if fastcoord.NATIVE_AVAILABLE else ["pure"]
PARTITIONS = 10


def quick(request) -> bool:
    return bool(request.config.getoption("benchmark_disable"))


def settled(impl, groups, per_group):
    """A coordinator whose `groups` consumer groups of `per_group` members are all
    Stable, every member at its group's epoch: (coord, [(group, member, epoch)])."""
    return build_consumer_groups(impl, groups, per_group, partitions=PARTITIONS)


_cache: dict = {}


def stable(impl, groups, per_group):
    key = (impl, groups, per_group)
    if key not in _cache:
        _cache.clear()
        gc.collect()
        _cache[key] = settled(impl, groups, per_group)
    return _cache[key]


@pytest.mark.parametrize("impl", IMPLS)
def test_consumer_heartbeat_steady(benchmark, request, impl):
    """coord.consumer_group_heartbeat(g, m, epoch, callback=cb) of settled members,
    100k members in 10k groups, random order: the member table answers each (no
    Python frame in native)."""
    groups, per = (100, 10) if quick(request) else (10_000, 10)
    coord, members = stable(impl, groups, per)
    calls = [members[i] for i in np.random.default_rng(1).permutation(len(members))]
    hb = coord.consumer_group_heartbeat
    last = collections.deque(maxlen=1)
    cb = last.append

    def run():
        for g, m, epoch in calls:
            hb(g, m, epoch, callback=cb)

    benchmark.group = "consumer-heartbeat-steady-100k-random"
    benchmark.extra_info.update(ops=len(calls), peer=impl)
    benchmark.pedantic(run, rounds=5 if impl == "native" else 3, iterations=1)
    g, m, epoch = calls[-1]
    assert last[0] == (Errors.NONE, None, m, epoch, 5000, None)


def by_handle(impl, request):
    """The settled members' handles and epochs in random order (int64, int32 arrays)."""
    groups, per = (100, 10) if quick(request) else (10_000, 10)
    coord, members = stable(impl, groups, per)
    order = np.random.default_rng(1).permutation(len(members))
    handles = np.array([coord.consumer_member_handle(members[i][0], members[i][1])
                        for i in order], dtype=np.int64)
    epochs = np.array([members[i][2] for i in order], dtype=np.int32)
    assert (handles >= 0).all()
    return coord, handles, epochs


@pytest.mark.parametrize("impl", IMPLS)
def test_consumer_heartbeat_handle(benchmark, request, impl):
    """coord.consumer_heartbeat_handle(h, epoch) per member, 100k members in 10k groups,
    random order: the per-call form by handle, as heartbeat_handle is for classic."""
    coord, handles, epochs = by_handle(impl, request)
    calls = list(zip(handles.tolist(), epochs.tolist()))
    hb = coord.consumer_heartbeat_handle
    last = collections.deque(maxlen=1)
    cb = last.append

    def run():
        for h, epoch in calls:
            cb(hb(h, epoch))

    benchmark.group = "consumer-heartbeat-handle-100k-random"
    benchmark.extra_info.update(ops=len(calls), peer=impl)
    benchmark.pedantic(run, rounds=5 if impl == "native" else 3, iterations=1)
    assert last[0] is not None and last[0].error == Errors.NONE


@pytest.mark.parametrize("impl", IMPLS)
def test_consumer_heartbeat_batch(benchmark, request, impl):
    """coord.consumer_heartbeat_batch(handles, epochs): the same 100k steady heartbeats
    in one call (native: C without the GIL)."""
    coord, handles, epochs = by_handle(impl, request)
    batch = coord.consumer_heartbeat_batch
    answered = []

    def run():
        answered.append(batch(handles, epochs))

    benchmark.group = "consumer-heartbeat-batch-100k-random"
    benchmark.extra_info.update(ops=len(handles), peer=impl)
    benchmark.pedantic(run, rounds=5 if impl == "native" else 3, iterations=1)
    assert all(a.all() for a in answered)


@pytest.mark.parametrize("impl", IMPLS)
def test_consumer_heartbeat_steady_slow_path(benchmark, request, impl):
    """The same steady heartbeats through the checked slow path (the class's method,
    core/consumer.py), for reference: 10k of them."""
    groups, per = (100, 10) if quick(request) else (10_000, 10)
    coord, members = stable(impl, groups, per)
    order = np.random.default_rng(2).permutation(len(members))[:10_000]
    calls = [members[i] for i in order]
    slow = GroupCoordinator.consumer_group_heartbeat
    last = collections.deque(maxlen=1)
    cb = last.append

    def run():
        for g, m, epoch in calls:
            slow(coord, g, m, epoch, callback=cb)

    benchmark.group = "consumer-heartbeat-slow-path-random"
    benchmark.extra_info.update(ops=len(calls), peer=impl)
    benchmark.pedantic(run, rounds=3, iterations=1)
    g, m, epoch = calls[-1]
    assert last[0] == (Errors.NONE, None, m, epoch, 5000, None)

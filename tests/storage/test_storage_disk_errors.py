"""Disk errors: ENOSPC / EIO from write or fsync fail the affected requests with
NOT_COORDINATOR, leave the log exactly as acknowledged, keep the store usable, and
writes succeed again when the disk recovers. Faults come from the writer's injectable
pwrite / fdatasync (real files underneath) and, where mounting is permitted, from a
real full tmpfs."""
from __future__ import annotations

import errno
import logging
import os
import time

import pytest

from fastcoord import Errors, OffsetAndMetadata
from fastcoord.storage import DurableStore, load_into
from helpers.storage import store_offsets_sync

from helpers.protocol import NUM_SHARDS, Proto

NONE = Errors.NONE
NOT_COORDINATOR = Errors.NOT_COORDINATOR


class Disk:
    """Wraps the store's real pwrite/fdatasync; `full` makes writes fail with ENOSPC
    (after writing `partial` bytes for real, as a nearly full disk does), `broken`
    makes fsync fail with EIO."""

    def __init__(self, store, partial=0):
        self.full = False
        self.broken = False
        self.partial = partial
        self.failures = 0
        self._write, self._fsync = store._write, store._fsync
        store._write, store._fsync = self.write, self.fsync

    def write(self, fd, data, offset):
        if self.full:
            self.failures += 1
            if self.partial and len(data) > self.partial:
                self._write(fd, bytes(data[:self.partial]), offset)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._write(fd, data, offset)

    def fsync(self, fd):
        if self.broken:
            self.failures += 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return self._fsync(fd)


def offsets_of(store):
    _, offsets = store.load_shard(0)
    return {g: {tp: om.offset for tp, om in o.items()} for g, o in offsets.items()}


@pytest.mark.parametrize("partial", [0, 7])
def test_enospc_fails_the_write_cuts_it_off_and_recovers(tmp_path, caplog, partial):
    store = DurableStore(tmp_path, num_shards=1)
    disk = Disk(store, partial=partial)
    assert store_offsets_sync(store, "g", {("t", 0): OffsetAndMetadata(1)}) == NONE
    segment = os.path.join(store.shard_dir(0), os.listdir(store.shard_dir(0))[0])
    size = os.path.getsize(segment)
    disk.full = True
    with caplog.at_level(logging.WARNING, logger="fastcoord.storage"):
        for i in range(3):
            assert store_offsets_sync(store, "g", {("t", 0): OffsetAndMetadata(10 + i)}) == \
                NOT_COORDINATOR
    assert disk.failures == 3
    assert "No space left on device" in caplog.text
    assert os.path.getsize(segment) == size          # the partial write was cut off
    disk.full = False
    assert store_offsets_sync(store, "g", {("t", 1): OffsetAndMetadata(2)}) == NONE
    store.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fastcoord.storage"):
        assert offsets_of(DurableStore(tmp_path, num_shards=1)) == {"g": {("t", 0): 1, ("t", 1): 2}}
    assert "torn" not in caplog.text                 # nothing to recover: the log was kept clean


def test_fsync_eio_fails_the_batch_and_recovers(tmp_path):
    store = DurableStore(tmp_path, num_shards=1)
    disk = Disk(store)
    assert store_offsets_sync(store, "g", {("t", 0): OffsetAndMetadata(1)}) == NONE
    disk.broken = True
    assert store_offsets_sync(store, "g", {("t", 0): OffsetAndMetadata(2)}) == NOT_COORDINATOR
    disk.broken = False
    assert store_offsets_sync(store, "g", {("t", 1): OffsetAndMetadata(3)}) == NONE
    store.close()
    assert offsets_of(DurableStore(tmp_path, num_shards=1)) == {"g": {("t", 0): 1, ("t", 1): 3}}


def test_failing_segment_roll_fails_writes_then_recovers(tmp_path):
    store = DurableStore(tmp_path, num_shards=1, segment_bytes=1024, compact_after_segments=None)
    disk = Disk(store)
    acked = {}
    for i in range(40):
        disk.broken = 15 <= i < 25          # the roll's fsync fails too
        error = store_offsets_sync(store, "g", {("t", i % 4): OffsetAndMetadata(i, "x" * 40)})
        assert error == (NOT_COORDINATOR if disk.broken else NONE)
        if error == NONE:
            acked[("t", i % 4)] = i
    store.close()
    assert offsets_of(DurableStore(tmp_path, num_shards=1)) == {"g": acked}


def test_disk_full_through_the_coordinator(impl, tmp_path):
    store = DurableStore(tmp_path, num_shards=NUM_SHARDS)
    disk = Disk(store)
    p = Proto(impl, store=store)
    assert p.commit("", -1, {("t", 0): 1}, group="simple") == {("t", 0): NONE}
    leader_join, follower_join = p.join_new(group="g"), p.join_new(group="g")
    p.run_until_done([leader_join, follower_join])
    gen, leader = leader_join.result.generation_id, leader_join.result.leader_id
    follower = follower_join.result.member_id

    disk.full = True
    # OffsetCommit: the store error for each partition; the old offset stays
    assert p.commit("", -1, {("t", 0): 2, ("t", 1): 2}, group="simple") == \
        {("t", 0): NOT_COORDINATOR, ("t", 1): NOT_COORDINATOR}
    assert p.fetch(group="simple")[1][("t", 0)].offset == 1
    # SyncGroup: the leader's group write fails: every parked sync gets it, and a rebalance
    fsync = p.send_sync(follower, gen, group="g")
    lsync = p.send_sync(leader, gen, {leader: b"a", follower: b"b"}, group="g")
    deadline = time.monotonic() + 60   # fsyncs may stall on a busy disk
    while not (lsync.done and fsync.done) and time.monotonic() < deadline:
        time.sleep(0.002)
    assert lsync.error == NOT_COORDINATOR and fsync.error == NOT_COORDINATOR
    assert p.state("g") == "PreparingRebalance"

    disk.full = False                                  # space is back
    assert p.commit("", -1, {("t", 0): 3}, group="simple") == {("t", 0): NONE}
    rejoins = [p.send_join(leader, group="g"), p.send_join(follower, group="g")]
    p.run_until_done(rejoins)
    gen2 = rejoins[0].result.generation_id
    assert gen2 == gen + 1
    syncs = [p.send_sync(leader, gen2, {leader: b"a2", follower: b"b2"}, group="g"),
             p.send_sync(follower, gen2, group="g")]
    deadline = time.monotonic() + 60   # fsyncs may stall on a busy disk
    while not all(s.done for s in syncs) and time.monotonic() < deadline:
        time.sleep(0.002)
    assert [s.error for s in syncs] == [NONE, NONE]
    assert p.state("g") == "Stable"
    before = {g: (p.describe(g), p.fetch(group=g)) for g in ("g", "simple")}
    store.close()

    store2 = DurableStore(tmp_path, num_shards=NUM_SHARDS)
    q = Proto(impl, store=store2, start_ms=p.now)
    load_into(q.coord, store2)
    assert {g: (q.describe(g), q.fetch(group=g)) for g in ("g", "simple")} == before
    store2.close()


def test_real_enospc_on_a_full_tmpfs(small_tmpfs):
    data_dir = small_tmpfs / "data"
    store = DurableStore(data_dir, num_shards=1, segment_bytes=64 << 20)
    filler = small_tmpfs / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * (128 * 1024))
    acked, errors = {}, []
    for i in range(2000):
        error = store_offsets_sync(store, "g", {("t", i % 8): OffsetAndMetadata(i, "m" * 1500)})
        if error == NONE:
            acked[("t", i % 8)] = i
        else:
            errors.append(error)
            if len(errors) == 3:
                break
    assert errors == [NOT_COORDINATOR] * 3, "the tmpfs never filled up"
    os.unlink(filler)                                  # space returns
    for i in range(2000, 2010):
        assert store_offsets_sync(store, "g", {("t", i % 8): OffsetAndMetadata(i, "m")}) == NONE
        acked[("t", i % 8)] = i
    store.close()
    assert offsets_of(DurableStore(data_dir, num_shards=1)) == {"g": acked}


def test_batch_over_many_shards_syncs_them_together_and_fails_only_the_broken_one(tmp_path):
    """One writer batch holding commits for 8 shards: their fsyncs run at the same time
    (more than one thread), an EIO on one shard's fsync fails only that shard's commit
    (NOT_COORDINATOR) and cuts it off its file; the other seven are acknowledged and
    load back."""
    import threading

    from fastcoord import shard_for
    from helpers.storage import Waiter

    shards = 8
    groups = {}
    i = 0
    while len(groups) < shards:
        g = f"group-{i}"
        groups.setdefault(shard_for(g, shards), g)
        i += 1
    broken_shard = 5
    store = DurableStore(tmp_path, num_shards=shards, fsync="always")
    real_fsync = store._fsync
    gate = threading.Event()
    first = threading.Event()
    threads = set()

    def fsync(fd):
        if not first.is_set():          # hold the writer in its first fsync meanwhile
            first.set()
            assert gate.wait(10)
        path = os.readlink(f"/proc/self/fd/{fd}")
        threads.add(threading.get_ident())
        if f"shard-{broken_shard:03d}" in path:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_fsync(fd)

    store._fsync = fsync
    warm = Waiter()
    store.store_offsets(groups[0], {("t", 0): OffsetAndMetadata(1)}, warm)
    assert first.wait(60)
    waiters = {}
    for shard, g in groups.items():
        waiters[shard] = Waiter()
        store.store_offsets(g, {("t", 0): OffsetAndMetadata(100 + shard)}, waiters[shard])
    threads.clear()
    gate.set()
    assert warm.wait() == NONE
    results = {shard: w.wait() for shard, w in waiters.items()}
    store.close()
    assert results == {s: (NOT_COORDINATOR if s == broken_shard else NONE) for s in groups}
    assert len(threads) > 1, "the batch's fsyncs ran one after another on one thread"
    reopened = DurableStore(tmp_path, num_shards=shards)
    for shard, g in groups.items():
        _, offsets = reopened.load_shard(shard)
        got = {gid: o[("t", 0)].offset for gid, o in offsets.items()}
        expected = 100 + shard if shard != broken_shard else None
        if shard == 0:
            assert got.get(g) == 100      # the warm commit was superseded
        elif expected is None:
            assert g not in got
        else:
            assert got[g] == expected
    reopened.close()

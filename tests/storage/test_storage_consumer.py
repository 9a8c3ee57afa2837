"""Consumer groups (KIP-848) in the durable store: the CONSUMER_GROUP record's codec
(round trip, hostile bytes), torn tails, the fold over a real log (write, reopen, load)
against fold_consumer_record, compaction to one full record, retention and tombstones,
and a coordinator restarted over its store. Both scanner twins where the storage has
twins."""
from __future__ import annotations

import os
import pathlib
import random
import struct
import tempfile
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fastcoord
from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock, OffsetAndMetadata
from fastcoord import _twins
from fastcoord.core.consumer_records import fold_consumer_record
from fastcoord.core.store import InMemoryStore
from fastcoord.storage import DurableStore, load_into
from fastcoord.storage import log as log_module
from fastcoord.storage._pure import logscan as pure
from fastcoord.storage.records import (
    CONSUMER_GROUP, FRAME_SIZE, HEAD_SIZE, OFFSETS, decode_consumer_record,
    encode_consumer_group, encode_group, frame,
)
from helpers.cgrecords import consumer_records, random_consumer_record
from helpers.storage import Waiter, store_group_sync, store_offsets_sync

NONE = Errors.NONE
TOMB = object()
TWINS = ["native", "pure"] if fastcoord.NATIVE_AVAILABLE else ["pure"]

RECORD = {
    "consumer": True, "full": False, "group_epoch": 7, "assignment_epoch": 6,
    "metadata": {"foo": 6, "bär": 2}, "resolved": {"f.*": ["foo"], "x+": []},
    "members": {
        "m-1": {"instance_id": None, "rack_id": "r1", "client_id": "c-1",
                "client_host": "/10.0.0.1", "rebalance_timeout_ms": 30000,
                "server_assignor": None, "topic_names": ["bär", "foo"], "topic_regex": None,
                "state": 1, "member_epoch": 7, "previous_epoch": 5,
                "assigned": {"foo": [0, 1]}, "revoking": {"bär": [1]},
                "target": {"foo": [0, 1, 2]},
                # a migrating (classic-protocol) member's fields, unknown to this codec
                "classic": {"session_timeout_ms": 45000,
                            "protocols": [["range", b"\x00\x01"], ("coop", b"")]}},
        "m-2": None,
    },
}


def scanner_of(impl):
    return _twins.module(impl, "storage.logscan")


def scan_groups(module, data):
    groups, offsets = {}, {}
    end, reason, records, _ = module.scan(data, groups, offsets, {}, {}, TOMB)
    return end, reason, records, groups, offsets


@pytest.fixture
def scanner(impl, monkeypatch):
    """Load through the `impl` twin's log scanner (the store uses the default twin)."""
    monkeypatch.setattr(log_module, "_scanner", scanner_of(impl))
    return impl


class use_scanner:
    """The store's scanner twin for a block (hypothesis tests: no function fixtures)."""

    def __init__(self, impl):
        self.module = scanner_of(impl)

    def __enter__(self):
        self.saved = log_module._scanner
        log_module._scanner = self.module

    def __exit__(self, *exc):
        log_module._scanner = self.saved


def body(data):
    """A single frame's body bounds, after the head (what the decoders take)."""
    glen = int.from_bytes(data[FRAME_SIZE + 9:FRAME_SIZE + 13], "little")
    return FRAME_SIZE + HEAD_SIZE + glen, len(data)


# -- codec -------------------------------------------------------------------------------
def test_a_consumer_record_round_trips_exactly_extra_fields_included(impl):
    data = encode_consumer_group("grp-é", RECORD, 123)
    assert data[FRAME_SIZE] == CONSUMER_GROUP == 6
    assert decode_consumer_record(data, *body(data)) == RECORD
    end, reason, records, groups, _ = scan_groups(scanner_of(impl), data)
    assert (end, reason, records) == (len(data), None, 1)
    assert groups == {"grp-é": fold_consumer_record(None, RECORD)}
    assert groups["grp-é"]["members"]["m-1"]["classic"]["protocols"][1] == ("coop", b"")


def test_a_skipped_partial_record_leaves_the_group_and_its_write_time(impl):
    """A numbered partial consumer record over a classic group's record (the consumer
    record before it lost: a failed conversion) is skipped: the group is the classic
    record, written when that record was, in one scan or in two."""
    classic = {"protocol_type": "consumer", "generation": 3, "protocol": "range",
               "leader": None, "members": []}
    stray = encode_consumer_group("g", {**RECORD, "seq": 5}, 200)
    module = scanner_of(impl)
    for parts in ([encode_group("g", classic, 100) + stray],
                  [encode_group("g", classic, 100), stray]):
        groups, group_ms = {}, {}
        for data in parts:
            end, reason, _, _ = module.scan(data, groups, {}, group_ms, {}, TOMB)
            assert (end, reason) == (len(data), None)
        assert groups == {"g": classic} and group_ms == {"g": 100}


@settings(max_examples=300, deadline=None)
@given(consumer_records, st.text(max_size=4))
def test_random_records_round_trip_through_both_twins(record, gid):
    data = encode_consumer_group(gid, record, 5)
    assert decode_consumer_record(data, *body(data)) == record
    for impl in TWINS:
        end, reason, _, groups, _ = scan_groups(scanner_of(impl), data)
        assert (end, reason) == (len(data), None), impl
        assert groups == {gid: fold_consumer_record(None, record)}, impl


@pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE, reason="needs the native twin to compare")
@settings(max_examples=400, deadline=None)
@given(consumer_records, st.integers(0, 2**32))
def test_the_twins_agree_on_damaged_consumer_records(record, seed):
    """A record's body damaged (a byte changed, cut, grown), its CRC made right again:
    both decoders accept the same bodies with the same result, and refuse the others."""
    rng = random.Random(seed)
    payload = bytearray(encode_consumer_group("g", record, 5)[FRAME_SIZE:])
    start = HEAD_SIZE + 1
    for _ in range(rng.randrange(1, 4)):
        at = rng.randrange(start, len(payload) + 1)
        how = rng.choice(["set", "cut", "grow", "count"])
        if how == "set" and at < len(payload):
            payload[at] = rng.choice([0, 1, 2, 5, 8, 9, 0xFF, rng.randrange(256)])
        elif how == "cut":
            del payload[at:]
        elif how == "grow":
            payload[at:at] = rng.randbytes(rng.randrange(1, 9))
        elif how == "count" and at + 4 <= len(payload):
            payload[at:at + 4] = struct.pack("<I", rng.choice([2**32 - 1, 2**28, 1000]))
    data = frame(bytes(payload))
    from fastcoord.storage._native import logscan as native
    got = scan_groups(native, data)
    want = scan_groups(pure, data)
    assert got[0] == want[0] and got[2:] == want[2:]
    assert (got[1] is None) == (want[1] is None)


def test_a_huge_count_is_refused_before_anything_is_built(impl):
    """A count of members (or of anything) the bytes left cannot hold is corrupt at
    once: the decoder allocates nothing for it."""
    good = encode_consumer_group("g", {**RECORD, "members": {}, "metadata": {},
                                       "resolved": {}}, 5)
    pos, _ = body(good)
    members_at = pos + 9 + 4 + 4                   # flags, epochs; metadata and resolved: 0
    assert good[members_at:members_at + 4] == b"\0\0\0\0"
    for count in (2**32 - 1, 2**31, 1):
        payload = good[FRAME_SIZE:members_at] + struct.pack("<I", count) + good[members_at + 4:]
        end, reason, records, groups, _ = scan_groups(scanner_of(impl), frame(payload))
        assert (end, records, groups) == (0, 0, {})
        assert reason.startswith("undecodable record"), reason


def test_an_extra_field_named_as_a_known_one_is_corrupt(impl):
    """A hostile extra field cannot overwrite a decoded one (the encoder never writes it)."""
    data = encode_consumer_group("g", {**RECORD, "zz": 1}, 5)
    payload = data[FRAME_SIZE:].replace(b"\x02\x00\x00\x00zz", b"\x07\x00\x00\x00members")
    end, reason, _, groups, _ = scan_groups(scanner_of(impl), frame(payload))
    assert (end, groups) == (0, {}) and reason.startswith("undecodable record"), reason


def test_a_record_the_format_cannot_hold_fails_the_write_not_the_store(tmp_path):
    store = DurableStore(tmp_path, num_shards=1)
    try:
        for bad in ({**RECORD, "x": 1.5}, {**RECORD, "group_epoch": 2**31},
                    {**RECORD, "x": 2**63}):
            w = Waiter()
            store.store_consumer_group("g", bad, w)
            assert w.wait() == Errors.UNKNOWN_SERVER_ERROR
        w = Waiter()
        store.store_consumer_group("g", RECORD, w)
        assert w.wait() == NONE
    finally:
        store.close()
    groups, _ = DurableStore(tmp_path, num_shards=1).load_shard(0)
    assert groups == {"g": fold_consumer_record(None, RECORD)}


# -- torn tails --------------------------------------------------------------------------
def store_consumer_sync(store, gid, record):
    w = Waiter()
    store.store_consumer_group(gid, record, w)
    return w.wait()


def test_a_consumer_record_cut_at_any_byte_keeps_everything_before_it(scanner, tmp_path):
    rng = random.Random(7)
    store = DurableStore(tmp_path, num_shards=1, compact_after_segments=None)
    assert store_offsets_sync(store, "g", {("t", 0): OffsetAndMetadata(5)}) == NONE
    first = random_consumer_record(rng)
    assert store_consumer_sync(store, "g", first) == NONE
    assert store_consumer_sync(store, "h", random_consumer_record(rng)) == NONE
    assert store_consumer_sync(store, "g", {**RECORD, "full": False}) == NONE
    store.close()
    path = os.path.join(store.shard_dir(0), os.listdir(store.shard_dir(0))[0])
    whole = pathlib.Path(path).read_bytes()
    last = len(encode_consumer_group("g", RECORD, 0))
    before = len(whole) - last
    want_groups, want_offsets = DurableStore(tmp_path, num_shards=1).load_shard(0)
    assert want_groups["g"]["members"].keys() == (
        fold_consumer_record(first, RECORD)["members"].keys())
    pathlib.Path(path).write_bytes(whole[:before])
    expect = DurableStore(tmp_path, num_shards=1).load_shard(0)
    assert expect[0]["g"] == fold_consumer_record(None, first)
    for cut in range(before, len(whole)):
        pathlib.Path(path).write_bytes(whole[:cut])
        assert DurableStore(tmp_path, num_shards=1).load_shard(0) == expect, cut
        assert os.path.getsize(path) == before, cut
    # and whole, everything
    pathlib.Path(path).write_bytes(whole)
    assert DurableStore(tmp_path, num_shards=1).load_shard(0) == (want_groups, want_offsets)


# -- the fold through a real log ---------------------------------------------------------
def classic_record(gen, members):
    return {"protocol_type": "consumer", "generation": gen, "protocol": "range",
            "leader": members[0] if members else None,
            "members": [{"member_id": m, "instance_id": None, "client_id": "c",
                         "client_host": "h", "rebalance_timeout_ms": 1000,
                         "session_timeout_ms": 1000, "subscription": b"s",
                         "assignment": b"a"} for m in members]}


def random_ops(seed, n):
    """A random history of two groups: consumer records (full and partial, numbered
    with gaps), group tombstones, classic group records (a group changing type),
    offsets commits."""
    rng = random.Random(seed)
    ops = []
    seqs = {"g": 0, "h": 0}
    for _ in range(n):
        gid = rng.choice(["g", "h"])
        kind = rng.choice(["consumer"] * 6 + ["tombstone", "classic", "offsets"])
        if kind == "consumer":
            record = random_consumer_record(rng)
            # numbered as the coordinator numbers them, with now and then a gap (a
            # record the store lost) or none at all (written before they were numbered)
            seqs[gid] += rng.choice([1, 1, 1, 2])
            if rng.random() < 0.9:
                record["seq"] = seqs[gid]
            ops.append(("consumer", gid, record))
        elif kind == "tombstone":
            ops.append(("group", gid, None))
        elif kind == "classic":
            ops.append(("group", gid, classic_record(rng.randrange(9),
                                                     rng.sample(["x", "y"], rng.randrange(3)))))
        else:
            ops.append(("offsets", gid, {("t", rng.randrange(3)): OffsetAndMetadata(
                rng.randrange(100))}))
    return ops


def apply_ops(store, ops):
    for kind, gid, value in ops:
        w = Waiter()
        if kind == "consumer":
            store.store_consumer_group(gid, value, w)
        elif kind == "group":
            store.store_group(gid, value, w)
        else:
            store.store_offsets(gid, value, w)
        assert w.wait() == NONE


def loaded(path):
    """(groups, offsets) of a reopened store, without the load's written_ms marks, and
    without the groups that have offsets only (InMemoryStore keeps no record for them)."""
    groups, offsets = DurableStore(path, num_shards=1).load_shard(0)
    out = {}
    for gid, rec in groups.items():
        if rec is not None:
            rec = dict(rec)
            rec.pop("written_ms", None)
            out[gid] = rec
    return out, offsets


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.integers(1, 40))
def test_the_log_folds_as_fold_consumer_record_does_and_compaction_keeps_it(seed, n):
    """Written, reopened, loaded (by both twins, across several segments): the groups
    are InMemoryStore's, whose consumer groups are fold_consumer_record applied in
    order; a compaction keeps each consumer group as one full record, loading the same."""
    ops = random_ops(seed, n)
    memory = InMemoryStore()
    apply_ops(memory, ops)
    want = ({gid: rec for gid, rec in memory.groups.items()},
            {gid: offs for gid, offs in memory.offsets.items() if offs})
    with tempfile.TemporaryDirectory() as tmp:
        store = DurableStore(tmp, num_shards=1, fsync="interval", segment_bytes=1024,
                             compact_after_segments=None)
        apply_ops(store, ops)
        store.close()
        for impl in TWINS:
            with use_scanner(impl):
                assert loaded(tmp) == want, impl
        store = DurableStore(tmp, num_shards=1, fsync="interval", segment_bytes=1024,
                             compact_after_segments=None)
        store.compact(0)
        store.close()
        kinds = records_of(store.shard_dir(0))
        for gid, rec in want[0].items():
            if rec.get("consumer"):
                assert [k for k, g in kinds if g == gid and k != OFFSETS] == [CONSUMER_GROUP]
        for impl in TWINS:
            with use_scanner(impl):
                assert loaded(tmp) == want, impl


def records_of(shard_dir):
    """(type, group id) of every record of the shard's segments, in log order."""
    out = []
    for name in sorted(os.listdir(shard_dir)):
        data = pathlib.Path(os.path.join(shard_dir, name)).read_bytes()
        pos = 0
        while pos < len(data):
            length = int.from_bytes(data[pos + 4:pos + 8], "little")
            glen = int.from_bytes(data[pos + 17:pos + 21], "little")
            out.append((data[pos + 8], data[pos + 21:pos + 21 + glen].decode()))
            pos += FRAME_SIZE + length
    return out


# -- compaction, retention, tombstones ---------------------------------------------------
DAY = 24 * 3600 * 1000


class Clock:
    def __init__(self, ms=1_000_000):
        self.ms = ms

    def __call__(self):
        return self.ms


def test_compaction_keeps_one_full_record_and_drops_what_retention_expires(scanner, tmp_path):
    clock = Clock()
    store = DurableStore(tmp_path, num_shards=1, segment_bytes=1024, compact_after_segments=None,
                         offsets_retention_ms=DAY, wall_clock_ms=clock)
    rng = random.Random(3)
    history = [random_consumer_record(rng) for _ in range(30)]
    for rec in history:
        assert store_consumer_sync(store, "busy", rec) == NONE
    assert store_offsets_sync(store, "busy", {("t", 0): OffsetAndMetadata(1)}) == NONE
    # "empty": a consumer group whose last member left; "gone": deleted
    assert store_consumer_sync(store, "empty", {**RECORD, "full": True}) == NONE
    assert store_offsets_sync(store, "empty", {("t", 0): OffsetAndMetadata(2)}) == NONE
    assert store_consumer_sync(store, "empty", {**RECORD, "members": {"m-1": None}}) == NONE
    assert store_consumer_sync(store, "gone", RECORD) == NONE
    assert store_offsets_sync(store, "gone", {("t", 0): OffsetAndMetadata(3)}) == NONE
    assert store_group_sync(store, "gone", None) == NONE
    want = None
    for rec in history:
        want = fold_consumer_record(want, rec)
    before = store.load_shard(0)
    assert before[0]["busy"] == want
    assert before[0]["empty"]["members"] == {} and "gone" not in before[0]
    assert "gone" not in before[1] and before[1]["empty"] == {("t", 0): OffsetAndMetadata(2)}
    # within retention: the same groups, one record each
    stats = store.compact(0)
    assert store.load_shard(0) == before
    assert stats["records_after"] == 5 and stats["expired_groups"] == 0   # busy 2, empty 2, gone 1
    # past the offsets retention: the empty group goes with its offsets; the busy one stays
    clock.ms += DAY
    store.compact(0)
    groups, offsets = store.load_shard(0)
    store.close()
    assert set(groups) == {"busy"} and groups["busy"] == want
    assert offsets == {"busy": {("t", 0): OffsetAndMetadata(1)}}


def test_a_group_changes_type_both_ways_in_the_log(scanner, tmp_path):
    store = DurableStore(tmp_path, num_shards=1, compact_after_segments=None)
    assert store_consumer_sync(store, "g", {**RECORD, "full": True}) == NONE
    assert store_group_sync(store, "g", classic_record(3, ["x"])) == NONE
    assert store.load_shard(0)[0]["g"] == classic_record(3, ["x"])
    # a partial consumer record after a classic one starts the members afresh
    assert store_consumer_sync(store, "g", RECORD) == NONE
    groups = store.load_shard(0)[0]
    store.close()
    assert groups["g"] == fold_consumer_record(None, RECORD)
    assert list(groups["g"]["members"]) == ["m-1"]


# -- a coordinator restarted over its store ----------------------------------------------
def _hb(coord, gid, member_id, epoch, **kw):
    out = []
    coord.consumer_group_heartbeat(gid, member_id, epoch, callback=out.append, **kw)
    return out


def _answered(out, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not out:
        assert time.monotonic() < deadline, "no answer from the coordinator"
        time.sleep(0.001)
    return out[0]


def _settle(coord, gid):
    for _ in range(8):
        desc = coord.consumer_group_describe([gid])[0]
        for m in desc.members:
            _answered(_hb(coord, gid, m.member_id, m.member_epoch, instance_id=m.instance_id,
                          owned_partitions=m.assignment))
        if coord.consumer_group_describe([gid])[0].state == "Stable":
            return
    raise AssertionError("the group did not settle")


def test_a_restarted_coordinator_keeps_every_member_epoch_and_partition(impl, tmp_path):
    config = CoordinatorConfig(num_shards=4)
    store = DurableStore(tmp_path, num_shards=4, fsync="always")
    coord = GroupCoordinator(config, clock=ManualClock(0), store=store, impl=impl)
    load_into(coord, store)
    coord.set_topics({"foo": 6, "bar": 2})
    for gid in ("g1", "g2"):
        for i, topics in enumerate((["foo", "bar"], ["foo"], ["bar"])):
            r = _answered(_hb(coord, gid, f"{gid}-m{i}", 0, rebalance_timeout_ms=30_000,
                              subscribed_topic_names=topics, owned_partitions={},
                              instance_id="static" if i == 1 else None,
                              rack_id="r1" if i == 2 else None))
            assert r.error == NONE
        _settle(coord, gid)
    r = _answered(_hb(coord, "g2", "g2-m2", coord.consumer_group_describe(["g2"])[0]
                      .members[2].member_epoch, subscribed_topic_names=["foo"]))
    assert r.error == NONE                     # g2 left reconciling: members mid-change
    before = coord.consumer_group_describe(["g1", "g2"])
    assert before[0].state == "Stable" and len(before[1].members) == 3
    coord.close()
    store.close()

    store = DurableStore(tmp_path, num_shards=4, fsync="always")
    again = GroupCoordinator(config, clock=ManualClock(5_000), store=store, impl=impl)
    load_into(again, store)
    again.set_topics({"foo": 6, "bar": 2})
    try:
        assert again.consumer_group_describe(["g1", "g2"]) == before
        for m in before[0].members:           # a steady heartbeat: nothing to change
            r = _answered(_hb(again, "g1", m.member_id, m.member_epoch,
                              instance_id=m.instance_id, owned_partitions=m.assignment))
            assert (r.error, r.member_epoch, r.assignment) == (NONE, m.member_epoch, None)
        assert again.consumer_group_describe(["g1"])[0].group_epoch == before[0].group_epoch
    finally:
        again.close()
        store.close()


def test_an_emptied_consumer_group_and_a_deleted_one_come_back_as_they_were(impl, tmp_path):
    """The store's half of retention and deletion: an emptied consumer group comes back
    Empty with its offsets and the time it was emptied (written_ms, from which its
    offsets retention counts); a deleted one (its tombstone) comes back not at all,
    its offsets gone with it."""
    config = CoordinatorConfig(num_shards=1)
    store = DurableStore(tmp_path, num_shards=1, fsync="always", wall_clock_ms=Clock(777))
    coord = GroupCoordinator(config, clock=ManualClock(0), store=store, impl=impl)
    load_into(coord, store)
    coord.set_topics({"foo": 2})
    for gid in ("kept", "deleted"):
        r = _answered(_hb(coord, gid, "m", 0, rebalance_timeout_ms=30_000,
                          subscribed_topic_names=["foo"], owned_partitions={}))
        assert r.error == NONE
        assert coord.commit_offsets(gid, "m", r.member_epoch, {("foo", 0): 42}) == {
            ("foo", 0): NONE}
        assert _answered(_hb(coord, gid, "m", -1)).error == NONE      # leaves: Empty
    assert coord.delete_groups(["deleted"]) == {"deleted": NONE}
    coord.close()
    store.close()

    store = DurableStore(tmp_path, num_shards=1)
    groups, offsets = store.load_shard(0)
    assert set(groups) == {"kept"} and set(offsets) == {"kept"}
    assert groups["kept"]["members"] == {} and groups["kept"]["written_ms"] == 777
    again = GroupCoordinator(config, clock=ManualClock(0), store=store, impl=impl)
    load_into(again, store)
    try:
        kept, deleted = again.consumer_group_describe(["kept", "deleted"])
        assert (kept.error, kept.state, kept.members) == (NONE, "Empty", [])
        assert deleted.error == Errors.GROUP_ID_NOT_FOUND
        assert again.fetch_offsets("kept", [("foo", 0)])[1][("foo", 0)].offset == 42
        assert again.fetch_offsets("deleted", [("foo", 0)])[1][("foo", 0)].offset == -1
    finally:
        again.close()
        store.close()


def test_a_heartbeat_is_answered_only_after_its_record_is_fsynced(impl, tmp_path):
    """The fsync is held back: the joining member's answer waits for it; a failed fsync
    answers the store's error (NOT_COORDINATOR) and the record is cut off the log."""
    store = DurableStore(tmp_path, num_shards=1, fsync="always")
    gate = threading.Event()
    fail = []
    real_fsync = store._fsync

    def held_fsync(fd):
        gate.wait(10)
        if fail:
            raise OSError(5, "injected EIO")
        real_fsync(fd)

    store._fsync = held_fsync
    coord = GroupCoordinator(CoordinatorConfig(num_shards=1), clock=ManualClock(0),
                             store=store, impl=impl)
    coord.set_topics({"foo": 2})
    try:
        out = _hb(coord, "g", "m", 0, rebalance_timeout_ms=30_000,
                  subscribed_topic_names=["foo"], owned_partitions={})
        time.sleep(0.1)
        assert out == []
        gate.set()
        assert _answered(out).error == NONE
        gate.clear()
        fail.append(True)
        out = _hb(coord, "g", "m2", 0, rebalance_timeout_ms=30_000,
                  subscribed_topic_names=["foo"], owned_partitions={})
        time.sleep(0.1)
        assert out == []
        gate.set()
        assert _answered(out).error == Errors.NOT_COORDINATOR
    finally:
        fail.clear()
        gate.set()
        coord.close()
        store.close()
    groups, _ = DurableStore(tmp_path, num_shards=1).load_shard(0)
    assert list(groups["g"]["members"]) == ["m"]

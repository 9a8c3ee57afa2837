"""Torn writes and bit flips injected into real segment files: detected, reported and
handled (torn tail truncated with a log line; corruption in the middle refused with
file and offset, or truncated there with repair=True); plus the record codec and the
constructor's argument checks."""
from __future__ import annotations

import logging
import os
import pathlib
import random

import pytest

from fastcoord import Errors, OffsetAndMetadata
from fastcoord.storage import CorruptLogError, DurableStore
from fastcoord.storage.records import encode_group, encode_offsets, FRAME_SIZE
from fastcoord import _twins
from fastcoord.storage import log as log_module
from fastcoord.storage.log import ShardState, scan_segment
from helpers.storage import store_group_sync, store_offsets_sync

NONE = Errors.NONE

RECORD = {
    "protocol_type": "consumer", "generation": 7, "protocol": "range", "leader": "m-1",
    "members": [
        {"member_id": "m-1", "instance_id": None, "client_id": "c-1", "client_host": "/10.0.0.1",
         "rebalance_timeout_ms": 60000, "session_timeout_ms": 10000,
         "subscription": b"\x00\x01sub", "assignment": b"\x00\x02asg"},
        {"member_id": "m-2", "instance_id": "inst-ü", "client_id": "", "client_host": "",
         "rebalance_timeout_ms": 1, "session_timeout_ms": 2, "subscription": b"",
         "assignment": b""},
    ],
}


def write_records(path, n, *, segment_bytes=1 << 20):
    """n single-offset commits of group "g" (one shard): returns the record end offsets."""
    store = DurableStore(path, num_shards=1, segment_bytes=segment_bytes,
                         compact_after_segments=None)
    for i in range(n):
        assert store_offsets_sync(store, "g", {("t", i): OffsetAndMetadata(i, f"md{i}")}) == NONE
    store.close()
    return store.shard_dir(0)


def segments(shard_dir):
    return [os.path.join(shard_dir, n) for n in sorted(os.listdir(shard_dir))]


def record_starts(path):
    """Byte offsets of the records of a valid segment file."""
    data = pathlib.Path(path).read_bytes()
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        length = int.from_bytes(data[pos + 4:pos + 8], "little")
        pos += FRAME_SIZE + length
    return starts


def flip(path, offset, mask=0x10):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ mask]))


@pytest.fixture
def scanner(impl, monkeypatch):
    """Load through the `impl` twin's log scanner (the store uses the default twin)."""
    monkeypatch.setattr(log_module, "_scanner", _twins.module(impl, "storage.logscan"))
    return impl


def loaded_partitions(path, **kw):
    _, offsets = DurableStore(path, num_shards=1, **kw).load_shard(0)
    return sorted(p for _, p in offsets.get("g", {}))


# -- codec -------------------------------------------------------------------------------
def test_group_record_round_trips_exactly():
    state = ShardState()
    data = encode_group("grp-é", RECORD, 123) + encode_group(
        "empty", {"protocol_type": None, "generation": 0, "protocol": None, "leader": None,
                  "members": []}, 5)
    assert scan_segment(data, state) == (len(data), None)
    assert state.groups["grp-é"] == RECORD
    assert state.groups["empty"]["members"] == [] and state.groups["empty"]["leader"] is None
    assert state.group_ms == {"grp-é": 123, "empty": 5}


def test_offsets_round_trip_with_every_kind_of_metadata():
    offsets = {("t", 0): OffsetAndMetadata(1, "", -1, 10),
               ("t", 1): OffsetAndMetadata(2**62, None, 5, -1),
               ("tópico", -3): OffsetAndMetadata(-1, "mé" * 1000, 2**31 - 1, 2**62),
               ("u", 2**31 - 1): OffsetAndMetadata(0, "x", -2**31, 0)}
    state = ShardState()
    data = encode_offsets("g", offsets, 1) + encode_offsets("h", {("a", 0): OffsetAndMetadata(3)}, 2)
    assert scan_segment(data, state) == (len(data), None)
    assert state.offsets["g"] == offsets
    assert state.offsets["h"] == {("a", 0): OffsetAndMetadata(3)}


# -- torn writes -----------------------------------------------------------------------------
@pytest.mark.parametrize("cut", [1, 4, 8, 12, "half"])
def test_torn_last_record_is_truncated_with_a_log_line(scanner, tmp_path, caplog, cut):
    shard_dir = write_records(tmp_path, 10)
    (path,) = segments(shard_dir)
    starts = record_starts(path)
    size = os.path.getsize(path)
    last_len = size - starts[-1]
    cut = last_len // 2 if cut == "half" else cut
    os.truncate(path, size - cut)
    with caplog.at_level(logging.WARNING, logger="fastcoord.storage"):
        assert loaded_partitions(tmp_path) == list(range(9))
    assert os.path.getsize(path) == starts[-1]
    assert "torn record" in caplog.text and path in caplog.text
    # the log is usable again: a new write lands after the last good record
    store = DurableStore(tmp_path, num_shards=1)
    assert store_offsets_sync(store, "g", {("t", 9): OffsetAndMetadata(99)}) == NONE
    store.close()
    assert loaded_partitions(tmp_path) == list(range(10))


def test_torn_tail_is_recovered_before_the_first_write_even_without_a_load(tmp_path, caplog):
    shard_dir = write_records(tmp_path, 5)
    (path,) = segments(shard_dir)
    os.truncate(path, os.path.getsize(path) - 3)
    store = DurableStore(tmp_path, num_shards=1)
    with caplog.at_level(logging.WARNING, logger="fastcoord.storage"):
        assert store_offsets_sync(store, "g", {("t", 7): OffsetAndMetadata(7)}) == NONE
    store.close()
    assert "torn record" in caplog.text
    assert loaded_partitions(tmp_path) == [0, 1, 2, 3, 7]


def test_zero_filled_tail_is_treated_as_torn(scanner, tmp_path, caplog):
    shard_dir = write_records(tmp_path, 4)
    (path,) = segments(shard_dir)
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(bytes(4096))                  # what a crash can leave after an extending write
    with caplog.at_level(logging.WARNING, logger="fastcoord.storage"):
        assert loaded_partitions(tmp_path) == [0, 1, 2, 3]
    assert os.path.getsize(path) == size
    assert "torn record" in caplog.text


# -- bit flips ---------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["crc", "length", "type", "payload"])
def test_bit_flip_in_the_middle_refuses_to_load_naming_file_and_offset(scanner, tmp_path, where):
    shard_dir = write_records(tmp_path, 10)
    (path,) = segments(shard_dir)
    start = record_starts(path)[4]
    offset = start + {"crc": 1, "length": 5, "type": FRAME_SIZE, "payload": FRAME_SIZE + 20}[where]
    flip(path, offset, 0x80 if where == "length" else 0x10)
    before = pathlib.Path(path).read_bytes()
    with pytest.raises(CorruptLogError) as info:
        DurableStore(tmp_path, num_shards=1).load_shard(0)
    err = info.value
    assert (err.path, err.offset, err.shard) == (path, start, 0)
    assert path in str(err) and f"offset {start}" in str(err) and "repair=True" in str(err)
    assert pathlib.Path(path).read_bytes() == before        # nothing silently dropped
    # writes to the shard are refused too rather than appended after the damage
    store = DurableStore(tmp_path, num_shards=1)
    assert store_offsets_sync(store, "g", {("t", 0): OffsetAndMetadata(1)}) == Errors.NOT_COORDINATOR
    store.close()
    assert pathlib.Path(path).read_bytes() == before


def test_repair_truncates_at_the_corrupt_record_and_logs_it(tmp_path, caplog):
    shard_dir = write_records(tmp_path, 10)
    (path,) = segments(shard_dir)
    start = record_starts(path)[6]
    flip(path, start + FRAME_SIZE + 15)
    with caplog.at_level(logging.ERROR, logger="fastcoord.storage"):
        assert loaded_partitions(tmp_path, repair=True) == list(range(6))
    assert os.path.getsize(path) == start
    assert "REPAIR" in caplog.text and path in caplog.text and f"offset {start}" in caplog.text
    assert loaded_partitions(tmp_path) == list(range(6))   # the repaired log loads cleanly


def test_corruption_in_an_older_segment_and_its_repair(scanner, tmp_path, caplog):
    shard_dir = write_records(tmp_path, 60, segment_bytes=1024)
    paths = segments(shard_dir)
    assert len(paths) >= 3
    first = paths[0]
    start = record_starts(first)[2]
    flip(first, start + FRAME_SIZE + 3)
    with pytest.raises(CorruptLogError) as info:
        loaded_partitions(tmp_path)
    assert (info.value.path, info.value.offset) == (first, start)
    with caplog.at_level(logging.ERROR, logger="fastcoord.storage"):
        assert loaded_partitions(tmp_path, repair=True) == [0, 1]
    assert segments(shard_dir) == [first]
    assert f"{len(paths) - 1} later segment(s)" in caplog.text


@pytest.mark.parametrize("where", ["crc", "payload"])
def test_damaged_complete_last_record_is_corruption_not_a_torn_write(scanner, tmp_path, caplog, where):
    """A flip in the very last record leaves a complete frame (its length's worth of
    bytes is in the file) with a bad CRC: its write completed, so it may have been
    acknowledged. It is refused like corruption elsewhere, saying so, and only repair
    drops it (logged as a repair, not as a never-acknowledged write)."""
    shard_dir = write_records(tmp_path, 5)
    (path,) = segments(shard_dir)
    start = record_starts(path)[-1]
    flip(path, start + {"crc": 0, "payload": FRAME_SIZE + 2}[where])
    before = pathlib.Path(path).read_bytes()
    with pytest.raises(CorruptLogError) as info:
        loaded_partitions(tmp_path)
    assert (info.value.path, info.value.offset) == (path, start)
    assert "not a torn write" in str(info.value) and "may have been acknowledged" in str(info.value)
    assert pathlib.Path(path).read_bytes() == before
    with caplog.at_level(logging.WARNING, logger="fastcoord.storage"):
        assert loaded_partitions(tmp_path, repair=True) == [0, 1, 2, 3]
    assert "REPAIR" in caplog.text and "never acknowledged" not in caplog.text
    assert os.path.getsize(path) == start


def test_garbage_after_the_last_record_is_a_torn_tail(scanner, tmp_path, caplog):
    """Bytes that hold no valid frame after the last record (no complete frame at the
    bad position: its length runs past the end) are a torn tail: truncated."""
    shard_dir = write_records(tmp_path, 4)
    (path,) = segments(shard_dir)
    size = os.path.getsize(path)
    rng = random.Random(7)
    garbage = bytearray(rng.randbytes(1 << 16))
    garbage[4:8] = (1 << 20).to_bytes(4, "little")      # a length past the end of the file
    with open(path, "ab") as f:
        f.write(garbage)
    with caplog.at_level(logging.WARNING, logger="fastcoord.storage"):
        assert loaded_partitions(tmp_path) == [0, 1, 2, 3]
    assert os.path.getsize(path) == size
    assert "torn record" in caplog.text and "cut short" in caplog.text


def test_group_tombstone_and_group_records_survive_reopen(tmp_path):
    store = DurableStore(tmp_path, num_shards=1)
    assert store_group_sync(store, "a", RECORD) == NONE
    assert store_group_sync(store, "b", RECORD) == NONE
    assert store_offsets_sync(store, "b", {("t", 0): OffsetAndMetadata(1)}) == NONE
    assert store_group_sync(store, "b", None) == NONE
    assert store_offsets_sync(store, "b", {("t", 1): OffsetAndMetadata(2)}) == NONE
    store.close()
    groups, offsets = DurableStore(tmp_path, num_shards=1).load_shard(0)
    assert groups == {"a": RECORD, "b": None}
    assert offsets == {"b": {("t", 1): OffsetAndMetadata(2)}}


# -- constructor ------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, exc, name", [
    (dict(data_dir=5), TypeError, "data_dir"),
    (dict(num_shards=0), ValueError, "num_shards"),
    (dict(num_shards="3"), TypeError, "num_shards"),
    (dict(fsync="sometimes"), ValueError, "fsync"),
    (dict(fsync=1), TypeError, "fsync"),
    (dict(fsync_interval_ms=0), ValueError, "fsync_interval_ms"),
    (dict(segment_bytes=10), ValueError, "segment_bytes"),
    (dict(segment_bytes=1.5), TypeError, "segment_bytes"),
    (dict(repair="yes"), TypeError, "repair"),
    (dict(tombstone_retention_ms=-1), ValueError, "tombstone_retention_ms"),
    (dict(offsets_retention_ms=-5), ValueError, "offsets_retention_ms"),
    (dict(compact_after_segments=0), ValueError, "compact_after_segments"),
    (dict(compact_live_ratio=0), ValueError, "compact_live_ratio"),
    (dict(compact_live_ratio=1.5), ValueError, "compact_live_ratio"),
    (dict(compact_live_ratio="half"), TypeError, "compact_live_ratio"),
    (dict(writer_threads=0), ValueError, "writer_threads"),
    (dict(wall_clock_ms=3), TypeError, "wall_clock_ms"),
])
def test_bad_constructor_arguments_name_the_argument(tmp_path, kwargs, exc, name):
    kwargs.setdefault("data_dir", tmp_path)
    with pytest.raises(exc, match=name):
        DurableStore(**kwargs)


def test_reopening_with_another_shard_count_is_refused(tmp_path):
    DurableStore(tmp_path, num_shards=8).close()
    with pytest.raises(ValueError, match="num_shards"):
        DurableStore(tmp_path, num_shards=50)


def test_bad_shard_numbers(tmp_path):
    store = DurableStore(tmp_path, num_shards=4)
    with pytest.raises(ValueError, match="shard"):
        store.load_shard(4)
    with pytest.raises(TypeError, match="shard"):
        store.compact("0")
    store.close()

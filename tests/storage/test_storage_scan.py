"""The log scanner's twins agree (fastcoord.storage._native.logscan, fastcoord.storage._pure.logscan): on
random logs of every record type, whole, cut short, with bytes flipped, with garbage
inserted or appended, both apply the same records to the same state, stop at the same
offset for the same kind of reason, and find the same next valid frame. Plus the
scanner's own behaviour, through whichever twin is in use."""
from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings, strategies as st

import fastcoord
from fastcoord import OffsetAndMetadata
from fastcoord.storage._pure import logscan as pure
from fastcoord.storage.records import (
    encode_consumer_group, encode_group, encode_group_tombstone, encode_offset_tombstones,
    encode_offsets, frame,
)
from fastcoord.storage.log import complete_frame, find_frame_after
from helpers.cgrecords import random_consumer_record

GROUPS = ["g", "h", "grp-é", ""]
TOPICS = ["t", "u", "tópico"]
TOMB = object()


def partition(rng: random.Random) -> int:
    """Mostly a few small ones (keys repeat), some negative or past 2**16."""
    return rng.choice([rng.randrange(-3, 6)] * 4 + [70_000, 2**31 - 1, -2**31])


def random_record(rng: random.Random) -> bytes:
    gid = rng.choice(GROUPS)
    kind = rng.choice(["offsets", "offsets", "offsets", "group", "tombstone", "offset-tombstones",
                       "consumer", "consumer", "odd"])
    if kind == "offsets":
        offsets = {(rng.choice(TOPICS), partition(rng)):
                   OffsetAndMetadata(rng.randrange(-2**63, 2**63),
                                     rng.choice(["", None, "m", "mé" * 3]),
                                     rng.randrange(-2**31, 2**31), rng.choice([-1, 0, 2**62]))
                   for _ in range(rng.randrange(0, 6))}
        return encode_offsets(gid, offsets, rng.randrange(0, 2**40))
    if kind == "group":
        members = [{"member_id": f"m{i}", "instance_id": rng.choice([None, "", "i-é"]),
                    "client_id": rng.choice(["", "c"]), "client_host": "/10.0.0.1",
                    "rebalance_timeout_ms": rng.randrange(-2**31, 2**31),
                    "session_timeout_ms": rng.randrange(2**31),
                    "subscription": rng.randbytes(rng.randrange(3)),
                    "assignment": rng.randbytes(rng.randrange(3))}
                   for i in range(rng.choice([0, 0, 1, 3]))]
        return encode_group(gid, {"protocol_type": rng.choice(["consumer", None]),
                                  "generation": rng.randrange(9),
                                  "protocol": rng.choice([None, "range"]), "leader": "m",
                                  "members": members}, 5)
    if kind == "tombstone":
        return encode_group_tombstone(gid, rng.randrange(100))
    if kind == "consumer":
        return encode_consumer_group(gid, random_consumer_record(rng), rng.randrange(100))
    if kind == "offset-tombstones":
        return encode_offset_tombstones(
            gid, [(rng.choice(TOPICS), partition(rng)) for _ in range(rng.randrange(3))], 9)
    # a framed payload that does not decode: an unknown type, a body of random bytes, a
    # group id not UTF-8 or past the record
    glen = rng.choice([1, 1, 1, 200])
    return frame(bytes([rng.choice([0, 1, 1, 2, 4, 5, 6, 6, 9])]) + rng.randbytes(8)
                 + glen.to_bytes(4, "little") + rng.choice([b"g", b"\xff"])
                 + rng.randbytes(rng.randrange(0, 40)))


def damaged_log(seed: int) -> bytes:
    rng = random.Random(seed)
    data = bytearray(b"".join(random_record(rng) for _ in range(rng.randrange(0, 12))))
    for _ in range(rng.randrange(0, 3)):
        how = rng.choice(["flip", "cut", "garbage", "insert", "zeros"])
        if how == "flip" and data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif how == "cut" and data:
            del data[rng.randrange(len(data)):]
        elif how == "garbage":
            data += rng.randbytes(rng.randrange(1, 300))
        elif how == "insert":
            at = rng.randrange(len(data) + 1)
            data[at:at] = rng.randbytes(rng.randrange(1, 40))
        elif how == "zeros":
            data += bytes(rng.randrange(1, 300))
    return bytes(data)


def scanned(module, data, state=None):
    """What scanning `data` returns and leaves in `state` (groups, offsets, group_ms,
    offsets_ms): a later segment's scan starts from an earlier one's state."""
    state = ({}, {}, {}, {}) if state is None else state
    end, reason, records, entries = module.scan(data, *state, TOMB)
    kind = None if reason is None else reason.split(":")[0].split(" ")[0]
    return (end, kind, records, entries) + state


@pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE, reason="needs the native twin to compare")
@settings(max_examples=400, deadline=None)
@given(st.integers(0, 2**32))
def test_the_twins_agree_on_random_logs(seed):
    from fastcoord.storage._native import logscan as native
    data = damaged_log(seed)
    got = scanned(native, data)
    assert got == scanned(pure, data)
    end = got[0]
    if end < len(data):
        assert native.find_frame_after(data, end) == pure.find_frame_after(data, end)
    for pos in (0, len(data) // 2):
        assert native.find_frame_after(data, pos) == pure.find_frame_after(data, pos)
    # a second segment applied over the first's state
    later = damaged_log(seed + 1)
    assert scanned(native, later, got[4:]) == scanned(pure, later, scanned(pure, data)[4:])
    # both segments checked, then applied at once (as a load does: newest first across
    # segments), over some earlier state
    earlier = damaged_log(seed + 2)
    assert checked_together(native, [data, later], earlier) == \
        checked_together(pure, [data, later], earlier)
    assert checked_together(pure, [data, later], earlier) == \
        scanned(pure, later, scanned(pure, data, scanned(pure, earlier)[4:])[4:])[4:]


def checked_together(module, segments, earlier):
    """The state after scanning `earlier`, then checking each valid prefix of
    `segments` into one Records and applying it once."""
    state = scanned(module, earlier)[4:]
    recs = module.Records()
    for data in segments:
        module.check(data, recs)
    module.apply(recs, *state, TOMB)
    return state


def test_a_key_keeps_its_newest_value_however_its_partition_was_numbered():
    """The native scanner numbers keys in an array per topic that grows with the topic's
    keys: a partition first seen beyond it (newest record) must still be the same key
    when the array has grown past it (older records)."""
    newest = encode_offsets("g", {("t", 40): OffsetAndMetadata(3)}, 3)
    middle = encode_offsets("g", {("t", p): OffsetAndMetadata(2) for p in range(36)}, 2)
    oldest = encode_offsets("g", {("t", 40): OffsetAndMetadata(1)}, 1)
    data = oldest + middle + newest
    for module in (fastcoord._twins.module(None, "storage.logscan"), pure):
        offsets = {}
        module.scan(data, {}, offsets, {}, {}, TOMB)
        assert offsets["g"][("t", 40)] == OffsetAndMetadata(3), module


def test_a_group_record_does_not_read_past_its_frame():
    """A group record (its CRC intact) whose last field's length runs past the frame is
    corrupt, even when the next record's bytes could fill it."""
    whole = encode_group("g", {"protocol_type": None, "generation": 1, "protocol": None,
                               "leader": None, "members": [
                                   {"member_id": "m", "instance_id": None, "client_id": "c",
                                    "client_host": "h", "rebalance_timeout_ms": 1,
                                    "session_timeout_ms": 2, "subscription": b"s",
                                    "assignment": b"abc"}]}, 7)
    payload = whole[8:-3]                 # the assignment's length still says 3
    data = frame(payload) + encode_group_tombstone("h", 1)
    scanner = fastcoord._twins.module(None, "storage.logscan")
    for module in (scanner, pure):
        groups = {}
        end, reason, records, _ = module.scan(data, groups, {}, {}, {}, TOMB)
        assert (end, records, groups) == (0, 0, {}), module
        assert reason.startswith("undecodable record"), reason
    # and one with bytes left over after its fields
    data = frame(whole[8:] + b"x")
    for module in (scanner, pure):
        assert module.scan(data, {}, {}, {}, {}, TOMB)[:2] == (
            0, "undecodable record: group record does not fill the record")


def test_scan_stops_at_the_first_bad_record_and_reports_it():
    a = encode_offsets("g", {("t", 0): OffsetAndMetadata(1)}, 1)
    b = encode_offsets("g", {("t", 0): OffsetAndMetadata(2), ("t", 1): OffsetAndMetadata(3)}, 2)
    bad = bytearray(b)
    bad[-1] ^= 1
    groups, offsets, group_ms, offsets_ms = {}, {}, {}, {}
    end, reason, records, entries = fastcoord._twins.module(None, "storage.logscan").scan(
        a + bytes(bad) + a, groups, offsets, group_ms, offsets_ms, TOMB)
    assert (end, reason, records, entries) == (len(a), "CRC32C mismatch", 1, 1)
    assert offsets == {"g": {("t", 0): OffsetAndMetadata(1)}} and offsets_ms == {"g": 1}


def test_find_frame_after_skips_garbage_and_finds_the_next_record():
    rec = encode_group_tombstone("g", 1)
    garbage = random.Random(3).randbytes(5000)
    data = rec + garbage + rec
    assert find_frame_after(data, 0) == len(rec) + len(garbage)
    assert find_frame_after(data + bytes(100), len(data)) is None
    assert find_frame_after(rec + os.urandom(3000), 0) is None


def test_a_complete_frame_is_told_from_one_cut_short():
    rec = encode_group_tombstone("g", 1)
    assert complete_frame(rec, 0)
    assert not complete_frame(rec[:-1], 0)          # cut short by the end of the file
    assert not complete_frame(rec[:5], 0)           # not even a header
    assert not complete_frame(bytes(64), 0)         # zeros: length 0 is no frame

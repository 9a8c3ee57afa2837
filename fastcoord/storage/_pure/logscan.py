"""Scanning a shard log's bytes (pure twin of fastcoord.storage._native.logscan).

check:         check a segment's records up to the first bad one, queueing them in Records.
apply:         apply queued records (of one segment or several) to the latest-record-per-key
               dicts.
scan:          check then apply one segment.
find_frame_after: the first valid frame after a bad one (tells a torn tail from
               corruption followed by valid records).

Both twins give the same results; the native one decodes offsets records in C, and
checks frame headers in C before it computes any CRC.
"""
from __future__ import annotations

import re
import struct
from typing import Optional, Tuple

from crc32c import crc32c

from ..records import (
    CONSUMER_GROUP, FRAME, FRAME_SIZE, GROUP, GROUP_TOMBSTONE, HEAD, HEAD_SIZE, MAX_PAYLOAD,
    MIN_PAYLOAD, OFFSET_TOMBSTONES, OFFSETS, RECORD_TYPES, FrameError, decode_consumer_record,
    decode_group_record, decode_offset_tombstones, decode_offsets, fold_consumer,
)

__all__ = ["Records", "check", "apply", "scan", "find_frame_after", "plausible_frame"]

_DECODE_ERRORS = (struct.error, FrameError, UnicodeDecodeError, IndexError)


class Records:
    """The checked records of one or more segments, in log order, waiting for `apply`:
    (kind, group id, write_ms, decoded value), holding nothing of the buffers."""

    __slots__ = ("recs",)

    def __init__(self) -> None:
        self.recs: list = []

    def release(self) -> None:
        self.recs = []


def check(data, out: Records) -> Tuple[int, Optional[str], int, int]:
    """Check every frame of `data` (CRC, decoding) up to the first bad one, appending
    the valid records to `out`. Returns (end, reason, records, entries): end is
    len(data) and reason None when the whole buffer is valid, else the offset of the
    first bad record and why; `records` checked; `entries` their offset entries plus one
    per record of another type (compaction's measure of what was read)."""
    pos = 0
    n = len(data)
    mv = memoryview(data)
    unpack_frame = FRAME.unpack_from
    unpack_head = HEAD.unpack_from
    recs = out.recs
    records = 0
    entries = 0
    while pos < n:
        if pos + FRAME_SIZE > n:
            return pos, "truncated frame header", records, entries
        crc, length = unpack_frame(data, pos)
        if length < MIN_PAYLOAD or length > MAX_PAYLOAD:
            return pos, f"bad record length {length}", records, entries
        end = pos + FRAME_SIZE + length
        if end > n:
            return pos, f"record length {length} runs past the end of the file", records, entries
        if crc32c(mv[pos + 4:end]) != crc:
            return pos, "CRC32C mismatch", records, entries
        body = pos + FRAME_SIZE
        kind, write_ms, glen = unpack_head(data, body)
        gend = body + HEAD_SIZE + glen
        if gend > end:
            return pos, "group id runs past the record", records, entries
        try:
            gid = bytes(mv[body + HEAD_SIZE:gend]).decode("utf-8", "surrogatepass")
            if kind == OFFSETS:
                value = decode_offsets(data, gend, end)
                entries += len(value)
            elif kind == GROUP:
                value = decode_group_record(data, gend, end)
                entries += 1
            elif kind == GROUP_TOMBSTONE:
                value = None
                entries += 1
            elif kind == OFFSET_TOMBSTONES:
                value = decode_offset_tombstones(data, gend, end)
                entries += 1
            elif kind == CONSUMER_GROUP:
                value = decode_consumer_record(data, gend, end)
                entries += 1
            else:
                return pos, f"unknown record type {kind}", records, entries
        except _DECODE_ERRORS as exc:
            return pos, f"undecodable record: {exc}", records, entries
        recs.append((kind, gid, write_ms, value))
        records += 1
        pos = end
    return pos, None, records, entries


def apply(recs: Records, groups: dict, offsets: dict, group_ms: dict, offsets_ms: dict,
          tombstone) -> None:
    """Apply the checked records of `recs` in order (after what the dicts hold), then
    release them."""
    for kind, gid, write_ms, value in recs.recs:
        if kind == OFFSETS:
            current = offsets.get(gid)
            if current is None:
                offsets[gid] = value
            else:
                current.update(value)
            offsets_ms[gid] = write_ms
        elif kind == GROUP:
            groups[gid] = value
            group_ms[gid] = write_ms
        elif kind == CONSUMER_GROUP:
            previous = groups.get(gid)
            folded = fold_consumer(previous, value)
            if folded is not previous:  # (a partial record that does not follow: skipped)
                groups[gid] = folded
                group_ms[gid] = write_ms
        elif kind == GROUP_TOMBSTONE:
            groups[gid] = tombstone
            offsets.pop(gid, None)
            offsets_ms.pop(gid, None)
            group_ms[gid] = write_ms
        else:
            current = offsets.get(gid)
            if current is not None:
                for tp in value:
                    current.pop(tp, None)
                if not current:
                    del offsets[gid]
                    offsets_ms.pop(gid, None)
    recs.release()


def scan(data, groups: dict, offsets: dict, group_ms: dict, offsets_ms: dict, tombstone
         ) -> Tuple[int, Optional[str], int, int]:
    """Apply every valid record of `data` in order (check, then apply). Returns (end,
    reason, records, entries) as check does."""
    recs = Records()
    result = check(data, recs)
    apply(recs, groups, offsets, group_ms, offsets_ms, tombstone)
    return result


# A plausible frame header at the position the look-ahead starts: the length's top
# byte and the group length's top byte below 0x10 (both < 2**28 = MAX_PAYLOAD) and a
# known record type (1 to 4, 6). The regular expression engine walks the bytes; Python looks only
# at the positions it finds.
_PLAUSIBLE = re.compile(rb"(?=[\x00-\xff]{7}[\x00-\x0f][\x01-\x04\x06][\x00-\xff]{11}[\x00-\x0f])")


_KINDS = frozenset(RECORD_TYPES)


def plausible_frame(data, q: int, n: int) -> bool:
    """The header checks every valid frame passes (before its CRC): the length in
    range and inside the buffer, a known record type, the group id inside the record."""
    if q + FRAME_SIZE + MIN_PAYLOAD > n:
        return False
    _, length = FRAME.unpack_from(data, q)
    if length < MIN_PAYLOAD or length > MAX_PAYLOAD or q + FRAME_SIZE + length > n:
        return False
    kind, _, glen = HEAD.unpack_from(data, q + FRAME_SIZE)
    return kind in _KINDS and glen <= length - HEAD_SIZE


def find_frame_after(data, pos: int) -> Optional[int]:
    """The offset of the first frame strictly after `pos` whose header is plausible and
    whose CRC checks out, or None."""
    n = len(data)
    mv = memoryview(data)
    for match in _PLAUSIBLE.finditer(data, pos + 1):
        q = match.start()
        if not plausible_frame(data, q, n):
            continue
        crc, length = FRAME.unpack_from(data, q)
        if crc32c(mv[q + 4:q + FRAME_SIZE + length]) == crc:
            return q
    return None

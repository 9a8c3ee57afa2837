"""Scanning a shard log's bytes (pure twin of fastcoord._native.logscan).

scan:          apply every valid record of a segment's bytes to the latest-record-per-key
               dicts, stopping at the first bad one.
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

from ..storage.records import (
    FRAME, FRAME_SIZE, GROUP, GROUP_TOMBSTONE, HEAD, HEAD_SIZE, MAX_PAYLOAD, MIN_PAYLOAD,
    OFFSET_TOMBSTONES, OFFSETS, FrameError, decode_group_record, decode_offset_tombstones,
    decode_offsets,
)

__all__ = ["scan", "find_frame_after", "apply_other", "plausible_frame"]

_DECODE_ERRORS = (struct.error, FrameError, UnicodeDecodeError, IndexError)


def scan(data, groups: dict, offsets: dict, group_ms: dict, offsets_ms: dict, tombstone
         ) -> Tuple[int, Optional[str], int, int]:
    """Apply every valid record of `data` in order. Returns (end, reason, records,
    entries): end is len(data) and reason None when the whole buffer is valid, else the
    offset of the first bad record and why; `records` applied; `entries` their offset
    entries plus one per record of another type (compaction's measure of what was read)."""
    pos = 0
    n = len(data)
    mv = memoryview(data)
    unpack_frame = FRAME.unpack_from
    unpack_head = HEAD.unpack_from
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
                decoded = decode_offsets(data, gend, end)
                current = offsets.get(gid)
                if current is None:
                    offsets[gid] = decoded
                else:
                    current.update(decoded)
                offsets_ms[gid] = write_ms
                entries += len(decoded)
            elif kind in (GROUP, GROUP_TOMBSTONE, OFFSET_TOMBSTONES):
                apply_other(kind, data, gend, end, gid, write_ms, groups, offsets, group_ms,
                            offsets_ms, tombstone)
                entries += 1
            else:
                return pos, f"unknown record type {kind}", records, entries
        except _DECODE_ERRORS as exc:
            return pos, f"undecodable record: {exc}", records, entries
        records += 1
        pos = end
    return pos, None, records, entries


def apply_other(kind: int, data, pos: int, end: int, gid: str, write_ms: int, groups: dict,
                offsets: dict, group_ms: dict, offsets_ms: dict, tombstone) -> None:
    """Apply a group record, group tombstone or offset tombstones record (body [pos, end)
    after the head): the records both twins decode in Python."""
    if kind == GROUP:
        groups[gid] = decode_group_record(data, pos)
        group_ms[gid] = write_ms
    elif kind == GROUP_TOMBSTONE:
        groups[gid] = tombstone
        offsets.pop(gid, None)
        offsets_ms.pop(gid, None)
        group_ms[gid] = write_ms
    else:
        current = offsets.get(gid)
        for tp in decode_offset_tombstones(data, pos, end):
            if current is not None:
                current.pop(tp, None)
        if current is not None and not current:
            del offsets[gid]
            offsets_ms.pop(gid, None)


# A plausible frame header at the position the look-ahead starts: the length's top
# byte and the group length's top byte below 0x10 (both < 2**28 = MAX_PAYLOAD) and a
# known record type. The regular expression engine walks the bytes; Python looks only
# at the positions it finds.
_PLAUSIBLE = re.compile(rb"(?=[\x00-\xff]{7}[\x00-\x0f][\x01-\x04][\x00-\xff]{11}[\x00-\x0f])")


def plausible_frame(data, q: int, n: int) -> bool:
    """The header checks every valid frame passes (before its CRC): the length in
    range and inside the buffer, a known record type, the group id inside the record."""
    if q + FRAME_SIZE + MIN_PAYLOAD > n:
        return False
    _, length = FRAME.unpack_from(data, q)
    if length < MIN_PAYLOAD or length > MAX_PAYLOAD or q + FRAME_SIZE + length > n:
        return False
    kind, _, glen = HEAD.unpack_from(data, q + FRAME_SIZE)
    return 1 <= kind <= 4 and glen <= length - HEAD_SIZE


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

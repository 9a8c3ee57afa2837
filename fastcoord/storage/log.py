"""Reading a shard log: segment files, the latest-record-per-key state, recovery.

A shard's directory holds segments `<id:020d>.log` (ids increase; the log is their
concatenation in id order). Only the last segment is ever appended to. Compaction
writes `<id>.log.compact` and renames it over the first segment it replaces; a
leftover `.compact` file is an interrupted compaction and is removed on open.
"""
from __future__ import annotations

import logging
import os
import struct
from typing import Dict, List, Optional, Tuple

from crc32c import crc32c

from .records import (
    FRAME, FRAME_SIZE, GROUP, GROUP_TOMBSTONE, HEAD, HEAD_SIZE, MAX_PAYLOAD, MIN_PAYLOAD,
    OFFSET_TOMBSTONES, OFFSETS, FrameError, check_frame, decode_group_record, decode_offsets,
    decode_offset_tombstones,
)

__all__ = ["CorruptLogError", "ShardState", "list_segments", "segment_path", "fsync_dir",
           "scan_segment", "find_frame_after", "remove_compaction_leftovers", "SEGMENT_SUFFIX",
           "COMPACT_SUFFIX"]

log = logging.getLogger("fastcoord.storage")

SEGMENT_SUFFIX = ".log"
COMPACT_SUFFIX = ".log.compact"
TOMBSTONE = object()        # groups[g] after a group tombstone (until a new record)


class CorruptLogError(Exception):
    """A record in the middle of a shard log fails its length/CRC check (or does not
    decode): the shard refuses to load rather than return silently wrong data.
    `path` and `offset` locate the bad record; load with `repair=True` to truncate there."""

    def __init__(self, path: str, offset: int, reason: str, shard: Optional[int] = None) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        self.shard = shard
        super().__init__(f"corrupt record in {path} at byte offset {offset}: {reason} "
                         f"(shard {shard} not loaded; load with repair=True to truncate the "
                         f"log there, dropping everything after it)")


def segment_path(directory: str, seg_id: int) -> str:
    return os.path.join(directory, f"{seg_id:020d}{SEGMENT_SUFFIX}")


def list_segments(directory: str) -> List[int]:
    """Segment ids in log order. (Only lists: a `.log.compact` file here may belong to a
    compaction that is running; see remove_compaction_leftovers.)"""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(name[:-len(SEGMENT_SUFFIX)]) for name in names
                  if name.endswith(SEGMENT_SUFFIX) and name[:-len(SEGMENT_SUFFIX)].isdigit())


def remove_compaction_leftovers(directory: str) -> None:
    """Delete what an interrupted compaction left (its `.log.compact` file; the segments
    it was replacing are intact). Only for a shard no compaction is running on: its
    recovery, before any compaction of it can start."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.endswith(COMPACT_SUFFIX):
            path = os.path.join(directory, name)
            log.warning("removing %s: left over by an interrupted compaction (the segments "
                        "it was replacing are intact)", path)
            os.unlink(path)


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ShardState:
    """The latest record per key of one shard, built by replaying its records in order.

    groups:  {group_id: record dict | TOMBSTONE}
    offsets: {group_id: {(topic, partition): OffsetAndMetadata}}
    group_ms / offsets_ms: the write time (store wall clock) of the latest group record /
    offsets record per group, for compaction's retention decisions.
    """

    __slots__ = ("groups", "offsets", "group_ms", "offsets_ms", "records", "bytes")

    def __init__(self) -> None:
        self.groups: Dict[str, object] = {}
        self.offsets: Dict[str, dict] = {}
        self.group_ms: Dict[str, int] = {}
        self.offsets_ms: Dict[str, int] = {}
        self.records = 0
        self.bytes = 0

    def result(self) -> Tuple[Dict[str, Optional[dict]], Dict[str, dict]]:
        """(groups, offsets) as load_shard returns them: every group that has a live
        record or offsets; None for a group with offsets only. A record without members
        (written as its group became Empty) carries its write time as "written_ms": the
        coordinator counts offsets retention from it."""
        groups: Dict[str, Optional[dict]] = {}
        group_ms = self.group_ms
        for gid, rec in self.groups.items():
            if rec is not TOMBSTONE:
                if not rec.get("members"):
                    rec["written_ms"] = group_ms[gid]
                groups[gid] = rec
        for gid in self.offsets:
            if gid not in groups:
                groups[gid] = None
        return groups, self.offsets


def scan_segment(data, state: ShardState) -> Tuple[int, Optional[str]]:
    """Apply every valid record of `data` to `state`, in order. Returns (end, None) when
    the whole buffer is valid, else (offset of the first bad record, reason)."""
    pos = 0
    n = len(data)
    mv = memoryview(data)
    unpack_frame = FRAME.unpack_from
    unpack_head = HEAD.unpack_from
    groups = state.groups
    offsets = state.offsets
    group_ms = state.group_ms
    offsets_ms = state.offsets_ms
    records = 0
    try:
        while pos < n:
            if pos + FRAME_SIZE > n:
                return pos, "truncated frame header"
            crc, length = unpack_frame(data, pos)
            if length < MIN_PAYLOAD or length > MAX_PAYLOAD:
                return pos, f"bad record length {length}"
            end = pos + FRAME_SIZE + length
            if end > n:
                return pos, f"record length {length} runs past the end of the file"
            if crc32c(mv[pos + 4:end]) != crc:
                return pos, "CRC32C mismatch"
            body = pos + FRAME_SIZE
            kind, write_ms, glen = unpack_head(data, body)
            gend = body + HEAD_SIZE + glen
            if gend > end:
                return pos, "group id runs past the record"
            gid = bytes(mv[body + HEAD_SIZE:gend]).decode("utf-8", "surrogatepass")
            try:
                if kind == OFFSETS:
                    entries = decode_offsets(data, gend, end)
                    current = offsets.get(gid)
                    if current is None:
                        offsets[gid] = entries
                    else:
                        current.update(entries)
                    offsets_ms[gid] = write_ms
                elif kind == GROUP:
                    groups[gid] = decode_group_record(data, gend)
                    group_ms[gid] = write_ms
                elif kind == GROUP_TOMBSTONE:
                    groups[gid] = TOMBSTONE
                    offsets.pop(gid, None)
                    offsets_ms.pop(gid, None)
                    group_ms[gid] = write_ms
                elif kind == OFFSET_TOMBSTONES:
                    current = offsets.get(gid)
                    for tp in decode_offset_tombstones(data, gend, end):
                        if current is not None:
                            current.pop(tp, None)
                    if current is not None and not current:
                        del offsets[gid]
                        offsets_ms.pop(gid, None)
                else:
                    return pos, f"unknown record type {kind}"
            except (struct.error, FrameError, UnicodeDecodeError, IndexError) as exc:
                return pos, f"undecodable record: {exc}"
            records += 1
            pos = end
        return pos, None
    finally:
        state.records += records
        state.bytes += pos


def find_frame_after(data, pos: int) -> Optional[int]:
    """The offset of the first valid frame strictly after `pos`, or None: tells a torn
    tail (nothing valid follows) from corruption in the middle (valid records follow)."""
    n = len(data)
    for q in range(pos + 1, n - FRAME_SIZE - MIN_PAYLOAD + 1):
        try:
            check_frame(data, q, n)
        except (FrameError, struct.error):
            continue
        return q
    return None

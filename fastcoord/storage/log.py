"""Reading a shard log: segment files, the latest-record-per-key state, recovery.

A shard's directory holds segments `<id:020d>.log` (ids increase; the log is their
concatenation in id order). Only the last segment is ever appended to. Compaction
writes `<id>.log.compact` and renames it over the first segment it replaces; a
leftover `.compact` file is an interrupted compaction and is removed on open.
"""
from __future__ import annotations

import contextlib
import logging
import mmap
import os
from typing import Dict, List, Optional, Tuple

from .. import _twins
from .records import FRAME, FRAME_SIZE, MAX_PAYLOAD, MIN_PAYLOAD

_scanner = None


def _scan():
    """The scanner twin: fastcoord.storage._native.logscan (C) or fastcoord.storage._pure.logscan. Looked
    up at first use: both import fastcoord.storage.records, so this package first."""
    global _scanner
    if _scanner is None:
        _scanner = _twins.module(None, "storage.logscan")
    return _scanner

__all__ = ["CorruptLogError", "ShardState", "list_segments", "segment_path", "fsync_dir",
           "scan_segment", "check_segment", "apply_pending", "checked_segments", "find_frame_after", "complete_frame", "mapped_segment",
           "remove_compaction_leftovers", "SEGMENT_SUFFIX", "COMPACT_SUFFIX"]

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


@contextlib.contextmanager
def mapped_segment(path: str):
    """A segment's bytes, mapped read-only (no copy: the scan reads the page cache) for
    the `with` block; an empty file is b"" (it cannot be mapped)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield data


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
    records / entries / bytes: what was read (entries: see live_entries).
    pending: the records check_segment checked, waiting for apply_pending.
    """

    __slots__ = ("groups", "offsets", "group_ms", "offsets_ms", "records", "entries", "bytes",
                 "pending")

    def __init__(self) -> None:
        self.groups: Dict[str, object] = {}
        self.offsets: Dict[str, dict] = {}
        self.group_ms: Dict[str, int] = {}
        self.offsets_ms: Dict[str, int] = {}
        self.records = 0
        self.entries = 0             # offset entries read, plus one per other record
        self.bytes = 0
        self.pending = _scan().Records()

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


def check_segment(data, state: ShardState) -> Tuple[int, Optional[str]]:
    """Check every record of `data` (CRC, decoding) and queue the valid ones in
    `state.pending`, in log order; apply_pending applies them. Returns (end, None) when
    the whole buffer is valid, else (offset of the first bad record, reason). `data`
    (a mapping) cannot be closed until apply_pending or release_pending: the queued
    records may point into it."""
    end, reason, records, entries = _scan().check(data, state.pending)
    state.records += records
    state.entries += entries
    state.bytes += end
    return end, reason


def apply_pending(state: ShardState) -> None:
    """Apply the queued records of every segment checked since the last apply, newest
    first where the scanner can: a value a later segment overwrote is never built."""
    _scan().apply(state.pending, state.groups, state.offsets, state.group_ms,
                  state.offsets_ms, TOMBSTONE)


@contextlib.contextmanager
def checked_segments(state: ShardState):
    """`check(path)` maps a segment and check_segment()s it: (data, end, reason). The
    records checked are applied when the block ends normally (the mappings closed
    after), dropped when it raises."""
    with contextlib.ExitStack() as maps:
        def check(path: str):
            data = maps.enter_context(mapped_segment(path))
            return (data,) + check_segment(data, state)
        try:
            yield check
            apply_pending(state)
        finally:
            state.pending.release()        # before the mappings close


def scan_segment(data, state: ShardState) -> Tuple[int, Optional[str]]:
    """Apply every valid record of `data` to `state`, in order (check_segment, then
    apply_pending). Returns what check_segment does."""
    result = check_segment(data, state)
    apply_pending(state)
    return result


def find_frame_after(data, pos: int) -> Optional[int]:
    """The offset of the first valid frame strictly after `pos`, or None: tells a torn
    tail (nothing valid follows) from corruption in the middle (valid records follow)."""
    return _scan().find_frame_after(data, pos)


def complete_frame(data, pos: int) -> bool:
    """Whether the frame at `pos` is whole: its header and its length's worth of bytes
    are in the file, the length in range. A bad frame that is whole was written out in
    full (its CRC or content is damaged: corruption, and it may have been acknowledged);
    one that is not was cut short (a torn write) or is not a frame at all."""
    if pos + FRAME_SIZE > len(data):
        return False
    _, length = FRAME.unpack_from(data, pos)
    return MIN_PAYLOAD <= length <= MAX_PAYLOAD and pos + FRAME_SIZE + length <= len(data)

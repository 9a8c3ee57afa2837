"""The on-disk record format of a shard log (compact binary, no pickle).

Frame (every record):

    u32 crc32c | u32 length | payload[length]          little-endian

`crc32c` (Castagnoli, the `crc32c` package) covers the length field and the
payload, i.e. bytes [4, 8 + length) of the frame, so a flipped bit in either is
detected. `length` is at least 9 and at most MAX_PAYLOAD.

Payload (every record starts with the same 13-byte head):

    u8 type | i64 write_ms | u32 group_len | group (UTF-8)

`write_ms` is the store's wall-clock time (ms since the epoch) when the record
was written; compaction uses it for tombstone and offsets retention. Strings are
`u32 length + UTF-8` (surrogates pass through); an optional string or bytes
field uses length 0xFFFFFFFF for None. Key of each record, as in
`__consumer_offsets`: the group (group metadata) or (group, topic, partition)
(one per offset entry).

type 1, OFFSETS: the offsets committed by one store_offsets call

    u32 n_topics | n_topics x str          topic table
    u32 n                                  number of entries, then n-element columns:
    u32 topic_index[n] | i32 partition[n] | i64 offset[n] | i32 leader_epoch[n] |
    i64 commit_timestamp_ms[n] | u32 metadata_len[n]
    metadata blob                          the entries' metadata, concatenated, in order
                                           (metadata_len 0xFFFFFFFF: None)

    Columns (not rows) so that decoding runs in C loops (array + zip + map): 1 million
    offsets load in well under a second of pure Python.

type 2, GROUP: a group metadata record (the dict the coordinator gives store_group)

    optstr protocol_type | i32 generation | optstr protocol | optstr leader | u32 n_members
    per member: str member_id | optstr instance_id | str client_id | str client_host |
                i32 rebalance_timeout_ms | i32 session_timeout_ms |
                bytes subscription | bytes assignment

type 3, GROUP_TOMBSTONE: the group was deleted; removes its metadata and every
offset of the group written before it.

type 4, OFFSET_TOMBSTONES: deletes single offsets

    u32 n_topics | n_topics x str | u32 n_entries | n_entries x (u32 topic_index, i32 partition)

type 5, TOPIC_ID: a declared topic's id (Kafka's topic UUID), kept in a file of its
own beside the shard logs (`DurableStore.topic_ids_path`), never in a shard log: the
head's key is the topic name, then

    16 bytes: the UUID
"""
from __future__ import annotations

import struct
import sys
from array import array
from functools import partial
from itertools import repeat
from typing import Dict, Iterable, List, Optional, Tuple

from crc32c import crc32c

from ..core.results import OffsetAndMetadata

__all__ = [
    "OFFSETS", "GROUP", "GROUP_TOMBSTONE", "OFFSET_TOMBSTONES", "MAX_PAYLOAD",
    "frame", "encode_offsets", "encode_group", "encode_group_tombstone",
    "encode_offset_tombstones", "decode_group_record", "FrameError", "TOPIC_ID",
    "encode_topic_ids", "decode_topic_ids",
]

OFFSETS = 1
GROUP = 2
GROUP_TOMBSTONE = 3
OFFSET_TOMBSTONES = 4
RECORD_TYPES = (OFFSETS, GROUP, GROUP_TOMBSTONE, OFFSET_TOMBSTONES)
TOPIC_ID = 5                              # only in the topic-ids file, never a shard log

FRAME = struct.Struct("<II")              # crc32c, length
FRAME_SIZE = FRAME.size
HEAD = struct.Struct("<BqI")              # type, write_ms, group length
HEAD_SIZE = HEAD.size
MIN_PAYLOAD = HEAD_SIZE
MAX_PAYLOAD = 1 << 28                     # 256 MiB: anything longer is a corrupt length
ENTRY_BYTES = 4 + 4 + 8 + 4 + 8 + 4       # one entry across the six columns
_SWAP = sys.byteorder != "little"
assert array("I").itemsize == 4 and array("i").itemsize == 4 and array("q").itemsize == 8
TOMB_ENTRY = struct.Struct("<Ii")
U32 = struct.Struct("<I")
I32 = struct.Struct("<i")
NONE_LEN = 0xFFFFFFFF
_pack_u32 = U32.pack


class FrameError(ValueError):
    """A frame that does not check out (bad length, bad CRC, unknown type)."""


def frame(payload: bytes) -> bytes:
    """Length + CRC32C around a payload."""
    length = _pack_u32(len(payload))
    return _pack_u32(crc32c(payload, crc32c(length))) + length + payload


# -- encoding ---------------------------------------------------------------------------
def _s(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")
    return _pack_u32(len(raw)) + raw


def _os(value: Optional[str]) -> bytes:
    return _pack_u32(NONE_LEN) if value is None else _s(value)


def _b(value) -> bytes:
    raw = bytes(value)
    return _pack_u32(len(raw)) + raw


def _head(kind: int, write_ms: int, group_id: str) -> bytes:
    raw = group_id.encode("utf-8", "surrogatepass")
    return HEAD.pack(kind, write_ms, len(raw)) + raw


def _topic_table(keys: Iterable[Tuple[str, int]]) -> Tuple[List[bytes], Dict[str, int]]:
    index: Dict[str, int] = {}
    parts: List[bytes] = []
    for topic, _ in keys:
        if topic not in index:
            index[topic] = len(index)
            parts.append(_s(topic))
    return parts, index


def _column(code: str, values) -> bytes:
    col = array(code, values)
    if _SWAP:
        col.byteswap()
    return col.tobytes()


def encode_offsets(group_id: str, offsets: dict, write_ms: int) -> bytes:
    """One OFFSETS frame for `{(topic, partition): OffsetAndMetadata}`."""
    table, index = _topic_table(offsets)
    keys = list(offsets)
    values = list(offsets.values())
    blob: List[bytes] = []
    mlens: List[int] = []
    for om in values:
        md = om.metadata
        if md is None:
            mlens.append(NONE_LEN)
        elif md:
            raw = md.encode("utf-8", "surrogatepass")
            mlens.append(len(raw))
            blob.append(raw)
        else:
            mlens.append(0)
    return frame(b"".join([
        _head(OFFSETS, write_ms, group_id), _pack_u32(len(table)), *table,
        _pack_u32(len(keys)),
        _column("I", [index[t] for t, _ in keys]), _column("i", [p for _, p in keys]),
        _column("q", [om.offset for om in values]),
        _column("i", [om.leader_epoch for om in values]),
        _column("q", [om.commit_timestamp_ms for om in values]),
        _column("I", mlens), *blob]))


def encode_offset_tombstones(group_id: str, partitions, write_ms: int) -> bytes:
    """One OFFSET_TOMBSTONES frame deleting `partitions` [(topic, partition)]."""
    partitions = list(partitions)
    table, index = _topic_table(partitions)
    entries = [TOMB_ENTRY.pack(index[t], p) for t, p in partitions]
    return frame(b"".join([_head(OFFSET_TOMBSTONES, write_ms, group_id),
                           _pack_u32(len(table)), *table, _pack_u32(len(entries)), *entries]))


def encode_group(group_id: str, record: dict, write_ms: int) -> bytes:
    """One GROUP frame for the coordinator's group record dict."""
    parts = [_head(GROUP, write_ms, group_id), _os(record.get("protocol_type")),
             I32.pack(record.get("generation", 0)), _os(record.get("protocol")),
             _os(record.get("leader"))]
    members = record.get("members") or []
    parts.append(_pack_u32(len(members)))
    for m in members:
        parts += [_s(m["member_id"]), _os(m.get("instance_id")), _s(m.get("client_id", "")),
                  _s(m.get("client_host", "")),
                  struct.pack("<ii", m["rebalance_timeout_ms"], m["session_timeout_ms"]),
                  _b(m.get("subscription", b"")), _b(m.get("assignment", b""))]
    return frame(b"".join(parts))


def encode_group_tombstone(group_id: str, write_ms: int) -> bytes:
    return frame(_head(GROUP_TOMBSTONE, write_ms, group_id))


def encode_topic_ids(ids: Dict[str, bytes], write_ms: int) -> bytes:
    """TOPIC_ID frames, one per `{topic name: 16-byte UUID}` entry, in name order."""
    parts = []
    for name in sorted(ids):
        raw = bytes(ids[name])
        if len(raw) != 16:
            raise ValueError(f"topic {name!r}: a topic id is 16 bytes, got {len(raw)}")
        parts.append(frame(_head(TOPIC_ID, write_ms, name) + raw))
    return b"".join(parts)


# -- decoding ---------------------------------------------------------------------------
class _Reader:
    """Fields of a record body [pos, end): a field that runs past `end` is a FrameError
    (never read from the next record's bytes)."""
    __slots__ = ("data", "pos", "end")

    def __init__(self, data, pos: int, end: int) -> None:
        self.data = data
        self.pos = pos
        self.end = end

    def _take(self, n: int) -> int:
        start = self.pos
        if start + n > self.end:
            raise FrameError("a field runs past the record")
        self.pos = start + n
        return start

    def u32(self) -> int:
        (value,) = U32.unpack_from(self.data, self._take(4))
        return value

    def i32(self) -> int:
        (value,) = I32.unpack_from(self.data, self._take(4))
        return value

    def raw(self) -> Optional[bytes]:
        n = self.u32()
        if n == NONE_LEN:
            return None
        start = self._take(n)
        return bytes(self.data[start:self.pos])

    def ostr(self) -> Optional[str]:
        raw = self.raw()
        return None if raw is None else raw.decode("utf-8", "surrogatepass")

    def str(self) -> str:
        value = self.ostr()
        if value is None:
            raise FrameError("a required string is null")
        return value


def decode_group_record(data, pos: int, end: int) -> dict:
    """The group record dict from a GROUP payload body [pos, end) (after the head); the
    fields must fill it exactly."""
    r = _Reader(data, pos, end)
    record = {"protocol_type": r.ostr(), "generation": r.i32(), "protocol": r.ostr(),
              "leader": r.ostr()}
    members = []
    for _ in range(r.u32()):
        member_id = r.str()
        instance_id = r.ostr()
        client_id = r.str()
        client_host = r.str()
        rebalance = r.i32()
        session = r.i32()
        subscription = r.raw() or b""
        assignment = r.raw() or b""
        members.append({"member_id": member_id, "instance_id": instance_id,
                        "client_id": client_id, "client_host": client_host,
                        "rebalance_timeout_ms": rebalance, "session_timeout_ms": session,
                        "subscription": subscription, "assignment": assignment})
    if r.pos != end:
        raise FrameError("group record does not fill the record")
    record["members"] = members
    return record


def decode_topic_table(data, pos: int, end: int) -> Tuple[List[str], int]:
    r = _Reader(data, pos, end)
    topics = [r.str() for _ in range(r.u32())]
    return topics, r.pos


def _read_column(code: str, data, pos: int, size: int) -> array:
    col = array(code)
    col.frombytes(data[pos:pos + size])
    if _SWAP:
        col.byteswap()
    return col


_oam_make = partial(tuple.__new__, OffsetAndMetadata)      # a C call per entry


def decode_offsets(data, pos: int, end: int) -> Dict[Tuple[str, int], OffsetAndMetadata]:
    """The {(topic, partition): OffsetAndMetadata} of an OFFSETS body [pos, end)."""
    topics, pos = decode_topic_table(data, pos, end)
    if pos + 4 > end:
        raise FrameError("offset entries run past the record")
    (n,) = U32.unpack_from(data, pos)
    pos += 4
    blob = pos + n * ENTRY_BYTES
    if blob > end:
        raise FrameError("offset entries run past the record")
    mv = memoryview(data)
    tidx = _read_column("I", mv, pos, 4 * n)
    parts = _read_column("i", mv, pos + 4 * n, 4 * n)
    offs = _read_column("q", mv, pos + 8 * n, 8 * n)
    epochs = _read_column("i", mv, pos + 16 * n, 4 * n)
    stamps = _read_column("q", mv, pos + 20 * n, 8 * n)
    mlens = _read_column("I", mv, pos + 28 * n, 4 * n)
    if blob == end and not any(mlens):
        metadata = repeat("")                    # the common case: no metadata at all
    else:
        metadata = []
        cursor = blob
        for m in mlens:
            if m == 0:
                metadata.append("")
            elif m == NONE_LEN:
                metadata.append(None)
            else:
                metadata.append(bytes(mv[cursor:cursor + m]).decode("utf-8", "surrogatepass"))
                cursor += m
        if cursor != end:
            raise FrameError("offset metadata does not fill the record")
    if len(topics) == 1:
        keys = zip(repeat(topics[0]), parts)
    else:
        if n and max(tidx) >= len(topics):
            raise FrameError("topic index out of range")
        keys = zip(map(topics.__getitem__, tidx), parts)
    return dict(zip(keys, map(_oam_make, zip(offs, metadata, epochs, stamps))))


def decode_offset_tombstones(data, pos: int, end: int) -> List[Tuple[str, int]]:
    topics, pos = decode_topic_table(data, pos, end)
    if pos + 4 > end:
        raise FrameError("offset tombstone entries run past the record")
    (n,) = U32.unpack_from(data, pos)
    pos += 4
    if pos + n * TOMB_ENTRY.size != end:
        raise FrameError("offset tombstone entries do not fill the record")
    return [(topics[t], p) for t, p in TOMB_ENTRY.iter_unpack(memoryview(data)[pos:end])]


def decode_topic_ids(data) -> Dict[str, bytes]:
    """`{topic name: 16-byte UUID}` from a file of TOPIC_ID frames; any frame that does
    not check out (length, CRC, type, size) is a FrameError naming its offset: the file
    is replaced whole (written aside, then renamed), so it never has a torn tail."""
    ids: Dict[str, bytes] = {}
    pos = 0
    end = len(data)
    while pos < end:
        if pos + FRAME_SIZE > end:
            raise FrameError(f"topic ids: frame header cut short at byte {pos}")
        crc, length = FRAME.unpack_from(data, pos)
        body = pos + FRAME_SIZE
        if not MIN_PAYLOAD <= length <= MAX_PAYLOAD or body + length > end:
            raise FrameError(f"topic ids: bad record length {length} at byte {pos}")
        if crc32c(bytes(data[body:body + length]), crc32c(bytes(data[pos + 4:body]))) != crc:
            raise FrameError(f"topic ids: CRC mismatch at byte {pos}")
        kind, _, name_len = HEAD.unpack_from(data, body)
        name_end = body + HEAD_SIZE + name_len
        if kind != TOPIC_ID or name_end + 16 != body + length:
            raise FrameError(f"topic ids: not a topic id record at byte {pos}")
        name = bytes(data[body + HEAD_SIZE:name_end]).decode("utf-8", "surrogatepass")
        ids[name] = bytes(data[name_end:name_end + 16])
        pos = body + length
    return ids

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

type 6, CONSUMER_GROUP: a consumer group's record (KIP-848; the dict
`fastcoord.core.consumer_records.consumer_record` builds), the group's fields and the
members that changed (or every member: the full flag). A store keeps their fold
(`fold_consumer`); a GROUP record or a group tombstone ends it, and it ends a GROUP.

    u8 full | i32 group_epoch | i32 assignment_epoch
    u32 n x (str topic, i32 partitions)                   metadata
    u32 n x (str regex, u32 k, k x str topic)             resolved regexes
    u32 n_members, per member: str member_id | u8 present (0: removed), and if present
        optstr instance_id | optstr rack_id | optstr client_id | optstr client_host |
        i32 rebalance_timeout_ms | optstr server_assignor | u32 k, k x str topic_names |
        optstr topic_regex | u8 state | i32 member_epoch | i32 previous_epoch |
        parts assigned | parts revoking | parts target | extras
    extras                                                the group's other fields

    parts:  u32 n x (str topic, u32 k, k x i32 partition)
    extras: u32 n x (str key, value): any other field of a plain value (a member's
            classic-protocol fields and assignment epochs, say), a tagged value: u8
            tag, then 0 None, 1 False, 2 True, 3 i64, 4 str, 5 bytes, 6 list / 7 tuple
            (u32 n, n values), 8 dict (u32 n, n x (str key, value)); nested at most
            MAX_DEPTH deep

    Every count is checked against the bytes left (times its items' least size) before
    anything is built for it: a hostile count fails the record, it allocates nothing.

type 5, TOPIC_ID: a declared topic's id (Kafka's topic UUID), kept in a file of its
own beside the shard logs (`DurableStore.topic_ids_path`), never in a shard log: the
head's key is the topic name, then

    16 bytes: the UUID

type 7, GROUP_CONFIG: a group's dynamic configs (fastcoord.core.group_configs), kept in
a file of their own beside the shard logs (`DurableStore.group_configs_path`), never in
a shard log: the head's key is the group id, then

    u32 n x (str name, i64 value)
"""
from __future__ import annotations

import struct
import sys
from array import array
from functools import partial
from itertools import repeat
from typing import Dict, Iterable, List, Optional, Tuple

from crc32c import crc32c

from ..core.consumer_records import apply_members, follows
from ..core.results import OffsetAndMetadata

__all__ = [
    "OFFSETS", "GROUP", "GROUP_TOMBSTONE", "OFFSET_TOMBSTONES", "MAX_PAYLOAD",
    "frame", "encode_offsets", "encode_group", "encode_group_tombstone",
    "encode_offset_tombstones", "decode_group_record", "FrameError", "TOPIC_ID",
    "encode_topic_ids", "decode_topic_ids", "CONSUMER_GROUP", "encode_consumer_group",
    "decode_consumer_record", "fold_consumer", "GROUP_CONFIG", "encode_group_configs",
    "decode_group_configs",
]

OFFSETS = 1
GROUP = 2
GROUP_TOMBSTONE = 3
OFFSET_TOMBSTONES = 4
TOPIC_ID = 5                              # only in the topic-ids file, never a shard log
CONSUMER_GROUP = 6
GROUP_CONFIG = 7                          # only in the group-configs file, never a shard log
RECORD_TYPES = (OFFSETS, GROUP, GROUP_TOMBSTONE, OFFSET_TOMBSTONES, CONSUMER_GROUP)

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
    """Length + CRC32C around a payload. A payload longer than MAX_PAYLOAD is refused
    (FrameError): a load takes such a length for a corrupt one, and would stop there."""
    if len(payload) > MAX_PAYLOAD:
        raise FrameError(f"a record of {len(payload)} bytes: at most {MAX_PAYLOAD} are written")
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


# -- consumer groups (type 6) -------------------------------------------------------------
_CG_FIELDS = ("consumer", "full", "group_epoch", "assignment_epoch", "metadata", "resolved",
              "members")
_CG_SKIP = _CG_FIELDS + ("written_ms",)       # (written_ms: added by a load, never kept)
_MEMBER_FIELDS = ("instance_id", "rack_id", "client_id", "client_host", "rebalance_timeout_ms",
                  "server_assignor", "topic_names", "topic_regex", "state", "member_epoch",
                  "previous_epoch", "assigned", "revoking", "target")
MAX_DEPTH = 8                                 # nesting of an extra field's value
(T_NONE, T_FALSE, T_TRUE, T_INT, T_STR, T_BYTES, T_LIST, T_TUPLE, T_DICT) = range(9)
_I64 = struct.Struct("<q")
_EPOCHS = struct.Struct("<Bii")
_MEMBER_MID = struct.Struct("<Bii")           # state, member_epoch, previous_epoch


def _strs(values) -> List[bytes]:
    values = list(values)
    return [_pack_u32(len(values))] + [_s(v) for v in values]


def _parts(parts: dict) -> List[bytes]:
    out = [_pack_u32(len(parts))]
    for topic, ps in parts.items():
        ps = list(ps)
        out += [_s(topic), _pack_u32(len(ps)), struct.pack(f"<{len(ps)}i", *ps)]
    return out


def _value(value, depth: int = 0) -> bytes:
    """An extra field's plain value, tagged."""
    if depth > MAX_DEPTH:
        raise ValueError(f"a value nested deeper than {MAX_DEPTH}")
    if value is None:
        return b"\x00"
    if value is True or value is False:
        return b"\x02" if value else b"\x01"
    if isinstance(value, int):
        return bytes([T_INT]) + _I64.pack(value)
    if isinstance(value, str):
        return bytes([T_STR]) + _s(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes([T_BYTES]) + _b(value)
    if isinstance(value, (list, tuple)):
        return b"".join([bytes([T_TUPLE if isinstance(value, tuple) else T_LIST]),
                         _pack_u32(len(value)), *(_value(v, depth + 1) for v in value)])
    if isinstance(value, dict):
        return b"".join([bytes([T_DICT]), _extras(value, (), depth + 1)])
    raise TypeError(f"cannot store a {type(value).__name__} in a consumer group record")


def _extras(record: dict, known, depth: int = 0) -> bytes:
    """The fields of `record` not in `known`: u32 n, n x (str key, value)."""
    keys = [k for k in record if k not in known]
    parts = [_pack_u32(len(keys))]
    for key in keys:
        if not isinstance(key, str):
            raise TypeError(f"a record's field name must be a str, got {type(key).__name__}")
        parts += [_s(key), _value(record[key], depth)]
    return b"".join(parts)


def _member(member_id: str, m: Optional[dict]) -> List[bytes]:
    if m is None:
        return [_s(member_id), b"\x00"]
    return [_s(member_id), b"\x01", _os(m["instance_id"]), _os(m["rack_id"]),
            _os(m["client_id"]), _os(m["client_host"]), I32.pack(m["rebalance_timeout_ms"]),
            _os(m["server_assignor"]), *_strs(m["topic_names"]), _os(m["topic_regex"]),
            _MEMBER_MID.pack(m["state"], m["member_epoch"], m["previous_epoch"]),
            *_parts(m["assigned"]), *_parts(m["revoking"]), *_parts(m["target"]),
            _extras(m, _MEMBER_FIELDS)]


def encode_consumer_group(group_id: str, record: dict, write_ms: int) -> bytes:
    """One CONSUMER_GROUP frame for a consumer_record dict."""
    parts = [_head(CONSUMER_GROUP, write_ms, group_id),
             _EPOCHS.pack(bool(record.get("full")), record["group_epoch"],
                          record["assignment_epoch"])]
    metadata = record.get("metadata") or {}
    parts.append(_pack_u32(len(metadata)))
    for topic, n in metadata.items():
        parts += [_s(topic), I32.pack(n)]
    resolved = record.get("resolved") or {}
    parts.append(_pack_u32(len(resolved)))
    for regex, topics in resolved.items():
        parts += [_s(regex), *_strs(topics)]
    members = record["members"]
    parts.append(_pack_u32(len(members)))
    for member_id, m in members.items():
        parts += _member(member_id, m)
    parts.append(_extras(record, _CG_SKIP))
    return frame(b"".join(parts))


def fold_consumer(previous, record: dict):
    """`record` (a decoded CONSUMER_GROUP, owned by the caller) applied over `previous`
    (the group's folded record, a GROUP record, or anything else for none): what
    fold_consumer_record gives, made in place, so a long run of partial records costs
    each its own members only. `previous`'s members dict is taken over. A partial
    record that does not follow `previous` (consumer_records.follows: over no consumer
    group, a numbered one never does) leaves it as it is, None included."""
    if not record["full"] and not follows(previous, record):
        return previous
    if not record["full"] and isinstance(previous, dict) and previous.get("consumer"):
        members = previous["members"]
        apply_members(members, record)
        record["members"] = members
    else:
        members = record["members"]
        for member_id in [k for k, m in members.items() if m is None]:
            del members[member_id]
    record["full"] = True
    return record


def encode_topic_ids(ids: Dict[str, bytes], write_ms: int) -> bytes:
    """TOPIC_ID frames, one per `{topic name: 16-byte UUID}` entry, in name order."""
    parts = []
    for name in sorted(ids):
        raw = bytes(ids[name])
        if len(raw) != 16:
            raise ValueError(f"topic {name!r}: a topic id is 16 bytes, got {len(raw)}")
        parts.append(frame(_head(TOPIC_ID, write_ms, name) + raw))
    return b"".join(parts)


def encode_group_configs(configs: Dict[str, Dict[str, int]], write_ms: int) -> bytes:
    """GROUP_CONFIG frames, one per group with configs, in group id order."""
    parts = []
    for group_id in sorted(configs):
        values = configs[group_id]
        body = [_pack_u32(len(values))]
        for name in sorted(values):
            body.append(_s(name) + _I64.pack(values[name]))
        parts.append(frame(_head(GROUP_CONFIG, write_ms, group_id) + b"".join(body)))
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

    def u8(self) -> int:
        return self.data[self._take(1)]

    def i64(self) -> int:
        (value,) = _I64.unpack_from(self.data, self._take(8))
        return value

    def count(self, least: int) -> int:
        """A u32 count of items of at least `least` bytes each, checked against the bytes
        left (before anything is built for them)."""
        n = self.u32()
        if n * least > self.end - self.pos:
            raise FrameError("a count runs past the record")
        return n

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


def _read_parts(r: _Reader) -> dict:
    parts = {}
    for _ in range(r.count(8)):
        topic = r.str()
        n = r.count(4)
        start = r._take(4 * n)
        parts[topic] = list(struct.unpack_from(f"<{n}i", r.data, start))
    return parts


def _read_strs(r: _Reader) -> list:
    return [r.str() for _ in range(r.count(4))]


def _read_value(r: _Reader, depth: int):
    if depth > MAX_DEPTH:
        raise FrameError(f"a value nested deeper than {MAX_DEPTH}")
    tag = r.u8()
    if tag == T_NONE:
        return None
    if tag == T_FALSE or tag == T_TRUE:
        return tag == T_TRUE
    if tag == T_INT:
        return r.i64()
    if tag == T_STR:
        return r.str()
    if tag == T_BYTES:
        value = r.raw()
        if value is None:
            raise FrameError("a bytes value is null")
        return value
    if tag == T_LIST or tag == T_TUPLE:
        items = [_read_value(r, depth + 1) for _ in range(r.count(1))]
        return tuple(items) if tag == T_TUPLE else items
    if tag == T_DICT:
        return _read_extras(r, {}, (), depth + 1)
    raise FrameError(f"unknown value tag {tag}")


def _read_extras(r: _Reader, into: dict, known, depth: int = 0) -> dict:
    """Extra fields into `into`; one named as a known field is corrupt (never written)."""
    for _ in range(r.count(5)):
        key = r.str()
        if key in known:
            raise FrameError(f"an extra field named {key!r}")
        into[key] = _read_value(r, depth)
    return into


def _read_member(r: _Reader) -> dict:
    m = {"instance_id": r.ostr(), "rack_id": r.ostr(), "client_id": r.ostr(),
         "client_host": r.ostr(), "rebalance_timeout_ms": r.i32(),
         "server_assignor": r.ostr(), "topic_names": _read_strs(r),
         "topic_regex": r.ostr(), "state": r.u8(), "member_epoch": r.i32(),
         "previous_epoch": r.i32(), "assigned": _read_parts(r), "revoking": _read_parts(r),
         "target": _read_parts(r)}
    return _read_extras(r, m, _MEMBER_FIELDS)


def decode_consumer_record(data, pos: int, end: int) -> dict:
    """The consumer_record dict of a CONSUMER_GROUP body [pos, end) (after the head); the
    fields must fill it exactly."""
    r = _Reader(data, pos, end)
    full = r.u8()
    if full > 1:
        raise FrameError(f"bad full flag {full}")
    record = {"consumer": True, "full": bool(full), "group_epoch": r.i32(),
              "assignment_epoch": r.i32()}
    metadata = {}
    for _ in range(r.count(8)):
        topic = r.str()
        metadata[topic] = r.i32()
    record["metadata"] = metadata
    record["resolved"] = {r.str(): _read_strs(r) for _ in range(r.count(8))}
    members = {}
    for _ in range(r.count(5)):
        member_id = r.str()
        present = r.u8()
        if present > 1:
            raise FrameError(f"bad member flag {present}")
        members[member_id] = _read_member(r) if present else None
    record["members"] = members
    _read_extras(r, record, _CG_SKIP)
    if r.pos != end:
        raise FrameError("consumer group record does not fill the record")
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


def _keyed_frames(data, kind: int, what: str):
    """(key, body start, body end, frame offset) of each frame of a file of `kind`
    records (one kept whole, written aside then renamed, so never with a torn tail):
    any frame that does not check out (length, CRC, type) is a FrameError naming `what`
    and its offset."""
    pos = 0
    end = len(data)
    while pos < end:
        if pos + FRAME_SIZE > end:
            raise FrameError(f"{what}: frame header cut short at byte {pos}")
        crc, length = FRAME.unpack_from(data, pos)
        body = pos + FRAME_SIZE
        if not MIN_PAYLOAD <= length <= MAX_PAYLOAD or body + length > end:
            raise FrameError(f"{what}: bad record length {length} at byte {pos}")
        if crc32c(bytes(data[body:body + length]), crc32c(bytes(data[pos + 4:body]))) != crc:
            raise FrameError(f"{what}: CRC mismatch at byte {pos}")
        found, _, key_len = HEAD.unpack_from(data, body)
        key_end = body + HEAD_SIZE + key_len
        if found != kind or key_end > body + length:
            raise FrameError(f"{what}: not a {what} record at byte {pos}")
        yield (bytes(data[body + HEAD_SIZE:key_end]).decode("utf-8", "surrogatepass"),
               key_end, body + length, pos)
        pos = body + length


def decode_topic_ids(data) -> Dict[str, bytes]:
    """`{topic name: 16-byte UUID}` from a file of TOPIC_ID frames (_keyed_frames)."""
    ids: Dict[str, bytes] = {}
    for name, start, end, at in _keyed_frames(data, TOPIC_ID, "topic ids"):
        if end - start != 16:
            raise FrameError(f"topic ids: not a topic id record at byte {at}")
        ids[name] = bytes(data[start:end])
    return ids


def decode_group_configs(data) -> Dict[str, Dict[str, int]]:
    """`{group id: {name: value}}` from a file of GROUP_CONFIG frames (_keyed_frames);
    every field must fit its record exactly, a count is checked before it is used."""
    configs: Dict[str, Dict[str, int]] = {}
    for group_id, start, end, at in _keyed_frames(data, GROUP_CONFIG, "group configs"):
        r = _Reader(data, start, end)
        values = {}
        for _ in range(r.count(4 + 8)):
            name = r.str()
            values[name] = r.i64()
        if r.pos != end:
            raise FrameError(f"group configs: bytes left in the record at byte {at}")
        configs[group_id] = values
    return configs

"""The classic consumer protocol's embedded encoding (Kafka's ConsumerProtocol): the
subscription a classic consumer puts in its JoinGroup and the assignment a SyncGroup
gives it. Both twins use this one module (Python in both).

A group whose members use the classic protocol inside a consumer group (Kafka 4's mixed
groups, core/consumer_mixed.py) needs both ways: a JoinGroup's subscription is read for
the member's topics, rack and owned partitions, an upgraded classic group's assignments
are read for each member's partitions, and an assignment is written for each SyncGroup.

Every byte read here came from a client: every length and count is checked against what
is left before anything is allocated, and bytes that are not a valid encoding raise
ValueError (never IndexError, struct.error or a MemoryError).
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

__all__ = ["ClassicMetadata", "Subscription", "decode_subscription", "decode_assignment",
           "encode_subscription", "encode_assignment"]

HIGHEST_VERSION = 3     # of both messages; a newer one is read as this (Kafka's way)


class ClassicMetadata(NamedTuple):
    """What a member that uses the classic protocol inside a consumer group has beyond
    a consumer member (Kafka's ClassicMemberMetadata): its JoinGroup's session timeout
    and protocols [(name, subscription bytes)], in its order of preference."""
    session_timeout_ms: int
    protocols: Tuple[Tuple[str, bytes], ...]


class Subscription(NamedTuple):
    version: int
    topics: List[str]
    user_data: Optional[bytes]
    owned: Dict[str, List[int]]     # owned partitions (v1+; empty before)
    generation: int                 # v2+; -1 before
    rack_id: Optional[str]          # v3+; None before


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ValueError(f"expected bytes, got {type(data).__name__}")
        self.data = bytes(data)
        self.pos = 0

    def left(self) -> int:
        return len(self.data) - self.pos

    def _take(self, n: int) -> bytes:
        if n < 0 or n > self.left():
            raise ValueError(f"truncated: {n} bytes wanted at offset {self.pos}, "
                             f"{self.left()} left")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return int.from_bytes(self._take(2), "big", signed=True)

    def int32(self) -> int:
        return int.from_bytes(self._take(4), "big", signed=True)

    def string(self, nullable: bool = False) -> Optional[str]:
        size = self.int16()
        if size == -1 and nullable:
            return None
        try:
            return self._take(size).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"a string that is not UTF-8 at offset {self.pos}") from None

    def nullable_bytes(self) -> Optional[bytes]:
        size = self.int32()
        return None if size == -1 else self._take(size)

    def count(self, min_item: int) -> int:
        """An array's i32 count, checked against what is left (each item takes at least
        `min_item` bytes): a hostile count never sizes anything."""
        n = self.int32()
        if n < 0 or n * min_item > self.left():
            raise ValueError(f"an array count of {n} with {self.left()} bytes left")
        return n

    def partitions(self) -> Dict[str, List[int]]:
        """An array of (topic, [partition]) (a topic named twice has its lists joined)."""
        out: Dict[str, List[int]] = {}
        for _ in range(self.count(6)):
            topic = self.string()
            ps = [self.int32() for _ in range(self.count(4))]
            out.setdefault(topic, []).extend(ps)
        return out


def _version(reader: _Reader) -> int:
    version = reader.int16()
    if version < 0:
        raise ValueError(f"a negative version ({version})")
    return min(version, HIGHEST_VERSION)


def decode_subscription(data) -> Subscription:
    """A ConsumerProtocolSubscription (any version); ValueError for anything else."""
    r = _Reader(data)
    version = _version(r)
    topics = [r.string() for _ in range(r.count(2))]
    user_data = r.nullable_bytes()
    owned: Dict[str, List[int]] = {}
    generation, rack = -1, None
    if version >= 1:
        owned = r.partitions()
    if version >= 2:
        generation = r.int32()
    if version >= 3:
        rack = r.string(nullable=True)
    return Subscription(version, topics, user_data, owned, generation, rack)


def decode_assignment(data) -> Dict[str, List[int]]:
    """The partitions of a ConsumerProtocolAssignment (any version); an empty assignment
    (no bytes: a member the leader gave nothing) is no partitions. ValueError for
    anything else."""
    return decode_assignment_and_user_data(data)[0]


def decode_assignment_and_user_data(data):
    """(partitions, user data or None) of a ConsumerProtocolAssignment, as
    decode_assignment reads it."""
    if not data:
        return {}, None
    r = _Reader(data)
    _version(r)
    parts = r.partitions()
    return parts, r.nullable_bytes()


# -- writing ----------------------------------------------------------------------------

def _str16(text: str) -> bytes:
    data = text.encode("utf-8")
    return len(data).to_bytes(2, "big") + data


def _partitions_array(parts) -> bytes:
    out = [len(parts).to_bytes(4, "big")]
    for topic in sorted(parts):
        ps = sorted(parts[topic])
        out.append(_str16(topic))
        out.append(len(ps).to_bytes(4, "big"))
        out.extend(p.to_bytes(4, "big", signed=True) for p in ps)
    return b"".join(out)


def encode_subscription(topics, rack_id: Optional[str], owned=None, generation: int = -1) -> bytes:
    """A ConsumerProtocolSubscription v3: topics, null user data, owned partitions,
    generation, rack."""
    out = [(3).to_bytes(2, "big"), len(topics).to_bytes(4, "big")]
    out.extend(_str16(t) for t in topics)
    out.append((-1).to_bytes(4, "big", signed=True))            # user data: null
    out.append(_partitions_array(owned or {}))
    out.append(generation.to_bytes(4, "big", signed=True))
    out.append((-1).to_bytes(2, "big", signed=True) if rack_id is None else _str16(rack_id))
    return b"".join(out)


def encode_assignment(parts, version: int = HIGHEST_VERSION) -> bytes:
    """A ConsumerProtocolAssignment: the partitions, null user data. Every version has
    that same layout; `version` is the one the member's subscription used (Kafka answers
    each member in its own version), clipped to what this module writes."""
    version = max(0, min(version, HIGHEST_VERSION))
    return b"".join([version.to_bytes(2, "big"), _partitions_array(parts),
                     (-1).to_bytes(4, "big", signed=True)])

"""Kafka wire framing and codecs for the coordinator-only broker.

Message bodies are encoded and decoded by `kio` (Kafka's own JSON schemas turned into
Python dataclasses). This module adds what kio leaves to a broker:

- the table of advertised (api key, version range) pairs;
- frame decoding: size-prefixed frame -> `Request` (header + body), with every way a
  frame can be wrong mapped to one of two exceptions (`UnsupportedRequest`,
  `MalformedRequest`), never anything else;
- response encoding: a plain dict of values -> the dataclass of the request's
  version (fields that the version does not have are dropped, error codes and
  durations converted), then header + body, size-prefixed.
"""
from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import typing
from typing import Any, Dict, NamedTuple, Optional, Tuple

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.writers import write_unsigned_varint

from .._twins import module
from .framecheck import FrameError, entity_of, is_array, without_unknown_tags
from .legacy_schema import LEGACY_REQUESTS, LEGACY_RESPONSES

# The frame check of the twin in use: native (a compiled program run in C) when built.
check_request = module(None, "server.framecheck").check_request

__all__ = [
    "API_NAMES", "SUPPORTED_VERSIONS", "SASL_VERSIONS", "ProtocolError", "UnsupportedRequest",
    "MalformedRequest", "Request", "decode_request", "encode_response", "build",
    "request_class", "response_class", "FRAME_HEADER",
]

# Kafka's API keys that this broker knows.
API_NAMES: Dict[int, str] = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
    9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
    13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups",
    17: "SaslHandshake", 18: "ApiVersions", 32: "DescribeConfigs", 36: "SaslAuthenticate",
    42: "DeleteGroups", 44: "IncrementalAlterConfigs",
    47: "OffsetDelete", 68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe",
}

# The advertised version ranges: the set verified with kafka-python, aiokafka and
# confluent-kafka (librdkafka). The consumer group protocol (KIP-848: 68, 69, Metadata
# with topic ids, OffsetCommit/OffsetFetch v9, ListGroups v5) at Kafka 4's versions: a
# client uses it only when configured to (librdkafka's group.protocol=consumer).
SUPPORTED_VERSIONS: Dict[int, Tuple[int, int]] = {
    0: (3, 8),      # Produce: advertised (librdkafka needs it to fetch), answered with an error
    1: (4, 12),     # Fetch: always empty, after max_wait_ms
    2: (1, 6),      # ListOffsets: log start = log end = 0
    3: (0, 12),     # Metadata (v10+: topic ids; v12: topics asked for by id)
    8: (0, 9),      # OffsetCommit (v0-1: Kafka 3.x's, codecs in legacy_schema; v9: member epoch)
    9: (0, 9),      # OffsetFetch (v0: likewise; v9: member id and epoch)
    10: (0, 3),     # FindCoordinator
    11: (0, 7),     # JoinGroup
    12: (0, 4),     # Heartbeat
    13: (0, 4),     # LeaveGroup
    14: (0, 5),     # SyncGroup
    15: (0, 6),     # DescribeGroups (v6: GROUP_ID_NOT_FOUND, error message)
    16: (0, 5),     # ListGroups (v5: types filter)
    18: (0, 3),     # ApiVersions
    32: (1, 4),     # DescribeConfigs: group configs only (Kafka 4 serves v1-v4)
    42: (0, 2),     # DeleteGroups
    44: (0, 1),     # IncrementalAlterConfigs: group configs only
    47: (0, 0),     # OffsetDelete
    68: (0, 1),     # ConsumerGroupHeartbeat (v1: the member id is the client's)
    69: (0, 1),     # ConsumerGroupDescribe
}
# Advertised (and accepted) only when the server has SASL users configured.
SASL_VERSIONS: Dict[int, Tuple[int, int]] = {17: (0, 1), 36: (0, 2)}

API_VERSIONS_KEY = 18
FRAME_HEADER = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")


class ProtocolError(Exception):
    """A frame this broker cannot serve; the connection is closed after it."""


class UnsupportedRequest(ProtocolError):
    """An API key or version that is not served here."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int):
        name = API_NAMES.get(api_key) or _kio_api_name(api_key)
        super().__init__(f"unsupported api key {api_key} ({name}) version {api_version}")
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id


def _kio_api_name(api_key: int) -> str:
    """The name of an API this broker does not serve, from kio's table."""
    from kio.schema.index import api_key_map
    snake = api_key_map.get(api_key)
    return "".join(p.capitalize() for p in snake.split("_")) if snake else "unknown"


class MalformedRequest(ProtocolError):
    """A frame that does not parse as its (api key, version) says it should."""


class Request(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: Optional[str]
    body: Any                     # the kio request dataclass; None for an unsupported ApiVersions
    size: int                     # frame size in bytes (without the 4-byte length prefix)


_request_classes: Dict[Tuple[int, int], Any] = {}
_response_classes: Dict[Tuple[int, int], Any] = {}
_readers: Dict[Any, Any] = {}


def request_class(api_key: int, version: int):
    cls = _request_classes.get((api_key, version))
    if cls is None:
        cls = LEGACY_REQUESTS.get((api_key, version)) or load_request_schema(api_key, version)
        _request_classes[(api_key, version)] = cls
    return cls


def response_class(api_key: int, version: int):
    cls = _response_classes.get((api_key, version))
    if cls is None:
        cls = LEGACY_RESPONSES.get((api_key, version)) or load_response_schema(api_key, version)
        _response_classes[(api_key, version)] = cls
    return cls


def _reader(cls):
    reader = _readers.get(cls)
    if reader is None:
        reader = _readers[cls] = entity_reader(cls)
    return reader


def decode_request(frame, versions: Dict[int, Tuple[int, int]] = SUPPORTED_VERSIONS) -> Request:
    """Decode one frame (without its length prefix).

    Raises `UnsupportedRequest` for an API key or version outside `versions` (except
    ApiVersions, which is answered whatever its version: body None) and
    `MalformedRequest` for anything that does not parse, including trailing bytes.
    """
    size = len(frame)
    if size < _HEADER_PREFIX.size:
        raise MalformedRequest(f"frame of {size} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(frame, 0)
    span = versions.get(api_key)
    if span is None or not span[0] <= api_version <= span[1]:
        if api_key == API_VERSIONS_KEY and api_version >= 0:
            # Kafka answers any ApiVersions, an unsupported version with a v0 body
            # and UNSUPPORTED_VERSION; the client id is of no interest then.
            return Request(api_key, api_version, correlation_id, None, None, size)
        raise UnsupportedRequest(api_key, api_version, correlation_id)
    if api_key == HEARTBEAT_KEY:
        fast = decode_heartbeat_request(frame, api_version, correlation_id)
        if fast is not None:
            return fast
    cls = request_class(api_key, api_version)
    try:
        # kio sizes arrays from their counts before reading them: no count reaches it
        # that the frame cannot hold (framecheck).
        check_request(cls, frame)
    except FrameError as exc:
        raise MalformedRequest(f"{API_NAMES[api_key]} v{api_version}: {exc}") from None
    try:
        header, body = _read(cls, frame)
    except Exception as exc:  # kio raises assorted errors on bad bytes: all mean malformed
        # kio refuses a tagged field its schema does not know, where Kafka skips it
        # (tags are how a version grows): read the frame again without them
        try:
            known = without_unknown_tags(cls, frame)
            if known is None:
                raise exc
            header, body = _read(cls, known)
        except Exception as exc2:
            why = str(exc2) if isinstance(exc2, MalformedRequest) else \
                f"{type(exc2).__name__}: {exc2}"
            raise MalformedRequest(f"{API_NAMES[api_key]} v{api_version}: {why}") from None
    return Request(api_key, api_version, correlation_id, header.client_id, body, size)


def _read(cls, frame):
    """(header, body) of a checked frame, which they must fill to its end."""
    header, used = _reader(cls.__header_schema__)(frame, 0)
    body, used_body = _reader(cls)(frame, used)
    if used + used_body != len(frame):
        raise MalformedRequest(f"{len(frame) - used - used_body} bytes after the request body")
    return header, body


def duration_ms(value) -> int:
    """A kio duration (timedelta) or int as whole milliseconds."""
    if isinstance(value, int):
        return value
    return value // _ONE_MS


# ---- response building -------------------------------------------------------------

_ZERO = datetime.timedelta(0)
_ONE_MS = datetime.timedelta(milliseconds=1)
_shapes: Dict[Any, list] = {}


def _is_nullable(tp) -> bool:
    return type(None) in typing.get_args(tp)


def _shape(cls) -> list:
    shape = _shapes.get(cls)
    if shape is not None:
        return shape
    hints = typing.get_type_hints(cls)
    shape = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        kafka_type = f.metadata.get("kafka_type")
        sub = entity_of(tp)
        is_tuple = is_array(tp)
        has_default = f.default is not dataclasses.MISSING or \
            f.default_factory is not dataclasses.MISSING  # type: ignore[misc]
        if sub is not None:
            kind = "entities" if is_tuple else "entity"
        elif is_tuple:
            kind = "array"
        elif kafka_type == "error_code":
            kind = "error"
        elif kafka_type in ("timedelta_i32", "timedelta_i64"):
            kind = "duration"
        elif kafka_type == "string":
            kind = "string"
        elif kafka_type in ("bytes", "records"):
            kind = "bytes"
        else:
            kind = "plain"
        shape.append((f.name, kind, sub, has_default, _is_nullable(tp)))
    _shapes[cls] = shape
    return shape


def build(cls, values: Dict[str, Any]):
    """Make an instance of kio entity `cls` from a dict of plain values.

    Keys the class does not have are ignored (one dict serves every version); missing
    keys take the field's default (a missing required field raises KeyError, except
    `throttle_time`, which is 0). Error codes may be ints, durations int milliseconds,
    nested entities dicts; None in a non-nullable string, bytes or array field becomes
    empty.
    """
    kwargs = {}
    for name, kind, sub, has_default, nullable in _shape(cls):
        if name in values:
            value = values[name]
        elif has_default:
            continue
        elif name == "throttle_time":
            value = 0
        else:
            raise KeyError(f"{cls.__module__}.{cls.__name__}: no value for required field {name!r}")
        if value is None:
            if not nullable:
                if kind == "string":
                    value = ""
                elif kind == "bytes":
                    value = b""
                elif kind in ("entities", "array"):
                    value = ()
        elif kind == "error":
            value = ErrorCode(int(value))
        elif kind == "duration":
            if isinstance(value, int):
                value = datetime.timedelta(milliseconds=value)
        elif kind == "entities":
            value = tuple(build(sub, v) if isinstance(v, dict) else v for v in value)
        elif kind == "entity":
            if isinstance(value, dict):
                value = build(sub, value)
        elif kind == "array":
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


_writers: Dict[Any, Any] = {}


_HB_V0 = struct.Struct(">iih")          # size, correlation id, error
_HB_V1 = struct.Struct(">iiih")         # size, correlation id, throttle, error
_HB_V4 = struct.Struct(">iibihb")       # size, correlation id, tags, throttle, error, tags
HEARTBEAT_KEY = 12


class HeartbeatBody(NamedTuple):
    """A Heartbeat request body decoded by the hot path (same field names as kio's)."""
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: Optional[str]


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class _Decline(Exception):
    """A form the hot-path decoder leaves to kio."""


def _str16(frame, pos: int, nullable: bool):
    """(string with an int16 length, next position)."""
    (n,) = _I16.unpack_from(frame, pos)
    if n < 0:
        if n == -1 and nullable:
            return None, pos + 2
        raise _Decline
    return str(frame[pos + 2:pos + 2 + n], "utf-8"), pos + 2 + n


def _compact_str(frame, pos: int, nullable: bool):
    """(compact string with a one-byte length, next position)."""
    n = frame[pos] - 1
    if n < 0:
        if nullable:
            return None, pos + 1
        raise _Decline
    if n >= 127:                  # a multi-byte varint length
        raise _Decline
    return str(frame[pos + 1:pos + 1 + n], "utf-8"), pos + 1 + n


def decode_heartbeat_request(frame, api_version: int, correlation_id: int) -> Optional[Request]:
    """The hot path's decoder of a Heartbeat request (header included) without kio.

    It accepts only the plain form of each version (no tagged fields, compact lengths
    of one byte, valid UTF-8, nothing left over) and returns None for anything else, so
    kio decides every unusual or malformed frame exactly as before (tested against kio
    for every advertised version and on mutated frames)."""
    try:
        client_id, pos = _str16(frame, 8, True)
        instance_id = None
        if api_version >= 4:
            if frame[pos] != 0:                 # header tagged fields
                return None
            group_id, pos = _compact_str(frame, pos + 1, False)
            (generation,) = _I32.unpack_from(frame, pos)
            member_id, pos = _compact_str(frame, pos + 4, False)
            instance_id, pos = _compact_str(frame, pos, True)
            if frame[pos] != 0:                 # body tagged fields
                return None
            pos += 1
        else:
            group_id, pos = _str16(frame, pos, False)
            (generation,) = _I32.unpack_from(frame, pos)
            member_id, pos = _str16(frame, pos + 4, False)
            if api_version >= 3:
                instance_id, pos = _str16(frame, pos, True)
        if pos != len(frame):   # bytes left over, or a string cut short by the end
            return None
    except (struct.error, IndexError, UnicodeDecodeError, _Decline):
        return None
    return Request(HEARTBEAT_KEY, api_version, correlation_id, client_id,
                   HeartbeatBody(group_id, generation, member_id, instance_id), len(frame))


def encode_heartbeat_response(api_version: int, correlation_id: int, error_code: int) -> bytes:
    """The Heartbeat response frame (throttle 0, no tagged fields) without kio: the hot
    path's encoder, byte-for-byte what `encode_response` makes with kio (tested for every
    advertised version)."""
    if api_version >= 4:
        return _HB_V4.pack(12, correlation_id, 0, 0, error_code, 0)
    if api_version >= 1:
        return _HB_V1.pack(10, correlation_id, 0, error_code)
    return _HB_V0.pack(6, correlation_id, error_code)


def encode_response(api_key: int, api_version: int, correlation_id: int, body) -> bytes:
    """Size-prefixed response frame: header (v0, or v1 with empty tagged fields for
    flexible versions; ApiVersions always v0) and body. `body` is a dict (see `build`)
    or an instance of the response class."""
    if (api_key == HEARTBEAT_KEY and type(body) is dict and len(body) == 1
            and 0 <= api_version <= 4):
        return encode_heartbeat_response(api_version, correlation_id, int(body["error_code"]))
    cls = response_class(api_key, api_version)
    if isinstance(body, dict):
        repeated = _repeated_last_entities(cls, body)
        if repeated is not None:
            return _encode_with_repeats(api_key, api_version, correlation_id, cls, body,
                                        repeated)
        body = build(cls, body)
    writer = _writers.get(cls)
    if writer is None:
        writer = _writers[cls] = entity_writer(cls)
    buf = io.BytesIO()
    header_flexible = cls.__header_schema__.__flexible__
    buf.write(struct.pack(">ii", 0, correlation_id))
    if header_flexible:
        buf.write(b"\x00")
    writer(buf, body)
    data = buf.getbuffer()
    FRAME_HEADER.pack_into(data, 0, len(data) - 4)
    del data
    return buf.getvalue()


def _repeated_last_entities(cls, values: dict):
    """The name of `cls`'s last field when it is an array of entities that `values`
    gives as a list holding one dict more than once (a describe naming a group again:
    Kafka answers each naming), else None."""
    name, kind, _, _, nullable = _shape(cls)[-1]
    items = values.get(name)
    if kind != "entities" or nullable or type(items) is not list or len(items) < 2:
        return None
    return name if len({id(item) for item in items}) < len(items) else None


def _encode_with_repeats(api_key: int, api_version: int, correlation_id: int, cls,
                         values: dict, name: str) -> bytes:
    """encode_response of a body whose last field's entities repeat, each distinct one
    encoded once: the frame of the body with that array empty, the empty array's bytes
    (an int32 0, or a compact length 1 in flexible versions, followed there by the
    body's empty tag buffer alone) replaced by the count and the entities' bytes."""
    items = values[name]
    sub = _shape(cls)[-1][2]
    writer = _writers.get(sub)
    if writer is None:
        writer = _writers[sub] = entity_writer(sub)
    encoded: Dict[int, bytes] = {}
    parts = []
    for item in items:
        data = encoded.get(id(item))
        if data is None:
            buf = io.BytesIO()
            writer(buf, build(sub, item) if isinstance(item, dict) else item)
            data = encoded[id(item)] = buf.getvalue()
        parts.append(data)
    frame = encode_response(api_key, api_version, correlation_id, dict(values, **{name: []}))
    flexible = cls.__flexible__
    if flexible:
        empty, length = b"\x01", io.BytesIO()
        write_unsigned_varint(length, len(items) + 1)
        count = length.getvalue()
    else:
        empty, count = b"\x00\x00\x00\x00", _I32.pack(len(items))
    tail = 1 if flexible else 0    # the body's tag buffer: no tagged field
    at = len(frame) - tail - len(empty)
    if len(frame) < at + len(empty) or frame[at:at + len(empty)] != empty or \
            (flexible and frame[-1:] != b"\x00"):
        # (a body with tagged fields set after the array: kio encodes it whole)
        return encode_response(api_key, api_version, correlation_id, build(cls, values))
    out = b"".join((frame[:at], count, *parts, frame[at + len(empty):]))
    return FRAME_HEADER.pack(len(out) - 4) + out[4:]


def encode_request(api_key: int, api_version: int, correlation_id: int, body,
                   client_id: Optional[str] = "fastcoord") -> bytes:
    """Size-prefixed request frame (used by tests and the load generator)."""
    cls = request_class(api_key, api_version)
    if isinstance(body, dict):
        body = build(cls, body)
    header_cls = cls.__header_schema__
    header = header_cls(request_api_key=api_key, request_api_version=api_version,
                        correlation_id=correlation_id, client_id=client_id)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_cls)(buf, header)
    entity_writer(cls)(buf, body)
    data = buf.getbuffer()
    FRAME_HEADER.pack_into(data, 0, len(data) - 4)
    del data
    return buf.getvalue()


def decode_response(api_key: int, api_version: int, frame) -> Tuple[int, Any]:
    """(correlation id, response dataclass) from a frame without its length prefix."""
    cls = response_class(api_key, api_version)
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    offset = 4
    if cls.__header_schema__.__flexible__:
        offset += 1 if frame[4] == 0 else _skip_tags(frame, 4)
    body, used = _reader(cls)(frame, offset)
    if offset + used != len(frame):
        raise MalformedRequest(f"{len(frame) - offset - used} bytes after the response body")
    return correlation_id, body


def _skip_tags(frame, offset: int) -> int:
    from kio.serial.readers import read_unsigned_varint
    count, n = read_unsigned_varint(frame, offset)
    pos = offset + n
    for _ in range(count):
        _tag, n = read_unsigned_varint(frame, pos)
        pos += n
        size, n = read_unsigned_varint(frame, pos)
        pos += n + size
    return pos - offset

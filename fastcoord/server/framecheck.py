"""Every length prefix of a request frame checked against the bytes left, before kio
decodes it.

kio's native decoder sizes an array from its count before reading one element: a
count of 2**32-2 in a 20-byte frame makes it ask for 32 GiB, and a failed allocation
aborts the process (no exception to catch). So every frame is walked here first, by a
checker compiled once per request schema from kio's dataclasses, which reads only the
length prefixes and skips over everything else:

- a string, bytes or records length must fit in what is left of the frame;
- an array count must be at most what is left divided by the smallest encoding of one
  element (at least one byte), and every element is then walked in turn, so a nested
  count is checked against what is left at its own position;
- a tagged-field section's count and each field's size must fit, and a tagged field
  the schema knows is walked inside its declared size;
- a null (-1) array where the schema does not allow one is refused, as Kafka's own
  request parsing refuses it (the handlers would otherwise meet None where they
  iterate), and so is any other negative length or count.

The walk stops at the first violation with `FrameError`; what it does not look at
(values, UTF-8, bytes after the body) is left to kio and `decode_request`. The walk is
linear in the frame's size: each element consumes at least one byte or is bounded by
the count check.

Each schema compiles two ways at once, from the same walk over kio's dataclasses: the
Python steps (this module's walk: the pure twin, fastcoord/server/_pure/framecheck.py) and a
flat program of int32 words (`request_program`) that fastcoord/server/_native/framecheck.pyx
runs in C. The program's instructions (a body is the instructions that follow, its
length in words given before it):

  OP_SKIP n                          n fixed bytes
  OP_STR16 | OP_STR32 | OP_CSTR      a string/bytes length: int16, int32, compact varint
  OP_ARRAY flags least size len body an array: flags ARRAY_COMPACT (varint count, else
                                     int32), ARRAY_NULLABLE, ARRAY_FIXED (each element
                                     is `size` bytes: skipped, not walked); `least`
                                     bounds the count (count <= left // least)
  OP_NULLABLE len body               a nullable struct (int8 marker, -1 null)
  OP_TAGS len (tag len body)...      a tagged-field section, the known tags' bodies
"""
from __future__ import annotations

import dataclasses
import struct
import typing
from typing import Callable, Dict, Optional

__all__ = ["FrameError", "check_request", "request_checker", "request_program", "entity_of",
           "is_array", "without_unknown_tags"]


class FrameError(ValueError):
    """A length or count the frame cannot hold, or a null where none is allowed."""


# kafka_type -> encoded size, for the types of one fixed size.
_FIXED = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_LENGTH_PREFIXED = ("string", "bytes", "records")

_I8 = struct.Struct(">b").unpack_from
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from

# A step: (frame, position, end of the window it must stay in, edits) -> position after
# it. `edits` is None for a check; for `without_unknown_tags`' walk, the list that
# collects the (start, end, replacement) byte edits dropping the tagged fields the schema
# does not know. It is passed down the walk, never kept, so that walks on several
# threads at once each collect their own.
Step = Callable[[bytes, int, int, Optional[list]], int]


def _uvarint(frame, pos: int, end: int):
    """(value, next position) of an unsigned varint of at most 5 bytes (as Kafka reads
    one; kio refuses a longer one too)."""
    if pos < end and frame[pos] < 0x80:      # the usual one-byte varint
        return frame[pos], pos + 1
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise FrameError("varint cut short by the end of the frame")
        b = frame[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift >= 35:
            raise FrameError("varint longer than 5 bytes")


def _fixed(size: int) -> Step:
    def step(frame, pos: int, end: int, edits) -> int:
        pos += size
        if pos > end:
            raise FrameError(f"{size}-byte field cut short by the end of the frame")
        return pos
    return step


def _length(name: str, flexible: bool, wide: bool) -> Step:
    """A string (int16 length) or bytes/records (int32) field, compact when flexible:
    its length must fit in what is left. A null is left to kio (which knows the
    field's nullability and refuses a null it does not allow)."""
    def step(frame, pos: int, end: int, edits) -> int:
        if flexible:
            n, pos = _uvarint(frame, pos, end)
            n -= 1
        else:
            width = 4 if wide else 2
            if pos + width > end:
                raise FrameError(f"{name}: length cut short by the end of the frame")
            (n,) = (_I32 if wide else _I16)(frame, pos)
            pos += width
        if n < 0:
            if n == -1:
                return pos
            raise FrameError(f"{name}: negative length {n}")
        if n > end - pos:
            raise FrameError(f"{name}: length {n} with {end - pos} bytes left")
        return pos + n
    return step


def _count(name: str, flexible: bool, nullable: bool, frame, pos: int, end: int):
    """(element count, next position) of an array; -1 for a null one."""
    if flexible:
        n, pos = _uvarint(frame, pos, end)
        n -= 1
    else:
        if pos + 4 > end:
            raise FrameError(f"{name}: array count cut short by the end of the frame")
        (n,) = _I32(frame, pos)
        pos += 4
    if n < 0:
        if n == -1 and nullable:
            return n, pos
        raise FrameError(f"{name}: {'null' if n == -1 else 'negative'} array count {n} "
                         "where the schema allows none")
    return n, pos


def _array(name: str, flexible: bool, nullable: bool, element: Step, element_min: int,
           element_fixed: bool) -> Step:
    least = max(1, element_min)

    def step(frame, pos: int, end: int, edits) -> int:
        n, pos = _count(name, flexible, nullable, frame, pos, end)
        if n <= 0:
            return pos
        if n > (end - pos) // least:
            raise FrameError(f"{name}: array count {n} with {end - pos} bytes left")
        if element_fixed:
            return pos + n * element_min      # fits: checked just above
        for _ in range(n):
            pos = element(frame, pos, end, edits)
        return pos
    return step


def _nullable_entity(name: str, inner: Step) -> Step:
    """A nullable struct: an int8 marker (-1: null) before it."""
    def step(frame, pos: int, end: int, edits) -> int:
        if pos >= end:
            raise FrameError(f"{name}: marker cut short by the end of the frame")
        (marker,) = _I8(frame, pos)
        if marker < 0:
            return pos + 1
        return inner(frame, pos + 1, end, edits)
    return step


# The most edits that walk makes before it refuses the frame: a client sends a few
# unknown tags at most, and each edit costs a Python object (a 16 MB frame holds
# millions of two-byte tags).
MAX_TAG_EDITS = 1024


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tags(owner: str, known: Dict[int, Step]) -> Step:
    """A flexible entity's tagged-field section: a count, then (tag, size, bytes) each;
    a tag the schema knows is walked inside its own size; with `edits`, each tag it
    does not know is recorded there to be dropped."""
    def step(frame, pos: int, end: int, edits) -> int:
        if pos < end and frame[pos] == 0:     # the usual empty section
            return pos + 1
        section = pos
        n, pos = _uvarint(frame, pos, end)
        counted = pos
        if n > (end - pos) // 2:              # a tag and a size take one byte each at least
            raise FrameError(f"{owner}: {n} tagged fields with {end - pos} bytes left")
        dropped = 0
        for _ in range(n):
            field = pos
            tag, pos = _uvarint(frame, pos, end)
            sized = pos
            size, pos = _uvarint(frame, pos, end)
            if size > end - pos:
                raise FrameError(f"{owner}: tagged field {tag} of {size} bytes "
                                 f"with {end - pos} bytes left")
            inner = known.get(tag)
            if inner is not None:
                mark = 0 if edits is None else len(edits)
                inner(frame, pos, pos + size, edits)
                if edits is not None and len(edits) > mark:
                    # unknown tags dropped inside a known one: its size shrinks
                    removed = sum(b - a - len(r) for a, b, r in edits[mark:])
                    edits.append((sized, pos, _varint_bytes(size - removed)))
            elif edits is not None:
                if len(edits) >= MAX_TAG_EDITS:
                    raise FrameError(f"{owner}: more tagged fields the schema does not know "
                                     f"than the server skips")
                edits.append((field, pos + size, b""))
                dropped += 1
            pos += size
        if dropped:
            edits.append((section, counted, _varint_bytes(n - dropped)))
        return pos
    return step


# The native program's opcodes and array flags (fastcoord/server/_native/framecheck.pyx
# declares the same values and refuses to import when they differ).
OP_SKIP, OP_STR16, OP_STR32, OP_CSTR, OP_ARRAY, OP_NULLABLE, OP_TAGS = range(1, 8)
ARRAY_COMPACT, ARRAY_NULLABLE, ARRAY_FIXED = 1, 2, 4

Program = typing.Tuple[int, ...]


class _Compiled(typing.NamedTuple):
    step: Step
    least: int            # the fewest bytes it can take
    fixed: bool           # True: it always takes exactly `least` bytes
    program: Program      # the same check as native program words


def _sequence(steps: list) -> typing.Tuple[Step, Program]:
    """Steps in order, adjacent fixed-size ones merged into one; and their program."""
    merged: list = []
    program: list = []
    run = 0
    for c in steps:
        if c.fixed:
            run += c.least
            continue
        if run:
            merged.append(_fixed(run))
            program += (OP_SKIP, run)
            run = 0
        merged.append(c.step)
        program += c.program
    if run:
        merged.append(_fixed(run))
        program += (OP_SKIP, run)
    if len(merged) == 1:
        return merged[0], tuple(program)
    merged_t = tuple(merged)

    def step(frame, pos: int, end: int, edits) -> int:
        for s in merged_t:
            pos = s(frame, pos, end, edits)
        return pos
    return step, tuple(program)


def _length_program(flexible: bool, wide: bool) -> Program:
    return (OP_CSTR,) if flexible else (OP_STR32,) if wide else (OP_STR16,)


def _array_program(flexible: bool, nullable: bool, element: _Compiled) -> Program:
    flags = ((ARRAY_COMPACT if flexible else 0) | (ARRAY_NULLABLE if nullable else 0)
             | (ARRAY_FIXED if element.fixed else 0))
    body = () if element.fixed else element.program
    return (OP_ARRAY, flags, max(1, element.least), element.least, len(body)) + body


def _tags_program(known: Dict[int, Program]) -> Program:
    table: tuple = ()
    for tag, body in known.items():
        table += (tag, len(body)) + body
    return (OP_TAGS, len(table)) + table


def entity_of(tp) -> Optional[type]:
    """The kio entity class inside a field type (X, tuple[X, ...], X | None), or None."""
    if dataclasses.is_dataclass(tp):
        return tp
    for arg in typing.get_args(tp):
        found = entity_of(arg)
        if found is not None:
            return found
    return None


def is_array(tp) -> bool:
    """Whether a field type is an array (tuple[X, ...], or that | None)."""
    return typing.get_origin(tp) is tuple or any(
        typing.get_origin(a) is tuple for a in typing.get_args(tp))


def _field(owner, f: dataclasses.Field, tp, flexible: bool, tagged: bool,
           cache: dict) -> _Compiled:
    name = f"{owner.__name__}.{f.name}"
    args = typing.get_args(tp)
    nullable = type(None) in args
    sub = entity_of(tp)
    if sub is not None:
        element = _entity(sub, cache)
    else:
        kafka_type = f.metadata.get("kafka_type")
        if kafka_type in _FIXED:
            size = _FIXED[kafka_type]
            element = _Compiled(_fixed(size), size, True, (OP_SKIP, size))
        elif kafka_type in _LENGTH_PREFIXED:
            wide = kafka_type != "string"          # bytes, records: an int32 length
            least = 1 if flexible else (4 if wide else 2)
            element = _Compiled(_length(name, flexible, wide), least, False,
                                _length_program(flexible, wide))
        else:
            raise TypeError(f"{name}: no frame check for kafka_type {kafka_type!r}")
    if is_array(tp):
        return _Compiled(_array(name, flexible, nullable, element.step, element.least,
                                element.fixed), 1 if flexible else 4, False,
                         _array_program(flexible, nullable, element))
    if sub is not None and nullable and not tagged:
        return _Compiled(_nullable_entity(name, element.step), 1, False,
                         (OP_NULLABLE, len(element.program)) + element.program)
    return element


def _entity(cls, cache: dict) -> _Compiled:
    """The checker of one kio entity (request, header or nested struct)."""
    found = cache.get(cls)
    if found is not None:
        return found
    flexible = bool(getattr(cls, "__flexible__", False))
    hints = typing.get_type_hints(cls)
    is_header = cls.__name__ == "RequestHeader"
    steps = []
    known: Dict[int, Step] = {}
    known_programs: Dict[int, Program] = {}
    for f in dataclasses.fields(cls):
        tag = f.metadata.get("tag")
        if is_header and f.name == "client_id":
            # Kafka keeps the header's client id an int16-length string even in
            # flexible headers.
            compiled = _Compiled(_length("RequestHeader.client_id", False, False), 2, False,
                                 _length_program(False, False))
        else:
            compiled = _field(cls, f, hints[f.name], flexible, tag is not None, cache)
        if tag is not None:
            known[int(tag)] = compiled.step
            known_programs[int(tag)] = compiled.program
        else:
            steps.append(compiled)
    if flexible:
        steps.append(_Compiled(_tags(cls.__name__, known), 1, False,
                               _tags_program(known_programs)))
    step, program = _sequence(steps)
    compiled = _Compiled(step, sum(c.least for c in steps), all(c.fixed for c in steps),
                         program)
    cache[cls] = compiled
    return compiled


_checkers: Dict[type, typing.Tuple[Step, Program]] = {}
_cache: dict = {}


def _request(cls) -> typing.Tuple[Step, Program]:
    found = _checkers.get(cls)
    if found is None:
        found = _sequence([_entity(cls.__header_schema__, _cache), _entity(cls, _cache)])
        _checkers[cls] = found
    return found


def request_checker(cls) -> Step:
    """The compiled checker of request class `cls` (header included), made once: a
    `Step`, called (frame, 0, len(frame), None) to check a frame."""
    return _request(cls)[0]


def request_program(cls) -> Program:
    """The same check as `request_checker(cls)`, as the native checker's program."""
    return _request(cls)[1]


def without_unknown_tags(cls, frame) -> Optional[bytes]:
    """The frame of request class `cls` (header included) with every tagged field its
    schema does not know left out (as Kafka's readers skip one), or None when it holds
    none. Raises `FrameError` as `check_request` does."""
    edits: list = []
    request_checker(cls)(frame, 0, len(frame), edits)
    if not edits:
        return None
    out = []
    pos = 0
    for start, end, replacement in sorted(edits):
        out += (frame[pos:start], replacement)
        pos = end
    out.append(frame[pos:])
    return b"".join(out)


def check_request(cls, frame) -> int:
    """Walk a whole request frame (header and body, without the size prefix) of request
    class `cls`; raise `FrameError` at the first length or count it cannot hold.
    Returns where the walk ended (the frame's size for a well-formed one)."""
    return request_checker(cls)(frame, 0, len(frame), None)

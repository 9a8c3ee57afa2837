"""Request frames for the decoder's hostile-input tests, for every advertised
(api, version): a valid frame per schema (every array holding elements, every nullable
value set, tagged fields present, so that every length prefix of the schema occurs in
it), its boundary mutations (each byte position overwritten or preceded by the counts
that sit on an edge: 0, 1, the bytes left, one more, 2**31-1, 2**32-2 as varint, and
-1, -2), and random mutations (hypothesis).

`sweep()` and `fuzz()` run the decoder over them and return what they saw; the tests
call them in a subprocess with an address-space limit (`run_limited`), so a decoder
that tries to allocate what a count claims dies there (SIGABRT) instead of taking
pytest, or the machine's memory, with it.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import subprocess
import sys
import typing
import uuid
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

from fastcoord.server.framecheck import entity_of, is_array
from fastcoord.server.protocol import (
    SASL_VERSIONS, SUPPORTED_VERSIONS, MalformedRequest, UnsupportedRequest, decode_request,
    encode_request, request_class,
)

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
ALL_VERSIONS = {**SUPPORTED_VERSIONS, **SASL_VERSIONS}
ADVERTISED = [(k, v) for k, (lo, hi) in sorted(ALL_VERSIONS.items()) for v in range(lo, hi + 1)]

_VALUES = {
    "string": "ab", "bytes": b"\x01\x02", "records": b"\x01\x02", "bool": True,
    "int8": 1, "int16": 1, "int32": 1, "int64": 1, "uint8": 1, "uint16": 1, "uint32": 1,
    "uint64": 1, "float64": 1.0, "timedelta_i32": datetime.timedelta(milliseconds=1),
    "timedelta_i64": datetime.timedelta(milliseconds=1),
    "uuid": uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF),
}


def sample(cls, elements: int = 2, nulls: Tuple[str, ...] = ()):
    """An instance of kio entity `cls` with every field set (arrays of `elements`),
    except the fields whose dotted paths are in `nulls`, which are None."""
    return _sample(cls, elements, nulls, "")


def _sample(cls, elements: int, nulls, prefix: str):
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        tp = hints[f.name]
        if path in nulls:
            values[f.name] = None
            continue
        sub = entity_of(tp)
        if sub is not None:
            one = lambda: _sample(sub, elements, nulls, path + ".")  # noqa: E731
        else:
            value = _VALUES[f.metadata["kafka_type"]]
            one = lambda value=value: value  # noqa: E731
        values[f.name] = tuple(one() for _ in range(elements)) if is_array(tp) else one()
    return cls(**values)


def array_paths(cls, prefix: str = "") -> Iterator[Tuple[str, bool]]:
    """(dotted path, nullable) of every array field of `cls`, nested ones included."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        path = prefix + f.name
        if is_array(tp):
            yield path, type(None) in typing.get_args(tp)
        sub = entity_of(tp)
        if sub is not None:
            yield from array_paths(sub, path + ".")


def valid_frame(api_key: int, version: int, elements: int = 2, nulls=()) -> bytes:
    """The frame (no size prefix) of a full request of (api_key, version)."""
    body = sample(request_class(api_key, version), elements, nulls)
    return encode_request(api_key, version, 7, body, client_id="fuzz")[4:]


def varint(n: int) -> bytes:
    """An unsigned varint (Kafka's compact lengths)."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def boundary_mutations(frame: bytes) -> Iterator[bytes]:
    """For each position after the 8-byte header prefix: an int16, int32 and varint
    holding each edge count, written over the bytes there and inserted before them."""
    for pos in range(8, len(frame) + 1):
        left = len(frame) - pos
        counts = {0, 1, left, left + 1, left // 2 + 1, 2**31 - 1, 2**32 - 2, 2**15 - 1}
        encodings = set()
        for n in counts:
            encodings.add(varint(n + 1))           # compact: count + 1
            if n < 2**31:
                encodings.add(n.to_bytes(4, "big"))
            if n < 2**15:
                encodings.add(n.to_bytes(2, "big"))
        encodings.update((b"\xff\xff", b"\xff\xfe", b"\xff\xff\xff\xff", b"\xff\xff\xff\xfe",
                          b"\xff\xff\xff\xff\xff\x01"))
        for enc in sorted(encodings):
            yield frame[:pos] + enc + frame[pos + len(enc):]
            yield frame[:pos] + enc + frame[pos:]


def _decode(frame: bytes, seen: Dict[str, int]) -> None:
    """decode_request must answer or raise one of its two errors, nothing else."""
    try:
        decode_request(frame, ALL_VERSIONS)
        seen["decoded"] += 1
    except MalformedRequest:
        seen["malformed"] += 1
    except UnsupportedRequest:
        seen["unsupported"] += 1


def decode_all(hex_frames: List[str]) -> List[str]:
    """decode_request's verdict on each frame: "decoded", or the MalformedRequest's or
    UnsupportedRequest's message."""
    out = []
    for h in hex_frames:
        try:
            decode_request(bytes.fromhex(h), ALL_VERSIONS)
            out.append("decoded")
        except (MalformedRequest, UnsupportedRequest) as exc:
            out.append(str(exc))
    return out


def sweep(stride: int = 1) -> Dict[str, int]:
    """Every boundary mutation of every advertised (api, version)'s valid frame, in
    one pass (every `stride`-th one)."""
    seen = {"decoded": 0, "malformed": 0, "unsupported": 0, "pairs": 0}
    for api_key, version in ADVERTISED:
        seen["pairs"] += 1
        for i, frame in enumerate(boundary_mutations(valid_frame(api_key, version))):
            if i % stride == 0:
                _decode(frame, seen)
    return seen


def fuzz(max_examples: int) -> Dict[str, int]:
    """Random mutations of valid frames of every advertised (api, version): bytes
    overwritten, inserted, deleted, the frame cut (hypothesis, derandomized)."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    seen = {"decoded": 0, "malformed": 0, "unsupported": 0}
    frames = {pair: valid_frame(*pair, elements=1) for pair in ADVERTISED}

    @settings(max_examples=max_examples, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        _decode(mutated(data.draw, frames), seen)

    run()
    return seen


def mutated(draw, frames: Dict[Tuple[int, int], bytes]) -> bytes:
    """One random mutation (hypothesis `draw`) of one of `frames`."""
    from hypothesis import strategies as st

    frame = bytearray(frames[draw(st.sampled_from(sorted(frames)))])
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["set", "insert", "delete", "count"]))
        pos = draw(st.integers(8, len(frame)))
        if kind == "set" and pos < len(frame):
            frame[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            frame[pos:pos] = draw(st.binary(min_size=1, max_size=6))
        elif kind == "delete":
            del frame[pos:pos + draw(st.integers(1, 4))]
        else:
            enc = draw(st.sampled_from([varint(2**32 - 1), varint(2**31), b"\x7f\xff\xff\xff",
                                        b"\x7f\xff", b"\xff\xff\xff\xff", b"\x80\x80\x80\x80\x10"]))
            frame[pos:pos + len(enc)] = enc
    if draw(st.booleans()):
        frame = frame[:draw(st.integers(0, len(frame)))]
    return bytes(frame)


# ---- running them in a subprocess with an address-space limit ------------------------------

_LIMITED = """
import json, resource, sys
sys.path.insert(0, {tests!r})
from helpers import frames as frame_samples
import hypothesis
with open("/proc/self/status") as f:
    vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
limit = vm + {headroom}
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
print(json.dumps(getattr(frame_samples, {func!r})(*{args!r})))
"""


def run_limited(func: str, *args, headroom: int = 1 << 30, timeout: float = 120
                ) -> Tuple[int, dict, str]:
    """(exit status, the JSON result, stderr) of helpers.frames.`func`(*args) in a
    subprocess allowed `headroom` bytes of address space more than it started with."""
    code = _LIMITED.format(tests=str(TESTS), headroom=headroom, func=func, args=list(args))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=timeout,
                          cwd=str(ROOT))
    out = proc.stdout.decode().strip().splitlines()
    result = json.loads(out[-1]) if proc.returncode == 0 and out else {}
    return proc.returncode, result, proc.stderr.decode(errors="replace")[-3000:]


def null_array_frames() -> List[Tuple[int, int, str, bool, bytes]]:
    """(api, version, path, nullable, frame) with the array at `path` null, for every
    array field of every advertised (api, version)."""
    out = []
    for api_key, version in ADVERTISED:
        for path, nullable in array_paths(request_class(api_key, version)):
            out.append((api_key, version, path, nullable,
                        valid_frame(api_key, version, elements=1, nulls=(path,))))
    return out

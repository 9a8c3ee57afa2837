"""Heartbeat frames for the hot-path codec tests (tests/server/test_server_codec.py,
test_server_fastpath.py): random valid ones, mutated ones, and kio's reading of one.
Import after `pytest.importorskip("kio")`: the protocol module needs kio."""
from __future__ import annotations

from fastcoord.server.protocol import SUPPORTED_VERSIONS, encode_request

# Heartbeat error codes the responses are checked with
ERRORS = [0, 14, 15, 16, 22, 24, 25, 27, 30, 82]


def kio_decode(frame: bytes, version: int):
    """kio's reading of a Heartbeat frame: (client_id, body fields) or None if malformed."""
    from fastcoord.server.protocol import _reader, request_class
    cls = request_class(12, version)
    try:
        header, used = _reader(cls.__header_schema__)(frame, 0)
        body, used_body = _reader(cls)(frame, used)
    except Exception:
        return None
    if used + used_body != len(frame):
        return None
    return (header.client_id, body.group_id, body.generation_id, body.member_id,
            getattr(body, "group_instance_id", None))


def _random_text(rng, allow_long=True) -> str:
    alphabet = "abcXYZ019-_.é漢 "
    n = rng.choice([0, 1, 5, 36, 126, 127, 200] if allow_long else [0, 1, 5, 36])
    return "".join(rng.choice(alphabet) for _ in range(n))


def random_frames(rng, count: int):
    lo, hi = SUPPORTED_VERSIONS[12]
    for _ in range(count):
        version = rng.randint(lo, hi)
        body = {"group_id": _random_text(rng), "generation_id": rng.randint(-2**31, 2**31 - 1),
                "member_id": _random_text(rng),
                "group_instance_id": rng.choice([None, _random_text(rng)]) if version >= 3 else None}
        client = rng.choice([None, "", "consumer-1", _random_text(rng)])
        yield version, encode_request(12, version, rng.randint(0, 2**31 - 1), body,
                                      client_id=client)[4:]


def mutate(rng, frame: bytes) -> bytes:
    """The frame truncated, extended with random bytes, or with a few bits flipped."""
    data = bytearray(frame)
    kind = rng.randrange(3)
    if kind == 0 and len(data) > 8:
        del data[rng.randrange(8, len(data)):]
    elif kind == 1:
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
    else:
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(8, len(data))
            data[i] ^= 1 << rng.randrange(8)
    return bytes(data)

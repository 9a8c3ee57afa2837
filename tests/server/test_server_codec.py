"""The hand-written hot-path codec (Heartbeat responses) against kio, byte for byte,
and pipelined requests answered in order through the corked write path."""
from __future__ import annotations

import io
import struct

import pytest

pytest.importorskip("kio")

from kio.serial import entity_writer  # noqa: E402

from fastcoord.server.protocol import (  # noqa: E402
    SUPPORTED_VERSIONS, build, decode_response, encode_heartbeat_response, encode_request,
    encode_response, response_class,
)
from helpers.heartbeats import ERRORS, kio_decode, mutate, random_frames  # noqa: E402
from helpers.server import ServerProc  # noqa: E402

def _kio_frame(version: int, corr: int, error: int) -> bytes:
    """The response as kio writes it (no fast path involved)."""
    cls = response_class(12, version)
    body = build(cls, {"error_code": error})
    buf = io.BytesIO()
    buf.write(struct.pack(">ii", 0, corr))
    if cls.__header_schema__.__flexible__:
        buf.write(b"\x00")
    entity_writer(cls)(buf, body)
    data = bytearray(buf.getvalue())
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


@pytest.mark.parametrize("version", range(SUPPORTED_VERSIONS[12][0], SUPPORTED_VERSIONS[12][1] + 1))
@pytest.mark.parametrize("corr", [0, 1, 2**31 - 1, -5])
def test_heartbeat_response_matches_kio(version, corr):
    for error in ERRORS:
        expected = _kio_frame(version, corr, error)
        assert encode_heartbeat_response(version, corr, error) == expected
        assert encode_response(12, version, corr, {"error_code": error}) == expected


def test_pipelined_heartbeats_are_answered_in_order_in_few_writes(tmp_path):
    """200 heartbeats sent in one write come back in order, each with its correlation id."""
    import socket
    server = ServerProc(tmp_path / "server.log", "--store", "memory")
    try:
        frames = b"".join(encode_request(12, v % 5, 1000 + v, {
            "group_id": "g", "generation_id": 1, "member_id": "nobody",
            "group_instance_id": None}) for v in range(200))
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(frames)
            data = b""
            got = []
            while len(got) < 200:
                chunk = sock.recv(65536)
                assert chunk, f"closed after {len(got)} responses"
                data += chunk
                while len(data) >= 4 and len(data) >= 4 + int.from_bytes(data[:4], "big"):
                    size = int.from_bytes(data[:4], "big")
                    frame, data = data[4:4 + size], data[4 + size:]
                    corr = int.from_bytes(frame[:4], "big")
                    version = (corr - 1000) % 5
                    assert frame == encode_heartbeat_response(version, corr, 25)[4:]
                    got.append(corr)
        assert got == [1000 + v for v in range(200)]
    finally:
        assert server.stop() == 0, server.log()


# ---- the hot-path Heartbeat request decoder against kio ------------------------------------

def _fast(frame: bytes, version: int):
    from fastcoord.server.protocol import decode_heartbeat_request
    req = decode_heartbeat_request(frame, version, int.from_bytes(frame[4:8], "big", signed=True))
    if req is None:
        return None
    b = req.body
    return (req.client_id, b.group_id, b.generation_id, b.member_id, b.group_instance_id)


def test_heartbeat_request_decoder_matches_kio():
    import random
    rng = random.Random(4)
    fast_hits = 0
    for version, frame in random_frames(rng, 3000):
        expected = kio_decode(frame, version)
        assert expected is not None
        got = _fast(frame, version)
        if got is not None:        # the fast path may decline (e.g. long compact strings)
            fast_hits += 1
            assert got == expected, (version, frame)
    assert fast_hits > 1500       # the plain form (the hot path) is taken


def test_heartbeat_request_decoder_on_mutated_frames():
    """Truncated, extended, bit-flipped frames: the fast path declines or agrees with
    kio; it never accepts what kio rejects."""
    import random
    rng = random.Random(5)
    for version, frame in random_frames(rng, 3000):
        data = mutate(rng, frame)
        got = _fast(data, version)
        if got is not None:
            assert got == kio_decode(data, version), (version, frame, data)


def test_request_log_lines_are_the_json_of_their_fields(tmp_path):
    """The hand-formatted request log line is exactly json.dumps of its fields."""
    import json
    from types import SimpleNamespace

    from fastcoord import Errors
    from fastcoord.server.protocol import HeartbeatBody, Request
    from fastcoord.server.requestlog import RequestLog

    log = RequestLog(tmp_path / "requests.jsonl")
    conn = SimpleNamespace(session=SimpleNamespace(peer_host="127.0.0.1"))
    cases = [
        (Request(12, 4, 1, "c\u00e9\"\\\n", HeartbeatBody("g\u6f22", 3, "m-1", None), 30),
         {"error_code": int(Errors.REBALANCE_IN_PROGRESS)}),
        (Request(12, 0, 2, None, HeartbeatBody("", -1, "", None), 18),
         {"error_code": Errors.NONE}),
        (Request(18, 3, 3, "x", None, 10), {"error_code": 0, "api_keys": []}),
        (Request(8, 7, 4, "y", SimpleNamespace(group_id="g", member_id="m",
                                               generation_id_or_member_epoch=-1), 40),
         {"topics": []}),
        (Request(99, 0, 5, "z", None, 8), {"error_code": 35}),
    ]
    for request, body in cases:
        log.record(conn, request, body, 0.0012345)
    log.close()
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    assert len(lines) == len(cases)
    for line, (request, body) in zip(lines, cases):
        record = json.loads(line)
        req = request.body
        generation = getattr(req, "generation_id", None)
        if generation is None:
            generation = getattr(req, "generation_id_or_member_epoch", None)
        expected = {
            "ts": record["ts"], "api": {12: "Heartbeat", 18: "ApiVersions",
                                        8: "OffsetCommit"}.get(request.api_key, 99),
            "version": request.api_version, "client": request.client_id,
            "host": "127.0.0.1", "group": getattr(req, "group_id", None),
            "member": getattr(req, "member_id", None), "generation": generation,
            "error": body.get("error_code"), "latency_ms": 1.234}
        assert record == expected
        # ... and the text json.dumps makes of those fields, but for the two numbers
        # in fixed point (microseconds, milliseconds to 3 decimals: what the heartbeat
        # fast paths format in C too)
        text = json.dumps(expected, separators=(",", ":"))
        text = text.replace(f'"ts":{json.dumps(record["ts"])}', f'"ts":{record["ts"]:.6f}', 1)
        assert line == text


# -- a describe answering a group it was asked for more than once -------------------------------
_MEMBER = {"member_id": "a", "instance_id": "i", "rack_id": None, "member_epoch": 1,
           "client_id": "c", "client_host": "/10.0.0.1",
           "subscribed_topic_names": ["orders", "payments"], "subscribed_topic_regex": "",
           "assignment": {"topic_partitions": []}, "target_assignment": {"topic_partitions": []},
           "member_type": 1}
_DESCRIBED = {"error_code": 0, "group_id": "g", "group_state": "Stable", "group_epoch": 3,
              "assignment_epoch": 3, "assignor_name": "uniform", "authorized_operations": 328,
              "members": [_MEMBER, dict(_MEMBER, member_id="b", instance_id=None)]}
_CLASSIC = {"error_code": 0, "error_message": None, "group_id": "c", "group_state": "Stable",
            "protocol_type": "consumer", "protocol_data": "range", "authorized_operations": 328,
            "members": [{"member_id": "x", "group_instance_id": None, "client_id": "c",
                         "client_host": "/h", "member_metadata": b"\x00\x01",
                         "member_assignment": b"\x02"}]}


@pytest.mark.parametrize("api_key, entry", [(69, _DESCRIBED), (15, _CLASSIC)])
def test_a_describe_naming_a_group_again_encodes_as_kio_does(api_key, entry):
    # (the answer repeats the group's entry, as Kafka's; its bytes are made once)
    other = dict(entry, group_id="other")
    lo, hi = SUPPORTED_VERSIONS[api_key]
    # (200 entries: a count of two varint bytes in flexible versions)
    for groups in ([entry, other, entry, entry, other], [entry, other] * 100):
        for version in range(lo, hi + 1):
            whole = build(response_class(api_key, version), {"groups": groups})
            assert encode_response(api_key, version, 41, {"groups": groups}) == \
                encode_response(api_key, version, 41, whole), version
            _, body = decode_response(api_key, version, encode_response(
                api_key, version, 41, {"groups": groups})[4:])
            assert [g.group_id for g in body.groups] == [g["group_id"] for g in groups]

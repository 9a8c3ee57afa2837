"""Bad input: oversized, truncated, malformed and unknown requests, silent and
excess connections. Each gets Kafka's behaviour (an error response where the protocol
has one, otherwise a closed connection) and a log line; the server keeps serving
everyone else. Plus hypothesis fuzzing of the frame decoder, in process and over a
socket next to a healthy client."""
from __future__ import annotations

import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fastcoord.server.protocol import (
    SUPPORTED_VERSIONS, ProtocolError, decode_request, encode_request,
)
from helpers.server import RawConn, ServerProc, wait_until

HEARTBEAT = {"group_id": "g", "generation_id": 0, "member_id": "nobody"}
METADATA = {"topics": None, "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}
MAX_FRAME = 65536


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = ServerProc(tmp_path_factory.mktemp("bad") / "server.log",
                      "--max-frame-bytes", str(MAX_FRAME), "--max-connections", "64",
                      topics=["orders:4"])
    yield proc
    assert proc.stop() == 0
    assert "Traceback" not in proc.log(), proc.log()[-3000:]


@pytest.fixture
def healthy(server):
    conn = RawConn(server.port)
    assert conn.call(12, 4, HEARTBEAT).error_code == 25
    yield conn
    # still served after whatever the test did on other connections
    assert conn.call(12, 4, HEARTBEAT).error_code == 25
    assert len(conn.call(3, 9, METADATA).topics) == 1
    conn.close()


def _logged(server, text: str, timeout: float = 5.0) -> bool:
    return wait_until(lambda: text in server.log(), timeout)


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_oversized_frame_closes_the_connection(server, healthy):
    conn = RawConn(server.port)
    conn.send_raw(struct.pack(">i", MAX_FRAME + 1) + b"\x00" * 16)
    assert conn.closed_by_server()
    assert _logged(server, f"frame of {MAX_FRAME + 1} bytes rejected")


def test_negative_frame_size_closes_the_connection(server, healthy):
    conn = RawConn(server.port)
    conn.send_raw(struct.pack(">i", -5))
    assert conn.closed_by_server()
    assert _logged(server, "frame of -5 bytes rejected")


def test_truncated_request_closes_the_connection(server, healthy):
    whole = encode_request(12, 4, 1, HEARTBEAT)[4:]
    conn = RawConn(server.port)
    conn.send_raw(_frame(whole[:-4]))        # a complete frame holding half a heartbeat
    assert conn.closed_by_server()
    assert _logged(server, "malformed request: Heartbeat v4")


def test_trailing_bytes_close_the_connection(server, healthy):
    conn = RawConn(server.port)
    conn.send_raw(_frame(encode_request(12, 3, 1, HEARTBEAT)[4:] + b"junk"))
    assert conn.closed_by_server()
    assert _logged(server, "4 bytes after the request body")


def test_frame_shorter_than_a_header_closes_the_connection(server, healthy):
    conn = RawConn(server.port)
    conn.send_raw(_frame(b"\x00\x12\x00"))
    assert conn.closed_by_server()
    assert _logged(server, "shorter than a request header")


@pytest.mark.parametrize("api_key,version,name", [
    (68, 2, "ConsumerGroupHeartbeat"),     # KIP-848, above the versions served
    (76, 0, "ShareGroupHeartbeat"),        # KIP-932: not served
    (999, 0, "unknown"),
    (12, 99, "Heartbeat"),                 # a known API at an unknown version
    (1, 3, "Fetch"),                       # below the advertised range
])
def test_unsupported_api_or_version_closes_the_connection(server, healthy, api_key, version, name):
    conn = RawConn(server.port)
    conn.send_raw(_frame(struct.pack(">hhih", api_key, version, 9, -1) + b"\x00" * 8))
    assert conn.closed_by_server()
    assert _logged(server, f"unsupported api key {api_key} ({name}) version {version}")


def test_a_partial_frame_waits_for_the_rest(server, healthy):
    """Bytes arriving one at a time make one request, not an error."""
    conn = RawConn(server.port)
    conn._corr += 1
    data = encode_request(12, 4, conn._corr, HEARTBEAT)
    conn.sent[conn._corr] = (12, 4)
    for i in range(len(data)):
        conn.send_raw(data[i:i + 1])
        time.sleep(0.001)
    assert conn.recv()[1].error_code == 25
    conn.close()


def test_too_many_connections_are_refused(tmp_path):
    proc = ServerProc(tmp_path / "server.log", "--max-connections", "3")
    try:
        conns = [RawConn(proc.port) for _ in range(3)]
        for c in conns:
            assert c.call(12, 4, HEARTBEAT).error_code == 25
        extra = RawConn(proc.port)
        assert extra.closed_by_server()
        assert _logged(proc, "3 connections is the maximum")
        conns[0].close()
        assert wait_until(lambda: _try_heartbeat(proc.port), 5)   # a slot is free again
        for c in conns[1:]:
            assert c.call(12, 4, HEARTBEAT).error_code == 25
    finally:
        assert proc.stop() == 0


def _try_heartbeat(port: int) -> bool:
    conn = RawConn(port)
    try:
        return conn.call(12, 4, HEARTBEAT).error_code == 25
    except (AssertionError, OSError):
        return False
    finally:
        conn.close()


def test_idle_connection_is_closed(tmp_path):
    proc = ServerProc(tmp_path / "server.log", "--idle-timeout-ms", "400")
    try:
        silent = RawConn(proc.port)
        started = time.monotonic()
        assert silent.closed_by_server(timeout=5)
        assert 0.35 <= time.monotonic() - started < 3
        assert _logged(proc, "idle for")
    finally:
        assert proc.stop() == 0


# ---- fuzzing ------------------------------------------------------------------------------

_ADVERTISED = [(k, v) for k, (lo, hi) in SUPPORTED_VERSIONS.items() for v in range(lo, hi + 1)]


@st.composite
def malformed_frames(draw) -> bytes:
    """Frame payloads (no length prefix): random bytes, or a valid header of an
    advertised (API, version) followed by random or cut or mutated body bytes."""
    kind = draw(st.sampled_from(["random", "header+random", "mutated"]))
    if kind == "random":
        return draw(st.binary(max_size=200))
    api_key, version = draw(st.sampled_from(_ADVERTISED))
    if kind == "header+random":
        head = struct.pack(">hhih", api_key, version, draw(st.integers(0, 2**31 - 1)), -1)
        return head + draw(st.binary(max_size=200))
    valid = bytearray(encode_request(12, 4, 1, HEARTBEAT)[4:] if api_key == 12 else
                      encode_request(3, 9, 1, METADATA)[4:])
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(valid) - 1))
        valid[pos] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(valid)))
    return bytes(valid[:cut])


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(malformed_frames())
def test_fuzz_decoder_only_ever_raises_protocol_errors(payload):
    try:
        request = decode_request(payload)
    except ProtocolError:
        return
    # it parsed: then it is a well-formed request of an advertised version
    lo, hi = SUPPORTED_VERSIONS.get(request.api_key, (0, 2**15))
    assert request.api_key == 18 or lo <= request.api_version <= hi


def test_fuzz_over_the_socket_leaves_a_healthy_client_alone(server, healthy):
    """Hundreds of malformed frames, each on its own connection, interleaved with
    requests on one healthy connection: every healthy request answered, server up."""
    sent = 0

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(malformed_frames())
    def attack(payload):
        nonlocal sent
        conn = RawConn(server.port)
        try:
            conn.send_raw(_frame(payload))
            conn.sock.settimeout(2)
            try:
                conn.sock.recv(65536)   # an answer (ApiVersions), or the close
            except OSError:
                pass
        finally:
            conn.close()
        sent += 1
        assert healthy.call(12, 4, HEARTBEAT).error_code == 25

    attack()
    assert sent >= 300
    assert server.alive()

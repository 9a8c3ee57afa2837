"""Byte level: every advertised (API, version) round-trips through kio, in process and
over a socket to a running `fastcoord serve`; ordering, delayed fetch, produce, and
the clean shutdown that answers parked requests."""
from __future__ import annotations

import datetime
import json
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from kio.static.primitive import Records, i64Timedelta

from fastcoord.server.protocol import (
    SUPPORTED_VERSIONS, HeartbeatBody, decode_request, encode_request, encode_response, request_class,
)
from helpers.server import RawConn, ServerProc

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
# kio's own strategy draws int64 durations up to 2**63 ms, which its reader cannot turn
# back into a timedelta (a kio limit, not a wire one): stay within +-2**45 ms (~1100 years).
st.register_type_strategy(i64Timedelta, st.integers(-2**45, 2**45).map(
    lambda ms: datetime.timedelta(milliseconds=ms)))

ADVERTISED = [(k, v) for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items()) for v in range(lo, hi + 1)]
TOPIC = "orders"


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_every_advertised_request_round_trips_through_kio(data):
    """A random request of every advertised (API, version), encoded by kio, decodes
    in the server to the same value (headers with and without tagged fields)."""
    api_key, version = data.draw(st.sampled_from(ADVERTISED))
    body = data.draw(st.from_type(request_class(api_key, version)))
    correlation = data.draw(st.integers(-2**31, 2**31 - 1))
    client_id = data.draw(st.none() | st.text(max_size=20))
    frame = encode_request(api_key, version, correlation, body, client_id)
    request = decode_request(frame[4:])
    assert (request.api_key, request.api_version, request.correlation_id) == \
        (api_key, version, correlation)
    assert request.client_id == client_id
    if isinstance(request.body, HeartbeatBody):     # the hot path's own decoder
        assert request.body == (body.group_id, body.generation_id, body.member_id,
                                getattr(body, "group_instance_id", None))
    else:
        assert request.body == body


# One record batch of magic 2 holding no record (what Produce from v3 must carry, one
# batch exactly): base offset 0, its length past the first 12 bytes, then the header
_BATCH = Records(struct.pack(">qiibIhiqqqhii", 0, 49, -1, 2, 0, 0, -1, -1, -1, -1, -1, -1, 0))


def _sample(api_key: int, version: int) -> dict:
    """A sane request of every API, as a dict valid for all its versions."""
    partition = {"partition": 0, "partition_index": 0, "fetch_offset": 0,
                 "partition_max_bytes": 1 << 20, "timestamp": -1, "committed_offset": 5,
                 "committed_metadata": "m", "index": 0, "records": Records(b"")}
    return {
        0: {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
            {"name": TOPIC, "partition_data": [partition | {"records": _BATCH}]}]},
        1: {"max_wait": 0, "min_bytes": 1, "topics": [
            {"topic": TOPIC, "partitions": [partition]}], "forgotten_topics_data": []},
        2: {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [partition]}]},
        3: {"topics": None, "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False},
        8: {"group_id": "wire", "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": TOPIC, "partitions": [partition]}]},
        9: {"group_id": "wire", "topics": [{"name": TOPIC, "partition_indexes": [0]}],
            "groups": [{"group_id": "wire", "topics": None}]},
        10: {"key": "wire", "key_type": 0, "coordinator_keys": ["wire"]},
        11: {"group_id": f"wire-join-{version}", "session_timeout": 10000,
             "rebalance_timeout": 10000, "member_id": "", "protocol_type": "consumer",
             "protocols": [{"name": "range", "metadata": b"\x00"}]},
        12: {"group_id": "wire", "generation_id": 0, "member_id": "nobody"},
        13: {"group_id": "wire", "member_id": "nobody", "members": [{"member_id": "nobody"}]},
        14: {"group_id": "wire", "generation_id": 0, "member_id": "nobody", "assignments": [],
             "protocol_type": "consumer", "protocol_name": "range"},    # (v5: mandatory)
        15: {"groups": ["never-created"], "include_authorized_operations": False},
        16: {"states_filter": []},
        18: {"client_software_name": "wire-test", "client_software_version": "1.0"},
        42: {"groups_names": ["never-created"]},
        47: {"group_id": "never-created", "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0}]}]},
        68: {"group_id": f"wire-cg-{version}", "member_id": f"wire-member-{version}",
             "member_epoch": 0, "rebalance_timeout": 10000, "subscribed_topic_names": [TOPIC],
             "topic_partitions": []},
        69: {"group_ids": ["never-created"], "include_authorized_operations": False},
        32: {"resources": [{"resource_type": 32, "resource_name": "wire",
                            "configuration_keys": None}],
             "include_synonyms": True, "include_documentation": True},
        44: {"resources": [{"resource_type": 32, "resource_name": f"wire-config-{version}",
                            "configs": [{"name": "consumer.heartbeat.interval.ms",
                                         "config_operation": 0, "value": "6000"}]}],
             "validate_only": False},
    }[api_key]


# What each API answers to its sample (top-level or first partition error code).
_EXPECTED_ERROR = {0: 42, 1: 0, 2: 0, 8: 0, 10: 0, 12: 25, 13: 25, 14: 25, 15: 0, 18: 0,
                   42: 69, 47: 69, 68: 0, 69: 69, 32: 0, 44: 0}
# Versions answered otherwise: OffsetCommit v0 (Kafka 3.x without ZooKeeper), DescribeGroups
# v6 (an unknown group is GROUP_ID_NOT_FOUND from v6 on).
_EXPECTED_ERROR_AT = {(8, 0): 35, (15, 6): 69}


def _first_error(api_key: int, response):
    if api_key == 0:
        return response.responses[0].partition_responses[0].error_code
    if api_key in (1,):
        return response.responses[0].partitions[0].error_code
    if api_key == 2:
        return response.topics[0].partitions[0].error_code
    if api_key == 8:
        return response.topics[0].partitions[0].error_code
    if api_key == 10:
        return response.coordinators[0].error_code if hasattr(response, "coordinators") \
            else response.error_code
    if api_key == 13 and hasattr(response, "members") and response.members:
        return response.members[0].error_code
    if api_key == 42:
        return response.results[0].error_code
    if api_key in (15, 69):
        return response.groups[0].error_code
    if api_key == 32:
        return response.results[0].error_code
    if api_key == 44:
        return response.responses[0].error_code
    return response.error_code


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = ServerProc(tmp_path_factory.mktemp("wire") / "server.log", topics=[f"{TOPIC}:4"])
    yield proc
    assert proc.stop() == 0
    assert "Traceback" not in proc.log(), proc.log()


@pytest.mark.parametrize("api_key,version", ADVERTISED,
                         ids=[f"{k}v{v}" for k, v in ADVERTISED])
def test_every_advertised_version_is_served(server, api_key, version):
    """Send the sample request; the response parses with kio exactly (no bytes left
    over), re-encodes to the same bytes, and carries the expected answer."""
    conn = RawConn(server.port)
    try:
        corr = conn.send(api_key, version, _sample(api_key, version))
        frame = conn.recv_frame()
        assert frame is not None, server.log()[-2000:]
        conn.sent.pop(corr)
        from fastcoord.server.protocol import decode_response
        got, response = decode_response(api_key, version, frame)
        assert got == corr
        assert encode_response(api_key, version, corr, response)[4:] == frame
        if api_key in _EXPECTED_ERROR:
            assert _first_error(api_key, response) == _EXPECTED_ERROR_AT.get(
                (api_key, version), _EXPECTED_ERROR[api_key])
        if api_key == 3:
            assert [t.name for t in response.topics] == [TOPIC]
            assert len(response.topics[0].partitions) == 4
            assert response.brokers[0].port == server.port
        if api_key == 11:   # v4+: the member-id round trip; before: a full join
            assert response.error_code == (79 if version >= 4 else 0)
        if api_key == 18:
            keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            assert keys == SUPPORTED_VERSIONS
            assert keys[68] == keys[69] == (0, 1)      # the consumer group protocol
        if api_key == 15:
            assert response.groups[0].group_state == "Dead"
            if version >= 6:
                assert response.groups[0].error_message == "Group never-created not found."
        if api_key == 69:
            assert response.groups[0].error_message == "Group never-created not found."
        if api_key == 68:      # a join: the member gets an epoch and its share of TOPIC
            assert response.member_epoch >= 1 and response.member_id == f"wire-member-{version}"
    finally:
        conn.close()


def test_committed_offset_reads_back_over_every_offset_fetch_version(server):
    conn = RawConn(server.port)
    try:
        commit = _sample(8, 7) | {"group_id": "wire-read"}
        assert conn.call(8, 7, commit).topics[0].partitions[0].error_code == 0
        # v0 read ZooKeeper's offsets in Kafka 3.x: not this one (test_server_legacy_versions)
        for version in range(1, SUPPORTED_VERSIONS[9][1] + 1):
            if version >= 8:        # v8+: a list of groups, each with its topics
                request = {"groups": [{"group_id": "wire-read", "member_id": None,
                                       "member_epoch": -1, "topics": None}],
                           "require_stable": False}
                part = conn.call(9, version, request).groups[0].topics[0].partitions[0]
            else:
                response = conn.call(9, version, _sample(9, version) | {"group_id": "wire-read"})
                part = response.topics[0].partitions[0]
            assert (part.committed_offset, part.metadata, part.error_code) == (5, "m", 0), version
    finally:
        conn.close()


def test_unsupported_api_versions_version_gets_a_v0_answer_with_error_35(server):
    conn = RawConn(server.port)
    try:
        # ApiVersions v4 with a flexible (v2) header, as a newer client sends it
        frame = encode_request(18, 3, 77, _sample(18, 3))
        frame = frame[:6] + (4).to_bytes(2, "big") + frame[8:]
        conn.send_raw(frame)
        response = conn.recv_frame()
        assert int.from_bytes(response[:4], "big") == 77
        from fastcoord.server.protocol import decode_response
        body = decode_response(18, 0, response)[1]
        assert body.error_code == 35
        # (KIP-511: ApiVersions' own range alone, for the client to pick a version)
        assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [
            (18, *SUPPORTED_VERSIONS[18])]
        # and the connection goes on: the client retries with a version we support
        assert conn.call(18, 3, _sample(18, 3)).error_code == 0
    finally:
        conn.close()


def test_responses_keep_request_order_behind_a_parked_join(server):
    """A JoinGroup parks (initial rebalance delay); the Metadata and Heartbeat sent
    after it on the same connection are answered by the coordinator at once, yet go
    out after the join response."""
    conn = RawConn(server.port)
    try:
        join = conn.send(11, 3, _sample(11, 3) | {"group_id": "wire-order"})
        meta = conn.send(3, 9, _sample(3, 9))
        beat = conn.send(12, 4, _sample(12, 4))
        started = time.monotonic()
        order = [conn.recv()[0] for _ in range(3)]
        assert order == [join, meta, beat]
        assert time.monotonic() - started >= 0.08   # the join waited the 100 ms delay
        # another connection is not held back meanwhile
        other = RawConn(server.port)
        conn.send(11, 3, _sample(11, 3) | {"group_id": "wire-order-2"})
        t0 = time.monotonic()
        assert other.call(3, 9, _sample(3, 9)).brokers
        assert time.monotonic() - t0 < 0.08
        conn.recv()
        other.close()
    finally:
        conn.close()


def test_fetch_waits_max_wait_ms_then_answers_empty(server):
    conn = RawConn(server.port)
    try:
        started = time.monotonic()
        response = conn.call(1, 12, _sample(1, 12) | {"max_wait": 400})
        waited = time.monotonic() - started
        assert 0.39 <= waited < 2.0
        part = response.responses[0].partitions[0]
        assert (part.error_code, part.high_watermark) == (0, 0)
        assert not part.records
        started = time.monotonic()
        conn.call(1, 12, _sample(1, 12) | {"max_wait": 0})
        assert time.monotonic() - started < 0.3
    finally:
        conn.close()


def test_produce_is_refused_and_acks_0_gets_no_response(server):
    conn = RawConn(server.port)
    try:
        response = conn.call(0, 8, _sample(0, 8))
        part = response.responses[0].partition_responses[0]
        assert part.error_code == 42 and "coordinator-only" in part.error_message
        quiet = conn.send(0, 8, _sample(0, 8) | {"acks": 0})
        meta = conn.send(3, 9, _sample(3, 9))
        frame = conn.recv_frame()    # the next response is the metadata's, not the produce's
        assert int.from_bytes(frame[:4], "big") == meta != quiet
    finally:
        conn.close()


def test_shutdown_answers_parked_joins_and_fetches(tmp_path):
    proc = ServerProc(tmp_path / "server.log", "--group-initial-rebalance-delay-ms", "30000",
                      topics=[f"{TOPIC}:2"])
    try:
        join_conn, fetch_conn = RawConn(proc.port), RawConn(proc.port)
        join_conn.send(11, 3, _sample(11, 3))
        fetch_conn.send(1, 12, _sample(1, 12) | {"max_wait": 20000})
        time.sleep(0.3)
        started = time.monotonic()
        code = proc.stop()
        assert code == 0
        _, join = join_conn.recv()
        assert join.error_code == 16            # NOT_COORDINATOR, as a resigning broker
        _, fetch = fetch_conn.recv()
        assert fetch.responses[0].partitions[0].error_code == 0
        assert join_conn.closed_by_server() and fetch_conn.closed_by_server()
        assert time.monotonic() - started < 5
    finally:
        proc.stop()


def test_request_log_has_one_json_line_per_request(server):
    conn = RawConn(server.port)
    try:
        conn.call(12, 4, _sample(12, 4) | {"group_id": "logged-group", "member_id": "m-1",
                                          "generation_id": 3})
    finally:
        conn.close()
    import json

    from helpers.server import wait_until

    def logged():
        if not server.request_log_path.exists():
            return []
        lines = server.request_log_path.read_text().splitlines()
        return [json.loads(x) for x in lines if '"logged-group"' in x]

    assert wait_until(lambda: logged(), 5)
    (entry,) = logged()
    assert entry["api"] == "Heartbeat" and entry["version"] == 4
    assert (entry["group"], entry["member"], entry["generation"], entry["error"]) == \
        ("logged-group", "m-1", 3, 25)
    assert entry["client"] == "raw" and entry["host"] == "127.0.0.1"
    assert 0 <= entry["latency_ms"] < 1000 and entry["ts"] > 0


def test_request_log_rotates_by_size(tmp_path):
    from types import SimpleNamespace

    from fastcoord.server.requestlog import RequestLog
    request = decode_request(encode_request(12, 4, 1, _sample(12, 4))[4:])
    conn = SimpleNamespace(session=SimpleNamespace(peer_host="127.0.0.1"))
    log = RequestLog(tmp_path / "requests.jsonl", max_bytes=1000, backups=2)
    for _ in range(100):
        log.record(conn, request, {"error_code": 25}, 0.001)
    log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["requests.jsonl", "requests.jsonl.1", "requests.jsonl.2"]
    assert all(p.stat().st_size <= 1000 + 300 for p in tmp_path.iterdir())


def test_request_log_rotation_keeps_the_newest_lines_and_deletes_the_rest(tmp_path):
    """Rotation moves the current file to .1 and each backup one along; the oldest goes
    (deleted off the caller's thread, done by close). Files a crash left on their way
    out are deleted when the log next opens; no other file is touched."""
    from fastcoord.server.requestlog import RequestLog
    (tmp_path / ".requests.jsonl.discarding-3").write_bytes(b"x" * 100)
    (tmp_path / "other.txt").write_bytes(b"keep")
    log = RequestLog(tmp_path / "requests.jsonl", max_bytes=100, backups=2)
    for i in range(9):                      # 60 bytes a line: a rotation every 2 lines
        log.write_lines(b'{"n":%d,"pad":"%s"}\n' % (i, b"p" * (60 - 19)))
    log.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "other.txt", "requests.jsonl", "requests.jsonl.1", "requests.jsonl.2"]
    numbers = [[json.loads(line)["n"] for line in (tmp_path / name).read_text().splitlines()]
               for name in ("requests.jsonl.2", "requests.jsonl.1", "requests.jsonl")]
    assert numbers == [[4, 5], [6, 7], [8]]

    log = RequestLog(tmp_path / "solo.jsonl", max_bytes=100, backups=0)
    for i in range(5):
        log.write_lines(b'{"n":%d,"pad":"%s"}\n' % (i, b"p" * (60 - 19)))
    log.close()
    assert [json.loads(line)["n"] for line in (tmp_path / "solo.jsonl").read_text()
            .splitlines()] == [4]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".", "solo"))) \
        == ["solo.jsonl"]

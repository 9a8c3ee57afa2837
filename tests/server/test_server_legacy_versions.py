"""OffsetCommit v0-1 and OffsetFetch v0, which Kafka 3.x still serves: frames encoded and
answers decoded by kafka-python's own structs for those versions (an encoder independent
of fastcoord's), on a real server."""
from __future__ import annotations

import struct

import pytest

from fastcoord.server.protocol import encode_request
from helpers.server import RawConn, ServerProc

old = pytest.importorskip("kafka.protocol.old.commit")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("legacy")
    proc = ServerProc(d / "server.log", topics=["orders:4"])
    yield proc
    assert proc.stop() == 0
    assert "Traceback" not in proc.log(), proc.log()[-3000:]


def _call(conn: RawConn, request, response_class, corr: int = 7):
    """Send kafka-python's `request` with a v1 request header; decode the answer."""
    client = b"old-client"
    header = struct.pack(">hhih", request.API_KEY, request.API_VERSION, corr, len(client)) + client
    body = header + request.encode()
    conn.send_raw(struct.pack(">i", len(body)) + body)
    frame = conn.recv_frame()
    assert frame is not None, "connection closed by the server"
    assert struct.unpack_from(">i", frame)[0] == corr
    return response_class.decode(frame[4:])


def _errors(response) -> dict:
    return {(t[0], p[0]): p[1] for t in response.topics for p in t[1]}


def _offsets(response) -> dict:
    return {(t[0], p[0]): (p[3], p[1], p[2]) for t in response.topics for p in t[1]}


def test_api_versions_lists_the_old_versions(server):
    conn = RawConn(server.port)
    keys = {k.api_key: (k.min_version, k.max_version) for k in
            conn.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).api_keys}
    assert keys[8][0] == 0 and keys[9][0] == 0


def test_offset_commit_v1_goes_to_the_coordinator(server):
    conn = RawConn(server.port)
    commit = old.OffsetCommitRequest_v1(
        "legacy-v1", -1, "", [("orders", [(0, 42, -1, "meta"), (9, 1, -1, "")])])
    got = _errors(_call(conn, commit, old.OffsetCommitResponse_v1))
    assert got == {("orders", 0): 0, ("orders", 9): 3}
    fetch = old.OffsetFetchRequest_v1("legacy-v1", [("orders", [0, 1])])
    assert _offsets(_call(conn, fetch, old.OffsetFetchResponse_v1)) == {
        ("orders", 0): (0, 42, "meta"), ("orders", 1): (0, -1, "")}
    # the generation is checked: an unknown group has none
    commit = old.OffsetCommitRequest_v1("legacy-v1-gen", 3, "m", [("orders", [(0, 1, -1, "")])])
    assert _errors(_call(conn, commit, old.OffsetCommitResponse_v1)) == {("orders", 0): 22}
    # and later versions see v1's commits
    assert conn.call(9, 7, {"group_id": "legacy-v1", "topics": [
        {"name": "orders", "partition_indexes": [0]}]}).topics[0].partitions[0] \
        .committed_offset == 42


def test_v0_is_answered_unsupported_version_and_the_connection_stays(server):
    conn = RawConn(server.port)
    commit = old.OffsetCommitRequest_v0("legacy-v0", [("orders", [(0, 5, ""), (9, 5, "")])])
    assert _errors(_call(conn, commit, old.OffsetCommitResponse_v0)) == {
        ("orders", 0): 35, ("orders", 9): 35}
    # nothing valid to commit: the per-partition errors come first, as in Kafka
    commit = old.OffsetCommitRequest_v0("legacy-v0", [("nope", [(0, 5, "")])])
    assert _errors(_call(conn, commit, old.OffsetCommitResponse_v0)) == {("nope", 0): 3}
    fetch = old.OffsetFetchRequest_v0("legacy-v0", [("orders", [0, 1])])
    assert _offsets(_call(conn, fetch, old.OffsetFetchResponse_v0)) == {
        ("orders", 0): (35, -1, ""), ("orders", 1): (35, -1, "")}
    # nothing was stored, and the same connection still serves requests
    assert conn.call(9, 7, {"group_id": "legacy-v0", "topics": None}).topics == ()


def test_our_codec_of_the_old_versions_matches_kafka_python():
    for request, body in [
        (old.OffsetCommitRequest_v0("g", [("t", [(1, 5, "x")])]),
         {"group_id": "g", "topics": [{"name": "t", "partitions": [
             {"partition_index": 1, "committed_offset": 5, "committed_metadata": "x"}]}]}),
        (old.OffsetCommitRequest_v1("g", 3, "m", [("t", [(1, 5, 9, None)])]),
         {"group_id": "g", "generation_id_or_member_epoch": 3, "member_id": "m",
          "topics": [{"name": "t", "partitions": [
              {"partition_index": 1, "committed_offset": 5, "commit_timestamp": 9,
               "committed_metadata": None}]}]}),
        (old.OffsetFetchRequest_v0("g", [("t", [1, 2])]),
         {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [1, 2]}]}),
    ]:
        frame = encode_request(request.API_KEY, request.API_VERSION, 1, body, None)
        assert frame[4 + 10:] == request.encode(), request


def test_metadata_v0_empty_list_means_every_topic(server):
    """Clients that send the old offset versions send Metadata v0 first."""
    from kafka.protocol.old.metadata import MetadataRequest_v0, MetadataResponse_v0
    conn = RawConn(server.port)
    every = _call(conn, MetadataRequest_v0([]), MetadataResponse_v0)
    assert [(t[1], t[0], len(t[2])) for t in every.topics] == [("orders", 0, 4)]
    assert every.brokers[0][2] == server.port
    named = _call(conn, MetadataRequest_v0(["orders", "nope"]), MetadataResponse_v0)
    assert [(t[1], t[0]) for t in named.topics] == [("orders", 0), ("nope", 3)]

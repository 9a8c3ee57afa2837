"""The request frame check (every length prefix against the bytes left, before kio
decodes: fastcoord/server/framecheck.py) against kio's own decode of the same frame.

Frames (kio-encoded, client id "consumer-1"), one group each:
  JoinGroup v7         one "range" protocol, no member id yet
  Metadata v9          one topic
  OffsetCommit v7, v8  one topic, 100 partitions (v7: the server's highest advertised
                       version, fixed-width prefixes; v8: the flexible encoding)
  OffsetFetch v7       one topic, 8 partitions
  SyncGroup v5         the leader's, 3 members' assignments of 40 bytes
Peers: "kio decode" (the header's and the body's kio readers, as decode_request runs
them), "native" (fastcoord/server/_native/framecheck.pyx: the schema's program run in C) and
"pure" (the Python walk). ops = 1,000 checks of the frame per measured call (a single
check is too short to time alone); extra_info bytes (the frame's size)
and pct_of_kio_decode (this row's median as a percentage of the kio decode row's, same
run). The target: native at most 50% of kio decode on every frame.
With --benchmark-disable (make test) each runs once and checks its result.
"""
from __future__ import annotations

import pytest
from kio.serial import entity_reader

import fastcoord
from fastcoord.server import framecheck as pure
from fastcoord.server.protocol import encode_request, request_class

PEERS = ["kio decode"] + (["native"] if fastcoord.NATIVE_AVAILABLE else []) + ["pure"]


def _partitions(n: int) -> list:
    return [{"partition_index": i, "committed_offset": 1_000_000 + i, "committed_leader_epoch": 0,
             "committed_metadata": ""} for i in range(n)]


def _offset_commit(version: int) -> tuple:
    return (8, version, {"group_id": "orders-consumers", "generation_id_or_member_epoch": 3,
                         "member_id": "consumer-1-5b1c0d4e-6a7f-4f5e-9a51-3d2f1c0b9a87",
                         "group_instance_id": None, "retention_time_ms": -1,
                         "topics": [{"name": "orders", "partitions": _partitions(100)}]})


FRAMES = {
    "JoinGroup v7": (11, 7, {
        "group_id": "orders-consumers", "session_timeout": 45_000, "rebalance_timeout": 300_000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer", "reason": None,
        "protocols": [{"name": "range", "metadata": b"\x00\x01\x00\x00\x00\x01\x00\x06orders"}]}),
    "Metadata v9": (3, 9, {"topics": [{"name": "orders"}], "allow_auto_topic_creation": False,
                           "include_cluster_authorized_operations": False,
                           "include_topic_authorized_operations": False}),
    "OffsetCommit v7": _offset_commit(7),
    "OffsetCommit v8": _offset_commit(8),
    "OffsetFetch v7": (9, 7, {"group_id": "orders-consumers", "require_stable": True,
                              "topics": [{"name": "orders", "partition_indexes": list(range(8))}]}),
    "SyncGroup v5": (14, 5, {
        "group_id": "orders-consumers", "generation_id": 3,
        "member_id": "consumer-1-5b1c0d4e-6a7f-4f5e-9a51-3d2f1c0b9a87",
        "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": f"consumer-{m}-5b1c0d4e-6a7f-4f5e-9a51-3d2f1c0b9a87",
                         "assignment": bytes(40)} for m in range(3)]}),
}
CASES = [(name, peer) for name in FRAMES for peer in PEERS]   # kio decode first per frame

_kio_median: dict = {}
CALLS = 1000           # checks per measured call
ROUNDS = 31


def _frame(name: str):
    api_key, version, body = FRAMES[name]
    return request_class(api_key, version), encode_request(api_key, version, 7, body,
                                                           client_id="consumer-1")[4:]


def _runner(peer: str, cls, frame: bytes):
    if peer == "kio decode":
        header, request = entity_reader(cls.__header_schema__), entity_reader(cls)

        def decode():
            _, used = header(frame, 0)
            _, used_body = request(frame, used)
            return used + used_body
        return decode
    check = pure.check_request
    if peer == "native":
        from fastcoord.server._native.framecheck import check_request as check
    return lambda: check(cls, frame)


@pytest.mark.parametrize("name,peer", CASES, ids=[f"{n}-{p}" for n, p in CASES])
def test_framecheck(benchmark, name, peer):
    cls, frame = _frame(name)
    run = _runner(peer, cls, frame)
    assert run() == len(frame)
    benchmark.group = f"framecheck-{name}"
    benchmark.extra_info.update(peer=peer, ops=CALLS, bytes=len(frame))

    def calls():
        for _ in range(CALLS):
            run()
    # A measured call makes CALLS checks: a call of a microsecond or less is below the
    # timer's resolution, and a round per check would store millions of rounds.
    benchmark.pedantic(calls, rounds=ROUNDS, iterations=1, warmup_rounds=2)
    stats = getattr(benchmark, "stats", None)
    if stats is None:                         # --benchmark-disable
        return
    median = stats.stats.median
    if peer == "kio decode":
        _kio_median[name] = median
    if name in _kio_median:
        benchmark.extra_info["pct_of_kio_decode"] = round(100 * median / _kio_median[name], 3)

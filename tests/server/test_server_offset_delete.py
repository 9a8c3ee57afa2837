"""OffsetDelete (API 47) and the offsets retention check over the wire, against a
running `fastcoord serve` (durable store, real socket)."""
from __future__ import annotations

import struct

from helpers.server import RawConn, ServerProc, wait_until

UNKNOWN_TOPIC_OR_PARTITION = 3
GROUP_ID_NOT_FOUND = 69
GROUP_SUBSCRIBED_TO_TOPIC = 86
MEMBER_ID_REQUIRED = 79


def _subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def _commit(conn, group, generation, member, offsets):
    by_topic = {}
    for (t, p), off in offsets.items():
        by_topic.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                           "committed_metadata": ""})
    r = conn.call(8, 2, {"group_id": group, "generation_id_or_member_epoch": generation,
                         "member_id": member, "retention_time_ms": -1,
                         "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def _delete(conn, group, partitions):
    by_topic = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append({"partition_index": p})
    r = conn.call(47, 0, {"group_id": group, "topics": [
        {"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return r.error_code, {(t.name, p.partition_index): p.error_code
                          for t in r.topics for p in t.partitions}


def _fetch(conn, group):
    r = conn.call(9, 1, {"group_id": group, "topics": [
        {"name": "orders", "partition_indexes": [0]}, {"name": "extra", "partition_indexes": [0]}]})
    return {(t.name, p.partition_index): p.committed_offset for t in r.topics for p in t.partitions}


def test_offset_delete_over_the_wire(tmp_path):
    server = ServerProc(tmp_path / "server.log", topics=["orders:4", "extra:2"])
    try:
        conn = RawConn(server.port)
        joined = conn.call(11, 3, {"group_id": "od", "session_timeout": 30_000,
                                   "rebalance_timeout": 30_000, "member_id": "",
                                   "protocol_type": "consumer",
                                   "protocols": [{"name": "range",
                                                  "metadata": _subscription("orders")}]})
        assert joined.error_code == 0
        member, generation = joined.member_id, joined.generation_id
        synced = conn.call(14, 1, {"group_id": "od", "generation_id": generation,
                                   "member_id": member,
                                   "assignments": [{"member_id": member, "assignment": b""}]})
        assert synced.error_code == 0
        assert _commit(conn, "od", generation, member, {("orders", 0): 5, ("extra", 0): 6}) == \
            {("orders", 0): 0, ("extra", 0): 0}
        # a Stable consumer group: its subscribed topic's offsets stay
        assert _delete(conn, "od", [("orders", 0), ("extra", 0), ("nope", 1)]) == (0, {
            ("orders", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("extra", 0): 0,
            ("nope", 1): UNKNOWN_TOPIC_OR_PARTITION})
        assert _fetch(conn, "od") == {("orders", 0): 5, ("extra", 0): -1}
        assert _delete(conn, "never", [("orders", 0)]) == (GROUP_ID_NOT_FOUND, {})
        # once the group is Empty, any offset goes (and the group with its last one)
        assert conn.call(13, 0, {"group_id": "od", "member_id": member}).error_code == 0
        assert _delete(conn, "od", [("orders", 0)]) == (0, {("orders", 0): 0})
        assert _fetch(conn, "od") == {("orders", 0): -1, ("extra", 0): -1}
        listed = conn.call(16, 0, {})
        assert "od" not in [g.group_id for g in listed.groups]
        conn.close()
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log()


def test_retention_check_removes_groups_left_by_one_shot_joins(tmp_path):
    """A JoinGroup answered MEMBER_ID_REQUIRED makes a group; once its pending member's
    session passed, the server's periodic check removes it."""
    cfg = tmp_path / "serve.toml"          # (the config file's key for the interval)
    cfg.write_text("offsets_retention_check_interval_ms = 100\n")
    server = ServerProc(tmp_path / "server.log", "--config", str(cfg))
    try:
        conn = RawConn(server.port)
        for i in range(20):
            r = conn.call(11, 4, {"group_id": f"oneshot-{i}", "session_timeout": 500,
                                  "rebalance_timeout": 500, "member_id": "",
                                  "protocol_type": "consumer",
                                  "protocols": [{"name": "range", "metadata": b""}]})
            assert r.error_code == MEMBER_ID_REQUIRED

        def listed():
            return [g.group_id for g in conn.call(16, 0, {}).groups]
        assert len(listed()) == 20
        assert wait_until(lambda: listed() == [], timeout=10), listed()
        conn.close()
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log()


def test_serve_rejects_a_bad_retention(tmp_path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "fastcoord", "serve", "--port", "0",
                          "--offsets-retention-minutes", "0", "--data-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "offsets_retention_minutes" in out.stderr, out.stderr

"""The request log's replay fields (issue 38): what each group request's line carries
beyond the common fields, from real decoded requests, its bounds, and what the
converter (`from_fastcoord_log`) makes of it. A real run replayed from the log:
tests/pipeline/test_request_log_replay.py."""
from __future__ import annotations

import json
from types import SimpleNamespace

from fastcoord.pipeline.adapters import from_fastcoord_log
from fastcoord.server.protocol import decode_request, encode_request
from fastcoord.server.requestlog import RequestLog

CONN = SimpleNamespace(session=SimpleNamespace(peer_host="127.0.0.1"))

JOIN = {"group_id": "g", "session_timeout": 6000, "rebalance_timeout": 45000, "member_id": "",
        "group_instance_id": "inst-1", "protocol_type": "consumer",
        "protocols": [{"name": "cooperative-sticky", "metadata": b""},
                      {"name": "range", "metadata": b""}]}
JOINED = {"error_code": 0, "generation_id": 4, "protocol_type": "consumer",
          "protocol_name": "range", "leader": "inst-1-x", "member_id": "inst-1-x",
          "members": []}


def _logged(tmp_path, *requests) -> list:
    """The lines RequestLog writes for (api key, version, request fields, answer)."""
    log = RequestLog(tmp_path / "requests.jsonl")
    for corr, (key, version, fields, answer) in enumerate(requests):
        frame = encode_request(key, version, corr, fields, "client-1")
        log.record(CONN, decode_request(frame[4:]), answer, 0.002)
    log.close()
    return (tmp_path / "requests.jsonl").read_text().splitlines()


def test_a_join_line_carries_its_timeouts_instance_protocols_and_answer(tmp_path):
    dynamic = dict(JOIN, group_instance_id=None, member_id="m-1")
    v0 = {k: v for k, v in dynamic.items() if k not in ("rebalance_timeout", "group_instance_id")}
    lines = _logged(tmp_path, (11, 5, JOIN, JOINED),
                    (11, 5, dynamic, dict(JOINED, member_id="m-1")),
                    (11, 0, v0, dict(JOINED, error_code=25, generation_id=-1, member_id="")))
    first, again, old = (json.loads(line) for line in lines)
    assert {k: first[k] for k in ("member", "instance", "session_timeout_ms",
                                  "rebalance_timeout_ms", "protocol_type", "protocols",
                                  "answer_member", "answer_generation")} == {
        "member": "", "instance": "inst-1", "session_timeout_ms": 6000,
        "rebalance_timeout_ms": 45000, "protocol_type": "consumer",
        "protocols": ["cooperative-sticky", "range"], "answer_member": "inst-1-x",
        "answer_generation": 4}
    # only what applies: no instance for a dynamic member, no answer_member when it is
    # the request's own, no rebalance timeout before v1, no answer fields for an error
    assert "instance" not in again and "answer_member" not in again
    assert again["answer_generation"] == 4
    assert old["session_timeout_ms"] == 6000 and old["error"] == 25
    for absent in ("instance", "rebalance_timeout_ms", "answer_member", "answer_generation"):
        assert absent not in old
    # compact, and the common fields first, as before
    assert lines[0].startswith('{"ts":') and ", " not in lines[0]
    assert list(first)[:10] == ["ts", "api", "version", "client", "host", "group", "member",
                                "generation", "error", "latency_ms"]


def test_leave_commit_and_sync_lines(tmp_path):
    leave = {"group_id": "g", "members": [
        {"member_id": "m-1", "group_instance_id": None},
        {"member_id": "", "group_instance_id": "inst-2"}]}
    left = {"error_code": 0, "members": [
        {"member_id": "m-1", "group_instance_id": None, "error_code": 0},
        {"member_id": "", "group_instance_id": "inst-2", "error_code": 25}]}
    commit = {"group_id": "g", "generation_id_or_member_epoch": 3, "member_id": "m-1",
              "group_instance_id": "inst-1", "topics": [
                  {"name": "orders", "partitions": [
                      {"partition_index": 0, "committed_offset": 17, "committed_leader_epoch": -1,
                       "committed_metadata": ""},
                      {"partition_index": 2, "committed_offset": 5, "committed_leader_epoch": -1,
                       "committed_metadata": ""}]}]}

    def answered(*codes):
        return {"topics": [{"name": "orders", "partitions": [
            {"partition_index": p, "error_code": c} for p, c in zip((0, 2), codes)]}]}
    sync = {"group_id": "g", "generation_id": 3, "member_id": "m-1",
            "group_instance_id": "inst-1", "assignments": []}
    lines = [json.loads(line) for line in _logged(
        tmp_path, (13, 3, leave, left), (8, 7, commit, answered(22, 22)),
        (8, 7, commit, answered(0, 3)), (14, 3, sync, {"error_code": 0, "assignment": b""}),
        (13, 3, leave, {"error_code": 30, "members": []}))]
    out, commit_1, commit_2, synced, refused = lines
    assert out["member"] is None and out["members"] == [["m-1", None, 0], ["", "inst-2", 25]]
    assert commit_1["offsets"] == [["orders", 0, 17], ["orders", 2, 5]]
    assert (commit_1["instance"], commit_1["generation"]) == ("inst-1", 3)
    # a commit's answer is per partition: the error they share, else none
    assert commit_1["error"] == 22 and commit_2["error"] is None
    assert (synced["instance"], synced["generation"]) == ("inst-1", 3)
    assert "offsets" not in synced and "members" not in synced
    # refused before any member's answer: each member's is the request's
    assert refused["members"] == [["m-1", None, 30], ["", "inst-2", 30]]


def test_lists_are_cut_at_a_byte_budget_and_say_how_many_there_were(tmp_path):
    """A hostile commit naming one long topic for many partitions, or a join with many
    protocols, gets a bounded line: a prefix of the list and its full count."""
    name = "t" * 30000
    commit = {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m",
              "group_instance_id": None, "topics": [{"name": name, "partitions": [
                  {"partition_index": p, "committed_offset": 1, "committed_leader_epoch": -1,
                   "committed_metadata": ""} for p in range(1000)]}]}
    join = dict(JOIN, protocols=[{"name": f"assignor-{i:04d}", "metadata": b""}
                                 for i in range(2000)])
    lines = _logged(tmp_path, (8, 7, commit, {"topics": []}), (11, 5, join, JOINED))
    assert all(len(line) < 100_000 for line in lines)
    committed, joined = (json.loads(line) for line in lines)
    assert committed["offsets_total"] == 1000 and 0 < len(committed["offsets"]) < 1000
    assert committed["offsets"][0] == [name, 0, 1]
    assert joined["protocols_total"] == 2000
    assert joined["protocols"] == [f"assignor-{i:04d}" for i in range(len(joined["protocols"]))]


def test_a_heartbeat_line_names_the_instance_its_request_named(tmp_path):
    """A static member's Heartbeat (v3+) line carries its group instance id, by the
    general path (`record`) and the fast paths' (`record_heartbeat`, `heartbeat_line`)
    alike: the replay fences a replaced incarnation's heartbeat by it. A dynamic
    member's line is byte for byte what it was, the common fields alone."""
    import re

    from fastcoord.server.requestlog import heartbeat_line
    static = {"group_id": "g", "generation_id": 3, "member_id": "inst-1-x",
              "group_instance_id": "inst-1"}
    dynamic = dict(static, member_id="m-2", group_instance_id=None)
    v2 = {k: v for k, v in dynamic.items() if k != "group_instance_id"}
    lines = _logged(tmp_path, (12, 4, static, {"error_code": 82}),
                    (12, 4, dynamic, {"error_code": 0}), (12, 2, v2, {"error_code": 0}))
    fenced, steady, old = (json.loads(line) for line in lines)
    assert (fenced["instance"], fenced["error"]) == ("inst-1", 82)
    assert list(fenced)[-2:] == ["latency_ms", "instance"]
    assert "instance" not in steady and "instance" not in old
    common = ('"api":"Heartbeat","version":{v},"client":"client-1","host":"127.0.0.1",'
              '"group":"g","member":"m-2","generation":3,"error":0,"latency_ms":2.000}}')
    for line, version in ((lines[1], 4), (lines[2], 2)):
        assert re.fullmatch(r'\{"ts":\d+\.\d{6},' + re.escape(common.format(v=version)),
                            line), line
    # the fast paths' text: the same fields, the instance after latency_ms
    assert heartbeat_line(1.5, 4, "c", '"h"', "g", "m", 3, 82, 0.002,
                          instance_id="i\u00e9") == (
        '{"ts":1.500000,"api":"Heartbeat","version":4,"client":"c","host":"h","group":"g",'
        '"member":"m","generation":3,"error":82,"latency_ms":2.000,"instance":"i\\u00e9"}\n')
    assert heartbeat_line(1.5, 4, "c", '"h"', "g", "m", 3, 0, 0.002) == (
        '{"ts":1.500000,"api":"Heartbeat","version":4,"client":"c","host":"h","group":"g",'
        '"member":"m","generation":3,"error":0,"latency_ms":2.000}\n')
    log = RequestLog(tmp_path / "fast.jsonl")
    log.record_heartbeat(CONN, 4, "c", "g", "inst-1-x", 3, 82, 0.002, "inst-1")
    log.record_heartbeat(CONN, 4, "c", "g", "m-2", 3, 0, 0.002)
    log.close()
    fast = [json.loads(line) for line in (tmp_path / "fast.jsonl").read_text().splitlines()]
    assert [line.get("instance") for line in fast] == ["inst-1", None]
    # converted, each heartbeat row names the instance its line did
    table, _ = from_fastcoord_log(lines)
    assert [r["instance_id"] for r in table.to_pylist()] == ["inst-1", None, None]


def test_the_converter_uses_the_fields_and_still_reads_old_logs(tmp_path):
    leave = {"group_id": "g", "members": [
        {"member_id": "inst-1-x", "group_instance_id": "inst-1"},
        {"member_id": "m-2", "group_instance_id": None}]}
    left = {"error_code": 0, "members": [
        {"member_id": "inst-1-x", "group_instance_id": "inst-1", "error_code": 0},
        {"member_id": "m-2", "group_instance_id": None, "error_code": 25}]}
    lines = _logged(tmp_path, (11, 5, JOIN, JOINED), (13, 3, leave, left))
    table, stats = from_fastcoord_log(lines)
    join, out_1, out_2 = table.to_pylist()
    assert (join["member_id"], join["instance_id"], join["session_timeout_ms"],
            join["rebalance_timeout_ms"], join["protocols"]) == (
        "inst-1-x", "inst-1", 6000, 45000, ["cooperative-sticky", "range"])
    assert [(r["event"], r["member_id"], r["instance_id"], r["error"], r["seq"])
            for r in (out_1, out_2)] == [("leave", "inst-1-x", "inst-1", 0, 1),
                                         ("leave", "m-2", None, 25, 2)]
    assert stats.rows_ok == 3 and not stats.examples

    # an old line (none of the fields): no session invented, the member id guessed
    old = [json.dumps({"ts": 10.0, "api": "JoinGroup", "version": 5, "client": "c",
                       "host": "h", "group": "g", "member": "", "generation": None,
                       "error": 79, "latency_ms": 0.1}),
           json.dumps({"ts": 10.1, "api": "JoinGroup", "version": 5, "client": "c",
                       "host": "h", "group": "g", "member": "m-9", "generation": None,
                       "error": 0, "latency_ms": 0.1})]
    table, stats = from_fastcoord_log(old)
    rows = table.to_pylist()
    assert [r["member_id"] for r in rows] == ["m-9", "m-9"]
    assert {r["session_timeout_ms"] for r in rows} == {None}
    assert any(e.startswith("note: old-format log") for e in stats.examples)


def test_lines_of_the_wrong_types_are_counted_malformed_not_raised(tmp_path):
    """A log is a file: a line whose fields would not fit the trace's columns is counted
    (with an example), and the good lines around it convert."""
    good = {"ts": 10.0, "api": "JoinGroup", "version": 5, "client": "c", "host": "h",
            "group": "g", "member": "m-1", "generation": None, "error": 0, "latency_ms": 0.1,
            "session_timeout_ms": 6000, "protocols": ["range"]}
    bad = [{"generation": "x"}, {"error": 1 << 20}, {"session_timeout_ms": True},
           {"protocols": 5}, {"protocols": ["range", 7]}, {"instance": ["i"]},
           {"api": "LeaveGroup", "members": [[1, None, 0]]},
           {"api": "LeaveGroup", "members": {"m": 1}}, {"ts": 1e300}, {"ts": float("nan")},
           {"answer_member": 3}]
    lines = [json.dumps(good)] + [json.dumps(dict(good, **b)) for b in bad] + [json.dumps(good)]
    table, stats = from_fastcoord_log(lines)
    assert table.num_rows == 2 and stats.malformed == len(bad)


def test_rows_are_numbered_in_arrival_order_within_a_millisecond():
    """A line is written when its answer goes out: a join parked for 10 ms is written
    after a heartbeat that arrived 0.1 ms after it, in the same millisecond. The replay
    orders a millisecond's rows by seq: seq must follow the arrivals (to the
    microsecond the lines give), not the order of the lines."""
    def line(ts, api, member, latency_ms):
        return json.dumps({"ts": ts, "api": api, "version": 5, "client": member,
                           "host": "h", "group": "g", "member": member, "generation": 1,
                           "error": 0, "latency_ms": latency_ms, "session_timeout_ms": 6000})
    lines = [line(100.0007, "Heartbeat", "m-2", 0.0),
             line(100.0106, "JoinGroup", "m-1", 10.0)]      # arrived at 100.0006
    table, _ = from_fastcoord_log(lines)
    rows = table.to_pylist()
    assert [(r["seq"], r["event"], r["time_ms"]) for r in rows] == [
        (0, "join", 100_001), (1, "heartbeat", 100_001)]

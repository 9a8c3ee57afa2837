"""Request-log adapters on real-format lines, and malformed-input accounting."""
import json
import pathlib

import pytest

pytest.importorskip("pyarrow")
from fastcoord.pipeline.adapters import from_fastcoord_log, from_kafka_log
from fastcoord.pipeline.replay import replay_local

KAFKA_LINES = [
    '[2024-05-01 10:00:00,000] DEBUG Completed request:{"requestHeader":{"requestApiKey":11,'
    '"requestApiVersion":5,"correlationId":3,"clientId":"c1"},"request":{"groupId":"orders",'
    '"sessionTimeoutMs":10000,"rebalanceTimeoutMs":30000,"memberId":"","groupInstanceId":null,'
    '"protocolType":"consumer","protocols":[{"name":"range","metadata":"AAE="}]},'
    '"response":{"throttleTimeMs":0,"errorCode":79,"generationId":-1,"protocolName":null,'
    '"leader":"","memberId":"c1-aaa","members":[]},"connection":"127.0.0.1:9092-127.0.0.1:5000-0",'
    '"totalTimeMs":0.5,"requestQueueTimeMs":0.1,"localTimeMs":0.2,"remoteTimeMs":0.0,'
    '"throttleTimeMs":0,"responseQueueTimeMs":0.1,"sendTimeMs":0.1,"securityProtocol":"PLAINTEXT",'
    '"principal":"User:ANONYMOUS","listener":"PLAINTEXT","clientInformation":{"softwareName":"apache-kafka-java","softwareVersion":"3.7.0"}} (kafka.request.logger)',
    '[2024-05-01 10:00:00,010] DEBUG Completed request:{"requestHeader":{"requestApiKey":11,'
    '"requestApiVersion":5,"correlationId":4,"clientId":"c1"},"request":{"groupId":"orders",'
    '"sessionTimeoutMs":10000,"rebalanceTimeoutMs":30000,"memberId":"c1-aaa","groupInstanceId":null,'
    '"protocolType":"consumer","protocols":[{"name":"range","metadata":"AAE="}]},'
    '"response":{"errorCode":0,"generationId":1,"leader":"c1-aaa","memberId":"c1-aaa"}} (kafka.request.logger)',
    '[2024-05-01 10:00:03,020] DEBUG Completed request:{"requestHeader":{"requestApiKey":14,'
    '"requestApiVersion":3,"correlationId":5,"clientId":"c1"},"request":{"groupId":"orders",'
    '"generationId":1,"memberId":"c1-aaa","groupInstanceId":null,"assignments":[]},'
    '"response":{"errorCode":0,"assignment":""}} (kafka.request.logger)',
    '[2024-05-01 10:00:06,000] DEBUG Completed request:{"requestHeader":{"requestApiKey":12,'
    '"requestApiVersion":4,"correlationId":6,"clientId":"c1"},"request":{"groupId":"orders",'
    '"generationId":1,"memberId":"c1-aaa","groupInstanceId":null},"response":{"errorCode":0}} (kafka.request.logger)',
    '[2024-05-01 10:00:07,000] DEBUG Completed request:{"requestHeader":{"requestApiKey":8,'
    '"requestApiVersion":8,"correlationId":7,"clientId":"c1"},"request":{"groupId":"orders",'
    '"generationIdOrMemberEpoch":1,"memberId":"c1-aaa","topics":[]},"response":{"topics":[]}} (kafka.request.logger)',
    '[2024-05-01 10:00:08,000] DEBUG Completed request:{"requestHeader":{"requestApiKey":13,'
    '"requestApiVersion":4,"correlationId":8,"clientId":"c1"},"request":{"groupId":"orders",'
    '"members":[{"memberId":"c1-aaa","groupInstanceId":null}]},"response":{"errorCode":0,"members":[]}} (kafka.request.logger)',
    # an API the trace has no event for, a truncated line, and noise
    '[2024-05-01 10:00:08,500] DEBUG Completed request:{"requestHeader":{"requestApiKey":3,'
    '"requestApiVersion":12,"correlationId":9,"clientId":"c1"},"request":{"topics":[]},"response":{}} (kafka.request.logger)',
    '[2024-05-01 10:00:09,000] DEBUG Completed request:{"requestHeader":{"requestApiKey":12,',
    'this is not a request log line',
]


def test_kafka_request_log_adapter():
    table, stats = from_kafka_log(KAFKA_LINES)
    rows = table.to_pylist()
    assert [r["event"] for r in rows] == ["join", "join", "sync", "heartbeat", "commit", "leave"]
    assert {r["member_id"] for r in rows} == {"c1-aaa"}        # the first join takes its given id
    assert rows[0]["session_timeout_ms"] == 10000 and rows[0]["rebalance_timeout_ms"] == 30000
    assert rows[0]["protocols"] == ["range"] and rows[0]["error"] == 79
    assert rows[3]["time_ms"] - rows[0]["time_ms"] == 6000
    assert stats.unknown_event == 1 and stats.malformed == 2 and stats.rows_in == 9
    out = replay_local(table)
    errs = [r["error"] for r in out["responses"].to_pylist()]
    assert errs == [79, 0, 0, 0, 0, 0]


def test_fastcoord_request_log_adapter():
    def line(ts, api, member, gen=None, error=0):
        return json.dumps({"ts": ts, "api": api, "version": 5, "client": "c1", "host": "127.0.0.1",
                           "group": "g", "member": member, "generation": gen, "error": error,
                           "latency_ms": 0.2})
    lines = [line(100.0, "JoinGroup", "", error=79), line(100.001, "JoinGroup", "m-1"),
             line(103.5, "SyncGroup", "m-1", 1), line(106.0, "Heartbeat", "m-1", 1),
             line(107.0, "Metadata", None), "{not json", json.dumps({"api": "Heartbeat"}),
             line(108.0, "LeaveGroup", "m-1")]
    table, stats = from_fastcoord_log(lines)
    rows = table.to_pylist()
    assert [r["event"] for r in rows] == ["join", "join", "sync", "heartbeat", "leave"]
    assert rows[0]["member_id"] == "m-1" and rows[0]["time_ms"] == 100_000
    assert stats.malformed == 2 and stats.unknown_event == 1 and stats.rows_ok == 5
    out = replay_local(table)
    assert [r["error"] for r in out["responses"].to_pylist()] == [79, 0, 0, 0, 0]


def test_consumer_protocol_heartbeats_are_carried_and_passed_over_by_the_replay():
    """ConsumerGroupHeartbeats (KIP-848) are trace rows of their own (event
    consumer_heartbeat, the member epoch as the generation), from either log; the
    classic replay passes over them: the classic rows' answers are unchanged."""
    kafka_line = (
        '[2024-05-01 10:00:05,000] DEBUG Completed request:{"requestHeader":{"requestApiKey":68,'
        '"requestApiVersion":1,"correlationId":9,"clientId":"c2"},"request":{"groupId":"cg",'
        '"memberId":"m-848","memberEpoch":3,"instanceId":null,"rackId":null,'
        '"rebalanceTimeoutMs":-1,"subscribedTopicNames":null,"subscribedTopicRegex":null,'
        '"serverAssignor":null,"topicPartitions":null},"response":{"errorCode":0,'
        '"memberId":"m-848","memberEpoch":3,"heartbeatIntervalMs":5000}} (kafka.request.logger)')
    table, stats = from_kafka_log(KAFKA_LINES[:6] + [kafka_line])
    rows = table.to_pylist()
    assert rows[-1]["event"] == "consumer_heartbeat"
    assert (rows[-1]["group_id"], rows[-1]["member_id"], rows[-1]["generation"]) == ("cg", "m-848", 3)
    assert stats.unknown_event == 0
    answers = [r["error"] for r in replay_local(table)["responses"].to_pylist()
               if r["error"] is not None]
    assert answers[:6] == [79, 0, 0, 0, 0, 0]

    ours = json.dumps({"ts": 200.0, "api": "ConsumerGroupHeartbeat", "version": 1,
                       "client": "c2", "host": "127.0.0.1", "group": "cg", "member": "m-848",
                       "generation": 3, "error": 0, "latency_ms": 0.1})
    table, stats = from_fastcoord_log([ours])
    [row] = table.to_pylist()
    assert (row["event"], row["generation"], stats.unknown_event) == ("consumer_heartbeat", 3, 0)


def test_requests_are_placed_at_their_arrival_not_their_completion():
    """Kafka's request logger writes a line when the answer is sent: a JoinGroup parked
    for 6 s completes after the heartbeats of that time. The trace must hold it at its
    arrival (line time - totalTimeMs), or its member's later requests replay against
    a generation that does not exist yet."""
    def kafka(stamp, key, req, resp, total):
        return (f'[2024-05-01 10:00:{stamp}] DEBUG Completed request:'
                + json.dumps({"requestHeader": {"requestApiKey": key, "requestApiVersion": 5,
                                                "correlationId": 1, "clientId": "c1"},
                              "request": req, "response": resp, "totalTimeMs": total})
                + " (kafka.request.logger)")
    join = {"groupId": "g", "sessionTimeoutMs": 10000, "rebalanceTimeoutMs": 30000,
            "memberId": "c1-a", "groupInstanceId": None, "protocolType": "consumer",
            "protocols": [{"name": "range", "metadata": "AAE="}]}
    lines = [
        # arrived at 00.013, parked by the initial rebalance delay, answered at 03.013
        kafka("03,013", 11, join, {"errorCode": 0, "generationId": 1, "memberId": "c1-a",
                                   "leader": "c1-a"}, 3000.0),
        kafka("03,020", 14, {"groupId": "g", "generationId": 1, "memberId": "c1-a",
                             "groupInstanceId": None, "assignments": []},
              {"errorCode": 0}, 2.0),
    ]
    table, _ = from_kafka_log(lines)
    rows = table.to_pylist()
    assert [r["time_ms"] % 60_000 for r in rows] == [13, 3018]

    fc = [json.dumps({"ts": 103.013, "api": "JoinGroup", "version": 5, "client": "c1",
                      "host": "h", "group": "g", "member": "m-1", "generation": None,
                      "error": 0, "latency_ms": 3000.0})]
    table, _ = from_fastcoord_log(fc)
    assert table.to_pylist()[0]["time_ms"] == 100_013


def test_convert_refuses_a_missing_log_and_one_of_another_format(tmp_path, capsys):
    """A person's mistakes get one line and a non-zero exit: a log that is not there (a
    raw FileNotFoundError traceback before), a log in which no line is of the format
    asked for (exit 0 and an empty trace before)."""
    from fastcoord.cli import main
    out = str(tmp_path / "t.parquet")
    assert main(["trace", "convert", str(tmp_path / "nope.log"), out]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("nope.log: no such file") and "Traceback" not in err
    log = tmp_path / "kafka.log"
    log.write_text("\n".join(KAFKA_LINES[:3]) + "\n")
    assert main(["trace", "convert", str(log), out]) == 2      # (--format fastcoord)
    err = capsys.readouterr().err
    assert "no line is a fastcoord request-log line (is --format right?)" in err
    assert "Completed request" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "t.parquet").exists()
    assert main(["trace", "convert", "--format", "kafka", str(log), out]) == 0


def _kafka_line(key, version, req, resp, stamp="10:00:07,000"):
    return (f"[2024-05-01 {stamp}] DEBUG Completed request:"
            + json.dumps({"requestHeader": {"requestApiKey": key, "requestApiVersion": version,
                                            "correlationId": 1, "clientId": "c1"},
                          "request": req, "response": resp, "totalTimeMs": 0.0})
            + " (kafka.request.logger)")


def test_kafka_commits_carry_their_partitions_and_a_leave_keeps_every_member():
    """An OffsetCommit's row holds each partition it commits, as Kafka's request
    logger writes them (topics[].partitions[].partitionIndex / committedOffset; the
    topic id where v9+ has no name); a LeaveGroup naming several members (v3+) is one
    leave row per member, not its first alone."""
    commit = _kafka_line(8, 8, {"groupId": "g", "generationIdOrMemberEpoch": 1,
                                "memberId": "m1", "groupInstanceId": None, "topics": [
                                    {"name": "orders", "partitions": [
                                        {"partitionIndex": 0, "committedOffset": 42,
                                         "committedLeaderEpoch": -1, "committedMetadata": ""},
                                        {"partitionIndex": 3, "committedOffset": 7,
                                         "committedLeaderEpoch": -1, "committedMetadata": ""}]},
                                    {"name": None, "topicId": "AAAAAAAAAAAAAAAAAAAAAQ",
                                     "partitions": [{"partitionIndex": 1,
                                                     "committedOffset": 9}]}]},
                         {"topics": []})
    leave = _kafka_line(13, 4, {"groupId": "g", "members": [
        {"memberId": "m1", "groupInstanceId": None, "reason": None},
        {"memberId": "", "groupInstanceId": "i-2", "reason": None},
        {"memberId": "m3", "groupInstanceId": None, "reason": None}]},
        {"errorCode": 0, "members": []}, stamp="10:00:08,000")
    table, stats = from_kafka_log([commit, leave])
    rows = table.to_pylist()
    assert rows[0]["offsets"] == [{"topic": "orders", "partition": 0, "offset": 42},
                                  {"topic": "orders", "partition": 3, "offset": 7},
                                  {"topic": "AAAAAAAAAAAAAAAAAAAAAQ", "partition": 1, "offset": 9}]
    assert [(r["event"], r["member_id"], r["instance_id"]) for r in rows[1:]] == [
        ("leave", "m1", None), ("leave", "", "i-2"), ("leave", "m3", None)]
    assert [r["seq"] for r in rows] == [0, 1, 2, 3]
    assert {r["offsets"] is None for r in rows[1:]} == {True}
    assert stats.rows_ok == 4 and stats.malformed == 0


@pytest.mark.parametrize("bad", [
    {"topics": "orders"},
    {"topics": [{"name": "orders", "partitions": [{"partitionIndex": "0",
                                                  "committedOffset": 1}]}]},
    {"topics": [{"name": "orders", "partitions": [{"partitionIndex": 1 << 31,
                                                  "committedOffset": 1}]}]},
    {"topics": [{"name": "orders", "partitions": [{"partitionIndex": 0,
                                                  "committedOffset": True}]}]},
    {"topics": [{"name": "orders", "partitions": None}]},
    {"members": "m1"},
    {"members": [{"memberId": "m1"}, 5]},
    # without a top-level memberId (v3+): the first member names the row
    {"memberId": None, "members": "m1"},
    {"memberId": None, "members": [5]},
    {"memberId": None, "members": [{"memberId": "m1"}, "m2"]},
])
def test_kafka_commit_or_leave_fields_of_another_shape_are_a_malformed_line(bad):
    key = 13 if "members" in bad else 8
    line = _kafka_line(key, 4, {"groupId": "g", "memberId": "m1", **bad}, {"errorCode": 0})
    table, stats = from_kafka_log([line, KAFKA_LINES[3]])
    assert table.num_rows == 1 and stats.malformed == 1 and stats.rows_in == 2
    assert stats.examples and stats.examples[0].startswith("malformed: ")


def test_a_kafka_line_whose_request_is_not_an_object_is_malformed():
    """A request or response that is not a JSON object is a malformed line (it made
    the conversion fail with an AttributeError)."""
    lines = [_kafka_line(13, 4, "g", {"errorCode": 0}), _kafka_line(12, 4, ["g"], {}),
             _kafka_line(12, 4, {"groupId": "g", "memberId": "m"}, "ok"), KAFKA_LINES[3]]
    table, stats = from_kafka_log(lines)
    assert table.num_rows == 1 and stats.malformed == 3 and stats.rows_in == 4


def _fc_line(api, member, **extra):
    return json.dumps({"ts": 100.0, "api": api, "version": 8, "client": "c1",
                       "host": "127.0.0.1", "group": "g", "member": member, "generation": 1,
                       "error": 0, "latency_ms": 0.0, **extra})


def test_fastcoord_log_commits_carry_their_offsets_and_a_leave_keeps_every_member():
    lines = [_fc_line("OffsetCommit", "m1", offsets=[["orders", 0, 42], ["orders", 3, 7]]),
             _fc_line("OffsetCommit", "m1"),
             _fc_line("LeaveGroup", "m1", members=[["m1", None], ["", "i-2"]])]
    table, stats = from_fastcoord_log(lines)
    rows = table.to_pylist()
    assert rows[0]["offsets"] == [{"topic": "orders", "partition": 0, "offset": 42},
                                  {"topic": "orders", "partition": 3, "offset": 7}]
    assert rows[1]["offsets"] is None        # a log written before offsets: none named
    assert [(r["event"], r["member_id"], r["instance_id"]) for r in rows[2:]] == [
        ("leave", "m1", None), ("leave", "", "i-2")]
    assert [r["seq"] for r in rows] == [0, 1, 2, 3] and stats.rows_ok == 4

    bad = [_fc_line("OffsetCommit", "m1", offsets=[["orders", 0]]),
           _fc_line("OffsetCommit", "m1", offsets=[["orders", 0, 1 << 63]]),
           _fc_line("OffsetCommit", "m1", offsets={"orders": 1}),
           _fc_line("LeaveGroup", "m1", members=[["m1"]])]
    table, stats = from_fastcoord_log(bad)
    assert table.num_rows == 0 and stats.malformed == len(bad) == stats.rows_in


def test_an_admin_leave_of_static_members_names_the_members_it_removes(impl):
    """Kafka's removal of static members (a LeaveGroup of several members, each named by
    its instance id with member id "") leaves the members those instances last joined
    as: the replay sees a leave, not a member that expired; an instance the log never
    saw keeps member id ""."""
    def static_join(stamp, member, inst):
        return _kafka_line(11, 5, {"groupId": "g", "sessionTimeoutMs": 10000,
                                   "rebalanceTimeoutMs": 30000, "memberId": "",
                                   "groupInstanceId": inst, "protocolType": "consumer",
                                   "protocols": [{"name": "range", "metadata": "AAE="}]},
                           {"errorCode": 0, "generationId": 1, "memberId": member,
                            "leader": "m-1"}, stamp=stamp)

    def sync(stamp, member, inst):
        return _kafka_line(14, 3, {"groupId": "g", "generationId": 1, "memberId": member,
                                   "groupInstanceId": inst, "assignments": []},
                           {"errorCode": 0}, stamp=stamp)

    def heartbeat(stamp, member, inst):
        return _kafka_line(12, 4, {"groupId": "g", "generationId": 1, "memberId": member,
                                   "groupInstanceId": inst}, {"errorCode": 0}, stamp=stamp)

    lines = [static_join("10:00:00,000", "m-1", "i-1"), static_join("10:00:00,000", "m-2", "i-2"),
             sync("10:00:03,100", "m-1", "i-1"), sync("10:00:03,100", "m-2", "i-2"),
             heartbeat("10:00:06,000", "m-1", "i-1"), heartbeat("10:00:06,000", "m-2", "i-2"),
             _kafka_line(13, 4, {"groupId": "g", "members": [
                 {"memberId": "", "groupInstanceId": "i-2"},
                 {"memberId": "", "groupInstanceId": "i-9"}]}, {"errorCode": 0},
                 stamp="10:00:07,000"),
             heartbeat("10:00:09,000", "m-1", "i-1")]
    table, stats = from_kafka_log(lines)
    leaves = [(r["member_id"], r["instance_id"]) for r in table.to_pylist()
              if r["event"] == "leave"]
    assert leaves == [("m-2", "i-2"), ("", "i-9")] and stats.malformed == 0
    out = replay_local(table, impl=impl)
    assert out["expirations"].num_rows == 0
    assert [r["cause"] for r in out["rebalances"].to_pylist()] == ["member-join", "leave"]


def _static_replacement_log(heartbeat_instance: bool):
    """fastcoord's log of a static member (instance i-b, member m-1) replaced by a new
    incarnation (m-2) while the old process goes on heartbeating, fenced (82), beside a
    dynamic member (m-a). `heartbeat_instance`: the heartbeat lines name the instance id
    (the log as written now), else not (as before they did)."""
    def line(ts, api, member, error=0, gen=1, latency=0.1, version=4, inst=None, **extra):
        rec = {"ts": ts, "api": api, "version": version, "client": "c", "host": "h",
               "group": "g", "member": member, "generation": gen, "error": error,
               "latency_ms": latency}
        if inst is not None and (api != "Heartbeat" or heartbeat_instance):
            rec["instance"] = inst
        rec.update(extra)
        return json.dumps(rec)

    join = dict(gen=None, session_timeout_ms=10000, rebalance_timeout_ms=30000,
                protocol_type="consumer", protocols=["range"])
    return [
        line(100.0, "JoinGroup", "", 79, answer_member="m-a", **join),
        line(103.0, "JoinGroup", "", latency=3000.0, inst="i-b", answer_member="m-1",
             answer_generation=1, **join),
        line(103.0, "JoinGroup", "m-a", latency=2999.0, answer_generation=1, **join),
        line(103.01, "SyncGroup", "m-1", inst="i-b"), line(103.01, "SyncGroup", "m-a"),
        line(106.0, "Heartbeat", "m-1", inst="i-b"), line(106.0, "Heartbeat", "m-a"),
        line(109.0, "Heartbeat", "m-1", inst="i-b"), line(109.0, "Heartbeat", "m-a"),
        # the new incarnation takes i-b: answered at once, no rebalance
        line(110.0, "JoinGroup", "", inst="i-b", answer_member="m-2", answer_generation=1,
             **join),
        line(110.01, "SyncGroup", "m-2", inst="i-b"),
        line(112.0, "Heartbeat", "m-1", 82, inst="i-b"), line(112.0, "Heartbeat", "m-a"),
        line(113.0, "Heartbeat", "m-2", inst="i-b"),
        line(115.0, "Heartbeat", "m-1", 82, inst="i-b"),
    ]


@pytest.mark.parametrize("heartbeat_instance", [True, False])
def test_a_replaced_static_members_heartbeats_replay_fenced_as_logged(impl, heartbeat_instance):
    """A heartbeat row's instance id is its line's, or (a log from before heartbeat lines
    had one) its member's join's: the old incarnation's heartbeats after its
    replacement then replay as FENCED_INSTANCE_ID, the answer the server gave; a
    dynamic member's stay without one."""
    table, stats = from_fastcoord_log(_static_replacement_log(heartbeat_instance))
    assert stats.malformed == 0
    rows = table.to_pylist()
    beats = {(r["member_id"], r["instance_id"]) for r in rows if r["event"] == "heartbeat"}
    assert beats == {("m-1", "i-b"), ("m-2", "i-b"), ("m-a", None)}
    filled = any("older log" in e for e in stats.examples)
    assert filled == (not heartbeat_instance)
    out = replay_local(table, impl=impl)
    got = [(r["member_id"], r["event"], r["error"]) for r in out["responses"].to_pylist()]
    assert got == [(r["member_id"], r["event"], r["error"]) for r in rows]
    assert got.count(("m-1", "heartbeat", 82)) == 2


def test_a_heartbeat_line_of_a_version_without_the_instance_field_is_not_given_one():
    """Heartbeat v0-v2 has no group instance id: such a line of a static member's is
    not filled from its join (Kafka answered it by member id alone)."""
    join = _fc_line("JoinGroup", "m-1", instance="i-1", session_timeout_ms=10000,
                    protocol_type="consumer", protocols=["range"])
    old = json.loads(_fc_line("Heartbeat", "m-1"))
    old["version"] = 2
    table, stats = from_fastcoord_log([join, json.dumps(old), _fc_line("Heartbeat", "m-1")])
    assert [r["instance_id"] for r in table.to_pylist()] == ["i-1", None, "i-1"]


def test_a_kafka_heartbeat_row_names_the_instance_its_request_did(impl):
    """Kafka's request logger writes a Heartbeat's groupInstanceId: the old incarnation's
    heartbeat after its replacement replays fenced (82), as the broker answered."""
    def join(stamp, member, inst, total=0.0):
        line = _kafka_line(11, 5, {"groupId": "g", "sessionTimeoutMs": 10000,
                                   "rebalanceTimeoutMs": 30000, "memberId": "",
                                   "groupInstanceId": inst, "protocolType": "consumer",
                                   "protocols": [{"name": "range", "metadata": "AAE="}]},
                           {"errorCode": 0, "generationId": 1, "memberId": member,
                            "leader": "m-1"}, stamp=stamp)
        return line.replace('"totalTimeMs": 0.0', f'"totalTimeMs": {total}')

    def sync(stamp, member, inst):
        return _kafka_line(14, 3, {"groupId": "g", "generationId": 1, "memberId": member,
                                   "groupInstanceId": inst, "assignments": []},
                           {"errorCode": 0}, stamp=stamp)

    def heartbeat(stamp, member, inst, error=0):
        return _kafka_line(12, 4, {"groupId": "g", "generationId": 1, "memberId": member,
                                   "groupInstanceId": inst}, {"errorCode": error}, stamp=stamp)

    lines = [join("10:00:03,000", "m-1", "i-1", 3000.0), sync("10:00:03,100", "m-1", "i-1"),
             heartbeat("10:00:06,000", "m-1", "i-1"),
             join("10:00:08,000", "m-2", "i-1"), sync("10:00:08,100", "m-2", "i-1"),
             heartbeat("10:00:09,000", "m-1", "i-1", 82), heartbeat("10:00:09,500", "m-2", "i-1")]
    table, stats = from_kafka_log(lines)
    rows = table.to_pylist()
    assert stats.malformed == 0
    assert [r["instance_id"] for r in rows if r["event"] == "heartbeat"] == ["i-1"] * 3
    out = replay_local(table, impl=impl)
    assert [r["error"] for r in out["responses"].to_pylist()] == [r["error"] for r in rows]


@pytest.mark.parametrize("fmt", ["fastcoord", "kafka"])
@pytest.mark.parametrize("content", ["", "\n\n", "other APIs"])
def test_convert_refuses_a_log_without_a_coordinator_request(tmp_path, capsys, fmt, content):
    """An empty fastcoord log (or one of blank lines) was converted to an empty trace,
    exit 0, where an empty Kafka log was an error; a log whose requests are all of
    other APIs made an empty trace in both formats. Each is now one line, exit 2, and
    no trace (which replay would refuse as having no rows)."""
    from fastcoord.cli import main
    if content == "other APIs":
        sample = pathlib.Path(__file__).parent / "data" / "kafka-request.log"
        content = (json.dumps({"ts": 100.0, "api": "Metadata", "version": 9, "client": "c1",
                               "host": "h", "error": 0}) if fmt == "fastcoord"
                   else sample.read_text().splitlines()[0]) + "\n"
        assert "FIND_COORDINATOR" in content or fmt == "fastcoord"
    log = tmp_path / "requests.log"
    log.write_text(content)
    out = tmp_path / "t.parquet"
    assert main(["trace", "convert", "--format", fmt, str(log), str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"fastcoord trace convert: {log}: ")
    assert ("the log is empty" in err if not content.strip()
            else "no coordinator request" in err), err
    assert not out.exists()


def test_convert_names_a_directory_given_as_the_log(tmp_path, capsys):
    """A directory given as the log was said to be "no such file"."""
    from fastcoord.cli import main
    assert main(["trace", "convert", str(tmp_path), str(tmp_path / "t.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"fastcoord trace convert: {tmp_path}: a directory, not a log file", err


def test_convert_names_a_log_it_may_not_read(tmp_path, capsys, monkeypatch):
    """A log the user may not read (chmod 000, another user's) ended in a
    PermissionError traceback. Now one line, exit 2. (Root reads anything: the
    refusal is simulated.)"""
    import fastcoord.pipeline.cli as pcli
    from fastcoord.cli import main
    log = tmp_path / "kafka.log"
    log.write_text("\n".join(KAFKA_LINES) + "\n")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(log))
    monkeypatch.setattr(pcli, "open", refuse, raising=False)
    assert main(["trace", "convert", "--format", "kafka", str(log),
                 str(tmp_path / "t.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"fastcoord trace convert: {log}: cannot read it: Permission denied", err

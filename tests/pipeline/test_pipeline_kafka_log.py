"""Kafka's request log as brokers write it: the stock log4j and log4j2 time formats, the
broker's time zone, a log of something else, and who a request is (member ids and the
connection, never the client id), on a sample written the way Kafka writes it
(data/kafka-request.log: RequestConvertToJson's fields under the stock pattern
`[%d] %p %m (%c)%n`, two librdkafka consumers sharing the client id "rdkafka")."""
import importlib.util
import json
import os
from datetime import datetime, timezone

import pytest

pytest.importorskip("pyarrow")
from fastcoord.pipeline.adapters import LogFormatError, from_kafka_log
from fastcoord.pipeline.replay import replay_local
from fastcoord.pipeline.trace import from_rows, read_trace, write_trace
from fastcoord.pipeline.whatif import derive_behaviour

SAMPLE = os.path.join(os.path.dirname(__file__), "data", "kafka-request.log")
_GROUP_APIS = {8, 11, 12, 13, 14}
LOAD_IN_PROGRESS, MEMBER_ID_REQUIRED, UNKNOWN_MEMBER_ID = 14, 79, 25
# RequestConvertToJson.requestDescMetrics' fields, in its order (temporaryMemoryBytes and
# messageConversionsTime only when above 0: never for the group APIs)
KAFKA_FIELDS = ["isForwarded", "requestHeader", "request", "response", "connection",
                "totalTimeMs", "requestQueueTimeMs", "localTimeMs", "remoteTimeMs",
                "throttleTimeMs", "responseQueueTimeMs", "sendTimeMs", "securityProtocol",
                "principal", "listener", "clientInformation"]


def _heartbeat(stamp: str, total: float = 0.5, conn="10.0.0.5:9092-10.0.1.7:40312-3") -> str:
    """A Heartbeat's request-logger line, its time written as `stamp`."""
    rec = {"isForwarded": False,
           "requestHeader": {"requestApiKey": 12, "requestApiVersion": 3, "correlationId": 7,
                             "clientId": "rdkafka", "requestApiKeyName": "HEARTBEAT"},
           "request": {"groupId": "g", "generationId": 1, "memberId": "m-1",
                       "groupInstanceId": None},
           "response": {"throttleTimeMs": 0, "errorCode": 0}, "connection": conn,
           "totalTimeMs": total, "requestQueueTimeMs": 0.1, "localTimeMs": 0.3,
           "remoteTimeMs": 0.0, "throttleTimeMs": 0, "responseQueueTimeMs": 0.05,
           "sendTimeMs": 0.05, "securityProtocol": "PLAINTEXT", "principal": "User:ANONYMOUS",
           "listener": "PLAINTEXT",
           "clientInformation": {"softwareName": "librdkafka", "softwareVersion": "2.3.0"}}
    return f"{stamp} DEBUG Completed request:{json.dumps(rec)} (kafka.request.logger)"


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def _times(lines, **kw):
    table, stats = from_kafka_log(lines, **kw)
    assert stats.malformed == 0, stats.examples
    return [r["time_ms"] for r in table.to_pylist()]


# -- the time a line was written ------------------------------------------------------------

def test_every_stock_time_format_reads_as_the_same_instant():
    """log4j's %d (Kafka's stock pattern), log4j2's ISO-8601 with a comma or a dot, with
    or without brackets, and with an offset in any of log4j2's spellings: one instant.
    Before, every line but the first was malformed."""
    stamps = ["[2024-05-01 10:00:00,123]", "[2024-05-01T10:00:00,123]",
              "2024-05-01T10:00:00.123", "[2024-05-01T10:00:00.123Z]",
              "2024-05-01T12:00:00,123+02:00", "[2024-05-01T12:00:00,123+0200]",
              "2024-05-01T12:00:00.123+02", "[2024-05-01T07:30:00.123-02:30]"]
    got = _times([_heartbeat(s, total=0.0) for s in stamps])
    assert got == [_ms("2024-05-01T10:00:00.123+00:00")] * len(stamps)


def test_the_brokers_time_zone_and_an_offset_that_wins_over_it():
    """A broker logs its local time: with tz, a line without an offset is read in that
    zone (Berlin is UTC+2 in May); an offset in the line wins. Before, there was no
    zone: every time was taken as UTC, two hours off."""
    lines = [_heartbeat("[2024-05-01 12:00:00,000]", total=0.0),
             _heartbeat("[2024-05-01T10:00:01.000Z]", total=0.0)]
    assert _times(lines, tz="Europe/Berlin") == [_ms("2024-05-01T10:00:00+00:00"),
                                                 _ms("2024-05-01T10:00:01+00:00")]
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        from_kafka_log(lines, tz="Mars/Olympus")


def test_the_hour_repeated_when_clocks_go_back_and_the_hour_skipped():
    """Berlin, 2024-10-27: 02:00-03:00 happens twice (CEST, then CET). The lines come
    in time order, so a wall time that reads as far before the previous line is the
    second pass. 2024-03-31: 02:00-03:00 never happens; such a time is read with the
    offset before the change."""
    stamps = ["[2024-10-27 01:59:00,000]", "[2024-10-27 02:10:00,000]",
              "[2024-10-27 02:59:59,500]", "[2024-10-27 02:00:00,200]",
              "[2024-10-27 02:40:00,000]", "[2024-10-27 03:05:00,000]"]
    got = _times([_heartbeat(s, total=0.0) for s in stamps], tz="Europe/Berlin")
    assert got == [_ms(t) for t in ("2024-10-26T23:59:00+00:00", "2024-10-27T00:10:00+00:00",
                                    "2024-10-27T00:59:59.500+00:00",
                                    "2024-10-27T01:00:00.200+00:00",
                                    "2024-10-27T01:40:00+00:00", "2024-10-27T02:05:00+00:00")]
    assert _times([_heartbeat("[2024-03-31 02:30:00,000]", total=0.0)], tz="Europe/Berlin") \
        == [_ms("2024-03-31T01:30:00+00:00")]


def test_convert_takes_a_time_zone_and_refuses_an_unknown_one(tmp_path, capsys):
    from fastcoord.cli import main
    out = str(tmp_path / "t.parquet")
    assert main(["trace", "convert", "--format", "kafka", SAMPLE, out]) == 0
    utc = read_trace(out).column("time_ms").to_pylist()
    assert main(["trace", "convert", "--format", "kafka", "--time-zone", "Europe/Berlin",
                 SAMPLE, out]) == 0
    berlin = read_trace(out).column("time_ms").to_pylist()
    assert [u - b for u, b in zip(utc, berlin)] == [2 * 3600_000] * len(utc)
    capsys.readouterr()
    os.unlink(out)
    assert main(["trace", "convert", "--format", "kafka", "--time-zone", "Europe/Berlln",
                 SAMPLE, out]) == 2
    err = capsys.readouterr().err
    assert "unknown time zone 'Europe/Berlln'" in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(out)


# -- a log of something else -----------------------------------------------------------------

def test_a_log_of_no_request_logger_line_names_its_first_bad_line(tmp_path, capsys):
    """No line in a known format: an error naming the first line that was not (its
    number and its start), exit 2, no trace. A log with bad lines among good ones is
    converted and its bad lines counted, as before. Before, the first message named no
    line number and an empty log made an empty trace with exit 0."""
    from fastcoord.cli import main
    log, out = tmp_path / "server.log", str(tmp_path / "t.parquet")
    other = ["", "01/05/2024 10:00:00 INFO [KafkaServer id=1] started (kafka.server.KafkaServer)",
             "2024/05/01 10:00:01 " + _heartbeat("")[1:]]
    with pytest.raises(LogFormatError, match=r"line 2: '01/05/2024 10:00:00 INFO \[Kafka"):
        from_kafka_log(other)
    log.write_text("\n".join(other) + "\n")
    assert main(["trace", "convert", "--format", "kafka", str(log), out]) == 2
    err = capsys.readouterr().err
    assert "line 2: '01/05/2024 10:00:00 INFO" in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(out)
    log.write_text("")
    assert main(["trace", "convert", "--format", "kafka", str(log), out]) == 2
    assert "empty" in capsys.readouterr().err and not os.path.exists(out)
    log.write_text("\n".join(other + [_heartbeat("[2024-05-01 10:00:02,000]")]) + "\n")
    assert main(["trace", "convert", "--format", "kafka", str(log), out]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["malformed"], stats["rows_ok"]) == (2, 1)


# -- who a request is ------------------------------------------------------------------------

def _logged(path):
    """Each group request's line in the sample, read here on its own (not by the
    adapter): (when it arrived, when Kafka answered, Kafka's answer)."""
    out = []
    with open(path) as f:
        for line in f:
            assert line.startswith("[") and line.endswith(" (kafka.request.logger)\n")
            rec = json.loads(line[line.index("{"):line.rindex("}") + 1])
            assert list(rec) == KAFKA_FIELDS
            if rec["requestHeader"]["requestApiKey"] not in _GROUP_APIS:
                continue
            stamp = line[1:line.index("]")]
            done = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=timezone.utc)
            done_ms = done.timestamp() * 1000
            resp = rec["response"]
            if "errorCode" in resp:
                error = resp["errorCode"]
            else:       # OffsetCommit: per partition, all alike here
                [error] = {p["errorCode"] for t in resp["topics"] for p in t["partitions"]}
            out.append((round(done_ms - rec["totalTimeMs"]), round(done_ms), error))
    return out


def test_the_sample_replays_to_kafkas_answers_at_the_arrival_times(impl, tmp_path):
    """Two librdkafka consumers, one client id ("rdkafka"), two connections; the
    first's joins while the coordinator loads (answered with no member id), its
    MEMBER_ID_REQUIRED join and its join parked for the initial rebalance delay; the
    second's join parked until the first rejoins, its line after the heartbeats that
    completed meanwhile; commits, leaves. Converted and replayed, every request gets
    Kafka's answer, and a parked one when Kafka gave it. Before, the replay took the id
    the first unanswered join's MEMBER_ID_REQUIRED gave for the second one's: a member
    no client was, which held the first rebalance up by 2.6 s (its sync then answered
    REBALANCE_IN_PROGRESS)."""
    from fastcoord.cli import main
    out = str(tmp_path / "t.parquet")
    assert main(["trace", "convert", "--format", "kafka", SAMPLE, out]) == 0
    trace = read_trace(out)
    rows = trace.to_pylist()
    assert [r["time_ms"] for r in rows] == [arrived for arrived, _, _ in _logged(SAMPLE)]
    assert {r["client_id"] for r in rows} == {"rdkafka"}
    assert len({r["connection"] for r in rows}) == 2
    assert len({r["member_id"] for r in rows if r["member_id"]}) == 2
    _assert_kafkas_answers(replay_local(trace, impl=impl)["responses"])


@pytest.mark.skipif(importlib.util.find_spec("pyspark") is None, reason="no pyspark")
def test_the_sample_replays_to_kafkas_answers_on_spark(spark, tmp_path):
    """The same on Spark, which ships the trace's rows to its workers by shard."""
    from fastcoord.pipeline.spark import replay_spark
    trace, _ = from_kafka_log(SAMPLE)
    path = str(tmp_path / "t.parquet")
    write_trace(trace, path)
    _assert_kafkas_answers(replay_spark(spark, path)["responses"])


def _assert_kafkas_answers(responses):
    """Every request of the sample got Kafka's answer when Kafka gave it."""
    logged = _logged(SAMPLE)
    got = {r["seq"]: r for r in responses.to_pylist()}
    assert sorted(got) == list(range(len(logged)))
    for seq, (arrived, done, error) in enumerate(logged):
        r = got[seq]
        assert r["time_ms"] == arrived
        if error == LOAD_IN_PROGRESS:
            # a coordinator still loading its offsets partition, which a replay's never
            # is: a join without a member id gets what a loaded one answers
            assert r["error"] == MEMBER_ID_REQUIRED, (seq, r)
            continue
        assert r["error"] == error, (seq, r, error)
        # answered when Kafka answered, a parked join or sync seconds later included, but
        # for the few ms of Kafka's own work (a commit's append) a replay does not take
        assert arrived <= r["answered_ms"] <= done and done - r["answered_ms"] <= 3, (seq, r)
    assert UNKNOWN_MEMBER_ID not in {r["error"] for r in got.values()}
    assert sum(1 for *_, e in logged if e == LOAD_IN_PROGRESS) == 2


def test_behaviour_knows_processes_by_connection_not_client_id():
    """What-if's consumers: a dynamic member continues the stopped incarnation of its
    own process, its client id and the client address of its connection; one on
    another host sharing the client id is a consumer of its own. A first join without
    an id is timed by its own connection's. Before, both went by the client id: the
    other host's consumer was taken for a restart, the second "" join's time was the
    first's."""
    J = dict(session_timeout_ms=10000, rebalance_timeout_ms=30000, protocol_type="consumer",
             protocols=["range"], client_id="rdkafka")
    h1a, h1b = "10.0.0.5:9092-10.0.1.7:40312-3", "10.0.0.5:9092-10.0.1.7:40990-9"
    h2 = "10.0.0.5:9092-10.0.1.8:51000-4"
    rows = [dict(time_ms=0, group_id="g", member_id="", event="join", connection=h1a, **J),
            dict(time_ms=100, group_id="g", member_id="", event="join", connection=h2, **J),
            dict(time_ms=5, group_id="g", member_id="x1", event="join", connection=h1a, **J),
            dict(time_ms=105, group_id="g", member_id="y1", event="join", connection=h2, **J)]
    for t in range(3000, 12001, 3000):
        rows.append(dict(time_ms=t, group_id="g", member_id="x1", event="heartbeat",
                         connection=h1a, client_id="rdkafka"))
    rows.append(dict(time_ms=13000, group_id="g", member_id="x1", event="leave",
                     connection=h1a, client_id="rdkafka"))
    for t in range(3100, 15101, 3000):
        rows.append(dict(time_ms=t, group_id="g", member_id="y1", event="heartbeat",
                         connection=h2, client_id="rdkafka"))
    rows.append(dict(time_ms=16000, group_id="g", member_id="y1", event="leave",
                     connection=h2, client_id="rdkafka"))
    # after both stopped: one from a third host (a consumer of its own), one from host 1 (x1's
    # process again), in that order
    rows.append(dict(time_ms=20000, group_id="g", member_id="z1", event="join",
                     connection="10.0.0.5:9092-10.0.1.9:41000-11", **J))
    rows.append(dict(time_ms=21000, group_id="g", member_id="x2", event="join",
                     connection=h1b, **J))
    rows.sort(key=lambda r: r["time_ms"])
    incs = derive_behaviour(from_rows(rows))["g"]
    got = {i.member: (i.slot, i.start_ms) for i in incs}
    assert got == {"x1": ("x1", 0), "y1": ("y1", 100), "z1": ("z1", 20000),
                   "x2": ("x1", 21000)}


def test_values_of_the_wrong_type_are_counted_not_fatal():
    """A file's bytes are hostile: a field of another type than Kafka writes (a number
    for a group id, a string for a generation, a list for protocols, a time no int64
    holds) is null in its row (a null group or member: the row is malformed), never
    a pyarrow error out of the conversion (before: ArrowTypeError)."""
    def line(request, response=None, total=0.5, key=12):
        rec = {"requestHeader": {"requestApiKey": key, "clientId": 7}, "request": request,
               "response": response or {"errorCode": 0}, "connection": 3, "totalTimeMs": total}
        return f"[2024-05-01 10:00:00,000] DEBUG Completed request:{json.dumps(rec)}"
    lines = [line({"groupId": 5, "memberId": "m", "generationId": "x"}),
             line({"groupId": "g", "memberId": ["m"], "groupInstanceId": {}}, {"errorCode": "0"}),
             line({"groupId": "g", "memberId": "m", "generationId": 1 << 40}, total=-1e300),
             line({"groupId": "g", "memberId": "m", "protocols": "range",
                   "sessionTimeoutMs": True, "protocolType": 1}, key=11),
             line({"groupId": "g", "memberId": "m", "generationId": 1 << 40})]
    table, stats = from_kafka_log(lines)
    assert (stats.malformed, stats.rows_ok) == (3, 2)
    join, heartbeat = table.to_pylist()
    assert (join["protocols"], join["session_timeout_ms"], join["protocol_type"]) == ([], None, None)
    assert (heartbeat["generation"], heartbeat["client_id"], heartbeat["connection"]) == \
        (None, None, None)

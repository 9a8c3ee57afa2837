"""The steady ConsumerGroupHeartbeat answered by the wire twins' consumer_heartbeat_frame
(parse in C, the member table's consumer_steady, encode in C): byte for byte what the
general path (kio, apis.py) answers, and nothing but the steady form."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastcoord
from fastcoord import Errors
from fastcoord._twins import module
from fastcoord.core.results import ConsumerGroupHeartbeatResult
from fastcoord.server.protocol import encode_request, encode_response
from helpers.server import ClientProc, RawConn, ServerProc, metrics_url, scrape, wait_until

IMPLS = ["native", "pure"] if fastcoord.NATIVE_AVAILABLE else ["pure"]


@pytest.fixture(params=IMPLS)
def wire(request):
    return module(request.param, "server.wire")


def steady_body(version: int, **fields) -> dict:
    body = {"group_id": "g", "member_id": "m-1", "member_epoch": 3, "instance_id": None,
            "rack_id": None, "rebalance_timeout": -1, "subscribed_topic_names": None,
            "server_assignor": None, "topic_partitions": None}
    if version >= 1:
        body["subscribed_topic_regex"] = None
    body.update(fields)
    return body


class Steady:
    """A member table's consumer_steady: the settled answer, recording its calls."""

    def __init__(self, interval=5000, answer=True):
        self.calls = []
        self.interval = interval
        self.answer = answer

    def __call__(self, group_id, member_id, epoch, client_id, client_host):
        self.calls.append((group_id, member_id, epoch, client_id, client_host))
        if not self.answer:
            return None
        return ConsumerGroupHeartbeatResult(Errors.NONE, None, member_id, epoch, self.interval,
                                            None)


def kio_answer(version, correlation, member_id, epoch, interval) -> bytes:
    """What apis.py's consumer_group_heartbeat replies, encoded by kio."""
    return encode_response(68, version, correlation, {
        "error_code": 0, "error_message": None, "member_id": member_id,
        "member_epoch": epoch, "heartbeat_interval": interval, "assignment": None})


_id = st.text(min_size=1, max_size=40).filter(lambda s: len(s.encode()) < 127)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(version=st.sampled_from([0, 1]), correlation=st.integers(-2**31, 2**31 - 1),
       group_id=_id, member_id=_id, epoch=st.integers(1, 2**31 - 1),
       interval=st.integers(0, 2**31 - 1), client=st.none() | st.text(max_size=20))
def test_the_answer_is_kios_bytes(wire, version, correlation, group_id, member_id, epoch,
                                  interval, client):
    frame = encode_request(68, version, correlation,
                           steady_body(version, group_id=group_id, member_id=member_id,
                                       member_epoch=epoch), client)
    steady = Steady(interval)
    answered = wire.consumer_heartbeat_frame(frame[4:], 0, 1, steady, "session-client",
                                             "10.0.0.1")
    assert answered is not None
    data, got_version, got_client, got_group, got_member, got_epoch = answered
    assert data == kio_answer(version, correlation, member_id, epoch, interval)
    assert (got_version, got_client, got_group, got_member, got_epoch) == \
        (version, client, group_id, member_id, epoch)
    assert steady.calls == [(group_id, member_id, epoch, "session-client", "10.0.0.1")]


_SET_FIELDS = [("instance_id", "i"), ("rack_id", "r"), ("rebalance_timeout", 30000),
               ("subscribed_topic_names", []), ("subscribed_topic_names", ["t"]),
               ("server_assignor", "uniform"), ("topic_partitions", [])]


@pytest.mark.parametrize("version, field, value",
                         [(v, f, x) for v in (0, 1) for f, x in _SET_FIELDS]
                         + [(1, "subscribed_topic_regex", "t.*")])
def test_any_other_form_goes_to_the_general_path(wire, version, field, value):
    frame = encode_request(68, version, 7, steady_body(version, **{field: value}))[4:]
    steady = Steady()
    assert wire.consumer_heartbeat_frame(frame, 0, 1, steady, "c", "h") is None
    assert steady.calls == []


def test_cut_extended_or_foreign_frames_go_to_the_general_path(wire):
    steady = Steady()
    frame = encode_request(68, 1, 7, steady_body(1))[4:]
    for cut in range(len(frame)):
        assert wire.consumer_heartbeat_frame(frame[:cut], 0, 1, steady, "c", "h") is None
    assert wire.consumer_heartbeat_frame(frame + b"\x00", 0, 1, steady, "c", "h") is None
    assert wire.consumer_heartbeat_frame(frame, 0, 0, steady, "c", "h") is None    # v1 not served
    tagged = frame[:-1] + b"\x01\x00\x00"             # one (empty) tagged field
    assert wire.consumer_heartbeat_frame(tagged, 0, 1, steady, "c", "h") is None
    classic = encode_request(12, 4, 7, {"group_id": "g", "generation_id": 1,
                                        "member_id": "m", "group_instance_id": None})[4:]
    assert wire.consumer_heartbeat_frame(classic, 0, 4, steady, "c", "h") is None
    bad_utf8 = frame.replace(b"m-1", b"m-\xff")
    assert wire.consumer_heartbeat_frame(bad_utf8, 0, 1, steady, "c", "h") is None
    assert steady.calls == []
    declining = Steady(answer=False)
    assert wire.consumer_heartbeat_frame(frame, 0, 1, declining, "c", "h") is None
    assert len(declining.calls) == 1


def _join_body(version: int, **fields) -> dict:
    body = steady_body(version, member_epoch=0, rebalance_timeout=45000,
                       subscribed_topic_names=["orders"], topic_partitions=[])
    body.update(fields)
    return body


@pytest.mark.parametrize("impl", IMPLS)
def test_a_served_member_is_answered_by_the_fast_path(tmp_path, impl):
    """A real `fastcoord serve`: a member joins, reports what it owns, then heartbeats
    steadily; those answers come from the fast paths (the per-read reader, then the
    heartbeat lane), are what the general path answers, and get their request-log lines.
    A classic Heartbeat naming the member is UNKNOWN_MEMBER_ID; a stale epoch leaves
    the lane for the general path."""
    server = ServerProc(tmp_path / "server.log", "--store", "memory", "--metrics-port", "0",
                        "--impl", impl, topics=["orders:4"])
    conn = RawConn(server.port)
    try:
        joined = conn.call(68, 1, _join_body(1, member_id="wm-1"))
        assert joined.error_code == 0, joined
        epoch = joined.member_epoch
        owned = [{"topic_id": t.topic_id, "partitions": list(t.partitions)}
                 for t in joined.assignment.topic_partitions]
        acked = conn.call(68, 1, steady_body(1, member_id="wm-1", member_epoch=epoch,
                                             topic_partitions=owned))
        assert acked.error_code == 0 and acked.member_epoch == epoch
        samples = scrape(metrics_url(server))
        before = samples["fastcoord_consumer_heartbeats_fast_path_total"]
        lane_before = samples["fastcoord_lane_reads_total"]
        for version in (0, 1, 1, 0):
            corr = conn.send(68, version, steady_body(version, member_id="wm-1",
                                                      member_epoch=epoch))
            frame = conn.recv_frame()
            assert frame == kio_answer(version, corr, "wm-1", epoch, 5000)[4:]
            conn.sent.pop(corr)
        samples = scrape(metrics_url(server))
        assert samples["fastcoord_consumer_heartbeats_fast_path_total"] - before == 4
        # a read of steady heartbeats only: the next ones are the heartbeat lane's
        assert samples["fastcoord_lane_reads_total"] - lane_before >= 3
        classic = conn.call(12, 4, {"group_id": "g", "generation_id": epoch,
                                    "member_id": "wm-1", "group_instance_id": None})
        assert classic.error_code == int(Errors.UNKNOWN_MEMBER_ID)
        stale = conn.call(68, 1, steady_body(1, member_id="wm-1", member_epoch=epoch + 1))
        assert stale.error_code == int(Errors.FENCED_MEMBER_EPOCH)     # the general path's
    finally:
        conn.close()
        assert server.stop() == 0
    assert "Traceback" not in server.log(), server.log()
    lines = [json.loads(line) for line in server.request_log_path.read_text().splitlines()]
    beats = [(r["version"], r["client"], r["member"], r["generation"], r["error"])
             for r in lines if r["api"] == "ConsumerGroupHeartbeat"]
    assert beats == [(1, "raw", "wm-1", 0, 0), (1, "raw", "wm-1", epoch, 0),
                     (0, "raw", "wm-1", epoch, 0), (1, "raw", "wm-1", epoch, 0),
                     (1, "raw", "wm-1", epoch, 0), (0, "raw", "wm-1", epoch, 0),
                     (1, "raw", "wm-1", epoch + 1, int(Errors.FENCED_MEMBER_EPOCH))]


@pytest.mark.clients
def test_a_confluent_kafka_consumers_steady_heartbeats_take_the_fast_path(tmp_path):
    """librdkafka (group.protocol=consumer) sends its steady heartbeats in the steady
    form: once it holds its partitions, the fast path answers them."""
    server = ServerProc(tmp_path / "server.log", "--metrics-port", "0",
                        "--group-consumer-min-heartbeat-interval-ms", "100",
                        "--group-consumer-heartbeat-interval-ms", "200", topics=["orders:6"])
    client = ClientProc("confluent", server.bootstrap, "cg", "orders", "c1", tmp_path,
                        group_protocol="consumer")
    url = metrics_url(server)
    try:
        assert wait_until(lambda: scrape(url)["fastcoord_consumer_heartbeats_fast_path_total"]
                          >= 5, 20.0), server.log()
    finally:
        client.close(timeout=5)
        client.cleanup()
        assert server.stop() == 0
    assert "Traceback" not in server.log(), server.log()


@pytest.mark.parametrize("bound", [True, False], ids=["table's method", "a wrapper"])
def test_the_reader_answers_from_a_member_table(wire, impl, bound):
    """With a coordinator's member table behind it (its bound consumer_steady, which the
    native reader calls in C, or any wrapper of it, called in Python): a settled
    member's steady heartbeat is answered kio's bytes and refreshes its session; the
    wrong epoch, or another client id, is left to the general path."""
    from fastcoord import CoordinatorConfig, GroupCoordinator, ManualClock
    clock = ManualClock(0)
    coord = GroupCoordinator(CoordinatorConfig(), clock=clock, impl=impl)
    coord.set_topics({"t": 2})
    out = []
    coord.consumer_group_heartbeat("g", "m-1", 0, rebalance_timeout_ms=30_000,
                                   subscribed_topic_names=["t"], owned_partitions={},
                                   client_id="cli", client_host="h", callback=out.append)
    coord.consumer_group_heartbeat("g", "m-1", 1, owned_partitions={"t": [0, 1]},
                                   client_id="cli", client_host="h", callback=out.append)
    assert [r.member_epoch for r in out] == [1, 1]
    table = coord.member_table
    steady = table.consumer_steady if bound else (lambda *a: table.consumer_steady(*a))
    reader = wire.HeartbeatReader(lambda *a: 0, 1 << 20, 0, 4, None, None, steady, 0, 1)
    frame = encode_request(68, 1, 9, steady_body(1, group_id="g", member_id="m-1",
                                                 member_epoch=1))
    written = []
    clock.advance(40_000)               # within the 45 s session: refreshed by the answer
    assert reader(frame, written.append, None, ("cli", "h")) == len(frame)
    assert written == [kio_answer(1, 9, "m-1", 1, 5000)]
    clock.advance(40_000)
    coord.advance_time(0)
    assert [m.member_id for m in coord.consumer_group_describe(["g"])[0].members] == ["m-1"]
    stale = encode_request(68, 1, 10, steady_body(1, group_id="g", member_id="m-1",
                                                  member_epoch=2))
    assert reader(stale, written.append, None, ("cli", "h")) == 0
    assert reader(frame, written.append, None, ("another", "h")) == 0
    assert reader.consumer_answered == 1 and len(written) == 1
    # a group config's new interval is in the next answer (the native reader reads it
    # beside the cached answer, not from it)
    coord.set_group_config("g", {"consumer.heartbeat.interval.ms": 7000})
    assert reader(frame, written.append, None, ("cli", "h")) == len(frame)
    assert written[-1] == kio_answer(1, 9, "m-1", 1, 7000)


def test_the_per_read_reader_answers_steady_consumer_heartbeats(wire):
    """A read of classic and steady consumer heartbeats: answered in order in one write,
    each consumer answer kio's bytes, counted apart; without the connection's ident,
    or at a frame `steady` declines, the reader stops there."""
    classic = encode_request(12, 4, 1, {"group_id": "g", "generation_id": 1,
                                        "member_id": "c", "group_instance_id": None})
    steady_frames = [encode_request(68, v, 2 + v, steady_body(v, member_epoch=7))
                     for v in (0, 1)]
    data = classic + steady_frames[0] + steady_frames[1] + classic
    beats = []

    def heartbeat(group_id, member_id, generation, instance_id):
        beats.append(member_id)
        return 0

    reader = wire.HeartbeatReader(heartbeat, 1 << 20, 0, 4, None, None, Steady(), 0, 1)
    written = []
    assert reader(data, written.append, None, ("session-client", "h")) == len(data)
    assert written == [encode_response(12, 4, 1, {"error_code": 0})
                       + kio_answer(0, 2, "m-1", 7, 5000) + kio_answer(1, 3, "m-1", 7, 5000)
                       + encode_response(12, 4, 1, {"error_code": 0})]
    assert (reader.answered, reader.consumer_answered, beats) == (2, 2, ["c", "c"])
    assert reader(data, written.append, None, None) == len(classic)     # no ident
    declining = wire.HeartbeatReader(heartbeat, 1 << 20, 0, 4, None, None,
                                     Steady(answer=False), 0, 1)
    assert declining(data, written.append, None, ("c", "h")) == len(classic)
    with pytest.raises(TypeError, match="ident"):
        reader(data, written.append, None, ("c",))

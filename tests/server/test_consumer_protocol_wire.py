"""The consumer group protocol (KIP-848) on the wire: topic ids (made once, kept by the
durable store, answered by Metadata v10+), the ConsumerGroupHeartbeat and
ConsumerGroupDescribe handlers' translation between the wire (topic ids, versions,
ACLs) and the coordinator's API, OffsetFetch v9 and ListGroups v5's new fields, the
serve flags and the request log.

Each request goes the whole way in process: kio-encoded frame -> decode_request ->
handler -> encode_response -> decoded response. The handler tests give KafkaApis a
coordinator that records what it is asked and answers what the test says, so that what
is checked is the wire layer alone; tests/server/test_consumer_clients.py and the
end-to-end tests below run the real coordinator."""
from __future__ import annotations

import json
import time
import uuid
from types import SimpleNamespace

import pytest

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock
from fastcoord.server.apis import KafkaApis, Session
from fastcoord.server.protocol import (
    SUPPORTED_VERSIONS, decode_request, decode_response, encode_request, encode_response,
)
from fastcoord.server.security import Acl, Security
from fastcoord.server.topic_ids import TopicIds
from fastcoord.storage import DurableStore

from helpers.server import RawConn, ServerProc

TOPICS = {"orders": 6, "payments": 2}


class RecordingCoordinator:
    """The coordinator methods the new handlers call: each records its arguments and
    answers what the test put in `answers`."""

    def __init__(self, **answers) -> None:
        self.calls = []
        self.answers = answers

    def consumer_group_heartbeat(self, group_id, member_id, member_epoch, **kw):
        self.calls.append(("heartbeat", group_id, member_id, member_epoch, kw))
        kw["callback"](self.answers["heartbeat"])

    def consumer_group_describe(self, group_ids):
        self.calls.append(("describe", list(group_ids)))
        return [self.answers["describe"][g] for g in group_ids]

    def list_groups(self, states=None, types=None):
        self.calls.append(("list", states, types))
        return self.answers["list"]

    active = True

    def loading(self):
        return False

    def fetch_offsets_with_errors(self, group_id, partitions=None, **kw):
        self.calls.append(("fetch", group_id, partitions, kw))
        return Errors.NONE, {}, {}


def _apis(coord, security=None, topic_ids=None) -> KafkaApis:
    return KafkaApis(coord, TOPICS, host="127.0.0.1", port=9092, security=security,
                     topic_ids=topic_ids)


def _call(apis: KafkaApis, api_key: int, version: int, body: dict,
          session: Session = None, client_id: str = "wire-test"):
    """The decoded response to `body`, sent as a real frame through the handler."""
    frame = encode_request(api_key, version, 5, body, client_id=client_id)
    request = decode_request(frame[4:], apis.versions)
    if session is None:
        session = Session("10.0.0.7")
        session.client_id = request.client_id
    replies = []
    apis.handle(session, request, replies.append)
    assert len(replies) == 1
    data = encode_response(api_key, version, 5, replies[0])
    corr, response = decode_response(api_key, version, data[4:])
    assert corr == 5
    return response


def _heartbeat_result(**fields):
    values = dict(error=Errors.NONE, error_message=None, member_id="m-1", member_epoch=3,
                  heartbeat_interval_ms=5000, assignment=None)
    values.update(fields)
    return SimpleNamespace(**values)


# ---- topic ids --------------------------------------------------------------------------

def test_topic_ids_are_made_once_kept_and_read_back(tmp_path):
    store = DurableStore(tmp_path / "groups", num_shards=3)
    first = TopicIds.for_topics(["orders", "payments"], store)
    ids = first.as_dict()
    assert len(set(ids.values())) == 2 and uuid.UUID(int=0) not in ids.values()
    assert all(u.version == 4 for u in ids.values())
    store.close()
    again = DurableStore(tmp_path / "groups", num_shards=3)
    # the same ids after a reopen; a new topic gets one, the others keep theirs
    second = TopicIds.for_topics(["payments", "orders", "audit"], again)
    assert {n: second.id_of(n) for n in ids} == ids
    assert second.id_of("audit") not in ids.values()
    # a topic no longer declared resolves to nothing, but keeps its id for later
    third = TopicIds.for_topics(["audit"], again)
    assert third.name_of(ids["orders"]) is None and third.id_of("orders") is None
    assert TopicIds.for_topics(["orders"], again).id_of("orders") == ids["orders"]
    again.close()


def test_a_damaged_topic_ids_file_is_refused_not_replaced(tmp_path):
    store = DurableStore(tmp_path / "groups", num_shards=3)
    TopicIds.for_topics(["orders"], store)
    path = tmp_path / "groups" / "topic-ids.log"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40                               # a bit of the UUID
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="CRC mismatch"):
        TopicIds.for_topics(["orders"], store)
    path.write_bytes(bytes(data[:-5]))             # cut short
    with pytest.raises(ValueError, match="bad record length"):
        TopicIds.for_topics(["orders"], store)
    store.close()


def test_metadata_answers_topic_ids_from_v10_and_topics_by_id_at_v12():
    apis = _apis(GroupCoordinator(CoordinatorConfig(), impl="pure"))
    ids = apis.topic_ids.as_dict()
    base = {"allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}
    assert SUPPORTED_VERSIONS[3][1] >= 12
    for version in (10, 11, 12):
        answer = _call(apis, 3, version, dict(base, topics=None))
        assert {t.name: t.topic_id for t in answer.topics} == ids, version
    by_id = _call(apis, 3, 12, dict(base, topics=[
        {"topic_id": ids["payments"], "name": None},
        {"topic_id": uuid.UUID(int=7), "name": None},
        {"topic_id": None, "name": "nope"}]))
    got = [(t.error_code, t.name, t.topic_id, len(t.partitions)) for t in by_id.topics]
    assert got == [(0, "payments", ids["payments"], 2),
                   (100, None, uuid.UUID(int=7), 0),           # UNKNOWN_TOPIC_ID
                   (3, "nope", None, 0)]          # (kio reads the zero UUID as None)


# ---- ConsumerGroupHeartbeat ----------------------------------------------------------------

def _join_body(version: int, **fields) -> dict:
    body = {"group_id": "g", "member_id": "m-1", "member_epoch": 0, "instance_id": None,
            "rack_id": "r1", "rebalance_timeout": 45000, "subscribed_topic_names": ["orders"],
            "server_assignor": "uniform", "topic_partitions": []}
    if version >= 1:
        body["subscribed_topic_regex"] = None
    body.update(fields)
    return body


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_translates_topic_ids_both_ways(version):
    coord = RecordingCoordinator()
    apis = _apis(coord)
    ids = apis.topic_ids.as_dict()
    coord.answers["heartbeat"] = _heartbeat_result(
        member_epoch=4, assignment={"payments": [1, 0], "orders": [5, 2]})
    answer = _call(apis, 68, version, _join_body(version, member_epoch=3, topic_partitions=[
        {"topic_id": ids["orders"], "partitions": [2, 5]},
        {"topic_id": uuid.UUID(int=99), "partitions": [0]},   # unknown here: no partition
        {"topic_id": ids["orders"], "partitions": [1]}]))
    (kind, group, member, epoch, kw), = coord.calls
    assert (kind, group, member, epoch) == ("heartbeat", "g", "m-1", 3)
    # (an unknown id goes on under a key no topic name can be, owning nothing)
    assert kw["owned_partitions"] == {"orders": [2, 5, 1],
                                      f"<unknown topic id {uuid.UUID(int=99)}>": []}
    assert kw["subscribed_topic_names"] == ["orders"] and kw["server_assignor"] == "uniform"
    assert kw["rebalance_timeout_ms"] == 45000 and kw["rack_id"] == "r1"
    assert kw["client_id"] == "wire-test" and kw["client_host"] == "/10.0.0.7"
    assert (answer.error_code, answer.member_id, answer.member_epoch) == (0, "m-1", 4)
    assert answer.heartbeat_interval.total_seconds() == 5
    assert [(t.topic_id, t.partitions) for t in answer.assignment.topic_partitions] == [
        (ids["orders"], (2, 5)), (ids["payments"], (0, 1))]


def test_heartbeat_nulls_mean_unchanged_and_an_unchanged_assignment_is_null():
    coord = RecordingCoordinator(heartbeat=_heartbeat_result(assignment=None))
    apis = _apis(coord)
    answer = _call(apis, 68, 1, {"group_id": "g", "member_id": "m-1", "member_epoch": 3,
                                 "topic_partitions": None})
    kw = coord.calls[0][4]
    assert kw["owned_partitions"] is None and kw["subscribed_topic_names"] is None
    assert kw["subscribed_topic_regex"] is None and kw["rebalance_timeout_ms"] == -1
    assert answer.error_code == 0 and answer.assignment is None
    # an empty assignment is not a null one
    coord.answers["heartbeat"] = _heartbeat_result(assignment={})
    answer = _call(apis, 68, 1, {"group_id": "g", "member_id": "m-1", "member_epoch": 3,
                                 "topic_partitions": None})
    assert answer.assignment is not None and answer.assignment.topic_partitions == ()


def test_heartbeat_v1_regex_and_member_id_rules():
    coord = RecordingCoordinator(heartbeat=_heartbeat_result(member_id="made-1"))
    apis = _apis(coord)
    _call(apis, 68, 1, _join_body(1, subscribed_topic_names=None,
                                  subscribed_topic_regex="ord.*"))
    assert coord.calls[-1][4]["subscribed_topic_regex"] == "ord.*"
    # v1: the member id is the client's; none is INVALID_REQUEST, the coordinator not asked
    answer = _call(apis, 68, 1, _join_body(1, member_id=""))
    assert (answer.error_code, answer.error_message) == (42, "MemberId can't be empty.")
    assert answer.member_id is None and answer.member_epoch == 0 and len(coord.calls) == 1
    # v0: an empty member id lets the coordinator make one
    answer = _call(apis, 68, 0, _join_body(0, member_id=""))
    assert coord.calls[-1][2] == "" and answer.member_id == "made-1"


def test_heartbeat_error_answers_carry_the_error_alone():
    coord = RecordingCoordinator(heartbeat=_heartbeat_result(
        error=Errors.FENCED_MEMBER_EPOCH, error_message="fenced", member_epoch=7,
        assignment={"orders": [0]}))
    answer = _call(_apis(coord), 68, 1, _join_body(1, member_epoch=5))
    assert (answer.error_code, answer.error_message, answer.member_id, answer.member_epoch,
            answer.assignment) == (110, "fenced", None, 0, None)


def test_heartbeat_and_describe_follow_the_acls():
    acls = [Acl("User:ANONYMOUS", ("Read",), group="ok"),
            Acl("User:ANONYMOUS", ("Describe",), topic="orders")]
    coord = RecordingCoordinator(heartbeat=_heartbeat_result())
    apis = _apis(coord, security=Security(acls=acls))
    assert _call(apis, 68, 1, _join_body(1, group_id="no")).error_code == 30
    denied_topic = _call(apis, 68, 1, _join_body(1, group_id="ok",
                                                 subscribed_topic_names=["orders", "payments"]))
    # (Kafka's handleConsumerGroupHeartbeat sets the code alone)
    assert (denied_topic.error_code, denied_topic.error_message) == (29, None)
    assert coord.calls == []
    assert _call(apis, 68, 1, _join_body(1, group_id="ok")).error_code == 0
    # describe: Describe on the group (implied by Read), and on every topic it holds
    coord.answers["describe"] = {"ok": _description("ok", {"orders": [0]}, {"payments": [1]})}
    answer = _call(apis, 69, 1, {"group_ids": ["no", "ok"],
                                 "include_authorized_operations": True})
    assert [(g.group_id, g.error_code, len(g.members)) for g in answer.groups] == [
        ("no", 30, 0), ("ok", 29, 0)]
    assert coord.calls[-1] == ("describe", ["ok"])


# ---- ConsumerGroupDescribe ------------------------------------------------------------------

def _description(group_id, assignment, target, error=Errors.NONE):
    member = SimpleNamespace(
        member_id="m-1", instance_id="i-1", rack_id=None, member_epoch=4, client_id="c",
        client_host="/10.0.0.7", subscribed_topic_names=["orders", "payments"],
        subscribed_topic_regex=None, assignment=assignment, target_assignment=target)
    return SimpleNamespace(error=error, group_id=group_id, state="Reconciling", group_epoch=5,
                           assignment_epoch=5, assignor_name="uniform",
                           members=[member] if error == Errors.NONE else [],
                           error_message=None if error == Errors.NONE else f"Group {group_id} "
                           "not found.")


@pytest.mark.parametrize("version", [0, 1])
def test_describe_answers_topic_ids_and_names(version):
    coord = RecordingCoordinator(describe={
        "g": _description("g", {"orders": [3, 1]}, {"orders": [1], "payments": [0]}),
        "gone": _description("gone", {}, {}, error=Errors.GROUP_ID_NOT_FOUND)})
    apis = _apis(coord)
    ids = apis.topic_ids.as_dict()
    answer = _call(apis, 69, version, {"group_ids": ["g", "gone"],
                                       "include_authorized_operations": False})
    g, gone = answer.groups
    assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name,
            g.authorized_operations) == (0, "Reconciling", 5, 5, "uniform", -2**31)
    (m,) = g.members
    assert (m.member_id, m.instance_id, m.member_epoch, m.client_id, m.client_host,
            m.subscribed_topic_names) == ("m-1", "i-1", 4, "c", "/10.0.0.7",
                                          ("orders", "payments"))
    assert [(t.topic_id, t.topic_name, t.partitions) for t in m.assignment.topic_partitions] \
        == [(ids["orders"], "orders", (1, 3))]
    assert [(t.topic_name, t.partitions) for t in m.target_assignment.topic_partitions] == [
        ("orders", (1,)), ("payments", (0,))]
    if version >= 1:
        assert m.member_type == 1
    assert (gone.error_code, gone.error_message, gone.members) == (
        69, "Group gone not found.", ())
    # asked for: the operations the client may do on the group (no ACLs: all five a
    # group takes in Kafka 4, Read, Delete, Describe, DescribeConfigs and AlterConfigs)
    answer = _call(apis, 69, version, {"group_ids": ["g"], "include_authorized_operations": True})
    assert answer.groups[0].authorized_operations == \
        (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)


def test_describe_of_many_group_ids_is_linear_in_their_number():
    # One frame of 100,000 ids (about 1 MB): the handler must not compare every id with
    # every other (it runs on the event loop, which every other client waits on).
    ids = [f"g{i}" for i in range(100_000)]
    gone = _description("x", {}, {}, error=Errors.GROUP_ID_NOT_FOUND)
    coord = RecordingCoordinator(describe=dict.fromkeys(ids, gone))
    apis = _apis(coord)
    frame = encode_request(69, 1, 5, {"group_ids": ids, "include_authorized_operations": False},
                           client_id="wire-test")
    request = decode_request(frame[4:], apis.versions)
    replies = []
    started = time.monotonic()
    apis.handle(Session("10.0.0.7"), request, replies.append)
    elapsed = time.monotonic() - started
    assert [g["group_id"] for g in replies[0]["groups"]] == ids
    assert elapsed < 10, f"{elapsed:.1f} s to answer {len(ids)} group ids"


# ---- OffsetFetch v9, ListGroups v5 ----------------------------------------------------------

def test_offset_fetch_v9_passes_the_member_id_and_epoch():
    coord = RecordingCoordinator()
    apis = _apis(coord)
    _call(apis, 9, 9, {"groups": [{"group_id": "g", "member_id": "m-1", "member_epoch": 4,
                                   "topics": None}], "require_stable": False})
    _call(apis, 9, 8, {"groups": [{"group_id": "g", "topics": None}], "require_stable": False})
    assert coord.calls == [("fetch", "g", None, {"require_stable": False, "member_id": "m-1",
                                                  "member_epoch": 4}),
                           ("fetch", "g", None, {"require_stable": False, "member_id": None,
                                                  "member_epoch": -1})]


def test_list_groups_v5_filters_by_type_and_answers_it():
    listing = SimpleNamespace(group_id="g", protocol_type="consumer", state="Stable",
                              group_type="consumer")
    coord = RecordingCoordinator(list=[listing])
    apis = _apis(coord)
    answer = _call(apis, 16, 5, {"states_filter": [], "types_filter": ["consumer"]})
    assert [(g.group_id, g.group_state, g.group_type) for g in answer.groups] == [
        ("g", "Stable", "consumer")]
    _call(apis, 16, 4, {"states_filter": ["Stable"]})
    assert coord.calls == [("list", None, ["consumer"]), ("list", ["Stable"], None)]


# ---- serve flags, request log ---------------------------------------------------------------

def test_serve_flags_map_to_the_coordinator_config_fields():
    from fastcoord.cli import _add_serve_parser, consumer_group_config
    import argparse
    parser = _add_serve_parser(argparse.ArgumentParser().add_subparsers())
    args = parser.parse_args([
        "--group-consumer-session-timeout-ms", "50000",
        "--group-consumer-min-session-timeout-ms", "40000",
        "--group-consumer-max-session-timeout-ms", "70000",
        "--group-consumer-heartbeat-interval-ms", "3000",
        "--group-consumer-min-heartbeat-interval-ms", "2000",
        "--group-consumer-max-heartbeat-interval-ms", "9000",
        "--group-consumer-max-size", "12", "--group-consumer-assignors", "range,uniform",
        "--group-consumer-migration-policy", "upgrade"])
    assert consumer_group_config(args) == {
        "group_consumer_session_timeout_ms": 50000,
        "group_consumer_min_session_timeout_ms": 40000,
        "group_consumer_max_session_timeout_ms": 70000,
        "group_consumer_heartbeat_interval_ms": 3000,
        "group_consumer_min_heartbeat_interval_ms": 2000,
        "group_consumer_max_heartbeat_interval_ms": 9000,
        "group_consumer_max_size": 12, "group_consumer_assignors": ("range", "uniform"),
        "group_consumer_migration_policy": "upgrade"}
    assert consumer_group_config(parser.parse_args([])) == {}    # the coordinator's defaults
    with pytest.raises(SystemExit):
        parser.parse_args(["--group-consumer-migration-policy", "sideways"])


def test_the_request_log_records_a_consumer_heartbeats_member_epoch(tmp_path):
    from fastcoord.server.requestlog import RequestLog
    log = RequestLog(tmp_path / "requests.jsonl")
    conn = SimpleNamespace(session=SimpleNamespace(peer_host="127.0.0.1"))
    frame = encode_request(68, 0, 3, _join_body(0, member_id="", member_epoch=0))
    request = decode_request(frame[4:])
    log.record(conn, request, {"error_code": 0, "member_id": "made-1", "member_epoch": 1}, 0.001)
    frame = encode_request(68, 1, 4, _join_body(1, member_epoch=7))
    log.record(conn, decode_request(frame[4:]), {"error_code": 22}, 0.001)
    log.close()
    lines = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [(r["api"], r["version"], r["group"], r["member"], r["generation"], r["error"])
            for r in lines] == [("ConsumerGroupHeartbeat", 0, "g", "made-1", 0, 0),
                                ("ConsumerGroupHeartbeat", 1, "g", "m-1", 7, 22)]


# ---- a real `fastcoord serve` ------------------------------------------------------------

_METADATA_ALL = {"topics": None, "allow_auto_topic_creation": False,
                 "include_topic_authorized_operations": False}


def _served_ids(server: ServerProc) -> dict:
    conn = RawConn(server.port)
    try:
        return {t.name: t.topic_id for t in conn.call(3, 12, _METADATA_ALL).topics}
    finally:
        conn.close()


def test_topic_ids_survive_a_restart_of_serve(tmp_path):
    """The ids are made at the first start and read back from --data-dir after; a topic
    declared later gets its own, one left out and declared again gets its old one."""
    server = ServerProc(tmp_path / "first.log", topics=["orders:6", "payments:2"])
    try:
        first = _served_ids(server)
    finally:
        assert server.stop() == 0
    assert set(first) == {"orders", "payments"} and None not in first.values()
    server = ServerProc(tmp_path / "second.log", topics=["orders:6", "audit:1"])
    try:
        second = _served_ids(server)
    finally:
        assert server.stop() == 0
    assert second["orders"] == first["orders"] and set(second) == {"orders", "audit"}
    assert second["audit"] not in first.values()
    server = ServerProc(tmp_path / "third.log", topics=["payments:2", "audit:1"])
    try:
        third = _served_ids(server)
    finally:
        assert server.stop() == 0
    assert third == {"payments": first["payments"], "audit": second["audit"]}


def test_a_member_joins_commits_is_described_listed_and_leaves_over_the_wire(tmp_path):
    """The whole consumer-protocol life of one member against the real coordinator."""
    server = ServerProc(tmp_path / "server.log", topics=["orders:6"])
    conn = RawConn(server.port)
    try:
        (orders_id,) = _served_ids(server).values()
        joined = conn.call(68, 1, _join_body(1, group_id="wire-cg", member_id="wm-1"))
        assert joined.error_code == 0 and joined.member_id == "wm-1", joined
        epoch = joined.member_epoch
        assert epoch >= 1 and joined.heartbeat_interval.total_seconds() > 0
        assigned = {(t.topic_id, p) for t in joined.assignment.topic_partitions
                    for p in t.partitions}
        assert assigned == {(orders_id, p) for p in range(6)}
        commit = {"group_id": "wire-cg", "generation_id_or_member_epoch": epoch,
                  "member_id": "wm-1", "group_instance_id": None, "topics": [
                      {"name": "orders", "partitions": [
                          {"partition_index": 2, "committed_offset": 42,
                           "committed_leader_epoch": -1, "committed_metadata": "m"}]}]}
        assert conn.call(8, 9, commit).topics[0].partitions[0].error_code == 0
        stale = dict(commit, generation_id_or_member_epoch=epoch + 5)
        assert conn.call(8, 9, stale).topics[0].partitions[0].error_code == \
            int(Errors.STALE_MEMBER_EPOCH)
        fetched = conn.call(9, 9, {"groups": [{
            "group_id": "wire-cg", "member_id": "wm-1", "member_epoch": epoch,
            "topics": [{"name": "orders", "partition_indexes": [2]}]}],
            "require_stable": False})
        part = fetched.groups[0].topics[0].partitions[0]
        assert (fetched.groups[0].error_code, part.committed_offset, part.metadata) == \
            (0, 42, "m")
        described = conn.call(69, 1, {"group_ids": ["wire-cg"],
                                      "include_authorized_operations": False}).groups[0]
        assert described.error_code == 0 and described.group_state == "Stable", described
        (member,) = described.members
        assert member.member_id == "wm-1" and member.member_type == 1
        assert {(t.topic_name, p) for t in member.assignment.topic_partitions
                for p in t.partitions} == {("orders", p) for p in range(6)}
        listed = conn.call(16, 5, {"states_filter": [], "types_filter": ["consumer"]})
        assert [(g.group_id, g.group_type) for g in listed.groups] == [("wire-cg", "consumer")]
        classic = conn.call(16, 5, {"states_filter": [], "types_filter": ["classic"]})
        assert classic.groups == ()
        left = conn.call(68, 1, {"group_id": "wire-cg", "member_id": "wm-1",
                                 "member_epoch": -1, "topic_partitions": None})
        assert (left.error_code, left.member_epoch) == (0, -1)
    finally:
        conn.close()
        assert server.stop() == 0
    assert "Traceback" not in server.log(), server.log()
    lines = [json.loads(line) for line in server.request_log_path.read_text().splitlines()]
    beats = [(r["member"], r["generation"]) for r in lines
             if r["api"] == "ConsumerGroupHeartbeat"]
    assert beats == [("wm-1", 0), ("wm-1", -1)]


def test_a_commit_at_an_older_epoch_over_the_wire(tmp_path):
    """KIP-1251 through OffsetCommit v9 against serve: after a second member joined, the
    first (moved on to the new epoch) still commits at its old epoch the partitions it
    kept, and not one it gave away."""
    server = ServerProc(tmp_path / "server.log", topics=["orders:6"])
    conn = RawConn(server.port)
    try:
        (orders_id,) = _served_ids(server).values()

        def beat(member_id, epoch, owned):
            body = _join_body(1, group_id="kip-1251", member_id=member_id, member_epoch=epoch,
                              topic_partitions=[{"topic_id": orders_id, "partitions": owned}]
                              if epoch else [])
            answer = conn.call(68, 1, body)
            assert answer.error_code == 0, answer
            held = None if answer.assignment is None else sorted(
                p for t in answer.assignment.topic_partitions for p in t.partitions)
            return answer.member_epoch, held

        first, held = beat("a", 0, [])
        assert held == list(range(6))
        assert beat("b", 0, [])[0] > first
        epoch, kept = beat("a", first, held)            # told what to keep
        assert epoch == first and 0 < len(kept) < 6
        epoch, _ = beat("a", first, kept)               # revoked: at the new epoch now
        assert epoch > first
        given = sorted(set(range(6)) - set(kept))

        def commit(at, partition):
            return conn.call(8, 9, {
                "group_id": "kip-1251", "generation_id_or_member_epoch": at, "member_id": "a",
                "group_instance_id": None, "topics": [{"name": "orders", "partitions": [
                    {"partition_index": partition, "committed_offset": 7,
                     "committed_leader_epoch": -1, "committed_metadata": None}]}]},
            ).topics[0].partitions[0].error_code

        assert commit(first, kept[0]) == 0
        assert commit(first, given[0]) == int(Errors.STALE_MEMBER_EPOCH)
        assert commit(epoch + 1, kept[0]) == int(Errors.STALE_MEMBER_EPOCH)
    finally:
        conn.close()
        assert server.stop() == 0
    assert "Traceback" not in server.log(), server.log()


@pytest.mark.parametrize("version", [0, 1])
def test_owned_partition_ids_out_of_range_own_nothing(version):
    """A hostile or broken client's owned partitions with negative ids, at the member's
    current epoch: they name no partition, so reconciliation passes over them and the
    request gets its one answer, no error (at the previous epoch they are not a subset
    of the assignment: tests/server/test_consumer_wire_audit.py)."""
    apis = _apis(GroupCoordinator(CoordinatorConfig()))
    apis.coord.set_topics(TOPICS)
    ids = apis.topic_ids.as_dict()
    joined = _call(apis, 68, version, _join_body(version))
    assert joined.error_code == 0
    answer = _call(apis, 68, version, _join_body(
        version, member_id=joined.member_id, member_epoch=joined.member_epoch,
        topic_partitions=[{"topic_id": ids["orders"], "partitions": [-1, 0, -2**31]}]))
    assert answer.error_code == 0 and answer.member_epoch == joined.member_epoch


# ---- Kafka 4's answers that depend on the group's type or the join's form -------------------

def _real_apis(impl) -> KafkaApis:
    coord = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(0), impl=impl)
    coord.set_topics(dict(TOPICS))
    return _apis(coord)


def test_describe_groups_answers_a_consumer_group_as_dead_as_kafka_4(impl):
    """Kafka 4 describes classic groups only (GroupMetadataManager.describeGroups looks a
    group up as a classic one): a consumer group is answered Dead with no protocol and
    no members, up to v5 with no error, as an unknown group is."""
    apis = _real_apis(impl)
    joined = _call(apis, 68, 1, _join_body(1, group_id="cg", member_id="m-1"))
    assert joined.error_code == 0 and joined.member_epoch >= 1, joined
    for version in (0, 3, 5):
        (group,) = _call(apis, 15, version, {"groups": ["cg"],
                                             "include_authorized_operations": False}).groups
        assert (group.error_code, group.group_id, group.group_state, group.protocol_type,
                group.protocol_data, group.members) == (0, "cg", "Dead", "", "", ()), group
    # a classic group is still described in full
    answers = []
    apis.coord.join_group("classic-g", "", "consumer", [("range", b"meta")],
                          session_timeout_ms=10_000, require_known_member_id=False,
                          callback=answers.append)
    apis.coord.advance_time(3_000)                # (the initial rebalance delay)
    assert answers[-1].error == Errors.NONE
    (group,) = _call(apis, 15, 5, {"groups": ["classic-g"],
                                   "include_authorized_operations": False}).groups
    assert group.group_state in ("PreparingRebalance", "CompletingRebalance", "Stable")
    assert [m.member_id for m in group.members] == [answers[-1].member_id]
    assert apis.coord.group_type("cg") == "consumer"
    assert apis.coord.group_type("classic-g") == "classic"
    assert apis.coord.group_type("nobody") is None


def _classic_member(apis, group_id: str) -> str:
    """A classic group `group_id` with one member, past its initial rebalance delay."""
    answers = []
    apis.coord.join_group(group_id, "", "consumer", [("range", b"meta")],
                          session_timeout_ms=10_000, require_known_member_id=False,
                          callback=answers.append)
    apis.coord.advance_time(3_000)
    assert answers[-1].error == Errors.NONE
    return answers[-1].member_id


def test_describe_groups_v6_says_why_a_group_is_not_described(impl):
    """DescribeGroups v6 (KIP-1043): a group Kafka 4 does not describe as a classic one
    is answered GROUP_ID_NOT_FOUND, Dead, with the message GroupMetadataManager sets
    (the group lookup's: not found, or not a classic group); v5 keeps no error. A
    described group and one refused by the ACLs carry no message."""
    apis = _real_apis(impl)
    joined = _call(apis, 68, 1, _join_body(1, group_id="cg", member_id="m-1"))
    assert joined.error_code == 0, joined
    member = _classic_member(apis, "classic-g")
    # the describing client may describe every group but "hidden"
    acls = [Acl("User:ANONYMOUS", ("Describe",), group=g) for g in ("cg", "classic-g", "nobody")]
    apis = _apis(apis.coord, security=Security(acls=acls))
    wanted = ["cg", "nobody", "classic-g", "hidden"]
    body = {"groups": wanted, "include_authorized_operations": False}
    # (Kafka answers the groups refused their Describe first)
    hidden, cg, nobody, classic = _call(apis, 15, 6, body).groups
    dead = ("Dead", "", "", ())
    assert (cg.error_code, cg.error_message) == (69, "Group cg is not a classic group.")
    assert (cg.group_state, cg.protocol_type, cg.protocol_data, cg.members) == dead
    assert (nobody.error_code, nobody.error_message) == (69, "Group nobody not found.")
    assert (nobody.group_state, nobody.protocol_type, nobody.protocol_data,
            nobody.members) == dead
    assert (classic.error_code, classic.error_message) == (0, None)
    assert classic.group_state != "Dead" and [m.member_id for m in classic.members] == [member]
    assert (hidden.error_code, hidden.error_message, hidden.group_state) == (30, None, "")
    # v5: the same groups, no error and (no field for) no message
    v5 = _call(apis, 15, 5, body).groups
    assert [(g.group_id, g.error_code, g.group_state) for g in v5] == [
        ("hidden", 30, ""), ("cg", 0, "Dead"), ("nobody", 0, "Dead"),
        ("classic-g", 0, classic.group_state)]
    assert SUPPORTED_VERSIONS[15] == (0, 6)


def test_describe_groups_answers_the_operations_asked_for(impl):
    """DescribeGroups v3+ with include_authorized_operations: Kafka answers the client's
    operations on every group it answers without an error (a Dead one before v6 too),
    and leaves the field at its default otherwise."""
    apis = _real_apis(impl)
    _classic_member(apis, "classic-g")
    acls = [Acl("User:ANONYMOUS", ("Read",), group="classic-g"),
            Acl("User:ANONYMOUS", ("Describe",), group="nobody")]
    apis = _apis(apis.coord, security=Security(acls=acls))
    read_describe, describe = (1 << 3) | (1 << 8), 1 << 8
    for version in (3, 5, 6):
        asked = _call(apis, 15, version, {"groups": ["classic-g", "nobody", "hidden"],
                                          "include_authorized_operations": True}).groups
        # (Kafka answers the groups refused their Describe first)
        assert [(g.error_code, g.authorized_operations) for g in asked] == [
            (30, -2**31), (0, read_describe),
            (69, -2**31) if version >= 6 else (0, describe)]
        not_asked = _call(apis, 15, version, {"groups": ["classic-g"],
                                              "include_authorized_operations": False}).groups
        assert not_asked[0].authorized_operations == -2**31


def test_consumer_group_describe_says_why_a_group_is_not_described(impl):
    """ConsumerGroupDescribe's GROUP_ID_NOT_FOUND carries the message Kafka's group
    lookup gives: not found, or (a classic group) not a consumer group."""
    apis = _real_apis(impl)
    _classic_member(apis, "classic-g")
    joined = _call(apis, 68, 1, _join_body(1, group_id="cg", member_id="m-1"))
    assert joined.error_code == 0, joined
    for version in (0, 1):
        nobody, classic, cg = _call(apis, 69, version, {
            "group_ids": ["nobody", "classic-g", "cg"],
            "include_authorized_operations": False}).groups
        assert (nobody.error_code, nobody.error_message) == (69, "Group nobody not found.")
        assert (classic.error_code, classic.error_message) == (
            69, "Group classic-g is not a consumer group.")
        assert (cg.error_code, cg.error_message, len(cg.members)) == (0, None, 1)


@pytest.mark.parametrize("entry", ["unknown id", "known id, no partitions"])
def test_a_join_carrying_any_topic_partitions_entry_is_refused(impl, entry):
    """Kafka refuses a join (epoch 0) whose TopicPartitions array is not empty, whatever
    its entries hold: a topic id this broker does not know (which a later heartbeat's
    resolution would drop) or a known one listing no partition."""
    apis = _real_apis(impl)
    ids = apis.topic_ids.as_dict()
    tp = ({"topic_id": uuid.UUID(int=99), "partitions": [0]} if entry == "unknown id"
          else {"topic_id": ids["orders"], "partitions": []})
    answer = _call(apis, 68, 1, _join_body(1, topic_partitions=[tp]))
    assert (answer.error_code, answer.error_message) == (
        int(Errors.INVALID_REQUEST), "TopicPartitions must be empty when (re-)joining.")
    assert answer.member_id is None and answer.assignment is None
    assert apis.coord.group_type("g") is None         # nothing was made


def test_a_regex_reaches_only_the_topics_its_sender_may_describe(impl):
    """With ACLs, Kafka resolves a subscribed regex against the topics the requester may
    describe (KAFKA-18813): a regex must not hand a member partitions of a topic it
    could not subscribe to by name."""
    acls = [Acl("User:ANONYMOUS", ("Read",), group="*"),
            Acl("User:ANONYMOUS", ("Read",), topic="orders")]
    coord = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(0), impl=impl)
    coord.set_topics({"orders": 6, "orders-eu": 3})
    apis = KafkaApis(coord, {"orders": 6, "orders-eu": 3}, host="127.0.0.1", port=9092,
                     security=Security(acls=acls))
    ids = apis.topic_ids.as_dict()
    joined = _call(apis, 68, 1, _join_body(1, subscribed_topic_names=None,
                                           subscribed_topic_regex="orders.*"))
    assert joined.error_code == 0, joined
    beat = _call(apis, 68, 1, _join_body(1, member_epoch=joined.member_epoch,
                                         subscribed_topic_names=None,
                                         subscribed_topic_regex=None, rack_id=None,
                                         rebalance_timeout=-1, server_assignor=None,
                                         topic_partitions=[]))
    assert beat.error_code == 0, beat
    assigned = {(t.topic_id, p) for t in beat.assignment.topic_partitions
                for p in t.partitions}
    assert assigned == {(ids["orders"], p) for p in range(6)}


@pytest.mark.parametrize("peer, kafka", [
    ("127.0.0.1", "/127.0.0.1"),
    ("10.0.0.7", "/10.0.0.7"),
    ("::1", "/0:0:0:0:0:0:0:1"),
    ("2001:db8::ff00:42:8329", "/2001:db8:0:0:0:ff00:42:8329"),
    ("fe80::1%eth0", "/fe80:0:0:0:0:0:0:1%eth0"),
    ("::ffff:192.0.2.1", "/192.0.2.1"),     # a dual-stack listener's IPv4 peer
    ("?", "?"),                               # not an address: kept
])
def test_a_members_client_host_is_the_peer_address_as_kafka_prints_it(peer, kafka):
    # GroupMetadataManager (classic joins and consumer heartbeats) stores
    # context.clientAddress().toString(): Java's InetAddress form, "/" then the
    # literal; the request log keeps the literal as the socket gave it
    session = Session(peer)
    assert (session.client_host, session.peer_host) == (kafka, peer)

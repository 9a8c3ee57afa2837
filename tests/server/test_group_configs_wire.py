"""Group configs on the wire: DescribeConfigs and IncrementalAlterConfigs of GROUP
resources, answered as Kafka 4 answers them (its ConfigHelper and its controller's
checks), their ACLs, the configs kept across a restart of `fastcoord serve`, and a real
AdminClient (confluent-kafka) setting and reading them.

The handler tests send real frames through the handlers in process (kio-encoded frame
-> decode_request -> handler -> encode_response -> decoded response) over the real
coordinator; the end-to-end ones run the server on 127.0.0.1."""
from __future__ import annotations

import pytest

from fastcoord import CoordinatorConfig, GroupCoordinator, ManualClock
from fastcoord.server.apis import KafkaApis, Session
from fastcoord.server.protocol import decode_request, decode_response, encode_request, \
    encode_response
from fastcoord.server.security import Acl, Security

from helpers.server import RawConn, ServerProc

SESSION = "consumer.session.timeout.ms"
INTERVAL = "consumer.heartbeat.interval.ms"
GROUP = 32
SET, DELETE, APPEND = 0, 1, 2


def _apis(security=None, keep=None, **config):
    coord = GroupCoordinator(CoordinatorConfig(**config), clock=ManualClock(0))
    return KafkaApis(coord, {"orders": 4}, host="127.0.0.1", port=9092, security=security,
                     keep_group_configs=keep)


def _call(apis, api_key, version, body, principal=None):
    frame = encode_request(api_key, version, 7, body, client_id="configs-test")
    request = decode_request(frame[4:], apis.versions)
    session = Session("10.0.0.9")
    session.principal = principal
    replies = []
    apis.handle(session, request, replies.append)
    assert len(replies) == 1
    data = encode_response(api_key, version, 7, replies[0])
    corr, response = decode_response(api_key, version, data[4:])
    assert corr == 7
    return response


def describe(apis, group, keys=None, version=4, principal=None, resource_type=GROUP):
    return _call(apis, 32, version, {
        "resources": [{"resource_type": resource_type, "resource_name": group,
                       "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": True}, principal).results[0]


def alter(apis, *resources, validate_only=False, version=1, principal=None):
    """IncrementalAlterConfigs of (group, [(name, op, value)]) resources: their answers."""
    body = {"resources": [
        {"resource_type": GROUP, "resource_name": g,
         "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops]}
        for g, ops in resources], "validate_only": validate_only}
    return _call(apis, 44, version, body, principal).responses


def values(result):
    return {c.name: (c.value, c.config_source) for c in result.configs}


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_shows_the_defaults_then_the_groups_own_values(version):
    apis = _apis(group_consumer_heartbeat_interval_ms=6_000)
    r = describe(apis, "g", version=version)
    assert (r.error_code, r.resource_type, r.resource_name) == (0, GROUP, "g")
    # the coordinator's value: Kafka's default (source DEFAULT_CONFIG), or set (STATIC)
    assert values(r) == {SESSION: ("45000", 5), INTERVAL: ("6000", 4)}
    (a,) = alter(apis, ("g", [(SESSION, SET, "50000")]))
    assert (a.error_code, a.error_message, a.resource_name) == (0, None, "g")
    r = describe(apis, "g", version=version)
    assert values(r) == {SESSION: ("50000", 8), INTERVAL: ("6000", 4)}
    session = next(c for c in r.configs if c.name == SESSION)
    assert not session.read_only and not session.is_sensitive
    if version >= 1:
        assert [(s.name, s.value, s.source) for s in session.synonyms] == [
            (SESSION, "50000", 8), ("group.consumer.session.timeout.ms", "45000", 5)]
    if version >= 3:
        assert session.config_type == 3 and session.documentation
    assert values(describe(apis, "g", keys=[INTERVAL, "nope"], version=version)) == {
        INTERVAL: ("6000", 4)}
    assert apis.coord.group_config("g") == {SESSION: 50_000}


def test_describe_refuses_what_kafka_refuses():
    security = Security(acls=[Acl("User:alice", ("Describe",), group="*")])
    apis = _apis(security=security)
    r = describe(apis, "g", principal="User:alice")
    assert (r.error_code, r.configs) == (30, ())           # GROUP_AUTHORIZATION_FAILED
    apis = _apis()
    assert describe(apis, "").error_code == 42              # INVALID_REQUEST
    r = describe(apis, "orders", resource_type=2)           # a topic: no configs kept here
    assert r.error_code == 42 and "groups only" in r.error_message


@pytest.mark.parametrize("ops, code, says", [
    ([(SESSION, SET, "30000")], 40, "group.consumer.min.session.timeout.ms"),
    ([(INTERVAL, SET, "x")], 40, "Not a number of type INT"),
    ([("share.session.timeout.ms", SET, "50000")], 40, "Unknown group config name"),
    ([(SESSION, APPEND, "1")], 40, "is not LIST"),
    ([(SESSION, 9, "50000")], 42, "unknown config operation"),
    ([(SESSION, SET, "50000"), (SESSION, DELETE, None)], 42, "duplicate config keys"),
])
def test_alter_refuses_what_kafka_refuses_and_changes_nothing(ops, code, says):
    apis = _apis()
    alter(apis, ("g", [(INTERVAL, SET, "7000")]))
    (a,) = alter(apis, ("g", ops))
    assert a.error_code == code and says in a.error_message, a
    assert apis.coord.group_config("g") == {INTERVAL: 7_000}


def test_alter_set_delete_validate_only_and_a_resource_named_twice():
    kept = []
    apis = _apis(keep=kept.append)
    (a,) = alter(apis, ("g", [(SESSION, SET, "50000")]), validate_only=True)
    assert a.error_code == 0 and apis.coord.group_config("g") == {} and kept == []
    alter(apis, ("g", [(SESSION, SET, "50000"), (INTERVAL, SET, "7000")]))
    assert kept[-1] == {"g": {SESSION: 50_000, INTERVAL: 7_000}}
    alter(apis, ("g", [(SESSION, DELETE, None)]))
    assert apis.coord.group_config("g") == {INTERVAL: 7_000}
    (a,) = alter(apis, ("g", [(INTERVAL, SET, None)]))      # SET of null: INVALID_REQUEST
    assert a.error_code == 42 and apis.coord.group_config("g") == {INTERVAL: 7_000}
    alter(apis, ("g", [(INTERVAL, DELETE, None)]))
    assert apis.coord.group_config("g") == {} and kept[-1] == {}
    # the same resource twice: both refused, neither applied; others go through
    answers = alter(apis, ("g", [(SESSION, SET, "50000")]), ("g", [(SESSION, SET, "55000")]),
                    ("h", [(INTERVAL, SET, "6000")]))
    assert [(a.resource_name, a.error_code) for a in answers] == [("g", 42), ("g", 42), ("h", 0)]
    assert apis.coord.group_configs() == {"h": {INTERVAL: 6_000}}


def test_a_write_that_fails_leaves_the_configs_as_they_were():
    def full(configs):
        raise OSError(28, "No space left on device")
    apis = _apis(keep=full)
    (a,) = alter(apis, ("g", [(SESSION, SET, "50000")]))
    assert a.error_code == -1 and "No space left" in a.error_message
    assert apis.coord.group_config("g") == {}


def test_alter_configs_rights_as_kafkas():
    security = Security(acls=[Acl("User:alice", ("AlterConfigs",), group="g"),
                              Acl("User:bob", ("DescribeConfigs",), group="*"),
                              Acl("User:eve", ("All",), group="*"),
                              Acl("User:eve", ("AlterConfigs",), group="g", deny=True)])
    apis = _apis(security=security)
    ok, other = alter(apis, ("g", [(SESSION, SET, "50000")]), ("h", [(SESSION, SET, "50000")]),
                      principal="User:alice")
    assert (ok.error_code, other.error_code) == (0, 30)
    assert describe(apis, "g", principal="User:alice").error_code == 0   # implied
    assert alter(apis, ("g", [(SESSION, DELETE, None)]), principal="User:bob")[0].error_code == 30
    assert describe(apis, "g", principal="User:bob").error_code == 0
    assert alter(apis, ("g", [(SESSION, DELETE, None)]), principal="User:eve")[0].error_code == 30
    assert apis.coord.group_config("g") == {SESSION: 50_000}


def _heartbeat_interval(conn, group, member, epoch=0):
    """The interval a ConsumerGroupHeartbeat is answered with: a join (epoch 0), or
    the steady heartbeat of a member at `epoch` (every optional field null: the form
    the member table and the wire fast path answer alone)."""
    body = {"group_id": group, "member_id": member, "member_epoch": epoch,
            "topic_partitions": None}
    if epoch == 0:
        body.update(rebalance_timeout=30_000, subscribed_topic_names=["orders"],
                    topic_partitions=[])
    r = conn.call(68, 1, body)
    assert r.error_code == 0, r
    return int(r.heartbeat_interval.total_seconds() * 1000)


def _epoch(conn, group, member):
    described = conn.call(69, 1, {"group_ids": [group], "include_authorized_operations": False})
    return next(m.member_epoch for m in described.groups[0].members if m.member_id == member)


def test_configs_are_kept_across_a_restart_and_reach_the_members(tmp_path):
    """Set over the wire, written before the answer, read back by the next `fastcoord
    serve` on the same data directory: a member joining after the restart is given the
    group's interval."""
    log = tmp_path / "server.log"
    server = ServerProc(log)
    try:
        conn = RawConn(server.port)
        assert _heartbeat_interval(conn, "g", "m-1") == 5_000
        epoch = _epoch(conn, "g", "m-1")
        for _ in range(2):                  # settled: answered from the member table
            assert _heartbeat_interval(conn, "g", "m-1", epoch) == 5_000
        answer = conn.call(44, 1, {"resources": [
            {"resource_type": GROUP, "resource_name": "g", "configs": [
                {"name": INTERVAL, "config_operation": SET, "value": "8000"}]}],
            "validate_only": False})
        assert answer.responses[0].error_code == 0
        assert _heartbeat_interval(conn, "g", "m-1", epoch) == 8_000     # its cached answer
        assert _heartbeat_interval(conn, "g", "m-2") == 8_000
        conn.close()
    finally:
        assert server.stop() == 0
    server = ServerProc(log)
    try:
        conn = RawConn(server.port)
        r = conn.call(32, 4, {"resources": [{"resource_type": GROUP, "resource_name": "g",
                                             "configuration_keys": None}],
                              "include_synonyms": False, "include_documentation": False})
        assert values(r.results[0]) == {SESSION: ("45000", 5), INTERVAL: ("8000", 8)}
        assert _heartbeat_interval(conn, "g", "m-3") == 8_000
        assert _heartbeat_interval(conn, "other", "m-1") == 5_000
        conn.close()
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log()


def test_an_admin_client_sets_and_reads_group_configs(tmp_path):
    """confluent-kafka's AdminClient (librdkafka), as an operator's tool does it."""
    admin_mod = pytest.importorskip("confluent_kafka.admin")
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, ResourceType)
    server = ServerProc(tmp_path / "server.log")
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        resource = ConfigResource(ResourceType.GROUP, "payments", incremental_configs=[
            ConfigEntry(SESSION, "55000", incremental_operation=AlterConfigOpType.SET)])
        for future in admin.incremental_alter_configs([resource]).values():
            assert future.result(timeout=20) is None
        got = admin.describe_configs([ConfigResource(ResourceType.GROUP, "payments")])
        (entries,) = [f.result(timeout=20) for f in got.values()]
        assert entries[SESSION].value == "55000"
        assert entries[INTERVAL].value == "5000"
        bad = ConfigResource(ResourceType.GROUP, "payments", incremental_configs=[
            ConfigEntry(SESSION, "1000", incremental_operation=AlterConfigOpType.SET)])
        (future,) = admin.incremental_alter_configs([bad]).values()
        with pytest.raises(admin_mod.KafkaException) as raised:
            future.result(timeout=20)
        assert "min.session.timeout" in str(raised.value)
    finally:
        assert server.stop() == 0

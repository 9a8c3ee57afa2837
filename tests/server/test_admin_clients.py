"""The admin operations an operator runs, through real admin clients against `fastcoord
serve`: confluent-kafka's `AdminClient` (librdkafka) and kafka-python's
`KafkaAdminClient`, on classic groups (kafka-python and confluent-kafka members with the
classic protocol) and on consumer groups (KIP-848: confluent-kafka members with
`group.protocol=consumer`), each member in its own process, on 127.0.0.1.

What is asserted is Apache Kafka 4's answer; each assertion names the Kafka method it
follows. One server serves the whole module; every test uses group ids of its own (a
prefix), so what one test leaves behind does not enter another's assertions. Every wait
is bounded.

Not covered, because the clients have no such call: confluent-kafka 2.16's Python
AdminClient has no delete-offsets operation (librdkafka's DeleteConsumerGroupOffsets is
not exposed); kafka-python's `delete_group_offsets` (OffsetDelete) is covered instead.
"""
from __future__ import annotations

import pytest

from fastcoord import Errors
from helpers.server import ClientProc, RawConn, ServerProc, assert_covered, wait_until

pytestmark = pytest.mark.clients

TOPIC = "orders"
EXTRA = "extra"             # a second topic nobody subscribes to
PARTITIONS = [(TOPIC, p) for p in range(4)]
BOUND = 20.0                # seconds: generous for a loaded 2-core machine
REQUEST_S = 10              # the admin clients' own request timeout
RESULT_S = 15               # and how long a test waits for a result
# Short consumer-protocol timeouts (as in test_consumer_clients.py)
SERVER_FLAGS = ["--group-consumer-min-session-timeout-ms", "2000",
                "--group-consumer-session-timeout-ms", "6000",
                "--group-consumer-min-heartbeat-interval-ms", "100",
                "--group-consumer-heartbeat-interval-ms", "300"]

UNKNOWN_MEMBER_ID = Errors.UNKNOWN_MEMBER_ID
GROUP_ID_NOT_FOUND = Errors.GROUP_ID_NOT_FOUND
# AuthHelper.authorizedOperations without an authorizer: every operation
# AclEntry.supportedOperations(GROUP) lists (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS,
# ALTER_CONFIGS), as a bit field of their codes: 3, 8, 6, 10, 11
GROUP_OPERATION_NAMES = {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
GROUP_OPERATION_BITS = (1 << 3) | (1 << 8) | (1 << 6) | (1 << 10) | (1 << 11)
# the default of DescribeGroups' and ConsumerGroupDescribe's AuthorizedOperations field
NO_OPERATIONS = -2147483648


# ---- fixtures -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("admin-clients")
    srv = ServerProc(run_dir / "server.log", *SERVER_FLAGS, topics=[f"{TOPIC}:4", f"{EXTRA}:2"])
    srv.run_dir = run_dir
    try:
        yield srv
    finally:
        code = srv.stop()
        assert code == 0, f"server exit status {code}:\n{srv.log()[-3000:]}"
        assert "Traceback" not in srv.log(), srv.log()[-3000:]


@pytest.fixture(scope="module")
def admin(server):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": server.bootstrap, "broker.address.family": "v4",
                        "socket.timeout.ms": REQUEST_S * 1000})


@pytest.fixture(scope="module")
def kp_admin(server):
    from kafka import KafkaAdminClient
    client = KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id="kp-admin",
                              request_timeout_ms=REQUEST_S * 1000)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def member(server, tmp_path):
    """`member(kind, group, name)`: one consumer in its own process, `kind` one of
    "kafka-python" and "classic" (confluent-kafka, classic protocol), which form classic
    groups, or "consumer" (confluent-kafka, group.protocol=consumer). Closed (leaving
    its group) at the end of the test, if still running."""
    started = []

    def start(kind: str, group: str, name: str, **options) -> ClientProc:
        lib = "kafka-python" if kind == "kafka-python" else "confluent"
        if kind == "consumer":
            options["group_protocol"] = "consumer"
        client = ClientProc(lib, server.bootstrap, group, TOPIC, name, tmp_path, **options)
        started.append(client)
        return client

    yield start
    for client in started:
        client.close(timeout=5)
        client.cleanup()


# ---- helpers (confluent-kafka) --------------------------------------------------------------

def _one_member_holds_all(client) -> None:
    assert_covered([client], PARTITIONS, BOUND)


def _listed(admin, prefix: str, **filters) -> dict:
    """{group id: (state, type, is simple)} of the listed groups whose id starts with
    `prefix`; `filters`: list_consumer_groups' `states` and `types`."""
    result = admin.list_consumer_groups(request_timeout=REQUEST_S, **filters).result(RESULT_S)
    assert result.errors == [], result.errors
    return {g.group_id: (g.state, g.type, g.is_simple_consumer_group) for g in result.valid
            if g.group_id.startswith(prefix)}


def _describe(admin, group: str, ops: bool = False):
    futures = admin.describe_consumer_groups([group], include_authorized_operations=ops,
                                             request_timeout=REQUEST_S)
    return futures[group].result(RESULT_S)


def _state(admin, group: str):
    return _describe(admin, group).state


def _settled(admin, *groups: str, state=None) -> None:
    """Wait (bounded) until each group is in `state` (default Stable)."""
    from confluent_kafka import ConsumerGroupState
    state = ConsumerGroupState.STABLE if state is None else state
    for group in groups:
        assert wait_until(lambda: _state(admin, group) == state, BOUND, interval=0.1), \
            f"{group}: {_state(admin, group)}, not {state}"


def _stable(admin, *groups: str) -> None:
    _settled(admin, *groups)


def _empty(admin, *groups: str) -> None:
    """A member closed: wait until its group has seen it leave."""
    from confluent_kafka import ConsumerGroupState
    _settled(admin, *groups, state=ConsumerGroupState.EMPTY)


def _eventually(check, timeout: float = BOUND) -> None:
    """Run `check` until it passes, for at most `timeout` seconds: a kafka-python member
    may start a rebalance of its own right after joining (see helpers/server.py), and a
    Stable group is briefly rebalancing then. The last failure is raised."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def _offsets(admin, group: str, partitions=None, require_stable: bool = False) -> dict:
    """{(topic, partition): (offset, error code or None)} as list_consumer_group_offsets
    reports them."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    tps = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)],
                                                require_stable=require_stable,
                                                request_timeout=REQUEST_S)
    got = futures[group].result(RESULT_S)
    return {(tp.topic, tp.partition): (tp.offset, tp.error.code() if tp.error else None)
            for tp in got.topic_partitions}


def _alter(admin, group: str, offsets: dict) -> dict:
    """{(topic, partition): error code or None} of alter_consumer_group_offsets."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o)
                                                   for (t, p), o in offsets.items()])
    futures = admin.alter_consumer_group_offsets([request], request_timeout=REQUEST_S)
    got = futures[group].result(RESULT_S)
    return {(tp.topic, tp.partition): tp.error.code() if tp.error else None
            for tp in got.topic_partitions}


def _delete(admin, group: str):
    """None if delete_consumer_groups deleted `group`, else the error code it raised."""
    from confluent_kafka import KafkaException
    future = admin.delete_consumer_groups([group], request_timeout=REQUEST_S)[group]
    try:
        future.result(RESULT_S)
    except KafkaException as exc:
        return exc.args[0].code()
    return None


def _op_names(description) -> set:
    return {op.name for op in description.authorized_operations}


def _tps(assignment) -> set:
    return {(tp.topic, tp.partition) for tp in assignment.topic_partitions}


# ---- confluent-kafka AdminClient ----------------------------------------------------------

def test_list_consumer_groups_filters_by_state_by_type_and_by_both(server, admin, member):
    from confluent_kafka import ConsumerGroupState as S, ConsumerGroupType as T
    classic = member("kafka-python", "ls-classic", "ls-kp")
    consumer = member("consumer", "ls-consumer", "ls-cg")
    left = member("consumer", "ls-left", "ls-left")
    for client in (classic, consumer, left):
        _one_member_holds_all(client)
    left.close()        # its consumer group stays, Empty
    _empty(admin, "ls-left")
    # an admin commit to a group nobody joined: OffsetMetadataManager.validateOffsetCommit
    # creates a simple classic group (no protocol type) for a generation of -1
    assert _alter(admin, "ls-simple", {(TOPIC, 0): 1}) == {(TOPIC, 0): None}
    _stable(admin, "ls-classic", "ls-consumer")

    # ClassicGroup/ConsumerGroup.asListedGroup: the state, the type and the protocol type
    # ("" for a simple group, which the client reports as a simple consumer group)
    everything = {"ls-classic": (S.STABLE, T.CLASSIC, False),
                  "ls-consumer": (S.STABLE, T.CONSUMER, False),
                  "ls-simple": (S.EMPTY, T.CLASSIC, True),
                  "ls-left": (S.EMPTY, T.CONSUMER, False)}

    def only(*groups):
        return {g: everything[g] for g in groups}

    def check():
        assert _listed(admin, "ls-") == everything
        # GroupMetadataManager.listGroups: a group is listed when its state is in the
        # states filter (if any) and its type is in the types filter (if any)
        assert _listed(admin, "ls-", states={S.EMPTY}) == only("ls-simple", "ls-left")
        assert _listed(admin, "ls-", states={S.STABLE}) == only("ls-classic", "ls-consumer")
        assert _listed(admin, "ls-", types={T.CLASSIC}) == only("ls-classic", "ls-simple")
        assert _listed(admin, "ls-", types={T.CONSUMER}) == only("ls-consumer", "ls-left")
        assert _listed(admin, "ls-", states={S.EMPTY}, types={T.CONSUMER}) == only("ls-left")
        assert _listed(admin, "ls-", states={S.STABLE}, types={T.CLASSIC}) == \
            only("ls-classic")
        assert _listed(admin, "ls-", states={S.STABLE, S.EMPTY},
                       types={T.CLASSIC, T.CONSUMER}) == everything
        assert _listed(admin, "ls-", states={S.PREPARING_REBALANCING}) == {}

    _eventually(check)

    def raw_listed(states, types):
        conn = RawConn(server.port)
        try:
            answer = conn.call(16, 5, {"states_filter": states, "types_filter": types})
        finally:
            conn.close()
        assert answer.error_code == 0
        return {g.group_id: (g.group_state, g.group_type, g.protocol_type)
                for g in answer.groups if g.group_id.startswith("ls-")}

    # The same on the wire, with filters the clients would not send.
    # GroupMetadataManager.listGroups lower-cases and trims each state of the filter;
    # Group.GroupType.parse reads a type case-insensitively, and a name it does not know
    # is the type UNKNOWN, which no group has. The names listed: ConsumerGroupState and
    # ClassicGroupState ("Empty"), Group.GroupType ("consumer", "classic").
    assert raw_listed([" EMPTY "], ["CONSUMER"]) == {"ls-left": ("Empty", "consumer", "consumer")}
    assert raw_listed(["empty"], ["Classic"]) == {"ls-simple": ("Empty", "classic", "")}
    assert raw_listed(["empty"], ["classic "]) == {}
    assert raw_listed(["Empty"], ["bogus"]) == {}


def test_describe_consumer_group_with_and_without_authorized_operations(server, admin, member):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType
    a = member("consumer", "dc-group", "dc-a")
    _one_member_holds_all(a)
    b = member("consumer", "dc-group", "dc-b", instance_id="dc-static")
    assert_covered([a, b], PARTITIONS, BOUND, balanced=True)
    _stable(admin, "dc-group")

    plain = _describe(admin, "dc-group")
    # ConsumerGroup.asDescribedGroup: type consumer, the state, the preferred server
    # assignor or else the default one, the first of group.consumer.assignors (Kafka 4:
    # uniform, range)
    assert plain.type == ConsumerGroupType.CONSUMER
    assert plain.state == ConsumerGroupState.STABLE
    assert plain.partition_assignor == "uniform"
    assert not plain.is_simple_consumer_group
    assert plain.coordinator.port == server.port
    # KafkaApis.handleConsumerGroupDescribe: authorized operations only when asked for
    assert plain.authorized_operations is None
    # ConsumerGroupMember.asConsumerGroupDescribeMember: client id, instance id, the
    # current assignment and the target one (the same once the member is reconciled)
    members = {m.client_id: m for m in plain.members}
    assert set(members) == {"dc-a", "dc-b"}
    assert members["dc-a"].group_instance_id is None
    assert members["dc-b"].group_instance_id == "dc-static"
    for client in (a, b):
        described = members[client.name]
        assert _tps(described.assignment) == set(client.assignment)
        assert _tps(described.target_assignment) == set(client.assignment)
    assert members["dc-a"].member_id != members["dc-b"].member_id

    with_ops = _describe(admin, "dc-group", ops=True)
    # KafkaApis.handleConsumerGroupDescribe + AuthHelper.authorizedOperations: no
    # authorizer, so every operation AclEntry.supportedOperations(GROUP) lists
    assert _op_names(with_ops) == GROUP_OPERATION_NAMES
    assert {m.client_id for m in with_ops.members} == {"dc-a", "dc-b"}


def test_describe_classic_group_through_the_consumer_group_api(server, admin, member):
    """librdkafka asks ConsumerGroupDescribe first; Kafka answers GROUP_ID_NOT_FOUND for a
    classic group; the client then describes it with DescribeGroups."""
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType
    kp = member("kafka-python", "dk-group", "dk-kp", instance_id="dk-static")
    _one_member_holds_all(kp)
    rd = member("classic", "dk-group", "dk-rd")
    assert_covered([kp, rd], PARTITIONS, BOUND)
    _stable(admin, "dk-group")

    # GroupMetadataManager.consumerGroupDescribe -> consumerGroup(): a classic group is
    # GROUP_ID_NOT_FOUND, "Group <id> is not a consumer group."
    conn = RawConn(server.port)
    try:
        (answer,) = conn.call(69, 0, {"group_ids": ["dk-group"],
                                      "include_authorized_operations": True}).groups
    finally:
        conn.close()
    assert answer.error_code == GROUP_ID_NOT_FOUND
    assert answer.error_message == "Group dk-group is not a consumer group."
    # KafkaApis.handleConsumerGroupDescribe: no operations for a group in error
    assert answer.authorized_operations == NO_OPERATIONS

    def check():
        described = _describe(admin, "dk-group", ops=True)
        # GroupMetadataManager.describeGroups, a Stable classic group: its state, protocol
        # type and protocol (the one every member supports that most members vote for:
        # ClassicGroup.selectProtocol; both clients list range first), its members
        assert described.type == ConsumerGroupType.CLASSIC
        assert described.state == ConsumerGroupState.STABLE
        assert described.partition_assignor == "range"
        assert not described.is_simple_consumer_group
        members = {m.client_id: m for m in described.members}
        assert set(members) == {"dk-kp", "dk-rd"}
        # ClassicGroupMember.describe: the instance id and the assignment the leader gave
        assert members["dk-kp"].group_instance_id == "dk-static"
        assert members["dk-rd"].group_instance_id is None
        assert _tps(members["dk-kp"].assignment) == set(kp.assignment)
        assert _tps(members["dk-rd"].assignment) == set(rd.assignment)
        # KafkaApis.handleDescribeGroupsRequest + AuthHelper.authorizedOperations
        assert _op_names(described) == GROUP_OPERATION_NAMES

    _eventually(check)


def test_describe_unknown_group(server, admin, kp_admin):
    from confluent_kafka import ConsumerGroupState
    conn = RawConn(server.port)
    try:
        (cgd,) = conn.call(69, 0, {"group_ids": ["du-nobody"],
                                   "include_authorized_operations": True}).groups
        (v5,) = conn.call(15, 5, {"groups": ["du-nobody"],
                                  "include_authorized_operations": True}).groups
        (v6,) = conn.call(15, 6, {"groups": ["du-nobody"],
                                  "include_authorized_operations": True}).groups
    finally:
        conn.close()
    # GroupMetadataManager.consumerGroupDescribe -> group(): "Group <id> not found."
    assert (cgd.error_code, cgd.error_message) == (GROUP_ID_NOT_FOUND, "Group du-nobody not found.")
    assert cgd.authorized_operations == NO_OPERATIONS   # KafkaApis: none for an error
    # GroupMetadataManager.describeGroups: before v6, state Dead and no error (so
    # KafkaApis.handleDescribeGroupsRequest adds the operations); from v6,
    # GROUP_ID_NOT_FOUND with the message, state Dead, and no operations
    assert (v5.error_code, v5.group_state, v5.members) == (0, "Dead", ())
    assert v5.authorized_operations == GROUP_OPERATION_BITS
    assert (v6.error_code, v6.group_state) == (GROUP_ID_NOT_FOUND, "Dead")
    assert v6.error_message == "Group du-nobody not found."
    assert v6.authorized_operations == NO_OPERATIONS

    # librdkafka falls back from ConsumerGroupDescribe to DescribeGroups (v5 at most)
    # and so reports a Dead group with no members, no error
    described = _describe(admin, "du-nobody", ops=True)
    assert described.state == ConsumerGroupState.DEAD
    assert described.members == []
    assert _op_names(described) == GROUP_OPERATION_NAMES
    # kafka-python asks DescribeGroups v6: the v6 answer above
    got = kp_admin.describe_groups(["du-nobody"])["du-nobody"]
    assert got["group_state"] == "Dead" and got["members"] == []
    assert "GroupIdNotFoundError" in got["error"] and "du-nobody not found" in got["error"]


def test_list_offsets_with_and_without_require_stable_and_for_given_partitions(admin, member):
    from confluent_kafka import OFFSET_INVALID
    classic = member("kafka-python", "lo-classic", "lo-kp")
    consumer = member("consumer", "lo-consumer", "lo-cg")
    _one_member_holds_all(classic)
    _one_member_holds_all(consumer)
    classic.commit({(TOPIC, 0): 5, (TOPIC, 2): 7})
    consumer.commit({(TOPIC, 1): 6})
    committed = {"lo-classic": {(TOPIC, 0): 5, (TOPIC, 2): 7}, "lo-consumer": {(TOPIC, 1): 6}}
    for group, offsets in committed.items():
        # OffsetMetadataManager.fetchAllOffsets: every committed offset of the group;
        # require_stable changes nothing without pending transactional offsets
        expected = {tp: (o, None) for tp, o in offsets.items()}
        assert _offsets(admin, group) == expected
        assert _offsets(admin, group, require_stable=True) == expected
        # OffsetMetadataManager.fetchOffsets: the partitions asked for; -1
        # (INVALID_OFFSET) for one never committed, which librdkafka reports as
        # OFFSET_INVALID, with no error
        asked = [(TOPIC, 0), (TOPIC, 1), (TOPIC, 3), (EXTRA, 1)]
        want = {tp: (offsets.get(tp, OFFSET_INVALID), None) for tp in asked}
        assert _offsets(admin, group, asked) == want
        assert _offsets(admin, group, asked, require_stable=True) == want
    # an unknown group: validateOffsetFetch's GROUP_ID_NOT_FOUND is swallowed; no
    # offsets at all (fetchAllOffsets), -1 for each partition asked (fetchOffsets)
    assert _offsets(admin, "lo-nobody") == {}
    assert _offsets(admin, "lo-nobody", [(TOPIC, 0), (EXTRA, 1)]) == {
        (TOPIC, 0): (OFFSET_INVALID, None), (EXTRA, 1): (OFFSET_INVALID, None)}


def test_alter_offsets_of_empty_groups(admin, member):
    from confluent_kafka import KafkaError
    classic = member("classic", "ae-classic", "ae-rd")
    consumer = member("consumer", "ae-consumer", "ae-cg")
    _one_member_holds_all(classic)
    _one_member_holds_all(consumer)
    classic.close()
    consumer.close()
    _empty(admin, "ae-classic", "ae-consumer")
    # ClassicGroup.validateOffsetCommit: generation -1 on an Empty group is accepted;
    # ConsumerGroup.validateOffsetCommit: member epoch -1 on a group without members too;
    # OffsetMetadataManager.validateOffsetCommit: a group that does not exist is created
    # as a simple group
    for group in ("ae-classic", "ae-consumer", "ae-simple"):
        assert _alter(admin, group, {(TOPIC, 0): 10, (TOPIC, 3): 13, (EXTRA, 1): 21}) == {
            (TOPIC, 0): None, (TOPIC, 3): None, (EXTRA, 1): None}, group
        assert _offsets(admin, group) == {(TOPIC, 0): (10, None), (TOPIC, 3): (13, None),
                                          (EXTRA, 1): (21, None)}, group
    # ... and an altered offset replaces the previous one
    assert _alter(admin, "ae-consumer", {(TOPIC, 0): 99}) == {(TOPIC, 0): None}
    assert _offsets(admin, "ae-consumer", [(TOPIC, 0)]) == {(TOPIC, 0): (99, None)}
    # KafkaApis.handleOffsetCommitRequest: UNKNOWN_TOPIC_OR_PARTITION for a topic the
    # metadata does not have and for a partition it does not have; the rest is committed
    assert _alter(admin, "ae-simple", {("ae-no-such-topic", 0): 1, (TOPIC, 9): 2,
                                       (TOPIC, 1): 11}) == {
        ("ae-no-such-topic", 0): KafkaError.UNKNOWN_TOPIC_OR_PART,
        (TOPIC, 9): KafkaError.UNKNOWN_TOPIC_OR_PART, (TOPIC, 1): None}
    assert _offsets(admin, "ae-simple") == {(TOPIC, 0): (10, None), (TOPIC, 1): (11, None),
                                            (TOPIC, 3): (13, None), (EXTRA, 1): (21, None)}


def test_alter_offsets_of_groups_with_members(admin, member):
    kp = member("kafka-python", "am-kp", "am-kp")
    rd = member("classic", "am-rd", "am-rd")
    cg = member("consumer", "am-cg", "am-cg")
    for client in (kp, rd, cg):
        _one_member_holds_all(client)
        client.commit({(TOPIC, 0): 5})
    # The admin client commits with generation/member epoch -1 and no member id.
    # ClassicGroup.validateOffsetCommit: not Empty, no member id -> UNKNOWN_MEMBER_ID.
    # ConsumerGroup.validateOffsetCommit: members present, so the member "" is looked up
    # (getOrMaybeCreateMember) -> UNKNOWN_MEMBER_ID. The error applies to every partition
    # (GroupCoordinatorService.commitOffsets answers the request with it).
    for group in ("am-kp", "am-rd", "am-cg"):
        assert _alter(admin, group, {(TOPIC, 0): 50, (EXTRA, 0): 51}) == {
            (TOPIC, 0): UNKNOWN_MEMBER_ID, (EXTRA, 0): UNKNOWN_MEMBER_ID}, group
        # nothing was written
        assert _offsets(admin, group) == {(TOPIC, 0): (5, None)}, group


def test_delete_consumer_groups(admin, member):
    from confluent_kafka import ConsumerGroupState
    classic_busy = member("kafka-python", "dg-classic-busy", "dg-kp")
    consumer_busy = member("consumer", "dg-consumer-busy", "dg-cg")
    classic_left = member("classic", "dg-classic-empty", "dg-rd-left")
    consumer_left = member("consumer", "dg-consumer-empty", "dg-cg-left")
    for client in (classic_busy, consumer_busy, classic_left, consumer_left):
        _one_member_holds_all(client)
        client.commit({(TOPIC, 2): 4})
    classic_left.close()
    consumer_left.close()
    _empty(admin, "dg-classic-empty", "dg-consumer-empty")
    assert _alter(admin, "dg-simple", {(TOPIC, 2): 4}) == {(TOPIC, 2): None}

    # ClassicGroup.validateDeleteGroup: NON_EMPTY_GROUP when Stable (or rebalancing);
    # ConsumerGroup.validateDeleteGroup: NON_EMPTY_GROUP unless Empty
    assert _delete(admin, "dg-classic-busy") == 68           # NON_EMPTY_GROUP
    assert _delete(admin, "dg-consumer-busy") == 68
    # GroupMetadataManager.validateDeleteGroup -> group(): GROUP_ID_NOT_FOUND
    assert _delete(admin, "dg-nobody") == GROUP_ID_NOT_FOUND
    # GroupCoordinatorShard.deleteGroups: an Empty group is deleted with all its offsets
    for group in ("dg-classic-empty", "dg-consumer-empty", "dg-simple"):
        assert _delete(admin, group) is None, group
        assert _offsets(admin, group) == {}, group
        assert _state(admin, group) == ConsumerGroupState.DEAD, group
        # ... and it is gone: deleting it again finds no group
        assert _delete(admin, group) == GROUP_ID_NOT_FOUND, group
    assert set(_listed(admin, "dg-")) == {"dg-classic-busy", "dg-consumer-busy"}
    # the groups refused keep their offsets
    assert _offsets(admin, "dg-classic-busy") == {(TOPIC, 2): (4, None)}
    assert _offsets(admin, "dg-consumer-busy") == {(TOPIC, 2): (4, None)}


def test_member_host_is_the_client_address_as_kafka_prints_it(admin, kp_admin, member):
    """Kafka records a member's host as `context.clientAddress().toString()`
    (GroupMetadataManager: the ClassicGroupMember made on JoinGroup, and the
    ConsumerGroupMember on ConsumerGroupHeartbeat), the string of a java.net.InetAddress
    with no host name: "/127.0.0.1"."""
    kp = member("kafka-python", "mh-classic", "mh-kp")
    cg = member("consumer", "mh-consumer", "mh-cg")
    _one_member_holds_all(kp)
    _one_member_holds_all(cg)
    _stable(admin, "mh-classic", "mh-consumer")
    (classic_member,) = kp_admin.describe_groups(["mh-classic"])["mh-classic"]["members"]
    (consumer_member,) = _describe(admin, "mh-consumer").members
    assert (classic_member["client_host"], consumer_member.host) == ("/127.0.0.1", "/127.0.0.1")


# ---- kafka-python KafkaAdminClient --------------------------------------------------------

def test_kafka_python_lists_and_describes_groups(admin, kp_admin, member):
    a = member("kafka-python", "kl-classic", "kl-a")
    _one_member_holds_all(a)
    b = member("classic", "kl-classic", "kl-b")
    assert_covered([a, b], PARTITIONS, BOUND)
    c = member("consumer", "kl-consumer", "kl-c")
    _one_member_holds_all(c)
    _stable(admin, "kl-classic", "kl-consumer")
    from kafka import TopicPartition
    from kafka.errors import NoError
    from kafka.structs import OffsetAndMetadata
    assert kp_admin.alter_group_offsets("kl-simple", {
        TopicPartition(TOPIC, 1): OffsetAndMetadata(3, "", -1)}) == {
        TopicPartition(TOPIC, 1): NoError}

    def listed(**filters):
        return {g["group_id"]: (g["group_state"], g["group_type"], g["protocol_type"])
                for g in kp_admin.list_groups(**filters) if g["group_id"].startswith("kl-")}

    def check_classic():
        # ClassicGroup/ConsumerGroup.asListedGroup; GroupMetadataManager.listGroups filters
        everything = {"kl-classic": ("Stable", "classic", "consumer"),
                      "kl-consumer": ("Stable", "consumer", "consumer"),
                      "kl-simple": ("Empty", "classic", "")}
        assert listed() == everything
        assert listed(states_filter=["Empty"]) == {"kl-simple": everything["kl-simple"]}
        assert listed(types_filter=["consumer"]) == {"kl-consumer": everything["kl-consumer"]}
        assert listed(states_filter=["Stable"], types_filter=["classic"]) == {
            "kl-classic": everything["kl-classic"]}

        group = kp_admin.describe_groups(["kl-classic"])["kl-classic"]
        # GroupMetadataManager.describeGroups, a Stable classic group: state, protocol type,
        # protocol, members with their subscription and assignment
        assert (group["error"], group["group_state"], group["protocol_type"],
                group["protocol_data"]) == (None, "Stable", "consumer", "range")
        by_client = {m["client_id"]: m for m in group["members"]}
        assert set(by_client) == {"kl-a", "kl-b"}
        for client in (a, b):
            m = by_client[client.name]
            assert m["member_metadata"]["topics"] == [TOPIC]
            got = {(t["topic"], p) for t in m["member_assignment"]["assigned_partitions"]
                   for p in t["partitions"]}
            assert got == set(client.assignment)
        # KafkaApis.handleDescribeGroupsRequest + AuthHelper.authorizedOperations
        # (kafka-python always asks for them)
        assert set(group["authorized_operations"]) == GROUP_OPERATION_NAMES

    _eventually(check_classic)
    described = kp_admin.describe_groups(["kl-simple", "kl-consumer", "kl-nobody"])
    # an Empty simple group: no protocol, no members
    simple = described["kl-simple"]
    assert (simple["error"], simple["group_state"], simple["protocol_type"],
            simple["protocol_data"], simple["members"]) == (None, "Empty", "", "", [])
    # GroupMetadataManager.describeGroups (v6): a consumer group is not a classic group,
    # and an unknown group is not found: GROUP_ID_NOT_FOUND with the message, state Dead,
    # no operations (KafkaApis adds them only without an error)
    consumer = described["kl-consumer"]
    assert consumer["group_state"] == "Dead" and consumer["members"] == []
    assert "GroupIdNotFoundError" in consumer["error"]
    assert "Group kl-consumer is not a classic group." in consumer["error"]
    assert consumer["authorized_operations"] is None
    nobody = described["kl-nobody"]
    assert nobody["group_state"] == "Dead"
    assert "GroupIdNotFoundError" in nobody["error"]
    assert "Group kl-nobody not found." in nobody["error"]


def test_kafka_python_lists_alters_and_deletes_offsets(admin, kp_admin, member):
    from kafka import TopicPartition as TP
    from kafka.errors import (
        GroupIdNotFoundError, GroupSubscribedToTopicError, NoError, UnknownMemberIdError,
    )
    from kafka.structs import OffsetAndMetadata
    classic = member("kafka-python", "ko-classic", "ko-kp")
    consumer = member("consumer", "ko-consumer", "ko-cg")
    _one_member_holds_all(classic)
    _one_member_holds_all(consumer)
    # the members commit on their subscribed topic and on one they are not subscribed to
    classic.commit({(TOPIC, 0): 5, (EXTRA, 0): 8})
    consumer.commit({(TOPIC, 1): 6, (EXTRA, 1): 9})

    def offsets(group, partitions=None):
        got = kp_admin.list_group_offsets({group: partitions})[group]
        return {(tp.topic, tp.partition): (om.offset, om.metadata) for tp, om in got.items()}

    # OffsetMetadataManager.fetchAllOffsets / fetchOffsets (-1 for one never committed)
    assert offsets("ko-classic") == {(TOPIC, 0): (5, ""), (EXTRA, 0): (8, "")}
    assert offsets("ko-consumer") == {(TOPIC, 1): (6, ""), (EXTRA, 1): (9, "")}
    assert offsets("ko-classic", [TP(TOPIC, 0), TP(TOPIC, 3)]) == {(TOPIC, 0): (5, ""),
                                                                    (TOPIC, 3): (-1, "")}
    assert offsets("ko-nobody") == {}
    assert offsets("ko-nobody", [TP(TOPIC, 0)]) == {(TOPIC, 0): (-1, "")}

    # ClassicGroup/ConsumerGroup.validateOffsetCommit: members present -> UNKNOWN_MEMBER_ID
    for group in ("ko-classic", "ko-consumer"):
        assert kp_admin.alter_group_offsets(group, {TP(TOPIC, 2): OffsetAndMetadata(1, "", -1)}) \
            == {TP(TOPIC, 2): UnknownMemberIdError}, group
    # an unknown group becomes a simple group; the metadata is kept
    assert kp_admin.alter_group_offsets("ko-simple", {
        TP(TOPIC, 2): OffsetAndMetadata(42, "note", -1),
        TP(TOPIC, 3): OffsetAndMetadata(43, "", -1)}) == {TP(TOPIC, 2): NoError,
                                                          TP(TOPIC, 3): NoError}
    assert offsets("ko-simple") == {(TOPIC, 2): (42, "note"), (TOPIC, 3): (43, "")}

    # OffsetMetadataManager.deleteOffsets: GROUP_SUBSCRIBED_TO_TOPIC for a topic the group
    # is subscribed to (ClassicGroup.validateOffsetDelete lets a Stable group using the
    # consumer protocol through; ConsumerGroup.validateOffsetDelete lets any through);
    # the others are deleted
    assert kp_admin.delete_group_offsets("ko-classic", [TP(TOPIC, 0), TP(EXTRA, 0)]) == {
        TP(TOPIC, 0): GroupSubscribedToTopicError, TP(EXTRA, 0): NoError}
    assert kp_admin.delete_group_offsets("ko-consumer", [TP(TOPIC, 1), TP(EXTRA, 1)]) == {
        TP(TOPIC, 1): GroupSubscribedToTopicError, TP(EXTRA, 1): NoError}
    assert offsets("ko-classic") == {(TOPIC, 0): (5, "")}
    assert offsets("ko-consumer") == {(TOPIC, 1): (6, "")}
    # an Empty group is subscribed to nothing: deleted, and a partition without an offset
    # is no error
    assert kp_admin.delete_group_offsets("ko-simple", [TP(TOPIC, 2), TP(TOPIC, 0)]) == {
        TP(TOPIC, 2): NoError, TP(TOPIC, 0): NoError}
    assert offsets("ko-simple") == {(TOPIC, 3): (43, "")}
    # OffsetMetadataManager.validateOffsetDelete -> group(): GROUP_ID_NOT_FOUND for the
    # whole request, which kafka-python raises
    with pytest.raises(GroupIdNotFoundError):
        kp_admin.delete_group_offsets("ko-nobody", [TP(TOPIC, 0)])

    # Once the members have left, their groups are subscribed to nothing: a classic group
    # that became Empty computed its subscribed topics without members (ClassicGroup.
    # initNextGeneration -> computeSubscribedTopics: the empty set), a consumer group
    # counts the subscriptions of its members (ModernGroup.isSubscribedToTopic)
    classic.close()
    consumer.close()
    _empty(admin, "ko-classic", "ko-consumer")
    assert kp_admin.delete_group_offsets("ko-classic", [TP(TOPIC, 0)]) == {TP(TOPIC, 0): NoError}
    assert kp_admin.delete_group_offsets("ko-consumer", [TP(TOPIC, 1)]) == {TP(TOPIC, 1): NoError}
    assert offsets("ko-classic") == {} and offsets("ko-consumer") == {}


def test_kafka_python_deletes_groups(admin, kp_admin, member):
    from kafka import TopicPartition as TP
    from kafka.structs import OffsetAndMetadata
    busy = member("kafka-python", "kd-busy", "kd-kp")
    left = member("kafka-python", "kd-left", "kd-left")
    _one_member_holds_all(busy)
    _one_member_holds_all(left)
    left.commit({(TOPIC, 1): 2})
    left.close()
    _empty(admin, "kd-left")
    kp_admin.alter_group_offsets("kd-simple", {TP(TOPIC, 1): OffsetAndMetadata(2, "", -1)})
    # ClassicGroup.validateDeleteGroup; GroupMetadataManager.group() for an unknown group;
    # GroupCoordinatorShard.deleteGroups answers each group on its own
    got = dict(kp_admin.delete_groups(["kd-busy", "kd-left", "kd-simple", "kd-nobody"]))
    assert got == {"kd-busy": "NonEmptyGroupError", "kd-left": "OK", "kd-simple": "OK",
                   "kd-nobody": "GroupIdNotFoundError"}
    # OffsetMetadataManager.deleteAllOffsets: the deleted groups' offsets went with them
    assert kp_admin.list_group_offsets({"kd-left": None, "kd-simple": None}) == {
        "kd-left": {}, "kd-simple": {}}
    listed = {g["group_id"] for g in kp_admin.list_groups() if g["group_id"].startswith("kd-")}
    assert listed == {"kd-busy"}

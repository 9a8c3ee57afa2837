"""The group APIs' ACL checks against Kafka's KafkaApis, in the cases the other server
tests leave out: which check comes first (the group, the topics, the request's own
validation), what a denial is answered with (code, message, node, authorized
operations), which operation each API needs (Read, Describe or Delete, and what each
implies), and where Kafka puts the denied entries of a batched answer.

Each a real frame through KafkaApis to the real GroupCoordinator (in process,
ManualClock), the client being User:ANONYMOUS (no SASL). Reference: apache/kafka 4.x
core/src/main/scala/kafka/server/KafkaApis.scala (handle*Request, AuthHelper) and
clients/.../common/requests (the error answers)."""
from __future__ import annotations

import pytest

from fastcoord import Errors
from fastcoord.server.security import Acl, Security

from tests.server.test_classic_wire_checks import _join_body as _classic_join
from tests.server.test_classic_wire_checks import _stable_member
from tests.server.test_consumer_protocol_wire import _apis, _call
from tests.server.test_consumer_protocol_wire import _join_body as _consumer_join
from tests.server.test_offsets_wire_checks import _commit, _wire

E = Errors
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = int(E.GROUP_AUTHORIZATION_FAILED)
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_ASKED = -2**31                       # an authorized_operations field's default
READ_AND_DESCRIBE = (1 << 3) | (1 << 8)  # AclOperation READ and DESCRIBE as bits


def _allow(operation: str, **resource) -> Acl:
    """An allow entry for the test's client on one group or topic."""
    return Acl("User:ANONYMOUS", (operation,), **resource)


def _as(apis, *acls):
    """Another KafkaApis over the same coordinator, answering under `acls`."""
    return _apis(apis.coord, security=Security(acls=list(acls)))


def _beat(apis, group, topics, member="m-1"):
    """A v1 ConsumerGroupHeartbeat join of `member` subscribing to `topics` by name."""
    return _call(apis, 68, 1, _consumer_join(1, group_id=group, member_id=member,
                                             subscribed_topic_names=topics))


def _committed(apis, group, partitions):
    """Offsets the ACLs would not let a commit make, made on the coordinator directly."""
    apis.coord.commit_offsets(group, "", -1, {tp: 7 for tp in partitions})


def _delete_offsets(apis, group, partitions):
    """OffsetDelete v0: (top-level error, {(topic, partition): error})."""
    by_topic = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append({"partition_index": p})
    answer = _call(apis, 47, 0, {"group_id": group, "topics": [
        {"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return answer.error_code, {(t.name, p.partition_index): p.error_code
                               for t in answer.topics for p in t.partitions}


# ---- ConsumerGroupHeartbeat ---------------------------------------------------------------

def test_consumer_heartbeat_checks_the_group_before_the_topics_and_the_member_id(impl):
    # KafkaApis.handleConsumerGroupHeartbeat: READ on the group first (Describe is not
    # enough), answered by getErrorResponse: the code alone, nothing made
    apis = _wire(impl, acls=[_allow("Describe", group="g")])
    answer = _beat(apis, "g", ["payments"], member=" ")
    assert (answer.error_code, answer.error_message, answer.member_id, answer.member_epoch,
            answer.assignment) == (GROUP_AUTHORIZATION_FAILED, None, None, 0, None)
    assert apis.coord.group_type("g") is None


def test_consumer_heartbeat_checks_the_topics_before_the_member_id(impl):
    # handleConsumerGroupHeartbeat: DESCRIBE on every subscribed name before the
    # coordinator sees the request (its v1 member id check comes after)
    apis = _wire(impl, acls=[_allow("Read", group="g"), _allow("Describe", topic="orders")])
    assert _beat(apis, "g", ["orders", "payments"], member=" ").error_code == \
        TOPIC_AUTHORIZATION_FAILED
    assert _beat(apis, "g", ["orders"], member=" ").error_code == int(E.INVALID_REQUEST)
    assert apis.coord.group_type("g") is None


def test_consumer_heartbeat_topic_denial_carries_no_message(impl):
    # handleConsumerGroupHeartbeat: a ConsumerGroupHeartbeatResponseData with
    # TOPIC_AUTHORIZATION_FAILED set and nothing else (no error message)
    apis = _wire(impl, acls=[_allow("Read", group="g"), _allow("Describe", topic="orders")])
    answer = _beat(apis, "g", ["orders", "payments"])
    assert (answer.error_code, answer.error_message, answer.member_id, answer.member_epoch) \
        == (TOPIC_AUTHORIZATION_FAILED, None, None, 0)


def test_consumer_heartbeat_checks_names_whether_or_not_the_topics_exist(impl):
    # handleConsumerGroupHeartbeat: filterByAuthorized(DESCRIBE, TOPIC) of the names, no
    # metadata lookup; an empty list is not checked at all
    apis = _wire(impl, acls=[_allow("Read", group="*"),
                             _allow("Describe", topic="o", prefixed=True)])
    assert _beat(apis, "g1", ["orders", "o-missing"]).error_code == 0
    assert _beat(apis, "g2", ["orders", "zzz-missing"]).error_code == TOPIC_AUTHORIZATION_FAILED
    assert apis.coord.group_type("g2") is None
    assert _beat(apis, "g3", []).error_code == 0


# ---- ConsumerGroupDescribe ----------------------------------------------------------------

def _described(impl, groups: dict, *acls, operations: bool):
    """Each of `groups` ({group: its one member's subscribed topics}) joined, then
    described by a client with `acls`: the described groups, in `groups`' order."""
    apis = _wire(impl)
    for group, topics in groups.items():
        assert _beat(apis, group, topics).error_code == 0
    return _call(_as(apis, *acls), 69, 1, {"group_ids": list(groups),
                                           "include_authorized_operations": operations}).groups


def test_consumer_describe_checks_the_assigned_topics_not_the_subscribed_ones(impl):
    # KafkaApis.handleConsumerGroupDescribe: the topics checked are the members'
    # assignment and target assignment; a subscription to a topic that is not there
    # assigns nothing and hides nothing
    ghost, pay = _described(impl, {"ghost-g": ["ghost"], "pay-g": ["payments"]},
                            _allow("Describe", group="*"), _allow("Describe", topic="orders"),
                            operations=False)
    assert (ghost.error_code, [list(m.subscribed_topic_names) for m in ghost.members]) == \
        (0, [["ghost"]])
    assert (pay.error_code, tuple(pay.members)) == (TOPIC_AUTHORIZATION_FAILED, ())


def test_consumer_describe_topic_denial_answers_kafkas_message_and_no_operations(impl):
    # handleConsumerGroupDescribe: authorized operations go on the groups the coordinator
    # answers without an error; a group then refused for its topics is a new
    # DescribedGroup (Kafka's message, no members, every other field at its default)
    ords, pay = _described(impl, {"ord-g": ["orders"], "pay-g": ["payments"]},
                           _allow("Read", group="*"), _allow("Describe", topic="orders"),
                           operations=True)
    assert (ords.error_code, ords.authorized_operations, len(ords.members)) == \
        (0, READ_AND_DESCRIBE, 1)
    assert (pay.error_code, pay.error_message, pay.authorized_operations, pay.group_state,
            pay.group_epoch, tuple(pay.members)) == (
        TOPIC_AUTHORIZATION_FAILED,
        "The group has described topic(s) that the client is not authorized to describe.",
        NOT_ASKED, "", 0, ())


# ---- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ------------------------------------------

def test_classic_membership_apis_need_read_not_describe(impl):
    # KafkaApis.handleJoinGroupRequest / handleSyncGroupRequest / handleHeartbeatRequest /
    # handleLeaveGroupRequest: READ on the group, else each request's getErrorResponse;
    # the coordinator never sees the request
    apis = _wire(impl)
    member, generation = _stable_member(apis, "g")
    viewer = _as(apis, _allow("Describe", group="g"))
    join = _call(viewer, 11, 5, _classic_join(5, "g", member=member))
    assert (join.error_code, join.generation_id, join.member_id, join.leader,
            tuple(join.members)) == (GROUP_AUTHORIZATION_FAILED, -1, "", "", ())
    sync = _call(viewer, 14, 3, {"group_id": "g", "generation_id": generation,
                                 "member_id": member, "group_instance_id": None,
                                 "assignments": []})
    assert (sync.error_code, sync.assignment) == (GROUP_AUTHORIZATION_FAILED, b"")
    beat = {"group_id": "g", "generation_id": generation, "member_id": member,
            "group_instance_id": None}
    assert _call(viewer, 12, 3, beat).error_code == GROUP_AUTHORIZATION_FAILED
    leave = _call(viewer, 13, 3, {"group_id": "g", "members": [
        {"member_id": member, "group_instance_id": None}]})
    assert (leave.error_code, tuple(leave.members)) == (GROUP_AUTHORIZATION_FAILED, ())
    assert _call(apis, 12, 3, beat).error_code == 0      # the member is still there


def test_sync_v5_checks_the_protocol_fields_before_the_group_acl(impl):
    # handleSyncGroupRequest: areMandatoryProtocolTypeAndNamePresent first
    # (INCONSISTENT_GROUP_PROTOCOL), then READ on the group
    apis = _wire(impl, acls=[_allow("Read", group="other")])
    body = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None,
            "protocol_type": None, "protocol_name": "range", "assignments": []}
    assert _call(apis, 14, 5, body).error_code == int(E.INCONSISTENT_GROUP_PROTOCOL)
    body["protocol_type"] = "consumer"
    assert _call(apis, 14, 5, body).error_code == GROUP_AUTHORIZATION_FAILED


# ---- OffsetCommit, OffsetDelete -----------------------------------------------------------

def test_commit_of_a_denied_topic_beside_a_coordinator_error(impl):
    # KafkaApis.handleOffsetCommitRequest: READ on the topic (Describe is not enough) ->
    # TOPIC_AUTHORIZATION_FAILED in the response builder, merged with what the
    # coordinator answers for the authorized partitions (here a stale generation)
    apis = _wire(impl, acls=[_allow("Read", group="g"), _allow("Read", topic="orders"),
                             _allow("Describe", topic="payments")])
    member, generation = _stable_member(apis, "g")
    got = dict(_commit(apis, 8, "g", [("orders", 0, 5, None), ("payments", 0, 5, None)],
                       generation=generation + 1, member=member))
    assert got == {("orders", 0): int(E.ILLEGAL_GENERATION),
                   ("payments", 0): TOPIC_AUTHORIZATION_FAILED}


def test_offset_delete_needs_delete_on_the_group(impl):
    # KafkaApis.handleOffsetDeleteRequest: DELETE on the group (Read is not enough), else
    # getErrorResponse: the top-level error, no topics, nothing deleted
    apis = _wire(impl, acls=[_allow("Read", group="g"), _allow("Read", topic="orders")])
    _committed(apis, "g", [("orders", 0)])
    assert _delete_offsets(apis, "g", [("orders", 0)]) == (GROUP_AUTHORIZATION_FAILED, {})
    fetched = _call(apis, 9, 5, {"group_id": "g", "topics": [
        {"name": "orders", "partition_indexes": [0]}]})
    assert fetched.topics[0].partitions[0].committed_offset == 7


def test_offset_delete_checks_read_on_each_topic_before_its_existence(impl):
    # handleOffsetDeleteRequest: filterByAuthorized(READ, TOPIC) first (29 on every
    # partition of a denied topic), then metadataCache (3); a denied topic's offsets stay
    apis = _wire(impl, acls=[_allow("Delete", group="g"), _allow("Read", topic="orders"),
                             _allow("Read", topic="nope"), _allow("Describe", topic="payments")])
    _committed(apis, "g", [("orders", 0), ("payments", 0)])
    got = _delete_offsets(apis, "g", [("orders", 0), ("payments", 0), ("nope", 0)])
    assert got == (0, {("orders", 0): 0, ("payments", 0): TOPIC_AUTHORIZATION_FAILED,
                       ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION})
    _, found = apis.coord.fetch_offsets("g", [("payments", 0)])
    assert found[("payments", 0)].offset == 7


# ---- DeleteGroups, ListGroups ---------------------------------------------------------------

def test_delete_groups_needs_delete_not_read_or_describe(impl):
    # KafkaApis.handleDeleteGroupsRequest: partitionSeqByAuthorized(DELETE, GROUP); the
    # denied groups are answered GROUP_AUTHORIZATION_FAILED and kept
    apis = _wire(impl, acls=[_allow("Read", group="r"), _allow("Describe", group="d"),
                             _allow("Delete", group="x")])
    for group in ("r", "d", "x"):
        _committed(apis, group, [("orders", 0)])
    answer = _call(apis, 42, 2, {"groups_names": ["r", "d", "x"]})
    assert {r.group_id: r.error_code for r in answer.results} == {
        "r": GROUP_AUTHORIZATION_FAILED, "d": GROUP_AUTHORIZATION_FAILED, "x": 0}
    assert [apis.coord.group_type(g) is None for g in ("r", "d", "x")] == [False, False, True]


def test_list_groups_lists_the_groups_the_client_may_describe(impl):
    # KafkaApis.handleListGroupsRequest (no DESCRIBE on the cluster: no entry names it):
    # a group is listed when DESCRIBE on it is allowed, Read or Delete implying it and a
    # deny of Describe winning; consumer groups as classic ones
    apis = _wire(impl, acls=[
        _allow("Read", group="read-g"), _allow("Delete", group="del-g"),
        _allow("All", group="x-", prefixed=True),
        Acl("User:ANONYMOUS", ("Describe",), group="x-no", deny=True)])
    for group in ("read-g", "del-g", "hidden", "x-yes", "x-no"):
        _committed(apis, group, [("orders", 0)])
    assert _beat(apis, "x-cg", []).error_code == 0
    for version in (0, 5):
        body = {"states_filter": [], "types_filter": []} if version == 5 else {}
        answer = _call(apis, 16, version, body)
        assert (answer.error_code, sorted(g.group_id for g in answer.groups)) == \
            (0, ["del-g", "read-g", "x-cg", "x-yes"])


# ---- FindCoordinator --------------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_find_coordinator_of_a_denied_group_answers_no_node(impl, version):
    # KafkaApis.getCoordinator: DESCRIBE on the group, else (GROUP_AUTHORIZATION_FAILED,
    # Node.noNode): id -1, host "", port -1
    apis = _wire(impl, acls=[_allow("Read", group="mine")])
    body = {"key": "theirs"} if version == 0 else {"key": "theirs", "key_type": 0}
    answer = _call(apis, 10, version, body)
    assert (answer.error_code, answer.node_id, answer.host, answer.port) == \
        (GROUP_AUTHORIZATION_FAILED, -1, "", -1)
    body["key"] = "mine"
    assert _call(apis, 10, version, body).error_code == 0


@pytest.mark.parametrize("version", [1, 2, 3])
def test_find_coordinator_denial_carries_the_errors_message(impl, version):
    # handleFindCoordinatorRequestLessThanV4 -> FindCoordinatorRequest.getErrorResponse ->
    # FindCoordinatorResponse.prepareOldResponse: setErrorMessage(error.message())
    apis = _wire(impl, acls=[_allow("Read", group="mine")])
    answer = _call(apis, 10, version, {"key": "theirs", "key_type": 0})
    assert (answer.error_code, answer.error_message) == \
        (GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")


# ---- where the denied entries go in a batched answer ---------------------------------------

def test_denied_groups_go_where_kafka_puts_them_in_batched_answers(impl):
    # KafkaApis.handleDescribeGroupsRequest / handleConsumerGroupDescribe: the denied
    # groups are added while checking, the coordinator's results appended after them;
    # handleDeleteGroupsRequest: the coordinator's results first, the denied ones after
    apis = _wire(impl)
    _stable_member(apis, "mine")
    assert _beat(apis, "mine-cg", ["orders"]).error_code == 0
    viewer = _as(apis, _allow("All", group="mine", prefixed=True),
                 _allow("Describe", topic="orders"))
    described = _call(viewer, 15, 5, {"groups": ["mine", "theirs"],
                                      "include_authorized_operations": False}).groups
    consumer = _call(viewer, 69, 1, {"group_ids": ["mine-cg", "theirs"],
                                     "include_authorized_operations": False}).groups
    deleted = _call(viewer, 42, 2, {"groups_names": ["theirs", "mine-cg"]}).results
    assert ([(g.group_id, g.error_code) for g in described],
            [(g.group_id, g.error_code) for g in consumer],
            [(r.group_id, r.error_code) for r in deleted]) == (
        [("theirs", GROUP_AUTHORIZATION_FAILED), ("mine", 0)],
        [("theirs", GROUP_AUTHORIZATION_FAILED), ("mine-cg", 0)],
        [("mine-cg", int(E.NON_EMPTY_GROUP)), ("theirs", GROUP_AUTHORIZATION_FAILED)])

"""The consumer group protocol (KIP-848) on the wire, Kafka 4.x's checks and answers
that the other tests leave out: request validation and its messages, owned partitions
at the previous epoch, OffsetCommit/OffsetFetch v9 member checks and unknown groups,
ListGroups v5 filters, ConsumerGroupDescribe of real groups, the upgrade refusal's
message. Each a real frame through KafkaApis to the real GroupCoordinator (in process),
asserting Kafka's answer.

Kafka code paths are named in each test (group-coordinator module unless said)."""
from __future__ import annotations

import uuid

import pytest

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock

from tests.server.test_consumer_protocol_wire import TOPICS, _apis, _call, _join_body

E = Errors


def _real(impl, **config):
    coord = GroupCoordinator(CoordinatorConfig(**config), clock=ManualClock(0), impl=impl)
    coord.set_topics(dict(TOPICS))
    return _apis(coord)


def _beat(apis, member_id, epoch, owned, version=1, group_id="g", **fields):
    """A full heartbeat (every field set) at `epoch` with `owned` ({topic id: parts})."""
    body = _join_body(version, group_id=group_id, member_id=member_id, member_epoch=epoch,
                      rack_id=None, topic_partitions=[
                          {"topic_id": t, "partitions": ps} for t, ps in owned.items()])
    body.update(fields)
    return _call(apis, 68, version, body)


def _parts(answer):
    return {t.topic_id: sorted(t.partitions) for t in answer.assignment.topic_partitions}


def _member_at_new_epoch(apis):
    """Member "a" joins alone, "b" joins (group epoch 2): "a" revokes and moves to epoch
    2 (its previous epoch 1). Returns (a's epoch, a's kept partitions {topic id: parts})."""
    ids = apis.topic_ids.as_dict()
    a = _beat(apis, "a", 0, {})
    assert a.error_code == 0 and a.member_epoch == 1, a
    everything = _parts(a)
    b = _beat(apis, "b", 0, {})
    assert b.error_code == 0 and b.member_epoch == 2, b
    revoking = _beat(apis, "a", 1, everything)
    assert (revoking.error_code, revoking.member_epoch) == (0, 1), revoking
    kept = _parts(revoking)
    assert kept != everything and set(kept) <= set(ids.values())
    moved = _beat(apis, "a", 1, kept)
    assert (moved.error_code, moved.member_epoch) == (0, 2), moved
    # the previous epoch with a subset of the assignment is accepted (the baseline)
    again = _beat(apis, "a", 1, kept)
    assert (again.error_code, again.member_epoch) == (0, 2), again
    return 2, kept


# ---- ConsumerGroupHeartbeat validation ---------------------------------------------------

@pytest.mark.parametrize("member_id", ["  ", "\t"])
def test_v1_join_with_a_blank_member_id_is_invalid_request(impl, member_id):
    """GroupMetadataManager.throwIfConsumerGroupHeartbeatRequestIsInvalid (4.0; the
    GroupCoordinatorService in later 4.x): from v1 the member id must not be empty, by
    throwIfEmptyString, which trims: a blank id is INVALID_REQUEST, whatever the epoch."""
    apis = _real(impl)
    answer = _call(apis, 68, 1, _join_body(1, member_id=member_id))
    assert (answer.error_code, answer.error_message) == (42, "MemberId can't be empty.")
    assert apis.coord.group_type("g") is None


def test_v0_join_with_an_empty_member_id_gets_one_made(impl):
    apis = _real(impl)
    answer = _call(apis, 68, 0, _join_body(0, member_id=""))
    assert answer.error_code == 0 and len(answer.member_id) == 22


@pytest.mark.parametrize("version", [0, 1])
def test_wire_request_validation_messages(impl, version):
    """The INVALID_REQUEST answers of throwIfConsumerGroupHeartbeatRequestIsInvalid as
    they reach the wire (code and Kafka's fixed message)."""
    apis = _real(impl)
    cases = [
        (dict(group_id=""), "GroupId can't be empty."),
        (dict(group_id="  "), "GroupId can't be empty."),
        (dict(instance_id=" "), "InstanceId can't be empty."),
        (dict(rack_id=""), "RackId can't be empty."),
        (dict(rebalance_timeout=-1), "RebalanceTimeoutMs must be provided in first request."),
        (dict(topic_partitions=None), "TopicPartitions must be empty when (re-)joining."),
        (dict(subscribed_topic_names=None),
         "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
        (dict(member_epoch=-2, instance_id=None), "InstanceId can't be null."),
        (dict(member_epoch=-3), "MemberEpoch is invalid."),
        (dict(member_epoch=5, member_id=""), "MemberId can't be empty."),
        (dict(member_epoch=-1, member_id=""), "MemberId can't be empty."),
    ]
    for fields, message in cases:
        answer = _call(apis, 68, version, _join_body(version, **fields))
        assert (answer.error_code, answer.error_message, answer.member_id,
                answer.member_epoch) == (42, message, None, 0), fields


def test_unsupported_assignor_on_the_wire(impl):
    """UNSUPPORTED_ASSIGNOR with Kafka's message (its assignor map keyed by name: a Java
    HashMap, which orders "uniform" before "range")."""
    apis = _real(impl)
    answer = _call(apis, 68, 1, _join_body(1, server_assignor="sticky"))
    assert (answer.error_code, answer.error_message) == (
        int(E.UNSUPPORTED_ASSIGNOR),
        "ServerAssignor sticky is not supported. Supported assignors: uniform, range.")


def test_an_invalid_regex_on_the_wire(impl):
    """maybeUpdateRegularExpressions -> throwIfRegularExpressionIsInvalid:
    INVALID_REGULAR_EXPRESSION, "SubscribedTopicRegex `<regex>` is not a valid regular
    expression: <the parser's description>."."""
    apis = _real(impl)
    answer = _call(apis, 68, 1, _join_body(1, subscribed_topic_names=None,
                                           subscribed_topic_regex="["))
    assert answer.error_code == int(E.INVALID_REGULAR_EXPRESSION)
    assert answer.error_message.startswith(
        "SubscribedTopicRegex `[` is not a valid regular expression: ")


def test_an_empty_regex_or_topic_list_joins(impl):
    """ConsumerGroupHeartbeatRequestTest.testConsumerGroupHeartbeatWithEmptySubscription:
    an empty regex, or an empty list of names, subscribes to nothing but joins."""
    apis = _real(impl)
    regex = _call(apis, 68, 1, _join_body(1, member_id="r", subscribed_topic_names=None,
                                          subscribed_topic_regex=""))
    names = _call(apis, 68, 1, _join_body(1, member_id="n", subscribed_topic_names=[]))
    assert (regex.error_code, names.error_code) == (0, 0)
    assert regex.assignment.topic_partitions == () and names.assignment.topic_partitions == ()


# ---- member epochs and owned partitions ---------------------------------------------------

def test_previous_epoch_owning_an_unknown_topic_id_is_fenced(impl):
    """throwIfConsumerGroupMemberEpochIsInvalid: a heartbeat at the member's previous
    epoch passes only if isSubset(owned, assigned); isSubset looks each owned topic id
    up in the assignment and answers false for one not in it (an id unknown to the
    broker included): FENCED_MEMBER_EPOCH."""
    apis = _real(impl)
    epoch, kept = _member_at_new_epoch(apis)
    owned = dict(kept)
    owned[uuid.UUID(int=99)] = [0]
    answer = _beat(apis, "a", epoch - 1, owned)
    assert answer.error_code == int(E.FENCED_MEMBER_EPOCH), answer
    assert answer.error_message == (
        f"The consumer group member has a smaller member epoch ({epoch - 1}) than the one "
        f"known by the group coordinator ({epoch}). The member must abandon all its "
        "partitions and rejoin.")


def test_previous_epoch_owning_a_negative_partition_is_fenced(impl):
    """As above: a partition id not in the assignment (-1) makes isSubset false."""
    apis = _real(impl)
    epoch, kept = _member_at_new_epoch(apis)
    topic = next(iter(kept))
    owned = dict(kept)
    owned[topic] = kept[topic] + [-1]
    answer = _beat(apis, "a", epoch - 1, owned)
    assert answer.error_code == int(E.FENCED_MEMBER_EPOCH), answer


def test_greater_epoch_is_fenced_with_kafkas_message(impl):
    apis = _real(impl)
    joined = _beat(apis, "a", 0, {})
    answer = _beat(apis, "a", joined.member_epoch + 3, {})
    assert (answer.error_code, answer.error_message) == (
        int(E.FENCED_MEMBER_EPOCH),
        f"The consumer group member has a greater member epoch ({joined.member_epoch + 3}) "
        f"than the one known by the group coordinator ({joined.member_epoch}). The member "
        "must abandon all its partitions and rejoin.")


def test_unknown_member_and_static_member_messages(impl):
    """UNKNOWN_MEMBER_ID (ConsumerGroup.getOrMaybeCreateMember: "Member %s is not a member
    of group %s."), UNKNOWN_MEMBER_ID for an unknown instance id ("Instance id %s is
    unknown."), FENCED_INSTANCE_ID and UNRELEASED_INSTANCE_ID with Kafka's messages."""
    apis = _real(impl)
    static = _beat(apis, "s1", 0, {}, instance_id="i1")
    assert static.error_code == 0
    epoch = static.member_epoch
    stranger = _beat(apis, "zz", epoch, {})
    assert (stranger.error_code, stranger.error_message) == (
        int(E.UNKNOWN_MEMBER_ID), "Member zz is not a member of group g.")
    unknown = _beat(apis, "s1", epoch, {}, instance_id="i9")
    assert (unknown.error_code, unknown.error_message) == (
        int(E.UNKNOWN_MEMBER_ID), "Instance id i9 is unknown.")
    fenced = _beat(apis, "s2", epoch, {}, instance_id="i1")
    assert (fenced.error_code, fenced.error_message) == (
        int(E.FENCED_INSTANCE_ID), "Static member s2 with instance id i1 was fenced by member s1.")
    unreleased = _beat(apis, "s2", 0, {}, instance_id="i1")
    assert (unreleased.error_code, unreleased.error_message) == (
        int(E.UNRELEASED_INSTANCE_ID),
        "Static member s2 with instance id i1 cannot join the group because the instance "
        "id is owned by s1 member.")
    # a static member leaving for now answers epoch -2 and its member id
    left = _call(apis, 68, 1, {"group_id": "g", "member_id": "s1", "member_epoch": -2,
                               "instance_id": "i1", "topic_partitions": None})
    assert (left.error_code, left.member_id, left.member_epoch) == (0, "s1", -2)


def test_group_max_size_on_the_wire(impl):
    apis = _real(impl, group_consumer_max_size=1)
    assert _beat(apis, "a", 0, {}).error_code == 0
    full = _beat(apis, "b", 0, {})
    assert (full.error_code, full.error_message) == (
        int(E.GROUP_MAX_SIZE_REACHED),
        "The consumer group has reached its maximum capacity of 1 members.")


def test_heartbeat_to_an_unknown_group(impl):
    """getOrMaybeCreateConsumerGroup(groupId, false): "Consumer group %s not found."."""
    apis = _real(impl)
    answer = _beat(apis, "a", 3, {}, group_id="nope")
    assert (answer.error_code, answer.error_message) == (
        int(E.GROUP_ID_NOT_FOUND), "Consumer group nope not found.")


# ---- OffsetCommit v9 / OffsetFetch v9 -------------------------------------------------------

def _commit(apis, version, group_id, member_id, epoch, partition=0, topic="orders"):
    body = {"group_id": group_id, "generation_id_or_member_epoch": epoch,
            "member_id": member_id, "group_instance_id": None, "topics": [
                {"name": topic, "partitions": [
                    {"partition_index": partition, "committed_offset": 5,
                     "committed_leader_epoch": -1, "committed_metadata": None}]}]}
    if version < 7:
        body.pop("group_instance_id")
    if version < 6:
        for t in body["topics"]:
            for p in t["partitions"]:
                p.pop("committed_leader_epoch")
    if version >= 2 and version <= 4:
        body["retention_time_ms"] = -1
    return _call(apis, 8, version, body).topics[0].partitions[0].error_code


@pytest.mark.parametrize("epoch", [0, 1, 7])
def test_offset_commit_v9_to_an_unknown_group_is_group_id_not_found(impl, epoch):
    """OffsetMetadataManager.validateOffsetCommit: when groupMetadataManager.group()
    finds no group and the generation/member epoch is >= 0, OffsetCommit v9+ answers
    GROUP_ID_NOT_FOUND (the exception rethrown); below v9 ILLEGAL_GENERATION. An epoch
    < 0 creates a simple group and commits."""
    apis = _real(impl)
    assert _commit(apis, 9, "nobody", "m", epoch) == int(E.GROUP_ID_NOT_FOUND)
    assert apis.coord.group_type("nobody") is None


def test_offset_commit_below_v9_to_an_unknown_group_is_illegal_generation(impl):
    apis = _real(impl)
    assert _commit(apis, 8, "nobody", "m", 1) == int(E.ILLEGAL_GENERATION)
    assert _commit(apis, 9, "simple", "", -1) == 0


def test_offset_commit_v9_member_checks(impl):
    """ConsumerGroup.validateOffsetCommit: unknown member UNKNOWN_MEMBER_ID; an admin's
    commit (-1) to a group with members UNKNOWN_MEMBER_ID; a consumer-protocol member
    with v8 UNSUPPORTED_VERSION; a newer epoch STALE_MEMBER_EPOCH."""
    apis = _real(impl)
    joined = _beat(apis, "a", 0, {})
    epoch = joined.member_epoch
    assert _commit(apis, 9, "g", "a", epoch) == 0
    assert _commit(apis, 9, "g", "zz", epoch) == int(E.UNKNOWN_MEMBER_ID)
    assert _commit(apis, 9, "g", "", -1) == int(E.UNKNOWN_MEMBER_ID)
    assert _commit(apis, 8, "g", "a", epoch) == int(E.UNSUPPORTED_VERSION)
    assert _commit(apis, 9, "g", "a", epoch + 1) == int(E.STALE_MEMBER_EPOCH)


def _fetch(apis, group_id, member_id, epoch):
    answer = _call(apis, 9, 9, {"groups": [{
        "group_id": group_id, "member_id": member_id, "member_epoch": epoch,
        "topics": [{"name": "orders", "partition_indexes": [0]}]}], "require_stable": False})
    return answer.groups[0]


def test_offset_fetch_v9_member_checks(impl):
    """ConsumerGroup.validateOffsetFetch: an admin (null member id, epoch < 0) passes;
    an unknown member UNKNOWN_MEMBER_ID; another epoch STALE_MEMBER_EPOCH; an unknown
    group answers every partition with no offset and no error (fetchOffsets catches
    GroupIdNotFoundException)."""
    apis = _real(impl)
    epoch = _beat(apis, "a", 0, {}).member_epoch
    assert _fetch(apis, "g", "a", epoch).error_code == 0
    assert _fetch(apis, "g", None, -1).error_code == 0
    assert _fetch(apis, "g", "zz", epoch).error_code == int(E.UNKNOWN_MEMBER_ID)
    assert _fetch(apis, "g", "a", epoch + 1).error_code == int(E.STALE_MEMBER_EPOCH)
    assert _fetch(apis, "g", "a", epoch - 1).error_code == int(E.STALE_MEMBER_EPOCH)
    gone = _fetch(apis, "nobody", "a", 3)
    assert gone.error_code == 0
    assert gone.topics[0].partitions[0].committed_offset == -1


# ---- ListGroups v5 ----------------------------------------------------------------------

def test_list_groups_v5_filters_in_any_case_and_answers_the_consumer_protocol_type(impl):
    """GroupMetadataManager.listGroups: states compared lower-cased (and trimmed), types
    parsed case-insensitively (GroupType.parse; an unknown name matches no group);
    ConsumerGroup.asListedGroup answers protocol type "consumer"."""
    apis = _real(impl)
    assert _beat(apis, "a", 0, {}, group_id="cg").error_code == 0
    apis.coord.commit_offsets("simple", "", -1, {("orders", 0): 1})

    def listed(states, types):
        answer = _call(apis, 16, 5, {"states_filter": states, "types_filter": types})
        assert answer.error_code == 0
        return sorted((g.group_id, g.protocol_type, g.group_state, g.group_type)
                      for g in answer.groups)

    assert listed([], ["CONSUMER"]) == [("cg", "consumer", "Stable", "consumer")]
    assert listed(["STABLE"], []) == [("cg", "consumer", "Stable", "consumer")]
    assert listed([" stable "], ["Consumer"]) == [("cg", "consumer", "Stable", "consumer")]
    assert listed([], ["Classic"]) == [("simple", "", "Empty", "classic")]
    assert listed([], ["share"]) == []
    assert listed([], ["no-such-type"]) == []
    assert listed(["no-such-state"], []) == []


# ---- ConsumerGroupDescribe ----------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_describe_of_a_real_group(impl, version):
    """ConsumerGroup.asDescribedGroup / ConsumerGroupMember.asConsumerGroupDescribeMember:
    epochs, state, assignor (the preferred one, else the default), each member's
    assignment and target with topic ids and names."""
    apis = _real(impl)
    ids = apis.topic_ids.as_dict()
    a = _beat(apis, "a", 0, {}, subscribed_topic_names=["orders", "payments"])
    b = _beat(apis, "b", 0, {}, subscribed_topic_names=["orders", "payments"],
              server_assignor="range")
    assert a.error_code == b.error_code == 0
    (g,) = _call(apis, 69, version, {"group_ids": ["g"],
                                     "include_authorized_operations": True}).groups
    assert (g.error_code, g.group_id, g.group_epoch, g.assignment_epoch) == (0, "g", 2, 2)
    assert g.group_state in ("Reconciling", "Assigning", "Stable")
    # one member asks for range, none for uniform: range is preferred
    assert g.assignor_name == "range"
    assert g.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
    members = {m.member_id: m for m in g.members}
    assert set(members) == {"a", "b"}
    for m in members.values():
        for t in (*m.assignment.topic_partitions, *m.target_assignment.topic_partitions):
            assert ids[t.topic_name] == t.topic_id
        assert sorted(m.subscribed_topic_names) == ["orders", "payments"]
        # ConsumerGroupMember's regex is "" when it has none, and is described so
        assert m.subscribed_topic_regex == ""
    targets = [sorted((t.topic_name, p) for t in m.target_assignment.topic_partitions
                      for p in t.partitions) for m in members.values()]
    assert sorted(targets[0] + targets[1]) == sorted(
        [("orders", p) for p in range(6)] + [("payments", p) for p in range(2)])


def test_consumer_group_describe_of_an_emptied_group(impl):
    """An empty consumer group: Empty, the default assignor (the first configured)."""
    apis = _real(impl)
    a = _beat(apis, "a", 0, {}, server_assignor="range")
    left = _call(apis, 68, 1, {"group_id": "g", "member_id": "a", "member_epoch": -1,
                               "topic_partitions": None})
    assert (a.error_code, left.error_code, left.member_epoch) == (0, 0, -1)
    (g,) = _call(apis, 69, 1, {"group_ids": ["g"],
                               "include_authorized_operations": False}).groups
    assert (g.error_code, g.group_state, g.assignor_name, g.members) == (
        0, "Empty", "uniform", ())
    assert g.group_epoch == g.assignment_epoch


# ---- a consumer join to a classic group whose embedded protocol does not parse -------------

def test_upgrade_refused_for_malformed_bytes_answers_kafkas_message(impl):
    """GroupMetadataManager.convertToConsumerGroup: the SchemaException of a member's
    embedded ConsumerProtocol bytes is GROUP_ID_NOT_FOUND with a fixed message; Kafka's
    text is "Cannot upgrade the classic group <g> to consumer group because the embedded
    consumer protocol is malformed." (4.0; later 4.x drop the first "the"), never "to a
    consumer group"."""
    coord = GroupCoordinator(CoordinatorConfig(group_initial_rebalance_delay_ms=0),
                             clock=ManualClock(0), impl=impl)
    coord.set_topics(dict(TOPICS))
    apis = _apis(coord)
    answers = []
    for _ in range(2):
        coord.join_group("g", "", "consumer", [("range", b"\x00\x03\x00\x00")],
                         session_timeout_ms=10_000, rebalance_timeout_ms=30_000,
                         require_known_member_id=False, callback=answers.append)
    coord.advance_time(1)
    assert len(answers) == 2 and all(a.error == E.NONE for a in answers), answers
    answer = _call(apis, 68, 1, _join_body(1, member_id="c1"))
    assert answer.error_code == int(E.GROUP_ID_NOT_FOUND)
    assert answer.error_message in (
        "Cannot upgrade the classic group g to consumer group because the embedded "
        "consumer protocol is malformed.",
        "Cannot upgrade classic group g to consumer group because the embedded "
        "consumer protocol is malformed."), answer.error_message
    assert coord.group_type("g") == "classic"

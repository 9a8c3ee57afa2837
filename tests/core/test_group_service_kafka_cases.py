"""Apache Kafka 4's group coordinator service layer and consumer group model, checked
against fastcoord's Python API, both twins.

Translated here: the cases of Kafka's GroupCoordinatorServiceTest (request validation
of ConsumerGroupHeartbeat; what ConsumerGroupHeartbeat, ConsumerGroupDescribe,
DescribeGroups, ListGroups, DeleteGroups and OffsetDelete answer when the coordinator is
not active, a shard loads or is not ours), of modern/consumer/ConsumerGroupTest (the
preferred server assignor, subscribed topics and regular expressions as OffsetDelete
and the retention check see them, the offsets expiration condition, the listed and
described forms) and the describe / list / delete cases of GroupMetadataManagerTest
that tests/core/test_consumer_*.py and tests/core/test_protocol_admin.py do not
already cover. Kafka's tests drive internal state (records, snapshots, mocked runtimes);
here the same outcomes are reached through heartbeats, commits and admin calls.

Every test asserts Kafka's outcome; the comment above it names the Kafka test method.
"""
import pytest

from fastcoord import shard_for

from tests.core.test_consumer_protocol import E, hb, join, make
from tests.core.test_consumer_protocol_more import described

def _settle(coord, group_id="g", rounds=6):
    """Heartbeat rounds 11 s apart (past the 10 s regex batching) until Stable, each
    member saying it owns what it was given."""
    for _ in range(rounds):
        coord.advance_time(11_000)
        for m in described(coord, group_id).members:
            hb(coord, group_id, m.member_id, m.member_epoch, owned_partitions=m.assignment)
        if described(coord, group_id).state == "Stable":
            return
    raise AssertionError("the group did not settle")


def _epoch(coord, member_id, group_id="g"):
    return {m.member_id: m.member_epoch for m in described(coord, group_id).members}[member_id]


def _deletable(coord, group_id, *topics):
    """OffsetDelete of partition 0 of each topic: {topic: error}."""
    error, results = coord.delete_offsets(group_id, [(t, 0) for t in topics])
    assert error == E.NONE
    return {tp[0]: err for tp, err in results.items()}


def _listed(coord, **filters):
    return sorted(g.group_id for g in coord.list_groups(**filters))


# ---------------------------------------------------------------------------------------
# ConsumerGroupHeartbeat request validation (GroupCoordinatorService)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("group_id, member_id, epoch, kwargs, message", [
    # the member id is checked before the group id
    ("", "", 1, {}, "MemberId can't be empty."),
    ("   ", "m", 0, dict(rebalance_timeout_ms=5000, subscribed_topic_names=["foo"],
                         owned_partitions={}), "GroupId can't be empty."),
    ("g", "m", 1, dict(instance_id=""), "InstanceId can't be empty."),
    ("g", "m", 1, dict(instance_id="  "), "InstanceId can't be empty."),
    ("g", "m", 1, dict(rack_id=""), "RackId can't be empty."),
    ("g", "m", 1, dict(rack_id=" "), "RackId can't be empty."),
    # the instance id is checked before the join's fields
    ("g", "m", 0, dict(instance_id=""), "InstanceId can't be empty."),
    # the rebalance timeout before the owned partitions
    ("g", "m", 0, {}, "RebalanceTimeoutMs must be provided in first request."),
    ("g", "m", -2, dict(rebalance_timeout_ms=5000, subscribed_topic_names=["foo", "bar"],
                        owned_partitions={}), "InstanceId can't be null."),
    # INVALID_REQUEST comes before UNSUPPORTED_ASSIGNOR
    ("g", "m", -3, dict(server_assignor="bar"), "MemberEpoch is invalid."),
    ("g", "m", 0, dict(server_assignor="bar"),
     "RebalanceTimeoutMs must be provided in first request."),
])
def test_heartbeat_request_validation_order(impl, group_id, member_id, epoch, kwargs,
                                            message):
    # GroupCoordinatorServiceTest.testConsumerHeartbeatRequestValidation
    coord, _ = make(impl)
    result = hb(coord, group_id, member_id, epoch, **kwargs)
    assert (result.error, result.error_message) == (E.INVALID_REQUEST, message)
    assert coord.list_groups() == []


def test_an_unknown_assignor_names_the_supported_ones(impl):
    # GroupCoordinatorServiceTest.testConsumerHeartbeatRequestValidation (ServerAssignor)
    coord, _ = make(impl, group_consumer_assignors=("range",))
    result = hb(coord, "foo", "m", 1, server_assignor="bar")
    assert (result.error, result.error_message) == \
        (E.UNSUPPORTED_ASSIGNOR, "ServerAssignor bar is not supported. Supported assignors: range.")


def test_a_member_may_join_subscribed_to_no_topic(impl):
    # GroupCoordinatorServiceTest.testConsumerHeartbeatRequestValidation (empty names accepted)
    coord, _ = make(impl)
    coord.set_topics({"foo": 1})
    result = join(coord, "g", "m1", [])
    assert (result.error, result.member_epoch, result.assignment) == (E.NONE, 1, {})
    d = described(coord)
    assert (d.state, [m.subscribed_topic_names for m in d.members]) == ("Stable", [[]])


# ---------------------------------------------------------------------------------------
# a coordinator not active, a shard loading or not ours
# ---------------------------------------------------------------------------------------
def inactive(impl):
    """A coordinator holding consumer group g (member m1 on topic foo), then made not
    active (a broker shutting down)."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 1})
    join(coord, "g", "m1", ["foo"])
    coord.active = False
    return coord


NOT_AVAILABLE_CALLS = {
    # testConsumerGroupHeartbeatWhenNotStarted: a bare request, answered before validation
    "heartbeat": lambda c: [hb(c, "foo", "", 0).error],
    # testConsumerGroupDescribeCoordinatorNotActive: every id, an empty one too
    "consumer-describe": lambda c: [d.error for d in c.consumer_group_describe(["g", ""])],
}


@pytest.mark.parametrize("call", NOT_AVAILABLE_CALLS.values(), ids=NOT_AVAILABLE_CALLS)
def test_an_inactive_coordinator_answers_not_available_before_any_check(impl, call):
    # GroupCoordinatorServiceTest.testConsumerGroupHeartbeatWhenNotStarted /
    # testConsumerGroupDescribeCoordinatorNotActive (the KIP-848 APIs: Kafka 4's order)
    coord = inactive(impl)
    errors = call(coord)
    assert errors == [E.COORDINATOR_NOT_AVAILABLE] * len(errors)


CLASSIC_ADMIN_CALLS = {
    "delete-groups": lambda c, g: c.delete_groups([g])[g],
    "delete-offsets": lambda c, g: c.delete_offsets(g, [("foo", 0)])[0],
    "describe-group": lambda c, g: c.describe_group(g).error,
}


@pytest.mark.parametrize("call", CLASSIC_ADMIN_CALLS.values(), ids=CLASSIC_ADMIN_CALLS)
def test_an_inactive_coordinator_checks_the_group_id_first_on_classic_admin_apis(impl, call):
    # GroupCoordinatorServiceTest.testDeleteGroupsWhenNotStarted / testDeleteOffsetsWhenNotStarted /
    # testDescribeGroupsWhenNotStarted: these APIs follow Kafka 3.x's validateGroupStatus
    # (the group id, then whether the coordinator is active), where Kafka 4 answers
    # COORDINATOR_NOT_AVAILABLE for an invalid id too (docs/protocol.md)
    coord = inactive(impl)
    assert call(coord, "g") == E.COORDINATOR_NOT_AVAILABLE
    invalid = "" if call is CLASSIC_ADMIN_CALLS["delete-offsets"] else None
    assert call(coord, invalid) == E.INVALID_GROUP_ID


def test_an_inactive_coordinator_lists_no_group(impl):
    # GroupCoordinatorServiceTest.testListGroupsWhenNotStarted (an error, no groups)
    coord = inactive(impl)
    assert coord.list_groups() == []


def test_consumer_requests_to_a_loading_or_unowned_shard(impl):
    # GroupCoordinatorServiceTest.testConsumerGroupDescribeCoordinatorLoadInProgress
    coord, _ = make(impl, owned_shards=frozenset({shard_for("g")}))
    coord.set_topics({"foo": 1})
    coord.begin_loading(shard_for("x"))
    for group_id, error in (("x", E.COORDINATOR_LOAD_IN_PROGRESS), ("y", E.NOT_COORDINATOR)):
        assert join(coord, group_id, "m1", ["foo"]).error == error
        assert coord.consumer_group_describe([group_id])[0].error == error
        assert coord.delete_offsets(group_id, [("foo", 0)]) == (error, {})
        assert coord.delete_groups([group_id]) == {group_id: error}


def test_list_groups_while_a_shard_loads_lists_the_groups_held(impl):
    # GroupCoordinatorServiceTest.testListGroupsWithFailure: Kafka 4 answers
    # COORDINATOR_LOAD_IN_PROGRESS alone; fastcoord follows Kafka 3.x's handleListGroups
    # (the error, which the server adds, with the groups held so far)
    coord, _ = make(impl)
    coord.set_topics({"foo": 1})
    join(coord, "g", "m1", ["foo"])
    coord.begin_loading(shard_for("x"))
    assert coord.loading()
    assert [g.group_id for g in coord.list_groups()] == ["g"]


def test_list_groups_skips_the_shards_no_longer_ours(impl):
    # GroupCoordinatorServiceTest.testListGroupsFailedWithNotCoordinatorException
    coord, _ = make(impl)
    coord.set_topics({"foo": 1})
    join(coord, "g", "m1", ["foo"])
    join(coord, "x", "m1", ["foo"])
    coord.unload_shard(shard_for("x"))
    assert [(g.group_id, g.state) for g in coord.list_groups()] == [("g", "Stable")]


# ---------------------------------------------------------------------------------------
# ConsumerGroupDescribe
# ---------------------------------------------------------------------------------------
def test_describe_answers_each_id_in_order_with_kafkas_messages(impl):
    # GroupMetadataManagerTest.testConsumerGroupDescribeWithErrors / ...NoErrors
    coord, _ = make(impl)
    coord.set_topics({"foo": 1})
    join(coord, "g1", "m1", ["foo"])
    join(coord, "g2", "m2", ["foo"])
    coord.commit_offsets("simple", "", -1, {("foo", 0): 1})
    got = coord.consumer_group_describe(["g2", "nope", "g1", "simple", "g2"])
    assert [(d.group_id, d.error, d.error_message) for d in got] == [
        ("g2", E.NONE, None),
        ("nope", E.GROUP_ID_NOT_FOUND, "Group nope not found."),
        ("g1", E.NONE, None),
        ("simple", E.GROUP_ID_NOT_FOUND, "Group simple is not a consumer group."),
        ("g2", E.NONE, None)]
    assert [m.member_id for m in got[0].members] == ["m2"]


def test_described_assignor_is_the_one_most_members_prefer_else_the_default(impl):
    # ConsumerGroupTest.testPreferredServerAssignor / testAsDescribedGroup
    coord, _ = make(impl)
    coord.set_topics({"foo": 3})
    join(coord, "g", "m1", ["foo"], server_assignor="range")
    join(coord, "g", "m2", ["foo"], server_assignor="range")
    join(coord, "g", "m3", ["foo"], server_assignor="uniform")
    join(coord, "g", "m4", ["foo"])
    assert described(coord).assignor_name == "range"
    hb(coord, "g", "m1", -1)
    hb(coord, "g", "m3", -1)
    assert described(coord).assignor_name == "range"
    hb(coord, "g", "m2", -1)
    assert described(coord).assignor_name == "uniform"      # m4 asks for none
    hb(coord, "g", "m4", -1)
    d = described(coord)
    assert (d.state, d.members, d.assignor_name) == ("Empty", [], "uniform")


# ---------------------------------------------------------------------------------------
# ListGroups
# ---------------------------------------------------------------------------------------
def test_list_groups_by_state_and_type_filters(impl):
    # GroupMetadataManagerTest.testListGroups / ConsumerGroupTest.testGroupTypeFromString
    coord, _ = make(impl)
    coord.set_topics({"foo": 1})
    coord.commit_offsets("simple", "", -1, {("foo", 0): 1})
    join(coord, "c-empty", "m1", ["foo"])
    hb(coord, "c-empty", "m1", -1)
    join(coord, "c-stable", "m1", ["foo"])
    assert sorted(coord.list_groups()) == [
        ("c-empty", "consumer", "Empty", "consumer"),
        ("c-stable", "consumer", "Stable", "consumer"),
        ("simple", "", "Empty", "classic")]
    assert _listed(coord, states=["empty"]) == ["c-empty", "simple"]
    assert _listed(coord, types=["classic"]) == ["simple"]
    assert _listed(coord, states=["Empty"], types=["Consumer"]) == ["c-empty"]
    assert _listed(coord, states=["empty", "Assigning"], types=["consumer"]) == ["c-empty"]
    assert _listed(coord, types=["Invalid"]) == []
    assert _listed(coord, states=["Invalid"]) == []
    assert _listed(coord, types=["invalid", "CONSUMER"]) == ["c-empty", "c-stable"]


# ---------------------------------------------------------------------------------------
# DeleteGroups, DescribeGroups and OffsetDelete group ids
# ---------------------------------------------------------------------------------------
def test_delete_groups_answers_each_group_and_removes_the_deleted(impl):
    # GroupCoordinatorServiceTest.testDeleteGroups / ConsumerGroupTest.testValidateDeleteGroup
    coord, _ = make(impl)
    coord.set_topics({"foo": 1})
    join(coord, "emptied", "m1", ["foo"])
    assert coord.commit_offsets("emptied", "m1", 1, {("foo", 0): 7}, api_version=9) == \
        {("foo", 0): E.NONE}
    hb(coord, "emptied", "m1", -1)
    join(coord, "busy", "m1", ["foo"])
    coord.commit_offsets("simple", "", -1, {("foo", 0): 1})
    results = coord.delete_groups(["emptied", "busy", "simple", "nope", None, ""])
    assert results == {"emptied": E.NONE, "busy": E.NON_EMPTY_GROUP, "simple": E.NONE,
                       "nope": E.GROUP_ID_NOT_FOUND, None: E.INVALID_GROUP_ID,
                       "": E.GROUP_ID_NOT_FOUND}
    assert _listed(coord) == ["busy"]
    assert coord.fetch_offsets("emptied", None) == (E.NONE, {})
    assert coord.consumer_group_describe(["emptied"])[0].error == E.GROUP_ID_NOT_FOUND
    r = join(coord, "emptied", "m2", ["foo"])
    assert (r.member_epoch, described(coord, "emptied").group_epoch) == (1, 1)


def test_describe_and_offset_delete_take_an_empty_id_as_kafkas_service_does(impl):
    # GroupCoordinatorServiceTest.testDescribeGroupsInvalidGroupId / testDeleteOffsetsInvalidGroupId
    coord, _ = make(impl)
    assert coord.describe_group(None).error == E.INVALID_GROUP_ID
    d = coord.describe_group("")
    assert (d.error, d.state, d.members) == (E.NONE, "Dead", [])
    assert coord.delete_offsets("", [("foo", 0)]) == (E.INVALID_GROUP_ID, {})
    assert coord.delete_offsets(None, [("foo", 0)]) == (E.INVALID_GROUP_ID, {})
    # a blank id is not empty there: it goes to its shard
    assert coord.delete_offsets("  ", [("foo", 0)]) == (E.GROUP_ID_NOT_FOUND, {})


# ---------------------------------------------------------------------------------------
# subscribed topics (ConsumerGroup.isSubscribedToTopic) as OffsetDelete sees them
# ---------------------------------------------------------------------------------------
def test_a_topic_stays_subscribed_while_one_member_subscribes_to_it(impl):
    # ConsumerGroupTest.testIsSubscribedToTopic
    coord, _ = make(impl)
    coord.set_topics({"foo": 1, "bar": 1})
    join(coord, "g", "m1", ["foo"])
    join(coord, "g", "m2", ["bar", "missing"])
    coord.commit_offsets("g", "m1", _epoch(coord, "m1"), {("foo", 0): 1, ("bar", 0): 1, ("missing", 0): 1})
    # a subscribed name counts whether or not the topic exists
    assert _deletable(coord, "g", "foo", "bar", "missing") == {
        "foo": E.GROUP_SUBSCRIBED_TO_TOPIC, "bar": E.GROUP_SUBSCRIBED_TO_TOPIC,
        "missing": E.GROUP_SUBSCRIBED_TO_TOPIC}
    hb(coord, "g", "m1", -1)
    assert _deletable(coord, "g", "foo", "bar") == \
        {"foo": E.NONE, "bar": E.GROUP_SUBSCRIBED_TO_TOPIC}


def test_a_regex_topic_stays_subscribed_while_one_member_uses_the_regex(impl):
    # ConsumerGroupTest.testSubscribedRegularExpressionCount / testUpdateAndRemoveRegularExpression
    coord, _ = make(impl)
    coord.set_topics({"foo": 1, "bar": 1})
    join(coord, "g", "names", ["foo"])
    join(coord, "g", "r1", regex="ba.*")
    join(coord, "g", "r2", regex="ba.*")
    _settle(coord)
    coord.commit_offsets("g", "names", _epoch(coord, "names"), {("foo", 0): 1, ("bar", 0): 1})
    hb(coord, "g", "r1", -1)
    assert _deletable(coord, "g", "foo", "bar") == \
        {"foo": E.GROUP_SUBSCRIBED_TO_TOPIC, "bar": E.GROUP_SUBSCRIBED_TO_TOPIC}
    hb(coord, "g", "r2", -1)
    assert _deletable(coord, "g", "foo", "bar") == \
        {"foo": E.GROUP_SUBSCRIBED_TO_TOPIC, "bar": E.NONE}

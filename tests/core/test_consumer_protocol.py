"""The consumer group protocol (KIP-848) through the Python API, both twins.

Translations of Kafka's GroupMetadataManagerTest consumer-group cases (request
validation, member epochs, static membership, reconciliation, session and rebalance
timeouts, regex subscriptions, offsets with member epochs), written here against
fastcoord's API. Where a case's outcome depends on the assignor's choice, the group's
assignor is replaced by a fixed one, as Kafka's tests mock theirs.
"""
import pytest

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock

E = Errors
SESSION = 45_000
INTERVAL = 5_000


def make(impl, **config):
    clock = ManualClock(0)
    coord = GroupCoordinator(CoordinatorConfig(**config), clock=clock, impl=impl)
    return coord, clock


def hb(coord, group_id, member_id, epoch, **kw):
    out = []
    coord.consumer_group_heartbeat(group_id, member_id, epoch, callback=out.append, **kw)
    assert len(out) == 1, out
    return out[0]


def join(coord, group_id, member_id, topics=None, regex=None, **kw):
    kw.setdefault("rebalance_timeout_ms", 30_000)
    kw.setdefault("owned_partitions", {})
    return hb(coord, group_id, member_id, 0, subscribed_topic_names=topics,
              subscribed_topic_regex=regex, **kw)


class FixedAssignor:
    """Answers the next prepared target (Kafka's tests' MockPartitionAssignor)."""

    def __init__(self):
        self.next = None
        self.calls = 0

    def __call__(self, name, members, topics, current):
        self.calls += 1
        assert self.next is not None, "no target prepared"
        return {m[0]: {t: sorted(ps) for t, ps in self.next.get(m[0], {}).items()}
                for m in members}


def fixed(coord):
    assignor = FixedAssignor()
    coord._logic.consumers.assign = assignor
    return assignor


# ---------------------------------------------------------------------------------------
# request validation (testConsumerGroupHeartbeatRequestValidation)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(group_id="g", member_id="", member_epoch=1), "MemberId can't be empty."),
    (dict(group_id="g", member_id="  ", member_epoch=-1), "MemberId can't be empty."),
    (dict(group_id="", member_id="m", member_epoch=0), "GroupId can't be empty."),
    (dict(group_id="g", member_id="m", member_epoch=0, instance_id=""),
     "InstanceId can't be empty."),
    (dict(group_id="g", member_id="m", member_epoch=0, rack_id=""), "RackId can't be empty."),
    (dict(group_id="g", member_id="m", member_epoch=0, subscribed_topic_names=["t"],
          owned_partitions={}),
     "RebalanceTimeoutMs must be provided in first request."),
    (dict(group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=5000,
          subscribed_topic_names=["t"]),
     "TopicPartitions must be empty when (re-)joining."),
    (dict(group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=5000,
          subscribed_topic_names=["t"], owned_partitions={"t": [0]}),
     "TopicPartitions must be empty when (re-)joining."),
    # (a topic listing no partition is still an entry: Kafka refuses a non-empty array)
    (dict(group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=5000,
          subscribed_topic_names=["t"], owned_partitions={"t": []}),
     "TopicPartitions must be empty when (re-)joining."),
    (dict(group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=5000,
          owned_partitions={}),
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    (dict(group_id="g", member_id="m", member_epoch=-2), "InstanceId can't be null."),
    (dict(group_id="g", member_id="m", member_epoch=-3), "MemberEpoch is invalid."),
])
def test_invalid_requests_answer_invalid_request(impl, kwargs, message):
    coord, _ = make(impl)
    kwargs = dict(kwargs)
    gid, mid, epoch = kwargs.pop("group_id"), kwargs.pop("member_id"), kwargs.pop("member_epoch")
    result = hb(coord, gid, mid, epoch, **kwargs)
    assert (result.error, result.error_message) == (E.INVALID_REQUEST, message)
    assert coord.list_groups() == []


def test_unknown_assignor_is_unsupported(impl):
    coord, _ = make(impl)
    result = join(coord, "g", "m", ["t"], server_assignor="sticky")
    assert result.error == E.UNSUPPORTED_ASSIGNOR
    assert "uniform, range" in result.error_message
    assert join(coord, "g", "m", ["t"], server_assignor="range").error == E.NONE


def test_invalid_regex_answers_invalid_regular_expression(impl):
    coord, _ = make(impl)
    result = join(coord, "g", "m", regex="foo(")
    assert result.error == E.INVALID_REGULAR_EXPRESSION


def test_wrong_argument_types_raise(impl):
    coord, _ = make(impl)
    with pytest.raises(TypeError, match="member_epoch"):
        coord.consumer_group_heartbeat("g", "m", "0", callback=print)
    with pytest.raises(TypeError, match="subscribed_topic_names"):
        coord.consumer_group_heartbeat("g", "m", 0, subscribed_topic_names="t", callback=print)
    with pytest.raises(TypeError, match="owned_partitions"):
        coord.consumer_group_heartbeat("g", "m", 0, owned_partitions={"t": ["0"]}, callback=print)
    with pytest.raises(ValueError, match="owned_partitions"):
        coord.consumer_group_heartbeat("g", "m", 0, owned_partitions={"t": [-1]}, callback=print)
    with pytest.raises(TypeError, match="callback"):
        coord.consumer_group_heartbeat("g", "m", 0, callback=None)
    with pytest.raises(ValueError, match=r"topics\['t'\]"):
        coord.set_topics({"t": -1})


# ---------------------------------------------------------------------------------------
# joining, member ids, unknown groups and members
# ---------------------------------------------------------------------------------------
def test_member_joins_empty_group(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 6, "bar": 3})
    result = join(coord, "g", "m1", ["foo", "bar"])
    assert result.error == E.NONE
    assert (result.member_id, result.member_epoch) == ("m1", 1)
    assert result.heartbeat_interval_ms == INTERVAL
    assert result.assignment == {"foo": [0, 1, 2, 3, 4, 5], "bar": [0, 1, 2]}
    [desc] = coord.consumer_group_describe(["g"])
    assert (desc.state, desc.group_epoch, desc.assignment_epoch) == ("Stable", 1, 1)
    assert desc.members[0].assignment == desc.members[0].target_assignment


def test_member_id_is_made_when_not_given(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 1})
    first = join(coord, "g", "", ["foo"])
    second = join(coord, "g", "", ["foo"])
    assert first.error == second.error == E.NONE
    assert len(first.member_id) == 22 and first.member_id != second.member_id
    assert {m.member_id for m in coord.consumer_group_describe(["g"])[0].members} == \
        {first.member_id, second.member_id}


def test_unknown_group_and_member(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 1})
    assert hb(coord, "nope", "m", 1).error == E.GROUP_ID_NOT_FOUND
    join(coord, "g", "m1", ["foo"])
    assert hb(coord, "g", "stranger", 1).error == E.UNKNOWN_MEMBER_ID
    assert hb(coord, "g", "stranger", -1).error == E.UNKNOWN_MEMBER_ID


def test_heartbeat_to_a_classic_group_in_use_is_refused_without_upgrades(impl):
    # (with upgrades allowed, the join converts it: tests/core/test_consumer_migration.py)
    coord, _ = make(impl, group_consumer_migration_policy="downgrade")
    answers = []
    coord.join_group("g", "", "consumer", [("range", b"")], session_timeout_ms=10_000,
                     require_known_member_id=False, callback=answers.append)
    coord.advance_time(3_000)
    assert answers and answers[-1].error == E.NONE
    result = join(coord, "g", "m", ["foo"])
    assert result.error == E.GROUP_ID_NOT_FOUND
    assert "not a consumer group" in result.error_message


def test_empty_classic_group_becomes_a_consumer_group_keeping_offsets(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    assert coord.commit_offsets("g", "", -1, {("foo", 0): 42}) == {("foo", 0): E.NONE}
    assert join(coord, "g", "m", ["foo"]).error == E.NONE
    [listing] = coord.list_groups()
    assert listing.group_type == "consumer"
    error, offsets = coord.fetch_offsets("g", [("foo", 0)])
    assert error == E.NONE and offsets[("foo", 0)].offset == 42


def test_group_max_size(impl):
    coord, _ = make(impl, group_consumer_max_size=2)
    coord.set_topics({"foo": 3})
    assert join(coord, "g", "m1", ["foo"]).error == E.NONE
    assert join(coord, "g", "m2", ["foo"]).error == E.NONE
    assert join(coord, "g", "m3", ["foo"]).error == E.GROUP_MAX_SIZE_REACHED
    assert join(coord, "g", "m1", ["foo"]).error == E.NONE     # a member already in it


# ---------------------------------------------------------------------------------------
# member epochs (testConsumerGroupMemberEpochValidation)
# ---------------------------------------------------------------------------------------
def test_member_epoch_validation(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 6})
    assert join(coord, "g", "m1", ["foo"]).member_epoch == 1
    join(coord, "g", "m2", ["foo"])             # epoch 2: m1 must give some up
    result = hb(coord, "g", "m1", 2)
    assert result.error == E.FENCED_MEMBER_EPOCH and "greater member epoch" in result.error_message
    everything = {"foo": [0, 1, 2, 3, 4, 5]}
    r = hb(coord, "g", "m1", 1, owned_partitions=everything)
    assert r.member_epoch == 1 and len(r.assignment["foo"]) < 6
    kept = {"foo": r.assignment["foo"]}
    r = hb(coord, "g", "m1", 1, owned_partitions=kept)
    assert r.member_epoch == 2
    # the previous epoch with a subset of the assignment: accepted (the answer that
    # moved the member on may have been lost)
    assert hb(coord, "g", "m1", 1, owned_partitions=kept).error == E.NONE
    # ... with more, or without saying what it owns: fenced
    result = hb(coord, "g", "m1", 1, owned_partitions=everything)
    assert result.error == E.FENCED_MEMBER_EPOCH and "smaller member epoch" in result.error_message
    assert hb(coord, "g", "m1", 1).error == E.FENCED_MEMBER_EPOCH
    assert hb(coord, "g", "m1", 0).error == E.INVALID_REQUEST     # a rejoin needs every field


# ---------------------------------------------------------------------------------------
# reconciliation (testReconciliationProcess)
# ---------------------------------------------------------------------------------------
def _stable_two_members(coord):
    """m1 and m2 stable at epoch 2 with foo 0-2/bar 0-1 and foo 3-5/bar 2 (a fixed target)."""
    coord.set_topics({"foo": 6, "bar": 3})
    assignor = fixed(coord)
    assignor.next = {"m1": {"foo": [0, 1, 2], "bar": [0, 1]}}
    join(coord, "g", "m1", ["foo", "bar"])
    assignor.next = {"m1": {"foo": [0, 1, 2], "bar": [0, 1]}, "m2": {"foo": [3, 4, 5], "bar": [2]}}
    r = join(coord, "g", "m2", ["foo", "bar"])
    assert (r.member_epoch, r.assignment) == (2, {"foo": [3, 4, 5], "bar": [2]})
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1, 2], "bar": [0, 1]})
    assert (r.member_epoch, r.assignment) == (2, None)
    return assignor


def test_reconciliation_process(impl):
    coord, _ = make(impl)
    assignor = _stable_two_members(coord)
    assert coord.consumer_group_describe(["g"])[0].state == "Stable"
    # m3 joins: epoch 3, new target; all its partitions are still owned
    assignor.next = {"m1": {"foo": [0, 1], "bar": [0]}, "m2": {"foo": [2, 3], "bar": [2]},
                     "m3": {"foo": [4, 5], "bar": [1]}}
    r3 = join(coord, "g", "m3", ["foo", "bar"])
    assert (r3.member_epoch, r3.assignment) == (3, {})
    states = {m.member_id: m for m in coord.consumer_group_describe(["g"])[0].members}
    assert states["m3"].member_epoch == 3
    assert coord.consumer_group_describe(["g"])[0].state == "Reconciling"

    # m1 must first revoke foo 2 and bar 1: it stays at epoch 2
    r1 = hb(coord, "g", "m1", 2, owned_partitions={"foo": [0, 1, 2], "bar": [0, 1]})
    assert (r1.member_epoch, r1.assignment) == (2, {"foo": [0, 1], "bar": [0]})
    # still owning one of them: nothing moves, nothing new to say
    r1 = hb(coord, "g", "m1", 2, owned_partitions={"foo": [0, 1], "bar": [0, 1]})
    assert (r1.member_epoch, r1.assignment) == (2, None)
    # revoked: epoch 3, Stable
    r1 = hb(coord, "g", "m1", 2, owned_partitions={"foo": [0, 1], "bar": [0]})
    assert (r1.member_epoch, r1.assignment) == (3, None)

    # m2 must revoke foo 4 and 5; foo 2 (released by m1) waits for the revocation
    r2 = hb(coord, "g", "m2", 2, owned_partitions={"foo": [3, 4, 5], "bar": [2]})
    assert (r2.member_epoch, r2.assignment) == (2, {"foo": [3], "bar": [2]})

    # m3 gets bar 1, the only one of its partitions released yet
    r3 = hb(coord, "g", "m3", 3, owned_partitions={})
    assert (r3.member_epoch, r3.assignment) == (3, {"bar": [1]})

    # m2 revokes: it takes foo 2 and moves to epoch 3
    r2 = hb(coord, "g", "m2", 2, owned_partitions={"foo": [3], "bar": [2]})
    assert (r2.member_epoch, r2.assignment) == (3, {"foo": [2, 3], "bar": [2]})

    r3 = hb(coord, "g", "m3", 3, owned_partitions={"bar": [1]})
    assert (r3.member_epoch, r3.assignment) == (3, {"foo": [4, 5], "bar": [1]})
    desc = coord.consumer_group_describe(["g"])[0]
    assert desc.state == "Stable"
    for m in desc.members:
        assert m.assignment == m.target_assignment
    assert assignor.calls == 3


def _members(coord):
    return {m.member_id: m for m in coord.consumer_group_describe(["g"])[0].members}


def _assert_owned_once(coord):
    seen = {}
    for m in _members(coord).values():
        for topic, parts in m.assignment.items():
            for p in parts:
                assert (topic, p) not in seen, f"{topic}-{p} owned by {seen[(topic, p)]} and {m.member_id}"
                seen[(topic, p)] = m.member_id


def test_a_partition_is_never_owned_by_two_members(impl):
    coord, _ = make(impl)
    assignor = _stable_two_members(coord)
    # the two swap everything: each must wait for the other's revocation
    assignor.next = {"m1": {"foo": [3, 4, 5], "bar": [2]}, "m2": {"foo": [0, 1, 2], "bar": [0, 1]}}
    m2 = _members(coord)["m2"]
    hb(coord, "g", "m2", m2.member_epoch, subscribed_topic_names=["foo", "bar", "baz"],
       owned_partitions=m2.assignment)
    for _ in range(3):
        for mid in ("m2", "m1"):
            m = _members(coord)[mid]
            hb(coord, "g", mid, m.member_epoch, owned_partitions=m.assignment)
            _assert_owned_once(coord)
    members = _members(coord)
    assert members["m1"].assignment == {"foo": [3, 4, 5], "bar": [2]}
    assert members["m2"].assignment == {"foo": [0, 1, 2], "bar": [0, 1]}
    assert coord.consumer_group_describe(["g"])[0].state == "Stable"


# ---------------------------------------------------------------------------------------
# leaving, static membership
# ---------------------------------------------------------------------------------------
def test_leaving_member_bumps_group_epoch(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 4})
    join(coord, "g", "m1", ["foo"])
    join(coord, "g", "m2", ["foo"])
    result = hb(coord, "g", "m2", -1)
    assert (result.error, result.member_id, result.member_epoch) == (E.NONE, "m2", -1)
    desc = coord.consumer_group_describe(["g"])[0]
    assert desc.group_epoch == 3 and [m.member_id for m in desc.members] == ["m1"]
    assert desc.state == "Assigning"        # the target follows at the next heartbeat
    hb(coord, "g", "m1", 1, owned_partitions={})
    assert coord.consumer_group_describe(["g"])[0].assignment_epoch == 3


def test_static_member_gets_back_its_assignment_on_rejoin(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 4})
    join(coord, "g", "a", ["foo"], instance_id="i-a")
    join(coord, "g", "b", ["foo"], instance_id="i-b")
    for mid in ("a", "b", "a", "b"):
        m = {m.member_id: m for m in coord.consumer_group_describe(["g"])[0].members}[mid]
        hb(coord, "g", mid, m.member_epoch, instance_id=m.instance_id, owned_partitions=m.assignment)
    before = {m.instance_id: m for m in coord.consumer_group_describe(["g"])[0].members}
    epoch = coord.consumer_group_describe(["g"])[0].group_epoch
    # b leaves for now: no epoch bump, partitions kept for it
    r = hb(coord, "g", "b", before["i-b"].member_epoch, instance_id="i-b")
    r = hb(coord, "g", "b", -2, instance_id="i-b")
    assert (r.error, r.member_epoch) == (E.NONE, -2)
    assert coord.consumer_group_describe(["g"])[0].group_epoch == epoch
    # a new incarnation with the same instance id takes its place and its partitions
    r = join(coord, "g", "b2", ["foo"], instance_id="i-b")
    assert r.error == E.NONE
    assert r.assignment == before["i-b"].assignment
    assert r.member_epoch == before["i-b"].member_epoch
    desc = coord.consumer_group_describe(["g"])[0]
    assert desc.group_epoch == epoch
    assert sorted(m.member_id for m in desc.members) == ["a", "b2"]
    # the old member id is fenced by the new one
    assert hb(coord, "g", "b", r.member_epoch, instance_id="i-b").error == E.FENCED_INSTANCE_ID


def test_static_instance_id_in_use_is_unreleased(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "a", ["foo"], instance_id="i")
    r = join(coord, "g", "a2", ["foo"], instance_id="i")
    assert r.error == E.UNRELEASED_INSTANCE_ID


def test_unknown_static_member(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "a", ["foo"], instance_id="i")
    assert hb(coord, "g", "a", 1, instance_id="other").error == E.UNKNOWN_MEMBER_ID
    assert hb(coord, "g", "x", -2, instance_id="other").error == E.UNKNOWN_MEMBER_ID
    assert hb(coord, "g", "x", -1, instance_id="i").error == E.FENCED_INSTANCE_ID


def test_static_member_leaving_for_good_bumps_the_epoch(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "a", ["foo"], instance_id="i")
    join(coord, "g", "b", ["foo"])
    epoch = coord.consumer_group_describe(["g"])[0].group_epoch
    assert hb(coord, "g", "a", -1, instance_id="i").error == E.NONE
    desc = coord.consumer_group_describe(["g"])[0]
    assert desc.group_epoch == epoch + 1 and [m.member_id for m in desc.members] == ["b"]
    assert join(coord, "g", "a3", ["foo"], instance_id="i").error == E.NONE


# ---------------------------------------------------------------------------------------
# timeouts (testSessionTimeoutExpiration, testRebalanceTimeoutExpiration)
# ---------------------------------------------------------------------------------------
def test_session_timeout_fences_a_silent_member(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    join(coord, "g", "m2", ["foo"])
    for _ in range(8):                      # m1 heartbeats every 5 s, m2 is silent
        coord.advance_time(INTERVAL)
        m1 = coord.consumer_group_describe(["g"])[0].members[0]
        assert hb(coord, "g", "m1", m1.member_epoch, owned_partitions=m1.assignment).error == E.NONE
    coord.advance_time(INTERVAL - 1)
    members = [m.member_id for m in coord.consumer_group_describe(["g"])[0].members]
    assert members == ["m1", "m2"]          # 1 ms before its deadline
    coord.advance_time(1)                   # the deadline: it fires (a Kafka timer's time)
    assert [m.member_id for m in coord.consumer_group_describe(["g"])[0].members] == ["m1"]
    assert hb(coord, "g", "m2", 2).error == E.UNKNOWN_MEMBER_ID


def test_static_member_left_for_now_is_removed_after_its_session(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "a", ["foo"], instance_id="i")
    hb(coord, "g", "a", -2, instance_id="i")
    coord.advance_time(SESSION + 1)
    desc = coord.consumer_group_describe(["g"])[0]
    assert desc.members == [] and desc.state == "Empty"
    assert join(coord, "g", "a2", ["foo"], instance_id="i").error == E.NONE


def test_rebalance_timeout_fences_a_member_that_does_not_revoke(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"], rebalance_timeout_ms=10_000)
    join(coord, "g", "m2", ["foo"])
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]})
    assert r.member_epoch == 1 and r.assignment is not None   # asked to revoke one
    for _ in range(2):
        coord.advance_time(4_000)
        hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]})   # heartbeats, never revokes
    assert [m.member_id for m in coord.consumer_group_describe(["g"])[0].members] == ["m1", "m2"]
    coord.advance_time(2_001)
    assert [m.member_id for m in coord.consumer_group_describe(["g"])[0].members] == ["m2"]
    assert hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]}).error == E.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_is_cancelled_once_revoked(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"], rebalance_timeout_ms=10_000)
    join(coord, "g", "m2", ["foo"])
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]})
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": r.assignment["foo"]})
    assert r.member_epoch == 2
    for _ in range(4):
        coord.advance_time(4_000)
        m1 = coord.consumer_group_describe(["g"])[0].members[0]
        hb(coord, "g", "m1", m1.member_epoch, owned_partitions=m1.assignment)
        m2 = coord.consumer_group_describe(["g"])[0].members[1]
        hb(coord, "g", "m2", m2.member_epoch, owned_partitions=m2.assignment)
    assert len(coord.consumer_group_describe(["g"])[0].members) == 2


# ---------------------------------------------------------------------------------------
# subscriptions: topic changes, regular expressions
# ---------------------------------------------------------------------------------------
def test_subscription_change_triggers_a_new_target(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2, "bar": 2})
    join(coord, "g", "m1", ["foo"])
    r = hb(coord, "g", "m1", 1, subscribed_topic_names=["foo", "bar"], owned_partitions={"foo": [0, 1]})
    assert r.member_epoch == 2
    assert r.assignment == {"foo": [0, 1], "bar": [0, 1]}


def test_new_partitions_retarget_at_the_next_heartbeat(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    coord.set_topics({"foo": 4})
    desc = coord.consumer_group_describe(["g"])[0]
    assert desc.group_epoch == 1                 # lazily: nothing until a heartbeat
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]})
    assert (r.member_epoch, r.assignment) == (2, {"foo": [0, 1, 2, 3]})


def test_subscribing_to_a_missing_topic_assigns_it_once_created(impl):
    coord, _ = make(impl)
    join(coord, "g", "m1", ["later"])
    coord.set_topics({"later": 1})
    r = hb(coord, "g", "m1", 1, owned_partitions={})
    assert r.assignment == {"later": [0]}


def test_regex_is_resolved_at_a_later_heartbeat(impl):
    coord, clock = make(impl)
    coord.set_topics({"orders-eu": 1, "orders-us": 2, "payments": 1})
    r = join(coord, "g", "m1", regex="orders-.*")
    assert r.error == E.NONE and r.assignment == {}      # resolved asynchronously
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={})
    assert r.assignment == {"orders-eu": [0], "orders-us": [0, 1]}
    # a full match, RE2 syntax: "orders" alone does not match
    coord.set_topics({"orders-eu": 1, "orders-us": 2, "payments": 1, "orders": 1,
                      "orders-ap": 1})
    owned = r.assignment
    # (a group's regexes are resolved at most once per 10 s, as Kafka batches them)
    clock.advance(10_001)
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions=owned)
    r2 = hb(coord, "g", "m1", r.member_epoch, owned_partitions=owned)
    got = r2.assignment or r.assignment
    assert got == {"orders-ap": [0], "orders-eu": [0], "orders-us": [0, 1]}


def test_a_groups_regexes_are_resolved_at_most_once_per_10_s(impl):
    """Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS: within 10 s of a resolution neither
    a new topic nor a new regex is resolved; the group's heartbeats meanwhile take the
    slow path, and the first one after the interval resolves both."""
    coord, clock = make(impl)
    coord.set_topics({"orders-eu": 1, "payments": 1})
    r1 = join(coord, "g", "m1", regex="orders-.*")
    r1 = hb(coord, "g", "m1", r1.member_epoch, owned_partitions={})     # resolved, t=0
    assert r1.assignment == {"orders-eu": [0]}
    clock.advance(4_000)
    coord.set_topics({"orders-eu": 1, "orders-us": 1, "payments": 1})
    r2 = join(coord, "g", "m2", regex="pay.*")
    epoch = r2.member_epoch
    for step in (0, 3_000, 3_000):      # 4 s, 7 s, 10 s after the resolution
        clock.advance(step)
        r1 = hb(coord, "g", "m1", r1.member_epoch, owned_partitions=r1.assignment or {})
        r2 = hb(coord, "g", "m2", r2.member_epoch, owned_partitions={})
        assert (r2.member_epoch, r2.assignment or {}) == (epoch, {}), r2
        assert set(r1.assignment or {}) <= {"orders-eu"}     # orders-us not yet
    clock.advance(1)                    # 10.001 s: the next heartbeat resolves both,
    r1 = hb(coord, "g", "m1", r1.member_epoch)      # a steady one (not answered by the table)
    r2 = hb(coord, "g", "m2", r2.member_epoch, owned_partitions={})
    for _ in range(3):
        r1 = hb(coord, "g", "m1", r1.member_epoch, owned_partitions={"orders-eu": [0]})
        r2 = hb(coord, "g", "m2", r2.member_epoch, owned_partitions=r2.assignment or {})
    d = coord.consumer_group_describe(["g"])[0]
    assert {m.member_id: m.assignment for m in d.members} == {
        "m1": {"orders-eu": [0], "orders-us": [0]}, "m2": {"payments": [0]}}


def test_new_topics_inside_the_window_reach_a_steady_heartbeat_after_it(impl):
    """The group waiting for the 10 s window is kept off the member table's fast path:
    once the window has passed, a steady heartbeat (all optional fields None) still
    resolves the regex against the topics created inside it."""
    coord, clock = make(impl)
    coord.set_topics({"orders-eu": 1})
    r = join(coord, "g", "m1", regex="orders-.*")
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={})
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={"orders-eu": [0]})
    epoch = r.member_epoch
    clock.advance(4_000)
    coord.set_topics({"orders-eu": 1, "orders-us": 1})
    assert hb(coord, "g", "m1", epoch, owned_partitions={"orders-eu": [0]}).member_epoch \
        == epoch                        # inside the window: not resolved
    clock.advance(6_001)
    r = hb(coord, "g", "m1", epoch)     # steady: resolved, a new epoch and the new topic
    assert r.member_epoch > epoch and r.assignment == {"orders-eu": [0], "orders-us": [0]}


def test_a_regex_is_resolved_with_the_triggering_heartbeats_topic_filter(impl):
    """Kafka resolves a group's regexes with the Describe rights of the request that
    triggers the resolution (KAFKA-18813): `topic_filter` names those topics."""
    coord, clock = make(impl)
    coord.set_topics({"orders-eu": 1, "orders-us": 2, "payments": 1})
    seen = []

    def only_us(topic):
        seen.append(topic)
        return topic == "orders-us"

    r = join(coord, "g", "m1", regex="orders-.*", topic_filter=only_us)
    assert r.error == E.NONE and r.assignment == {}
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={}, topic_filter=only_us)
    assert r.assignment == {"orders-us": [0, 1]}
    assert sorted(set(seen)) == ["orders-eu", "orders-us", "payments"]
    # without a filter the next resolution (new topics) reaches every match
    coord.set_topics({"orders-eu": 1, "orders-us": 2, "payments": 1, "orders-ap": 1})
    owned = r.assignment
    clock.advance(10_001)       # (at most one resolution per 10 s)
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions=owned)
    r2 = hb(coord, "g", "m1", r.member_epoch, owned_partitions=owned)
    assert (r2.assignment or r.assignment) == {"orders-ap": [0], "orders-eu": [0],
                                                "orders-us": [0, 1]}


def test_a_topic_filter_that_raises_denies_every_topic_and_the_heartbeat_is_answered(impl):
    coord, _ = make(impl)
    coord.set_topics({"orders-eu": 1})

    def broken(topic):
        raise RuntimeError("rights store down")

    r = join(coord, "g", "m1", regex="orders-.*", topic_filter=broken)
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={}, topic_filter=broken)
    assert r.error == E.NONE and not r.assignment       # (None: unchanged, still none)
    (member,) = coord.consumer_group_describe(["g"])[0].members
    assert member.assignment == {} and member.target_assignment == {}
    with pytest.raises(TypeError, match="topic_filter"):
        coord.consumer_group_heartbeat("g", "m1", r.member_epoch, topic_filter="orders",
                                       callback=print)


def test_regex_uses_re2_not_python_re(impl):
    coord, _ = make(impl)
    coord.set_topics({"aaaa": 1})
    # a backreference is Python re syntax that RE2 refuses
    assert join(coord, "g", "m1", regex=r"(a)\1").error == E.INVALID_REGULAR_EXPRESSION


def test_an_invalid_regex_is_answered_not_logged_by_re2(impl, capfd):
    # RE2 logs a parse failure to the process's stderr, pattern included, unless told
    # not to: a client sending megabyte patterns would fill the server's log.
    coord, _ = make(impl)
    capfd.readouterr()
    assert join(coord, "g", "m1", regex="x" * 10_000 + "(").error == \
        E.INVALID_REGULAR_EXPRESSION
    assert "x" * 100 not in capfd.readouterr().err


def test_compiled_regexes_are_not_kept_after_their_heartbeat(impl):
    # google-re2's compile() keeps the last 128 compiled patterns in a module cache, each
    # up to RE2's memory budget (8 MiB), whoever sent them; a client cycling through
    # large patterns could pin about a gigabyte. What a group needs it keeps itself.
    import re2
    coord, _ = make(impl)
    coord.set_topics({"orders-eu": 1, "orders-us": 2})
    re2.purge()
    r = join(coord, "g", "m1", regex="orders-.*")
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={})
    assert r.assignment == {"orders-eu": [0], "orders-us": [0, 1]}
    assert re2._Regexp._make.cache_info().currsize == 0


# ---------------------------------------------------------------------------------------
# offsets with member epochs (OffsetCommit v9, OffsetFetch v9)
# ---------------------------------------------------------------------------------------
def test_offset_commit_checks_the_member_epoch(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    assert coord.commit_offsets("g", "m1", 1, {("foo", 0): 10}) == {("foo", 0): E.NONE}
    assert coord.commit_offsets("g", "m1", 0, {("foo", 0): 11}) == {("foo", 0): E.STALE_MEMBER_EPOCH}
    assert coord.commit_offsets("g", "m1", 2, {("foo", 0): 11}) == {("foo", 0): E.STALE_MEMBER_EPOCH}
    assert coord.commit_offsets("g", "zz", 1, {("foo", 0): 11}) == {("foo", 0): E.UNKNOWN_MEMBER_ID}
    # an admin's commit to a group with members
    assert coord.commit_offsets("g", "", -1, {("foo", 0): 11}) == {("foo", 0): E.UNKNOWN_MEMBER_ID}
    # a consumer-protocol member commits with OffsetCommit v9 or later
    assert coord.commit_offsets("g", "m1", 1, {("foo", 0): 11}, api_version=8) == \
        {("foo", 0): E.UNSUPPORTED_VERSION}
    assert coord.commit_offsets("g", "m1", 1, {("foo", 0): 12}, api_version=9) == \
        {("foo", 0): E.NONE}
    assert coord.fetch_offsets("g", [("foo", 0)])[1][("foo", 0)].offset == 12


def test_offset_fetch_checks_the_member_epoch(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    coord.commit_offsets("g", "m1", 1, {("foo", 1): 5})
    assert coord.fetch_offsets("g", [("foo", 1)], member_id="m1", member_epoch=1)[0] == E.NONE
    assert coord.fetch_offsets("g", [("foo", 1)], member_id="m1", member_epoch=3)[0] == \
        E.STALE_MEMBER_EPOCH
    assert coord.fetch_offsets("g", [("foo", 1)], member_id="x", member_epoch=1)[0] == \
        E.UNKNOWN_MEMBER_ID
    assert coord.fetch_offsets("g", [("foo", 1)])[0] == E.NONE      # an admin's fetch


# ---------------------------------------------------------------------------------------
# reads: list, describe, delete
# ---------------------------------------------------------------------------------------
def test_list_groups_filters_by_type_and_state(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "cg", "m1", ["foo"])
    coord.commit_offsets("simple", "", -1, {("foo", 0): 1})
    kinds = {g.group_id: g.group_type for g in coord.list_groups()}
    assert kinds == {"cg": "consumer", "simple": "classic"}
    assert [g.group_id for g in coord.list_groups(types=["Consumer"])] == ["cg"]
    assert [g.group_id for g in coord.list_groups(types=["classic"])] == ["simple"]
    assert [g.group_id for g in coord.list_groups(states=["stable"], types=["consumer"])] == ["cg"]
    assert coord.list_groups(states=["empty"], types=["consumer"]) == []


def test_describe_unknown_and_classic_groups(impl):
    coord, _ = make(impl)
    coord.commit_offsets("simple", "", -1, {("foo", 0): 1})
    unknown, classic = coord.consumer_group_describe(["nope", "simple"])
    assert unknown.error == classic.error == E.GROUP_ID_NOT_FOUND


def test_describe_of_an_empty_group_id_is_invalid_group_id(impl):
    # Kafka's GroupCoordinatorService answers an empty id INVALID_GROUP_ID before any
    # shard is asked (the classic DescribeGroups allows one; this API does not)
    coord, _ = make(impl)
    empty, unknown = coord.consumer_group_describe(["", "nope"])
    assert (empty.error, empty.group_id, empty.members) == (E.INVALID_GROUP_ID, "", [])
    assert unknown.error == E.GROUP_ID_NOT_FOUND


def test_describe_group_describes_a_consumer_group_in_classic_form(impl):
    """The Python API describes a consumer group too, its members in the classic
    encodings (over the wire DescribeGroups answers it Dead, as Kafka 4 does)."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"], rack_id="r1", client_id="c1", client_host="/10.0.0.1")
    desc = coord.describe_group("g")
    assert (desc.error, desc.state, desc.protocol_type, desc.protocol_name) == \
        (E.NONE, "Stable", "consumer", "uniform")
    [m] = desc.members
    assert (m.member_id, m.client_id, m.client_host) == ("m1", "c1", "/10.0.0.1")
    # ConsumerProtocolSubscription v3 / ConsumerProtocolAssignment v3
    assert m.metadata[:2] == b"\x00\x03" and b"foo" in m.metadata and m.metadata.endswith(b"\x00\x02r1")
    assert m.assignment == (b"\x00\x03" + b"\x00\x00\x00\x01" + b"\x00\x03foo" + b"\x00\x00\x00\x02"
                            + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x01" + b"\xff\xff\xff\xff")


def test_delete_groups_refuses_a_consumer_group_with_members(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    assert coord.delete_groups(["g"]) == {"g": E.NON_EMPTY_GROUP}
    hb(coord, "g", "m1", -1)
    assert coord.delete_groups(["g"]) == {"g": E.NONE}
    assert coord.consumer_group_describe(["g"])[0].error == E.GROUP_ID_NOT_FOUND


def test_classic_join_to_an_empty_consumer_group_makes_it_classic(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    answers = []
    coord.join_group("g", "", "consumer", [("range", b"")], session_timeout_ms=10_000,
                     require_known_member_id=False, callback=answers.append)
    assert answers[-1].error == E.INCONSISTENT_GROUP_PROTOCOL
    hb(coord, "g", "m1", -1)
    coord.join_group("g", "", "consumer", [("range", b"")], session_timeout_ms=10_000,
                     require_known_member_id=False, callback=answers.append)
    coord.advance_time(3_000)
    assert answers[-1].error == E.NONE
    assert coord.list_groups()[0].group_type == "classic"


# ---------------------------------------------------------------------------------------
# durability: the store gets each change before the answer; a restart keeps partitions
# ---------------------------------------------------------------------------------------
def _stable(coord, group_id, members):
    """Heartbeat every member until the group is Stable."""
    for _ in range(6):
        for m in coord.consumer_group_describe([group_id])[0].members:
            hb(coord, group_id, m.member_id, m.member_epoch, instance_id=m.instance_id,
               owned_partitions=m.assignment)
        if coord.consumer_group_describe([group_id])[0].state == "Stable":
            return
    raise AssertionError("the group did not settle")


def test_restart_within_the_session_keeps_every_partition(impl):
    from fastcoord.core.store import InMemoryStore
    from fastcoord import shard_for
    store = InMemoryStore()
    coord = GroupCoordinator(clock=ManualClock(0), store=store, impl=impl)
    coord.set_topics({"foo": 6, "bar": 2})
    join(coord, "g", "a", ["foo", "bar"])
    join(coord, "g", "b", ["foo"], instance_id="i-b")
    join(coord, "g", "c", ["foo", "bar"], rack_id="r1")
    _stable(coord, "g", 3)
    coord.commit_offsets("g", "a", coord.consumer_group_describe(["g"])[0].members[0].member_epoch,
                         {("foo", 0): 7})
    before = coord.consumer_group_describe(["g"])[0]

    again = GroupCoordinator(clock=ManualClock(10_000), store=store, impl=impl)
    again.set_topics({"foo": 6, "bar": 2})
    shard = shard_for("g", 50)
    again.begin_loading(shard)
    again.load_group("g", store.groups["g"], store.offsets.get("g", {}))
    again.finish_loading(shard)
    assert again.consumer_group_describe(["g"])[0] == before
    for m in before.members:
        r = hb(again, "g", m.member_id, m.member_epoch, instance_id=m.instance_id,
               owned_partitions=m.assignment)
        assert (r.error, r.member_epoch, r.assignment) == (E.NONE, m.member_epoch, None)
    assert again.consumer_group_describe(["g"])[0].group_epoch == before.group_epoch
    assert again.fetch_offsets("g", [("foo", 0)])[1][("foo", 0)].offset == 7
    # sessions restarted at the load: silent members go after a session from then
    again.advance_time(SESSION)
    assert again.consumer_group_describe(["g"])[0].members == []


def test_the_answer_waits_for_the_store(impl):
    from fastcoord.core.store import DeferredStore
    store = DeferredStore()
    coord = GroupCoordinator(clock=ManualClock(0), store=store, impl=impl)
    coord.set_topics({"foo": 2})
    out = []
    coord.consumer_group_heartbeat("g", "m1", 0, rebalance_timeout_ms=1000,
                                   subscribed_topic_names=["foo"], owned_partitions={},
                                   callback=out.append)
    assert out == [] and len(store.pending) == 1
    store.complete_all()
    assert out[0].error == E.NONE and out[0].assignment == {"foo": [0, 1]}
    # a steady heartbeat changes nothing: nothing to write, answered at once
    coord.consumer_group_heartbeat("g", "m1", 1, callback=out.append)
    assert len(out) == 2 and store.pending == []
    # a failed write answers its error and the group is as stored (m2 never joined);
    # the next write carries the whole group
    coord.consumer_group_heartbeat("g", "m2", 0, rebalance_timeout_ms=1000,
                                   subscribed_topic_names=["foo"], owned_partitions={},
                                   callback=out.append)
    store.complete(0, E.COORDINATOR_NOT_AVAILABLE)
    assert out[-1].error == E.COORDINATOR_NOT_AVAILABLE
    coord.consumer_group_heartbeat("g", "m1", 1, owned_partitions={"foo": [0, 1]},
                                   callback=out.append)
    assert store.pending[0][2]["full"] is True
    store.complete_all()
    assert out[-1].error == E.NONE and out[-1].member_epoch == 1
    assert sorted(store.groups["g"]["members"]) == ["m1"]


def test_a_member_that_rejoins_as_another_instance_frees_its_old_instance_id(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"], instance_id="i-old")
    assert join(coord, "g", "m1", ["foo"], instance_id="i-new").error == E.NONE
    assert hb(coord, "g", "m1", -1, instance_id="i-new").error == E.NONE
    # the old instance id names no member any more: a new member may take it
    assert join(coord, "g", "m2", ["foo"], instance_id="i-old").error == E.NONE
    assert [m.instance_id for m in coord.consumer_group_describe(["g"])[0].members] == ["i-old"]


def test_a_member_copy_carries_every_field():
    # The slow path copies the member at every heartbeat, field by field: a field the
    # copy left out would be lost at the member's next heartbeat
    from fastcoord.core.consumer import ConsumerMember
    member = ConsumerMember("m")
    for i, name in enumerate(ConsumerMember.__slots__):
        setattr(member, name, ("value", i))
    same, renamed = member.copy(), member.copy("other")
    for name in ConsumerMember.__slots__:
        assert getattr(same, name) is getattr(member, name), name
        if name != "member_id":
            assert getattr(renamed, name) is getattr(member, name), name
    assert renamed.member_id == "other"


def test_a_reloaded_targets_unchanged_members_are_not_written_again(impl):
    """After a load, a new target equal to a member's loaded one is no change: the
    record of the next epoch names only the members whose target moved."""
    from fastcoord.core.store import InMemoryStore
    from fastcoord import shard_for

    class Recording(InMemoryStore):
        def store_consumer_group(self, group_id, record, done):
            self.records.append(record)
            super().store_consumer_group(group_id, record, done)

    store = Recording()
    store.records = []
    coord = GroupCoordinator(clock=ManualClock(0), store=store, impl=impl)
    coord.set_topics({"foo": 6, "bar": 2})
    join(coord, "g", "a", ["foo", "bar"])
    join(coord, "g", "b", ["foo"])
    _stable(coord, "g", 2)
    before = coord.consumer_group_describe(["g"])[0]

    again = GroupCoordinator(clock=ManualClock(10_000), store=store, impl=impl)
    again.set_topics({"foo": 6, "bar": 2, "baz": 3})
    shard = shard_for("g", 50)
    again.begin_loading(shard)
    again.load_group("g", store.groups["g"], store.offsets.get("g", {}))
    again.finish_loading(shard)
    for m in before.members:
        hb(again, "g", m.member_id, m.member_epoch, owned_partitions=m.assignment)
    store.records.clear()
    # c subscribes to a topic nobody else does: a new epoch, a's and b's targets as loaded
    join(again, "g", "c", ["baz"])
    assert again.consumer_group_describe(["g"])[0].group_epoch == before.group_epoch + 1
    assert store.records and set(store.records[0]["members"]) == {"c"}

"""Further translations of Apache Kafka 4.0/4.1's consumer-group cases
(GroupMetadataManagerTest, CurrentAssignmentBuilderTest, ConsumerGroupTest,
OffsetMetadataManagerTest) that the other consumer-protocol test files do not cover:
group states, static members, the group size check, regex resolutions, reconciliation
steps, offsets and admin calls. Both twins, with the helpers of
tests/core/test_consumer_protocol.py and tests/core/test_consumer_protocol_more.py.

Each test's docstring names the Kafka case (and, where the case is about a code path
rather than a test, the Kafka method) whose outcome it asserts.
"""
import pytest

from tests.core.test_consumer_protocol import E, SESSION, fixed, hb, join, make
from tests.core.test_consumer_protocol_more import described, members

FOO3 = {"foo": [0, 1, 2]}


def _heartbeat_all(coord, group_id="g"):
    """One heartbeat of every member, each saying it owns what it was given."""
    for m in described(coord, group_id).members:
        if m.member_epoch < 0:
            continue
        hb(coord, group_id, m.member_id, m.member_epoch, instance_id=m.instance_id,
           owned_partitions=m.assignment)


def _settle(coord, clock, rounds=6, group_id="g"):
    """Heartbeat rounds 11 s apart (past the 10 s regex batching) until Stable."""
    for _ in range(rounds):
        coord.advance_time(11_000)
        _heartbeat_all(coord, group_id)
        if described(coord, group_id).state == "Stable":
            return
    raise AssertionError("the group did not settle")


# ---------------------------------------------------------------------------------------
# group states (ConsumerGroupTest.testGroupState*, ConsumerGroup.maybeUpdateGroupState)
# ---------------------------------------------------------------------------------------
def test_group_states_through_a_rebalance(impl):
    """ConsumerGroupTest.testUpdateGroupState / GroupMetadataManagerTest
    testConsumerGroupStates: Empty without members, Assigning while the group epoch is
    ahead of the assignment epoch, Reconciling while a member is not at the target
    epoch, Stable once every member is."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 3})
    assignor = fixed(coord)
    assignor.next = {"m1": FOO3}
    join(coord, "g", "m1", ["foo"])
    assert described(coord).state == "Stable"
    # m2 joins: new epoch and target; m2 waits for foo 2, m1 must revoke it
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2]}}
    join(coord, "g", "m2", ["foo"])
    assert described(coord).state == "Reconciling"
    # m2 leaves: the epoch is bumped, no target yet: Assigning
    hb(coord, "g", "m2", -1)
    d = described(coord)
    assert (d.state, d.group_epoch, d.assignment_epoch) == ("Assigning", 3, 2)
    assignor.next = {"m1": FOO3}
    r = hb(coord, "g", "m1", 1, owned_partitions=FOO3)
    assert (r.member_epoch, described(coord).state) == (3, "Stable")
    hb(coord, "g", "m1", -1)
    assert described(coord).state == "Empty"


def test_a_static_member_away_leaves_the_group_reconciling(impl):
    """ConsumerGroup.maybeUpdateGroupState: a static member that left for now has epoch
    -2, never the target epoch, so the group is Reconciling until it is replaced or its
    session ends (then Assigning: the group epoch is bumped)."""
    coord, clock = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "a", ["foo"], instance_id="i-a")
    join(coord, "g", "b", ["foo"])
    _settle(coord, clock)
    epoch = described(coord).group_epoch
    assert hb(coord, "g", "a", members(coord)["a"].member_epoch, instance_id="i-a")\
        .error == E.NONE
    assert hb(coord, "g", "a", -2, instance_id="i-a").member_epoch == -2
    d = described(coord)
    assert (d.state, d.group_epoch) == ("Reconciling", epoch)
    assert members(coord)["a"].member_epoch == -2


# ---------------------------------------------------------------------------------------
# static members (testNoGroupEpochBumpWhenStaticMemberTemporarilyLeaves,
# testSessionTimeoutExpirationStaticMember, consumerGroupStaticMemberGroupLeave)
# ---------------------------------------------------------------------------------------
def test_a_static_members_temporary_leave_does_not_restart_its_session(impl):
    """GroupMetadataManager.consumerGroupLeave / consumerGroupStaticMemberGroupLeave:
    a leave (-1 or -2) is not a heartbeat and schedules no session timeout; the -2
    member goes when the session of its last heartbeat ends
    (testSessionTimeoutExpirationStaticMember)."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "a", ["foo"], instance_id="i-a")
    join(coord, "g", "b", ["foo"])
    coord.advance_time(30_000)
    hb(coord, "g", "b", 2, owned_partitions={})
    assert hb(coord, "g", "a", -2, instance_id="i-a").error == E.NONE
    coord.advance_time(SESSION - 30_000 - 1)
    assert "a" in members(coord)
    hb(coord, "g", "b", members(coord)["b"].member_epoch, owned_partitions={})
    coord.advance_time(1)           # 45 s after a's last heartbeat (its join)
    assert "a" not in members(coord)


def test_a_static_member_leaving_while_revoking_releases_what_it_was_revoking(impl):
    """consumerGroupStaticMemberGroupLeave writes the member at epoch -2 with no
    partitions pending revocation: what it was to give up is free for the member
    waiting for it, while its assigned partitions stay held for its successor."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 3})
    assignor = fixed(coord)
    assignor.next = {"a": FOO3}
    join(coord, "g", "a", ["foo"], instance_id="i-a")
    assignor.next = {"a": {"foo": [0, 1]}, "b": {"foo": [2]}}
    assert join(coord, "g", "b", ["foo"]).assignment == {}
    r = hb(coord, "g", "a", 1, instance_id="i-a", owned_partitions=FOO3)
    assert (r.member_epoch, r.assignment) == (1, {"foo": [0, 1]})     # revoking foo 2
    assert hb(coord, "g", "a", -2, instance_id="i-a").member_epoch == -2
    a = members(coord)["a"]
    assert (a.member_epoch, a.assignment) == (-2, {"foo": [0, 1]})
    r = hb(coord, "g", "b", 2, owned_partitions={})
    assert (r.member_epoch, r.assignment) == (2, {"foo": [2]})


def test_a_static_successor_after_the_group_moved_on_reconciles_from_epoch_zero(impl):
    """getOrMaybeSubscribeStaticConsumerGroupMember copies the member that left for now
    under the new id at epoch 0 (previous epoch 0) and the heartbeat reconciles it: a
    join owns nothing, so partitions the newer target takes away are dropped at once
    and the successor is at the target epoch; the member waiting for them gets them."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 3})
    assignor = fixed(coord)
    assignor.next = {"a": FOO3}
    join(coord, "g", "a", ["foo"], instance_id="i-a")
    assert hb(coord, "g", "a", -2, instance_id="i-a").error == E.NONE
    assignor.next = {"a": {"foo": [0, 1]}, "b": {"foo": [2]}}
    r = join(coord, "g", "b", ["foo"])
    assert (r.member_epoch, r.assignment) == (2, {})     # foo 2 held by the member away
    assignor.next = None        # no new target: the successor takes a's
    r = join(coord, "g", "a2", ["foo"], instance_id="i-a")
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 2, {"foo": [0, 1]})
    a2 = members(coord)["a2"]
    assert (a2.assignment, a2.target_assignment) == ({"foo": [0, 1]}, {"foo": [0, 1]})
    assert described(coord).group_epoch == 2
    r = hb(coord, "g", "b", 2, owned_partitions={})
    assert r.assignment == {"foo": [2]}
    assert described(coord).state == "Stable"
    # a2's previous epoch is 0: an answer lost at epoch 0 is no excuse for epoch 1
    assert hb(coord, "g", "a2", 1, instance_id="i-a", owned_partitions={"foo": [0]}).error \
        == E.FENCED_MEMBER_EPOCH


def test_static_member_epoch_validation(impl):
    """testConsumerGroupMemberEpochValidation for a static member (the static path of
    getOrMaybeSubscribeStaticConsumerGroupMember checks the epoch as the dynamic one)."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "a", ["foo"], instance_id="i-a")
    r = hb(coord, "g", "a", 2, instance_id="i-a")
    assert r.error == E.FENCED_MEMBER_EPOCH and "greater member epoch" in r.error_message
    join(coord, "g", "b", ["foo"])
    hb(coord, "g", "a", 1, instance_id="i-a", owned_partitions={"foo": [0, 1]})
    hb(coord, "g", "a", 1, instance_id="i-a", owned_partitions={"foo": [0]})
    assert members(coord)["a"].member_epoch == 2
    r = hb(coord, "g", "a", 1, instance_id="i-a", owned_partitions={"foo": [0, 1]})
    assert r.error == E.FENCED_MEMBER_EPOCH and "smaller member epoch" in r.error_message


def test_a_static_member_joining_again_under_its_own_id_is_unreleased(impl):
    """getOrMaybeSubscribeStaticConsumerGroupMember: a join (epoch 0) with an instance id
    whose consumer-protocol member has not left with -2 is UNRELEASED_INSTANCE_ID, even
    from that member's own id; after -2 the same id takes its partitions back."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "a", ["foo"], instance_id="i-a")
    assert join(coord, "g", "a", ["foo"], instance_id="i-a").error == E.UNRELEASED_INSTANCE_ID
    assert hb(coord, "g", "a", -2, instance_id="i-a").error == E.NONE
    r = join(coord, "g", "a", ["foo"], instance_id="i-a")
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 1, {"foo": [0, 1]})
    assert described(coord).state == "Stable"


def test_a_static_member_leaving_by_member_id_alone_leaves_for_good(impl):
    """consumerGroupLeave without an instance id takes the dynamic path: the member
    named by its id is fenced (removed, epoch bumped), static or not."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "a", ["foo"], instance_id="i-a")
    join(coord, "g", "b", ["foo"])
    epoch = described(coord).group_epoch
    r = hb(coord, "g", "a", -1)
    assert (r.error, r.member_epoch) == (E.NONE, -1)
    assert sorted(members(coord)) == ["b"] and described(coord).group_epoch == epoch + 1
    assert join(coord, "g", "a2", ["foo"], instance_id="i-a").error == E.NONE


# ---------------------------------------------------------------------------------------
# group size (throwIfConsumerGroupIsFull)
# ---------------------------------------------------------------------------------------
def test_a_full_group_refuses_an_unknown_member_before_looking_it_up(impl):
    """throwIfConsumerGroupIsFull runs before the member is looked up: in a full group
    a heartbeat (epoch > 0) of an unknown member id is GROUP_MAX_SIZE_REACHED, while a
    leave, which does not check the size, is UNKNOWN_MEMBER_ID."""
    coord, _ = make(impl, group_consumer_max_size=1)
    coord.set_topics({"foo": 1})
    join(coord, "g", "m1", ["foo"])
    assert hb(coord, "g", "stranger", 1).error == E.GROUP_MAX_SIZE_REACHED
    assert hb(coord, "g", "stranger", -1).error == E.UNKNOWN_MEMBER_ID
    assert hb(coord, "g", "m1", 1).error == E.NONE


# ---------------------------------------------------------------------------------------
# regular expressions (testConsumerGroupMemberJoinsWithNewRegex, ...WithExistingRegex,
# consumerGroupFenceMembers' maybeDeleteResolvedRegularExpressions)
# ---------------------------------------------------------------------------------------
def test_a_new_regex_does_not_bump_the_epoch_until_it_is_resolved(impl):
    """maybeUpdateRegularExpressions: a member joining an existing group with a regex
    nobody uses only asks for a resolution; the group epoch stays (the subscribed
    names did not change) until the resolution bumps it."""
    coord, clock = make(impl)
    coord.set_topics({"foo": 2, "bar": 1})
    join(coord, "g", "m1", ["bar"])
    epoch = described(coord).group_epoch
    r = join(coord, "g", "m2", regex="fo.*")
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, epoch, {})
    assert described(coord).group_epoch == epoch
    r = hb(coord, "g", "m2", epoch, owned_partitions={})
    assert r.member_epoch == epoch + 1 and r.assignment == {"foo": [0, 1]}


def test_a_member_joining_with_an_already_resolved_regex_bumps_at_once(impl):
    """maybeUpdateRegularExpressions: a regex another member already resolved bumps
    the group epoch in the joining heartbeat itself (the target is computed at once)."""
    coord, clock = make(impl)
    coord.set_topics({"foo": 2})
    r = join(coord, "g", "m1", regex="fo.*")
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={})
    assert r.assignment == {"foo": [0, 1]}
    epoch = described(coord).group_epoch
    r = join(coord, "g", "m2", regex="fo.*")
    assert r.member_epoch == epoch + 1
    d = described(coord)
    assert (d.group_epoch, d.assignment_epoch) == (epoch + 1, epoch + 1)
    assert len(members(coord)["m2"].target_assignment.get("foo", [])) == 1


@pytest.mark.parametrize("how", ["leave", "session", "regex_change", "admin_removal"])
def test_a_regex_is_forgotten_with_its_last_member(impl, how):
    """consumerGroupFenceMembers (a leave, a session or rebalance timeout) deletes the
    resolution of a regex no remaining member uses (maybeDeleteResolvedRegularExpressions:
    a ConsumerGroupRegularExpression tombstone), as maybeUpdateRegularExpressions does
    when its last member moves to another regex. A member subscribing to that regex
    later has it resolved again, and the resolution, new to the group
    (handleRegularExpressionsResult compares with ResolvedRegularExpression.EMPTY),
    bumps the epoch: the member gets the topics it matches."""
    coord, clock = make(impl)
    coord.set_topics({"foo": 2, "bar": 1})
    join(coord, "g", "m1", regex="fo.*")
    join(coord, "g", "m2", regex="ba.*")
    _settle(coord, clock)
    assert members(coord)["m1"].assignment == {"foo": [0, 1]}
    if how == "leave":
        hb(coord, "g", "m1", members(coord)["m1"].member_epoch, owned_partitions={"foo": [0, 1]})
        hb(coord, "g", "m1", -1)
    elif how == "admin_removal":
        # (an admin's LeaveGroup naming the member: Kafka fences it the same way)
        result = coord.leave_group("g", [("m1", None)])
        assert result.error == E.NONE and list(result.member_errors) == [E.NONE]
    elif how == "regex_change":
        # m1 moves to m2's regex (already resolved: the epoch is bumped at once)
        epoch = described(coord).group_epoch
        r = hb(coord, "g", "m1", members(coord)["m1"].member_epoch,
               subscribed_topic_regex="ba.*", owned_partitions={})
        assert described(coord).group_epoch == epoch + 1
        _settle(coord, clock)
        assert all("foo" not in m.assignment for m in described(coord).members)
    else:
        for _ in range(5):              # m2 heartbeats, m1 is silent until fenced
            coord.advance_time(10_000)
            _heartbeat_all_but(coord, "m1")
        assert "m1" not in members(coord)
    _settle(coord, clock)
    coord.advance_time(11_000)
    r = join(coord, "g", "m3", regex="fo.*")
    assert (r.error, r.assignment) == (E.NONE, {})
    for _ in range(3):
        coord.advance_time(11_000)
        _heartbeat_all(coord)
    m3 = members(coord)["m3"]
    assert m3.target_assignment.get("foo") == [0, 1]
    assert m3.assignment.get("foo") == [0, 1]


def _heartbeat_all_but(coord, silent):
    for m in described(coord).members:
        if m.member_id != silent:
            hb(coord, "g", m.member_id, m.member_epoch, owned_partitions=m.assignment)


# ---------------------------------------------------------------------------------------
# reconciliation steps (CurrentAssignmentBuilderTest)
# ---------------------------------------------------------------------------------------
def test_stable_to_unreleased_when_the_revoked_partitions_are_already_gone(impl):
    """CurrentAssignmentBuilderTest
    testStableToUnreleasedPartitionsWithOwnedPartitionsNotHavingRevokedPartitions: a
    member whose request no longer owns what the new target takes away moves straight to
    the new epoch, waiting (UNRELEASED_PARTITIONS) for a partition another still owns."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 4})
    assignor = fixed(coord)
    assignor.next = {"m1": {"foo": [0, 1]}}
    join(coord, "g", "m1", ["foo"])
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2, 3]}}
    join(coord, "g", "m2", ["foo"])
    hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]})
    assert members(coord)["m1"].member_epoch == 2
    # epoch 3: m1 gives foo 1 to m2 and takes foo 2 from it
    assignor.next = {"m1": {"foo": [0, 2]}, "m2": {"foo": [1, 3]}}
    join(coord, "g", "m3", ["foo"])
    r = hb(coord, "g", "m1", 2, owned_partitions={"foo": [0]})
    assert (r.member_epoch, r.assignment) == (3, {"foo": [0]})
    # m2 revokes foo 2 and gets foo 1; m1 then gets foo 2
    r = hb(coord, "g", "m2", 2, owned_partitions={"foo": [2, 3]})
    assert (r.member_epoch, r.assignment) == (2, {"foo": [3]})
    r = hb(coord, "g", "m2", 2, owned_partitions={"foo": [3]})
    assert (r.member_epoch, r.assignment) == (3, {"foo": [1, 3]})
    r = hb(coord, "g", "m1", 3, owned_partitions={"foo": [0]})
    assert (r.member_epoch, r.assignment) == (3, {"foo": [0, 2]})


def test_unreleased_to_unrevoked_keeps_the_epoch(impl):
    """CurrentAssignmentBuilderTest testUnreleasedPartitionsToUnrevokedPartitions: a
    member waiting for partitions (UNRELEASED_PARTITIONS at epoch N) given a newer
    target that takes one of its partitions away stays at epoch N until it revokes it,
    then moves to the new epoch (still waiting)."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 4})
    assignor = fixed(coord)
    assignor.next = {"m1": FOO3}
    join(coord, "g", "m1", ["foo"])
    # epoch 2: m2 gets the free foo 3 and waits for foo 1 and 2 (m1 has not revoked)
    assignor.next = {"m1": {"foo": [0]}, "m2": {"foo": [1, 2, 3]}}
    r = join(coord, "g", "m2", ["foo"])
    assert (r.member_epoch, r.assignment) == (2, {"foo": [3]})
    # epoch 3: foo 3 goes to m3
    assignor.next = {"m1": {"foo": [0]}, "m2": {"foo": [1, 2]}, "m3": {"foo": [3]}}
    r = join(coord, "g", "m3", ["foo"])
    assert (r.member_epoch, r.assignment) == (3, {})
    r = hb(coord, "g", "m2", 2, owned_partitions={"foo": [3]})
    assert (r.member_epoch, r.assignment) == (2, {})
    r = hb(coord, "g", "m2", 2, owned_partitions={})
    assert (r.member_epoch, r.assignment) == (3, None)
    r = hb(coord, "g", "m3", 3, owned_partitions={})
    assert (r.member_epoch, r.assignment) == (3, {"foo": [3]})


# ---------------------------------------------------------------------------------------
# offsets (OffsetMetadataManagerTest, ConsumerGroupTest.testValidateOffsetCommit/Fetch)
# ---------------------------------------------------------------------------------------
def test_offset_commit_v9_to_an_unknown_group_is_group_id_not_found(impl):
    """OffsetMetadataManagerTest.testOffsetCommitWithUnknownGroup (OffsetMetadataManager
    .validateOffsetCommit): with a member epoch (>= 0), OffsetCommit v9 or later to a
    group that does not exist is GROUP_ID_NOT_FOUND; before v9, ILLEGAL_GENERATION."""
    coord, _ = make(impl)
    assert coord.commit_offsets("nope", "m", 1, {("foo", 0): 1}, api_version=9) == \
        {("foo", 0): E.GROUP_ID_NOT_FOUND}
    assert coord.commit_offsets("nope", "m", 1, {("foo", 0): 1}, api_version=8) == \
        {("foo", 0): E.ILLEGAL_GENERATION}
    assert coord.list_groups() == []


def test_offset_commit_member_epoch_checks(impl):
    """ConsumerGroupTest.testValidateOffsetCommit: a commit at epoch -1 needs an empty
    group; with members, a named member's -1 is a stale epoch, no member id an unknown
    member; an empty consumer group takes the admin's commit."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 1})
    join(coord, "g", "m1", ["foo"])
    assert coord.commit_offsets("g", "m1", -1, {("foo", 0): 1}) == \
        {("foo", 0): E.STALE_MEMBER_EPOCH}
    assert coord.commit_offsets("g", "", -1, {("foo", 0): 1}) == \
        {("foo", 0): E.UNKNOWN_MEMBER_ID}
    assert coord.commit_offsets("g", "m1", 1, {("foo", 0): 1}, api_version=9) == \
        {("foo", 0): E.NONE}
    hb(coord, "g", "m1", -1)
    assert described(coord).state == "Empty"
    assert coord.commit_offsets("g", "m1", -1, {("foo", 0): 2}) == {("foo", 0): E.NONE}
    assert coord.commit_offsets("g", "m1", 1, {("foo", 0): 3}) == \
        {("foo", 0): E.UNKNOWN_MEMBER_ID}


def test_offset_fetch_member_checks(impl):
    """ConsumerGroup.validateOffsetFetch (ConsumerGroupTest.testValidateOffsetFetch):
    only no member id with epoch -1 passes unchecked; a member id with -1 is checked
    (stale), an epoch without a member id names no member."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 1})
    join(coord, "g", "m1", ["foo"])
    assert coord.fetch_offsets("g", [("foo", 0)], member_id="m1", member_epoch=-1)[0] == \
        E.STALE_MEMBER_EPOCH
    assert coord.fetch_offsets("g", [("foo", 0)], member_id=None, member_epoch=1)[0] == \
        E.UNKNOWN_MEMBER_ID
    assert coord.fetch_offsets("g", [("foo", 0)], member_id="m1", member_epoch=1)[0] == E.NONE
    # an unknown group: no error, no offsets
    error, found = coord.fetch_offsets("nope", [("foo", 0)], member_id="m1", member_epoch=1)
    assert error == E.NONE and found[("foo", 0)].offset == -1


def test_offset_delete_keeps_the_offsets_of_subscribed_topics(impl):
    """OffsetMetadataManagerTest.testConsumerGroupOffsetDelete(WithErrors): a consumer
    group keeps the offsets of the topics it subscribes to, by name or by a resolved
    regex (ConsumerGroup.isSubscribedToTopic), whatever its state; once Empty, any."""
    coord, clock = make(impl)
    coord.set_topics({"foo": 1, "bar": 1, "baz": 1})
    join(coord, "g", "m1", ["foo"])
    join(coord, "g", "m2", regex="ba.*")
    _settle(coord, clock)
    for t in ("foo", "bar", "baz", "qux"):
        coord.commit_offsets("g", "m1", members(coord)["m1"].member_epoch, {(t, 0): 1})
    error, results = coord.delete_offsets("g", [("foo", 0), ("bar", 0), ("qux", 0)])
    assert error == E.NONE
    assert results == {("foo", 0): E.GROUP_SUBSCRIBED_TO_TOPIC,
                       ("bar", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("qux", 0): E.NONE}
    hb(coord, "g", "m1", -1)
    hb(coord, "g", "m2", -1)
    error, results = coord.delete_offsets("g", [("foo", 0), ("bar", 0)])
    assert (error, results) == (E.NONE, {("foo", 0): E.NONE, ("bar", 0): E.NONE})


# ---------------------------------------------------------------------------------------
# admin: delete, list, describe
# ---------------------------------------------------------------------------------------
def test_delete_group_is_refused_in_every_state_but_empty(impl):
    """ConsumerGroupTest.testValidateDeleteGroup: NON_EMPTY_GROUP when Assigning,
    Reconciling or Stable."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    join(coord, "g", "m2", ["foo"])
    assert described(coord).state == "Reconciling"
    assert coord.delete_groups(["g"]) == {"g": E.NON_EMPTY_GROUP}
    hb(coord, "g", "m2", -1)
    assert described(coord).state == "Assigning"
    assert coord.delete_groups(["g"]) == {"g": E.NON_EMPTY_GROUP}


def test_list_groups_by_consumer_states(impl):
    """GroupMetadataManagerTest.testListGroups: consumer groups listed by their state
    names (any case): Assigning, Reconciling, Stable, Empty."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "stable", "m1", ["foo"])
    join(coord, "reconciling", "m1", ["foo"])
    join(coord, "reconciling", "m2", ["foo"])
    join(coord, "assigning", "m1", ["foo"])
    join(coord, "assigning", "m2", ["foo"])
    hb(coord, "assigning", "m2", -1)
    join(coord, "empty", "m1", ["foo"])
    hb(coord, "empty", "m1", -1)
    by_state = {g.group_id: g.state for g in coord.list_groups()}
    assert by_state == {"stable": "Stable", "reconciling": "Reconciling",
                        "assigning": "Assigning", "empty": "Empty"}
    assert [g.group_id for g in coord.list_groups(states=["reconciling"])] == ["reconciling"]
    assert [g.group_id for g in coord.list_groups(states=["ASSIGNING"])] == ["assigning"]


def test_describe_reports_epochs_assignor_and_targets(impl):
    """GroupMetadataManagerTest.testConsumerGroupDescribeNoErrors: the group's epochs,
    the assignor the target was computed with and each member's current and target
    assignments."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 3})
    assignor = fixed(coord)
    assignor.next = {"m1": FOO3}
    join(coord, "g", "m1", ["foo"], server_assignor="range", client_id="c1",
         client_host="/h1", rack_id="r1")
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2]}}
    join(coord, "g", "m2", ["foo"])
    d = described(coord)
    assert (d.error, d.group_epoch, d.assignment_epoch, d.state) == \
        (E.NONE, 2, 2, "Reconciling")
    assert d.assignor_name == "range"
    m1, m2 = members(coord)["m1"], members(coord)["m2"]
    assert (m1.member_epoch, m1.assignment, m1.target_assignment) == \
        (1, FOO3, {"foo": [0, 1]})
    assert (m1.client_id, m1.client_host, m1.rack_id, m1.subscribed_topic_names) == \
        ("c1", "/h1", "r1", ["foo"])
    assert (m2.member_epoch, m2.assignment, m2.target_assignment) == (2, {}, {"foo": [2]})


def test_previous_epoch_listing_a_topic_it_is_not_assigned_is_fenced(impl):
    """GroupMetadataManager.isSubset: each owned topic must be in the member's
    assignment, even one listed with no partitions; at the previous epoch a heartbeat
    failing it is FENCED_MEMBER_EPOCH, one passing it is accepted."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 2, "bar": 1})
    assignor = fixed(coord)
    assignor.next = {"m1": {"foo": [0, 1]}}
    join(coord, "g", "m1", ["foo", "bar"])
    assignor.next = {"m1": {"foo": [0]}, "m2": {"foo": [1]}}
    join(coord, "g", "m2", ["foo"])
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0]})
    assert (r.error, r.member_epoch) == (E.NONE, 2)
    assert hb(coord, "g", "m1", 1, owned_partitions={"foo": [0]}).error == E.NONE
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0], "bar": []})
    assert r.error == E.FENCED_MEMBER_EPOCH and "smaller member epoch" in r.error_message

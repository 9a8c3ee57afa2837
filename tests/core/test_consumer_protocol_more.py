"""More translations of Kafka's consumer-group tests (GroupMetadataManagerTest,
CurrentAssignmentBuilderTest, ConsumerGroupTest), both twins, in the style and with
the helpers of tests/core/test_consumer_protocol.py.

Kafka's tests start from a group replayed from records (members at epoch 10 or 100);
here the same situations are reached through heartbeats, with the assignor replaced by
a fixed one where the case depends on its choice, so the epochs are smaller but the
moves are the same.
"""
import pytest

from fastcoord.core.store import DeferredStore
from fastcoord import GroupCoordinator, ManualClock

from tests.core.test_consumer_protocol import E, SESSION, fixed, hb, join, make

FOO3 = {"foo": [0, 1, 2]}


def members(coord, group_id="g"):
    return {m.member_id: m for m in coord.consumer_group_describe([group_id])[0].members}


def described(coord, group_id="g"):
    return coord.consumer_group_describe([group_id])[0]


class NamedFixed:
    """A fixed assignor that also records the assignor name each computation used."""

    def __init__(self):
        self.next = None
        self.names = []

    def __call__(self, name, members, topics, current):
        self.names.append(name)
        return {m[0]: {t: sorted(ps) for t, ps in self.next.get(m[0], {}).items()}
                for m in members}


def _revoking_member(coord):
    """m1 owns foo 0-2 at epoch 1; m2 joins (epoch 2) with a target taking foo 2 from m1.
    Returns the assignor; m1 is UNREVOKED_PARTITIONS (foo 2 to revoke) at epoch 1."""
    coord.set_topics({"foo": 3})
    assignor = fixed(coord)
    assignor.next = {"m1": FOO3}
    join(coord, "g", "m1", ["foo"])
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2]}}
    r2 = join(coord, "g", "m2", ["foo"])
    assert (r2.member_epoch, r2.assignment) == (2, {})
    r1 = hb(coord, "g", "m1", 1, owned_partitions=FOO3)
    assert (r1.member_epoch, r1.assignment) == (1, {"foo": [0, 1]})
    return assignor


# ---------------------------------------------------------------------------------------
# a known member rejoining with epoch 0 (testMemberCanRejoinWithEpochZeroIn*State)
# ---------------------------------------------------------------------------------------
def test_rejoin_with_epoch_zero_when_stable_gets_its_state_back(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 3})
    assert join(coord, "g", "m1", ["foo"]).assignment == FOO3
    epoch = described(coord).group_epoch
    r = join(coord, "g", "m1", ["foo"])
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 1, FOO3)
    assert described(coord).group_epoch == epoch        # same subscription: no bump


def test_rejoin_with_epoch_zero_while_revoking_moves_it_to_its_target(impl):
    # Rejoining says it owns nothing: what it had to revoke is revoked
    coord, _ = make(impl)
    _revoking_member(coord)
    r = join(coord, "g", "m1", ["foo"])
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 2, {"foo": [0, 1]})
    assert members(coord)["m1"].assignment == {"foo": [0, 1]}


def test_rejoin_with_epoch_zero_while_waiting_for_partitions(impl):
    coord, _ = make(impl)
    _revoking_member(coord)
    # m2 waits for foo 2 (UNRELEASED_PARTITIONS at epoch 2); its rejoin changes nothing
    r = join(coord, "g", "m2", ["foo"])
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 2, {})
    # once m1 revokes, m2's next rejoin gets it
    hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]})
    r = join(coord, "g", "m2", ["foo"])
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 2, {"foo": [2]})


# ---------------------------------------------------------------------------------------
# a full heartbeat sent twice (testDuplicateFullHeartbeatIn*State, ...WithRevocationAck)
# ---------------------------------------------------------------------------------------
def _stored(impl):
    store = DeferredStore()
    coord = GroupCoordinator(clock=ManualClock(0), store=store, impl=impl)
    return coord, store


def _full(coord, member_id, epoch, owned):
    out = []
    coord.consumer_group_heartbeat("g", member_id, epoch, rebalance_timeout_ms=30_000,
                                   subscribed_topic_names=["foo"], owned_partitions=owned,
                                   callback=out.append)
    return out


def _twice(coord, store, member_id, epoch, owned):
    first = _full(coord, member_id, epoch, owned)
    store.complete_all()
    second = _full(coord, member_id, epoch, owned)
    assert store.pending == [], "a duplicate full heartbeat writes nothing"
    assert first == second and len(first) == 1
    return first[0]


def _m2_takes_foo_2(impl):
    """Full requests with a deferred store: m1 joins and gets foo 0-2, then m2 joins
    with a target taking foo 2 from m1 (the store's writes pending). (coord, store)"""
    coord, store = _stored(impl)
    coord.set_topics({"foo": 3})
    assignor = fixed(coord)
    assignor.next = {"m1": FOO3}
    _full(coord, "m1", 0, {})
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2]}}
    _full(coord, "m2", 0, {})
    return coord, store


def test_duplicate_full_heartbeat_when_stable(impl):
    coord, store = _stored(impl)
    coord.set_topics({"foo": 3})
    _full(coord, "m1", 0, {})
    store.complete_all()
    r = _twice(coord, store, "m1", 1, FOO3)
    assert (r.member_epoch, r.assignment) == (1, FOO3)


def test_duplicate_full_heartbeat_while_revoking(impl):
    coord, store = _m2_takes_foo_2(impl)
    store.complete_all()
    r = _twice(coord, store, "m1", 1, FOO3)
    assert (r.member_epoch, r.assignment) == (1, {"foo": [0, 1]})


def test_duplicate_full_heartbeat_acknowledging_the_revocation(impl):
    coord, store = _m2_takes_foo_2(impl)
    _full(coord, "m1", 1, FOO3)
    store.complete_all()
    first = _full(coord, "m1", 1, {"foo": [0, 1]})      # revoked: epoch 2, Stable
    assert store.pending                                 # that one moved the member
    store.complete_all()
    assert (first[0].member_epoch, first[0].assignment) == (2, {"foo": [0, 1]})
    # the same request again, at its old epoch (the answer may have been lost)
    second = _full(coord, "m1", 1, {"foo": [0, 1]})
    assert store.pending == [] and second == first


def test_duplicate_full_heartbeat_while_waiting_for_partitions(impl):
    coord, store = _m2_takes_foo_2(impl)
    store.complete_all()
    r = _twice(coord, store, "m2", 2, {})
    assert (r.member_epoch, r.assignment) == (2, {})


# ---------------------------------------------------------------------------------------
# the last member leaving (testMemberJoinsEmptyConsumerGroup's leave, KAFKA-20442)
# ---------------------------------------------------------------------------------------
def test_last_member_leaving_brings_the_assignment_epoch_along(impl):
    """An empty group has no target to compute: Kafka writes the assignment epoch with
    the bumped group epoch when the last member goes, so they stay equal."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 6})
    join(coord, "g", "m1", ["foo"])
    r = hb(coord, "g", "m1", -1)
    assert (r.error, r.member_id, r.member_epoch, r.heartbeat_interval_ms, r.assignment) == \
        (E.NONE, "m1", -1, 0, None)
    d = described(coord)
    assert (d.state, d.group_epoch, d.assignment_epoch) == ("Empty", 2, 2)


def test_last_members_fenced_by_their_session_bring_the_assignment_epoch_along(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 6})
    join(coord, "g", "m1", ["foo"])
    join(coord, "g", "m2", ["foo"])
    coord.advance_time(SESSION)
    d = described(coord)
    assert d.members == []
    assert d.group_epoch == d.assignment_epoch == 4


def test_a_member_joining_after_the_last_left_gets_a_fresh_target(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    hb(coord, "g", "m1", -1)
    r = join(coord, "g", "m2", ["foo"])
    assert (r.member_epoch, r.assignment) == (3, {"foo": [0, 1]})
    d = described(coord)
    assert (d.state, d.group_epoch, d.assignment_epoch) == ("Stable", 3, 3)


# ---------------------------------------------------------------------------------------
# static members (testGroupEpochBumpWhenNewStaticMemberJoins,
# testStaticMemberRejoinsWithNewSubscribedTopics[AndNoAssignmentChange],
# testStaticMembersRejoinWithNewServerAssignor)
# ---------------------------------------------------------------------------------------
def _two_static(coord, m1_topics=("foo", "bar"), m2_topics=("foo", "bar"),
                t1=None, t2=None):
    """Static members a (i-a) and b (i-b), Stable at epoch 2 with targets t1 and t2."""
    coord.set_topics({"foo": 6, "bar": 3})
    assignor = fixed(coord)
    t1 = t1 or {"foo": [0, 1, 2], "bar": [0, 1]}
    t2 = t2 or {"foo": [3, 4, 5], "bar": [2]}
    assignor.next = {"a": t1}
    join(coord, "g", "a", list(m1_topics), instance_id="i-a")
    assignor.next = {"a": t1, "b": t2}
    assert join(coord, "g", "b", list(m2_topics), instance_id="i-b").assignment == t2
    assert hb(coord, "g", "a", 1, instance_id="i-a", owned_partitions=t1).member_epoch == 2
    assert described(coord).state == "Stable"
    return assignor


def test_a_new_static_member_bumps_the_epoch_and_waits_for_its_partitions(impl):
    coord, _ = make(impl)
    assignor = _two_static(coord)
    assignor.next = {"a": {"foo": [0, 1], "bar": [0]}, "b": {"foo": [2, 3], "bar": [1]},
                     "c": {"foo": [4, 5], "bar": [2]}}
    r = join(coord, "g", "c", ["foo", "bar"], instance_id="i-c")
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 3, {})
    d = described(coord)
    assert (d.group_epoch, d.assignment_epoch, d.state) == (3, 3, "Reconciling")
    assert members(coord)["c"].target_assignment == {"foo": [4, 5], "bar": [2]}


def test_static_member_rejoining_with_new_topics_bumps_the_epoch(impl):
    coord, _ = make(impl)
    assignor = _two_static(coord, m1_topics=["foo"], m2_topics=["foo"],
                           t1={"foo": [0, 1, 2]}, t2={"foo": [3, 4, 5]})
    assert hb(coord, "g", "b", -2, instance_id="i-b").member_epoch == -2
    assert described(coord).group_epoch == 2
    assignor.next = {"a": {"foo": [0, 1, 2]}, "b2": {"foo": [3, 4, 5], "bar": [0, 1, 2]}}
    r = join(coord, "g", "b2", ["foo", "bar"], instance_id="i-b")
    assert (r.error, r.member_epoch, r.assignment) == \
        (E.NONE, 3, {"foo": [3, 4, 5], "bar": [0, 1, 2]})
    assert sorted(members(coord)) == ["a", "b2"]


def test_static_member_rejoining_with_new_topics_and_the_same_target(impl):
    coord, _ = make(impl)
    assignor = _two_static(coord, m1_topics=["foo", "bar"], m2_topics=["foo"],
                           t1={"foo": [0, 1, 2], "bar": [0]}, t2={"foo": [3, 4, 5]})
    hb(coord, "g", "b", -2, instance_id="i-b")
    assignor.next = {"a": {"foo": [0, 1, 2], "bar": [0]}, "b2": {"foo": [3, 4, 5]}}
    r = join(coord, "g", "b2", ["foo", "bar"], instance_id="i-b")
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 3, {"foo": [3, 4, 5]})


def test_static_members_rejoining_with_another_assignor_retarget_once_most_use_it(impl):
    """KAFKA-20434: the group epoch is bumped when the assignor most members prefer
    changes (members that left for now, epoch -2, still count)."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 6})
    assignor = NamedFixed()
    coord._logic.consumers.assign = assignor
    targets = {"a": {"foo": [0, 1]}, "b": {"foo": [2, 3]}, "c": {"foo": [4, 5]}}
    assignor.next = targets
    for mid in ("a", "b", "c"):
        join(coord, "g", mid, ["foo"], instance_id="i-" + mid, server_assignor="uniform")
    for _ in range(2):
        for mid, m in members(coord).items():
            hb(coord, "g", mid, m.member_epoch, instance_id=m.instance_id,
               owned_partitions=m.assignment)
    d = described(coord)
    assert (d.state, d.group_epoch) == ("Stable", 3)
    for mid in ("a", "b", "c"):
        assert hb(coord, "g", mid, -2, instance_id="i-" + mid).member_epoch == -2
    computed = len(assignor.names)
    # b comes back asking for range: uniform is still the choice (2 to 1), no rebalance
    assignor.next = {"a": targets["a"], "b2": targets["b"], "c": targets["c"]}
    r = join(coord, "g", "b2", ["foo"], instance_id="i-b", server_assignor="range")
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 3, {"foo": [2, 3]})
    assert len(assignor.names) == computed and described(coord).assignor_name == "uniform"
    # c comes back asking for range too: range is now the choice, the target is recomputed
    assignor.next = {"a": targets["a"], "b2": targets["b"], "c2": targets["c"]}
    r = join(coord, "g", "c2", ["foo"], instance_id="i-c", server_assignor="range")
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 4, {"foo": [4, 5]})
    assert assignor.names[computed:] == ["range"]
    assert described(coord).group_epoch == 4


def test_a_static_takeover_under_a_members_id_overwrites_that_member(impl):
    """A join (epoch 0) that takes over a released instance id under the id of another
    member of the group: as Kafka's replaceMember writes the new member's records
    under its id, that member is overwritten, its session and partitions gone with it.
    The member heartbeating under the id keeps its place past any session timeout
    and the table holds one member."""
    coord, clock = make(impl)
    coord.set_topics({"foo": 4})
    b = join(coord, "g", "b", ["foo"], instance_id="i-b")
    assert b.assignment == {"foo": [0, 1, 2, 3]}
    assert hb(coord, "g", "b", -2, instance_id="i-b").member_epoch == -2
    a = join(coord, "g", "a", ["foo"])              # dynamic; b's partitions are kept for i-b
    assert a.error == E.NONE
    r = join(coord, "g", "a", ["foo"], instance_id="i-b")
    assert r.error == E.NONE
    assert sorted(members(coord)) == ["a"]
    table = coord.member_table.stats()
    assert table["slots"] - table["free"] == 1
    epoch = r.member_epoch
    owned = r.assignment
    for _ in range(3 * SESSION // 5_000):
        clock.advance(5_000)
        coord.advance_time(0)
        r = hb(coord, "g", "a", epoch, instance_id="i-b", owned_partitions=owned)
        assert r.error == E.NONE, r
        epoch = r.member_epoch
        owned = r.assignment if r.assignment is not None else owned
    assert sorted(members(coord)) == ["a"]
    assert members(coord)["a"].instance_id == "i-b"


# ---------------------------------------------------------------------------------------
# a full group and static members (KAFKA-20601: testStaticMemberCanRejoin...WhenGroupIsFull,
# testNewStaticMemberClassicGroupJoinThrowsGroupMaxSizeReachedExceptionWhenConsumerGroupIsFull)
# ---------------------------------------------------------------------------------------
def test_a_static_member_rejoins_a_full_group(impl):
    """A new incarnation of a static member takes its place: it does not grow the group,
    so a full group lets it in; a new instance id is still refused."""
    coord, _ = make(impl, group_consumer_max_size=2)
    coord.set_topics({"foo": 4})
    join(coord, "g", "a", ["foo"], instance_id="i-a")
    join(coord, "g", "b", ["foo"], instance_id="i-b")
    assert join(coord, "g", "c", ["foo"], instance_id="i-c").error == E.GROUP_MAX_SIZE_REACHED
    # an instance id still in use: that is the answer, not the group's size
    assert join(coord, "g", "b2", ["foo"], instance_id="i-b").error == E.UNRELEASED_INSTANCE_ID
    hb(coord, "g", "b", -2, instance_id="i-b")
    r = join(coord, "g", "b2", ["foo"], instance_id="i-b")
    assert r.error == E.NONE and r.member_id == "b2"
    assert sorted(members(coord)) == ["a", "b2"]
    assert join(coord, "g", "c", ["foo"], instance_id="i-c").error == E.GROUP_MAX_SIZE_REACHED
    assert join(coord, "g", "", ["foo"]).error == E.GROUP_MAX_SIZE_REACHED


def test_a_static_member_rejoins_a_full_group_with_the_classic_protocol(impl):
    from tests.core.test_consumer_migration import cjoin
    coord, _ = make(impl, group_consumer_max_size=1, group_consumer_migration_policy="upgrade")
    coord.set_topics({"t": 6})
    join(coord, "g", "old", ["t"], instance_id="i")
    hb(coord, "g", "old", -2, instance_id="i")
    # a new instance id does not fit
    refused = cjoin(coord, "", instance_id="other", require_known=True)
    assert refused and refused[0].error == E.GROUP_MAX_SIZE_REACHED
    # the instance id's new incarnation does
    joined = cjoin(coord, "", instance_id="i", require_known=True)
    assert joined and joined[0].error == E.NONE
    new_id = joined[0].member_id
    assert new_id not in ("", "old")
    [m] = described(coord).members
    assert (m.member_id, m.instance_id, m.classic) == (new_id, "i", True)


# ---------------------------------------------------------------------------------------
# the migration policy "disabled" (KAFKA-20640:
# testClassicMemberJoinToConsumerGroupWithDisabledMigrationPolicy)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("static", [False, True])
def test_disabled_migration_refuses_classic_joins_to_a_consumer_group(impl, static):
    """With migrations disabled a group stays of one protocol: a classic JoinGroup to a
    consumer group with members is refused, as a consumer join to a classic one is."""
    from tests.core.test_consumer_migration import cjoin
    coord, _ = make(impl, group_consumer_migration_policy="disabled")
    coord.set_topics({"t": 6})
    join(coord, "g", "c1", ["t"], instance_id="i-c1" if static else None)
    new = cjoin(coord, "", instance_id="i-new" if static else None)
    assert new and new[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    if static:
        # nor may a classic member replace the consumer-protocol static member
        hb(coord, "g", "c1", -2, instance_id="i-c1")
        replace = cjoin(coord, "", instance_id="i-c1")
        assert replace and replace[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    assert [m.classic for m in described(coord).members] == [False]


@pytest.mark.parametrize("policy", ["upgrade", "downgrade", "bidirectional"])
def test_other_migration_policies_let_classic_members_join_a_consumer_group(impl, policy):
    from tests.core.test_consumer_migration import cjoin
    coord, _ = make(impl, group_consumer_migration_policy=policy)
    coord.set_topics({"t": 6})
    join(coord, "g", "c1", ["t"])
    new = cjoin(coord, "")
    assert new and new[0].error == E.NONE


# ---------------------------------------------------------------------------------------
# rebalance timeouts (testRebalanceTimeoutLifecycle, testOnLoaded)
# ---------------------------------------------------------------------------------------
def test_the_rebalance_timeout_is_the_one_of_the_heartbeat_that_starts_the_revocation(impl):
    coord, clock = make(impl)
    coord.set_topics({"foo": 3})
    assignor = fixed(coord)
    assignor.next = {"m1": FOO3}
    join(coord, "g", "m1", ["foo"], rebalance_timeout_ms=180_000)
    coord.advance_time(5_000)
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2]}}
    assert join(coord, "g", "m2", ["foo"], rebalance_timeout_ms=90_000).member_epoch == 2
    coord.advance_time(5_000)
    # m1 heartbeats with a new rebalance timeout: its revocation deadline is 12 s away
    r = hb(coord, "g", "m1", 1, rebalance_timeout_ms=12_000, subscribed_topic_names=["foo"])
    assert (r.member_epoch, r.assignment) == (1, {"foo": [0, 1]})
    coord.advance_time(11_999)
    assert "m1" in members(coord)
    coord.advance_time(1)
    assert sorted(members(coord)) == ["m2"]
    assert described(coord).group_epoch == 3


def test_an_acknowledged_revocation_cancels_the_rebalance_timeout(impl):
    coord, clock = make(impl)
    coord.set_topics({"foo": 3})
    assignor = fixed(coord)
    assignor.next = {"m1": FOO3}
    join(coord, "g", "m1", ["foo"], rebalance_timeout_ms=180_000)
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2]}}
    join(coord, "g", "m2", ["foo"], rebalance_timeout_ms=90_000)
    hb(coord, "g", "m1", 1, rebalance_timeout_ms=12_000, subscribed_topic_names=["foo"])
    coord.advance_time(5_000)
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]})
    assert (r.member_epoch, r.assignment) == (2, None)
    for _ in range(4):                  # past the old deadline, heartbeating
        coord.advance_time(5_000)
        for mid, m in members(coord).items():
            hb(coord, "g", mid, m.member_epoch, owned_partitions=m.assignment)
    assert sorted(members(coord)) == ["m1", "m2"]


def test_a_member_loaded_while_revoking_gets_its_rebalance_timeout_again(impl):
    from fastcoord.core.store import InMemoryStore
    from fastcoord import shard_for
    store = InMemoryStore()
    coord = GroupCoordinator(clock=ManualClock(0), store=store, impl=impl)
    coord.set_topics({"foo": 3})
    assignor = fixed(coord)
    assignor.next = {"m1": FOO3}
    join(coord, "g", "m1", ["foo"], rebalance_timeout_ms=10_000)
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2]}}
    join(coord, "g", "m2", ["foo"])
    assert hb(coord, "g", "m1", 1, owned_partitions=FOO3).assignment == {"foo": [0, 1]}

    again = GroupCoordinator(clock=ManualClock(1_000_000), store=store, impl=impl)
    again.set_topics({"foo": 3})
    shard = shard_for("g", 50)
    again.begin_loading(shard)
    again.load_group("g", store.groups["g"], store.offsets.get("g", {}))
    again.finish_loading(shard)
    again.advance_time(9_999)
    assert sorted(members(again)) == ["m1", "m2"]
    again.advance_time(1)
    assert sorted(members(again)) == ["m2"]


# ---------------------------------------------------------------------------------------
# LeaveGroup (the admin client's member removal) on a consumer group (KAFKA-18188:
# testConsumerGroupMemberUsingClassicProtocolBatchLeaveGroup,
# testLastConsumerProtocolMemberLeavingConsumerGroupByAdminApi)
# ---------------------------------------------------------------------------------------
def test_leave_group_removes_consumer_protocol_members(impl):
    """The admin client removes members with LeaveGroup: by member id (every member,
    whatever its protocol) or by instance id alone; the group epoch moves once."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 4})
    join(coord, "g", "dyn", ["foo"])
    join(coord, "g", "stat", ["foo"], instance_id="i-stat")
    join(coord, "g", "other", ["foo"], instance_id="i-other")
    epoch = described(coord).group_epoch
    result = coord.leave_group("g", [("dyn", None), ("", "i-stat"), ("nobody", None),
                                     ("", "unknown-instance"), ("wrong", "i-other")])
    assert result.member_errors == [E.NONE, E.NONE, E.UNKNOWN_MEMBER_ID,
                                    E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID]
    d = described(coord)
    assert [m.member_id for m in d.members] == ["other"]
    assert d.group_epoch == epoch + 1
    assert hb(coord, "g", "dyn", 1).error == E.UNKNOWN_MEMBER_ID
    # removing every member leaves an empty consumer group, its epochs equal
    assert coord.leave_group("g", [("other", "i-other")]).member_errors == [E.NONE]
    d = described(coord)
    assert (d.state, d.group_epoch, d.assignment_epoch) == ("Empty", epoch + 2, epoch + 2)


def test_leave_group_of_the_last_consumer_protocol_members_downgrades(impl):
    from tests.core.test_consumer_migration import cjoin, group_type
    coord, _ = make(impl, group_initial_rebalance_delay_ms=0)
    coord.set_topics({"t": 6})
    join(coord, "g", "c3", ["t"])
    join(coord, "g", "c4", ["t"], instance_id="i-4")
    m1 = cjoin(coord, "")[0].member_id
    m2 = cjoin(coord, "", instance_id="i-2")[0].member_id
    result = coord.leave_group("g", [(m2, None), ("c3", None), ("", "i-4")])
    assert result.member_errors == [E.NONE, E.NONE, E.NONE]
    assert group_type(coord) == "classic"
    assert coord.member_ids("g") == [m1]


# ---------------------------------------------------------------------------------------
# a subscription change without a new target (testConsumerGroupMemberJoinsWithUpdatedRegex;
# CurrentAssignmentBuilderTest's *WithAssignmentTopicsNoLongerInSubscription and
# testUnresolvedRegularExpression)
# ---------------------------------------------------------------------------------------
def test_a_new_regex_drops_the_old_ones_topics_before_it_is_resolved(impl):
    """A member that changes its regex is subscribed to what the new one resolved to:
    nothing until it is resolved. Kafka takes the topics no longer subscribed from it at
    once (revoked: the request owns none of them), without waiting for a new target."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 6, "bar": 3})
    r = join(coord, "g", "m1", regex="fo.*")
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={})
    assert (r.member_epoch, r.assignment) == (2, {"foo": [0, 1, 2, 3, 4, 5]})
    r = hb(coord, "g", "m1", 2, rebalance_timeout_ms=5_000, subscribed_topic_regex="fo.*|ba.*",
           owned_partitions={})
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 2, {})
    assert members(coord)["m1"].assignment == {}
    # resolved at the next heartbeat: a new epoch and target with both topics
    r = hb(coord, "g", "m1", 2, rebalance_timeout_ms=5_000, subscribed_topic_regex="fo.*|ba.*",
           owned_partitions={})
    assert (r.member_epoch, r.assignment) == (3, {"foo": [0, 1, 2, 3, 4, 5], "bar": [0, 1, 2]})


def test_a_new_regex_revokes_the_old_ones_topics_still_owned(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 2, "bar": 1})
    r = join(coord, "g", "m1", ["bar"], regex="fo.*")
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={"bar": [0]})
    owned = {"foo": [0, 1], "bar": [0]}
    assert r.assignment == owned
    epoch = r.member_epoch
    # the regex changes while the member still owns foo: foo is to be revoked, the
    # member keeps its epoch (and gets a rebalance timeout) until it has
    r = hb(coord, "g", "m1", epoch, subscribed_topic_regex="ba.*", owned_partitions=owned)
    assert (r.member_epoch, r.assignment) == (epoch, {"bar": [0]})
    assert members(coord)["m1"].assignment == {"bar": [0]}
    assert described(coord).state == "Reconciling"
    r = hb(coord, "g", "m1", epoch, owned_partitions={"bar": [0]})
    assert r.error == E.NONE
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={"bar": [0]})
    d = described(coord)
    assert d.state == "Stable" and members(coord)["m1"].assignment == {"bar": [0]}


# ---------------------------------------------------------------------------------------
# the previous member epoch (testReconciliationProcess's records: a member moved to
# UNREVOKED_PARTITIONS at epoch 10 has previous epoch 10; CurrentAssignmentBuilderTest
# testUnrevokedPartitionsToUnreleasedPartitions)
# ---------------------------------------------------------------------------------------
def test_the_previous_epoch_is_the_epoch_before_each_reconciliation_step(impl):
    """Kafka rebuilds the member at each reconciliation step with its previous epoch the
    epoch it had before the step, moved or not: an answer that moved it on is tolerated
    lost (the previous epoch with a subset of the assignment) only until its next step."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    assignor = fixed(coord)
    assignor.next = {"m1": {"foo": [0]}}
    join(coord, "g", "m1", ["foo"])                              # epoch 1
    assignor.next = {"m1": {"foo": [0, 1]}}
    coord.set_topics({"foo": 2, "bar": 1})
    r = hb(coord, "g", "m1", 1, subscribed_topic_names=["foo", "bar"],
           owned_partitions={"foo": [0]})
    assert (r.member_epoch, r.assignment) == (2, {"foo": [0, 1]})   # previous epoch 1
    # epoch 1 with a subset of its partitions: the answer may have been lost, accepted
    assert hb(coord, "g", "m1", 1, owned_partitions={"foo": [0]}).member_epoch == 2
    # a new target takes foo 1 from it: it stays at epoch 2 to revoke, previous epoch 2
    assignor.next = {"m1": {"foo": [0]}, "m2": {"foo": [1]}}
    join(coord, "g", "m2", ["foo"])
    r = hb(coord, "g", "m1", 2, owned_partitions={"foo": [0, 1]})
    assert (r.member_epoch, r.assignment) == (2, {"foo": [0]})
    result = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0]})
    assert result.error == E.FENCED_MEMBER_EPOCH


def test_clearing_the_regex_bumps_the_epoch(impl):
    """testConsumerGroupMemberClearsRegex: an empty regex clears the member's; what it
    subscribes to is then known at once, so the group epoch is bumped and the target
    recomputed in the same heartbeat (epoch 11, nothing assigned, in Kafka's)."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 6})
    r = join(coord, "g", "m1", regex="fo.*")
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={})
    assert (r.member_epoch, r.assignment) == (2, {"foo": [0, 1, 2, 3, 4, 5]})
    r = hb(coord, "g", "m1", 2, rebalance_timeout_ms=5_000, subscribed_topic_regex="",
           owned_partitions={})
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 3, {})
    d = described(coord)
    assert (d.state, d.group_epoch, d.assignment_epoch) == ("Stable", 3, 3)
    m = members(coord)["m1"]
    assert (m.subscribed_topic_regex, m.assignment, m.target_assignment) == (None, {}, {})


def test_a_regex_update_records_the_previous_epoch_even_with_nothing_to_drop(impl):
    """testConsumerGroupMemberJoinsWithRegexAndUpdatesItBeforeResolutionCompleted: the
    member's previous epoch becomes its epoch at the subscription change, so an older
    epoch is fenced from then on."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 6, "bar": 3})
    # epoch 2 (previous 1) with nothing assigned: its regex matches no topic
    r = join(coord, "g", "m1", regex="zz.*")
    r = hb(coord, "g", "m1", 1, subscribed_topic_names=["x"], owned_partitions={})
    assert r.member_epoch == 2
    r = hb(coord, "g", "m1", 2, subscribed_topic_regex="zzz.*")
    assert (r.error, r.member_epoch) == (E.NONE, 2)
    assert hb(coord, "g", "m1", 1, owned_partitions={}).error == E.FENCED_MEMBER_EPOCH


# ---------------------------------------------------------------------------------------
# testConsumerMemberWithRegexReplacedByClassicMemberWith{Same,Changed}Subscription
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("classic_topics", [["t"], []])
def test_a_classic_member_replacing_a_regex_member_has_no_regex(impl, classic_topics):
    """The classic protocol has no regex: a classic member taking over a static member
    that subscribed with one subscribes to its JoinGroup's topics alone; the regex goes
    and the group epoch is bumped, even when the topic names are unchanged."""
    from tests.core.test_consumer_migration import cjoin, sub
    coord, _ = make(impl, group_initial_rebalance_delay_ms=0)
    coord.set_topics({"t": 2, "u": 1})
    r = join(coord, "g", "c1", ["t"], regex="u.*", instance_id="i")
    r = hb(coord, "g", "c1", r.member_epoch, instance_id="i", owned_partitions={})
    assert r.assignment == {"t": [0, 1], "u": [0]}
    join(coord, "g", "c2", ["t"])
    epoch = described(coord).group_epoch
    joined = cjoin(coord, "", instance_id="i", protocols=[("range", sub(classic_topics))])
    assert joined and joined[0].error == E.NONE
    new_id = joined[0].member_id
    m = members(coord)[new_id]
    assert (m.subscribed_topic_names, m.subscribed_topic_regex, m.classic) == \
        (sorted(classic_topics), None, True)
    assert described(coord).group_epoch == epoch + 1
    assert "u" not in m.target_assignment


# ---------------------------------------------------------------------------------------
# testPartitionAssignorExceptionOnRegularHeartbeat
# ---------------------------------------------------------------------------------------
def test_an_assignor_that_fails_answers_unknown_server_error(impl):
    """The heartbeat that needed the new target is answered UNKNOWN_SERVER_ERROR (Kafka
    fails the request), not raised to the caller, and what it changed is undone (the
    request's records go with it in Kafka): the member it brought is not in the group,
    and a group it created does not exist.
    The next heartbeat tries again."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 6, "bar": 3})
    failing = [True]
    real = coord._logic.consumers.assign

    def assignor(*args):
        if failing[0]:
            raise RuntimeError("Assignment failed")
        return real(*args)

    coord._logic.consumers.assign = assignor
    r = join(coord, "g", "m1", ["foo", "bar"])
    assert r.error == E.UNKNOWN_SERVER_ERROR
    assert "Assignment failed" in r.error_message
    d = coord.consumer_group_describe(["g"])[0]
    assert d.error == E.GROUP_ID_NOT_FOUND          # (the group it created is gone too)
    failing[0] = False
    r = join(coord, "g", "m1", ["foo", "bar"])
    assert (r.error, r.member_epoch) == (E.NONE, 1)
    assert r.assignment == {"foo": [0, 1, 2, 3, 4, 5], "bar": [0, 1, 2]}
    # in a group in use: the joiner is not added, the group's epoch and targets stay
    before = coord.consumer_group_describe(["g"])[0]
    failing[0] = True
    assert join(coord, "g", "m2", ["foo"]).error == E.UNKNOWN_SERVER_ERROR
    after = coord.consumer_group_describe(["g"])[0]
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch,
                                                           before.assignment_epoch)
    assert [(m.member_id, m.member_epoch, m.assignment, m.target_assignment)
            for m in after.members] == [(m.member_id, m.member_epoch, m.assignment,
                                         m.target_assignment) for m in before.members]


def test_an_assignor_failing_at_every_heartbeat_is_logged_once(impl, caplog, monkeypatch):
    """Every heartbeat of the group fails the same way until it changes: the log gets one
    line (with the traceback) per interval, not a traceback per heartbeat."""
    import logging

    from fastcoord._ratelog import RateLimitedLog
    from fastcoord.core import consumer as consumer_module
    monkeypatch.setattr(consumer_module, "_log_once", RateLimitedLog(consumer_module.log))
    coord, _ = make(impl)
    coord.set_topics({"foo": 6})

    def assignor(*args):
        raise MemoryError("no room for the target")

    coord._logic.consumers.assign = assignor
    with caplog.at_level(logging.ERROR, logger="fastcoord.coordinator"):
        for i in range(50):
            assert join(coord, "g", f"m{i}", ["foo"]).error == E.UNKNOWN_SERVER_ERROR
    lines = [r for r in caplog.records if "assignor" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is not None, lines


# ---------------------------------------------------------------------------------------
# testConsumerGroupHeartbeatWithCustomAssignorClassicGroup (KAFKA-18134)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("user_data, upgraded", [(None, True), (b"", True), (b"\x00", False)])
def test_no_upgrade_of_a_classic_group_whose_assignor_keeps_user_data(impl, user_data, upgraded):
    """A client-side assignor that puts user data in its assignments (a custom one) has
    no server-side counterpart: Kafka refuses the upgrade, GROUP_ID_NOT_FOUND, the group
    left classic. None or empty user data is no user data."""
    from fastcoord.core.consumer_embedded import encode_assignment
    from tests.core.test_consumer_migration import cjoin, csync, group_type
    coord, _ = make(impl, group_initial_rebalance_delay_ms=0,
                    group_consumer_migration_policy="upgrade")
    coord.set_topics({"t": 2})
    first = cjoin(coord, "")
    coord.advance_time(1)
    (j,) = first
    assignment = encode_assignment({"t": [0, 1]})
    if user_data is not None:       # (the same bytes with user data in place of null)
        assignment = assignment[:-4] + len(user_data).to_bytes(4, "big") + user_data
    assert csync(coord, j.generation_id, j.member_id, {j.member_id: assignment})[0].error == \
        E.NONE
    r = join(coord, "g", "c1", ["t"])
    if upgraded:
        assert r.error == E.NONE and group_type(coord) == "consumer"
    else:
        assert (r.error, r.error_message) == (
            E.GROUP_ID_NOT_FOUND, "Cannot upgrade classic group g to consumer group because an "
            "unsupported custom assignor is in use. Please refer to the documentation or "
            "switch to a default assignor before re-attempting the upgrade.")
        assert group_type(coord) == "classic"


def test_a_classic_static_member_moves_to_the_consumer_protocol_in_place(impl):
    """testConsumerGroupHeartbeatFromExistingClassicStaticMember: with its own member id
    and instance id, a classic static member's ConsumerGroupHeartbeat join is that member
    upgrading in place: same id, epoch and partitions, no longer classic."""
    from tests.core.test_consumer_migration import cjoin, csync
    coord, _ = make(impl, group_initial_rebalance_delay_ms=0)
    coord.set_topics({"t": 6})
    join(coord, "g", "c1", ["t"])
    j = cjoin(coord, "", instance_id="i-1")[0]
    assert j.error == E.NONE
    for _ in range(3):              # both settle
        m = members(coord)["c1"]
        hb(coord, "g", "c1", m.member_epoch, owned_partitions=m.assignment)
        j = cjoin(coord, j.member_id, instance_id="i-1")[0]
        csync(coord, j.generation_id, j.member_id, instance_id="i-1")
    before = members(coord)[j.member_id]
    assert before.classic and before.assignment
    r = join(coord, "g", j.member_id, ["t"], instance_id="i-1")
    assert (r.error, r.member_id, r.member_epoch, r.assignment) == \
        (E.NONE, j.member_id, before.member_epoch, before.assignment)
    after = members(coord)[j.member_id]
    assert (after.classic, after.instance_id) == (False, "i-1")


# ---------------------------------------------------------------------------------------
# testConsumerGroupHeartbeatFullResponse
# ---------------------------------------------------------------------------------------
def test_a_full_request_is_answered_with_the_whole_assignment(impl):
    """A full request (rebalance timeout, a subscription by names or by regex, owned
    partitions) is answered with the whole assignment even when it did not change; any
    other only when it changed."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    r = join(coord, "g", "m1", ["foo", "bar"])
    assert r.assignment == {"foo": [0, 1]}
    epoch = r.member_epoch
    assert hb(coord, "g", "m1", epoch).assignment is None
    r = hb(coord, "g", "m1", epoch, rebalance_timeout_ms=5_000,
           subscribed_topic_names=["foo", "bar"], owned_partitions={"foo": [0, 1]})
    assert r.assignment == {"foo": [0, 1]}
    # with a regex instead of names: still a full request
    r = hb(coord, "g", "m1", r.member_epoch, rebalance_timeout_ms=5_000,
           subscribed_topic_regex="foo.*", owned_partitions={"foo": [0, 1]})
    assert (r.error, r.assignment) == (E.NONE, {"foo": [0, 1]})


# ---------------------------------------------------------------------------------------
# testConsumerGroupMemberJoinsRefreshTopicAuthorization (the periodic regex refresh)
# ---------------------------------------------------------------------------------------
def test_regexes_are_resolved_again_after_the_refresh_interval(impl):
    """Kafka resolves a group's regexes again once group.consumer.regex.refresh.interval.ms
    has passed, though no topic changed: a topic its members were denied and are now
    allowed to describe is then assigned."""
    coord, _ = make(impl, group_consumer_regex_refresh_interval_ms=60_000)
    coord.set_topics({"foo": 2, "bar": 1})
    allowed = {"foo"}

    def rights(topic):
        return topic in allowed

    r = join(coord, "g", "m1", regex="foo|bar", topic_filter=rights)
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={}, topic_filter=rights)
    assert r.assignment == {"foo": [0, 1]}
    epoch = r.member_epoch
    allowed.add("bar")                  # access to bar is granted
    for _ in range(11):                 # heartbeats within the interval: no resolution
        coord.advance_time(5_000)
        r = hb(coord, "g", "m1", epoch, topic_filter=rights)
        assert (r.member_epoch, r.assignment) == (epoch, None)
        r = hb(coord, "g", "m1", epoch)                 # (the table's steady path too)
        assert (r.member_epoch, r.assignment) == (epoch, None)
    coord.advance_time(5_000)           # the interval has passed
    r = hb(coord, "g", "m1", epoch, topic_filter=rights)
    assert (r.member_epoch, r.assignment) == (epoch + 1, {"foo": [0, 1], "bar": [0]})


def test_the_regex_refresh_reaches_a_group_answered_by_the_fast_path(impl):
    """A settled group's steady heartbeats are answered by the member table; the refresh
    takes the group off that path, so the heartbeat after the interval resolves again."""
    coord, _ = make(impl, group_consumer_regex_refresh_interval_ms=60_000)
    coord.set_topics({"foo": 2})
    r = join(coord, "g", "m1", regex="fo.*")
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={})
    epoch = r.member_epoch
    calls = []
    real = coord._logic.consumers._maybe_resolve_regexes

    def counting(group, topic_filter=None):
        calls.append(group.consumer.regex_refresh)
        return real(group, topic_filter)

    coord._logic.consumers._maybe_resolve_regexes = counting
    for _ in range(11):
        coord.advance_time(5_000)
        assert hb(coord, "g", "m1", epoch).member_epoch == epoch
    assert True not in calls
    coord.advance_time(5_000)
    assert hb(coord, "g", "m1", epoch).member_epoch == epoch
    assert calls and calls[-1] is True


# ---------------------------------------------------------------------------------------
# CurrentAssignmentBuilderTest: testUnrevokedPartitionsToStableWithReturnedPartitions-
# PendingRevocation, testRemainsInUnrevokedPartitions, testUnrevokedPartitionsTo-
# UnrevokedPartitions
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("revoked_first", [True, False])
def test_a_partition_given_back_while_being_revoked(impl, revoked_first):
    """m1 must revoke foo 2; before it confirms, a new target gives foo 2 back. Having
    revoked, it takes the new target at once (foo 2 included: it is its own); still
    owning it, nothing moves until it has revoked (the old target's revocation first)."""
    coord, _ = make(impl)
    assignor = _revoking_member(coord)          # m1: foo 0-1, revoking foo 2, epoch 1
    assignor.next = {"m1": FOO3}
    hb(coord, "g", "m2", -1)                    # epoch 3: foo 2 back to m1
    if revoked_first:
        r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]})
        assert (r.member_epoch, r.assignment) == (3, FOO3)
    else:
        r = hb(coord, "g", "m1", 1, owned_partitions=FOO3)
        assert (r.member_epoch, r.assignment) == (1, None)
        assert members(coord)["m1"].assignment == {"foo": [0, 1]}
        r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]})
        assert (r.member_epoch, r.assignment) == (3, FOO3)
    assert described(coord).state == "Stable"


def test_a_newer_target_while_revoking_asks_for_more_revocations_at_the_same_epoch(impl):
    coord, _ = make(impl)
    coord.set_topics({"foo": 4})
    assignor = fixed(coord)
    assignor.next = {"m1": {"foo": [0, 1, 2, 3]}}
    join(coord, "g", "m1", ["foo"])
    assignor.next = {"m1": {"foo": [1, 2, 3]}, "m2": {"foo": [0]}}
    join(coord, "g", "m2", ["foo"])
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1, 2, 3]})
    assert (r.member_epoch, r.assignment) == (1, {"foo": [1, 2, 3]})   # revoke foo 0
    assignor.next = {"m1": {"foo": [3]}, "m2": {"foo": [0]}, "m3": {"foo": [1, 2]}}
    join(coord, "g", "m3", ["foo"])
    # m1 revoked foo 0 but the newer target takes foo 1 and 2 too: still epoch 1
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [1, 2, 3]})
    assert (r.member_epoch, r.assignment) == (1, {"foo": [3]})
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [3]})
    assert (r.member_epoch, r.assignment) == (3, None)

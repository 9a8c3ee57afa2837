"""Kafka classic-group behaviours the other protocol suites do not pin down, each
translated from a case of Kafka's GroupCoordinatorTest (3.x, Scala) or of the classic
part of GroupMetadataManagerTest (4.x, Java), or from the code path named in the
docstring where Kafka's own test only covers a neighbour of the case. Every test
asserts Kafka's outcome (group-protocol.md: the Scala coordinator is the reference)."""
from __future__ import annotations

from fastcoord import Errors, OffsetAndMetadata
from fastcoord.core.store import DeferredStore

from tests.core.test_offsets_retention import subscription

from helpers.protocol import (
    COMPLETING, DELAY, EMPTY, GROUP, META, NONE, PREPARING, PROTOCOLS, PTYPE,
    RANGE, REBALANCE, RR, STABLE, SUPERSET, Proto, join_members_of,
)

TOPIC, OTHER = "topic", "other"
T0, O0 = (TOPIC, 0), (OTHER, 0)


def _offsets(h, *tps, group=GROUP):
    err, found = h.fetch(list(tps), group=group)
    assert err == NONE
    return {tp: found[tp].offset for tp in tps}


# ---------------------------------------------------------------------------
# JoinGroup
# ---------------------------------------------------------------------------

def test_follower_rejoining_with_its_protocols_reordered_rebalances(impl):
    """testJoinGroupFromUnchangedFollowerDoesNotRebalance, the other side: Kafka's
    MemberMetadata.matches compares the protocol list in order, so the same protocols in
    another preference order are a metadata change and a Stable follower rebalances."""
    h = Proto(impl)
    f = h.form_group(2, protocols=SUPERSET)
    fj = h.send_join(f.follower, protocols=[(RR, META), (RANGE, META)])
    assert fj.result is None
    assert h.state() == PREPARING
    lj = h.send_join(f.leader, protocols=SUPERSET)
    assert lj.error == NONE and fj.error == NONE
    assert fj.result.generation_id == f.generation + 1


def test_leader_member_list_carries_each_members_metadata_for_the_selected_protocol(impl):
    """GroupMetadata.currentMemberMetadata: each member's metadata is the one it gave for
    the protocol selected (here the only common one, not the leader's first choice)."""
    h = Proto(impl)
    a = h.join_old("", protocols=[(RANGE, b"a-range"), (RR, b"a-rr")])
    b = h.join_old("", protocols=[(RR, b"b-rr")])
    h.run_until_done([a, b])
    assert a.error == NONE and b.error == NONE
    assert a.result.protocol_name == RR
    assert a.result.leader_id == a.result.member_id
    meta = {m.member_id: m.metadata for m in a.result.members}
    assert meta == {a.result.member_id: b"a-rr", b.result.member_id: b"b-rr"}


def test_leader_rejoin_with_a_protocol_nobody_else_supports_is_inconsistent(impl):
    """testJoinGroupInconsistentGroupProtocol for a known member: supportsProtocols counts
    every current member (the joiner too), so a Stable leader offering only a protocol the
    follower lacks gets INCONSISTENT_GROUP_PROTOCOL and the group stays as it is."""
    h = Proto(impl)
    f = h.form_group(2, protocols=PROTOCOLS)
    r = h.send_join(f.leader, protocols=[(RR, META)])
    assert r.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert r.result.member_id == f.leader
    assert r.result.generation_id == -1
    assert h.state() == STABLE
    assert h.heartbeat(f.follower, f.generation) == NONE


def test_static_restart_into_a_full_stable_group_is_refused(impl):
    """testStaticMembersJoinGroupWithMaxSize / acceptJoiningMember: a join with member id
    "" is judged as a new member (group.has("") is false), even when its instance id is
    already known; a full Stable group answers GROUP_MAX_SIZE_REACHED and keeps the old
    incarnation."""
    h = Proto(impl)
    f = h.form_group(4, static=True)
    follower_instance = f.instances[f.follower]
    r = h.send_join("", instance=follower_instance, protocols=SUPERSET)
    assert r.error == Errors.GROUP_MAX_SIZE_REACHED
    assert r.result.member_id == ""
    assert h.state() == STABLE
    assert h.member_ids() == set(f.members)
    assert h.heartbeat(f.follower, f.generation, instance=follower_instance) == NONE


def test_rejoin_with_a_longer_rebalance_timeout_sets_the_join_deadline(impl):
    """updateMemberAndRebalance takes the request's rebalance timeout before
    prepareRebalance, whose DelayedJoin waits the largest member timeout: a Stable leader
    re-joining with 2000 ms makes the follower's absence last 2000 ms, not 500."""
    h = Proto(impl)
    f = h.form_group(2, session=5000, rebalance=REBALANCE)
    t0 = h.now
    lj = h.send_join(f.leader, protocols=SUPERSET, session=5000, rebalance=2000)
    assert h.state() == PREPARING
    h.advance_to(t0 + 1999)
    assert lj.result is None
    h.advance(1)
    assert lj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert set(join_members_of(lj.result)) == {f.leader}   # the follower never re-joined


def test_rebalance_timeout_is_fixed_when_the_rebalance_starts(impl):
    """prepareRebalance arms one DelayedJoin with group.rebalanceTimeoutMs at that moment;
    a newcomer with a longer rebalance timeout joining meanwhile does not extend it."""
    h = Proto(impl)
    f = h.form_group(2, session=5000, rebalance=REBALANCE)
    t0 = h.now
    lj = h.send_join(f.leader, protocols=SUPERSET, session=5000)
    new = h.join_old("", protocols=SUPERSET, session=5000, rebalance=5000)
    h.advance_to(t0 + REBALANCE - 1)
    assert lj.result is None and new.result is None
    h.advance(1)
    assert lj.error == NONE and new.error == NONE
    assert new.result.generation_id == f.generation + 1
    assert set(join_members_of(lj.result)) == {f.leader, new.result.member_id}


def test_rejoin_in_preparing_rebalance_takes_the_new_session_timeout(impl):
    """updateMemberAndRebalance (3.x with client reasons, as Kafka 4): the member's session
    timeout becomes the request's; the sessions the join completion and the syncs start
    last the new 2000 ms, not the old 500."""
    h = Proto(impl)
    f = h.form_group(2)
    lj = h.send_join(f.leader, protocols=SUPERSET, session=2000)
    fj = h.send_join(f.follower, protocols=SUPERSET, session=2000)
    assert lj.error == NONE and fj.error == NONE
    gen = lj.result.generation_id
    assert h.send_sync(f.leader, gen, {}).error == NONE
    assert h.send_sync(f.follower, gen).error == NONE
    t0 = h.now
    h.advance_to(t0 + 1999)
    assert h.member_ids() == set(f.members)
    h.advance(1)
    assert h.member_ids() == set()


# ---------------------------------------------------------------------------
# initial rebalance delay
# ---------------------------------------------------------------------------

def test_only_member_leaving_during_the_initial_delay_does_not_end_it_early(impl):
    """InitialDelayedJoin.tryComplete is always false: when the only member leaves during
    the initial delay the group waits in PreparingRebalance for the delay to run out, then
    completes the join with nobody: Empty at generation 1."""
    h = Proto(impl)
    r = h.join_old("")
    assert h.state() == PREPARING
    (member,) = h.member_ids()
    h.advance(10)
    assert h.leave(member).member_errors == [NONE]
    assert r.error == Errors.UNKNOWN_MEMBER_ID
    assert h.state() == PREPARING
    h.advance(DELAY - 10 - 1)
    assert h.state() == PREPARING
    h.advance(1)
    assert h.state() == EMPTY
    # the next round starts from generation 1
    again = h.join_old("")
    h.run_until_done([again])
    assert again.error == NONE and again.result.generation_id == 2


# ---------------------------------------------------------------------------
# SyncGroup / heartbeats
# ---------------------------------------------------------------------------

def test_failed_assignment_write_answers_syncs_without_protocol(impl):
    """propagateAssignment with an error gives (None, None) as protocol type and name
    and an empty assignment (testSyncGroupReturnsAnErrorWhen... family, store failure)."""
    store = DeferredStore()
    h = Proto(impl, store=store)
    f = h.form_group(2, sync=False)
    store.complete_all()
    fs = h.send_sync(f.follower, f.generation)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    store.complete_all(Errors.NOT_COORDINATOR)
    for s in (ls, fs):
        assert s.error == Errors.NOT_COORDINATOR
        assert s.result.protocol_type is None and s.result.protocol_name is None
        assert s.result.assignment == b""


def test_heartbeats_keep_a_member_alive_in_completing_rebalance(impl):
    """testHeartbeatDuringCompletingRebalance (3.x handleHeartbeat): in CompletingRebalance
    a heartbeat answers NONE and re-arms the session, so a follower that has not synced yet
    outlives its session timeout while it heartbeats."""
    h = Proto(impl)
    f = h.form_group(2, sync=False, session=100, rebalance=1000)
    assert h.state() == COMPLETING
    for _ in range(4):
        h.advance(90)
        assert h.heartbeat(f.follower, f.generation) == NONE
        assert h.heartbeat(f.leader, f.generation) == NONE
    assert h.member_ids() == set(f.members)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    fs = h.send_sync(f.follower, f.generation)
    assert ls.error == NONE and fs.result.assignment == b"F"


# ---------------------------------------------------------------------------
# LeaveGroup
# ---------------------------------------------------------------------------

def _preparing_with_pending(h):
    f = h.form_group(2)
    lj = h.send_join(f.leader, protocols=SUPERSET)
    assert h.state() == PREPARING
    pending = h.pending(session=100)
    return f, lj, pending


def test_batch_leave_of_joined_and_pending_members(impl):
    """testJoinedMemberPendingMemberBatchLeaveGroup: two members and a pending one leave in
    one request: all NONE, the leader's parked join UNKNOWN_MEMBER_ID, and with nobody left
    the join completes: Empty at the next generation."""
    h = Proto(impl)
    f, lj, pending = _preparing_with_pending(h)
    res = h.leave(f.leader, f.follower, pending)
    assert res.error == NONE
    assert res.member_errors == [NONE, NONE, NONE]
    assert lj.error == Errors.UNKNOWN_MEMBER_ID
    assert h.state() == EMPTY
    assert h.member_ids() == set()
    # the pending id is gone too
    assert h.send_join(pending).error == Errors.UNKNOWN_MEMBER_ID


def test_batch_leave_of_joined_pending_and_unknown_members(impl):
    """testJoinedMemberPendingMemberBatchLeaveGroupWithUnknownMember."""
    h = Proto(impl)
    f, lj, pending = _preparing_with_pending(h)
    res = h.leave(f.leader, f.follower, pending, "unknown-member")
    assert res.member_errors == [NONE, NONE, NONE, Errors.UNKNOWN_MEMBER_ID]
    assert h.state() == EMPTY


def test_leave_with_no_member_id_and_no_instance_id_is_unknown_member(impl):
    """handleLeaveGroup: member id "" resolves only through an instance id; without one
    the member answer is UNKNOWN_MEMBER_ID and nothing changes."""
    h = Proto(impl)
    f = h.form_group(2)
    res = h.leave(("", None))
    assert res.error == NONE and res.member_errors == [Errors.UNKNOWN_MEMBER_ID]
    assert h.state() == STABLE and h.member_ids() == set(f.members)


# ---------------------------------------------------------------------------
# DescribeGroups / ListGroups / DeleteGroups
# ---------------------------------------------------------------------------

def test_group_emptied_by_leave_keeps_its_protocol_type_but_no_protocol(impl):
    """testListGroupsWithStates (member leaves) and initNextGeneration: the group left
    Empty keeps protocol type "consumer" but has no selected protocol."""
    h = Proto(impl)
    f = h.form_group(1)
    assert h.leave(f.leader).member_errors == [NONE]
    d = h.describe()
    assert d.state == EMPTY
    assert d.protocol_type == PTYPE
    assert d.protocol_name == ""
    assert d.members == []
    listed = [(g.group_id, g.protocol_type, g.state) for g in h.coord.list_groups()]
    assert listed == [(GROUP, PTYPE, "Empty")]
    assert [g.group_id for g in h.coord.list_groups(["Empty"])] == [GROUP]
    assert h.coord.list_groups(["Stable", "PreparingRebalance", "CompletingRebalance",
                                "Dead"]) == []


def test_group_made_by_a_simple_commit_lists_with_no_protocol_type(impl):
    """testCommitOffsetWithDefaultGeneration + GroupOverview: the group a simple consumer's
    commit creates is Empty with protocol type ""."""
    h = Proto(impl)
    assert h.commit("", -1, {T0: 3}) == {T0: NONE}
    listed = [(g.group_id, g.protocol_type, g.state) for g in h.coord.list_groups()]
    assert listed == [(GROUP, "", "Empty")]
    d = h.describe()
    assert (d.state, d.protocol_type, d.protocol_name, d.members) == (EMPTY, "", "", [])


def test_deleting_a_group_with_only_a_pending_member(impl):
    """handleDeleteGroups: an Empty group is deleted even while a MEMBER_ID_REQUIRED
    member is pending; that member's second join then finds no group."""
    h = Proto(impl)
    pending = h.pending()
    assert h.coord.delete_groups([GROUP]) == {GROUP: NONE}
    assert h.describe().state == "Dead"
    r = h.send_join(pending)
    assert r.error == Errors.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------------------
# OffsetCommit / OffsetFetch
# ---------------------------------------------------------------------------

def test_commit_with_a_generation_to_an_emptied_group_is_unknown_member(impl):
    """validateOffsetCommit: generation >= 0 goes through validateCurrentMember, so a
    former member committing with its old generation to the Empty group gets
    UNKNOWN_MEMBER_ID (not ILLEGAL_GENERATION) and nothing is stored."""
    h = Proto(impl)
    f = h.form_group(1)
    h.leave(f.leader)
    assert h.state() == EMPTY
    assert h.commit(f.leader, f.generation, {T0: 5}) == {T0: Errors.UNKNOWN_MEMBER_ID}
    assert _offsets(h, T0) == {T0: -1}


def test_an_offset_is_fetched_only_once_written_and_a_failed_write_keeps_the_old(impl):
    """GroupMetadata.prepareOffsetCommit / onOffsetCommitAppend / failPendingOffsetWrite:
    a commit in flight is not visible to a (non-stable) fetch; a failed write leaves the
    previous committed offset."""
    store = DeferredStore()
    h = Proto(impl, store=store)
    answers = []
    h.coord.commit_offsets(GROUP, "", -1, {T0: 5}, callback=answers.append)
    store.complete_all()
    assert answers == [{T0: NONE}] and _offsets(h, T0) == {T0: 5}
    h.coord.commit_offsets(GROUP, "", -1, {T0: 7}, callback=answers.append)
    assert _offsets(h, T0) == {T0: 5}
    store.complete_all(Errors.NOT_COORDINATOR)
    assert answers[-1] == {T0: Errors.NOT_COORDINATOR}
    assert _offsets(h, T0) == {T0: 5}
    h.coord.commit_offsets(GROUP, "", -1, {T0: OffsetAndMetadata(9, "m")},
                           callback=answers.append)
    store.complete_all()
    assert answers[-1] == {T0: NONE}
    err, found = h.fetch([T0])
    assert found[T0].offset == 9 and found[T0].metadata == "m"


# ---------------------------------------------------------------------------
# OffsetDelete
# ---------------------------------------------------------------------------

def test_offset_delete_of_consumer_group_with_unparsable_protocol(impl):
    """testDeleteOffsetOfConsumerGroupWithUnparsableProtocol: a Stable "consumer" group
    whose subscriptions do not parse is taken as subscribed to every topic: each partition
    answers GROUP_SUBSCRIBED_TO_TOPIC and no offset is deleted."""
    h = Proto(impl)
    f = h.form_group(1, protocols=PROTOCOLS)          # metadata b"": not a Subscription
    assert h.commit(f.leader, f.generation, {T0: 37}) == {T0: NONE}
    assert h.coord.delete_offsets(GROUP, [T0]) == (NONE, {T0: Errors.GROUP_SUBSCRIBED_TO_TOPIC})
    assert _offsets(h, T0) == {T0: 37}


def test_offset_delete_of_empty_non_consumer_group(impl):
    """testDeleteOffsetOfEmptyNonConsumerGroup: once Empty, a group of another protocol
    type has any offset deleted; the others stay."""
    h = Proto(impl)
    r = h.join_old("", ptype="My Protocol")
    h.run_until_done([r])
    me, gen = r.result.member_id, r.result.generation_id
    assert h.send_sync(me, gen, {}).error == NONE
    assert h.commit(me, gen, {T0: 37, O0: 37}) == {T0: NONE, O0: NONE}
    h.leave(me)
    assert h.state() == EMPTY
    assert h.coord.delete_offsets(GROUP, [T0]) == (NONE, {T0: NONE})
    assert _offsets(h, T0, O0) == {T0: -1, O0: 37}


def test_offset_delete_in_completing_rebalance_follows_subscriptions(impl):
    """handleDeleteOffsets: PreparingRebalance | CompletingRebalance | Stable of a consumer
    group all partition the request by the group's subscribed topics."""
    h = Proto(impl)
    assert h.commit("", -1, {T0: 1, O0: 2}) == {T0: NONE, O0: NONE}
    h.form_group(2, sync=False, protocols=[(RANGE, subscription(TOPIC))])
    assert h.state() == COMPLETING
    assert h.coord.delete_offsets(GROUP, [T0, O0]) == (
        NONE, {T0: Errors.GROUP_SUBSCRIBED_TO_TOPIC, O0: NONE})
    assert _offsets(h, T0, O0) == {T0: 1, O0: -1}


def test_offset_delete_in_preparing_rebalance_uses_the_last_generations_subscriptions(impl):
    """GroupMetadata.subscribedTopics is computed in initNextGeneration (and on load) only;
    a follower re-joining with a new subscription starts a rebalance but, until the join
    completes, OffsetDelete still judges by the subscriptions of the generation in place:
    the newly subscribed topic's offset is deleted."""
    h = Proto(impl)
    f = h.form_group(2, protocols=[(RANGE, subscription(TOPIC))])
    assert h.commit(f.leader, f.generation, {T0: 1, O0: 2}) == {T0: NONE, O0: NONE}
    fj = h.send_join(f.follower, protocols=[(RANGE, subscription(OTHER))])
    assert fj.result is None and h.state() == PREPARING
    assert h.coord.delete_offsets(GROUP, [T0, O0]) == (
        NONE, {T0: Errors.GROUP_SUBSCRIBED_TO_TOPIC, O0: NONE})
    assert _offsets(h, T0, O0) == {T0: 1, O0: -1}


def test_offset_delete_after_static_replacement_keeps_the_generations_subscriptions(impl):
    """updateStaticMemberAndRebalance, Stable branch with the selected protocol unchanged:
    the group is stored and answered without a new generation, so subscribedTopics is not
    recomputed: a topic only the replacement subscribes to is not yet "subscribed"."""
    h = Proto(impl)
    f = h.form_group(2, static=True, protocols=[(RANGE, subscription(TOPIC))])
    assert h.commit(f.leader, f.generation, {T0: 1, O0: 2}) == {T0: NONE, O0: NONE}
    r = h.send_join("", instance=f.instances[f.follower],
                    protocols=[(RANGE, subscription(OTHER))])
    assert r.error == NONE and r.result.generation_id == f.generation
    assert h.state() == STABLE
    assert h.coord.delete_offsets(GROUP, [O0]) == (NONE, {O0: NONE})
    assert _offsets(h, O0) == {O0: -1}


def test_offset_delete_while_the_first_generation_is_forming(impl):
    """computeSubscribedTopics gives None before any protocol is selected, and
    isSubscribedToTopic(None) is true: a consumer group in its first PreparingRebalance
    (initial delay) answers GROUP_SUBSCRIBED_TO_TOPIC for every partition."""
    h = Proto(impl)
    assert h.commit("", -1, {T0: 1, O0: 2}) == {T0: NONE, O0: NONE}
    r = h.join_old("", protocols=[(RANGE, subscription(TOPIC))])
    assert r.result is None and h.state() == PREPARING
    assert h.coord.delete_offsets(GROUP, [T0, O0]) == (
        NONE, {T0: Errors.GROUP_SUBSCRIBED_TO_TOPIC, O0: Errors.GROUP_SUBSCRIBED_TO_TOPIC})
    assert _offsets(h, T0, O0) == {T0: 1, O0: 2}


def test_dynamic_member_named_with_an_unknown_instance_id_is_unknown(impl):
    """validateCurrentMember: an instance id that maps to nobody answers
    UNKNOWN_MEMBER_ID even when the member id itself is a (dynamic) member, for
    heartbeat, sync, commit and leave alike; nothing changes."""
    h = Proto(impl)
    f = h.form_group(2)
    ghost = "ghost"
    assert h.heartbeat(f.follower, f.generation, instance=ghost) == Errors.UNKNOWN_MEMBER_ID
    assert h.send_sync(f.follower, f.generation, instance=ghost).error == Errors.UNKNOWN_MEMBER_ID
    assert h.commit(f.follower, f.generation, {T0: 1}, instance=ghost) == {
        T0: Errors.UNKNOWN_MEMBER_ID}
    assert h.leave((f.follower, ghost)).member_errors == [Errors.UNKNOWN_MEMBER_ID]
    assert h.state() == STABLE and h.member_ids() == set(f.members)

"""More classic-group cases translated from Kafka 3.x's GroupCoordinatorTest and
GroupMetadataTest (core/src/test/scala/unit/kafka/coordinator/group), driven through
fastcoord's public API with the `Proto` harness (Kafka's test configuration: delay 50 ms,
session and rebalance timeouts 500 ms, max size 4). Each test asserts what Kafka's
GroupCoordinator.scala / GroupMetadata.scala answer: errors, generations, leader, members,
states and assignment bytes, for rebalance interplay, static membership, batch leaves,
group max size, protocol selection and offset commits during rebalances."""
from __future__ import annotations

from fastcoord import Errors

from helpers.protocol import (
    COMPLETING, DELAY, EMPTY, FOLLOWER_INSTANCE as F, LEADER_INSTANCE as L, META, NONE,
    PREPARING, PROTOCOLS, RANGE, REBALANCE, RR, STABLE, SUPERSET, Proto, join_members_of,
)

T0 = ("topic", 0)
FOO, BAR = "foo", "bar"


def _protocols(*names):
    return [(n, META) for n in names]


def _commit_error(h, member_id, generation, offset=1, **kw):
    return h.commit(member_id, generation, {T0: offset}, **kw)[T0]


def _committed(h):
    err, found = h.fetch([T0])
    assert err == NONE
    return found[T0].offset


def _rejoin(h, *members, **kw):
    """Rejoin every member (known ids, SUPERSET) and return the replies in order."""
    return [h.send_join(m, protocols=SUPERSET, **kw) for m in members]


# ---------------------------------------------------------------------------
# JoinGroup / SyncGroup / Heartbeat interplay during rebalances
# ---------------------------------------------------------------------------

def test_heartbeat_during_the_initial_delay(impl):
    # testHeartbeatDuringRebalanceCausesRebalanceInProgress (initial rebalance variant)
    h = Proto(impl)
    member = h.pending()
    join = h.send_join(member)
    assert h.state() == PREPARING and join.result is None
    assert h.heartbeat(member, 0) == Errors.REBALANCE_IN_PROGRESS
    assert h.heartbeat(member, 1) == Errors.ILLEGAL_GENERATION
    h.advance(DELAY)
    assert join.error == NONE and join.result.generation_id == 1


def test_heartbeating_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout(impl):
    # testSessionTimeoutDuringRebalance / testRebalanceCompletesBeforeMemberJoins (dynamic)
    h = Proto(impl)
    f = h.form_group(2)
    t0 = h.now
    lj = h.send_join(f.leader, protocols=SUPERSET)
    for _ in range(2):
        h.advance(200)
        assert h.heartbeat(f.follower, f.generation) == Errors.REBALANCE_IN_PROGRESS
    h.advance_to(t0 + REBALANCE - 1)
    assert lj.result is None
    h.advance(1)
    assert lj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert lj.result.leader_id == f.leader
    assert set(join_members_of(lj.result)) == {f.leader}
    assert h.heartbeat(f.follower, f.generation) == Errors.UNKNOWN_MEMBER_ID
    assert _commit_error(h, f.follower, f.generation) == Errors.UNKNOWN_MEMBER_ID


def test_leader_leaving_while_the_followers_sync_waits(impl):
    # testSyncGroupLeaderAfterFollower, with the leader leaving instead of syncing
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    fs = h.send_sync(f.follower, f.generation)
    assert fs.result is None
    assert h.leave(f.leader).member_errors == [NONE]
    assert fs.error == Errors.REBALANCE_IN_PROGRESS
    assert h.state() == PREPARING
    assert h.heartbeat(f.follower, f.generation) == Errors.REBALANCE_IN_PROGRESS
    (fj,) = _rejoin(h, f.follower)
    assert fj.error == NONE
    assert fj.result.generation_id == f.generation + 1
    assert fj.result.leader_id == f.follower
    assert set(join_members_of(fj.result)) == {f.follower}
    assert h.state() == COMPLETING


def test_leader_leaving_before_rejoining_completes_the_join_with_the_follower_leading(impl):
    # testLeaderFailureInSyncGroup family: GroupMetadata.remove hands leadership on
    h = Proto(impl)
    f = h.form_group(2)
    fj = h.send_join(f.follower, protocols=PROTOCOLS)  # changed metadata: rebalance
    assert h.state() == PREPARING and fj.result is None
    assert h.leave(f.leader).member_errors == [NONE]
    assert fj.error == NONE
    assert fj.result.generation_id == f.generation + 1
    assert fj.result.leader_id == f.follower
    assert fj.result.protocol_name == RANGE
    assert set(join_members_of(fj.result)) == {f.follower}
    assert h.state() == COMPLETING


def test_follower_rejoining_in_completing_rebalance_keeps_its_parked_sync(impl):
    # testJoinGroupFromUnchangedFollowerDoesNotRebalance, in CompletingRebalance
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    fs = h.send_sync(f.follower, f.generation)
    (fj,) = _rejoin(h, f.follower)
    assert fj.error == NONE
    assert fj.result.generation_id == f.generation
    assert fj.result.leader_id == f.leader and fj.result.members == []
    assert h.state() == COMPLETING and fs.result is None
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    assert ls.error == NONE and ls.result.assignment == b"L"
    assert fs.error == NONE and fs.result.assignment == b"F"
    assert h.state() == STABLE


def test_leader_sync_after_the_group_moved_on(impl):
    # testSyncGroupFromIllegalGeneration, during and after a new rebalance
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    fj = h.send_join(f.follower, protocols=PROTOCOLS)
    assert h.state() == PREPARING
    stale = {f.leader: b"L", f.follower: b"F"}
    assert h.send_sync(f.leader, f.generation, stale).error == Errors.REBALANCE_IN_PROGRESS
    (lj,) = _rejoin(h, f.leader)
    assert lj.error == NONE and fj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert h.send_sync(f.leader, f.generation, stale).error == Errors.ILLEGAL_GENERATION
    assert h.state() == COMPLETING


def test_initial_delay_join_completes_with_the_latest_protocols(impl):
    # GroupMetadataTest.testInitNextGeneration: a member's updated protocols pick the protocol
    h = Proto(impl)
    member = h.pending()
    h.send_join(member, protocols=SUPERSET)
    again = h.send_join(member, protocols=_protocols(RR))
    h.run_until_done([again])
    assert again.error == NONE
    assert again.result.generation_id == 1
    assert again.result.protocol_name == RR


def test_pending_member_from_the_initial_delay_joins_after_it(impl):
    # testJoinGroupCompletionWhenPendingMemberJoins, pending member made during the delay
    h = Proto(impl)
    first = h.join_new()
    pending = h.pending()
    h.run_until_done([first])
    assert first.error == NONE and first.result.generation_id == 1
    assert set(join_members_of(first.result)) == {first.result.member_id}
    pj = h.send_join(pending)
    assert pj.result is None and h.state() == PREPARING
    assert h.heartbeat(first.result.member_id, 1) == Errors.REBALANCE_IN_PROGRESS
    (fj,) = _rejoin(h, first.result.member_id)
    assert fj.error == NONE and pj.error == NONE
    assert fj.result.generation_id == pj.result.generation_id == 2
    assert set(join_members_of(fj.result)) == {first.result.member_id, pending}


# ---------------------------------------------------------------------------
# protocol selection and consistency
# ---------------------------------------------------------------------------

def test_protocols_a_new_member_needs_in_common_with_every_member(impl):
    # GroupMetadataTest.testSupportsProtocols
    h = Proto(impl)
    a = h.join_old("", protocols=SUPERSET)
    b = h.join_old("", protocols=_protocols(RR, FOO))
    assert b.result is None
    assert h.join_old("", protocols=_protocols(FOO, BAR)).error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert h.join_old("", protocols=_protocols(RANGE, FOO)).error == Errors.INCONSISTENT_GROUP_PROTOCOL
    bad_type = h.join_old("", protocols=_protocols(RR), ptype="invalid_type")
    assert bad_type.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    h.run_until_done([a, b])
    assert a.error == NONE and b.error == NONE
    assert a.result.protocol_name == RR
    assert set(join_members_of(a.result)) == {a.result.member_id, b.result.member_id}


def test_inconsistent_protocol_type_is_refused_before_a_member_id_is_handed_out(impl):
    # testJoinGroupInconsistentProtocolType (doNewMemberJoinGroup checks protocols first)
    h = Proto(impl)
    f = h.form_group(2)
    r = h.send_join("", ptype="connect")
    assert r.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert r.result.member_id == ""
    assert h.state() == STABLE and h.member_ids() == set(f.members)
    assert h.heartbeat(f.follower, f.generation) == NONE


def test_full_group_answers_max_size_before_checking_the_protocol(impl):
    # testJoinGroupShouldReceiveErrorIfGroupOverMaxSize (acceptJoiningMember comes first)
    h = Proto(impl)
    f = h.form_group(4)
    assert h.send_join("", ptype="connect").error == Errors.GROUP_MAX_SIZE_REACHED
    assert h.state() == STABLE and h.member_ids() == set(f.members)


# ---------------------------------------------------------------------------
# group max size
# ---------------------------------------------------------------------------

def test_pending_members_do_not_count_and_the_last_rejoining_member_is_kicked_out(impl):
    # testDynamicMembersJoinGroupWithMaxSizeAndRequiredKnownMember, from a Stable group
    h = Proto(impl)
    f = h.form_group(3)
    p1, p2 = h.pending(), h.pending()
    j1 = h.send_join(p1, protocols=SUPERSET)
    assert h.state() == PREPARING
    j2 = h.send_join(p2, protocols=SUPERSET)
    assert j2.result is None  # only one member waits: accepted
    f1, f2 = f.followers
    lj, fj = _rejoin(h, f.leader, f1)
    assert lj.result is None  # f2 has not rejoined yet
    late = h.send_join(f2, protocols=SUPERSET)
    assert late.error == Errors.GROUP_MAX_SIZE_REACHED
    for r in (j1, j2, lj, fj):
        assert r.error == NONE and r.result.generation_id == f.generation + 1
    assert h.member_ids() == {f.leader, f1, p1, p2}
    assert h.heartbeat(f2, f.generation) == Errors.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------------------
# static membership
# ---------------------------------------------------------------------------

def test_static_leader_replaced_during_completing_rebalance(impl):
    # staticMemberFenceDuplicateSyncingFollowerAfterMemberIdChanged, for the leader
    h = Proto(impl)
    f = h.form_group(2, static=True, sync=False)
    fs = h.send_sync(f.follower, f.generation, instance=F)
    nl = h.send_join("", instance=L, protocols=SUPERSET)
    assert fs.error == Errors.REBALANCE_IN_PROGRESS
    assert h.state() == PREPARING and nl.result is None
    assert h.heartbeat(f.leader, f.generation, instance=L) == Errors.FENCED_INSTANCE_ID
    assert h.heartbeat(f.leader, f.generation) == Errors.UNKNOWN_MEMBER_ID
    assert h.heartbeat(f.follower, f.generation, instance=F) == Errors.REBALANCE_IN_PROGRESS
    (fj,) = _rejoin(h, f.follower, instance=F)
    new_leader = nl.result.member_id
    assert nl.error == NONE and fj.error == NONE
    assert new_leader != f.leader and new_leader.startswith(L)
    assert nl.result.generation_id == fj.result.generation_id == f.generation + 1
    assert nl.result.leader_id == fj.result.leader_id == new_leader
    assert join_members_of(nl.result) == {new_leader: L, f.follower: F}


def test_static_follower_replaced_during_completing_rebalance_then_leader_syncs(impl):
    # staticMemberFenceDuplicateSyncingFollowerAfterMemberIdChanged, leader syncing late
    h = Proto(impl)
    f = h.form_group(2, static=True, sync=False)
    nf = h.send_join("", instance=F, protocols=SUPERSET)
    assert h.state() == PREPARING
    stale = {f.leader: b"L", f.follower: b"F"}
    ls = h.send_sync(f.leader, f.generation, stale, instance=L)
    assert ls.error == Errors.REBALANCE_IN_PROGRESS
    (lj,) = _rejoin(h, f.leader, instance=L)
    new_follower = nf.result.member_id
    assert lj.error == NONE and nf.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert lj.result.leader_id == f.leader
    assert join_members_of(lj.result) == {f.leader: L, new_follower: F}
    ls = h.send_sync(f.leader, f.generation + 1, {f.leader: b"L2", new_follower: b"F2"},
                     instance=L)
    fs = h.send_sync(new_follower, f.generation + 1, instance=F)
    assert ls.result.assignment == b"L2" and fs.result.assignment == b"F2"
    assert h.send_sync(f.follower, f.generation + 1, instance=F).error == Errors.FENCED_INSTANCE_ID


def test_static_follower_rejoining_with_a_different_protocol_during_rebalance(impl):
    # staticMemberRejoinWithKnownLeaderIdToTriggerRebalanceAndFollowerWithChangeofProtocol
    h = Proto(impl)
    f = h.form_group(2, static=True)
    (lj,) = _rejoin(h, f.leader, instance=L)
    assert h.state() == PREPARING
    fj = h.send_join(f.follower, instance=F, protocols=_protocols(RR))
    assert lj.error == NONE and fj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert lj.result.protocol_name == fj.result.protocol_name == RR
    assert lj.result.leader_id == f.leader
    gen = lj.result.generation_id
    assert h.send_sync(f.leader, gen, {}, instance=L).error == NONE
    assert h.describe().protocol_name == RR


def test_commits_after_a_static_member_was_replaced(impl):
    # staticMemberCommitOffsetWithInvalidMemberId, after a replacement in Stable
    h = Proto(impl)
    f = h.form_group(2, static=True)
    r = h.send_join("", instance=F, protocols=SUPERSET)
    assert r.error == NONE and r.result.generation_id == f.generation
    new_id = r.result.member_id
    assert _commit_error(h, f.follower, f.generation, instance=F) == Errors.FENCED_INSTANCE_ID
    assert _commit_error(h, f.follower, f.generation) == Errors.UNKNOWN_MEMBER_ID
    assert _commit_error(h, new_id, f.generation, offset=2, instance=F) == NONE
    assert _committed(h) == 2


# ---------------------------------------------------------------------------
# batch LeaveGroup
# ---------------------------------------------------------------------------

def test_batch_leave_of_static_dynamic_pending_fenced_and_unknown_members(impl):
    # testStaticMembersFencedInstanceBatchLeaveGroup + testPendingMemberBatchLeaveGroup, mixed
    h = Proto(impl)
    f = h.form_group(2, static=True)
    dyn = h.join_new(protocols=SUPERSET)
    replies = [dyn] + _rejoin(h, f.leader, instance=L) + _rejoin(h, f.follower, instance=F)
    assert all(r.error == NONE for r in replies)
    assert h.state() == COMPLETING
    pending = h.pending()
    dyn_id = dyn.result.member_id
    res = h.leave((dyn_id, None), (pending, None), ("", L), ("wrong-id", F),
                  ("unknown-member", None), ("", "unknown-instance"))
    assert res.error == NONE
    assert res.member_errors == [NONE, NONE, NONE, Errors.FENCED_INSTANCE_ID,
                                 Errors.UNKNOWN_MEMBER_ID, Errors.UNKNOWN_MEMBER_ID]
    assert h.member_ids() == {f.follower}
    assert h.state() == PREPARING
    (fj,) = _rejoin(h, f.follower, instance=F)
    assert fj.error == NONE
    assert fj.result.generation_id == f.generation + 2
    assert fj.result.leader_id == f.follower


def test_leaves_during_a_rebalance_complete_it_only_once_everyone_left_joined(impl):
    # testLeaveGroupUnknownConsumerExistingGroup + testPendingMembersLeavesGroup, mid-rebalance
    h = Proto(impl)
    f = h.form_group(3)
    f1, f2 = f.followers
    lj, fj = _rejoin(h, f.leader, f1)
    assert h.leave("unknown-member").member_errors == [Errors.UNKNOWN_MEMBER_ID]
    assert lj.result is None and h.state() == PREPARING
    assert h.leave(f2).member_errors == [NONE]
    assert lj.error == NONE and fj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert set(join_members_of(lj.result)) == {f.leader, f1}
    assert h.state() == COMPLETING


def test_batch_leave_of_every_member_empties_the_group_at_the_next_generation(impl):
    # testStaticMembersValidBatchLeaveGroup, then a fresh join
    h = Proto(impl)
    f = h.form_group(2, static=True)
    res = h.leave(("", L), ("", F))
    assert res.member_errors == [NONE, NONE]
    assert h.state() == EMPTY and h.member_ids() == set()
    again = h.send_join("", instance=L, protocols=SUPERSET)
    h.run_until_done([again])
    assert again.error == NONE
    assert again.result.generation_id == f.generation + 2


# ---------------------------------------------------------------------------
# offset commits during rebalances
# ---------------------------------------------------------------------------

def test_follower_commits_once_the_leader_synced(impl):
    # testCommitOffsetInCompletingRebalance, the other side: Stable after the leader's sync
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    assert _commit_error(h, f.follower, f.generation) == Errors.REBALANCE_IN_PROGRESS
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    assert ls.error == NONE and h.state() == STABLE
    assert _commit_error(h, f.follower, f.generation, offset=7) == NONE
    assert _commit_error(h, f.follower, f.generation - 1) == Errors.ILLEGAL_GENERATION
    assert _committed(h) == 7
    assert h.send_sync(f.follower, f.generation).result.assignment == b"F"

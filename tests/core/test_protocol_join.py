"""JoinGroup: every cell of the join rows of the request x state table
(group-protocol.md), protocol checks, protocol selection, leaders, generations
and group.max.size. Static-membership joins live in test_protocol_static.py."""
from __future__ import annotations

from fastcoord import Errors

from helpers.protocol import (
    COMPLETING, DELAY, EMPTY, META, NONE, PREPARING, PROTOCOLS, PTYPE, RANGE, RR, STABLE,
    SUPERSET, CLIENT_ID, Proto, join_members_of,
)


# ---------------------------------------------------------------------------
# Row: member id "", dynamic, known member id required (the default)
# ---------------------------------------------------------------------------

def test_new_dynamic_member_gets_member_id_required_and_group_is_created_empty(impl):
    h = Proto(impl)
    r = h.send_join("")
    res = r.result
    assert res.error == Errors.MEMBER_ID_REQUIRED
    assert res.member_id.startswith(CLIENT_ID + "-")
    assert res.generation_id == -1
    assert res.members == []
    d = h.describe()
    assert d.state == EMPTY
    assert d.members == []  # a pending member is not a member


def test_member_id_required_in_preparing_rebalance_changes_nothing(impl):
    h = Proto(impl)
    f = h.form_group(2)
    h.join_old(f.leader, protocols=SUPERSET)  # leader re-joins: PR, parked
    assert h.state() == PREPARING
    r = h.send_join("")
    assert r.error == Errors.MEMBER_ID_REQUIRED
    assert r.result.member_id not in f.members
    assert h.state() == PREPARING
    assert h.member_ids() == set(f.members)


def test_member_id_required_in_completing_rebalance_changes_nothing(impl):
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    assert h.state() == COMPLETING
    r = h.send_join("")
    assert r.error == Errors.MEMBER_ID_REQUIRED
    assert h.state() == COMPLETING
    # the generation did not move: the leader can still sync it
    s = h.send_sync(f.leader, f.generation, {f.leader: b"a", f.follower: b"b"})
    assert s.error == NONE and s.result.assignment == b"a"


def test_member_id_required_in_stable_changes_nothing(impl):
    h = Proto(impl)
    f = h.form_group(2)
    r = h.send_join("")
    assert r.error == Errors.MEMBER_ID_REQUIRED
    assert h.state() == STABLE
    assert h.member_ids() == set(f.members)
    assert h.heartbeat(f.follower, f.generation) == NONE


def test_each_member_id_required_hands_out_a_fresh_id(impl):
    h = Proto(impl)
    ids = {h.pending() for _ in range(3)}
    assert len(ids) == 3


# ---------------------------------------------------------------------------
# Row: member id "", dynamic, not required (old clients)
# ---------------------------------------------------------------------------

def test_old_client_join_in_empty_group_parks_until_initial_delay(impl):
    h = Proto(impl)
    r = h.join_old("")
    assert r.result is None
    assert h.state() == PREPARING
    h.advance(DELAY - 1)
    assert r.result is None
    h.advance(1)
    res = r.result
    assert res.error == NONE
    assert res.generation_id == 1
    assert res.leader_id == res.member_id
    assert res.member_id.startswith(CLIENT_ID + "-")
    assert res.protocol_type == PTYPE and res.protocol_name == RANGE
    assert [m.member_id for m in res.members] == [res.member_id]
    assert h.state() == COMPLETING


def test_old_client_join_in_preparing_rebalance_is_added_and_parked(impl):
    h = Proto(impl)
    f = h.form_group(1)
    lj = h.join_old(f.leader, protocols=SUPERSET)  # leader re-join: completes at once (all joined)
    assert lj.error == NONE and lj.result.generation_id == f.generation + 1
    # Now a follower-less CR group; make it rebalance with a second member
    h2 = Proto(impl)
    f2 = h2.form_group(2)
    lead = h2.join_old(f2.leader, protocols=SUPERSET)
    assert h2.state() == PREPARING and lead.result is None
    new = h2.join_old("")
    assert new.result is None
    assert h2.state() == PREPARING
    fol = h2.join_old(f2.follower, protocols=SUPERSET)
    # every member has now re-joined: the join completes at once
    for r in (lead, new, fol):
        assert r.error == NONE
        assert r.result.generation_id == f2.generation + 1
        assert r.result.leader_id == f2.leader
    assert len(lead.result.members) == 3
    assert new.result.members == [] and fol.result.members == []


def test_old_client_join_in_completing_rebalance_rebalances_and_fails_parked_syncs(impl):
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    fs = h.send_sync(f.follower, f.generation)
    assert fs.result is None  # parked until the leader syncs
    new = h.join_old("")
    assert fs.error == Errors.REBALANCE_IN_PROGRESS
    assert h.state() == PREPARING
    assert new.result is None
    lj = h.join_old(f.leader, protocols=SUPERSET)
    fj = h.join_old(f.follower, protocols=SUPERSET)
    for r in (new, lj, fj):
        assert r.error == NONE and r.result.generation_id == f.generation + 1
    assert len(lj.result.members) == 3


def test_old_client_join_in_stable_rebalances(impl):
    h = Proto(impl)
    f = h.form_group(2)
    new = h.join_old("")
    assert new.result is None
    assert h.state() == PREPARING
    assert h.heartbeat(f.leader, f.generation) == Errors.REBALANCE_IN_PROGRESS
    lj = h.join_old(f.leader, protocols=SUPERSET)
    assert lj.result is None  # the follower has not re-joined yet
    fj = h.join_old(f.follower, protocols=SUPERSET)
    assert {lj.error, fj.error, new.error} == {NONE}
    assert new.result.generation_id == f.generation + 1
    assert h.member_ids() == set(f.members) | {new.result.member_id}


# ---------------------------------------------------------------------------
# Row: known member id
# ---------------------------------------------------------------------------

def test_join_with_member_id_on_unknown_group_is_unknown_member(impl):
    h = Proto(impl)
    r = h.send_join("memberId")
    assert r.error == Errors.UNKNOWN_MEMBER_ID
    assert r.result.generation_id == -1
    r2 = h.send_join("memberId", instance="groupInstanceId")
    assert r2.error == Errors.UNKNOWN_MEMBER_ID
    assert h.describe().state == "Dead"  # the group was not created


def test_join_with_unknown_member_id_on_existing_group(impl):
    h = Proto(impl)
    f = h.form_group(1)
    r = h.send_join("memberId")
    assert r.error == Errors.UNKNOWN_MEMBER_ID
    assert r.result.member_id == "memberId"
    assert h.member_ids() == {f.leader}
    assert h.state() == STABLE


def test_join_with_known_member_id_in_empty_group_is_unknown_member(impl):
    h = Proto(impl)
    f = h.form_group(1)
    assert h.leave(f.leader).member_errors == [NONE]
    assert h.state() == EMPTY
    r = h.send_join(f.leader)
    assert r.error == Errors.UNKNOWN_MEMBER_ID
    assert h.state() == EMPTY


def test_unchanged_follower_join_in_stable_answers_at_once_without_rebalance(impl):
    h = Proto(impl)
    f = h.form_group(2)
    r = h.send_join(f.follower, protocols=SUPERSET)
    res = r.result
    assert res.error == NONE
    assert res.generation_id == f.generation
    assert res.leader_id == f.leader
    assert res.member_id == f.follower
    assert res.members == []
    assert res.protocol_name == f.protocol
    assert h.state() == STABLE


def test_leader_join_in_stable_rebalances_even_with_same_metadata(impl):
    h = Proto(impl)
    f = h.form_group(1)
    r = h.send_join(f.leader, protocols=SUPERSET)
    # the only member re-joined: the join completes at once with a new generation
    assert r.error == NONE
    assert r.result.generation_id == f.generation + 1
    assert r.result.leader_id == f.leader
    assert h.state() == COMPLETING


def test_follower_with_changed_metadata_in_stable_rebalances(impl):
    h = Proto(impl)
    f = h.form_group(2)
    fj = h.send_join(f.follower, protocols=[(RANGE, b"changed")])
    assert fj.result is None
    assert h.state() == PREPARING
    lj = h.send_join(f.leader, protocols=SUPERSET)
    assert fj.error == NONE and lj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert join_members_of(lj.result).keys() == set(f.members)
    meta = {m.member_id: m.metadata for m in lj.result.members}
    assert meta[f.follower] == b"changed"


def test_join_in_completing_rebalance_with_same_metadata_returns_current_generation(impl):
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    lj = h.send_join(f.leader, protocols=SUPERSET)
    assert lj.error == NONE
    assert lj.result.generation_id == f.generation
    assert lj.result.leader_id == f.leader
    assert set(join_members_of(lj.result)) == set(f.members)  # the leader gets the list
    fj = h.send_join(f.follower, protocols=SUPERSET)
    assert fj.error == NONE
    assert fj.result.generation_id == f.generation
    assert fj.result.members == []
    assert h.state() == COMPLETING


def test_join_in_completing_rebalance_with_changed_metadata_rebalances(impl):
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    fj = h.send_join(f.follower, protocols=PROTOCOLS)
    assert fj.result is None
    assert h.state() == PREPARING
    lj = h.send_join(f.leader, protocols=SUPERSET)
    assert lj.error == NONE and fj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert lj.result.protocol_name == RANGE


def test_known_member_join_in_preparing_rebalance_updates_metadata(impl):
    h = Proto(impl)
    f = h.form_group(2)
    lj = h.send_join(f.leader, protocols=SUPERSET)
    assert lj.result is None
    fj = h.send_join(f.follower, protocols=[(RR, b"x")])
    assert lj.error == NONE and fj.error == NONE
    # the follower now supports only roundrobin: the group must select it
    assert lj.result.protocol_name == RR
    assert fj.result.protocol_name == RR
    meta = {m.member_id: m.metadata for m in lj.result.members}
    assert meta == {f.leader: META, f.follower: b"x"}


def test_generation_increments_on_each_rebalance(impl):
    h = Proto(impl)
    f = h.form_group(1)
    assert f.generation == 1
    r = h.send_join(f.leader, protocols=SUPERSET)
    assert r.result.generation_id == 2
    s = h.send_sync(f.leader, 2, {f.leader: b""})
    assert s.error == NONE
    r = h.send_join(f.leader, protocols=SUPERSET)
    assert r.result.generation_id == 3


# ---------------------------------------------------------------------------
# Row: known *pending* member id
# ---------------------------------------------------------------------------

def test_pending_member_join_in_empty_group_starts_delayed_rebalance(impl):
    h = Proto(impl)
    mid = h.pending()
    assert h.state() == EMPTY
    r = h.send_join(mid)
    assert r.result is None
    assert h.state() == PREPARING
    h.advance(DELAY)
    assert r.error == NONE
    assert r.result.member_id == mid and r.result.leader_id == mid
    assert r.result.generation_id == 1


def test_pending_member_join_in_preparing_rebalance_is_added_and_parked(impl):
    h = Proto(impl)
    f = h.form_group(2)
    lj = h.send_join(f.leader, protocols=SUPERSET)
    mid = h.pending()
    r = h.send_join(mid)
    assert r.result is None and lj.result is None
    assert h.state() == PREPARING
    fj = h.send_join(f.follower, protocols=SUPERSET)
    for x in (lj, r, fj):
        assert x.error == NONE and x.result.generation_id == f.generation + 1
    assert h.member_ids() == set(f.members) | {mid}


def test_pending_member_join_in_completing_rebalance_rebalances(impl):
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    fs = h.send_sync(f.follower, f.generation)
    mid = h.pending()
    assert h.state() == COMPLETING and fs.result is None
    r = h.send_join(mid)
    assert r.result is None
    assert h.state() == PREPARING
    assert fs.error == Errors.REBALANCE_IN_PROGRESS
    h.send_join(f.leader, protocols=SUPERSET)
    h.send_join(f.follower, protocols=SUPERSET)
    assert r.error == NONE and r.result.generation_id == f.generation + 1


def test_pending_member_join_in_stable_rebalances(impl):
    h = Proto(impl)
    f = h.form_group(2)
    mid = h.pending()
    assert h.state() == STABLE
    r = h.send_join(mid)
    assert r.result is None
    assert h.state() == PREPARING
    h.send_join(f.leader, protocols=SUPERSET)
    h.send_join(f.follower, protocols=SUPERSET)
    assert r.error == NONE
    assert r.result.leader_id == f.leader
    assert r.result.generation_id == f.generation + 1


# ---------------------------------------------------------------------------
# Protocol checks
# ---------------------------------------------------------------------------

def test_inconsistent_protocol_type_is_rejected(impl):
    h = Proto(impl)
    h.form_group(1)
    r = h.send_join("", ptype="connect")
    assert r.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert r.result.generation_id == -1
    r2 = h.join_old("", ptype="connect")
    assert r2.error == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_empty_protocol_type_on_empty_group_is_rejected(impl):
    h = Proto(impl)
    r = h.send_join("", ptype="")
    assert r.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    r2 = h.send_join("", ptype="", instance="groupInstanceId")
    assert r2.error == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_empty_protocol_list_on_empty_group_is_rejected(impl):
    h = Proto(impl)
    r = h.join_old("", protocols=[])
    assert r.error == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_join_with_no_protocol_in_common_is_rejected(impl):
    h = Proto(impl)
    first = h.join_old("", protocols=[(RANGE, META)])
    other = h.join_old("", protocols=[(RR, META)])
    assert other.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert other.result.member_id == ""
    h.advance(DELAY)
    assert first.error == NONE
    assert [m.member_id for m in first.result.members] == [first.result.member_id]


def test_pending_member_rejoin_with_inconsistent_protocol_then_consistent(impl):
    h = Proto(impl)
    mid = h.pending()
    r = h.send_join(mid, protocols=[])
    assert r.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    r = h.send_join(mid, protocols=PROTOCOLS)
    h.advance(DELAY)
    assert r.error == NONE and r.result.member_id == mid


def test_error_results_carry_no_protocol_type(impl):
    h = Proto(impl)
    r = h.send_join("fake-id", protocols=SUPERSET, instance="leader")
    assert r.error == Errors.UNKNOWN_MEMBER_ID
    assert r.result.protocol_type is None
    assert r.result.protocol_name is None


def test_successful_results_carry_protocol_type_for_leader_and_follower(impl):
    h = Proto(impl)
    lr = h.send_join("", instance="leader", protocols=SUPERSET)
    fr = h.send_join("", instance="follower", protocols=SUPERSET)
    h.run_until_done([lr, fr])
    for r in (lr, fr):
        assert r.error == NONE
        assert r.result.protocol_type == PTYPE
        assert r.result.protocol_name == RANGE


# ---------------------------------------------------------------------------
# Protocol selection and leader
# ---------------------------------------------------------------------------

def test_protocol_selection_by_member_votes(impl):
    h = Proto(impl)
    a = h.join_old("", protocols=[(RR, b"a"), (RANGE, b"a")])
    b = h.join_old("", protocols=[(RANGE, b"b"), (RR, b"b")])
    c = h.join_old("", protocols=[(RANGE, b"c"), (RR, b"c")])
    h.run_until_done([a, b, c])
    assert {a.result.protocol_name, b.result.protocol_name, c.result.protocol_name} == {RANGE}
    # the leader's member list carries each member's metadata for the selected protocol
    meta = {m.member_id: m.metadata for m in a.result.members}
    assert meta == {a.result.member_id: b"a", b.result.member_id: b"b", c.result.member_id: b"c"}


def test_protocol_selection_only_among_protocols_all_members_support(impl):
    h = Proto(impl)
    a = h.join_old("", protocols=[("x", b""), ("y", b"")])
    b = h.join_old("", protocols=[("x", b""), ("y", b"")])
    c = h.join_old("", protocols=[("z", b""), ("y", b"")])
    h.run_until_done([a, b, c])
    assert a.result.protocol_name == "y"
    assert h.describe().protocol_name == ""  # CR: no protocol until Stable (Kafka's summary)


def test_first_member_leads_and_leader_member_list_has_everyone(impl):
    h = Proto(impl)
    f = h.form_group(3, sync=False)
    h2 = Proto(impl)  # fresh coordinator, same sequence, to look at the join results
    rs = [h2.join_new(protocols=SUPERSET) for _ in range(3)]
    h2.run_until_done(rs)
    leader_res = rs[0].result
    assert leader_res.leader_id == leader_res.member_id
    assert set(join_members_of(leader_res)) == {r.result.member_id for r in rs}
    assert all(r.result.members == [] for r in rs[1:])
    assert all(r.result.leader_id == leader_res.member_id for r in rs)
    assert f.leader == f.members[0]


def test_leader_leaving_hands_leadership_to_a_remaining_member(impl):
    h = Proto(impl)
    f = h.form_group(2)
    assert h.leave(f.leader).member_errors == [NONE]
    r = h.send_join(f.follower, protocols=SUPERSET)
    assert r.error == NONE
    assert r.result.leader_id == f.follower
    assert r.result.generation_id == f.generation + 1
    assert set(join_members_of(r.result)) == {f.follower}


# ---------------------------------------------------------------------------
# group.max.size (4 in these tests)
# ---------------------------------------------------------------------------

def test_new_member_rejected_when_stable_group_is_full(impl):
    h = Proto(impl)
    f = h.form_group(4)
    r = h.join_old("")
    assert r.error == Errors.GROUP_MAX_SIZE_REACHED
    assert r.result.member_id == ""
    assert r.result.generation_id == -1
    r2 = h.send_join("")  # even the MEMBER_ID_REQUIRED round trip is refused
    assert r2.error == Errors.GROUP_MAX_SIZE_REACHED
    assert h.state() == STABLE
    assert h.member_ids() == set(f.members)


def test_dynamic_members_with_required_member_id_and_max_size(impl):
    h = Proto(impl)
    ids = [h.pending(rebalance=DELAY) for _ in range(5)]  # Empty accepts everyone as pending
    replies = [h.send_join(m, rebalance=DELAY) for m in ids]
    assert replies[4].error == Errors.GROUP_MAX_SIZE_REACHED  # 4 already wait in the join
    assert replies[4].result.member_id == ""
    h.run_until_done(replies)
    errors = [r.error for r in replies]
    assert errors == [NONE] * 4 + [Errors.GROUP_MAX_SIZE_REACHED]
    # members that were accepted can re-join; the others are refused (in CompletingRebalance)
    again = [h.send_join(m, rebalance=DELAY) for m in ids]
    assert [r.error for r in again] == errors
    assert h.member_ids() == set(ids[:4])


def test_dynamic_old_client_members_and_max_size(impl):
    h = Proto(impl)
    replies = [h.join_old("", rebalance=DELAY) for _ in range(5)]
    h.run_until_done(replies)
    errors = [r.error for r in replies]
    assert errors == [NONE] * 4 + [Errors.GROUP_MAX_SIZE_REACHED]
    member_ids = [r.result.member_id for r in replies]
    assert member_ids[4] == ""
    again = [h.join_old(m, rebalance=DELAY) for m in member_ids]
    assert [r.error for r in again] == errors


def test_members_can_rejoin_while_rebalancing_at_max_size(impl):
    h = Proto(impl)
    ids = [h.pending(rebalance=DELAY) for _ in range(5)]
    for m in ids:
        h.send_join(m, rebalance=DELAY)
    assert h.state() == PREPARING
    again = [h.send_join(m, rebalance=DELAY) for m in ids]
    h.run_until_done(again)
    assert [r.error for r in again] == [NONE] * 4 + [Errors.GROUP_MAX_SIZE_REACHED]
    assert h.member_ids() == set(ids[:4])


def test_max_size_in_preparing_rebalance_counts_waiting_members(impl):
    h = Proto(impl)
    f = h.form_group(4)
    lj = h.send_join(f.leader, protocols=SUPERSET)
    assert h.state() == PREPARING
    # only one member waits, so a newcomer is accepted although the group already has 4
    new = h.join_old("", protocols=SUPERSET)
    assert new.result is None
    f1, f2, f3 = f.followers
    r1 = h.send_join(f1, protocols=SUPERSET)
    r2 = h.send_join(f2, protocols=SUPERSET)
    # 4 now wait: the last existing member to re-join is kicked out
    r3 = h.send_join(f3, protocols=SUPERSET)
    assert r3.error == Errors.GROUP_MAX_SIZE_REACHED
    assert r3.result.member_id == ""
    # everyone left has re-joined: the rebalance completes at once
    for r in (lj, new, r1, r2):
        assert r.error == NONE
        assert r.result.generation_id == f.generation + 1
    assert h.member_ids() == {f.leader, f1, f2, new.result.member_id}
    assert len(lj.result.members) == 4


def test_protocol_selection_tie_is_deterministic_and_shared_by_both_twins(impl):
    def run(which):
        h = Proto(which)
        a = h.join_old("", protocols=[("x", b""), ("y", b"")])
        b = h.join_old("", protocols=[("y", b""), ("x", b"")])
        h.run_until_done([a, b])
        assert a.result.protocol_name == b.result.protocol_name
        return a.result.protocol_name

    first = run(impl)
    assert first in ("x", "y")
    assert all(run(impl) == first for _ in range(3))
    assert run("pure") == first


def test_new_static_member_rejected_when_stable_group_is_full(impl):
    h = Proto(impl)
    f = h.form_group(4)
    r = h.send_join("", instance="late")
    assert r.error == Errors.GROUP_MAX_SIZE_REACHED
    assert r.result.member_id == ""
    assert h.member_ids() == set(f.members)
    # the instance id was not registered: a later attempt is refused the same way
    assert h.send_join("", instance="late").error == Errors.GROUP_MAX_SIZE_REACHED

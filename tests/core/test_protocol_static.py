"""Static membership (group.instance.id): new instances in each state, replacement
and fencing in PR / CR / Stable, static leader replacement, follower restart
without a rebalance or with a changed protocol, store write of the replacement,
static members surviving a rebalance they did not join."""
from __future__ import annotations

from fastcoord import Errors
from fastcoord.core.store import DeferredStore, InMemoryStore

from helpers.protocol import (
    COMPLETING, DELAY, EMPTY, GROUP, MAX_SIZE, NONE, PREPARING, PROTOCOLS, RANGE, REBALANCE, RR,
    SESSION, STABLE, SUPERSET, Proto, join_members_of,
)

L, F = "leader", "follower"


def _static_pair(h, session=SESSION, rebalance=REBALANCE):
    f = h.form_group(2, static=True, session=session, rebalance=rebalance)
    assert f.instances == {f.leader: L, f.follower: F}
    return f


def _instances(result):
    return set(join_members_of(result).values())


# ---------------------------------------------------------------------------
# new static members
# ---------------------------------------------------------------------------

def test_static_member_joins_empty_group_as_first_member(impl):
    h = Proto(impl)
    r = h.send_join("", instance="groupInstanceId")
    assert r.result is None  # no MEMBER_ID_REQUIRED round trip for static members
    h.advance(DELAY)
    assert r.error == NONE
    assert r.result.member_id.startswith("groupInstanceId-")
    assert r.result.leader_id == r.result.member_id
    assert join_members_of(r.result) == {r.result.member_id: "groupInstanceId"}


def test_new_static_member_in_preparing_rebalance_is_added_and_parked(impl):
    h2 = Proto(impl)
    f2 = h2.form_group(2)
    lj = h2.send_join(f2.leader, protocols=SUPERSET)
    assert h2.state() == PREPARING
    s = h2.send_join("", instance="s1", protocols=SUPERSET)
    assert s.result is None and h2.state() == PREPARING
    fj = h2.send_join(f2.follower, protocols=SUPERSET)
    assert s.error == NONE and lj.error == NONE and fj.error == NONE
    assert s.result.generation_id == f2.generation + 1
    assert "s1" in _instances(lj.result)


def test_new_static_member_in_completing_rebalance_rebalances(impl):
    h = Proto(impl)
    f = h.form_group(1, sync=False)
    s = h.send_join("", instance="s1", protocols=SUPERSET)
    assert s.result is None
    assert h.state() == PREPARING
    lj = h.send_join(f.leader, protocols=SUPERSET)
    assert lj.error == NONE and s.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert join_members_of(lj.result) == {f.leader: None, s.result.member_id: "s1"}


def test_new_static_member_in_stable_rebalances(impl):
    h = Proto(impl)
    f = h.form_group(1)
    s = h.send_join("", instance="s1", protocols=SUPERSET)
    assert s.result is None
    assert h.state() == PREPARING
    assert h.heartbeat(f.leader, f.generation) == Errors.REBALANCE_IN_PROGRESS
    h.send_join(f.leader, protocols=SUPERSET)
    assert s.error == NONE and s.result.generation_id == f.generation + 1
    assert s.result.leader_id == f.leader


def test_static_members_and_max_size(impl):
    h = Proto(impl)
    insts = [f"instance-id-{i}" for i in range(1, MAX_SIZE + 2)]
    replies = [h.send_join("", instance=i, rebalance=DELAY) for i in insts]
    h.run_until_done(replies)
    errors = [r.error for r in replies]
    assert errors == [NONE] * MAX_SIZE + [Errors.GROUP_MAX_SIZE_REACHED]
    ids = [r.result.member_id for r in replies]
    again = [h.send_join(m, instance=i, rebalance=DELAY) for i, m in zip(insts, ids)]
    assert [r.error for r in again] == errors


# ---------------------------------------------------------------------------
# member validation for static members
# ---------------------------------------------------------------------------

def test_static_rejoin_with_explicit_unknown_member_id_is_fenced(impl):
    h = Proto(impl)
    r = h.send_join("", instance="groupInstanceId")
    h.advance(DELAY)
    assert r.error == NONE
    r2 = h.send_join("unknown_member", instance="groupInstanceId")
    assert r2.error == Errors.FENCED_INSTANCE_ID
    assert r2.result.generation_id == -1


def test_static_rejoin_with_mismatched_member_id_is_fenced(impl):
    h = Proto(impl)
    f = _static_pair(h)
    assert h.send_join(f.follower, instance=L, protocols=SUPERSET).error == Errors.FENCED_INSTANCE_ID
    assert h.send_join(f.leader, instance=F, protocols=SUPERSET).error == Errors.FENCED_INSTANCE_ID
    assert h.state() == STABLE


def test_static_join_with_unknown_instance_and_known_member_id(impl):
    h = Proto(impl)
    f = _static_pair(h)
    r = h.send_join(f.leader, instance="unknown_instance", protocols=SUPERSET)
    assert r.error == Errors.UNKNOWN_MEMBER_ID
    assert h.state() == STABLE


def test_static_sync_with_invalid_member_id_is_fenced(impl):
    h = Proto(impl)
    f = _static_pair(h)
    r = h.send_sync("invalid", f.generation, {}, instance=L)
    assert r.error == Errors.FENCED_INSTANCE_ID


def test_static_heartbeat_with_invalid_member_id_is_fenced(impl):
    h = Proto(impl)
    f = _static_pair(h)
    assert h.heartbeat(f.leader, f.generation) == NONE
    assert h.heartbeat(f.leader, f.generation, instance=L) == NONE
    assert h.heartbeat("invalidMember", f.generation, instance=L) == Errors.FENCED_INSTANCE_ID
    assert h.heartbeat(f.leader, f.generation, instance="nobody") == Errors.UNKNOWN_MEMBER_ID


def test_static_rejoin_with_known_member_id_in_completing_rebalance(impl):
    h = Proto(impl)
    r = h.send_join("", instance="groupInstanceId")
    h.advance(DELAY)
    mid = r.result.member_id
    r2 = h.send_join(mid, instance="groupInstanceId")
    assert r2.error == NONE  # same metadata in CR: answered at once
    assert r2.result.generation_id == r.result.generation_id
    assert h.state() == COMPLETING
    s = h.send_sync(mid, r2.result.generation_id, {mid: b""}, instance="groupInstanceId",
                    ptype="consumer", pname=RANGE)
    assert s.error == NONE
    assert h.state() == STABLE


# ---------------------------------------------------------------------------
# replacement (member id "" + known instance id) in PR / CR / Stable
# ---------------------------------------------------------------------------

def test_duplicate_follower_fences_old_follower_parked_join_in_preparing_rebalance(impl):
    h = Proto(impl)
    f = _static_pair(h)
    h.join_old("", protocols=SUPERSET)  # a newcomer triggers the rebalance
    assert h.state() == PREPARING
    old = h.send_join(f.follower, instance=F, protocols=SUPERSET)
    assert old.result is None
    dup = h.send_join("", instance=F, protocols=SUPERSET)
    assert old.error == Errors.FENCED_INSTANCE_ID
    assert old.result.generation_id == -1
    assert dup.result is None
    assert h.state() == PREPARING
    lj = h.send_join(f.leader, instance=L, protocols=SUPERSET)
    assert dup.error == NONE and lj.error == NONE
    assert dup.result.member_id not in (f.follower, "")
    assert dup.result.generation_id == f.generation + 1
    assert _instances(lj.result) == {L, F, None}


def test_duplicate_follower_fences_old_follower_parked_sync_in_completing_rebalance(impl):
    h = Proto(impl)
    f = _static_pair(h, session=1000)
    t = h.now
    lj = h.send_join(f.leader, instance=L, protocols=SUPERSET, session=1000)
    assert h.state() == PREPARING
    oj = h.send_join(f.follower, instance=F, protocols=SUPERSET, session=1000)
    assert lj.error == NONE and oj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert _instances(lj.result) == {L, F}
    assert oj.result.member_id == f.follower and oj.result.leader_id == f.leader
    assert oj.result.members == []
    assert h.state() == COMPLETING
    os_ = h.send_sync(f.follower, f.generation + 1, instance=F, ptype="consumer", pname=RANGE)
    assert os_.result is None
    dup = h.send_join("", instance=F, protocols=SUPERSET, session=1000)
    assert os_.error == Errors.FENCED_INSTANCE_ID
    assert h.state() == PREPARING
    # the leader does not re-join: at the rebalance timeout the duplicate, the only member
    # that joined, becomes leader; the static leader stays a member
    h.advance_to(t + REBALANCE - 1)
    assert dup.result is None
    h.advance(1)
    res = dup.result
    assert res.error == NONE
    assert res.generation_id == f.generation + 2
    assert res.leader_id == res.member_id
    assert _instances(res) == {L, F}
    assert h.state() == COMPLETING


def test_duplicate_follower_replaces_in_preparing_rebalance_and_old_id_is_fenced(impl):
    h = Proto(impl)
    f = _static_pair(h)
    lj = h.send_join(f.leader, instance=L, protocols=SUPERSET)
    assert h.state() == PREPARING
    dup = h.send_join("", instance=F, protocols=SUPERSET)
    # both members have joined: the rebalance completes at once
    assert lj.error == NONE and dup.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert _instances(lj.result) == {L, F}
    assert dup.result.generation_id == f.generation + 1
    assert dup.result.members == []
    assert dup.result.member_id != f.follower
    old = h.send_join(f.follower, instance=F, protocols=SUPERSET)
    assert old.error == Errors.FENCED_INSTANCE_ID
    assert h.state() == COMPLETING


def test_static_leader_replacement_in_preparing_rebalance_moves_leadership(impl):
    h = Proto(impl)
    f = _static_pair(h, session=1000)
    t = h.now
    old = h.send_join(f.leader, instance=L, protocols=SUPERSET)
    new = h.send_join("", instance=L, protocols=SUPERSET)
    assert old.error == Errors.FENCED_INSTANCE_ID
    h.advance_to(t + REBALANCE)  # the follower never re-joins; it is static, so it stays
    res = new.result
    assert res.error == NONE
    assert res.leader_id == res.member_id != f.leader
    assert join_members_of(res) == {res.member_id: L, f.follower: F}


def test_static_leader_rejoin_with_unknown_member_id_in_stable_keeps_generation(impl):
    h = Proto(impl)
    f = _static_pair(h)
    r = h.send_join("", instance=L, protocols=SUPERSET)
    res = r.result
    assert res.error == NONE
    assert res.generation_id == f.generation
    assert res.member_id != f.leader and res.member_id.startswith(L)
    assert h.state() == STABLE
    # JoinGroup v9+ (KIP-814) tells the new leader it leads but must skip the assignment;
    # older versions answer with the old leader id and no member list. Our API has no
    # version flag, so either form is accepted.
    if res.skip_assignment:
        assert res.leader_id == res.member_id
        assert _instances(res) == {L, F}
    else:
        assert res.leader_id == f.leader
        assert res.members == []
    # the old leader id is fenced everywhere
    assert h.send_join(f.leader, instance=L, protocols=SUPERSET).error == Errors.FENCED_INSTANCE_ID
    assert h.send_sync(f.leader, f.generation, {}, instance=L).error == Errors.FENCED_INSTANCE_ID
    assert h.heartbeat(f.leader, f.generation, instance=L) == Errors.FENCED_INSTANCE_ID
    assert h.send_sync(f.leader, f.generation, {}).error == Errors.UNKNOWN_MEMBER_ID
    # the new id inherits the member's assignment
    s = h.send_sync(res.member_id, f.generation, instance=L)
    assert s.error == NONE and s.result.assignment == f.assignments[f.leader]


def test_static_member_gets_a_new_member_id_on_each_rejoin(impl):
    h = Proto(impl)
    f = _static_pair(h)
    last = f.leader
    for _ in range(5):
        r = h.send_join("", instance=L, protocols=SUPERSET)
        assert r.error == NONE
        assert r.result.member_id.startswith(L)
        assert r.result.member_id != last
        assert r.result.generation_id == f.generation
        last = r.result.member_id
    assert h.state() == STABLE
    assert h.member_ids() == {last, f.follower}


def test_static_follower_restart_with_unknown_id_and_same_protocols_no_rebalance(impl):
    h = Proto(impl)
    f = _static_pair(h)
    r = h.send_join("", instance=F, protocols=SUPERSET)
    res = r.result
    assert res.error == NONE
    assert res.generation_id == f.generation
    assert res.member_id != f.follower
    assert res.leader_id == f.leader
    assert res.members == []
    assert h.state() == STABLE
    assert h.has_member(f.leader)
    s = h.send_sync(res.member_id, f.generation)
    assert s.error == NONE and s.result.assignment == f.assignments[f.follower]


def test_static_follower_restart_with_protocol_subset_keeping_selected_protocol(impl):
    h = Proto(impl)
    f = _static_pair(h)
    assert f.protocol == RANGE
    r = h.send_join("", instance=F, protocols=[(RANGE, b"")])
    res = r.result
    assert res.error == NONE
    assert res.generation_id == f.generation
    assert h.state() == STABLE
    assert res.member_id != f.follower
    assert h.send_join(f.follower, instance=F, protocols=PROTOCOLS).error == Errors.FENCED_INSTANCE_ID
    assert h.send_sync(f.follower, f.generation, instance=F).error == Errors.FENCED_INSTANCE_ID
    s = h.send_sync(res.member_id, f.generation, instance=F)
    assert s.error == NONE and s.result.assignment == f.assignments[f.follower]


def test_static_follower_restart_changing_selected_protocol_rebalances(impl):
    h = Proto(impl)
    f = _static_pair(h, session=1000)
    t = h.now
    r = h.send_join("", instance=F, protocols=[(RR, b"")])
    assert r.result is None
    assert h.state() == PREPARING
    h.advance_to(t + REBALANCE - 1)
    assert r.result is None
    h.advance(1)
    res = r.result
    assert res.error == NONE
    assert res.generation_id == f.generation + 1
    assert res.protocol_name == RR
    assert res.member_id != f.follower
    # the old leader did not re-join: the new follower id leads; the static leader stays
    assert res.leader_id == res.member_id
    assert _instances(res) == {L, F}
    assert h.heartbeat(f.follower, f.generation + 1, instance=F) == Errors.FENCED_INSTANCE_ID


def test_static_follower_rejoin_with_known_id_and_same_protocols_no_rebalance(impl):
    h = Proto(impl)
    f = _static_pair(h)
    r = h.send_join(f.follower, instance=F, protocols=SUPERSET)
    res = r.result
    assert res.error == NONE
    assert res.generation_id == f.generation
    assert res.leader_id == f.leader and res.member_id == f.follower
    assert res.members == []
    assert h.state() == STABLE


def test_static_follower_rejoin_with_known_id_and_changed_protocol_takes_leadership(impl):
    h = Proto(impl)
    f = _static_pair(h, session=1000)
    t = h.now
    r = h.send_join(f.follower, instance=F, protocols=[(RR, b"")])
    assert h.state() == PREPARING
    h.advance_to(t + REBALANCE - 1)
    assert r.result is None
    h.advance(1)
    res = r.result
    assert res.error == NONE
    assert res.member_id == f.follower
    assert res.leader_id == f.follower
    assert res.generation_id == f.generation + 1
    assert _instances(res) == {L, F}
    assert h.has_member(f.leader)


def test_static_leader_rejoin_with_known_id_rebalances_and_follower_times_out(impl):
    h = Proto(impl)
    f = _static_pair(h, session=250)
    t = h.now
    r = h.send_join(f.leader, instance=L, protocols=SUPERSET)
    assert r.result is None
    h.advance(249)
    assert r.result is None
    h.advance(1)  # the follower's session ends at t + 250; the leader alone completes the join
    res = r.result
    assert res.error == NONE
    assert res.generation_id == f.generation + 1
    assert res.leader_id == f.leader == res.member_id
    assert _instances(res) == {L}
    assert not h.has_member(f.follower)
    assert h.now == t + 250


def test_known_leader_rejoin_then_follower_protocol_change_in_completing_rebalance(impl):
    h = Proto(impl)
    f = _static_pair(h, session=400)
    # (a JoinGroup also updates the member's session timeout: keep 400)
    lj = h.send_join(f.leader, instance=L, protocols=SUPERSET, session=400)
    fj = h.send_join(f.follower, instance=F, protocols=SUPERSET, session=400)
    t = h.now
    assert lj.result.generation_id == fj.result.generation_id == f.generation + 1
    assert _instances(lj.result) == {L, F} and fj.result.members == []
    assert lj.result.leader_id == fj.result.leader_id == f.leader
    fj2 = h.send_join(f.follower, instance=F, protocols=PROTOCOLS, session=400)
    assert h.state() == PREPARING
    h.advance(399)
    assert fj2.result is None
    h.advance(1)  # the static leader's session ends; the follower completes the join alone
    res = fj2.result
    assert res.error == NONE
    assert res.generation_id == f.generation + 2
    assert res.leader_id == res.member_id == f.follower
    assert _instances(res) == {F}
    assert h.now == t + 400


# ---------------------------------------------------------------------------
# the replacement in Stable is written to the store before the answer
# ---------------------------------------------------------------------------

def _form_static_pair_deferred(h, store):
    lr = h.send_join("", instance=L, protocols=SUPERSET)
    fr = h.send_join("", instance=F, protocols=SUPERSET)
    h.run_until_done([lr, fr])
    gen, leader, follower = lr.result.generation_id, lr.result.member_id, fr.result.member_id
    ls = h.send_sync(leader, gen, {leader: b"L", follower: b"F"}, instance=L)
    store.complete_all()
    assert ls.error == NONE
    assert h.send_sync(follower, gen, instance=F).error == NONE
    assert h.state() == STABLE
    return gen, leader, follower


def test_static_replacement_in_stable_answers_after_store_write(impl):
    store = DeferredStore()
    h = Proto(impl, store=store)
    gen, leader, follower = _form_static_pair_deferred(h, store)
    r = h.send_join("", instance=F, protocols=SUPERSET)
    assert r.result is None
    assert any(p[0] == "group" for p in store.pending)
    store.complete_all()
    assert r.error == NONE
    assert r.result.generation_id == gen
    assert r.result.member_id not in ("", follower)
    assert h.state() == STABLE


def test_static_replacement_store_failure_reverts_to_old_member_id(impl):
    store = DeferredStore()
    h = Proto(impl, store=store)
    gen, leader, follower = _form_static_pair_deferred(h, store)
    r = h.send_join("", instance=F, protocols=[(RANGE, b"")])
    store.complete_all(Errors.COORDINATOR_NOT_AVAILABLE)
    res = r.result
    assert res.error == Errors.COORDINATOR_NOT_AVAILABLE
    assert res.member_id == ""
    assert res.generation_id == gen
    assert h.state() == STABLE
    # the old id was never replaced
    assert h.heartbeat(follower, gen, instance=F) == NONE
    old = h.send_join(follower, instance=F, protocols=SUPERSET)
    assert old.error == NONE and old.result.generation_id == gen
    s = h.send_sync(follower, gen, instance=F)
    assert s.error == NONE and s.result.assignment == b"F"


def test_static_replacement_store_failure_with_in_memory_store(impl):
    store = InMemoryStore()
    h = Proto(impl, store=store)
    f = _static_pair(h)
    store.fail_with = Errors.NOT_COORDINATOR
    r = h.send_join("", instance=F, protocols=[(RANGE, b"")])
    store.fail_with = Errors.NONE
    assert r.error == Errors.NOT_COORDINATOR
    assert r.result.member_id == ""
    assert r.result.generation_id == f.generation
    assert h.state() == STABLE
    assert h.member_ids() == {f.leader, f.follower}


# ---------------------------------------------------------------------------
# static members that do not re-join a rebalance
# ---------------------------------------------------------------------------

def test_static_follower_not_rejoining_stays_and_new_member_completes(impl):
    h = Proto(impl)
    f = _static_pair(h, session=1000)
    t = h.now
    n = h.send_join("", instance="newMember", protocols=SUPERSET)
    assert h.state() == PREPARING
    lj = h.send_join(f.leader, instance=L, protocols=SUPERSET)
    h.advance_to(t + REBALANCE - 1)
    assert lj.result is None and n.result is None
    h.advance(1)
    assert lj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert lj.result.leader_id == f.leader
    assert _instances(lj.result) == {L, F, "newMember"}
    assert n.error == NONE and n.result.leader_id == f.leader and n.result.members == []


def test_static_leader_not_rejoining_hands_leadership_to_a_joined_member(impl):
    h = Proto(impl)
    f = _static_pair(h, session=1000)
    t = h.now
    n = h.send_join("", instance="newMember", protocols=SUPERSET)
    fj = h.send_join(f.follower, instance=F, protocols=SUPERSET)
    h.advance_to(t + REBALANCE)
    assert n.error == NONE and fj.error == NONE
    new_leader = fj.result.leader_id
    assert new_leader in (f.follower, n.result.member_id)
    assert n.result.leader_id == new_leader
    lead_res = fj.result if new_leader == f.follower else n.result
    other = n.result if new_leader == f.follower else fj.result
    assert _instances(lead_res) == {L, F, "newMember"}
    assert other.members == []
    assert h.has_member(f.leader)


def _stuck_group(h):
    """Static leader + follower (session 1000), a dynamic member joins and leads generation 2,
    the follower leaves; nobody re-joins, so at the rebalance timeout the dynamic member is
    removed and the group stays in PR (generation 2) with only the static leader."""
    f = _static_pair(h, session=1000)
    t = h.now
    d = h.join_old("", protocols=SUPERSET, session=1000)
    h.advance_to(t + REBALANCE)
    res = d.result
    assert res.error == NONE
    assert res.generation_id == 2
    assert res.leader_id == res.member_id
    assert len(res.members) == 3
    assert h.state() == COMPLETING
    assert h.leave(f.follower).member_errors == [NONE]
    assert h.state() == PREPARING
    h.advance_to(t + 2 * REBALANCE)
    assert h.member_ids() == {f.leader}
    assert h.state() == PREPARING
    return f, t, res.member_id


def test_static_leader_session_ends_while_group_stuck_in_rebalance(impl):
    h = Proto(impl)
    f, t, dyn = _stuck_group(h)
    assert h.heartbeat(dyn, 2) == Errors.UNKNOWN_MEMBER_ID
    # the static leader's session was last refreshed when generation 2 formed (t + 500)
    h.advance_to(t + REBALANCE + 1000 - 1)
    assert h.member_ids() == {f.leader}
    h.advance(1)
    assert h.member_ids() == set()
    assert h.state() == EMPTY
    r = h.join_old("")
    h.run_until_done([r])
    assert r.result.generation_id == 4  # the empty generation 3 counted


def test_static_leader_rejoins_while_group_stuck_in_rebalance(impl):
    h = Proto(impl)
    f, t, dyn = _stuck_group(h)
    r = h.send_join("", instance=L, protocols=PROTOCOLS)
    res = r.result
    assert res.error == NONE
    assert res.generation_id == 3
    assert res.leader_id == res.member_id != f.leader
    assert join_members_of(res) == {res.member_id: L}
    assert h.member_ids() == {res.member_id}
    assert h.state() == COMPLETING


def test_rebalance_completes_before_unjoined_static_member_expires(impl):
    h = Proto(impl)
    lr = h.send_join("", instance=L, session=1000, rebalance=1200)
    h.run_until_done([lr])
    leader, gen1 = lr.result.member_id, lr.result.generation_id
    assert h.send_sync(leader, gen1, {leader: b""}, instance=L).error == NONE
    t = h.now
    other = h.join_old("")  # session 500, rebalance 500; the group's rebalance timeout is 1200
    h.advance_to(t + 500)
    assert h.heartbeat(leader, gen1) == Errors.REBALANCE_IN_PROGRESS  # session now ends t+1500
    h.advance_to(t + 1000)
    assert h.heartbeat(leader, gen1) == Errors.REBALANCE_IN_PROGRESS  # now t+2000
    h.advance_to(t + 1199)
    assert other.result is None
    h.advance(1)
    res = other.result
    assert res.error == NONE and res.generation_id == gen1 + 1
    assert res.leader_id == res.member_id
    assert join_members_of(res) == {res.member_id: None, leader: L}
    om = res.member_id
    assert h.send_sync(om, gen1 + 1, {om: b""}).error == NONE
    assert h.heartbeat(leader, gen1) == Errors.ILLEGAL_GENERATION  # still a member
    # completing the join refreshed every member's session, the static leader's too:
    # it now ends at t + 1200 + 1000
    h.advance_to(t + 1600)
    assert h.heartbeat(om, gen1 + 1) == NONE
    h.advance_to(t + 2000)
    assert h.heartbeat(om, gen1 + 1) == NONE
    h.advance_to(t + 2199)
    assert h.has_member(leader)
    h.advance(1)  # the static member's session ends at t + 2200: rebalance
    assert not h.has_member(leader)
    assert h.heartbeat(om, gen1 + 1) == Errors.REBALANCE_IN_PROGRESS
    rj = h.send_join(om)
    assert rj.error == NONE and rj.result.generation_id == gen1 + 2
    assert h.send_sync(om, gen1 + 2, {om: b""}).error == NONE
    for _ in range(20):
        h.advance(400)
        assert h.heartbeat(om, gen1 + 2) == NONE
    assert h.state() == STABLE


def test_static_member_session_expiry_frees_the_instance_id(impl):
    h = Proto(impl)
    f = h.form_group(1, static=True)
    h.advance(SESSION)
    assert h.state() == EMPTY
    r = h.send_join("", instance=L)
    assert r.result is None  # a fresh member, not a replacement
    h.advance(DELAY)
    assert r.error == NONE
    assert r.result.member_id != f.leader
    assert r.result.generation_id == f.generation + 2


def test_static_member_heartbeats_keep_its_session_and_follow_the_group_state(impl):
    """A static member's heartbeat is answered by the member table like a dynamic one
    (its instance id checked first): it moves the session deadline, answers
    REBALANCE_IN_PROGRESS while the group prepares a rebalance, ILLEGAL_GENERATION for
    another generation, and UNKNOWN_MEMBER_ID once the member or its group is gone."""
    h = Proto(impl)
    f = _static_pair(h)
    for _ in range(3):                      # three sessions long, kept by heartbeats alone
        h.advance(SESSION - 1)
        assert h.heartbeat(f.leader, f.generation, instance=L) == NONE
        assert h.heartbeat(f.follower, f.generation, instance=F) == NONE
    assert h.state() == STABLE and len(h.describe().members) == 2
    h.advance(SESSION - 1)
    assert h.heartbeat(f.leader, f.generation, instance=L) == NONE
    h.advance(2)                            # the follower's session ran out; the leader's did not
    assert h.state() == PREPARING
    assert [m.group_instance_id for m in h.describe().members] == [L]
    assert h.heartbeat(f.leader, f.generation, instance=L) == Errors.REBALANCE_IN_PROGRESS
    assert h.heartbeat(f.leader, f.generation + 1, instance=L) == Errors.ILLEGAL_GENERATION
    assert h.heartbeat(f.follower, f.generation, instance=F) == Errors.UNKNOWN_MEMBER_ID
    assert h.coord.delete_groups([GROUP]) == {GROUP: Errors.NON_EMPTY_GROUP}
    h.leave((f.leader, L))
    h.advance(REBALANCE)
    assert h.coord.delete_groups([GROUP]) == {GROUP: NONE}
    assert h.heartbeat(f.leader, f.generation, instance=L) == Errors.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------------------
# handles of a replaced incarnation
# ---------------------------------------------------------------------------

def _by_handle(h, handle, generation):
    """(heartbeat_batch's answer, heartbeat_handle's) for one handle."""
    import numpy as np
    batch = h.coord.heartbeat_batch(np.array([handle], dtype=np.int64),
                                    np.array([generation], dtype=np.int32))
    return int(batch[0]), h.coord.heartbeat_handle(handle, generation)


def test_a_replaced_members_handle_answers_as_a_heartbeat_by_its_id(impl):
    """A static rejoin replaces the follower (same instance id, new member id). The
    handle taken for the old id answers what a heartbeat by the old id answers
    (UNKNOWN_MEMBER_ID) and does not refresh the new incarnation's session, which
    therefore runs out; the new incarnation's own handle works."""
    h = Proto(impl)
    f = _static_pair(h)
    old = h.coord.member_handle(GROUP, f.follower)
    assert _by_handle(h, old, f.generation) == (NONE, NONE)
    rejoin = h.send_join("", instance=F, protocols=SUPERSET)
    assert rejoin.error == NONE
    new_id = rejoin.result.member_id
    assert new_id != f.follower and h.state() == STABLE
    by_id = h.heartbeat(f.follower, f.generation)
    assert by_id == Errors.UNKNOWN_MEMBER_ID
    new = h.coord.member_handle(GROUP, new_id)
    assert new != old
    h.advance(SESSION - 100)
    assert _by_handle(h, old, f.generation) == (by_id, by_id)
    assert h.heartbeat(f.leader, f.generation) == NONE
    h.advance(200)                      # the new incarnation's session ran out
    assert not h.has_member(new_id)
    assert _by_handle(h, new, f.generation) == (Errors.UNKNOWN_MEMBER_ID,) * 2


def test_a_replacement_undone_by_a_failed_write_kills_the_new_handle(impl):
    """A static rejoin in Stable waits for its write; a handle taken for the new id
    meanwhile must not reach the member once the failed write gives it its old id back
    (a heartbeat by the new id answers UNKNOWN_MEMBER_ID), nor refresh its session."""
    store = DeferredStore()
    h = Proto(impl, store=store)
    f = h.form_group(2, static=True, sync=False)
    fs = h.send_sync(f.follower, f.generation, instance=F)
    h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"}, instance=L)
    store.complete_all()
    assert fs.error == NONE and h.state() == STABLE
    rejoin = h.send_join("", instance=F, protocols=SUPERSET)
    assert not rejoin.done
    (new_id,) = h.member_ids() - {f.leader}
    assert new_id != f.follower
    new = h.coord.member_handle(GROUP, new_id)
    assert _by_handle(h, new, f.generation) == (NONE, NONE)
    store.complete(0, Errors.UNKNOWN_SERVER_ERROR)
    assert rejoin.error == Errors.UNKNOWN_SERVER_ERROR
    assert h.has_member(f.follower) and not h.has_member(new_id)
    by_id = h.heartbeat(new_id, f.generation)
    assert by_id == Errors.UNKNOWN_MEMBER_ID
    assert _by_handle(h, new, f.generation) == (by_id, by_id)
    assert h.heartbeat(f.follower, f.generation, instance=F) == NONE

"""Time: session expiry (exactly at the deadline, never a millisecond before),
pending members, the new-member join timeout, the initial rebalance delay and its
re-arm rule, DelayedJoin (rebalance timeout), DelayedSync expiry, members kept
alive while parked, and advance_time's discrete-event stepping."""
from __future__ import annotations

from fastcoord import Errors

from helpers.protocol import (
    COMPLETING, DELAY, EMPTY, NEW_MEMBER_TIMEOUT, NONE, PREPARING, PROTOCOLS, REBALANCE, SESSION,
    STABLE, SUPERSET, Proto, join_members_of,
)


# ---------------------------------------------------------------------------
# session expiry
# ---------------------------------------------------------------------------

def test_member_expires_exactly_at_its_session_deadline(impl):
    h = Proto(impl)
    f = h.form_group(1)
    t = h.now
    h.advance(SESSION - 1)
    assert h.has_member(f.leader)
    assert h.state() == STABLE
    h.advance(1)
    assert h.now == t + SESSION
    assert not h.has_member(f.leader)
    assert h.state() == EMPTY
    assert h.heartbeat(f.leader, f.generation) == Errors.UNKNOWN_MEMBER_ID


def test_expired_member_triggers_rebalance_for_the_others(impl):
    h = Proto(impl)
    f = h.form_group(2)
    t = h.now
    h.advance(400)
    assert h.heartbeat(f.follower, f.generation) == NONE
    h.advance_to(t + SESSION)
    assert not h.has_member(f.leader)
    assert h.state() == PREPARING
    assert h.heartbeat(f.follower, f.generation) == Errors.REBALANCE_IN_PROGRESS
    r = h.send_join(f.follower, protocols=SUPERSET)
    assert r.error == NONE
    assert r.result.generation_id == f.generation + 1
    assert r.result.leader_id == f.follower


def test_heartbeats_keep_a_member_alive_indefinitely(impl):
    h = Proto(impl)
    f = h.form_group(1)
    for _ in range(20):
        h.advance(SESSION - 1)
        assert h.heartbeat(f.leader, f.generation) == NONE
    assert h.state() == STABLE and h.has_member(f.leader)


def test_session_timeout_during_rebalance(impl):
    h = Proto(impl)
    first = h.join_new(session=1000, rebalance=2000)
    h.run_until_done([first])
    fid, gen = first.result.member_id, first.result.generation_id
    assert h.send_sync(fid, gen, {fid: b""}).error == NONE
    t = h.now
    other = h.join_old("")  # PR; the rebalance timeout is 2000
    h.advance(500)
    assert h.heartbeat(fid, gen) == Errors.REBALANCE_IN_PROGRESS  # session now ends t + 1500
    h.advance_to(t + 1499)
    assert h.has_member(fid) and other.result is None
    h.advance(1)
    assert h.heartbeat(fid, gen) == Errors.UNKNOWN_MEMBER_ID
    res = other.result
    assert res.error == NONE
    assert res.generation_id == gen + 1
    assert res.leader_id == res.member_id
    assert join_members_of(res) == {res.member_id: None}


def test_member_parked_in_join_is_kept_alive_past_its_session(impl):
    h = Proto(impl)
    f = h.form_group(2, session=300, rebalance=1000)
    t = h.now
    lj = h.send_join(f.leader, protocols=SUPERSET, session=300, rebalance=1000)
    for k in (250, 500, 750):
        h.advance_to(t + k)
        assert h.heartbeat(f.follower, f.generation) == Errors.REBALANCE_IN_PROGRESS
    h.advance_to(t + 999)
    assert h.has_member(f.leader) and lj.result is None
    h.advance(1)  # the rebalance timeout: the follower never re-joined and is removed
    assert lj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert join_members_of(lj.result) == {f.leader: None}
    assert not h.has_member(f.follower)


def test_member_parked_in_sync_is_kept_alive_and_refreshed_when_answered(impl):
    h = Proto(impl)
    f = h.form_group(2, session=300, rebalance=1000, sync=False)
    t = h.now
    fs = h.send_sync(f.follower, f.generation)
    for k in (250, 500):
        h.advance_to(t + k)
        assert h.heartbeat(f.leader, f.generation) == NONE
    h.advance_to(t + 600)
    assert h.has_member(f.follower)  # parked in its sync past t + 300
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    assert ls.error == NONE and fs.error == NONE and fs.result.assignment == b"F"
    h.advance_to(t + 750)
    assert h.heartbeat(f.leader, f.generation) == NONE
    h.advance_to(t + 899)
    assert h.has_member(f.follower)
    h.advance(1)  # the answer refreshed the follower's session to t + 600 + 300
    assert not h.has_member(f.follower)
    assert h.state() == PREPARING


# ---------------------------------------------------------------------------
# pending members (MEMBER_ID_REQUIRED, never re-joined)
# ---------------------------------------------------------------------------

def _stable_with_pending(impl):
    h = Proto(impl)
    f = h.form_group(1)
    t = h.now
    pend = h.pending()  # session 500
    assert h.state() == STABLE
    h.advance(300)
    assert h.heartbeat(f.leader, f.generation) == NONE
    return h, f, t, pend


def test_pending_member_still_accepted_one_ms_before_its_session_ends(impl):
    h, f, t, pend = _stable_with_pending(impl)
    h.advance_to(t + SESSION - 1)
    r = h.send_join(pend)
    assert r.result is None  # accepted: added, parked, rebalance
    assert h.state() == PREPARING


def test_pending_member_expires_after_its_session_timeout(impl):
    h, f, t, pend = _stable_with_pending(impl)
    h.advance_to(t + SESSION)
    assert h.state() == STABLE
    assert h.member_ids() == {f.leader}
    r = h.send_join(pend)
    assert r.error == Errors.UNKNOWN_MEMBER_ID
    assert h.state() == STABLE


def _preparing_with_pending(impl):
    h = Proto(impl)
    f = h.form_group(2)
    t = h.now
    lj = h.send_join(f.leader, protocols=SUPERSET)
    assert h.state() == PREPARING
    pend = h.pending(session=100)
    fj = h.send_join(f.follower, protocols=SUPERSET)
    assert lj.result is None and fj.result is None
    return h, f, t, pend, lj, fj


def test_join_completes_when_pending_member_joins(impl):
    h, f, t, pend, lj, fj = _preparing_with_pending(impl)
    pj = h.send_join(pend, session=100)
    assert pj.error == NONE and lj.error == NONE and fj.error == NONE
    assert h.state() == COMPLETING
    assert h.member_ids() == set(f.members) | {pend}
    assert len(lj.result.members) == 3


def test_join_completes_when_pending_member_times_out(impl):
    h, f, t, pend, lj, fj = _preparing_with_pending(impl)
    h.advance_to(t + 99)
    assert lj.result is None
    h.advance(1)
    assert lj.error == NONE and fj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert h.state() == COMPLETING
    assert h.member_ids() == set(f.members)


# ---------------------------------------------------------------------------
# new member join timeout (300000 ms)
# ---------------------------------------------------------------------------

def test_new_member_join_times_out_during_protracted_rebalance(impl):
    h = Proto(impl)
    session, rebalance = NEW_MEMBER_TIMEOUT + 5000, NEW_MEMBER_TIMEOUT * 2
    first = h.join_old("", session=session, rebalance=rebalance)
    h.run_until_done([first])
    fid, gen = first.result.member_id, first.result.generation_id
    assert first.result.leader_id == fid
    assert h.send_sync(fid, gen, {fid: b""}).error == NONE
    t = h.now
    new = h.join_old("", session=session, rebalance=rebalance)
    assert new.result is None
    assert len(h.member_ids()) == 2
    h.advance(NEW_MEMBER_TIMEOUT - 1)
    assert new.result is None
    h.advance(1)
    assert new.error == Errors.UNKNOWN_MEMBER_ID
    assert new.result.member_id == ""
    assert h.member_ids() == {fid}
    assert h.state() == PREPARING
    assert h.now == t + NEW_MEMBER_TIMEOUT


def test_new_member_timeout_no_longer_applies_after_join_completes(impl):
    h = Proto(impl)
    session = NEW_MEMBER_TIMEOUT + 5000
    r = h.join_old("", session=session)
    h.advance(DELAY)
    mid = r.result.member_id
    assert r.error == NONE
    t = h.now
    assert h.send_sync(mid, r.result.generation_id, {mid: b""}).error == NONE
    h.advance(NEW_MEMBER_TIMEOUT + 100)
    assert h.has_member(mid)
    h.advance_to(t + session - 1)
    assert h.has_member(mid)
    h.advance(1)
    assert not h.has_member(mid)
    assert h.state() == EMPTY


def test_new_members_follow_session_expiry_after_join_completion(impl):
    h = Proto(impl)
    f = h.form_group(1)
    other = h.join_old("")
    lj = h.send_join(f.leader, protocols=SUPERSET, require_known=False)
    assert lj.error == NONE and other.error == NONE
    t = h.now
    assert h.state() == COMPLETING
    h.advance(SESSION - 1)
    assert len(h.member_ids()) == 2
    h.advance(1)
    assert h.member_ids() == set()
    assert h.state() == EMPTY
    assert h.now == t + SESSION


def test_new_members_follow_session_expiry_after_sync_completion(impl):
    h = Proto(impl)
    f = h.form_group(1)
    other = h.join_old("")
    lj = h.send_join(f.leader, protocols=SUPERSET)
    gen, oid = lj.result.generation_id, other.result.member_id
    fs = h.send_sync(oid, gen)
    ls = h.send_sync(f.leader, gen, {f.leader: b"", oid: b""})
    assert ls.error == NONE and fs.error == NONE
    assert h.state() == STABLE
    h.advance(SESSION - 1)
    assert len(h.member_ids()) == 2
    h.advance(1)
    assert h.state() == EMPTY


# ---------------------------------------------------------------------------
# initial rebalance delay (InitialDelayedJoin), 50 ms in these tests
# ---------------------------------------------------------------------------

def test_initial_rebalance_waits_exactly_the_delay(impl):
    h = Proto(impl)
    r = h.join_old("")
    h.advance(DELAY // 2)
    assert r.result is None
    h.advance(DELAY // 2 - 1)
    assert r.result is None
    h.advance(1)
    assert r.error == NONE and r.result.generation_id == 1


def test_initial_delay_never_completes_early_even_when_everyone_joined(impl):
    h = Proto(impl)
    a = h.join_new()
    b = h.join_new()
    # both members have joined, yet the delay runs; b joined during it, so it re-arms once
    h.advance(2 * DELAY - 1)
    assert a.result is None and b.result is None
    h.advance(1)
    assert a.error == NONE and b.error == NONE


def test_initial_delay_rearms_when_a_member_joins_during_it(impl):
    h = Proto(impl)
    rebalance = DELAY * 3
    a = h.join_old("", rebalance=rebalance)
    h.advance(DELAY - 1)
    b = h.join_old("", rebalance=rebalance)
    h.advance(1)   # t = 50: a member joined meanwhile -> wait min(50, 100) more
    assert a.result is None and b.result is None
    h.advance(DELAY - 1)
    assert a.result is None
    h.advance(1)   # t = 100: nobody joined since: complete
    assert a.error == NONE and b.error == NONE
    assert a.result.generation_id == b.result.generation_id == 1
    assert h.now == 2 * DELAY


def test_initial_delay_is_bounded_by_the_rebalance_timeout(impl):
    h = Proto(impl)
    rebalance = DELAY * 2
    a = h.join_old("", rebalance=rebalance)
    b = h.join_old("", rebalance=rebalance)
    h.advance(DELAY)  # re-armed for the last 50 ms of the rebalance timeout
    c = h.join_old("", rebalance=rebalance)
    h.advance(DELAY - 1)
    assert a.result is None and b.result is None and c.result is None
    h.advance(1)      # t = 100: the remaining time is spent: complete despite c
    for r in (a, b, c):
        assert r.error == NONE and r.result.generation_id == 1
    assert len(a.result.members) == 3


def test_initial_delay_rearm_uses_min_of_delay_and_remaining_time(impl):
    h = Proto(impl)
    rebalance = 120
    a = h.join_old("", rebalance=rebalance)
    b = h.join_old("", rebalance=rebalance)
    h.advance_to(60)
    c = h.join_old("", rebalance=rebalance)
    h.advance_to(110)  # fired at 50 (re-arm to 100) and at 100 (re-arm for min(50, 20) = 20)
    d = h.join_old("", rebalance=rebalance)
    h.advance_to(119)
    assert all(r.result is None for r in (a, b, c, d))
    h.advance(1)
    for r in (a, b, c, d):
        assert r.error == NONE and r.result.generation_id == 1
    assert len(a.result.members) == 4


def test_initial_delay_joins_after_generation_zero_do_not_rearm(impl):
    h = Proto(impl)
    f = h.form_group(1)
    h.leave(f.leader)  # Empty at generation 2
    t = h.now
    a = h.join_old("")
    h.advance(10)
    b = h.join_old("")
    h.advance_to(t + DELAY - 1)
    assert a.result is None and b.result is None
    h.advance(1)  # new members only extend the delay at generation 0
    assert a.error == NONE and b.error == NONE
    assert a.result.generation_id == f.generation + 2
    assert len(a.result.members) == 2


def test_initial_delay_applies_only_when_rebalance_starts_from_empty(impl):
    h = Proto(impl)
    f = h.form_group(1)
    new = h.join_old("")
    lj = h.send_join(f.leader, protocols=SUPERSET)
    # from Stable: a plain DelayedJoin, complete as soon as everyone re-joined
    assert new.error == NONE and lj.error == NONE
    assert lj.result.generation_id == f.generation + 1


# ---------------------------------------------------------------------------
# DelayedJoin: rebalance timeout
# ---------------------------------------------------------------------------

def test_rebalance_timeout_is_the_largest_member_value(impl):
    h = Proto(impl)
    a = h.join_new(session=1000, rebalance=300)
    b = h.join_new(session=1000, rebalance=700)
    h.run_until_done([a, b])
    leader, follower, gen = a.result.member_id, b.result.member_id, a.result.generation_id
    assert h.send_sync(leader, gen, {leader: b"", follower: b""}).error == NONE
    assert h.send_sync(follower, gen).error == NONE
    t = h.now
    lj = h.send_join(leader, session=1000, rebalance=300)
    h.advance_to(t + 699)
    assert lj.result is None and h.has_member(follower)
    h.advance(1)
    assert lj.error == NONE
    assert lj.result.generation_id == gen + 1
    assert join_members_of(lj.result) == {leader: None}
    assert h.heartbeat(follower, gen) == Errors.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_defaults_to_session_timeout(impl):
    h = Proto(impl)
    a = h.join_new(session=400, rebalance=None)
    h.run_until_done([a])
    aid, gen = a.result.member_id, a.result.generation_id
    assert h.send_sync(aid, gen, {aid: b""}).error == NONE
    t = h.now
    b = h.join_old("", session=10_000, rebalance=10)
    h.advance_to(t + 350)
    assert h.heartbeat(aid, gen) == Errors.REBALANCE_IN_PROGRESS
    h.advance_to(t + 399)
    assert b.result is None
    h.advance(1)  # max(400 (a's default), 10)
    assert b.error == NONE
    assert b.result.generation_id == gen + 1
    assert b.result.leader_id == b.result.member_id
    assert not h.has_member(aid)


# ---------------------------------------------------------------------------
# DelayedSync
# ---------------------------------------------------------------------------

def test_delayed_sync_expiry_removes_members_that_never_synced(impl):
    h = Proto(impl)
    f = h.form_group(2, session=1000, sync=False)
    t = h.now
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    assert ls.error == NONE and h.state() == STABLE
    h.advance(REBALANCE - 1)
    assert h.has_member(f.follower) and h.state() == STABLE
    h.advance(1)
    assert not h.has_member(f.follower)
    assert h.has_member(f.leader)
    assert h.state() == PREPARING
    assert h.heartbeat(f.leader, f.generation) == Errors.REBALANCE_IN_PROGRESS
    lj = h.send_join(f.leader, protocols=SUPERSET, session=1000)
    assert lj.error == NONE and lj.result.generation_id == f.generation + 1
    assert h.now == t + REBALANCE


def test_delayed_sync_expiry_when_leader_never_syncs(impl):
    h = Proto(impl)
    f = h.form_group(2, session=1000, sync=False)
    fs = h.send_sync(f.follower, f.generation)
    h.advance(REBALANCE - 1)
    assert fs.result is None
    h.advance(1)
    assert fs.error == Errors.REBALANCE_IN_PROGRESS
    assert not h.has_member(f.leader)
    assert h.has_member(f.follower)
    assert h.state() == PREPARING
    fj = h.send_join(f.follower, protocols=SUPERSET, session=1000)
    assert fj.error == NONE and fj.result.leader_id == f.follower


def test_delayed_sync_does_nothing_once_everyone_synced(impl):
    h = Proto(impl)
    f = h.form_group(2, session=1000)
    h.advance(REBALANCE + 100)
    assert h.state() == STABLE
    assert h.member_ids() == set(f.members)
    assert h.heartbeat(f.follower, f.generation) == NONE


def test_delayed_sync_of_an_older_generation_is_ignored(impl):
    h = Proto(impl)
    f = h.form_group(2, session=1000, sync=False)
    t = h.now
    h.advance(100)
    h.send_join(f.follower, protocols=PROTOCOLS, session=1000)
    lj = h.send_join(f.leader, protocols=SUPERSET, session=1000)
    assert lj.result.generation_id == f.generation + 1
    h.advance_to(t + REBALANCE)  # the first generation's deadline passes harmlessly
    assert h.member_ids() == set(f.members)
    assert h.state() == COMPLETING
    h.advance_to(t + 100 + REBALANCE - 1)
    assert h.member_ids() == set(f.members)
    h.advance(1)  # the second generation's sync deadline: nobody synced
    assert h.member_ids() == set()
    assert h.state() == EMPTY


def _rejoin_and_sync(h, joiners, extra=()):
    """joiners (the leader first) rejoin, beside the joins already sent (`extra`); once
    answered, every member answered syncs, the leader first. The members, leader first."""
    replies = list(extra) + [h.send_join(m) for m in joiners]
    h.run_until_done(replies)
    results = [r.result for r in replies]
    assert all(r.error == NONE for r in results), results
    generation, leader = results[0].generation_id, results[0].leader_id
    ids = [r.member_id for r in results]
    order = [leader] + [m for m in ids if m != leader]
    for m in order:
        s = h.send_sync(m, generation, {x: b"a" for x in ids} if m == leader else None)
        assert s.error == NONE, s
    return order


def test_rebalance_watch_lists_are_emptied_by_each_completed_round(impl):
    """Joins and syncs ask the purgatory only when an operation can complete (everyone
    joined; nobody left to sync); an operation a timer completed stays listed until
    then. Rounds that end by timeout, then rounds everyone finishes: the lists hold
    at most that round's operations and are empty after every finished round."""
    h = Proto(impl)
    f = h.form_group(3)
    purgatory = h.coord._logic.purgatory
    members = [f.leader] + [m for m in f.members if m != f.leader]
    for _ in range(20):
        members = _rejoin_and_sync(h, members[:-1])    # the last never rejoins: a timeout
        assert h.state() == STABLE and len(members) == 2
        assert purgatory.watched <= 3
        members = _rejoin_and_sync(h, members, extra=[h.join_new()])   # and a new member
        assert h.state() == STABLE and len(members) == 3
        assert purgatory.watched == 0


# ---------------------------------------------------------------------------
# advance_time / expire_due stepping
# ---------------------------------------------------------------------------

def test_advance_time_fires_operations_armed_within_the_same_step(impl):
    h = Proto(impl)
    r = h.join_old("")
    h.advance(DELAY + SESSION + 50)  # one step across the join (t=50) and the session end (t=550)
    assert r.error == NONE and r.result.generation_id == 1
    assert h.state() == EMPTY
    h2 = Proto(impl)
    r2 = h2.join_old("")
    h2.advance(DELAY + SESSION - 1)
    assert r2.error == NONE
    assert h2.state() == COMPLETING
    assert h2.has_member(r2.result.member_id)


def test_step_sizes_do_not_change_the_outcome(impl):
    outcomes = []
    for step in (1, 7, 50, 1000):
        h = Proto(impl)
        f = h.form_group(2)
        t0 = h.now
        h.send_join(f.leader, protocols=SUPERSET)
        while h.now < t0 + 1000:
            h.advance(min(step, t0 + 1000 - h.now))
        outcomes.append((h.state(), sorted(h.member_ids())))
    assert all(o == outcomes[0] for o in outcomes), outcomes
    assert outcomes[0][0] == EMPTY


def test_expire_due_fires_only_what_is_due(impl):
    h = Proto(impl)
    r = h.join_old("")
    h.clock.advance(DELAY - 1)
    h.coord.expire_due()
    assert r.result is None
    h.clock.advance(1)
    assert r.result is None  # nothing fires until asked
    h.coord.expire_due()
    assert r.error == NONE and r.result.generation_id == 1

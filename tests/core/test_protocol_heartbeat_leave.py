"""Heartbeat and LeaveGroup rows of the request x state table, pending-member
leave, static leave by instance id, and the batched heartbeat path
(member_handle / heartbeat_batch)."""
from __future__ import annotations

import numpy as np
import pytest

from fastcoord import Errors

from helpers.protocol import (
    COMPLETING, EMPTY, NONE, PREPARING, REBALANCE, SESSION, STABLE, SUPERSET, Proto,
)


# ---------------------------------------------------------------------------
# Heartbeat
# ---------------------------------------------------------------------------

def test_heartbeat_unknown_group(impl):
    h = Proto(impl)
    assert h.heartbeat("memberId", -1) == Errors.UNKNOWN_MEMBER_ID
    assert h.describe().state == "Dead"


def test_heartbeat_unknown_member_in_existing_group(impl):
    h = Proto(impl)
    f = h.form_group(1)
    assert h.heartbeat("memberId", f.generation) == Errors.UNKNOWN_MEMBER_ID


def test_heartbeat_illegal_generation(impl):
    h = Proto(impl)
    f = h.form_group(1)
    assert h.heartbeat(f.leader, f.generation + 1) == Errors.ILLEGAL_GENERATION
    assert h.heartbeat(f.leader, f.generation - 1) == Errors.ILLEGAL_GENERATION


def test_valid_heartbeat_in_stable(impl):
    h = Proto(impl)
    f = h.form_group(2)
    assert h.heartbeat(f.leader, f.generation) == NONE
    assert h.heartbeat(f.follower, f.generation) == NONE
    assert h.state() == STABLE


def test_heartbeat_in_completing_rebalance_is_none(impl):
    h = Proto(impl)
    f = h.form_group(1, sync=False)
    assert h.state() == COMPLETING
    assert h.heartbeat(f.leader, f.generation) == NONE


def test_heartbeat_in_preparing_rebalance_is_rebalance_in_progress(impl):
    h = Proto(impl)
    f = h.form_group(2)
    h.join_old("")  # a newcomer triggers a rebalance
    assert h.state() == PREPARING
    assert h.heartbeat(f.leader, f.generation) == Errors.REBALANCE_IN_PROGRESS
    assert h.heartbeat(f.follower, f.generation) == Errors.REBALANCE_IN_PROGRESS


def test_heartbeat_in_empty_group_is_unknown_member(impl):
    h = Proto(impl)
    f = h.form_group(1)
    h.leave(f.leader)
    assert h.state() == EMPTY
    assert h.heartbeat(f.leader, f.generation + 1) == Errors.UNKNOWN_MEMBER_ID


def test_heartbeat_in_preparing_rebalance_still_resets_session(impl):
    h = Proto(impl)
    # follower with a session shorter than the rebalance timeout
    f = h.form_group(2, session=300, rebalance=REBALANCE)
    t = h.now
    h.send_join(f.leader, protocols=SUPERSET, session=300)  # PR; DelayedJoin at t+500
    h.advance(299)
    assert h.heartbeat(f.follower, f.generation) == Errors.REBALANCE_IN_PROGRESS  # deadline t+599
    h.advance(1)  # t+300: the follower would have expired without the heartbeat
    assert h.has_member(f.follower)
    assert h.state() == PREPARING
    assert h.now == t + 300


def test_heartbeat_maintains_session(impl):
    h = Proto(impl)
    f = h.form_group(1, session=1000, rebalance=1000)
    h.advance(500)
    assert h.heartbeat(f.leader, f.generation) == NONE
    h.advance(600)  # 1100 after the sync, 600 after the heartbeat
    assert h.heartbeat(f.leader, f.generation) == NONE
    assert h.state() == STABLE


# ---------------------------------------------------------------------------
# LeaveGroup
# ---------------------------------------------------------------------------

def test_leave_unknown_group(impl):
    h = Proto(impl)
    res = h.leave("memberId")
    assert res.error == NONE
    assert res.member_errors == [Errors.UNKNOWN_MEMBER_ID]


def test_leave_unknown_member_in_existing_group(impl):
    h = Proto(impl)
    f = h.form_group(1)
    res = h.leave("consumerId")
    assert res.error == NONE
    assert res.member_errors == [Errors.UNKNOWN_MEMBER_ID]
    assert h.member_ids() == {f.leader}


def test_leave_in_empty_group_is_unknown_member(impl):
    h = Proto(impl)
    f = h.form_group(1)
    assert h.leave(f.leader).member_errors == [NONE]
    res = h.leave(f.leader)
    assert res.error == NONE and res.member_errors == [Errors.UNKNOWN_MEMBER_ID]


def test_last_member_leaving_stable_group_empties_it_with_new_generation(impl):
    h = Proto(impl)
    f = h.form_group(1)
    res = h.leave(f.leader)
    assert res.error == NONE and res.member_errors == [NONE]
    assert h.state() == EMPTY
    assert h.member_ids() == set()
    # the empty generation counted: the next group forms at generation + 2
    r = h.join_old("")
    h.run_until_done([r])
    assert r.result.generation_id == f.generation + 2


def test_leave_in_stable_rebalances(impl):
    h = Proto(impl)
    f = h.form_group(3)
    assert h.leave(f.followers[1]).member_errors == [NONE]
    assert h.state() == PREPARING
    lj = h.send_join(f.leader, protocols=SUPERSET)
    fj = h.send_join(f.followers[0], protocols=SUPERSET)
    assert lj.error == NONE and fj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert {m.member_id for m in lj.result.members} == {f.leader, f.followers[0]}


def test_leave_in_completing_rebalance_rebalances_and_fails_parked_syncs(impl):
    h = Proto(impl)
    f = h.form_group(3, sync=False)
    f1, f2 = f.followers
    p = h.send_sync(f1, f.generation)
    assert h.leave(f2).member_errors == [NONE]
    assert p.error == Errors.REBALANCE_IN_PROGRESS
    assert h.state() == PREPARING
    assert h.member_ids() == {f.leader, f1}


def test_leave_in_preparing_rebalance_fails_parked_join_and_completes_rebalance(impl):
    h = Proto(impl)
    f = h.form_group(3)
    f1, f2 = f.followers
    lj = h.send_join(f.leader, protocols=SUPERSET)
    j1 = h.send_join(f1, protocols=SUPERSET)
    assert lj.result is None and j1.result is None
    res = h.leave(f1)
    assert res.member_errors == [NONE]
    assert j1.error == Errors.UNKNOWN_MEMBER_ID
    assert j1.result.member_id == ""
    assert lj.result is None  # f2 has not re-joined yet
    # f2 leaves too: every remaining member has joined, the rebalance completes
    assert h.leave(f2).member_errors == [NONE]
    assert lj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert [m.member_id for m in lj.result.members] == [f.leader]


def test_batch_leave_mixed_results_in_order(impl):
    h = Proto(impl)
    f = h.form_group(3)
    res = h.leave(f.followers[0], "nobody", f.followers[1])
    assert res.error == NONE
    assert res.member_errors == [NONE, Errors.UNKNOWN_MEMBER_ID, NONE]
    assert h.member_ids() == {f.leader}


def test_pending_member_leave_is_none_and_completes_rebalance(impl):
    h = Proto(impl)
    f = h.form_group(2)
    lj = h.send_join(f.leader, protocols=SUPERSET)
    pend = h.pending(session=100)
    fj = h.send_join(f.follower, protocols=SUPERSET)
    # everyone joined but a pending member remains: not complete yet
    assert lj.result is None and fj.result is None
    res = h.leave(pend)
    assert res.member_errors == [NONE]
    assert lj.error == NONE and fj.error == NONE
    assert h.state() == COMPLETING
    assert h.member_ids() == set(f.members)


def test_pending_member_batch_leave_with_unknown_instance(impl):
    h = Proto(impl)
    h.form_group(2)
    pend = h.pending()
    res = h.leave(("", "unknown-instance"), pend)
    assert res.error == NONE
    assert res.member_errors == [Errors.UNKNOWN_MEMBER_ID, NONE]
    # the pending id is gone: re-joining with it is refused
    assert h.send_join(pend).error == Errors.UNKNOWN_MEMBER_ID


def test_leave_static_member_by_instance_id_with_empty_member_id(impl):
    h = Proto(impl)
    h.form_group(1, static=True)
    res = h.leave(("", "leader"))
    assert res.error == NONE and res.member_errors == [NONE]
    assert h.state() == EMPTY


def test_leave_static_member_with_fenced_instance_id(impl):
    h = Proto(impl)
    f = h.form_group(1, static=True)
    res = h.leave(("some_member", "leader"))
    assert res.member_errors == [Errors.FENCED_INSTANCE_ID]
    assert h.member_ids() == {f.leader}


def test_static_batch_leave_valid(impl):
    h = Proto(impl)
    h.form_group(2, static=True)
    res = h.leave(("", "leader"), ("", "follower"))
    assert res.error == NONE and res.member_errors == [NONE, NONE]
    assert h.state() == EMPTY


def test_static_batch_leave_fenced_and_unknown_instances(impl):
    h = Proto(impl)
    h.form_group(2, static=True)
    res = h.leave(("", "leader"), ("invalid-member", "follower"))
    assert res.member_errors == [NONE, Errors.FENCED_INSTANCE_ID]
    res2 = h.leave(("", "unknown-instance"), ("", "follower"))
    assert res2.member_errors == [Errors.UNKNOWN_MEMBER_ID, NONE]
    assert h.member_ids() == set()


def test_static_batch_leave_unknown_group(impl):
    h = Proto(impl)
    res = h.leave(("", "leader"), ("", "follower"))
    assert res.error == NONE
    assert res.member_errors == [Errors.UNKNOWN_MEMBER_ID, Errors.UNKNOWN_MEMBER_ID]


# ---------------------------------------------------------------------------
# Batched heartbeats
# ---------------------------------------------------------------------------

def _arrays(handles, gens):
    return np.asarray(handles, dtype=np.int64), np.asarray(gens, dtype=np.int32)


def test_member_handle_known_and_unknown(impl):
    h = Proto(impl)
    f = h.form_group(2)
    hl = h.coord.member_handle("groupId", f.leader)
    hf = h.coord.member_handle("groupId", f.follower)
    assert hl >= 0 and hf >= 0 and hl != hf
    assert h.coord.member_handle("groupId", "nobody") == -1
    assert h.coord.member_handle("no-such-group", f.leader) == -1


def test_heartbeat_batch_matches_scalar_heartbeats(impl):
    h = Proto(impl)
    f = h.form_group(2)
    hl = h.coord.member_handle("groupId", f.leader)
    hf = h.coord.member_handle("groupId", f.follower)
    handles, gens = _arrays([hl, hf, hl, -1], [f.generation, f.generation + 5, f.generation, f.generation])
    out = h.coord.heartbeat_batch(handles, gens)
    assert isinstance(out, np.ndarray) and out.dtype == np.int16
    assert out.tolist() == [NONE, Errors.ILLEGAL_GENERATION, NONE, Errors.UNKNOWN_MEMBER_ID]
    # the same answers as the scalar path
    assert h.heartbeat(f.leader, f.generation) == NONE
    assert h.heartbeat(f.follower, f.generation + 5) == Errors.ILLEGAL_GENERATION


def test_heartbeat_batch_refreshes_sessions(impl):
    h = Proto(impl)
    f = h.form_group(1)
    hl = h.coord.member_handle("groupId", f.leader)
    h.advance(SESSION - 1)
    out = h.coord.heartbeat_batch(*_arrays([hl], [f.generation]))
    assert out.tolist() == [NONE]
    h.advance(SESSION - 1)
    assert h.has_member(f.leader)
    h.advance(1)
    assert not h.has_member(f.leader)


def test_heartbeat_batch_in_preparing_rebalance(impl):
    h = Proto(impl)
    f = h.form_group(2)
    hl = h.coord.member_handle("groupId", f.leader)
    hf = h.coord.member_handle("groupId", f.follower)
    h.join_old("")
    out = h.coord.heartbeat_batch(*_arrays([hl, hf], [f.generation, f.generation]))
    assert out.tolist() == [Errors.REBALANCE_IN_PROGRESS] * 2


def test_heartbeat_batch_stale_handle_of_removed_member(impl):
    h = Proto(impl)
    f = h.form_group(2)
    hf = h.coord.member_handle("groupId", f.follower)
    h.leave(f.follower)
    # new members come and go; the stale handle must never reach them
    h.send_join(f.leader, protocols=SUPERSET)
    for _ in range(3):
        h.join_old("", protocols=SUPERSET)
    out = h.coord.heartbeat_batch(*_arrays([hf], [f.generation]))
    assert out.tolist() == [Errors.UNKNOWN_MEMBER_ID]
    assert h.coord.member_handle("groupId", f.follower) == -1


def test_heartbeat_batch_empty(impl):
    h = Proto(impl)
    out = h.coord.heartbeat_batch(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32))
    assert out.dtype == np.int16 and out.shape == (0,)


def test_heartbeat_batch_rejects_bad_arrays_before_any_effect(impl):
    h = Proto(impl)
    f = h.form_group(1)
    hl = h.coord.member_handle("groupId", f.leader)
    h.advance(SESSION - 1)
    good_h, good_g = _arrays([hl, hl], [f.generation, f.generation])
    with pytest.raises(TypeError):
        h.coord.heartbeat_batch(good_h.astype(np.int32), good_g)
    with pytest.raises(TypeError):
        h.coord.heartbeat_batch(good_h, good_g.astype(np.int64))
    with pytest.raises(ValueError):
        h.coord.heartbeat_batch(good_h, good_g[:1])
    wide_h = np.zeros(4, dtype=np.int64)
    wide_h[::2] = hl
    wide_g = np.full(4, f.generation, dtype=np.int32)
    with pytest.raises((TypeError, ValueError)):
        h.coord.heartbeat_batch(wide_h[::2], wide_g[::2])  # non-contiguous
    # none of the rejected calls refreshed the session: it expires at the old deadline
    h.advance(1)
    assert not h.has_member(f.leader)


def test_heartbeat_handle_is_heartbeat_batch_of_one(impl):
    h = Proto(impl)
    f = h.form_group(2)
    hl = h.coord.member_handle("groupId", f.leader)
    hf = h.coord.member_handle("groupId", f.follower)
    cases = [(hl, f.generation), (hf, f.generation + 5), (-1, f.generation), (hl + (1 << 32), 0)]
    one = [h.coord.heartbeat_handle(x, g) for x, g in cases]
    assert all(type(e) is int for e in one)
    assert one == [NONE, Errors.ILLEGAL_GENERATION, Errors.UNKNOWN_MEMBER_ID,
                   Errors.UNKNOWN_MEMBER_ID]
    assert one == [h.coord.heartbeat_batch(*_arrays([x], [g])).tolist()[0] for x, g in cases]
    # it refreshes the session like a batch heartbeat; a rejected call has no effect
    h.advance(SESSION - 1)
    assert h.coord.heartbeat_handle(hl, f.generation) == NONE
    for bad, exc in (((float(hl), f.generation), TypeError), ((hl, True), TypeError),
                     ((hl, str(f.generation)), TypeError), ((1 << 63, f.generation), ValueError),
                     ((hl, 1 << 31), ValueError)):
        with pytest.raises(exc):
            h.coord.heartbeat_handle(*bad)
    h.advance(1)
    assert h.has_member(f.leader) and not h.has_member(f.follower)
    h.advance(SESSION - 2)
    assert h.has_member(f.leader)
    h.advance(1)
    assert not h.has_member(f.leader)
    # in PreparingRebalance, as the batch answers
    g = Proto(impl)
    f = g.form_group(2)
    hl = g.coord.member_handle("groupId", f.leader)
    g.join_old("")
    assert g.coord.heartbeat_handle(hl, f.generation) == Errors.REBALANCE_IN_PROGRESS


def test_pending_member_is_not_a_member_for_heartbeat_sync_and_commit(impl):
    h = Proto(impl)
    f = h.form_group(1)
    pend = h.pending()
    assert h.heartbeat(pend, f.generation) == Errors.UNKNOWN_MEMBER_ID
    assert h.send_sync(pend, f.generation).error == Errors.UNKNOWN_MEMBER_ID
    assert h.commit(pend, f.generation, {("t", 0): 1}) == {("t", 0): Errors.UNKNOWN_MEMBER_ID}
    assert h.coord.member_handle("groupId", pend) == -1
    assert h.state() == STABLE


def test_fencing_is_checked_before_generation(impl):
    h = Proto(impl)
    f = h.form_group(2, static=True)
    wrong = f.generation + 7
    assert h.heartbeat("someone-else", wrong, instance="leader") == Errors.FENCED_INSTANCE_ID
    assert h.heartbeat(f.leader, wrong, instance="leader") == Errors.ILLEGAL_GENERATION
    assert h.send_sync("someone-else", wrong, instance="leader").error == Errors.FENCED_INSTANCE_ID
    assert h.commit("someone-else", wrong, {("t", 0): 1}, instance="leader") == {
        ("t", 0): Errors.FENCED_INSTANCE_ID}
    assert h.heartbeat("nobody", wrong) == Errors.UNKNOWN_MEMBER_ID


def test_static_heartbeat_in_preparing_rebalance(impl):
    h = Proto(impl)
    f = h.form_group(2, static=True)
    h.send_join(f.leader, instance="leader", protocols=SUPERSET)
    assert h.state() == PREPARING
    assert h.heartbeat(f.follower, f.generation, instance="follower") == \
        Errors.REBALANCE_IN_PROGRESS


def test_generation_is_checked_before_state(impl):
    h = Proto(impl)
    f = h.form_group(2)
    h.send_join(f.leader, protocols=SUPERSET)
    assert h.state() == PREPARING
    assert h.heartbeat(f.follower, f.generation + 1) == Errors.ILLEGAL_GENERATION
    assert h.send_sync(f.follower, f.generation + 1).error == Errors.ILLEGAL_GENERATION
    assert h.commit(f.follower, f.generation - 1, {("t", 0): 1}) == {
        ("t", 0): Errors.ILLEGAL_GENERATION}

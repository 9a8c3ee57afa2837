"""SyncGroup: the SyncGroup row of the request x state table, the leader's
store write before any answer, store failures, protocol checks."""
from __future__ import annotations

from fastcoord import Errors
from fastcoord.core.store import DeferredStore

from helpers.protocol import (
    COMPLETING, EMPTY, GROUP, NONE, PREPARING, PTYPE, RANGE, SESSION, STABLE, SUPERSET, Proto,
)


def test_sync_unknown_group_is_unknown_member(impl):
    h = Proto(impl)
    r = h.send_sync("memberId", 1)
    assert r.error == Errors.UNKNOWN_MEMBER_ID
    assert h.describe().state == "Dead"


def test_sync_unknown_member_is_unknown_member(impl):
    h = Proto(impl)
    f = h.form_group(1)
    r = h.send_sync("blah", f.generation)
    assert r.error == Errors.UNKNOWN_MEMBER_ID
    assert r.result.assignment == b""


def test_sync_illegal_generation(impl):
    h = Proto(impl)
    f = h.form_group(1, sync=False)
    r = h.send_sync(f.leader, f.generation + 1, {f.leader: b"x"})
    assert r.error == Errors.ILLEGAL_GENERATION
    assert h.state() == COMPLETING  # nothing was stored


def test_sync_in_empty_group_is_unknown_member(impl):
    h = Proto(impl)
    f = h.form_group(1)
    h.leave(f.leader)
    assert h.state() == EMPTY
    r = h.send_sync(f.leader, f.generation)
    assert r.error == Errors.UNKNOWN_MEMBER_ID


def test_sync_in_preparing_rebalance_is_rebalance_in_progress(impl):
    h = Proto(impl)
    f = h.form_group(2)
    h.send_join(f.leader, protocols=SUPERSET)
    assert h.state() == PREPARING
    r = h.send_sync(f.follower, f.generation)
    assert r.error == Errors.REBALANCE_IN_PROGRESS


def test_leader_then_follower_get_their_assignments(impl):
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"\x00", f.follower: b"\x01"})
    assert ls.error == NONE
    assert ls.result.assignment == b"\x00"
    assert h.state() == STABLE
    fs = h.send_sync(f.follower, f.generation)
    assert fs.error == NONE
    assert fs.result.assignment == b"\x01"


def test_follower_sync_parks_until_leader_syncs(impl):
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    fs = h.send_sync(f.follower, f.generation)
    assert fs.result is None
    assert h.state() == COMPLETING
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"\x00", f.follower: b"\x01"})
    assert ls.error == NONE and ls.result.assignment == b"\x00"
    assert fs.error == NONE and fs.result.assignment == b"\x01"
    assert fs.result.protocol_type == PTYPE and fs.result.protocol_name == RANGE


def test_members_missing_from_leader_assignment_get_empty_assignment(impl):
    h = Proto(impl)
    f = h.form_group(3, sync=False)
    f1, f2 = f.followers
    p1 = h.send_sync(f1, f.generation)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f1: b"one"})
    assert ls.error == NONE
    assert p1.error == NONE and p1.result.assignment == b"one"
    p2 = h.send_sync(f2, f.generation)
    assert p2.error == NONE and p2.result.assignment == b""
    assignments = {m.member_id: m.assignment for m in h.describe().members}
    assert assignments == {f.leader: b"L", f1: b"one", f2: b""}


def test_empty_assignment_from_single_leader(impl):
    h = Proto(impl)
    f = h.form_group(1, sync=False)
    s = h.send_sync(f.leader, f.generation, {})
    assert s.error == NONE
    assert s.result.assignment == b""
    assert h.heartbeat(f.leader, f.generation) == NONE


def test_none_assignment_from_leader_is_treated_as_empty(impl):
    h = Proto(impl)
    f = h.form_group(1, sync=False)
    s = h.send_sync(f.leader, f.generation, None)
    assert s.error == NONE and s.result.assignment == b""
    assert h.state() == STABLE


def test_sync_in_stable_returns_stored_assignment(impl):
    h = Proto(impl)
    f = h.form_group(2)
    again = h.send_sync(f.follower, f.generation)
    assert again.error == NONE
    assert again.result.assignment == f.assignments[f.follower]
    # even a "leader" style sync in Stable just reads back the stored assignment
    lagain = h.send_sync(f.leader, f.generation, {f.leader: b"ignored", f.follower: b"ignored"})
    assert lagain.error == NONE
    assert lagain.result.assignment == f.assignments[f.leader]
    fs = h.send_sync(f.follower, f.generation)
    assert fs.result.assignment == f.assignments[f.follower]


def test_sync_in_stable_resets_the_session(impl):
    h = Proto(impl)
    f = h.form_group(1)
    h.advance(SESSION - 1)
    s = h.send_sync(f.leader, f.generation)
    assert s.error == NONE
    t = h.now
    h.advance(SESSION - 1)
    assert h.has_member(f.leader)
    assert h.now == t + SESSION - 1
    h.advance(1)
    assert not h.has_member(f.leader)


def test_describe_shows_assignments_after_sync(impl):
    h = Proto(impl)
    f = h.form_group(2)
    d = h.describe()
    assert d.state == STABLE
    assert {m.member_id: m.assignment for m in d.members} == f.assignments


# ---------------------------------------------------------------------------
# protocol type / name given with the sync
# ---------------------------------------------------------------------------

def _two_static(h):
    return h.form_group(2, static=True, sync=False)


def test_sync_with_inconsistent_protocol_type(impl):
    h = Proto(impl)
    f = _two_static(h)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b""}, instance="leader", ptype="whatever")
    assert ls.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert ls.result.protocol_type is None and ls.result.protocol_name is None
    fs = h.send_sync(f.follower, f.generation, instance="follower", ptype="whatever")
    assert fs.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert h.state() == COMPLETING


def test_sync_with_inconsistent_protocol_name(impl):
    h = Proto(impl)
    f = _two_static(h)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b""}, instance="leader", pname="whatever")
    assert ls.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    fs = h.send_sync(f.follower, f.generation, instance="follower", pname="whatever")
    assert fs.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert fs.result.protocol_name is None


def test_sync_without_protocol_type_and_name_succeeds_and_reports_them(impl):
    h = Proto(impl)
    f = _two_static(h)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b""}, instance="leader")
    assert ls.error == NONE
    assert (ls.result.protocol_type, ls.result.protocol_name) == (PTYPE, RANGE)
    fs = h.send_sync(f.follower, f.generation, instance="follower")
    assert fs.error == NONE
    assert (fs.result.protocol_type, fs.result.protocol_name) == (PTYPE, RANGE)


def test_sync_with_consistent_protocol_type_and_name_succeeds(impl):
    h = Proto(impl)
    f = _two_static(h)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b""}, instance="leader",
                     ptype=PTYPE, pname=RANGE)
    assert ls.error == NONE
    fs = h.send_sync(f.follower, f.generation, instance="follower", ptype=PTYPE, pname=RANGE)
    assert fs.error == NONE
    assert (fs.result.protocol_type, fs.result.protocol_name) == (PTYPE, RANGE)


# ---------------------------------------------------------------------------
# the store write comes before any SyncGroup answer
# ---------------------------------------------------------------------------

def _deferred(impl):
    store = DeferredStore()
    h = Proto(impl, store=store)
    return h, store


def _complete_group_writes(store, error=Errors.NONE):
    """Complete every parked group write (offset writes are left alone)."""
    i = 0
    while i < len(store.pending):
        if store.pending[i][0] == "group":
            store.complete(i, error)
        else:
            i += 1


def test_leader_sync_answered_only_after_store_write(impl):
    h, store = _deferred(impl)
    f = h.form_group(2, sync=False)
    _complete_group_writes(store)
    fs = h.send_sync(f.follower, f.generation)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    assert ls.result is None and fs.result is None
    assert h.state() == COMPLETING
    writes = [p for p in store.pending if p[0] == "group" and p[1] == GROUP]
    assert len(writes) == 1
    _complete_group_writes(store)
    assert ls.error == NONE and ls.result.assignment == b"L"
    assert fs.error == NONE and fs.result.assignment == b"F"
    assert h.state() == STABLE
    assert GROUP in store.groups


def test_follower_sync_after_leader_waits_for_the_same_write(impl):
    h, store = _deferred(impl)
    f = h.form_group(2, sync=False)
    _complete_group_writes(store)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    fs = h.send_sync(f.follower, f.generation)
    assert ls.result is None and fs.result is None
    _complete_group_writes(store)
    assert fs.error == NONE and fs.result.assignment == b"F"


def test_store_failure_not_coordinator_fails_parked_syncs_and_rebalances(impl):
    h, store = _deferred(impl)
    f = h.form_group(2, sync=False)
    _complete_group_writes(store)
    fs = h.send_sync(f.follower, f.generation)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    _complete_group_writes(store, Errors.NOT_COORDINATOR)
    assert ls.error == Errors.NOT_COORDINATOR
    assert fs.error == Errors.NOT_COORDINATOR
    assert h.state() == PREPARING
    assert all(m.assignment == b"" for m in h.describe().members)
    assert h.heartbeat(f.leader, f.generation) == Errors.REBALANCE_IN_PROGRESS


def test_store_failure_coordinator_not_available_fails_parked_syncs(impl):
    h, store = _deferred(impl)
    f = h.form_group(2, sync=False)
    _complete_group_writes(store)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    fs = h.send_sync(f.follower, f.generation)
    _complete_group_writes(store, Errors.COORDINATOR_NOT_AVAILABLE)
    assert ls.error == Errors.COORDINATOR_NOT_AVAILABLE
    assert fs.error == Errors.COORDINATOR_NOT_AVAILABLE
    assert h.state() == PREPARING
    # both re-join: a new generation forms
    lj = h.send_join(f.leader, protocols=SUPERSET)
    fj = h.send_join(f.follower, protocols=SUPERSET)
    assert lj.error == NONE and fj.error == NONE
    assert lj.result.generation_id == f.generation + 1


def test_store_write_completing_after_group_moved_on_is_ignored(impl):
    h, store = _deferred(impl)
    f = h.form_group(2, sync=False)
    _complete_group_writes(store)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    assert ls.result is None
    # the follower changes its metadata: rebalance; the parked leader sync fails with 27
    fj = h.send_join(f.follower, protocols=[(RANGE, b"new")])
    assert ls.error == Errors.REBALANCE_IN_PROGRESS
    assert h.state() == PREPARING
    _complete_group_writes(store)  # the old write lands late
    assert h.state() == PREPARING
    assert len(ls.results) == 1
    lj = h.send_join(f.leader, protocols=SUPERSET)
    assert lj.error == NONE and fj.error == NONE
    assert lj.result.generation_id == f.generation + 1
    assert h.state() == COMPLETING


def test_group_going_empty_is_written_to_the_store(impl):
    h, store = _deferred(impl)
    f = h.form_group(1, sync=False)
    _complete_group_writes(store)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L"})
    _complete_group_writes(store)
    assert ls.error == NONE
    store.groups.clear()
    h.leave(f.leader)
    assert h.state() == EMPTY
    # completing the join into an empty generation stores the (empty) group
    assert [p[1] for p in store.pending if p[0] == "group"] == [GROUP]
    _complete_group_writes(store)
    assert GROUP in store.groups


def test_sync_answered_in_stable_without_any_store_write(impl):
    h, store = _deferred(impl)
    f = h.form_group(2, sync=False)
    _complete_group_writes(store)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    _complete_group_writes(store)
    assert ls.error == NONE
    fs = h.send_sync(f.follower, f.generation)
    assert fs.error == NONE and fs.result.assignment == b"F"
    assert not [p for p in store.pending if p[0] == "group"]


def test_a_store_that_keeps_no_group_records_is_given_none_and_answers_the_same(impl):
    """InMemoryStore(group_records=False) (a trace replay's): every group write reaches
    it (the leader's sync is still answered from its completion), with None for the
    record, which the coordinator does not build; the answers and the group are those
    of a store that keeps them, which holds the assignment."""
    import pytest

    from fastcoord.core.store import InMemoryStore

    class Seen(InMemoryStore):
        __slots__ = ("records",)

        def __init__(self, **kw):
            super().__init__(**kw)
            self.records = []

        def store_group(self, group_id, record, done):
            self.records.append(record)
            super().store_group(group_id, record, done)

    outcomes = []
    for keep in (True, False):
        store = Seen(group_records=keep)
        h = Proto(impl, store=store)
        f = h.form_group(2, sync=False)
        fs = h.send_sync(f.follower, f.generation)
        ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
        outcomes.append((ls.error, ls.result.assignment, fs.error, fs.result.assignment,
                         h.state(), len(store.records)))
        if keep:
            assert store.records[-1]["members"] and store.groups[GROUP] == store.records[-1]
        else:
            assert store.records and set(store.records) == {None} and not store.groups
    assert outcomes[0] == outcomes[1] == (NONE, b"L", NONE, b"F", STABLE, outcomes[0][5])
    with pytest.raises(TypeError, match="group_records"):
        InMemoryStore(group_records="no")

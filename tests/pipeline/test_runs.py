"""HeartbeatRun (the trace replay's runs of heartbeats) and CheckHeap (its pending
checks), both twins, one body; and the replay with runs equal to the replay that plays
every heartbeat by its general path."""
import array

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fastcoord import (CoordinatorConfig, Errors, GroupCoordinator, ManualClock,
                       OffsetAndMetadata, SystemClock)
from fastcoord import _twins
from fastcoord.core.store import InMemoryStore
from fastcoord.pipeline.gen import generate
from fastcoord.pipeline.replay import TABLES, ShardReplay, canonical, split_by_shard

HB, COMMIT, OTHER = 0, 4, 5
PART = ("trace", 0)
NEVER = 2 ** 63 - 1


def _stable_member(coord, clock, group="g"):
    """A one-member Stable group: (member id, generation)."""
    got = {}
    coord.join_group(group, "", "consumer", [("range", b"")], session_timeout_ms=10_000,
                     callback=lambda r: got.__setitem__("j", r))
    mid = got["j"].member_id
    coord.join_group(group, mid, "consumer", [("range", b"")], session_timeout_ms=10_000,
                     callback=lambda r: got.__setitem__("j", r))
    coord.advance_time(coord.config.group_initial_rebalance_delay_ms)
    gen = got["j"].generation_id
    coord.sync_group(group, gen, mid, {mid: b""}, callback=lambda r: got.__setitem__("s", r))
    assert got["s"].error == Errors.NONE
    return mid, gen


class Trace:
    """A replay's arrays for events (kinds, times, member index) over members 0..k-1."""

    def __init__(self, impl, kinds, times, members, handles, generations, armed=True):
        n, k = len(kinds), len(handles)
        self.errors = array.array("i", [-1]) * n
        self.answered = array.array("q", [-1]) * n
        self.handles = array.array("q", handles)
        self.generations = array.array("i", generations)
        self.sessions = array.array("q", [10_000]) * k
        self.replaced = array.array("B", [0]) * k
        # armed: as if each member had a check pending (its time far off, not in checks)
        self.check_at = array.array("q", [NEVER if armed else -1]) * k
        self.last_touch = array.array("q", [-1]) * k
        self.group_events = array.array("q", [0])
        self.group_check_at = array.array("q", [-1])
        self.checks = _twins.module(impl, "pipeline.runs").CheckHeap()
        self.kinds = array.array("B", kinds)
        self.times = array.array("q", times)
        self.members = array.array("i", members)
        self.impl = impl

    def shared(self):
        """The keyword arguments for the replay's checks and their arrays."""
        return {"checks": self.checks, "sessions": self.sessions, "replaced": self.replaced,
                "group_check_at": self.group_check_at}

    def run_on(self, coord, offsets=None, instances=None):
        commits = {} if offsets is None else {
            "offsets": array.array("q", offsets), "partition": PART,
            "instances": instances or [None] * len(self.handles)}
        return _twins.module(self.impl, "pipeline.runs").HeartbeatRun(
            coord, self.kinds, self.times, self.members, array.array("i", [0]) * len(self.kinds),
            self.errors, self.answered, self.handles, self.generations, self.check_at,
            self.last_touch, self.group_events, **self.shared(), **commits)


@pytest.fixture
def coord(impl):
    clock = ManualClock(1_000)
    c = GroupCoordinator(CoordinatorConfig(), clock=clock, impl=impl)
    return c


def test_a_run_plays_heartbeats_at_their_times(impl, coord):
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [HB, HB, HB, OTHER, HB], [t0 + 10, t0 + 20, t0 + 20, t0 + 30, t0 + 40],
               [0, 1, 0, 0, 0], [h, -1], [gen, gen])
    runs = tr.run_on(coord)
    assert runs.run(0) == 3                   # stops at the other event
    assert not runs.left_commit
    assert list(tr.errors[:3]) == [0, int(Errors.UNKNOWN_MEMBER_ID), 0]
    assert list(tr.answered[:3]) == [t0 + 10, t0 + 20, t0 + 20]
    assert tr.errors[3] == -1 and tr.answered[3] == -1
    assert coord.clock.now_ms() == t0 + 20 and runs.now == t0 + 20
    assert list(tr.last_touch) == [t0 + 20, -1]      # the unknown member was not touched
    assert tr.group_events[0] == 3
    # the coordinator saw the heartbeat at t0 + 20: the session runs from there
    coord.advance_time(10_000 - 1)
    assert coord.heartbeat("g", mid, gen) == Errors.NONE
    assert runs.run(3) == 3                   # not a heartbeat: nothing played


def test_a_run_stops_at_stop(impl, coord):
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [HB, HB, HB], [t0 + 1, t0 + 2, t0 + 3], [0, 0, 0], [h], [gen])
    runs = tr.run_on(coord)
    assert runs.run(0, 1) == 1 and list(tr.errors) == [0, -1, -1]
    assert runs.run(1, 9) == 3 and list(tr.errors) == [0, 0, 0]
    with pytest.raises(ValueError, match="i must be"):
        runs.run(-1)


def test_a_run_stops_at_a_look_up(impl, coord):
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [HB] * 3, [t0 + 1, t0 + 2, t0 + 3], [0, 1, 0], [h, -2], [gen, gen])
    runs = tr.run_on(coord)
    assert runs.run(0) == 1                         # member 1's handle: to look up
    assert coord.clock.now_ms() == t0 + 2           # (its time was set)
    tr.handles[1] = h
    assert runs.run(1) == 3
    assert list(tr.errors) == [0, 0, 0]


def test_a_run_settles_the_checks_it_can(impl, coord):
    """Due by an event's time: a member's check with contact since moves to the new
    deadline, one of a member without a handle or replaced is dropped, a group's check
    that a later one superseded is dropped; all before the event is played."""
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [HB, HB], [t0 + 1, t0 + 50], [0, 0], [h, -1, h], [gen] * 3)
    tr.last_touch[0] = t0 - 10_000 + 30              # contact since its check was armed
    tr.last_touch[1] = tr.last_touch[2] = t0 - 10_000
    tr.replaced[2] = 1
    for m in range(3):
        tr.check_at[m] = t0 - 1
        tr.checks.push(t0 - 1, m)
    tr.group_check_at[0] = t0 + 100                   # the group's current check...
    tr.checks.push(t0 + 40, ~0)                       # ... superseded this one
    tr.checks.push(t0 + 100, ~0)
    runs = tr.run_on(coord)
    assert runs.run(0, 1) == 1 and list(tr.errors) == [0, -1]
    assert list(tr.check_at) == [t0 + 30, -1, -1]     # moved; dropped; dropped
    assert len(tr.checks) == 3 and tr.checks.next_due() == t0 + 30
    # due by t0 + 50: the member's contact at t0 + 1 moves it once more; the superseded
    # group check goes
    assert runs.run(1) == 2 and list(tr.errors) == [0, 0]
    assert list(tr.check_at) == [t0 + 1 + 10_000, -1, -1]
    assert len(tr.checks) == 2
    assert tr.checks.pop() == (t0 + 100, ~0)
    assert tr.checks.pop() == (t0 + 1 + 10_000, 0) and tr.check_at[0] == t0 + 1 + 10_000


def test_a_run_stops_at_a_check_the_replay_takes(impl, coord):
    """A member's session that may have run out, and a group's current check, are the
    replay's: the run stops before the event they are due by, and leaves them."""
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [HB, HB], [t0 + 1, t0 + 2], [0, 0], [h], [gen])
    tr.last_touch[0] = t0 - 10_000
    tr.check_at[0] = t0
    tr.checks.push(t0, 0)                            # no contact for 10 s at t0
    runs = tr.run_on(coord)
    assert runs.settle_checks(t0) and len(tr.checks) == 1   # left for the replay
    assert runs.run(0) == 0 and tr.errors[0] == -1 and len(tr.checks) == 1
    assert tr.checks.pop() == (t0, 0) and tr.check_at[0] == t0
    tr.group_check_at[0] = t0 + 2
    tr.checks.push(t0 + 2, ~0)
    assert runs.run(0) == 1                          # the group's check is due by t0 + 2
    assert tr.checks.next_due() == t0 + 2 and list(tr.errors) == [0, -1]


def test_a_run_arms_a_check_after_a_first_contact(impl, coord):
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [HB, HB], [t0 + 1, t0 + 2], [0, 0], [h], [gen], armed=False)
    tr.sessions[0] = 7_000
    runs = tr.run_on(coord)
    assert runs.run(0) == 2
    assert tr.check_at[0] == t0 + 1 + 7_000          # armed once, at the first contact
    assert len(tr.checks) == 1 and tr.checks.pop() == (t0 + 1 + 7_000, 0)
    # an error does not arm a check: a wrong generation
    tr2 = Trace(impl, [HB], [t0 + 3], [0], [h], [gen + 7], armed=False)
    assert tr2.run_on(coord).run(0) == 1 and not len(tr2.checks)
    assert tr2.errors[0] == int(Errors.ILLEGAL_GENERATION) and tr2.last_touch[0] == -1
    assert tr2.check_at[0] == -1


def test_a_run_moves_the_timer_where_it_must(impl, coord):
    """Where the timer has something due before a heartbeat, the run moves time with
    advance_time, as the general path does: what fires, fires at its own deadline, and
    its callbacks run, before the heartbeat."""
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    answered = []
    coord.join_group("other", "", "consumer", [("range", b"")], session_timeout_ms=10_000,
                     require_known_member_id=False,
                     callback=lambda r: answered.append((coord.clock.now_ms(), r.error)))
    delay = coord.config.group_initial_rebalance_delay_ms
    assert not answered and not coord.set_time_if_idle(t0 + delay + 5)
    tr = Trace(impl, [HB, HB], [t0 + 1, t0 + delay + 5], [0, 0], [h], [gen])
    runs = tr.run_on(coord)
    assert runs.run(0) == 2 and list(tr.errors) == [0, 0]
    assert answered == [(t0 + delay, Errors.NONE)]   # the join round, at its own time
    assert coord.clock.now_ms() == t0 + delay + 5 and runs.now == t0 + delay + 5
    # and the member's session runs from its last heartbeat
    coord.advance_time(10_000 - 1)
    assert coord.heartbeat("g", mid, gen) == Errors.NONE


def test_check_heap_order_and_errors(impl):
    mod = _twins.module(impl, "pipeline.runs")
    heap = mod.CheckHeap()
    assert heap.next_due() == mod.NEVER == NEVER and len(heap) == 0
    with pytest.raises(IndexError):
        heap.pop()
    with pytest.raises(TypeError, match="deadline"):
        heap.push("5", 1)
    with pytest.raises(TypeError, match="code"):
        heap.push(5, 1.0)
    for d, code in ((5, 1), (3, 2), (5, ~0), (3, 3), (9, 0)):
        heap.push(d, code)
    assert heap.next_due() == 3 and len(heap) == 5
    assert [heap.pop() for _ in range(5)] == [(3, 2), (3, 3), (5, 1), (5, ~0), (9, 0)]


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.one_of(st.tuples(st.integers(0, 20), st.integers(-5, 5)),
                              st.none()), max_size=80))
def test_check_heap_is_a_stable_priority_queue(impl, ops):
    """Against its definition: the earliest deadline first, ties in push order."""
    heap = _twins.module(impl, "pipeline.runs").CheckHeap()
    model = []
    for pushed, op in enumerate(ops):
        if op is None:
            if model:
                model.sort()
                d, _, code = model.pop(0)
                assert heap.pop() == (d, code)
        else:
            heap.push(*op)
            model.append((op[0], pushed, op[1]))
        assert len(heap) == len(model)
        assert heap.next_due() == (min(model)[0] if model else NEVER)


def _offset(coord, group="g"):
    err, offsets = coord.fetch_offsets(group, [PART])
    assert err == Errors.NONE
    om = offsets[PART]
    return None if om.offset == -1 else (om.offset, om.commit_timestamp_ms)   # -1: none


def test_a_run_plays_commits_the_coordinator_accepts(impl, coord):
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [HB, COMMIT, HB, COMMIT], [t0 + 10, t0 + 20, t0 + 30, t0 + 40],
               [0, 0, 0, 0], [h], [gen])
    runs = tr.run_on(coord, offsets=[0, 17, 0, 18])
    assert runs.run(0) == 4
    assert list(tr.errors) == [0, 0, 0, 0]
    assert list(tr.answered) == [t0 + 10, t0 + 20, t0 + 30, t0 + 40]
    assert list(tr.last_touch) == [t0 + 40] and tr.group_events[0] == 4
    assert _offset(coord) == (18, t0 + 40)           # stored, stamped at its own time
    # as commit_offsets stores an offset given alone: the store wrote what the group holds
    stored = coord._logic.store.offsets["g"][PART]
    assert stored == OffsetAndMetadata(18, commit_timestamp_ms=t0 + 40)
    assert type(stored) is OffsetAndMetadata
    assert coord._logic.owners[h & 0xFFFFFFFF][0].offsets[PART] is stored
    # the commit at t0 + 40 touched the session, as commit_offsets does
    coord.advance_time(10_000 - 1)                  # the clock is at t0 + 40
    assert coord.heartbeat("g", mid, gen) == Errors.NONE
    # without offsets, instances and partition a run stops at a commit
    tr2 = Trace(impl, [COMMIT], [coord.clock.now_ms()], [0], [h], [gen])
    assert tr2.run_on(coord).run(0) == 0 and tr2.errors[0] == -1


def test_a_run_leaves_other_commits_to_commit_offsets(impl, coord):
    """A commit the coordinator would answer with an error stops the run and changes
    nothing: a wrong generation, a member without a handle, a static member's wrong
    instance id, a group in CompletingRebalance."""
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    deadline = coord._logic.table.deadline(h & 0xFFFFFFFF)
    cases = [([h], [gen + 1], None), ([-1], [gen], None), ([h], [gen], ["someone"])]
    for handles, gens, instances in cases:
        tr = Trace(impl, [COMMIT, HB], [t0, t0 + 1], [0, 0], handles, gens)
        runs = tr.run_on(coord, offsets=[5, 0], instances=instances)
        assert runs.run(0) == 0 and runs.left_commit     # for commit_offsets
        assert list(tr.errors) == [-1, -1] and list(tr.last_touch) == [-1]
    assert _offset(coord) is None
    assert coord._logic.table.deadline(h & 0xFFFFFFFF) == deadline
    # CompletingRebalance: a second member joins, the first rejoins, the round completes
    got = {}
    coord.join_group("g", "", "consumer", [("range", b"")], session_timeout_ms=10_000,
                     callback=lambda r: got.__setitem__("new", r))
    mid2 = got["new"].member_id
    coord.join_group("g", mid2, "consumer", [("range", b"")], session_timeout_ms=10_000,
                     callback=lambda r: got.__setitem__("new", r))
    coord.join_group("g", mid, "consumer", [("range", b"")], session_timeout_ms=10_000,
                     callback=lambda r: got.__setitem__("old", r))
    assert coord.describe_group("g").state == "CompletingRebalance"
    gen2 = got["old"].generation_id
    t1 = coord.clock.now_ms()
    tr = Trace(impl, [COMMIT], [t1], [0], [h], [gen2])
    runs = tr.run_on(coord, offsets=[5])
    assert runs.run(0) == 0 and runs.left_commit and tr.errors[0] == -1
    res = coord.commit_offsets("g", mid, gen2, {PART: 5})
    assert res == {PART: Errors.REBALANCE_IN_PROGRESS}     # what the general path answers


def test_a_commit_the_store_fails_answers_its_error(impl, coord):
    """The store's error is the answer, as commit_offsets gives it: the session was
    touched (commit_offsets touches before it stores), nothing stored, no contact noted."""
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    store = coord._logic.store
    store.fail_with = Errors.COORDINATOR_NOT_AVAILABLE
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [COMMIT], [t0 + 5], [0], [h], [gen])
    assert tr.run_on(coord, offsets=[9]).run(0) == 1
    assert list(tr.errors) == [int(Errors.COORDINATOR_NOT_AVAILABLE)]
    assert list(tr.last_touch) == [-1]
    assert coord._logic.table.deadline(h & 0xFFFFFFFF) == t0 + 5 + 10_000
    assert _offset(coord) is None and not coord._logic.owners[h & 0xFFFFFFFF][0].pending_offsets
    assert coord.commit_offsets("g", mid, gen, {PART: 9}) == {
        PART: Errors.COORDINATOR_NOT_AVAILABLE}


def test_a_runs_commits_read_the_stores_failure_at_each_commit(impl, coord):
    """The store's failure is read at each commit, not when the run was made."""
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [COMMIT, COMMIT, COMMIT], [t0 + 1, t0 + 2, t0 + 3], [0, 0, 0], [h], [gen])
    runs = tr.run_on(coord, offsets=[3, 4, 5])
    assert runs.run(0, 1) == 1
    store = coord._logic.store
    store.fail_with = Errors.NOT_COORDINATOR        # after the run was made
    assert runs.run(1, 2) == 2
    store.fail_with = Errors.NONE
    assert runs.run(2) == 3
    assert list(tr.errors) == [0, int(Errors.NOT_COORDINATOR), 0]
    assert list(tr.last_touch) == [t0 + 3]
    assert store.offsets["g"][PART] == OffsetAndMetadata(5, commit_timestamp_ms=t0 + 3)
    assert _offset(coord) == (5, t0 + 3)


def _on_a_sink(impl):
    """A one-member Stable group on a store that keeps nothing (a replay's): (store,
    coordinator, member id, generation, handle)."""
    store = InMemoryStore(group_records=False, offsets=False)
    coord = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(1_000), impl=impl,
                             store=store)
    mid, gen = _stable_member(coord, coord.clock)
    return store, coord, mid, gen, coord.member_handle("g", mid)


def test_a_runs_commits_on_a_store_that_keeps_no_offsets(impl):
    """InMemoryStore(offsets=False) (a replay's): the run's commits are accepted and the
    group holds them, as on a store that keeps them, and the store holds none; its
    flag is read at each commit."""
    store, coord, mid, gen, h = _on_a_sink(impl)
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [COMMIT, HB, COMMIT], [t0 + 1, t0 + 2, t0 + 3], [0, 0, 0], [h], [gen])
    runs = tr.run_on(coord, offsets=[7, 0, 8])
    assert runs.run(0, 2) == 2
    assert list(tr.errors[:2]) == [0, 0] and _offset(coord) == (7, t0 + 1)
    assert store.offsets == {}
    store.keeps_offsets = True                      # after the run was made
    assert runs.run(2) == 3 and tr.errors[2] == 0
    assert _offset(coord) == (8, t0 + 3)
    assert store.offsets["g"][PART] == OffsetAndMetadata(8, commit_timestamp_ms=t0 + 3)


def test_an_offset_a_reader_holds_never_changes_under_a_runs_commits(impl):
    """On a store that keeps no offsets the native run rewrites the offset a commit
    replaces when nothing else holds it: an offset a reader got from fetch_offsets
    stays as it was read, and every commit's value is the offset alone (the metadata
    and leader epoch of an earlier commit_offsets do not survive it), in both twins."""
    _, coord, mid, gen, h = _on_a_sink(impl)
    assert coord.commit_offsets("g", mid, gen, {PART: OffsetAndMetadata(5, "meta", 3)}) == {
        PART: Errors.NONE}
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [COMMIT] * 4, [t0 + 1, t0 + 2, t0 + 3, t0 + 4], [0] * 4, [h], [gen])
    runs = tr.run_on(coord, offsets=[6, 7, 8, 9])
    assert runs.run(0, 1) == 1
    held = coord.fetch_offsets("g", [PART])[1][PART]          # a reader holds it
    assert held == OffsetAndMetadata(6, "", -1, t0 + 1)
    assert runs.run(1, 3) == 3
    assert held == OffsetAndMetadata(6, "", -1, t0 + 1)         # unchanged
    del held
    assert runs.run(3) == 4 and list(tr.errors) == [0, 0, 0, 0]
    now = coord.fetch_offsets("g", [PART])[1][PART]
    assert now == OffsetAndMetadata(9, "", -1, t0 + 4) and type(now) is OffsetAndMetadata


@pytest.mark.parametrize("keeps_offsets,fail_with", [
    (True, Errors.NONE), (False, Errors.NONE), (True, Errors.NOT_COORDINATOR)])
def test_a_runs_commit_leaves_what_commit_offsets_leaves(impl, keeps_offsets, fail_with):
    """The run's commit (GroupLogic.commit_accepted in the pure twin; runs.pyx's
    c_commit_accepted, which writes InMemoryStore.store_offset_now's dicts itself, in the
    native) and commit_offsets of the same offset alone, at the same time, answer the
    same and leave the same store offsets, group offsets and pending writes."""
    after = []
    for by_run in (True, False):
        store = InMemoryStore(group_records=False, offsets=keeps_offsets)
        coord = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(1_000), impl=impl,
                                 store=store)
        mid, gen = _stable_member(coord, coord.clock)
        h = coord.member_handle("g", mid)
        store.fail_with = fail_with
        t = coord.clock.now_ms() + 5
        if by_run:
            tr = Trace(impl, [COMMIT], [t], [0], [h], [gen])
            assert tr.run_on(coord, offsets=[42]).run(0) == 1
            error = tr.errors[0]
        else:
            coord.advance_time(5)
            error = int(coord.commit_offsets("g", mid, gen, {PART: 42})[PART])
        group = coord._logic.owners[h & 0xFFFFFFFF][0]
        stored = {g: {tp: (type(om), tuple(om)) for tp, om in by.items()}
                  for g, by in store.offsets.items()}
        held = {tp: (type(om), tuple(om)) for tp, om in group.offsets.items()}
        after.append((error, stored, held, dict(group.pending_offsets)))
    assert after[0] == after[1]
    assert after[0][0] == int(fail_with)


def test_a_static_members_commit_plays_with_its_instance_id(impl, coord):
    got = {}
    coord.join_group("g", "", "consumer", [("range", b"")], session_timeout_ms=10_000,
                     group_instance_id="i-1", callback=lambda r: got.__setitem__("j", r))
    coord.advance_time(coord.config.group_initial_rebalance_delay_ms)
    mid, gen = got["j"].member_id, got["j"].generation_id
    coord.sync_group("g", gen, mid, {mid: b""}, group_instance_id="i-1",
                     callback=lambda r: got.__setitem__("s", r))
    assert got["s"].error == Errors.NONE
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [COMMIT, COMMIT], [t0 + 1, t0 + 2], [0, 0], [h], [gen])
    runs = tr.run_on(coord, offsets=[3, 4], instances=["i-1"])
    assert runs.run(0) == 2 and list(tr.errors) == [0, 0]
    assert _offset(coord) == (4, t0 + 2)


def test_commit_handle(impl, coord):
    """MemberTable.commit_handle: the slot after touching the member, or -1 untouched."""
    table = coord._logic.table
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    slot = h & 0xFFFFFFFF
    before = table.deadline(slot)
    coord.clock.set_ms(coord.clock.now_ms() + 5)
    for args in ((h, gen + 1), (h + (1 << 32), gen), (-1, gen), (h, gen, "nobody")):
        assert table.commit_handle(*args) == -1
        assert table.deadline(slot) == before
    assert table.commit_handle(h, gen) == slot
    assert table.deadline(slot) == coord.clock.now_ms() + 10_000
    with pytest.raises(TypeError, match="instance_id"):
        table.commit_handle(h, gen, 7)
    with pytest.raises(TypeError, match="handle"):
        table.commit_handle("h", gen)
    table.active = False
    assert table.commit_handle(h, gen) == -1


def test_bad_commit_arguments(impl, coord):
    mod = _twins.module(impl, "pipeline.runs")
    tr = Trace(impl, [COMMIT], [1], [0], [-1], [0])
    base = (coord, tr.kinds, tr.times, tr.members, array.array("i", [0]), tr.errors,
            tr.answered, tr.handles, tr.generations, tr.check_at, tr.last_touch,
            tr.group_events)
    offsets = array.array("q", [1])
    shared = tr.shared()
    with pytest.raises(ValueError, match="go together"):
        mod.HeartbeatRun(*base, **shared, offsets=offsets)
    with pytest.raises(ValueError, match="offsets has"):
        mod.HeartbeatRun(*base, **shared, offsets=array.array("q", [1, 2]), instances=[None],
                         partition=PART)
    with pytest.raises(ValueError, match="instances has"):
        mod.HeartbeatRun(*base, **shared, offsets=offsets, instances=[None, None],
                         partition=PART)
    with pytest.raises(TypeError, match="partition"):
        mod.HeartbeatRun(*base, **shared, offsets=offsets, instances=[None],
                         partition="trace")
    from fastcoord.core.store import DeferredStore
    deferred = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(0), impl=impl,
                                store=DeferredStore())
    with pytest.raises(TypeError, match="InMemoryStore"):
        mod.HeartbeatRun(deferred, *base[1:], **shared, offsets=offsets, instances=[None],
                         partition=PART)


def test_the_twins_share_their_codes(impl):
    from fastcoord.pipeline._pure import runs as pure
    mod = _twins.module(impl, "pipeline.runs")
    for name in ("HEARTBEAT", "COMMIT", "NO_HANDLE", "LOOK_UP", "NOT_ARMED", "NEVER"):
        assert getattr(mod, name) == getattr(pure, name), name


def test_bad_arguments(impl):
    mod = _twins.module(impl, "pipeline.runs")
    sys_coord = GroupCoordinator(CoordinatorConfig(), clock=SystemClock(), impl=impl)
    tr = Trace(impl, [HB], [1], [0], [-1], [0])
    with pytest.raises(TypeError, match="ManualClock"):
        tr.run_on(sys_coord)
    coord = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(0), impl=impl)
    groups = array.array("i", [0])

    def make(**change):
        args = dict(kinds=tr.kinds, times=tr.times, members=tr.members, groups=groups,
                    errors=tr.errors, answered=tr.answered, handles=tr.handles,
                    generations=tr.generations, check_at=tr.check_at,
                    last_touch=tr.last_touch, group_events=tr.group_events, **tr.shared())
        args.update(change)
        positional = [args.pop(k) for k in ("kinds", "times", "members", "groups", "errors",
                                            "answered", "handles", "generations", "check_at",
                                            "last_touch", "group_events")]
        return mod.HeartbeatRun(coord, *positional, **args)

    make()                                                      # the arguments are good
    with pytest.raises(ValueError, match="times"):
        make(times=array.array("q", [1, 2]))
    with pytest.raises(ValueError, match="sessions has"):
        make(sessions=array.array("q", [1, 2]))
    with pytest.raises(ValueError, match="group_check_at has"):
        make(group_check_at=array.array("q"))
    with pytest.raises(ValueError, match="members must index"):
        make(members=array.array("i", [1]))                    # one member: 0 only
    with pytest.raises(ValueError, match="groups must index"):
        make(groups=array.array("i", [-1]))
    if _twins.NATIVE_AVAILABLE:                               # the other twin's heap
        other = "pure" if _twins.resolve(impl) == "native" else "native"
        with pytest.raises(TypeError, match="CheckHeap"):
            make(checks=_twins.module(other, "pipeline.runs").CheckHeap())
    with pytest.raises(TypeError, match="CheckHeap"):
        make(checks=[])


def _replay(trace, impl, runs):
    parts = {name: [] for name in TABLES}
    end = max(trace.column("time_ms").to_pylist())
    for shard, sub in split_by_shard(trace).items():
        out = ShardReplay(shard, impl=impl, heartbeat_runs=runs).run(sub, end)
        for name, t in out.items():
            parts[name].append(t)
    import pyarrow as pa
    return {name: canonical(pa.concat_tables(ts), name).to_pylist() for name, ts in parts.items()}


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), groups=st.integers(1, 8), members=st.integers(1, 12),
       gc_prob=st.sampled_from([0.0, 0.02, 0.3]), crash=st.sampled_from([0.5, 20.0]))
def test_runs_equal_the_general_path(impl, seed, groups, members, gc_prob, crash):
    trace = generate(groups=groups, members=members, duration_s=120, seed=seed,
                     gc_prob=gc_prob, crash_per_hour=crash, leave_per_hour=crash)
    with_runs = _replay(trace, impl, True)
    assert with_runs == _replay(trace, impl, False)
    assert len(with_runs["responses"]) == trace.num_rows

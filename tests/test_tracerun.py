"""HeartbeatRun (the trace replay's runs of heartbeats), both twins, one body; and the
replay with runs equal to the replay that plays every heartbeat by its general path."""
import array

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock, SystemClock
from fastcoord import _compat
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
        self.check_at = array.array("q", [1 if armed else -1]) * k
        self.last_touch = array.array("q", [-1]) * k
        self.group_events = array.array("q", [0])
        self.kinds = array.array("B", kinds)
        self.times = array.array("q", times)
        self.members = array.array("i", members)
        self.impl = impl

    def run_on(self, coord, offsets=None, instances=None):
        commits = {} if offsets is None else {
            "offsets": array.array("q", offsets), "partition": PART,
            "instances": instances or [None] * len(self.handles)}
        return _compat.module(self.impl, "tracerun").HeartbeatRun(
            coord, self.kinds, self.times, self.members, array.array("i", [0]) * len(self.kinds),
            self.errors, self.answered, self.handles, self.generations, self.check_at,
            self.last_touch, self.group_events, **commits)


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
    assert runs.run(0, NEVER) == 3                   # stops at the other event
    assert list(tr.errors[:3]) == [0, int(Errors.UNKNOWN_MEMBER_ID), 0]
    assert list(tr.answered[:3]) == [t0 + 10, t0 + 20, t0 + 20]
    assert tr.errors[3] == -1 and tr.answered[3] == -1
    assert coord.clock.now_ms() == t0 + 20 and runs.now == t0 + 20
    assert list(tr.last_touch) == [t0 + 20, -1]      # the unknown member was not touched
    assert tr.group_events[0] == 3
    assert runs.arm == -1
    # the coordinator saw the heartbeat at t0 + 20: the session runs from there
    coord.advance_time(10_000 - 1)
    assert coord.heartbeat("g", mid, gen) == Errors.NONE
    assert runs.run(3, NEVER) == 3                   # not a heartbeat: nothing played


def test_a_run_stops_at_stop(impl, coord):
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [HB, HB, HB], [t0 + 1, t0 + 2, t0 + 3], [0, 0, 0], [h], [gen])
    runs = tr.run_on(coord)
    assert runs.run(0, NEVER, 1) == 1 and list(tr.errors) == [0, -1, -1]
    assert runs.run(1, NEVER, 9) == 3 and list(tr.errors) == [0, 0, 0]
    with pytest.raises(ValueError, match="i must be"):
        runs.run(-1, NEVER)


def test_a_run_stops_before_a_due_check_and_a_look_up(impl, coord):
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [HB] * 4, [t0 + 1, t0 + 2, t0 + 3, t0 + 4], [0, 0, 1, 0], [h, -2],
               [gen, gen])
    runs = tr.run_on(coord)
    assert runs.run(0, t0 + 2) == 1                  # the check at t0 + 2 comes first
    assert runs.run(1, NEVER) == 2                   # member 1's handle: to look up
    assert coord.clock.now_ms() == t0 + 2
    tr.handles[1] = h
    assert runs.run(2, NEVER) == 4
    assert list(tr.errors) == [0, 0, 0, 0]


def test_a_run_stops_after_a_member_to_arm(impl, coord):
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    tr = Trace(impl, [HB, HB], [t0 + 1, t0 + 2], [0, 0], [h], [gen], armed=False)
    runs = tr.run_on(coord)
    assert runs.run(0, NEVER) == 1 and runs.arm == 0
    tr.check_at[0] = t0 + 1 + 10_000
    assert runs.run(1, NEVER) == 2 and runs.arm == -1
    # an error does not ask for a check: a wrong generation
    tr2 = Trace(impl, [HB], [t0 + 3], [0], [h], [gen + 7], armed=False)
    runs2 = tr2.run_on(coord)
    assert runs2.run(0, NEVER) == 1 and runs2.arm == -1
    assert tr2.errors[0] == int(Errors.ILLEGAL_GENERATION) and tr2.last_touch[0] == -1


def test_a_run_stops_where_the_timer_must_move(impl, coord):
    mid, gen = _stable_member(coord, coord.clock)
    h = coord.member_handle("g", mid)
    t0 = coord.clock.now_ms()
    due = coord._logic.timer.next_deadline_ms()      # the member's session deadline
    assert due is not None and due > t0
    tr = Trace(impl, [HB, HB], [t0 + 1, due + 5], [0, 0], [h], [gen])
    runs = tr.run_on(coord)
    assert runs.run(0, NEVER) == 1                   # the timer has something due first
    assert coord.clock.now_ms() == t0 + 1
    assert not coord.set_time_if_idle(due + 5)       # the coordinator agrees


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
    assert runs.run(0, NEVER) == 4
    assert list(tr.errors) == [0, 0, 0, 0]
    assert list(tr.answered) == [t0 + 10, t0 + 20, t0 + 30, t0 + 40]
    assert list(tr.last_touch) == [t0 + 40] and tr.group_events[0] == 4
    assert _offset(coord) == (18, t0 + 40)           # stored, stamped at its own time
    # the commit at t0 + 40 touched the session, as commit_offsets does
    coord.advance_time(10_000 - 1)                  # the clock is at t0 + 40
    assert coord.heartbeat("g", mid, gen) == Errors.NONE
    # without offsets, instances and partition a run stops at a commit
    tr2 = Trace(impl, [COMMIT], [coord.clock.now_ms()], [0], [h], [gen])
    assert tr2.run_on(coord).run(0, NEVER) == 0 and tr2.errors[0] == -1


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
        assert tr.run_on(coord, offsets=[5, 0], instances=instances).run(0, NEVER) == 0
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
    assert tr.run_on(coord, offsets=[5]).run(0, NEVER) == 0 and tr.errors[0] == -1
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
    assert tr.run_on(coord, offsets=[9]).run(0, NEVER) == 1
    assert list(tr.errors) == [int(Errors.COORDINATOR_NOT_AVAILABLE)]
    assert list(tr.last_touch) == [-1]
    assert coord._logic.table.deadline(h & 0xFFFFFFFF) == t0 + 5 + 10_000
    assert _offset(coord) is None and not coord._logic.owners[h & 0xFFFFFFFF][0].pending_offsets
    assert coord.commit_offsets("g", mid, gen, {PART: 9}) == {
        PART: Errors.COORDINATOR_NOT_AVAILABLE}


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
    assert runs.run(0, NEVER) == 2 and list(tr.errors) == [0, 0]
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
    mod = _compat.module(impl, "tracerun")
    tr = Trace(impl, [COMMIT], [1], [0], [-1], [0])
    base = (coord, tr.kinds, tr.times, tr.members, array.array("i", [0]), tr.errors,
            tr.answered, tr.handles, tr.generations, tr.check_at, tr.last_touch,
            tr.group_events)
    offsets = array.array("q", [1])
    with pytest.raises(ValueError, match="go together"):
        mod.HeartbeatRun(*base, offsets=offsets)
    with pytest.raises(ValueError, match="offsets has"):
        mod.HeartbeatRun(*base, offsets=array.array("q", [1, 2]), instances=[None],
                         partition=PART)
    with pytest.raises(ValueError, match="instances has"):
        mod.HeartbeatRun(*base, offsets=offsets, instances=[None, None], partition=PART)
    with pytest.raises(TypeError, match="partition"):
        mod.HeartbeatRun(*base, offsets=offsets, instances=[None], partition="trace")
    from fastcoord.store import DeferredStore
    deferred = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(0), impl=impl,
                                store=DeferredStore())
    with pytest.raises(TypeError, match="InMemoryStore"):
        mod.HeartbeatRun(deferred, *base[1:], offsets=offsets, instances=[None],
                         partition=PART)


def test_the_twins_share_their_codes(impl):
    from fastcoord._pure import tracerun as pure
    mod = _compat.module(impl, "tracerun")
    for name in ("HEARTBEAT", "COMMIT", "NO_HANDLE", "LOOK_UP", "NOT_ARMED"):
        assert getattr(mod, name) == getattr(pure, name), name


def test_bad_arguments(impl):
    mod = _compat.module(impl, "tracerun")
    sys_coord = GroupCoordinator(CoordinatorConfig(), clock=SystemClock(), impl=impl)
    tr = Trace(impl, [HB], [1], [0], [-1], [0])
    with pytest.raises(TypeError, match="ManualClock"):
        tr.run_on(sys_coord)
    coord = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(0), impl=impl)
    with pytest.raises(ValueError, match="times"):
        mod.HeartbeatRun(coord, tr.kinds, array.array("q", [1, 2]), tr.members,
                         array.array("i", [0]), tr.errors, tr.answered, tr.handles,
                         tr.generations, tr.check_at, tr.last_touch, tr.group_events)


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

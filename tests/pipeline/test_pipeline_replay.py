"""Golden traces through the single-process replay, native vs pure on synthetic traces,
the generator's determinism and trace validation."""
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")
from fastcoord import shard_for
from fastcoord.pipeline.gen import generate
from fastcoord.pipeline.replay import replay_local
from fastcoord.pipeline.trace import validate

from helpers.traces import (
    crash_trace, leave_trace, static_rejoin_while_parked_trace, static_replaced_heartbeats_trace,
    static_restart_trace,
)

def _rebalances(out):
    return [(r["start_ms"], r["end_ms"], r["cause"], r["members_before"], r["members_after"],
             r["generation"]) for r in out["rebalances"].to_pylist()]


def _expirations(out):
    return [(r["member_id"], r["time_ms"], r["reason"], r["last_heartbeat_ms"])
            for r in out["expirations"].to_pylist()]


def test_golden_crash(impl):
    out = replay_local(crash_trace(), impl=impl)
    # initial: both join at 0, the initial delay restarts at the 2nd join -> 6000
    # b's last heartbeat 12000 + 10 s session -> expired at exactly 22000
    assert _expirations(out) == [("b", 22000, "session", 12000)]
    assert _rebalances(out) == [(0, 6000, "member-join", 0, 2, 1),
                                (22000, 24001, "session-timeout", 2, 1, 2)]
    errs = {(r["member_id"], r["time_ms"]): r["error"] for r in out["responses"].to_pylist()}
    assert errs[("a", 21000)] == 0 and errs[("a", 24000)] == 0 and errs[("a", 27000)] == 0


def test_golden_leave(impl):
    out = replay_local(leave_trace(), impl=impl)
    assert _expirations(out) == []
    assert _rebalances(out) == [(0, 6000, "member-join", 0, 2, 1),
                                (10000, 12001, "leave", 2, 1, 2)]


def test_golden_static_restart_no_rebalance(impl):
    out = replay_local(static_restart_trace(), impl=impl)
    assert _expirations(out) == []
    assert _rebalances(out) == [(0, 6000, "member-join", 0, 2, 1)]
    b2 = [r for r in out["responses"].to_pylist() if r["member_id"] == "b2"]
    assert {r["error"] for r in b2} == {0}


def test_golden_second_join_in_flight_decides_the_member(impl):
    out = replay_local(static_rejoin_while_parked_trace(), impl=impl)
    answers = [(r["member_id"], r["time_ms"], r["event"], r["error"], r["answered_ms"])
               for r in out["responses"].to_pylist() if r["event"] != "heartbeat"]
    # The rejoin with member id "" fences b's first join at once (82); the second join
    # completes the round with a. b's sync goes out after that answer, with the member id
    # it gave, and succeeds: the fenced answer must not make the replay send it earlier
    # with the fenced id (FENCED_INSTANCE_ID, and b removed when the sync round expires).
    assert ("b", 0, "join", 82, 1000) in answers
    assert ("b", 1000, "join", 0, 6000) in answers
    assert ("b", 3001, "sync", 0, 6000) in answers
    assert _expirations(out) == []
    assert _rebalances(out) == [(0, 6000, "member-join", 0, 2, 1)]
    hb = [r["error"] for r in out["responses"].to_pylist() if r["event"] == "heartbeat"]
    assert hb == [0] * len(hb)


@pytest.mark.parametrize("runs", [True, False])
def test_a_replaced_static_members_heartbeat_is_fenced(impl, runs):
    """b2 takes b's instance id at 20000 while b's process goes on heartbeating: Kafka
    answers those FENCED_INSTANCE_ID (82), the instance id being another member's, and
    so must the replay (by heartbeat runs and by the general path alike); the same
    heartbeats naming no instance id are UNKNOWN_MEMBER_ID (25), as Kafka answers them."""
    from fastcoord.pipeline.replay import NUM_SHARDS, ShardReplay
    for inst, expected in (("i-b", 82), (None, 25)):
        trace = static_replaced_heartbeats_trace(inst)
        out = ShardReplay(shard_for("g", NUM_SHARDS), impl=impl, heartbeat_runs=runs).run(
            trace.sort_by([("time_ms", "ascending"), ("seq", "ascending")]), 45000)
        rows = out["responses"].to_pylist()
        old = [(r["time_ms"], r["error"]) for r in rows
               if r["member_id"] == "b" and r["time_ms"] > 20000]
        assert old == [(21000, expected), (24000, expected), (27000, expected)], inst
        # the new incarnation and the other member are untouched by them
        others = {r["error"] for r in rows if r["event"] == "heartbeat"
                  and r["member_id"] in ("a", "b2")}
        assert others == {0}
        assert out["expirations"].num_rows == 0


@pytest.mark.parametrize("seed", [1, 2])
def test_native_equals_pure(seed):
    import fastcoord
    if not fastcoord.NATIVE_AVAILABLE:
        pytest.skip("native core not built")
    trace = generate(groups=12, members=6, duration_s=240, seed=seed)
    a = replay_local(trace, impl="native")
    b = replay_local(trace, impl="pure")
    for name in a:
        assert a[name].to_pylist() == b[name].to_pylist(), name
    assert a["responses"].num_rows == trace.num_rows
    assert a["rebalances"].num_rows > 0
    assert a["offsets"].num_rows > 0            # the twins' committed offsets, equal above


def test_generator_deterministic_and_varied():
    a = generate(groups=8, members=6, duration_s=200, seed=7)
    b = generate(groups=8, members=6, duration_s=200, seed=7)
    c = generate(groups=8, members=6, duration_s=200, seed=8)
    assert a.equals(b) and not a.equals(c)
    events = set(a.column("event").to_pylist())
    assert {"join", "sync", "heartbeat", "commit"} <= events
    assert a.column("instance_id").null_count < a.num_rows        # some static members
    good, stats = validate(a)
    assert good.num_rows == a.num_rows and stats.malformed == stats.unknown_event == 0
    # every commit names its consumer slot's partition, no other request names any
    named = [(r["event"], r["offsets"] is not None) for r in a.select(["event", "offsets"]).to_pylist()]
    assert {e == "commit" for e, has in named if has} == {True}
    assert all(has for e, has in named if e == "commit")


FAULTS = [dict(),                                                   # the defaults
          dict(gc_prob=0.1, crash_per_hour=20, leave_per_hour=10),  # every kind, often
          dict(deploy_prob=1.0, static_fraction=0.6, session_timeouts=(10_000,))]


@pytest.mark.parametrize("faults", range(len(FAULTS)))
@pytest.mark.parametrize("seed", [3, 4])
def test_replaying_a_generated_trace_gives_the_answers_its_consumers_got(impl, faults, seed):
    """The generator's consumers ran against a coordinator (closed loop) and the trace
    keeps each request's answer in `error`; the replay (open loop, its heartbeat runs
    in C for native) must answer every request it answers within the trace the same
    way. The requests it leaves unanswered are joins and syncs still parked at the
    trace's end (the generating simulation ran past it, so it has their answers)."""
    trace = generate(groups=10, members=6, duration_s=180, seed=seed, **FAULTS[faults])
    assert trace.column("error").null_count == 0
    # the generation a request carried: none on JoinGroup and LeaveGroup
    for event, generation in zip(trace.column("event").to_pylist(),
                                 trace.column("generation").to_pylist()):
        assert (generation is None) == (event in ("join", "leave")), (event, generation)
    out = replay_local(trace, impl=impl)
    source = dict(zip(trace.column("seq").to_pylist(), trace.column("error").to_pylist()))
    kinds = dict(zip(trace.column("seq").to_pylist(), trace.column("event").to_pylist()))
    compared, errors = 0, set()
    for r in out["responses"].to_pylist():
        if r["answered_ms"] < 0:
            assert kinds[r["seq"]] in ("join", "sync"), r
            continue
        assert r["error"] == source[r["seq"]], r
        compared += 1
        errors.add(r["error"])
    assert compared > 0.99 * trace.num_rows
    # the traces exercise more than the happy path: rebalances seen by heartbeats, and
    # MEMBER_ID_REQUIRED for dynamic members' first joins
    assert {0, 27, 79} <= errors


def _slots(incarnations):
    by_slot = {}
    for i in incarnations:
        by_slot.setdefault(i.slot, set()).add(i.member)
    return sorted(sorted(members) for members in by_slot.values())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_what_if_reads_back_the_behaviour_the_generator_gave(seed):
    """derive_behaviour on a generated trace recovers its consumers' behaviour: every
    incarnation with its slot, instance id and start, a dynamic member's LeaveGroup, and
    the heartbeat interval of each that heartbeat a few times without a pause."""
    from collections import Counter

    from fastcoord.pipeline.gen import behaviours
    from fastcoord.pipeline.whatif import derive_behaviour
    params = dict(groups=12, members=6, duration_s=240, seed=seed)
    trace = generate(**params)
    beats = Counter(m for m, e in zip(trace.column("member_id").to_pylist(),
                                      trace.column("event").to_pylist()) if e == "heartbeat")
    derived = derive_behaviour(trace, 240_000)
    checked = 0
    for by_group in behaviours(**params).values():
        for gid, incarnations in by_group.items():
            seen = {i.member: i for i in derived[gid]}
            assert set(seen) == {i.member for i in incarnations}
            # the processes of one consumer slot (its restarts) are found to be one slot
            assert _slots(derived[gid]) == _slots(incarnations)
            for inc in incarnations:
                got = seen[inc.member]
                assert (got.instance_id, got.start_ms) == (inc.instance_id, inc.start_ms)
                if inc.end == "leave":
                    assert got.end == "leave"
                if beats[inc.member] >= 4 and not inc.pauses:
                    assert got.heartbeat_ms == inc.heartbeat_ms
                    checked += 1
    assert checked > 20


def _out_of_order_by_hand(rows) -> int:
    """The definition, row by row: a row whose time is earlier than that of an earlier
    row (by seq) of its group."""
    count, latest = 0, {}
    for seq, group, time_ms in sorted(rows):
        if group in latest and time_ms < latest[group]:
            count += 1
        latest[group] = max(latest.get(group, time_ms), time_ms)
    return count


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", ""]),
                          st.one_of(st.integers(-5, 5),
                                    st.integers(-(2**62), 2**62))), max_size=40),
       st.booleans(), st.booleans())
def test_validate_counts_out_of_order_rows(events, shuffled, in_time_order):
    """validate's out-of-order count (array operations) against the definition, rows in
    seq order or not, with times close together or far apart (beyond what a key of
    group * span can hold), the rows in time order or not (in time order and seq order:
    the count's shortcut)."""
    if in_time_order:
        events = sorted(events, key=lambda e: e[1])
    seqs = list(range(len(events)))
    if shuffled:
        seqs.reverse()
    t = pa.table({"seq": pa.array(seqs, pa.int64()),
                  "time_ms": pa.array([e[1] for e in events], pa.int64()),
                  "group_id": [e[0] for e in events], "member_id": ["m"] * len(events),
                  "event": ["heartbeat"] * len(events)})
    good, stats = validate(t)
    assert good.num_rows == len(events)
    rows = [(s, g, tm) for s, (g, tm) in zip(seqs, events)]
    assert stats.out_of_order == _out_of_order_by_hand(rows)


def test_validate_counts_bad_rows():
    t = pa.table({"time_ms": [5, 3, None, 7, 8], "group_id": ["g", "g", "g", "g", None],
                  "member_id": ["a", "a", "a", "a", "a"],
                  "event": ["heartbeat", "heartbeat", "join", "bogus", "sync"]})
    good, stats = validate(t)
    assert stats.rows_in == 5
    assert stats.malformed == 2 and stats.unknown_event == 1
    assert stats.out_of_order == 1 and good.num_rows == 2
    assert "session_timeout_ms" in stats.missing_columns
    assert stats.rows_ok + stats.malformed + stats.unknown_event == stats.rows_in


def test_validate_coerces_columns_of_another_type_value_by_value():
    """Columns a plain cast refuses are converted value by value: a value that does not
    convert is null (a null required value makes its row malformed); a protocol name
    given as a string is a list of one name."""
    t = pa.table({"time_ms": ["5", "x", "7"], "group_id": ["g", "g", "g"],
                  "member_id": [1, 2, 3], "event": ["join", "join", "join"],
                  "protocols": ["range", None, "cooperative-sticky"]})
    good, stats = validate(t)
    assert stats.malformed == 1 and stats.examples[0].startswith("malformed: ")
    assert good.column("time_ms").to_pylist() == [5, 7]
    assert good.column("member_id").to_pylist() == ["1", "3"]
    assert good.column("protocols").to_pylist() == [["range"], ["cooperative-sticky"]]


def test_shard_is_java_hashcode():
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE -> Kafka's abs gives 0
    assert shard_for("polygenelubricants") == 0
    assert shard_for("abc") == 96354 % 50        # "abc".hashCode() == 96354


def test_shard_array_hashes_each_distinct_group_and_rejects_a_null_one():
    from fastcoord.pipeline.replay import shard_array, split_by_shard
    groups = ["orders", "payments", "", "orders", "polygenelubricants", "payments"]
    got = shard_array(pa.chunked_array([groups[:2], groups[2:]]), 7)
    assert got.type == pa.int32()
    assert got.to_pylist() == [shard_for(g, 7) for g in groups]
    assert shard_array(pa.array([], pa.string())).to_pylist() == []
    with pytest.raises(TypeError, match="group_id must be a str"):
        shard_array(pa.array(["orders", None]))
    # split_by_shard: each shard's rows, in table order
    table = pa.table({"group_id": groups, "i": list(range(len(groups)))})
    parts = split_by_shard(table, 7)
    assert list(parts) == sorted({shard_for(g, 7) for g in groups})
    for s, part in parts.items():
        assert part.column("i").to_pylist() == [i for i, g in enumerate(groups)
                                                if shard_for(g, 7) == s]


@pytest.mark.parametrize("seed", [1, 2])
def test_the_replays_clock_shortcut_changes_no_table(monkeypatch, seed):
    """Before heartbeats and commits the replay moves only the clock when the timer is
    idle through (Timer.idle_through), and a join or sync at that same millisecond then
    schedules with the timer's lower levels not stepped: the tables equal those of a
    replay that steps the timer every time (the pure twin with idle_through refused)."""
    import fastcoord.core._pure.timer as wheel
    trace = generate(groups=20, members=8, duration_s=200, seed=seed)
    shortcut = replay_local(trace, impl="pure")
    monkeypatch.setattr(wheel.Timer, "idle_through", lambda self, now, min_delay: False)
    stepped = replay_local(trace, impl="pure")
    for name in shortcut:
        assert shortcut[name].equals(stepped[name]), name


def test_a_replay_collects_less_often_and_puts_the_thresholds_back(impl):
    """The cyclic GC's thresholds are raised while a shard runs (pipeline/_gc.py) and
    restored after, also when runs in two threads overlap."""
    import gc
    import threading

    from fastcoord.pipeline import _gc
    from fastcoord.pipeline.replay import ShardReplay

    trace = generate(groups=3, members=4, duration_s=60, seed=2)
    seen = []

    class Spy(ShardReplay):
        # (a subclass: compiled, ShardReplay is an extension type, whose methods stay)
        def _run(self, table, end_ms):
            seen.append(gc.get_threshold())
            return super()._run(table, end_ms)

    before = gc.get_threshold()
    tables = Spy(0, impl=impl).run(trace)
    assert seen == [_gc.THRESHOLDS] and gc.get_threshold() == before
    assert tables["responses"].num_rows == trace.num_rows    # the run's tables, passed on

    inside, release = threading.Event(), threading.Event()

    def first():
        with _gc.fewer_collections():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=first)
    t.start()
    assert inside.wait(10)
    with _gc.fewer_collections():                    # enters second, leaves last
        release.set()
        t.join(10)
        assert gc.get_threshold() == _gc.THRESHOLDS  # this run is still inside
    assert gc.get_threshold() == before


def _coordinators() -> int:
    import gc

    from fastcoord import GroupCoordinator
    return sum(isinstance(o, GroupCoordinator) for o in gc.get_objects())


def test_no_shards_coordinator_outlives_its_replay(impl):
    """A finished shard leaves its coordinator as cyclic garbage (pipeline/_gc.py):
    replay_shard_table (replay_local's) and the Spark task's replay (spark._replay_shard)
    collect it before they return, so none is left however many shards a process
    replays, and the thresholds are put back."""
    import gc

    from fastcoord.pipeline import spark
    from fastcoord.pipeline.replay import replay_shard_table, split_by_shard

    parts = split_by_shard(generate(groups=6, members=4, duration_s=60, seed=2))
    assert len(parts) > 1
    gc.collect()
    before, left = gc.get_threshold(), _coordinators()
    for s, sub in parts.items():
        tables = replay_shard_table(sub, s, impl=impl)
        assert tables["responses"].num_rows == sub.num_rows
        assert _coordinators() == left and gc.get_threshold() == before
        blobs = list(spark._replay_shard(sub, s, impl, None, 50))
        assert len(blobs) == len(tables) + 1                  # the tables and the runtime row
        assert _coordinators() == left and gc.get_threshold() == before


def _churn_trace(groups: int):
    """Groups that come and go, one after another: in each, a dynamic and a static
    member join and sync, heartbeat and commit; the static one then falls silent (its
    session expires) and the dynamic one leaves."""
    from fastcoord.pipeline.trace import from_rows
    join = dict(session_timeout_ms=10_000, protocol_type="consumer", protocols=["range"])
    rows = []
    for k in range(groups):
        g, t = f"churn-{k}", k * 5_000
        for m, inst in (("a", None), ("b", "i-b")):
            rows.append(dict(time_ms=t, group_id=g, member_id=m, instance_id=inst,
                             event="join", **join))
            if inst is None:
                rows.append(dict(time_ms=t, group_id=g, member_id=m, event="join", **join))
        for m, inst in (("a", None), ("b", "i-b")):
            rows.append(dict(time_ms=t + 3_001, group_id=g, member_id=m, instance_id=inst,
                             event="sync"))
        for beat in range(t + 6_000, t + 15_001, 3_000):
            for m, inst in (("a", None), ("b", "i-b")):
                rows.append(dict(time_ms=beat, group_id=g, member_id=m, instance_id=inst,
                                 event="heartbeat"))
            rows.append(dict(time_ms=beat, group_id=g, member_id="a", event="commit",
                             offsets=[dict(topic="t", partition=0, offset=beat)]))
        _hb_a = range(t + 18_000, t + 30_001, 3_000)
        rows += [dict(time_ms=b, group_id=g, member_id="a", event="heartbeat") for b in _hb_a]
        rows.append(dict(time_ms=t + 31_000, group_id=g, member_id="a", event="leave"))
    return from_rows(rows)


def test_a_long_shard_of_groups_that_come_and_go_makes_no_cyclic_garbage(impl):
    """What a run's higher thresholds hold back (pipeline/_gc.py) is what the run makes
    that only the collector frees: nothing. A shard of many groups that come and go
    (joins, syncs, commits, a session expiry and a leave in each) leaves no cyclic
    garbage when its run ends with the replay still held, so the run's memory is its
    live state. (A guard: it holds before the collection after a shard came too.)"""
    import gc

    from fastcoord.pipeline.replay import ShardReplay
    found = []

    class Spy(ShardReplay):
        def _run(self, table, end_ms):
            tables = super()._run(table, end_ms)
            found.append(gc.collect())
            return tables

    trace = _churn_trace(120)
    gc.collect()
    tables = Spy(0, impl=impl, num_shards=1).run(trace)
    assert found == [0]
    assert tables["expirations"].num_rows == 120                   # every b expired,
    assert tables["groups"].column("final_members").to_pylist() == [0] * 120  # all left
    assert tables["offsets"].num_rows == 120


def test_in_trace_order_sees_every_way_rows_can_be_out_of_order():
    from fastcoord.pipeline.replay import in_trace_order

    def table(times, seqs):
        return pa.table({"time_ms": pa.array(times, pa.int64()),
                         "seq": pa.array(seqs, pa.int64())})

    assert in_trace_order(table([], []))
    assert in_trace_order(table([5], [9]))
    assert in_trace_order(table([1, 2, 2, 3], [4, 0, 1, 2]))      # seq breaks time ties only
    assert in_trace_order(table([1, 1], [3, 3]))                  # a stable sort keeps these
    assert not in_trace_order(table([1, 3, 2], [0, 1, 2]))
    assert not in_trace_order(table([1, 2, 2], [0, 2, 1]))
    assert not in_trace_order(table([1, None], [0, 1]))
    assert not in_trace_order(table([1, 2], [None, 1]))
    chunked = pa.concat_tables([table([1, 2], [0, 1]), table([2], [0])])
    assert not in_trace_order(chunked)                            # across chunks too


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=12))
def test_in_trace_order_is_whether_sorting_would_change_nothing(rows):
    """Against its definition: the rows equal their stable sort by (time_ms, seq)."""
    from fastcoord.pipeline.replay import in_trace_order

    t = pa.table({"time_ms": pa.array([r[0] for r in rows], pa.int64()),
                  "seq": pa.array([r[1] for r in rows], pa.int64())})
    ordered = t.sort_by([("time_ms", "ascending"), ("seq", "ascending")])
    assert in_trace_order(t) == t.equals(ordered)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-1, 5), max_size=20))
def test_first_uses_are_where_the_running_maximum_grows_by_one(codes):
    """Against its definition (numpy's running maximum): None when it ever grows by
    more than one, else every position where it grows; int32 as int64 numbers."""
    import numpy as np

    from fastcoord.pipeline.replay import _first_occurrences, _first_uses

    for dtype in (np.int32, np.int64):
        a = np.array(codes, dtype)
        steps = np.diff(np.maximum.accumulate(a), prepend=-1) if len(a) else a
        grows = np.flatnonzero(steps > 0)
        got = _first_uses(a)
        if (steps > 1).any():
            assert got is None
        else:
            assert got is not None and got.tolist() == grows.tolist()
        assert _first_occurrences(a).tolist() == grows.tolist()


# Columns that meet every case of _protocol_pairs: names it joins (empty ones among
# them: a list of one joins to "", as an empty list would), and names that make it
# read the rows one by one (its separator, \x00, inside a name; a null name)
_JOINED_NAMES = st.sampled_from(["range", "roundrobin", "", "a", "b"])
_ANY_NAMES = st.one_of(_JOINED_NAMES, st.just("a\x00b"), st.none())


def _protocol_rows(names):
    return st.lists(st.one_of(st.none(), st.lists(names, max_size=3)), max_size=10)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_protocol_rows(_JOINED_NAMES), _protocol_rows(_ANY_NAMES)),
       st.integers(1, 3))
def test_protocol_pairs_are_each_rows_names_with_empty_metadata(rows, chunks):
    """Against its definition, on a column of one or several chunks: each row's names
    (["range"] for a null or empty list) as (name, b"") pairs, one list shared by the
    rows naming the same set; by either path (few_rows: the rows read as Python lists
    below that many, by Arrow calls from there on)."""
    from fastcoord.pipeline.replay import _protocol_pairs

    arrays = [pa.array(rows[i::chunks], pa.list_(pa.string())) for i in range(chunks)]
    column = pa.chunked_array(arrays, pa.list_(pa.string()))
    ordered = [r for a in arrays for r in a.to_pylist()]
    for few_rows in (None, 0):
        got = _protocol_pairs(column, few_rows)
        assert got == [[(p, b"") for p in (r or ["range"])] for r in ordered]
        shared = {}
        for r, pairs in zip(ordered, got):
            assert shared.setdefault(tuple(r or ["range"]), pairs) is pairs


def test_a_shuffled_trace_replays_as_the_sorted_one(impl):
    from fastcoord.pipeline.replay import ShardReplay

    trace = generate(groups=4, members=4, duration_s=90, seed=5)
    shuffled = trace.take(pa.array(list(reversed(range(trace.num_rows)))))
    want = ShardReplay(0, impl=impl).run(trace)
    got = ShardReplay(0, impl=impl).run(shuffled)
    for name in want:
        assert got[name].equals(want[name]), name


def test_trace_gen_command_writes_the_generated_trace_and_shows_progress(tmp_path, capsys):
    from fastcoord.cli import main
    from fastcoord.pipeline.trace import read_trace
    path = str(tmp_path / "t.parquet")
    assert main(["trace", "gen", path, "--groups", "4", "--members", "3",
                 "--duration-s", "40", "--seed", "6"]) == 0
    want = generate(groups=4, members=3, duration_s=40, seed=6)
    assert read_trace(path).equals(want)
    out, err = capsys.readouterr()
    assert f"{want.num_rows} events" in out
    assert "fastcoord trace gen: simulating" in err and "groups with session timeout" in err


def _pairs_numbered_by_first_appearance(groups, members):
    numbers = {}
    return [numbers.setdefault(pair, len(numbers)) for pair in zip(groups, members)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", "c", ""])),
                max_size=40),
       st.booleans())
def test_a_rows_member_index_numbers_its_group_member_pairs_by_first_appearance(rows, shared):
    """The replay's member index: each (group, member id) pair numbered in order of first
    appearance, both where every member id names one group's member (the ids' own
    numbers, the shortcut) and where an id appears in several groups (pairs numbered
    afresh)."""
    import numpy as np

    from fastcoord.pipeline.replay import _dense_codes, _pair_codes
    groups = [g for g, _ in rows]
    # shared: ids as drawn (one may name members of several groups); else made unique
    members = [m if shared else f"{g}/{m}" for g, m in rows]
    got = _pair_codes(_dense_codes(pa.array(groups, pa.int64())),
                      _dense_codes(pa.array(members, pa.string())))
    assert isinstance(got, np.ndarray)
    assert got.tolist() == _pairs_numbered_by_first_appearance(groups, members)


def _dictionary_pieces(values, cuts, how):
    """`values` as a chunked dictionary column of pieces cut at `cuts`, each piece's
    dictionary made `how`: "encoded" (dictionary_encode: values in order of first
    appearance, as a packed trace's), "reversed" (the same values, the other way round),
    "unused" (an extra value no row uses) or "repeated" (a value twice)."""
    chunks = []
    bounds = [0] + sorted(set(cuts)) + [len(values)]
    for lo, hi in zip(bounds, bounds[1:]):
        piece = pa.array(values[lo:hi], pa.string()).dictionary_encode()
        dictionary = piece.dictionary.to_pylist()
        if how == "reversed":
            dictionary = dictionary[::-1]
        elif how == "unused":
            dictionary = dictionary + ["never used"]
        elif how == "repeated":
            dictionary = dictionary + dictionary[:1]
        at = {v: i for i, v in enumerate(dictionary)}     # (the first of a repeated value)
        if how == "repeated" and dictionary:
            # a row of the repeated value points at its second copy
            at = dict(at, **{dictionary[0]: len(dictionary) - 1})
        indices = pa.array([None if v is None else at[v] for v in values[lo:hi]], pa.int32())
        chunks.append(pa.DictionaryArray.from_arrays(indices, pa.array(dictionary, pa.string())))
    return pa.chunked_array(chunks, pa.dictionary(pa.int32(), pa.string()))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "d", "", None]), max_size=40),
       st.lists(st.integers(0, 40), max_size=4),
       st.sampled_from(["encoded", "reversed", "unused", "repeated"]))
def test_a_dictionary_encoded_column_is_numbered_as_the_same_column_plain(values, cuts, how):
    """A packed trace's group and member ids (and events) arrive dictionary-encoded, a
    dictionary per piece: the replay's numbering of them (values in order of first
    appearance, null after them) and its event codes are those of the plain strings,
    whatever the pieces' dictionaries (in order, reversed, with a value unused or one
    repeated)."""
    from fastcoord.pipeline.replay import _encoded, _event_kinds
    cuts = [c for c in cuts if c <= len(values)]
    column = _dictionary_pieces(values, cuts, how)
    want_distinct, want_codes = _encoded(pa.array(values, pa.string()))
    got_distinct, got_codes = _encoded(column)
    assert got_distinct.to_pylist() == want_distinct.to_pylist()
    assert got_codes.tolist() == want_codes.tolist()
    events = ["join" if v == "a" else "sync" if v == "b" else v for v in values]
    assert list(_event_kinds(_dictionary_pieces(events, cuts, how))) == \
        list(_event_kinds(pa.array(events, pa.string())))


def test_event_kinds_name_each_event_and_set_aside_what_is_none_of_them():
    # (the event codes are C constants in the compiled module: the names' codes come
    # from its table of them, and what is none of them shares one code outside it)
    from fastcoord.pipeline.replay import _EVENT_CODES, _event_kinds
    names = ["heartbeat", "join", None, "sync", "Join", "leave", "commit", "", "joins"]
    for column in (pa.array(names, pa.string()), pa.array(names, pa.large_string()),
                   pa.chunked_array([names[:4], names[4:]], pa.string()),
                   pa.array(names, pa.string()).dictionary_encode()):
        got = list(_event_kinds(column))
        assert [got[i] for i in (0, 1, 3, 5, 6)] == [
            _EVENT_CODES[e] for e in ("heartbeat", "join", "sync", "leave", "commit")]
        others = {got[i] for i in (2, 4, 7, 8)}
        assert len(others) == 1 and not others & set(_EVENT_CODES.values())
    assert len(_EVENT_CODES) == 5 and list(_event_kinds(pa.array([], pa.string()))) == []


def _commit(t, member, offsets, group="g"):
    return dict(time_ms=t, group_id=group, member_id=member, event="commit",
                offsets=[{"topic": tp, "partition": p, "offset": o} for tp, p, o in offsets])


def test_offsets_are_the_last_ones_each_accepted_commit_named(impl):
    """The offsets table: per (group, topic, partition) the last offset of a commit the
    replay's coordinator accepted, and that commit's time; a refused commit (from a
    member the group does not have) changes nothing, and within one commit its last
    entry for a partition wins."""
    from helpers.traces import _hb, _start
    from fastcoord.pipeline.trace import from_rows
    rows = []
    _start(rows, "g", "ab")
    _hb(rows, "g", "a", range(6000, 12001, 3000))
    _hb(rows, "g", "b", range(6000, 12001, 3000))
    rows += [_commit(6500, "a", [("t", 0, 10), ("t", 1, 20)]),
             _commit(6600, "b", [("t", 1, 25), ("u", 0, 1)]),
             _commit(7000, "z", [("t", 0, 999)]),                 # no such member
             _commit(9500, "a", [("t", 0, 30), ("t", 0, 31)]),
             dict(time_ms=9550, group_id="g", member_id="a", event="commit"),  # names none
             _commit(9600, "z", [("t", 1, 998)])]
    out = replay_local(from_rows(sorted(rows, key=lambda r: r["time_ms"])), impl=impl)
    answers = {(r["member_id"], r["time_ms"]): r["error"]
               for r in out["responses"].to_pylist() if r["event"] == "commit"}
    assert answers[("a", 9500)] == 0 and answers[("z", 7000)] != 0
    got = [(r["group_id"], r["topic"], r["partition"], r["offset"], r["time_ms"])
           for r in out["offsets"].to_pylist()]
    assert got == [("g", "t", 0, 31, 9500), ("g", "t", 1, 25, 6600), ("g", "u", 0, 1, 6600)]
    assert set(out["offsets"].column("shard").to_pylist()) == {shard_for("g", 50)}


def test_a_null_entry_or_an_entry_with_a_null_field_commits_nothing():
    """Of an accepted commit's entries, a null one and one with a null topic, partition
    or offset commit nothing; the others of the same commit count as usual."""
    from helpers.traces import _hb, _start
    from fastcoord.pipeline.trace import from_rows
    rows = []
    _start(rows, "g", "a")
    _hb(rows, "g", "a", range(6000, 9001, 3000))
    commit = _commit(6500, "a", [("t", 0, 10)])
    commit["offsets"] += [None, {"topic": None, "partition": 1, "offset": 5},
                          {"topic": "t", "partition": None, "offset": 6},
                          {"topic": "t", "partition": 2, "offset": None},
                          {"topic": "u", "partition": 0, "offset": 7}]
    rows.append(commit)
    out = replay_local(from_rows(sorted(rows, key=lambda r: r["time_ms"])))
    got = [(r["topic"], r["partition"], r["offset"]) for r in out["offsets"].to_pylist()]
    assert got == [("t", 0, 10), ("u", 0, 7)]


def test_a_rebalance_open_when_the_trace_ends_has_an_unfinished_row(impl):
    """A rebalance the trace ends inside (the group still waiting out its initial delay)
    gets a row with end and duration -1, as the replay's tables document; the groups'
    totals count finished rebalances only."""
    from helpers.traces import J
    from fastcoord.pipeline.trace import from_rows
    rows = [dict(time_ms=0, group_id="g", member_id="a", event="join", **J),
            dict(time_ms=0, group_id="g", member_id="a", event="join", **J),
            dict(time_ms=1000, group_id="g", member_id="b", event="join", **J),
            dict(time_ms=1000, group_id="g", member_id="b", event="join", **J)]
    out = replay_local(from_rows(rows), impl=impl)
    assert _rebalances(out) == [(0, -1, "member-join", 0, 2, 0)]
    assert out["rebalances"].column("duration_ms").to_pylist() == [-1]
    [group] = out["groups"].to_pylist()
    assert (group["rebalances"], group["rebalancing_ms"]) == (0, 0)


def test_an_old_trace_without_offsets_replays_with_no_offsets():
    """A trace table made before the offsets column (none of its commits name
    partitions) replays as before, with an empty offsets table; validate reports the
    column as an optional one filled with its default, not as an error."""
    from fastcoord.pipeline.trace import missing_note
    from helpers.traces import leave_trace
    old = leave_trace().drop_columns(["offsets"])
    out = replay_local(old)
    assert out["offsets"].num_rows == 0 and out["responses"].num_rows == old.num_rows
    _, stats = validate(old)
    assert stats.missing_columns == ["offsets"]
    note = missing_note(stats.missing_columns)
    assert note.startswith("optional columns") and "offsets table is empty" in note


def test_offsets_are_the_same_by_either_sort(monkeypatch):
    """committed_offsets sorts the entries by one int64 key while the (group, topic)
    numbers leave it room, else by a lexsort of two keys: the same table either way,
    on a trace with several topics, negative partitions and repeated keys."""
    import numpy as np
    import pyarrow as pa

    from fastcoord.pipeline import replay
    trace = generate(groups=6, members=4, duration_s=120, seed=5)
    offsets = trace.column("offsets").to_pylist()
    for i, entries in enumerate(offsets):
        if entries:
            offsets[i] = entries + [{"topic": f"t{i % 3}", "partition": (i % 5) - 2,
                                     "offset": i}]
    trace = trace.set_column(trace.schema.get_field_index("offsets"), "offsets",
                             pa.array(offsets, trace.schema.field("offsets").type))
    rows = replay.with_trace_columns(trace)
    kinds = np.frombuffer(replay._event_kinds(rows.column("event")), np.uint8)
    gids, groups = replay._encoded(rows.column("group_id"))
    errors = np.zeros(rows.num_rows, np.int32)
    errors[::7] = 22                                 # some commits refused
    one_key = replay.committed_offsets(rows, kinds, groups, gids, errors, 0)
    monkeypatch.setattr(replay, "ONE_KEY_PAIRS", 0)
    two_keys = replay.committed_offsets(rows, kinds, groups, gids, errors, 0)
    assert one_key.to_pylist() == two_keys.to_pylist()
    got = {(r["group_id"], r["topic"], r["partition"]): r["offset"] for r in one_key.to_pylist()}
    want = {}
    for row, error in zip(rows.to_pylist(), errors):
        if row["event"] == "commit" and error == 0:
            for e in row["offsets"]:
                want[(row["group_id"], e["topic"], e["partition"])] = e["offset"]
    assert got == want and any(p < 0 for _, _, p in got)


_SORT_SCHEMA = pa.schema([("shard", pa.int32()), ("seq", pa.int64()), ("name", pa.string())])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.integers(-3, 3),
                          st.sampled_from(["a", "b", None])), max_size=12),
       st.booleans())
def test_sort_canonical_is_the_sort_by_every_column(rows, presorted):
    """sort_canonical (which leaves a table already strictly ordered by its integer keys
    as it is) gives the sort by the keys then every other column, nulls last: rows in
    any order, ties on the keys, null keys; as they come or already in key order."""
    from fastcoord.pipeline.replay import rows_table, sort_canonical

    if presorted:
        rows = sorted(rows, key=lambda r: (r[0] is None, r[0] or 0, r[1]))
    table = rows_table(rows, _SORT_SCHEMA)
    keys = ["shard", "seq"]
    want = table.sort_by([(k, "ascending") for k in keys + ["name"]])
    got = sort_canonical(table, _SORT_SCHEMA, keys)
    assert got.equals(want)
    assert got.schema == _SORT_SCHEMA

"""What-if: behaviour derived from hand-made traces, closed-loop results computed by
hand, native == pure, Spark == single process, and the CLI end to end."""
import json
import os

import pyarrow.compute as pc
import pytest

pytest.importorskip("pyarrow")
from fastcoord.cli import main
from fastcoord.pipeline.gen import generate
from fastcoord.pipeline.duration import parse_duration
from fastcoord.pipeline.trace import from_rows, write_trace
from fastcoord.pipeline.whatif import (
    WhatIfConfig, derive_behaviour, make_grid, nearest_rank, simulate_shard, whatif_local)

# max.poll.interval.ms far away unless a test wants a poll timeout
J = dict(session_timeout_ms=10_000, rebalance_timeout_ms=300_000, protocol_type="consumer",
         protocols=["range"])


def _start(rows, members, static=False, group="g"):
    for m in members:
        inst = f"i-{m}" if static else None
        rows.append(dict(time_ms=0, group_id=group, member_id=m, instance_id=inst, event="join",
                         client_id=f"client-{m}", **J))
        rows.append(dict(time_ms=3000, group_id=group, member_id=m, instance_id=inst,
                         event="sync", client_id=f"client-{m}"))


def _hb(rows, member, times, inst=None, group="g", client=None):
    rows += [dict(time_ms=t, group_id=group, member_id=member, instance_id=inst,
                  event="heartbeat", client_id=client or f"client-{member[0]}") for t in times]


def gc_pause_trace():
    """a pauses 20 s (no contact from 12000 to 32000); b heartbeats throughout."""
    rows = []
    _start(rows, "ab")
    _hb(rows, "a", list(range(6000, 12001, 3000)) + list(range(32000, 60001, 3000)))
    _hb(rows, "b", range(6000, 60001, 3000))
    return from_rows(rows)


def crash_trace():
    """b's last heartbeat is at 12000, its last contact a commit at 13500; then nothing."""
    rows = []
    _start(rows, "ab")
    _hb(rows, "a", range(6000, 60001, 3000))
    _hb(rows, "b", range(6000, 12001, 3000))
    rows.append(dict(time_ms=13500, group_id="g", member_id="b", event="commit",
                     client_id="client-b"))
    return from_rows(rows)


def rolling_restart_trace():
    """Three static members restarted one after the other: each stops after its heartbeat
    at 18000 + 15000k and its new incarnation (same instance id) joins 5 s later, under
    the 10 s session."""
    rows = []
    _start(rows, "abc", static=True)
    for k, m in enumerate("abc"):
        stop = 18000 + 15000 * k
        _hb(rows, m, range(6000, stop + 1, 3000), inst=f"i-{m}")
        m2 = m + "2"
        rows.append(dict(time_ms=stop + 5000, group_id="g", member_id=m2, instance_id=f"i-{m}",
                         event="join", client_id=f"client-{m}", **J))
        rows.append(dict(time_ms=stop + 5001, group_id="g", member_id=m2, instance_id=f"i-{m}",
                         event="sync", client_id=f"client-{m}"))
        _hb(rows, m2, range(stop + 8000, 90001, 3000), inst=f"i-{m}")
    return from_rows(rows)


def _sim(trace, cfg, impl, end_ms=None):
    end = end_ms or pc.max(trace.column("time_ms")).as_py()
    return simulate_shard(trace, cfg, end_ms=end, impl=impl)


def _rebalances(out):
    return [(r["start_ms"], r["end_ms"], r["cause"], r["members_before"], r["members_after"])
            for r in out["rebalances"].to_pylist()]


def _removals(out):
    return [(r["slot"], r["time_ms"], r["kind"], r["reason"], r["latency_ms"])
            for r in out["removals"].to_pylist()]


# -- parsing and behaviour ------------------------------------------------------------------------

def test_parse_duration():
    assert [parse_duration(x) for x in ("10s", "500ms", "2m", "1500ms", "1.5s")] == \
        [10_000, 500, 120_000, 1500, 1500]
    for bad in ("10x", "", "s", "-5s", "0s", "1.5ms", "1500", "5"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    with pytest.raises(ValueError):
        WhatIfConfig(10_000, "maybe")
    assert WhatIfConfig(30_000, "on", 60_000).label == "session=30s static=on rebalance=60s"
    assert nearest_rank([5, 1, 3, 2, 4], 50) == 3
    assert nearest_rank([5, 1, 3, 2, 4], 99) == 5
    assert nearest_rank([], 50) == -1


def test_behaviour_gc_pause_and_crash():
    a, b = derive_behaviour(gc_pause_trace())["g"]
    assert (a.member, a.heartbeat_ms, a.pauses, a.end, a.rebalance_timeout_ms) == \
        ("a", 3000, ((12000, 32000),), "end", 300_000)
    assert (b.pauses, b.end) == ((), "end")
    _, b = derive_behaviour(crash_trace())["g"]
    # the crash is the last contact (the commit), not the last heartbeat
    assert (b.end, b.stop_ms, b.last_ms) == ("crash", 13500, 13500)


def test_behaviour_restarts_and_slots():
    incs = derive_behaviour(rolling_restart_trace())["g"]
    got = [(i.member, i.slot, i.start_ms, i.end, i.stop_ms) for i in incs]
    assert got == [("a", "i-a", 0, "restart", 18000), ("b", "i-b", 0, "restart", 33000),
                   ("c", "i-c", 0, "restart", 48000), ("a2", "i-a", 23000, "end", -1),
                   ("b2", "i-b", 38000, "end", -1), ("c2", "i-c", 53000, "end", -1)]
    # dynamic members: a crashed process restarted under the same client id is one slot;
    # a first join with member "" is counted from its time
    rows = [dict(time_ms=0, group_id="g", member_id="", event="join", client_id="c1", **J),
            dict(time_ms=5, group_id="g", member_id="x1", event="join", client_id="c1", **J)]
    _hb(rows, "x1", range(3000, 12001, 3000), client="c1")
    rows.append(dict(time_ms=30000, group_id="g", member_id="x2", event="join", client_id="c1",
                     **J))
    _hb(rows, "x2", range(33000, 60001, 3000), client="c1")
    incs = derive_behaviour(from_rows(rows))["g"]
    assert [(i.member, i.slot, i.start_ms, i.end) for i in incs] == \
        [("x1", "x1", 0, "crash"), ("x2", "x1", 30000, "end")]


# -- closed loop, computed by hand ---------------------------------------------------------------------

def test_gc_pause_false_expiration(impl):
    trace = gc_pause_trace()
    out = _sim(trace, WhatIfConfig(10_000, "off"), impl)
    # both join at 0; the initial delay (3 s) restarts once for the second new member:
    # the group forms at 6000 and heartbeats at 9000, 12000. a's pause starts after its
    # 12000 heartbeat: the coordinator expires it at 12000 + 10 s while it is alive
    assert _removals(out) == [("a", 22000, "false", "session", -1)]
    # b learns at its 24000 heartbeat (rejoins alone, done at once); a comes back at 32000,
    # is told UNKNOWN_MEMBER_ID, joins as a new member; b rejoins at its 33000 heartbeat
    assert _rebalances(out) == [(0, 6000, "initial", 0, 2), (22000, 24000, "session-timeout", 2, 1),
                                (32000, 33000, "join", 1, 2)]
    g = out["groups"].to_pylist()[0]
    assert (g["false_expirations"], g["rebalances"], g["rebalancing_ms"]) == (1, 3, 9000)
    # 30 s of session outlives the 20 s pause: nothing happens
    out = _sim(trace, WhatIfConfig(30_000, "off"), impl)
    assert _removals(out) == []
    assert _rebalances(out) == [(0, 6000, "initial", 0, 2)]


def test_poll_timeout_leaves_and_rejoins(impl):
    """max.poll.interval.ms 15 s < the 20 s pause < the 30 s session: the consumer is not
    expired, but when it wakes at 32000 its poll timer has run out: LeaveGroup, rejoin."""
    out = _sim(gc_pause_trace(), WhatIfConfig(30_000, "off", rebalance_timeout_ms=15_000), impl)
    g = out["groups"].to_pylist()[0]
    assert (g["poll_timeouts"], g["leaves"], g["false_expirations"]) == (1, 1, 0)
    # the leave opens a rebalance that a's new join (same ms) and b's rejoin at its
    # 33000 heartbeat complete
    assert _rebalances(out) == [(0, 6000, "initial", 0, 2), (32000, 33000, "leave", 2, 2)]
    # static: no LeaveGroup; the rejoin with its instance id replaces the old member id
    # without a rebalance
    out = _sim(gc_pause_trace(), WhatIfConfig(30_000, "on", rebalance_timeout_ms=15_000), impl)
    g = out["groups"].to_pylist()[0]
    assert (g["poll_timeouts"], g["leaves"], g["rebalances"]) == (1, 0, 1)
    assert _removals(out) == []


def test_crash_detection_latency(impl):
    trace = crash_trace()
    # b's last simulated heartbeat is at 12000 (the group formed at 6000); it dies after
    # its 13500 commit; the coordinator drops it at 12000 + session
    for session, detected in ((10_000, 22000), (30_000, 42000)):
        out = _sim(trace, WhatIfConfig(session, "off"), impl)
        assert _removals(out) == [("b", detected, "crash", "session", detected - 13500)]
        g = out["groups"].to_pylist()[0]
        assert (g["crashes"], g["crashes_detected"], g["false_expirations"]) == (1, 1, 0)


def test_static_rolling_restart(impl):
    trace = rolling_restart_trace()
    on = _sim(trace, WhatIfConfig(10_000, "on"), impl)
    # each restart rejoins with its instance id 5 s after the stop: the coordinator swaps
    # the member id in place, the group never leaves Stable
    assert _rebalances(on) == [(0, 6000, "initial", 0, 3)]
    assert [(s, t, k, r) for s, t, k, r, _ in _removals(on)] == [
        ("i-a", 23000, "stopped", "replaced"), ("i-b", 38000, "stopped", "replaced"),
        ("i-c", 53000, "stopped", "replaced")]
    off = _sim(trace, WhatIfConfig(10_000, "off"), impl)
    # dynamic: each stop is a LeaveGroup right after the 18000 (33000, 48000) heartbeat, a
    # rebalance until the others' next heartbeat 3 s later; each restart 5 s after the
    # stop is a new member, a rebalance until the last of the others' next heartbeats.
    # Each heartbeats in its phase in the trace: the first members at 6000 + 3000k, a
    # restarted one from its first heartbeat, 3 s after its join (a2: 26000, 29000, ...;
    # b2: 41000, ...): a2's and b2's fall in the ms of the next restart's join, just
    # before it, and learn of it 3 s later; c's leave at 48000 they learn of at 50000
    assert _rebalances(off) == [
        (0, 6000, "initial", 0, 3),
        (18000, 21000, "leave", 3, 2), (23000, 24000, "join", 2, 3),
        (33000, 36000, "leave", 3, 2), (38000, 41000, "join", 2, 3),
        (48000, 50000, "leave", 3, 2), (53000, 56000, "join", 2, 3)]
    assert _removals(off) == []


def test_summary_of_a_grid(impl):
    configs = make_grid([10_000, 30_000], ["off"])
    res = whatif_local(gc_pause_trace(), configs, impl=impl)
    s = res["summary"].to_pylist()
    assert [r["label"] for r in s] == ["session=10s static=off", "session=30s static=off"]
    # the trace spans 0..60000; each simulation runs one session past its end, but every
    # rate is over the trace's span, the same for both (not 70 s and 90 s)
    assert s[0]["sim_hours"] == pytest.approx(70_000 / 3_600_000)
    assert s[1]["sim_hours"] == pytest.approx(90_000 / 3_600_000)
    assert s[0]["hours"] == s[1]["hours"] == pytest.approx(60_000 / 3_600_000)
    assert (s[0]["rebalances"], s[0]["initial_rebalances"], s[0]["rebalancing_ms"]) == (2, 1, 3000)
    assert s[0]["rebalances_per_hour"] == pytest.approx(2 / (60_000 / 3_600_000))
    assert s[0]["rebalancing_fraction"] == pytest.approx(3000 / 60_000)
    assert s[0]["rebalance_mean_ms"] == 1500.0 and s[0]["rebalance_p99_ms"] == 2000
    assert (s[0]["false_expirations"], s[1]["false_expirations"]) == (1, 0)
    assert (s[1]["rebalances"], s[1]["rebalancing_ms"], s[1]["rebalance_p99_ms"]) == (0, 0, -1)
    crash = whatif_local(crash_trace(), configs, impl=impl)["summary"].to_pylist()
    assert [(r["crashes"], r["crash_detect_p50_ms"], r["crash_detect_p99_ms"]) for r in crash] == \
        [(1, 8500, 8500), (1, 28500, 28500)]
    assert [(r["crash_detect_mean_ms"], r["crashes_undetected"]) for r in crash] == \
        [(8500.0, 0), (28500.0, 0)]


def test_baseline_runs_the_trace_settings(impl):
    """session=trace static=trace: each consumer with the session timeout its joins
    carried and its own instance id. The gc-pause trace's joins carry 10 s and no
    instance id: the baseline is session=10s static=off, row for row."""
    from fastcoord.pipeline.whatif import BASELINE
    assert BASELINE.is_baseline and BASELINE.label == "session=trace static=trace"
    assert not WhatIfConfig(10_000, "trace").is_baseline
    res = whatif_local(gc_pause_trace(), [BASELINE, WhatIfConfig(10_000, "off")], impl=impl)
    for name in ("rebalances", "removals", "groups"):
        rows = [dict(r, config=0, member_id=None) for r in res[name].to_pylist()]
        assert rows[:len(rows) // 2] == rows[len(rows) // 2:], name
    base, fixed = res["summary"].to_pylist()
    assert base["session_timeout_ms"] == -1 and fixed["session_timeout_ms"] == 10_000
    assert (base["false_expirations"], base["sim_hours"]) == (1, fixed["sim_hours"])
    # groups whose joins carried different session timeouts: each runs with its own, and
    # the groups table says which (the 30 s group outlives the 20 s pause)
    rows = []
    for group, session in (("g10", 10_000), ("g30", 30_000)):
        part = [dict(r, group_id=group) for r in gc_pause_trace().to_pylist()]
        rows += [dict(r, session_timeout_ms=session) if r["event"] == "join" else r
                 for r in part]
    res = whatif_local(from_rows(rows), [BASELINE], impl=impl)
    got = [(g["group_id"], g["session_timeout_ms"], g["false_expirations"], g["static_incarnations"])
           for g in res["groups"].to_pylist()]
    assert got == [("g10", 10_000, 1, 0), ("g30", 30_000, 0, 0)]
    # the simulation runs to the longest session past the end
    assert res["summary"].to_pylist()[0]["sim_hours"] == pytest.approx(90_000 / 3_600_000)


# -- synthetic traces: twins, chunking, Spark ---------------------------------------------------------

@pytest.fixture(scope="module")
def synthetic():
    return generate(groups=12, members=6, duration_s=240, seed=5, gc_prob=0.1,
                    crash_per_hour=20, leave_per_hour=5)


GRID = make_grid([10_000, 30_000], ["on", "off"]) + [WhatIfConfig(None, "trace")]


@pytest.fixture(scope="module")
def local_pure(synthetic):
    return whatif_local(synthetic, GRID, impl="pure")


def test_native_equals_pure(synthetic, local_pure):
    import fastcoord
    if not fastcoord.NATIVE_AVAILABLE:
        pytest.skip("native core not built")
    native = whatif_local(synthetic, GRID, impl="native")
    for name, t in local_pure.items():
        assert native[name].to_pylist() == t.to_pylist(), name
    s = local_pure["summary"].to_pylist()
    # the trace has crashes, GC pauses and restarts: the grid's points differ
    assert all(r["crashes"] > 0 for r in s)
    assert len({r["rebalances"] for r in s}) > 1


def test_results_do_not_depend_on_chunking(synthetic, local_pure):
    """All groups on one coordinator give the same per-group results as one coordinator
    per shard: the simulation steps time exactly to every deadline of the coordinator."""
    one = whatif_local(synthetic, GRID, impl="pure", num_shards=1)
    for name in ("rebalances", "removals", "groups"):
        drop = [c for c in ("shard", "member_id") if c in one[name].column_names]
        assert one[name].drop_columns(drop).to_pylist() == \
            local_pure[name].drop_columns(drop).to_pylist(), name


def test_spark_equals_local(spark, tmp_path, synthetic, local_pure, caplog):  # noqa: F811
    from fastcoord.pipeline.whatif import whatif_spark
    path = str(tmp_path / "t.parquet")
    write_trace(synthetic, path)
    caplog.set_level("INFO", logger="fastcoord.pipeline")
    got = whatif_spark(spark, path, GRID, impl="pure")
    # 4 x 2 cores, fewer than the 50 shards: each task all the configurations of its shards
    assert "8 tasks by shard (_shard_task_fn." in caplog.text
    for name, t in local_pure.items():
        assert got[name].to_pylist() == t.to_pylist(), name
    assert len(set(got["groups"].column("shard").to_pylist())) > 2
    # with fewer shards than tasks (4 x 2 cores), the pieces go once per configuration
    # to (configuration, shard) tasks instead of once to shard tasks: the same rows
    caplog.clear()
    got = whatif_spark(spark, path, GRID, impl="pure", num_shards=4)
    assert "8 tasks by configuration x shard (_task_fn." in caplog.text
    for name, t in whatif_local(synthetic, GRID, impl="pure", num_shards=4).items():
        assert got[name].to_pylist() == t.to_pylist(), name


# -- the command ----------------------------------------------------------------------------------------

def test_cli_whatif_local(tmp_path, capsys):
    path = str(tmp_path / "t.parquet")
    write_trace(crash_trace(), path)
    out = str(tmp_path / "w")
    assert main(["whatif", path, "--session-timeout", "10s,30000ms", "--static", "off,on",
                 "--out", out, "--master", "none", "--impl", "pure"]) == 0
    cap = capsys.readouterr()
    # the grid has no baseline: the settings the trace ran with come last
    assert "5 configurations" in cap.out and "session=30s static=on" in cap.out
    assert "whatif (configuration x shard)" in cap.err        # the progress bar
    with open(os.path.join(out, "summary.json")) as f:
        doc = json.load(f)
    assert [r["label"] for r in doc["summary"]] == [
        "session=10s static=off", "session=10s static=on", "session=30s static=off",
        "session=30s static=on", "session=trace static=trace"]
    # b never comes back: static or not, the session timeout finds it (the trace's 10 s)
    assert [r["crash_detect_p50_ms"] for r in doc["summary"]] == [8500, 8500, 28500, 28500,
                                                                  8500]
    # asked for, the baseline is not added again; --no-baseline: only the grid
    for argv, labels in ((["--session-timeout", "trace,30s", "--static", "trace"],
                          ["session=trace static=trace", "session=30s static=trace"]),
                         (["--session-timeout", "30s", "--static", "on", "--no-baseline"],
                          ["session=30s static=on"])):
        assert main(["whatif", path, "--out", out, "--master", "none", "--impl", "pure"]
                    + argv) == 0
        with open(os.path.join(out, "summary.json")) as f:
            assert [r["label"] for r in json.load(f)["summary"]] == labels
    import pyarrow.parquet as pq
    for name in ("summary", "rebalances", "removals", "groups"):
        assert pq.read_table(os.path.join(out, f"{name}.parquet")).num_rows > 0
    assert os.path.isfile(os.path.join(out, "ingest.json"))


def test_cli_whatif_spark(spark, tmp_path, capsys):  # noqa: F811
    path = str(tmp_path / "t.parquet")
    write_trace(gc_pause_trace(), path)
    out = str(tmp_path / "w")
    assert main(["whatif", path, "--session-timeout", "10s,30s", "--static", "off",
                 "--out", out, "--master", "local[2]", "--impl", "pure"]) == 0
    with open(os.path.join(out, "summary.json")) as f:
        doc = json.load(f)
    # the baseline added last: the trace's own 10 s session, run on Spark's tasks as well
    assert [r["false_expirations"] for r in doc["summary"]] == [1, 0, 1]
    # the shared session was running before: the command must not have stopped it
    assert spark.range(3).count() == 3


@pytest.mark.parametrize("argv, message", [
    (["--session-timeout", "10x"], "not a duration"),
    (["--session-timeout", "10s,10s"], "repeated value"),
    (["--session-timeout", "trace,10s,trace"], "repeated value"),
    (["--static", "yes"], "on, off, trace"),
    (["--rebalance-timeout", "0s"], "positive"),
    (["--session-timeout", "5"], "needs a unit"),
])
def test_cli_bad_arguments(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        main(["whatif", "t.parquet", "--out", str(tmp_path)] + argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command", ["replay", "whatif"])
def test_cli_trace_that_does_not_read(tmp_path, capsys, command):
    """A missing trace, or a file that is not Parquet: a clear error, exit 2, and no
    output directory made (nothing is started)."""
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    for path, reason in ((str(tmp_path / "none.parquet"), "none.parquet"),
                         (str(bad), "magic bytes")):
        out = tmp_path / f"out-{command}"
        assert main([command, path, "--out", str(out), "--master", "none"]) == 2
        err = capsys.readouterr().err
        assert f"fastcoord {command}: cannot read the trace {path}" in err and reason in err
        assert not out.exists()


def test_spark_task_layout():
    from fastcoord.pipeline.whatif import spark_task_layout
    assert spark_task_layout(6, 50, 2) == (8, "shard")             # the benchmark's case
    assert spark_task_layout(6, 8, 2) == (8, "shard")              # as many tasks as shards
    assert spark_task_layout(6, 4, 2) == (8, "configuration x shard")
    assert spark_task_layout(6, 50, 64) == (256, "configuration x shard")   # a big cluster
    assert spark_task_layout(1, 1, 2) == (1, "shard")


def test_no_simulations_coordinator_outlives_it(impl):
    """A finished simulation leaves its coordinator as cyclic garbage, as a replayed
    shard does (pipeline/_gc.py): simulate_shard and simulate_configs (what-if's
    single-process and Spark paths) collect it before they hand the tables over, and
    the thresholds are put back."""
    import gc

    from fastcoord import GroupCoordinator
    from fastcoord.pipeline.whatif import simulate_configs

    def coordinators():
        return sum(isinstance(o, GroupCoordinator) for o in gc.get_objects())

    trace = generate(groups=3, members=4, duration_s=60, seed=2)
    end = pc.max(trace.column("time_ms")).as_py()
    configs = [WhatIfConfig(10_000), WhatIfConfig(30_000)]
    gc.collect()
    before, left = gc.get_threshold(), coordinators()
    assert simulate_shard(trace, configs[0], end_ms=end, impl=impl)["groups"].num_rows == 3
    assert coordinators() == left and gc.get_threshold() == before
    for config_id, tables in simulate_configs(trace, configs, shard=0, end_ms=end, impl=impl):
        assert tables["groups"].num_rows == 3
        assert coordinators() == left and gc.get_threshold() == before

"""The Spark pipeline on a 10-million-event synthetic trace (100k members in 10k groups).

- replay stage, one core: every shard's replay (`ShardReplay.run`) in turn in this
  process (pinned to one CPU), the partitioning done beforehand: events/s per core;
  also with every heartbeat and commit by the general path (the clock stepped in
  Python, then a heartbeat as a HeartbeatRun of one, a commit by commit_offsets), for
  comparison.
- stage scaling: the same stage as a Spark job (`replay_trace_file`, run to completion
  by a no-op write: the trace's row groups read and validated by the Python workers,
  shard mapping, shuffle, replay, the results encoded as Arrow IPC blobs for the sink,
  where the end-to-end case's tasks write Parquet) on local[1] and local[2], session
  start excluded; with the cores the machine kept busy meanwhile (JVM included) and
  the events per busy core-second; and, from Spark's event log, the events per
  executor core-second of the replay stage itself (the stage after the shuffle: its
  tasks' summed run time, shuffle read, replay and result encoding included), the
  figure the issue's target names. Three rounds (jobs) in one session per core count,
  each figure their median (every round's replay-stage seconds recorded too): one
  round of a shared VM's noisy minute was what this case reported before.
- end to end: `fastcoord replay TRACE --out DIR --master local[2]` as a user runs it
  (JVM start; the trace read and validated by the tasks, replayed, written as Parquet
  by them; the row counts are read from the files written, only the runtime rows and
  ingest counts are collected into the driver).
- what-if end to end: `fastcoord whatif TRACE --out DIR --master local[2]` with its
  default grid of 6 configurations.

The trace is generated once (gen.generate, seed 1) and cached as Parquet under
FASTCOORD_BENCH_CACHE (default: the temp dir), keyed by its parameters and the
sources of the generator and the simulation it runs (gen.py, whatif.py). `make test`
runs each once on a small trace (--benchmark-disable).
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("pyspark")
import pyarrow as pa
import pyarrow.compute as pc

import fastcoord
from fastcoord.pipeline._gc import collected_after
from fastcoord.pipeline.replay import ShardReplay, split_by_shard
from fastcoord.pipeline.trace import read_trace
from pipeline_traces import FULL, QUICK, replay_stage_task_s, trace_path


def quick(request) -> bool:
    return bool(request.config.getoption("benchmark_disable"))


_shards: dict = {}


def shards(params):
    """(trace rows, end_ms, [(shard, table)]): the partitioning the stage starts from."""
    key = tuple(sorted(params.items()))
    if key not in _shards:
        _shards.clear()
        gc.collect()
        table = read_trace(trace_path(params))
        parts = list(split_by_shard(table).items())
        _shards[key] = (table.num_rows, pc.max(table.column("time_ms")).as_py(), parts)
    return _shards[key]


def _median(values):
    """The middle value (the upper one of an even count): what every case reports."""
    return sorted(values)[len(values) // 2]


def _one_cpu():
    """Pin this process to one CPU for a single-core measurement (restored after)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    return before


def _replay_pinned(benchmark, parts, end_ms, rounds, **replay_options):
    """Every shard's replay in turn, `rounds` times, pinned to one CPU: (response rows
    of the last round, median seconds of a round)."""
    counts = {}
    took = []

    def run():
        t0 = time.perf_counter()
        for s, t in parts:
            # as the stage's task replays a shard (spark._replay_shard): the replay dropped
            # inside collected_after, which collects its coordinator's cycles once
            with collected_after():
                out = ShardReplay(s, **replay_options).run(t, end_ms)
            counts[s] = out["responses"].num_rows
        took.append(time.perf_counter() - t0)

    before = _one_cpu()
    try:
        benchmark.pedantic(run, rounds=rounds, iterations=1)
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)
    return sum(counts.values()), _median(took)


@pytest.mark.parametrize("runs", [True, False], ids=["heartbeat-runs", "general-path"])
def test_replay_stage_one_core(benchmark, request, runs):
    """runs=False: every heartbeat by the replay's general path (a Python step, a run of one),
    the comparison for HeartbeatRun, measured in the same session."""
    params = QUICK if quick(request) else FULL
    load = os.getloadavg()[0]    # other processes' share of the CPUs when we start
    n, end_ms, parts = shards(params)
    benchmark.group = "pipeline-replay-stage-one-core"    # read when the run is recorded
    # The figure the target is read against: the median of 3 rounds (one round on this
    # shared VM, 11.57 s, was 12-14% slower than two runs minutes later); the general
    # path's 27 s comparison: 1 round
    rows, median = _replay_pinned(benchmark, parts, end_ms, 3 if runs else 1,
                                  heartbeat_runs=runs)
    peer = fastcoord.IMPLEMENTATION if runs else f"{fastcoord.IMPLEMENTATION}, runs of one"
    benchmark.extra_info.update(load_1m=round(load, 1), ops=n, peer=peer,
                                shards=len(parts),
                                events_per_s_per_core=round(n / median))
    assert rows == n            # one response row per event


# The replay's rate depends on how much of a trace is rebalance traffic (a join or sync
# costs the state machine's Python path, a heartbeat or commit a C run): the benchmark's
# generator at a tenth of its size with its faults as they are, without the rolling
# deploys, and with no faults at all (joins and syncs only where groups form).
MIXES = {"benchmark-mix": {},
         "no-deploys": dict(deploy_prob=0.0),
         "steady": dict(deploy_prob=0.0, crash_per_hour=0.0, leave_per_hour=0.0, gc_prob=0.0)}


@pytest.mark.parametrize("mix", list(MIXES))
def test_replay_one_core_by_mix(benchmark, request, mix):
    """One-core replay (as above) of 1,000-group traces whose share of joins and syncs
    differs: events/s per core against that share."""
    params = dict(QUICK if quick(request) else dict(FULL, groups=1_000), **MIXES[mix])
    n, end_ms, parts = shards(params)
    benchmark.group = "pipeline-replay-one-core-by-mix"
    events = pc.value_counts(pa.concat_tables([t for _, t in parts]).column("event"))
    share = {e["values"]: e["counts"] / n for e in events.to_pylist()}
    rows, median = _replay_pinned(benchmark, parts, end_ms, 3)
    benchmark.extra_info.update(
        ops=n, peer=mix, joins_pct=round(100 * share.get("join", 0), 1),
        syncs_pct=round(100 * share.get("sync", 0), 1),
        heartbeats_pct=round(100 * share.get("heartbeat", 0), 1),
        commits_pct=round(100 * share.get("commit", 0), 1),
        events_per_s_per_core=round(n / median))
    assert rows == n


def _busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy (/proc/stat): across a Spark stage,
    how many cores it kept busy, JVM included (local[1] runs one Python worker, but
    the JVM beside it works on the other core)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")   # - idle, iowait


def _stage(spark, path, took, busy) -> None:
    from fastcoord.pipeline.spark import replay_trace_file
    b0 = _busy_cpu_s()
    t0 = time.perf_counter()
    # a no-op sink runs every shard's replay to completion without writing anything
    replay_trace_file(spark, path).write.format("noop").mode("overwrite").save()
    took.append(time.perf_counter() - t0)
    busy.append(_busy_cpu_s() - b0)


@pytest.mark.parametrize("cores", [1, 2])
def test_replay_stage_scaling(benchmark, request, cores, tmp_path):
    from fastcoord.pipeline.spark import session
    params = QUICK if quick(request) else FULL
    rounds = 1 if quick(request) else 3     # one session, a job per round
    load = os.getloadavg()[0]    # other processes' share of the CPUs when we start
    path = trace_path(params)
    n = read_trace(path).num_rows
    # Spark's event log (uncompressed JSON lines), read once the session has stopped:
    # how long each round's replay stage's tasks held their cores
    log_dir = str(tmp_path / "events")
    os.makedirs(log_dir)
    spark = session(f"local[{cores}]", app=f"bench-stage-{cores}",
                    conf={"spark.eventLog.enabled": "true", "spark.eventLog.dir": log_dir,
                          "spark.eventLog.compress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    took, busy = [], []
    benchmark.group = "pipeline-replay-stage-spark"
    try:
        benchmark.pedantic(_stage, args=(spark, path, took, busy), rounds=rounds, iterations=1)
    finally:
        spark.stop()
    per_job = replay_stage_task_s(log_dir)
    assert len(per_job) == rounds, per_job
    replay_s = _median([r for r, _, _ in per_job])
    read_s = _median([r for _, r, _ in per_job])
    tasks = per_job[0][2]
    wall, cpu = _median(took), _median(busy)
    benchmark.extra_info.update(load_1m=round(load, 1), ops=n, peer=f"local[{cores}]",
                                rounds=rounds, events_per_s=round(n / wall),
                                machine_cores_busy=round(cpu / wall, 2),
                                events_per_busy_core_s=round(n / cpu) if cpu else 0,
                                read_stage_task_s=round(read_s, 2),
                                replay_stage_task_s=round(replay_s, 2),
                                replay_stage_task_s_rounds=[round(r, 2) for r, _, _ in per_job],
                                replay_stage_tasks=tasks,
                                replay_stage_events_per_core_s=round(n / replay_s))


def _command(benchmark, group: str, cmd) -> dict:
    """One timed run of a fastcoord command, as a user runs it: its exit code, the end
    of its output, its wall time."""
    result = {}

    def run():
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True,
                              timeout=3600)
        result.update(rc=proc.returncode, log=proc.stdout + proc.stderr[-3000:],
                      s=time.perf_counter() - t0)

    benchmark.group = group
    benchmark.pedantic(run, rounds=1, iterations=1)
    assert result["rc"] == 0, result["log"]
    return result


def test_end_to_end_local2(benchmark, request, tmp_path):
    params = QUICK if quick(request) else FULL
    load = os.getloadavg()[0]    # other processes' share of the CPUs when we start
    path = trace_path(params)
    n = read_trace(path).num_rows
    # 6g as in the earlier runs, for comparison (the CLI no longer collects the tables
    # into the driver; the 1 GiB default also completes a 10 M-event replay)
    peer = "fastcoord replay --master local[2]"
    result = _command(benchmark, "pipeline-end-to-end-local2",
                      [sys.executable, "-m", "fastcoord", "replay", path, "--out",
                       str(tmp_path / "out"), "--master", "local[2]", "--driver-memory", "6g"])
    assert f"responses {n}" in result["log"]
    benchmark.extra_info.update(load_1m=round(load, 1), ops=n, peer=peer,
                                events_per_s=round(n / result["s"]))


def test_whatif_end_to_end_local2(benchmark, request, tmp_path):
    """`fastcoord whatif` with its default grid (session timeouts 10s, 30s, 45s, static
    membership on and off: 6 configurations, each a closed-loop simulation of every
    consumer of the trace) on local[2], Spark's default memory. ops: trace events times
    configurations."""
    params = QUICK if quick(request) else FULL
    load = os.getloadavg()[0]
    path = trace_path(params)
    n = read_trace(path).num_rows
    configs = 6
    peer = "fastcoord whatif --master local[2], 6 configurations"
    result = _command(benchmark, "pipeline-whatif-end-to-end-local2",
                      [sys.executable, "-m", "fastcoord", "whatif", path, "--out",
                       str(tmp_path / "whatif"), "--master", "local[2]", "--no-baseline"])
    assert f"{configs} configurations, {n} events" in result["log"]
    benchmark.extra_info.update(load_1m=round(load, 1), ops=n * configs, peer=peer,
                                events_per_s=round(n / result["s"]),
                                simulated_events_per_s=round(n * configs / result["s"]))

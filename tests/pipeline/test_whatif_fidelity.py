"""What-if against reality (issue 38, "a what-if that agrees with reality").

Real confluent-kafka (librdkafka) consumers, two groups of three (1 s heartbeats,
max.poll.interval.ms 30 s), go through the same scheduled faults at two session
timeouts, 6 s and 10 s: SIGSTOP pauses of 4, 8 and 12 s, a SIGKILL and a restart of
that consumer 2 s later, a clean close. The what-if runs on the 6 s run's trace (its
request log, converted) and predicts both settings (and so does it on the 10 s run's:
a simulation costs nothing beside the runs); reality is each run's own server
side: the replay of that run's trace (its rebalances, and its expirations: of the killed
member a crash detected, of any other a false expiration). Per setting and group the
prediction is within one of reality in rebalances (the forming one not counted) and in
false expirations, and the crash is detected within one heartbeat interval of when it
really was (from the kill).

The schedule keeps a group's faults apart (each over before the next starts: a join
round does not wait on a paused member), so that each setting's outcome is not a race.
"""
from __future__ import annotations

import os
import signal
import time

import pyarrow.compute as pc
import pytest

from fastcoord.pipeline.adapters import from_fastcoord_log
from fastcoord.pipeline.replay import replay_local
from fastcoord.pipeline.trace import write_trace
from fastcoord.pipeline.whatif import WhatIfConfig, derive_behaviour, whatif_local
from helpers.server import ClientProc, ServerProc, assert_covered, stop_all

pytestmark = [pytest.mark.clients, pytest.mark.slow]

TOPIC = "orders"
PARTITIONS = [(TOPIC, p) for p in range(6)]
GROUPS = {"g1": "abc", "g2": "def"}
HEARTBEAT_MS = 1000
MAX_POLL_MS = 30_000
SESSIONS = (6000, 10_000)
SERVER_ARGS = ("--group-min-session-timeout-ms", "6000",
               "--group-initial-rebalance-delay-ms", "3000")
BOUND = 30.0                         # seconds for the groups to form on a loaded machine
# (seconds after both groups are stable, what, consumer, pause length in seconds)
# The kill is half a second off the whole seconds: at a whole second it landed just
# before one of c's heartbeats (they restart with the rebalance b's return opens), the
# real detection nearly an interval short of the session, and the comparison (the
# what-if times a crash from the last contact) at the edge of its bound.
SCHEDULE = [(2, "pause", "a", 4), (4, "pause", "d", 8), (10, "pause", "b", 12),
            (18, "pause", "e", 4), (28.5, "kill", "c", None), (28, "close", "f", None),
            (30.5, "restart", "c", None)]
END_S = 44                           # the trace is cut here, after c's old member expired
LATE_S = 0.5                         # a step this late fails the run: the machine stalled


def _real_run(tmp_path, session_ms: int):
    """One run at `session_ms`: (its trace up to END_S, the kill's time in ms)."""
    run_dir = tmp_path / f"session-{session_ms}"
    run_dir.mkdir()
    server = ServerProc(run_dir / "server.log", *SERVER_ARGS, topics=[f"{TOPIC}:6"])
    clients = {}
    procs = []

    def spawn(name: str, group: str, log_dir=run_dir) -> ClientProc:
        client = ClientProc("confluent", server.bootstrap, group, TOPIC, name, log_dir,
                            session_ms=session_ms, heartbeat_ms=HEARTBEAT_MS,
                            max_poll_ms=MAX_POLL_MS)
        clients[name] = client
        procs.append(client)
        return client

    kill_ms = None
    try:
        for group, names in GROUPS.items():
            for name in names:
                spawn(name, group)
        for names in GROUPS.values():
            assert_covered([clients[n] for n in names], PARTITIONS, BOUND, server=server)
        t0 = time.monotonic()
        steps = []
        for at, what, name, length in SCHEDULE:
            if what == "pause":
                steps += [(at, "stop", name), (at + length, "cont", name)]
            else:
                steps.append((at, what, name))
        steps.append((END_S, "end", None))
        for at, what, name in sorted(steps, key=lambda s: s[0]):
            late = time.monotonic() - (t0 + at)
            if late < 0:
                time.sleep(-late)
            assert late < LATE_S, f"step {what} {name} ran {late:.2f}s late"
            client = clients.get(name)
            if what == "stop":
                os.kill(client.proc.pid, signal.SIGSTOP)
            elif what == "cont":
                os.kill(client.proc.pid, signal.SIGCONT)
            elif what == "kill":
                client.kill()
                kill_ms = time.time() * 1000
            elif what == "close":
                client.close()
            elif what == "restart":
                restarted = run_dir / "restarted"
                restarted.mkdir()
                spawn(name, "g1" if name in GROUPS["g1"] else "g2", restarted)
        end_ms = time.time() * 1000
    finally:
        for client in procs:
            if client.proc.poll() is None:
                os.kill(client.proc.pid, signal.SIGCONT)
        stop_all(procs, server)
    trace, stats = from_fastcoord_log(str(server.request_log_path))
    assert stats.malformed == 0, stats.examples
    trace = trace.filter(pc.less_equal(trace.column("time_ms"), int(end_ms)))
    write_trace(trace, str(run_dir / "trace.parquet"))     # (for a failure's post-mortem)
    return trace, kill_ms


def _killed_members(trace, kill_ms: float) -> set:
    """The member ids c had before it was killed."""
    return {r["member_id"] for r in trace.to_pylist()
            if r["client_id"] == "c" and r["time_ms"] <= kill_ms and r["member_id"]}


def _interval(trace) -> int:
    """The killed consumer's heartbeat interval, as its run's trace has it (the median
    gap: librdkafka's are a millisecond or a few over the setting)."""
    return next(i.heartbeat_ms for i in derive_behaviour(trace)["g1"]
                if i.client_id == "c" and i.end == "crash")


def _reality(trace, kill_ms: float) -> dict:
    """Per group, from the replay of a run's own trace: (rebalances after the one that
    formed it, false expirations, crash detection latency from the kill in ms)."""
    out = replay_local(trace)
    killed = _killed_members(trace, kill_ms)
    got = {}
    for gid in GROUPS:
        rebalances = sorted(r["start_ms"] for r in out["rebalances"].to_pylist()
                            if r["group_id"] == gid)
        expired = [e for e in out["expirations"].to_pylist() if e["group_id"] == gid]
        got[gid] = (len(rebalances) - 1,
                    sum(1 for e in expired if e["member_id"] not in killed),
                    [round(e["time_ms"] - kill_ms) for e in expired if e["member_id"] in killed])
    return got


def _prediction(trace, trace_session_ms: int, session_ms: int) -> dict:
    """Per group, the what-if's (rebalances but the initial one, false expirations, crash
    detection latencies) under `session_ms`, from a trace run at `trace_session_ms`."""
    cfg = WhatIfConfig(None if session_ms == trace_session_ms else session_ms)
    out = whatif_local(trace, [cfg])
    got = {}
    for gid in GROUPS:
        rebalances = [r for r in out["rebalances"].to_pylist()
                      if r["group_id"] == gid and r["cause"] != "initial"]
        removals = [r for r in out["removals"].to_pylist() if r["group_id"] == gid]
        got[gid] = (len(rebalances), sum(1 for r in removals if r["kind"] == "false"),
                    [r["latency_ms"] for r in removals if r["kind"] == "crash"])
    return got


def test_the_whatif_predicts_real_runs_at_two_session_timeouts(tmp_path):
    runs = {s: _real_run(tmp_path, s) for s in SESSIONS}
    figures = {}
    for source in SESSIONS:               # the run whose trace the what-if reads
        for session_ms, (real_trace, kill_ms) in runs.items():
            figures[source, session_ms] = (_reality(real_trace, kill_ms),
                                           _prediction(runs[source][0], source, session_ms))
    report = "; ".join(f"{s} ms from the {src} ms trace: real {r} predicted {p}"
                       for (src, s), (r, p) in figures.items())
    print(report)
    for (_, session_ms), (real, predicted) in figures.items():
        for gid in GROUPS:
            (r_reb, r_false, r_detect), (p_reb, p_false, p_detect) = real[gid], predicted[gid]
            assert abs(p_reb - r_reb) <= 1, (session_ms, gid, report)
            assert abs(p_false - r_false) <= 1, (session_ms, gid, report)
            # the killed consumer is detected once, in both, within a heartbeat interval
            # (the what-if times it from its last contact: the kill fell somewhere in
            # the interval after it)
            assert len(p_detect) == len(r_detect) == (1 if gid == "g1" else 0), report
            for p, r in zip(p_detect, r_detect):
                assert abs(p - r) <= _interval(runs[session_ms][0]), (session_ms, gid, report)

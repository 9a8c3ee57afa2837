"""What-if against reality (issue 38): the machinery of the fidelity check, shared by
tests/pipeline/test_whatif_fidelity.py and benchmarks/whatif_fidelity.py, driven by a
`Scenario` (data: the groups, the fault schedule, the settings).

- `real_run`: one real run at one session timeout: `fastcoord serve` and real
  confluent-kafka (librdkafka) consumers (tests/helpers/server.py), the schedule played
  once every group is stable (SIGSTOP/SIGCONT pauses, a SIGKILL, a restart, a clean
  close), the server's request log converted to a trace and cut at the scenario's end.
- `reality`: per group, from the replay of a run's own trace: rebalances after the one
  that formed the group, false expirations (any member's but a killed one's), crash
  detection latency from the kill.
- `prediction`: the same three from the what-if on one run's trace, under a session
  timeout (the trace's own: the baseline).
- `compare`: reality and prediction for every (trace read, setting) pair; `judge`: one
  comparison against the bounds (rebalances and false expirations within one of
  reality, crash detection within one heartbeat interval of it).

Every process is started and stopped by the harness, by PID.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pyarrow.compute as pc

from fastcoord.pipeline.adapters import from_fastcoord_log
from fastcoord.pipeline.replay import replay_local
from fastcoord.pipeline.trace import write_trace
from fastcoord.pipeline.whatif import WhatIfConfig, derive_behaviour, whatif_local
from helpers.server import ClientProc, ServerProc, assert_covered, stop_all

# (seconds after every group is stable, what, consumer, pause length in seconds or None);
# what: "pause", "kill", "restart" (the killed consumer again, under its name) or "close"
Step = Tuple[float, str, str, Optional[float]]


@dataclass(frozen=True)
class Scenario:
    """One fidelity check. Consumer names are unique over the groups (each is its
    consumer's client id: the trace tells them apart by it). At most one kill per group
    (a group's crash detections are paired in order)."""
    name: str
    groups: Dict[str, str]               # group id -> its consumers' names, one letter each
    schedule: Tuple[Step, ...]
    end_s: float                         # the trace is cut here
    sessions: Tuple[int, ...]            # session.timeout.ms of the real runs
    whatif_from: int                     # the run whose trace the what-if reads (the headline)
    server_args: Tuple[str, ...]
    topic: str = "orders"
    partitions: int = 6
    heartbeat_ms: int = 1000
    max_poll_ms: int = 30_000
    form_bound_s: float = 30.0           # seconds for the groups to form on a loaded machine
    late_s: float = 0.5                  # a step this late fails the run: the machine stalled

    def __post_init__(self) -> None:
        names = [n for ns in self.groups.values() for n in ns]
        if len(set(names)) != len(names):
            raise ValueError(f"consumer names repeat across groups: {names}")
        for at, what, name, length in self.schedule:
            if name not in names:
                raise ValueError(f"step {what} of unknown consumer {name!r}")
            if what not in ("pause", "kill", "restart", "close"):
                raise ValueError(f"unknown step {what!r}")
            if (what == "pause") != (length is not None):
                raise ValueError(f"a pause, and only a pause, has a length: {what} {name}")
            if at + (length or 0) >= self.end_s:
                raise ValueError(f"step {what} {name} is not over by the end ({self.end_s} s)")
        kills = [self.group_of(n) for n in self.killed()]
        if len(set(kills)) != len(kills):
            raise ValueError("more than one kill in a group")
        if self.whatif_from not in self.sessions:
            raise ValueError(f"whatif_from {self.whatif_from} is not one of {self.sessions}")

    def group_of(self, name: str) -> str:
        return next(g for g, names in self.groups.items() if name in names)

    def killed(self) -> List[str]:
        return [name for _, what, name, _ in self.schedule if what == "kill"]

    def kills_in(self, gid: str) -> int:
        return sum(1 for n in self.killed() if self.group_of(n) == gid)

    def steps(self) -> List[Tuple[float, str, Optional[str]]]:
        """The schedule as signals in time order (a pause: a stop and a cont), then the end."""
        steps = []
        for at, what, name, length in self.schedule:
            if what == "pause":
                steps += [(at, "stop", name), (at + length, "cont", name)]
            else:
                steps.append((at, what, name))
        steps.append((self.end_s, "end", None))
        return sorted(steps, key=lambda s: s[0])


@dataclass
class Run:
    session_ms: int
    trace: object                        # pyarrow.Table, cut at the scenario's end
    kills: Dict[str, float]              # consumer name -> wall-clock ms of its SIGKILL
    trace_path: Path


def real_run(sc: Scenario, session_ms: int, run_dir: Path) -> Run:
    """One run of `sc` at `session_ms` in `run_dir` (created): its trace up to the end."""
    run_dir.mkdir(parents=True)
    server = ServerProc(run_dir / "server.log", *sc.server_args,
                        topics=[f"{sc.topic}:{sc.partitions}"])
    partitions = [(sc.topic, p) for p in range(sc.partitions)]
    clients: Dict[str, ClientProc] = {}
    procs: List[ClientProc] = []

    def spawn(name: str, log_dir: Path) -> ClientProc:
        client = ClientProc("confluent", server.bootstrap, sc.group_of(name), sc.topic, name,
                            log_dir, session_ms=session_ms, heartbeat_ms=sc.heartbeat_ms,
                            max_poll_ms=sc.max_poll_ms)
        clients[name] = client
        procs.append(client)
        return client

    kills: Dict[str, float] = {}
    try:
        for names in sc.groups.values():
            for name in names:
                spawn(name, run_dir)
        for names in sc.groups.values():
            assert_covered([clients[n] for n in names], partitions, sc.form_bound_s,
                           server=server)
        t0 = time.monotonic()
        for at, what, name in sc.steps():
            late = time.monotonic() - (t0 + at)
            if late < 0:
                time.sleep(-late)
            assert late < sc.late_s, f"step {what} {name} ran {late:.2f}s late"
            client = clients.get(name)
            if what == "stop":
                os.kill(client.proc.pid, signal.SIGSTOP)
            elif what == "cont":
                os.kill(client.proc.pid, signal.SIGCONT)
            elif what == "kill":
                client.kill()
                kills[name] = time.time() * 1000
            elif what == "close":
                client.close()
            elif what == "restart":
                restarted = run_dir / f"restarted-{name}"
                restarted.mkdir()
                spawn(name, restarted)
        end_ms = time.time() * 1000
    finally:
        for client in procs:
            if client.proc.poll() is None:
                os.kill(client.proc.pid, signal.SIGCONT)
        stop_all(procs, server)
    trace, stats = from_fastcoord_log(str(server.request_log_path))
    assert stats.malformed == 0, stats.examples
    trace = trace.filter(pc.less_equal(trace.column("time_ms"), int(end_ms)))
    path = run_dir / "trace.parquet"
    write_trace(trace, str(path))        # (for a failure's post-mortem)
    return Run(session_ms, trace, kills, path)


def killed_members(run: Run) -> Dict[str, float]:
    """The member ids each killed consumer had before its kill -> the kill's time."""
    out = {}
    for r in run.trace.to_pylist():
        kill_ms = run.kills.get(r["client_id"])
        if kill_ms is not None and r["time_ms"] <= kill_ms and r["member_id"]:
            out[r["member_id"]] = kill_ms
    return out


def interval(sc: Scenario, run: Run, gid: str) -> Optional[int]:
    """The heartbeat interval of the consumer killed in `gid`, as its run's trace has it
    (the median gap: librdkafka's are a millisecond or a few over the setting); None
    for a group without a kill."""
    names = [n for n in sc.killed() if sc.group_of(n) == gid]
    if not names:
        return None
    return next(i.heartbeat_ms for i in derive_behaviour(run.trace)[gid]
                if i.client_id == names[0] and i.end == "crash")


def reality(sc: Scenario, run: Run) -> dict:
    """Per group, from the replay of a run's own trace: (rebalances after the one that
    formed it, false expirations, crash detection latencies from the kill in ms)."""
    out = replay_local(run.trace)
    killed = killed_members(run)
    got = {}
    for gid in sc.groups:
        rebalances = sorted(r["start_ms"] for r in out["rebalances"].to_pylist()
                            if r["group_id"] == gid)
        expired = [e for e in out["expirations"].to_pylist() if e["group_id"] == gid]
        got[gid] = (len(rebalances) - 1,
                    sum(1 for e in expired if e["member_id"] not in killed),
                    [round(e["time_ms"] - killed[e["member_id"]])
                     for e in expired if e["member_id"] in killed])
    return got


def prediction(sc: Scenario, trace, trace_session_ms: int, session_ms: int) -> dict:
    """Per group, the what-if's (rebalances but the initial one, false expirations, crash
    detection latencies) under `session_ms`, from a trace run at `trace_session_ms`."""
    cfg = WhatIfConfig(None if session_ms == trace_session_ms else session_ms)
    out = whatif_local(trace, [cfg])
    got = {}
    for gid in sc.groups:
        rebalances = [r for r in out["rebalances"].to_pylist()
                      if r["group_id"] == gid and r["cause"] != "initial"]
        removals = [r for r in out["removals"].to_pylist() if r["group_id"] == gid]
        got[gid] = (len(rebalances), sum(1 for r in removals if r["kind"] == "false"),
                    [r["latency_ms"] for r in removals if r["kind"] == "crash"])
    return got


def compare(sc: Scenario, runs: Dict[int, Run]) -> dict:
    """{(session of the trace read, setting): (reality, prediction)} for every pair."""
    figures = {}
    for source in runs:
        for session_ms, run in runs.items():
            figures[source, session_ms] = (reality(sc, run),
                                           prediction(sc, runs[source].trace, source, session_ms))
    return figures


def describe(figures: dict) -> str:
    return "; ".join(f"{s} ms from the {src} ms trace: real {r} predicted {p}"
                     for (src, s), (r, p) in figures.items())


def judge(sc: Scenario, gid: str, real: tuple, predicted: tuple,
          hb_interval: Optional[int]) -> Dict[str, bool]:
    """Each bound, met or not: rebalances and false expirations within one of reality;
    the group's kills detected as often in both as it has kills, each within one
    heartbeat interval of reality."""
    (r_reb, r_false, r_detect), (p_reb, p_false, p_detect) = real, predicted
    kills = sc.kills_in(gid)
    detection = len(p_detect) == len(r_detect) == kills and all(
        abs(p - r) <= hb_interval for p, r in zip(p_detect, r_detect))
    return {"rebalances": abs(p_reb - r_reb) <= 1, "false": abs(p_false - r_false) <= 1,
            "detection": detection}


SERVER_ARGS = ("--group-min-session-timeout-ms", "6000",
               "--group-initial-rebalance-delay-ms", "3000")

# The schedules keep a group's faults apart: each over, the rebalances it causes
# included, before the next starts (a join round does not wait on a paused member past
# its session), so that each setting's outcome is not a race. A kill is half a second
# off the whole seconds: at a whole second it can land just before one of the
# consumer's heartbeats (they restart with a rebalance the schedule opened at a whole
# second), the real detection then nearly an interval short of the session and the
# comparison (the what-if times a crash from the last contact) at the edge of its bound.
# The restart 2 s after the kill opens a join round that waits for the killed member's
# old id to expire: the trace ends past that at the longest session, with a margin.

# tests/pipeline/test_whatif_fidelity.py: two groups of three, two sessions (make test
# stays bounded).
TEST = Scenario(
    name="test",
    groups={"g1": "abc", "g2": "def"},
    schedule=((2, "pause", "a", 4), (4, "pause", "d", 8), (10, "pause", "b", 12),
              (18, "pause", "e", 4), (28.5, "kill", "c", None), (28, "close", "f", None),
              (30.5, "restart", "c", None)),
    end_s=44,
    sessions=(6000, 10_000),
    whatif_from=6000,
    server_args=SERVER_ARGS,
)

# Issue 38's own check: three groups of four, pauses of 4, 7, 12 and 15 s, a kill and
# restart, a clean close, sessions 6, 10 and 20 s, the what-if on the 10 s run's trace.
# Two faults a group, each group's first pause a second apart from the others'. What
# each does, by session (expired = a false expiration and two rebalances, one when the
# member goes, one when it comes back):
#   g1  a paused 15 s at 2: expired at 6 and 10 s, not at 20; b closed at 21 (one
#       rebalance), 4 s after a is back.
#   g2  e paused 4 s at 3: never expired; f paused 12 s at 11: expired at 6 and 10 s.
#   g3  i paused 7 s at 4: expired at 6 s only; k killed at 16.5 (5.5 s after i is
#       back), restarted at 18.5: one rebalance, over when k's old id expires
#       (16.5 + session); the end, 42, is 5.5 s past that at 20 s.
# The close is followed by 2 s without a step (it waits for the consumer to leave).
ISSUE = Scenario(
    name="issue",
    groups={"g1": "abcd", "g2": "efgh", "g3": "ijkl"},
    schedule=((2, "pause", "a", 15), (21, "close", "b", None),
              (3, "pause", "e", 4), (11, "pause", "f", 12),
              (4, "pause", "i", 7), (16.5, "kill", "k", None), (18.5, "restart", "k", None)),
    end_s=42,
    sessions=(6000, 10_000, 20_000),
    whatif_from=10_000,
    server_args=SERVER_ARGS,
)

SCENARIOS = {"test": TEST, "issue": ISSUE}

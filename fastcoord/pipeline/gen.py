"""`fastcoord trace gen`: a synthetic trace with realistic client behaviour, from a seed.

Two steps. First each group's consumers get a *behaviour* (whatif.Incarnation, the
same description what-if derives from a recorded trace): group sizes long-tailed (a
Pareto draw, capped), a share of static members (group.instance.id), per process
incarnation its start, its heartbeat interval (the nominal one +-20%), its pauses (at
each heartbeat, with probability `gc_prob`, a GC pause or stall with a long tail:
Pareto, capped at 60 s) and how it ends: a crash (restarted 5-60 s later as a new
incarnation), a clean stop (a dynamic member sends LeaveGroup; restarted 5-20 s later),
a rolling deploy (one per group with probability `deploy_prob`: each member in turn
stops and restarts 5-20 s later) or the trace's end.

Then those consumers act their behaviour out against a real GroupCoordinator on a
ManualClock (whatif.ShardSimulation, one per session timeout: a group's session timeout
is drawn from `session_timeouts`), and every request they send is a trace row. They
behave as Kafka's classic consumer does: join with member id "" (then again with the
id MEMBER_ID_REQUIRED gave), sync after the join answer, heartbeat once synced, an
auto-commit every 5 s with a heartbeat, and rejoin on REBALANCE_IN_PROGRESS,
ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID. So a generated trace is one real consumers
could have sent: replayed, its groups rebalance where the coordinator made them
rebalance, not where an open-loop model guessed they would (an earlier generator did;
its groups drifted apart from the coordinator's view and then failed every request).

A trace's member ids are incarnation names ("<group>-c<slot>-<n>"), its client ids
"client-<slot>", its static members' instance ids "<group>-i<slot>"; a commit commits its
slot's own partition of one topic (whatif.ShardSimulation._offsets); `generation` is the
generation a request carried (null for joins and leaves) and `error` the answer its consumer got
(a parked join's or sync's when it came, even after the trace's end), as a request log
would have them. Replayed, a generated trace gets those same answers
(tests/pipeline/test_pipeline_replay.py). The same seed gives the same trace, row for row.
"""
from __future__ import annotations

import random
from collections import defaultdict
from typing import Callable, Dict, List, Optional

import pyarrow as pa

from .trace import TRACE_SCHEMA
from .whatif import Incarnation, ShardSimulation, WhatIfConfig

AUTO_COMMIT_MS = 5000        # Kafka's auto.commit.interval.ms default
MAX_PAUSE_MS = 60_000
HOUR_MS = 3_600_000
DEFAULT_DURATION_S = 300


def generate(*, commits: bool = True, progress: Optional[Callable[[str], None]] = None,
             **params) -> pa.Table:
    """The trace of the consumers `behaviours(**params)` describes (its keyword arguments:
    groups, members, duration_s, seed, ... with its defaults): every request they send
    before the end, with an auto-commit every 5 s unless not `commits`. `progress`, if
    given, gets a line as each simulation starts (a 10M-event trace takes minutes)."""
    by_session = behaviours(**params)
    end = params.get("duration_s", DEFAULT_DURATION_S) * 1000
    rows: List[list] = []
    for k, session in enumerate(sorted(by_session), 1):
        if progress is not None:
            progress(f"simulating {len(by_session[session])} groups with session timeout "
                     f"{session} ms ({k}/{len(by_session)}); {len(rows)} requests so far")
        ShardSimulation(by_session[session], WhatIfConfig(session), end_ms=end,
                        trace_rows=rows,
                        commit_interval_ms=AUTO_COMMIT_MS if commits else None).run()
    # each simulation's rows are in the order its requests were sent; a stable sort by
    # time interleaves the simulations without reordering any of them
    rows.sort(key=lambda r: r[0])
    return _table(rows)


def behaviours(*, groups: int = 10, members: int = 10, duration_s: int = DEFAULT_DURATION_S,
               seed: int = 0, static_fraction: float = 0.3, heartbeat_ms: int = 3000,
               session_timeouts=(10_000, 30_000, 45_000), crash_per_hour: float = 0.5,
               leave_per_hour: float = 0.5, gc_prob: float = 0.02, deploy_prob: float = 0.3,
               max_group_size: int = 200) -> Dict[int, Dict[str, List[Incarnation]]]:
    """The consumers of `generate`'s trace: `groups` groups averaging about `members`
    members each, `duration_s` seconds long; by session timeout, by group, their
    incarnations (what-if's description of a consumer, which derive_behaviour recovers
    from the trace)."""
    rng = random.Random(seed)
    end = duration_s * 1000
    by_session: Dict[int, Dict[str, List[Incarnation]]] = defaultdict(dict)
    for gi in range(groups):
        gid = f"group-{gi}"
        size = max(1, min(max_group_size, int(members * 0.5 * rng.paretovariate(2.0))))
        session = rng.choice(session_timeouts)
        by_session[session][gid] = _behaviour(
            rng, gid, size, end, static_fraction, heartbeat_ms, session, crash_per_hour,
            leave_per_hour, gc_prob, deploy_prob)
    return dict(by_session)


def _behaviour(rng, gid, size, end, static_fraction, hb, session, crash_ph, leave_ph,
               gc_prob, deploy_prob) -> List[Incarnation]:
    """One group's incarnations: each member slot's processes, one after the other."""
    static = [rng.random() < static_fraction for _ in range(size)]
    deploy = [-1] * size                     # when the rolling deploy stops each slot
    if rng.random() < deploy_prob:
        at = rng.randint(end // 4, end // 2)
        deploy = [at + i * rng.randint(5000, 20000) for i in range(size)]
    out: List[Incarnation] = []
    for s in range(size):
        start = rng.randint(0, 2000)
        n = 0
        while start < end:
            n += 1
            interval = int(hb * rng.uniform(0.8, 1.2))
            ends = [(start + _after(rng, crash_ph), "crash"),
                    (start + _after(rng, leave_ph), "leave")]
            if deploy[s] > start:
                ends.append((deploy[s], "deploy"))
            stop, why = min(ends)
            if stop >= end:
                stop, why = -1, "end"
            until = end if stop < 0 else stop
            out.append(Incarnation(
                group=gid, slot=f"{gid}-c{s}", member=f"{gid}-c{s}-{n}",
                instance_id=f"{gid}-i{s}" if static[s] else None, client_id=f"client-{s}",
                start_ms=start, last_ms=until,
                # a static member's clean stop sends no LeaveGroup: a restart
                end=why if why in ("crash", "end") else ("restart" if static[s] else "leave"),
                stop_ms=stop, heartbeat_ms=interval, rebalance_timeout_ms=2 * session,
                pauses=_pauses(rng, start, until, interval, gc_prob)))
            if stop < 0:
                break
            start = stop + (rng.randint(5000, 60000) if why == "crash"
                            else rng.randint(5000, 20000))
    return out


def _after(rng, per_hour: float) -> int:
    """Time to the next event of a Poisson process at `per_hour` (an int, ms)."""
    if per_hour <= 0:
        return 1 << 62
    return int(rng.expovariate(per_hour / HOUR_MS))


def _pauses(rng, start, until, interval, gc_prob) -> tuple:
    """GC pauses and stalls: at each heartbeat, with probability gc_prob, a pause with a
    long tail (Pareto: most are short, a few outlast a session timeout)."""
    pauses = []
    t = start + interval
    while t < until:
        if rng.random() < gc_prob:
            length = min(MAX_PAUSE_MS, int(200 * rng.paretovariate(1.2)))
            pauses.append((t, t + length))
            t += length
        t += interval
    return tuple(pauses)


def _table(rows: List[list]) -> pa.Table:
    cols = list(zip(*rows)) if rows else [[]] * 13
    n = len(rows)
    data = {"seq": pa.array(range(n), pa.int64()),
            "time_ms": pa.array(cols[0], pa.int64()), "group_id": pa.array(cols[1], pa.string()),
            "member_id": pa.array(cols[2], pa.string()), "instance_id": pa.array(cols[3], pa.string()),
            "event": pa.array(cols[4], pa.string()),
            "session_timeout_ms": pa.array(cols[5], pa.int32()),
            "rebalance_timeout_ms": pa.array(cols[6], pa.int32()),
            "generation": pa.array(cols[10], pa.int32()),
            "protocol_type": pa.array(cols[7], pa.string()),
            "protocols": pa.array(cols[8], pa.list_(pa.string())),
            "client_id": pa.array(cols[9], pa.string()), "error": pa.array(cols[11], pa.int16()),
            "connection": pa.nulls(n, pa.string()),
            "offsets": pa.array(cols[12], TRACE_SCHEMA.field("offsets").type)}
    return pa.table(data, schema=TRACE_SCHEMA)

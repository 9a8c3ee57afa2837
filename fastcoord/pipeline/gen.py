"""`fastcoord trace gen`: a synthetic trace with realistic client behaviour, from a seed.

Per group (sizes long-tailed: a Pareto draw, capped), each member slot runs a Kafka
consumer: join (dynamic members twice: "" then the MEMBER_ID_REQUIRED id; static
members once, with their group.instance.id), sync once every live member of the round
has joined (3 s later for a group starting empty: the initial rebalance delay),
heartbeats every `heartbeat_ms` with +-20% jitter, an auto-commit every 5 s. Faults:
GC pauses with a long tail (Pareto, capped at 60 s) that delay heartbeats, crashes
(no more requests; a restart after 5-60 s as a new incarnation), clean leaves
(LeaveGroup, then a restart), and one rolling deploy per group with probability
`deploy_prob` (each member in turn: leave if dynamic, restart 5-20 s later). Any
membership change makes the other live members rejoin at their next heartbeat.
The same seed gives the same trace, row for row.
"""
from __future__ import annotations

import heapq
import random
from typing import List

import pyarrow as pa

from .trace import TRACE_SCHEMA


def generate(*, groups: int = 10, members: int = 10, duration_s: int = 300, seed: int = 0,
             static_fraction: float = 0.3, heartbeat_ms: int = 3000,
             session_timeouts=(10_000, 30_000, 45_000), crash_per_hour: float = 0.5,
             leave_per_hour: float = 0.5, gc_prob: float = 0.02, deploy_prob: float = 0.3,
             commits: bool = True, max_group_size: int = 200) -> pa.Table:
    """A trace of `groups` groups averaging about `members` members each."""
    rng = random.Random(seed)
    rows: List[tuple] = []
    for gi in range(groups):
        size = max(1, min(max_group_size, int(members * 0.5 * rng.paretovariate(2.0))))
        _group(rng, f"group-{gi}", size, duration_s * 1000, rows, static_fraction,
               heartbeat_ms, rng.choice(session_timeouts), crash_per_hour, leave_per_hour,
               gc_prob, deploy_prob, commits)
    rows.sort(key=lambda r: (r[0], r[1], r[2], r[-1]))
    cols = list(zip(*rows)) if rows else [[]] * 12
    n = len(rows)
    data = {"seq": pa.array(range(n), pa.int64()),
            "time_ms": pa.array(cols[0], pa.int64()), "group_id": pa.array(cols[1], pa.string()),
            "member_id": pa.array(cols[2], pa.string()), "instance_id": pa.array(cols[3], pa.string()),
            "event": pa.array(cols[4], pa.string()),
            "session_timeout_ms": pa.array(cols[5], pa.int32()),
            "rebalance_timeout_ms": pa.array(cols[6], pa.int32()),
            "generation": pa.nulls(n, pa.int32()),
            "protocol_type": pa.array(cols[7], pa.string()),
            "protocols": pa.array(cols[8], pa.list_(pa.string())),
            "client_id": pa.array(cols[9], pa.string()), "error": pa.nulls(n, pa.int16())}
    return pa.table(data, schema=TRACE_SCHEMA)


HB, START, DETECT, LEAVE, DEPLOY, SYNC = range(6)


def _group(rng, gid, size, end, rows, static_fraction, hb, session, crash_ph, leave_ph,
           gc_prob, deploy_prob, commits):
    static = [rng.random() < static_fraction for _ in range(size)]
    inc = [0] * size
    alive = [False] * size
    joining = set()
    empty = [True]
    next_commit = [0] * size
    heap: list = []
    n = [0]

    def push(t, kind, slot, token=None):
        n[0] += 1
        heapq.heappush(heap, (t, n[0], kind, slot, token))

    def mid(slot):
        return f"{gid}-c{slot}-{inc[slot]}"

    def emit(t, slot, event, join=False):
        inst = f"{gid}-i{slot}" if static[slot] else None
        if join:
            rows.append((t, gid, mid(slot), inst, "join", session, 2 * session, "consumer",
                         ["range", "cooperative-sticky"], f"client-{slot}", len(rows)))
        else:
            rows.append((t, gid, mid(slot), inst, event, None, None, None, None,
                         f"client-{slot}", len(rows)))

    def join(t, slot):
        emit(t, slot, "join", True)
        if not static[slot]:
            emit(t, slot, "join", True)
        joining.add(slot)

    def membership_change(t, changed):
        for s in range(size):
            if alive[s] and s != changed and s not in joining:
                joining.add(s)
                tj = t + int(rng.uniform(0, hb))
                push(tj, SYNC, s, ("rejoin", inc[s]))

    def maybe_sync(t):
        if joining and all(not alive[s] or s in done_join for s in joining):
            ts = t + (3000 if empty[0] else rng.randint(1, 20))
            for s in sorted(joining):
                if alive[s]:
                    push(ts, SYNC, s, ("sync", inc[s]))
            joining.clear()
            done_join.clear()
            empty[0] = False

    done_join = set()
    rate = 1.0 / 3_600_000
    for s in range(size):
        push(rng.randint(0, 2000), START, s)
    if rng.random() < deploy_prob:
        push(rng.randint(end // 4, end // 2), DEPLOY, 0)
    while heap:
        t, _, kind, s, token = heapq.heappop(heap)
        if t >= end:
            break
        if kind == START:
            inc[s] += 1
            alive[s] = True
            join(t, s)
            done_join.add(s)
            membership_change(t, s)
            maybe_sync(t)
            continue
        if kind == DEPLOY:
            for i in range(size):
                at = t + i * rng.randint(5000, 20000)
                push(at, LEAVE, i, ("deploy", inc[i]))
            continue
        if kind == DETECT:
            if any(alive):
                membership_change(t, s)
                maybe_sync(t)
            continue
        if not alive[s] or (token is not None and token[1] != inc[s]):
            continue
        if kind == SYNC:
            if token[0] == "rejoin":
                join(t, s)
                done_join.add(s)
                maybe_sync(t)
            else:
                emit(t, s, "sync")
                push(t + int(hb * rng.uniform(0.8, 1.2)), HB, s, ("hb", inc[s]))
            continue
        if kind == HB:
            if s in joining:
                continue
            if rng.random() < crash_ph * rate * hb:
                alive[s] = False
                push(t + rng.randint(5000, 60000), START, s)
                if not static[s]:
                    push(t + session, DETECT, s)       # the coordinator notices the crash
                if not any(alive):
                    empty[0] = True
                continue
            if rng.random() < leave_ph * rate * hb:
                push(t, LEAVE, s, ("leave", inc[s]))
                continue
            emit(t, s, "heartbeat")
            if commits and t >= next_commit[s]:
                emit(t + 1, s, "commit")
                next_commit[s] = t + 5000
            gap = int(hb * rng.uniform(0.8, 1.2))
            if rng.random() < gc_prob:
                gap += min(60_000, int(200 * rng.paretovariate(1.2)))
            push(t + gap, HB, s, ("hb", inc[s]))
            continue
        if kind == LEAVE:
            if not static[s]:
                emit(t, s, "leave")
            alive[s] = False
            joining.discard(s)
            done_join.discard(s)
            push(t + rng.randint(5000, 20000), START, s)
            if not any(alive):
                empty[0] = True
            elif not static[s]:
                membership_change(t, s)
                maybe_sync(t)

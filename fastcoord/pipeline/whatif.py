"""What-if: a closed-loop simulation of a trace's consumers under other group settings.

Replay (replay.py) plays the requests a trace recorded; that cannot answer "what if the
session timeout were 30 s", because the clients would have answered differently. Here
the trace only gives each consumer's *behaviour*, and simulated Kafka consumers act it
out against a real GroupCoordinator (ManualClock, time moved exactly with
`advance_time`) under each configuration of a grid.

Behaviour, per incarnation (one member id of the trace, or several: a dynamic
consumer that lost its id in a pause and joined again with none, from its own
connection, or in a trace without connections from its client id after a request with
no id, is one consumer that paused (`_resumes`); `derive_behaviour`):
- its heartbeat interval: the median gap between its consecutive heartbeats, and the
  times of its heartbeats: the simulated consumer heartbeats when the real one did (the
  next one within one and a half intervals; else one interval on from the latest one,
  or from a pause's end: a resumed client heartbeats at once), so that its session runs
  out when the real one did, not up to an interval early;
- its pauses: gaps between consecutive contacts longer than 1.5 heartbeat intervals
  (GC pauses, stalled processes); gaps after a join or a sync are waits for the
  coordinator, not pauses;
- its max.poll.interval.ms: the rebalance timeout its joins carried (one whose join the
  trace does not hold: its group's median, else Kafka's 300 s default);
- how it ended: "leave" (its last request was a LeaveGroup), "restart" (a static
  member whose instance id comes back with a new member id: static members never send
  LeaveGroup), "crash" (no leave, silent for more than two heartbeat intervals before
  the trace ends; a dynamic member that comes back is a crash and a restart), or "end"
  (alive when the trace ends);
- its slot: the consumer process it belongs to across restarts (the instance id of a
  static member; for a dynamic member, the earlier incarnation with the same client id
  that had stopped by then), so `--static on` can give every slot an instance id.

Simulated consumer (Kafka's classic consumer client, zero network latency): join with
member id "" (answer MEMBER_ID_REQUIRED: join again with the id), sync after the join
(the leader sends an assignment for every member of its join answer), heartbeat every
heartbeat interval once synced; REBALANCE_IN_PROGRESS and ILLEGAL_GENERATION: rejoin
with its member id; UNKNOWN_MEMBER_ID: forget the id and rejoin; FENCED_INSTANCE_ID:
the consumer stops (fatal in Kafka). During a pause it does nothing (a response that
arrives is handled when the pause ends). A pause longer than max.poll.interval.ms is a
poll timeout when it ends: a dynamic member sends LeaveGroup and rejoins as a new
member, a static one rejoins with its instance id. At its crash time it stops all
contact; at a clean stop a dynamic member sends LeaveGroup, a static one just goes
away; a restart starts a new process (static: same instance id).

The same simulation, recording every request its consumers send (`trace_rows`, with
auto-commits: `commit_interval_ms`), is the synthetic trace generator (gen.py).

Each (configuration, coordinator shard) is an independent deterministic simulation
(`simulate_shard`); its groups share one coordinator. Each group is observed until one
session timeout (its longest) past the trace's end, so that a crash near the end is
still detected. `--session-timeout trace` runs each consumer with the session timeout
its joins carried; with `--static trace` too (and the trace's own rebalance timeouts
and heartbeat intervals), the grid point is the baseline: the settings the trace ran
with (`WhatIfConfig.is_baseline`), which the report compares every other one with.

Measured per configuration (`summarize`): rebalances (the one that first forms each
group is counted apart, as `initial_rebalances`: every configuration pays it and a
trace of a running system would not contain it), rebalances per hour of the trace's
span (the same for every configuration), time groups spent rebalancing (total, mean,
p99, fraction of group-time), false
expirations (members the coordinator removed, by session or rebalance timeout, while
their simulated consumer was alive), crash detection latency p50/p99 (from the crash to
the coordinator dropping the member: session expiry, or replacement by the restarted
static instance; mean and nearest-rank percentiles), and counts (crashes, undetected ones, poll
timeouts, leaves, fenced consumers).

Tables (see the *_SCHEMA constants): summary (one row per configuration), rebalances,
removals, groups; `whatif_local` computes them in one process, `whatif_spark` runs the
(configuration, shard) simulations as Spark tasks; both give the same rows.
"""
from __future__ import annotations

import bisect
import heapq
import json
import logging
import math
import os
import sys
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc

from .. import CoordinatorConfig, Errors, GroupCoordinator, ManualClock
from ..core.store import InMemoryStore
from ._gc import collected_after, fewer_collections
from .replay import (COMMIT_PARTITION, NUM_SHARDS, leave_answer, member_ids, read_members,
                     rows_table, sort_canonical, split_by_shard)

log = logging.getLogger("fastcoord.pipeline")

PAUSE_FACTOR = 1.5           # a contact gap longer than this many heartbeat intervals
CRASH_FACTOR = 2             # silent this many heartbeat intervals before the end: crashed
DEFAULT_HEARTBEAT_MS = 3000  # Kafka's heartbeat.interval.ms default
DEFAULT_SESSION_MS = 45_000  # Kafka's session.timeout.ms default (3.0+)
DEFAULT_MAX_POLL_MS = 300_000  # max.poll.interval.ms default: a join's rebalance timeout
RETRY_BACKOFF_MS = 100       # Kafka's retry.backoff.ms, for errors a consumer retries later
INITIAL_DELAY_MS = 3000      # group.initial.rebalance.delay.ms of the simulated coordinator
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
TRACE_TOPIC = "events"       # the topic a recorded commit commits (trace_rows)
TRACE_RECORDS_PER_S = 100    # ... and how fast its consumers read it

# the trace columns the behaviour needs (the rest is not shipped to Spark workers)
COLUMNS = ("seq", "time_ms", "group_id", "member_id", "instance_id", "event",
           "session_timeout_ms", "rebalance_timeout_ms", "client_id", "connection")

_KEYS = [("config", pa.int32()), ("shard", pa.int32()), ("group_id", pa.string())]
REBALANCES_SCHEMA = pa.schema(_KEYS + [
    ("generation", pa.int32()), ("start_ms", pa.int64()), ("end_ms", pa.int64()),
    ("duration_ms", pa.int64()), ("cause", pa.string()), ("members_before", pa.int32()),
    ("members_after", pa.int32())])
REMOVALS_SCHEMA = pa.schema(_KEYS + [
    ("slot", pa.string()), ("member_id", pa.string()), ("time_ms", pa.int64()),
    ("kind", pa.string()), ("reason", pa.string()), ("latency_ms", pa.int64())])
GROUPS_SCHEMA = pa.schema(_KEYS + [
    ("incarnations", pa.int32()), ("rebalances", pa.int64()), ("rebalancing_ms", pa.int64()),
    ("false_expirations", pa.int64()), ("crashes", pa.int64()),
    ("crashes_detected", pa.int64()), ("poll_timeouts", pa.int64()), ("leaves", pa.int64()),
    ("fenced", pa.int64()), ("requests", pa.int64()), ("session_timeout_ms", pa.int64()),
    ("static_incarnations", pa.int64())])
SUMMARY_SCHEMA = pa.schema([
    ("config", pa.int32()), ("label", pa.string()), ("session_timeout_ms", pa.int64()),
    ("static", pa.string()), ("rebalance_timeout_ms", pa.int64()),
    ("heartbeat_interval_ms", pa.int64()), ("groups", pa.int64()), ("incarnations", pa.int64()),
    ("sim_hours", pa.float64()), ("hours", pa.float64()), ("rebalances", pa.int64()),
    ("initial_rebalances", pa.int64()), ("rebalances_per_hour", pa.float64()),
    ("rebalancing_ms", pa.int64()), ("rebalance_mean_ms", pa.float64()),
    ("rebalance_p99_ms", pa.int64()), ("rebalancing_fraction", pa.float64()),
    ("false_expirations", pa.int64()), ("crashes", pa.int64()),
    ("crashes_detected", pa.int64()), ("crashes_undetected", pa.int64()),
    ("crash_detect_mean_ms", pa.float64()), ("crash_detect_p50_ms", pa.int64()),
    ("crash_detect_p99_ms", pa.int64()), ("poll_timeouts", pa.int64()), ("leaves", pa.int64()),
    ("fenced", pa.int64())])
TABLES = {"rebalances": REBALANCES_SCHEMA, "removals": REMOVALS_SCHEMA,
          "groups": GROUPS_SCHEMA}
SORT_KEYS = {"rebalances": ["config", "group_id", "start_ms"],
             "removals": ["config", "group_id", "time_ms", "slot", "member_id"],
             "groups": ["config", "group_id"], "summary": ["config"]}


# -- the grid --------------------------------------------------------------------------------

def _fmt(ms: Optional[int]) -> str:
    if ms is None:
        return "trace"
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


@dataclass(frozen=True)
class WhatIfConfig:
    """One grid point. None for session timeout / rebalance timeout / heartbeat
    interval: each consumer's own, from the trace (a session timeout: the one its joins
    carried). static: "on" (every slot gets an instance id), "off" (none), "trace" (as
    the trace had it). All four from the trace: the baseline, the setting the trace ran
    with (`is_baseline`)."""
    session_timeout_ms: Optional[int]
    static: str = "trace"
    rebalance_timeout_ms: Optional[int] = None
    heartbeat_interval_ms: Optional[int] = None

    def __post_init__(self) -> None:
        if self.static not in ("on", "off", "trace"):
            raise ValueError(f"static must be on, off or trace, got {self.static!r}")
        for name in ("session_timeout_ms", "rebalance_timeout_ms", "heartbeat_interval_ms"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v <= 0):
                raise ValueError(f"{name} must be a positive int, got {v!r}")

    @property
    def is_baseline(self) -> bool:
        return (self.session_timeout_ms is None and self.static == "trace"
                and self.rebalance_timeout_ms is None and self.heartbeat_interval_ms is None)

    @property
    def label(self) -> str:
        parts = [f"session={_fmt(self.session_timeout_ms)}", f"static={self.static}"]
        if self.rebalance_timeout_ms is not None:
            parts.append(f"rebalance={_fmt(self.rebalance_timeout_ms)}")
        if self.heartbeat_interval_ms is not None:
            parts.append(f"heartbeat={_fmt(self.heartbeat_interval_ms)}")
        return " ".join(parts)


BASELINE = WhatIfConfig(None, "trace")


def make_grid(session_timeouts: Sequence[Optional[int]], statics: Sequence[str] = ("trace",),
              rebalance_timeouts: Sequence[Optional[int]] = (None,),
              heartbeat_intervals: Sequence[Optional[int]] = (None,)) -> List[WhatIfConfig]:
    """The cross product, in a fixed order (a configuration's index is its id)."""
    return [WhatIfConfig(s, st, r, h) for s in session_timeouts for st in statics
            for r in rebalance_timeouts for h in heartbeat_intervals]


# -- behaviour from the trace ------------------------------------------------------------------

@dataclass
class Incarnation:
    group: str
    slot: str
    member: str
    instance_id: Optional[str]
    client_id: Optional[str]
    start_ms: int
    last_ms: int
    end: str                       # leave | restart | crash | end
    stop_ms: int                   # when it stops (leave/restart/crash); -1 for "end"
    heartbeat_ms: int
    rebalance_timeout_ms: Optional[int]
    pauses: Tuple[Tuple[int, int], ...]
    # the session timeout its first join carried (else its group's median, else Kafka's
    # default): what `session=trace` simulates it with
    session_timeout_ms: Optional[int] = None
    # the times of its heartbeats in the trace: the simulated consumer heartbeats when it
    # did (in phase with the trace; none: one interval after each sync)
    heartbeats: Tuple[int, ...] = ()


def _median(values: List[int]) -> Optional[int]:
    if not values:
        return None
    values = sorted(values)
    return values[(len(values) - 1) // 2]      # the lower median: an integer, no ties


def derive_behaviour(table: pa.Table, end_ms: Optional[int] = None) -> Dict[str, List[Incarnation]]:
    """Per group, its incarnations in start order. `end_ms`: when the whole trace ends
    (a chunk of a trace must pass the whole trace's end, for the crash rule)."""
    cols = [c for c in COLUMNS if c in table.column_names]
    t = table.select(cols).sort_by([("group_id", "ascending"), ("time_ms", "ascending"),
                                    ("seq", "ascending")])
    if t.num_rows == 0:
        return {}
    if end_ms is None:
        end_ms = pc.max(t.column("time_ms")).as_py()
    data = {c: t.column(c).to_pylist() for c in cols}
    n = t.num_rows
    rto_col = data.get("rebalance_timeout_ms", [None] * n)
    sto_col = data.get("session_timeout_ms", [None] * n)
    cid_col = data.get("client_id", [None] * n)
    conn_col = data.get("connection", [None] * n)
    per_group: Dict[str, Dict[str, dict]] = defaultdict(dict)
    # a first request with member "": its time and event, by its connection (a trace
    # without one: by its client id, all such a trace has)
    waiting: Dict[tuple, Tuple[int, str]] = {}
    for i in range(n):
        gid, mid, tm, ev = data["group_id"][i], data["member_id"][i], data["time_ms"][i], data["event"][i]
        inst, cid, conn = data["instance_id"][i], cid_col[i], conn_col[i]
        who = (gid, conn, None if conn is not None else cid, inst)
        if mid == "":
            # the id the coordinator gave it shows up on its next request
            waiting.setdefault(who, (tm, ev))
            continue
        inc = per_group[gid].get(mid)
        if inc is None:
            start, first = waiting.pop(who, (tm, "join"))
            inc = per_group[gid][mid] = {"member": mid, "inst": inst, "cid": cid,
                                          "process": (cid, _client_host(conn)),
                                          "start": min(start, tm), "times": [], "events": [],
                                          "rto": None, "sto": None, "conn_first": conn,
                                          # a request other than a join with no member
                                          # id: a live consumer that forgot its id
                                          "lost_id": first != "join"}
        inc["times"].append(tm)
        inc["events"].append(ev)
        inc["conn_last"] = conn
        if inst is not None:
            inc["inst"] = inst
        if ev == "join" and inc["rto"] is None and rto_col[i] is not None:
            inc["rto"] = int(rto_col[i])
        if ev == "join" and inc["sto"] is None and sto_col[i] is not None:
            inc["sto"] = int(sto_col[i])
    out: Dict[str, List[Incarnation]] = {}
    for gid in sorted(per_group):
        out[gid] = _group_behaviour(gid, list(per_group[gid].values()), end_ms)
    return out


def _client_host(connection: Optional[str]) -> Optional[str]:
    """The client's address in a Kafka connection id ("10.0.0.5:9092-10.0.1.7:40312-3":
    broker address:port, client address:port, a counter; addresses are IP literals,
    an IPv6 one with colons), else the connection as it is; None without one."""
    if connection is None:
        return None
    parts = connection.split("-")
    if len(parts) == 3 and ":" in parts[1]:
        return parts[1].rsplit(":", 1)[0]
    return connection


def _resumes(o: dict, d: dict) -> bool:
    """Whether dynamic incarnation `d` is `o`'s consumer carrying on under a new member
    id: it joined with no id after `o`'s last contact, from `o`'s own connection (a
    connection does not outlive its process), or, in a trace without connections, from
    `o`'s client id after a request that already had no id (librdkafka forgets its id
    when a pause outlasts its session and heartbeats with none before it rejoins; a new
    process joins first)."""
    if o["inst"] is not None or o["events"][-1] == "leave" or o["times"][-1] > d["start"]:
        return False
    if d["conn_first"] is not None:
        return o["conn_last"] == d["conn_first"]
    return d["lost_id"] and d["cid"] is not None and o["cid"] == d["cid"] \
        and o["conn_last"] is None


def _merge_resumed(incs: List[dict]) -> List[dict]:
    """Incarnations in start order, each dynamic one that resumes an earlier one's
    consumer (`_resumes`) folded into it: one consumer whose gap is a pause (the
    simulation's consumer loses its id in it, or not, as the session it runs with says),
    not a crash and a restart. Its join with no id is a contact (a wait for the
    coordinator follows it, not a pause)."""
    out: List[dict] = []
    # the dynamic incarnations kept so far, by the identity a resuming one must share:
    # their latest connection, else their client id
    by_identity: Dict[tuple, List[dict]] = defaultdict(list)
    for d in sorted(incs, key=lambda d: (d["start"], d["member"])):
        if d["inst"] is not None:
            out.append(d)
            continue
        key = _identity(d["conn_first"], d["cid"])
        cands = [o for o in by_identity[key] if _resumes(o, d)]
        if cands:
            o = max(cands, key=lambda o: (o["times"][-1], o["member"]))
            by_identity[key].remove(o)
            o["times"] += [d["start"]] + d["times"]
            o["events"] += ["join"] + d["events"]
            o["conn_last"] = d["conn_last"]
            o["rto"] = o["rto"] if o["rto"] is not None else d["rto"]
            o["sto"] = o["sto"] if o["sto"] is not None else d["sto"]
        else:
            o = d
            out.append(d)
        by_identity[_identity(o["conn_last"], o["cid"])].append(o)
    return out


def _identity(connection: Optional[str], client_id: Optional[str]) -> tuple:
    return ("connection", connection) if connection is not None else ("client", client_id)


def _group_behaviour(gid: str, incs: List[dict], end_ms: int) -> List[Incarnation]:
    incs = _merge_resumed(incs)
    for d in incs:
        times, events = d["times"], d["events"]
        hb_gaps = [b - a for a, b, ea, eb in zip(times, times[1:], events, events[1:])
                   if ea == "heartbeat" and eb == "heartbeat"]
        d["hb"] = _median(hb_gaps)
    known = [d["hb"] for d in incs if d["hb"] is not None]
    group_hb = _median(known) or DEFAULT_HEARTBEAT_MS
    group_session = _median([d["sto"] for d in incs if d["sto"] is not None]) \
        or DEFAULT_SESSION_MS
    # max.poll.interval.ms is the rebalance timeout a consumer's joins carry: one that
    # joined before the trace began is taken to run with its group's
    group_rto = _median([d["rto"] for d in incs if d["rto"] is not None])
    # slots: static members by instance id; a dynamic one continues the latest stopped
    # incarnation of its process: its client id and the client host of its connection
    # (a process restarted under the same client.id on the same host; consumers of
    # several hosts often share a client id: librdkafka's is "rdkafka"). A trace without
    # connections has the client id alone.
    slot_of: Dict[str, str] = {}
    last_in_slot: Dict[str, dict] = {}
    open_by_process: Dict[tuple, List[dict]] = defaultdict(list)
    for d in incs:
        if d["inst"] is not None:
            slot = d["inst"]
        else:
            prev = None
            process = d["process"]
            if d["cid"] is not None:
                done = [p for p in open_by_process[process] if p["times"][-1] <= d["start"]]
                if done:
                    prev = max(done, key=lambda p: (p["times"][-1], p["member"]))
                    open_by_process[process].remove(prev)
            slot = slot_of[prev["member"]] if prev is not None else d["member"]
            if d["cid"] is not None:
                open_by_process[process].append(d)
        slot_of[d["member"]] = slot
        d["slot"] = slot
        d["next"] = None
        if slot in last_in_slot:
            last_in_slot[slot]["next"] = d
        last_in_slot[slot] = d
    out = []
    for d in incs:
        hb = d["hb"] or group_hb
        times, events = d["times"], d["events"]
        pauses = tuple((a, b) for a, b, ea in zip(times, times[1:], events)
                       if ea not in ("join", "sync") and b - a > PAUSE_FACTOR * hb)
        last = times[-1]
        nxt = d["next"]
        if events[-1] == "leave":
            end = "leave"
        elif nxt is not None:
            end = "restart" if d["inst"] is not None else "crash"
        elif end_ms - last > CRASH_FACTOR * hb:
            end = "crash"
        else:
            end = "end"
        stop = -1 if end == "end" else (min(last, nxt["start"]) if nxt is not None else last)
        out.append(Incarnation(gid, d["slot"], d["member"], d["inst"], d["cid"], d["start"],
                               last, end, stop, hb,
                               d["rto"] if d["rto"] is not None else group_rto, pauses,
                               d["sto"] or group_session,
                               tuple(t for t, ev in zip(times, events) if ev == "heartbeat")))
    return out


# -- the simulation ------------------------------------------------------------------------------

# event kinds, and their order among events of the same millisecond: the coordinator's
# checks first (its timers fire before requests of that ms), then process starts, poll
# timeouts, responses and heartbeats, stops (a contact at the stop time is made), and a
# group's end of observation last (everything of its last ms is in)
_CHECK, _GCHECK, _START, _POLL, _JOINED, _SYNCED, _HB, _REJOIN, _STOP, _GEND = range(10)
_PRIO = {_CHECK: 0, _GCHECK: 0, _START: 1, _POLL: 2, _JOINED: 3, _SYNCED: 3, _HB: 3,
         _REJOIN: 3, _STOP: 4, _GEND: 5}

_NONE = int(Errors.NONE)
_RIP = int(Errors.REBALANCE_IN_PROGRESS)
_UNKNOWN = int(Errors.UNKNOWN_MEMBER_ID)
_ILLEGAL = int(Errors.ILLEGAL_GENERATION)
_MIDREQ = int(Errors.MEMBER_ID_REQUIRED)
_FENCED = int(Errors.FENCED_INSTANCE_ID)
_REBALANCING = ("PreparingRebalance", "CompletingRebalance")
_PROTOCOLS = [("range", b"")]
_PROTOCOL_NAMES = [name for name, _ in _PROTOCOLS]


class _Client:
    """One simulated consumer process (one incarnation)."""
    __slots__ = ("inc", "group", "inst", "hb", "rto", "session", "starts", "ends", "alive",
                 "crashed", "crash_at", "rid", "gen", "state", "epoch", "last_touch", "check_at",
                 "leader_members", "next_commit", "anchors")

    def __init__(self, inc: Incarnation, inst: Optional[str], hb: int, rto: int, session: int):
        self.inc = inc
        self.group = inc.group
        self.inst = inst
        self.hb = hb
        self.rto = rto
        self.session = session
        self.starts = [a for a, _ in inc.pauses]
        self.ends = [b for _, b in inc.pauses]
        self.alive = True
        self.crashed = False
        self.crash_at = -1
        self.rid: Optional[str] = None
        self.gen = -1
        self.state = "down"
        self.epoch = 0
        self.last_touch = -1
        self.check_at: Optional[int] = None
        self.leader_members: Optional[List[str]] = None
        self.next_commit = 0            # when its next auto-commit is due (trace recording)
        # when its heartbeat timer fired in the trace: its heartbeats (only its first,
        # the phase, when it runs another interval than the trace's) and the end of each
        # pause (a resumed process heartbeats at once)
        beats = inc.heartbeats if hb == inc.heartbeat_ms else inc.heartbeats[:1]
        self.anchors = sorted(set(beats).union(self.ends)) if beats else []

    def next_beat(self, t: int) -> int:
        """Its next heartbeat after t: its next one in the trace, when that comes within
        one and a half intervals (its timer ran on, whatever the interval's jitter); else
        one interval on, in the phase of the latest one at or before t (else the first)."""
        anchors = self.anchors
        if not anchors:
            return t + self.hb
        i = bisect.bisect_right(anchors, t)
        if i < len(anchors) and anchors[i] - t <= self.hb * PAUSE_FACTOR:
            return anchors[i]
        a = anchors[max(0, i - 1)]
        return a + ((t - a) // self.hb + 1) * self.hb

    def paused_until(self, t: int) -> Optional[int]:
        """The end of the pause that covers t (strictly inside it), else None."""
        i = bisect.bisect_left(self.starts, t) - 1
        if i >= 0 and t < self.ends[i]:
            return self.ends[i]
        return None


class _Group:
    __slots__ = ("gid", "state", "members", "generation", "open", "formed", "rtos", "stats",
                 "check_times", "epoch", "version", "sessions", "done")

    def __init__(self, gid: str):
        self.gid = gid
        self.state = "Empty"
        self.members: set = set()
        self.generation = 0
        self.open: Optional[list] = None         # [start_ms, cause, members_before]
        self.formed = False
        self.rtos: set = set()
        self.stats = defaultdict(int)
        self.check_times: set = set()
        self.epoch: Optional[int] = None          # the members epoch `members` was read at
        self.version: Optional[int] = None        # the group_version of that read
        self.sessions: set = set()                # its consumers' session timeouts
        self.done: Optional[dict] = None          # its stats when its observation ended


class ShardSimulation:
    """The closed loop for one shard's groups under one configuration.

    `trace_rows`: a list that receives every request the consumers send before `end_ms`,
    as trace rows (gen.py's closed-loop generator); `commit_interval_ms`: consumers also
    commit an offset with a heartbeat when that long has passed since their last commit
    (Kafka's auto-commit; None: no commits, as in a what-if)."""

    def __init__(self, behaviour: Dict[str, List[Incarnation]], config: WhatIfConfig, *,
                 config_id: int = 0, shard: int = 0, end_ms: int, impl: Optional[str] = None,
                 num_shards: int = NUM_SHARDS, trace_rows: Optional[list] = None,
                 commit_interval_ms: Optional[int] = None):
        self.behaviour = behaviour
        self.cfg = config
        self.config_id = config_id
        self.shard = shard
        # each group is observed until one of its longest session timeout past the trace's
        # end (a crash near the end is still detected); its consumers run on to the
        # shard's horizon, the latest of its groups' (nothing after a group's own end is
        # recorded: its results do not depend on the groups it shares a shard with)
        self.group_end = {gid: end_ms + max(self._session_of(i) for i in incs)
                          for gid, incs in behaviour.items() if incs}
        self.horizon = max(self.group_end.values(), default=end_ms)
        self.end_ms = end_ms
        self.trace_rows = trace_rows
        self.commit_interval_ms = commit_interval_ms
        self._commits = 0
        self._partitions: Dict[str, Dict[str, int]] = {}    # group -> slot -> partition
        self.impl = impl
        self.num_shards = num_shards
        self.heap: list = []
        self._seq = 0
        self.groups: Dict[str, _Group] = {}
        self.by_rid: Dict[tuple, _Client] = {}
        self.leaving: set = set()                 # (group, member id) we sent LeaveGroup for
        self.replaced: set = set()                # (group, member id) a static restart replaces
        self.static_rid: Dict[tuple, str] = {}    # (group, instance id) -> latest member id
        self.rebalances: List[tuple] = []
        self.removals: List[tuple] = []

    def _session_of(self, inc: Incarnation) -> int:
        """The session timeout a consumer runs with: the configuration's, or (session
        from the trace) the one its joins carried."""
        return self.cfg.session_timeout_ms or inc.session_timeout_ms or DEFAULT_SESSION_MS

    # -- plumbing ------------------------------------------------------------------------------
    def _push(self, t: int, kind: int, obj, arg=None) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (t, _PRIO[kind], self._seq, kind, obj, arg))

    def _step(self, t: int) -> None:
        if t > self.now:
            self._dirty.clear()           # callbacks inside requests were observed there
            self.coord.advance_time(t - self.now)
            self.now = t
            # callbacks that fired inside the step changed their groups
            for gid in sorted(self._dirty):
                self._observe(gid, "timeout")
            self._dirty.clear()

    def _respond(self, kind: int, c: _Client, row: int = -1):
        epoch = c.epoch
        gid = c.group

        def callback(result, kind=kind, c=c, epoch=epoch, gid=gid):
            if row >= 0:
                self._answered(row, result.error)
            # never call the coordinator from inside its callback: queue the consumer's
            # reaction; but what the coordinator did happened now, whatever the consumer
            # is doing (paused, crashed): note it at this time
            self._dirty.add(gid)
            self._refreshed(kind, c, epoch, result, self.coord.clock.now_ms())
            self._push(self.coord.clock.now_ms(), kind, c, (epoch, result))
        return callback

    def _refreshed(self, kind: int, c: _Client, epoch: int, result, now: int) -> None:
        """Track which sessions the coordinator restarted with this answer (it does so
        for every answer to a parked join or sync, for every member when a join round
        completes, and for a static member's replacement)."""
        err = int(result.error)
        if kind == _SYNCED:
            if err in (_NONE, _RIP) and c.rid is not None:
                self._touch(c, now)
            return
        fresh = False
        if err in (_NONE, _MIDREQ) and (epoch == c.epoch or not c.alive):
            # the id is the process's from now (a dead one's too: that id's expiry is
            # the detection of its crash)
            fresh = result.member_id != c.rid
            self._adopt(c, result.member_id)
        if err != _NONE:
            return
        gv = self.groups[c.group]
        if result.generation_id > gv.generation:
            gv.generation = result.generation_id
            for rid in gv.members:
                other = self.by_rid.get((c.group, rid))
                if other is not None:
                    self._touch(other, now)
            fresh = True
        if fresh and c.rid == result.member_id:
            self._touch(c, now)

    def _touch(self, c: _Client, t: int) -> None:
        """The coordinator refreshed c's session at t: check it one session later."""
        if t > c.last_touch:
            c.last_touch = t
        if c.check_at is None:
            c.check_at = c.last_touch + c.session
            self._push(c.check_at, _CHECK, c)

    def _group_check(self, gv: _Group, t: int) -> None:
        if t not in gv.check_times and t <= self.horizon:
            gv.check_times.add(t)
            self._push(t, _GCHECK, gv)

    # -- observing the coordinator ---------------------------------------------------------------
    def _observe(self, gid: str, cause: str) -> None:
        gv = self.groups[gid]
        if gv.done is not None:
            return                          # past its end of observation
        read = read_members(self.coord, gid, gv)
        if read is None:
            return
        state, current = read
        now = self.now
        before = len(gv.members)
        for rid in sorted(gv.members - current):
            reason = self._removed(gv, rid, now)
            if cause == "timeout" and reason in ("session", "rebalance"):
                cause = reason + "-timeout"
        gv.members = current
        if state == "PreparingRebalance" and gv.state != state:
            self._arm_rebalance(gv, now, from_empty=gv.state == "Empty")
        if gv.open is None and state in _REBALANCING:
            if not gv.formed:
                cause = "initial"
            gv.open = [now, cause, before]
        elif gv.open is not None and state not in _REBALANCING:
            self._close(gv, now, len(current))
        if state == "CompletingRebalance" and gv.state != "CompletingRebalance":
            for rto in gv.rtos:                       # the DelayedSync of the new generation
                self._group_check(gv, now + rto)
        gv.state = state

    def _close(self, gv: _Group, now: int, after: int) -> None:
        start, cause, before = gv.open
        gv.open = None
        gv.formed = True
        self.rebalances.append((self.config_id, self.shard, gv.gid, gv.generation, start, now,
                                now - start, cause, before, after))

    def _arm_rebalance(self, gv: _Group, now: int, from_empty: bool) -> None:
        """Checks where the coordinator's join round can time out: the rebalance timeout
        (the group's is the largest of its members'; each one is a candidate) and, from
        Empty, every step of the initial rebalance delay."""
        for rto in sorted(gv.rtos):
            self._group_check(gv, now + rto)
            if from_empty:
                for k in range(1, rto // INITIAL_DELAY_MS + 1):
                    self._group_check(gv, now + k * INITIAL_DELAY_MS)

    def _removed(self, gv: _Group, rid: str, now: int) -> Optional[str]:
        """Classify a member id the coordinator dropped; returns the reason recorded."""
        key = (gv.gid, rid)
        c = self.by_rid.pop(key, None)
        if key in self.leaving:
            self.leaving.discard(key)
            return None
        if c is None:
            return None
        reason = "replaced" if key in self.replaced else (
            "session" if now >= c.last_touch + c.session else "rebalance")
        self.replaced.discard(key)
        if reason == "replaced" and c.alive and c.rid != rid:
            return None                   # a static consumer rejoining replaced its own old id
        latency = -1
        if c.crashed:
            kind = "crash"
            latency = now - c.crash_at
            gv.stats["crashes_detected"] += 1
        elif not c.alive:
            kind = "stopped"
        elif reason == "replaced":
            kind = "fenced"               # a live process whose instance id was taken over
        else:
            kind = "false"
            gv.stats["false_expirations"] += 1
        self.removals.append((self.config_id, self.shard, gv.gid, c.inc.slot, rid, now, kind,
                              reason, latency))
        return reason

    # -- the consumer ---------------------------------------------------------------------------
    def _defer(self, c: _Client, t: int, kind: int, arg) -> bool:
        """A paused process handles this when its pause ends."""
        until = c.paused_until(t)
        if until is None:
            return False
        self._push(until, kind, c, arg)
        return True

    def _join(self, c: _Client, rid: str) -> None:
        gv = self.groups[c.group]
        c.state = "joining"
        c.epoch += 1                      # whatever the consumer had in flight is obsolete
        c.leader_members = None
        if rid == "" and c.inst is not None:
            old = self.static_rid.get((c.group, c.inst))
            if old is not None and (c.group, old) in self.by_rid:
                self.replaced.add((c.group, old))
        gv.stats["requests"] += 1
        row = self._record(c, "join")
        self.coord.join_group(c.group, rid, "consumer", self._join_protocols(c),
                              session_timeout_ms=c.session, rebalance_timeout_ms=c.rto,
                              group_instance_id=c.inst, client_id=c.inc.slot,
                              callback=self._respond(_JOINED, c, row))
        self._group_check(gv, self.now + NEW_MEMBER_JOIN_TIMEOUT_MS)
        # a consumer that had a generation rejoins; one without is a new member
        self._observe(c.group, "rejoin" if c.gen >= 0 else "join")

    def _join_protocols(self, c: _Client) -> list:
        """The protocols (name, metadata) c's JoinGroup carries."""
        return _PROTOCOLS

    def _adopt(self, c: _Client, rid: str) -> None:
        if rid and rid != c.rid:
            c.rid = rid
            self.by_rid[(c.group, rid)] = c
            if c.inst is not None:
                self.static_rid[(c.group, c.inst)] = rid

    def _forget(self, c: _Client) -> None:
        """The consumer resets its member id (it was told it is unknown)."""
        if c.rid is not None:
            self._observe(c.group, "timeout")      # record the removal before the id goes
        c.rid = None
        c.gen = -1

    def _sync(self, c: _Client) -> None:
        c.state = "syncing"
        gv = self.groups[c.group]
        gv.stats["requests"] += 1
        row = self._record(c, "sync")
        assignments = {m: b"" for m in c.leader_members} if c.leader_members else None
        self.coord.sync_group(c.group, c.gen, c.rid, assignments, group_instance_id=c.inst,
                              callback=self._respond(_SYNCED, c, row))
        self._observe(c.group, "timeout")

    def _on_error(self, c: _Client, err: int) -> None:
        """What the consumer does with an error answer to join/sync/heartbeat."""
        gv = self.groups[c.group]
        if err == _FENCED:
            c.alive = False
            c.state = "down"
            gv.stats["fenced"] += 1
        elif err == _UNKNOWN:
            self._forget(c)
            self._join(c, "")
        elif err in (_RIP, _ILLEGAL):
            if err == _ILLEGAL:
                c.gen = -1
            self._join(c, c.rid or "")
        else:                                       # anything else: retry after a backoff
            c.state = "down"
            self._push(self.now + RETRY_BACKOFF_MS, _REJOIN, c, c.epoch)

    def _start(self, inc: Incarnation) -> None:
        cfg = self.cfg
        if cfg.static == "on":
            inst = inc.instance_id or inc.slot
        elif cfg.static == "off":
            inst = None
        else:
            inst = inc.instance_id
        session = self._session_of(inc)
        hb = cfg.heartbeat_interval_ms or inc.heartbeat_ms
        if hb >= session:                 # Kafka refuses heartbeat >= session: what an operator would set
            hb = max(1, session // 3)
        rto = cfg.rebalance_timeout_ms or inc.rebalance_timeout_ms or DEFAULT_MAX_POLL_MS
        c = _Client(inc, inst, hb, rto, session)
        gv = self.groups[inc.group]
        gv.rtos.add(rto)
        gv.sessions.add(session)
        gv.stats["incarnations"] += 1
        gv.stats["static_incarnations"] += inst is not None
        if inc.end != "end":
            self._push(inc.stop_ms, _STOP, c)
        for a, b in inc.pauses:
            if b - a > rto:
                self._push(b, _POLL, c)
        self._join(c, "")

    def _stop(self, c: _Client) -> None:
        if not c.alive:
            return
        gv = self.groups[c.group]
        c.alive = False
        c.epoch += 1
        c.state = "down"
        if c.inc.end == "crash":
            c.crashed = True
            c.crash_at = self.now
            gv.stats["crashes"] += 1
        elif c.inst is None and c.rid is not None:
            # a dynamic consumer's close() sends LeaveGroup; a static one's does not
            self._leave(c)

    def _leave(self, c: _Client) -> None:
        gv = self.groups[c.group]
        gv.stats["leaves"] += 1
        gv.stats["requests"] += 1
        row = self._record(c, "leave")
        self.leaving.add((c.group, c.rid))
        answer = leave_answer(self.coord.leave_group(c.group, [(c.rid, None)]))
        if row >= 0:
            self._answered(row, answer)
        self._observe(c.group, "leave")
        self.by_rid.pop((c.group, c.rid), None)
        self.leaving.discard((c.group, c.rid))

    def _poll_timeout(self, c: _Client) -> None:
        """max.poll.interval.ms passed during a pause: leave (dynamic) and rejoin."""
        if not c.alive:
            return
        self.groups[c.group].stats["poll_timeouts"] += 1
        c.epoch += 1
        if c.inst is None and c.rid is not None:
            self._leave(c)
        c.rid = None
        c.gen = -1
        self._join(c, "")

    def _on_joined(self, c: _Client, result) -> None:
        err = int(result.error)
        if err == _MIDREQ:
            self._join(c, c.rid)
            return
        if err != _NONE:
            self._on_error(c, err)
            return
        c.gen = result.generation_id
        if result.leader_id == result.member_id and not result.skip_assignment:
            c.leader_members = [m.member_id for m in result.members]
        self._sync(c)

    def _on_synced(self, c: _Client, result) -> None:
        err = int(result.error)
        if err != _NONE:
            self._on_error(c, err)
            return
        c.state = "stable"
        self._push(c.next_beat(self.now), _HB, c, c.epoch)

    def _heartbeat(self, c: _Client) -> None:
        gv = self.groups[c.group]
        gv.stats["requests"] += 1
        row = self._record(c, "heartbeat")
        err = int(self.coord.heartbeat(c.group, c.rid, c.gen, c.inst))
        if row >= 0:
            self._answered(row, err)
        if err in (_NONE, _RIP):
            self._touch(c, self.now)
        if err == _NONE:
            if self.commit_interval_ms is not None and self.now >= c.next_commit:
                self._commit(c)
            self._push(c.next_beat(self.now), _HB, c, c.epoch)
        else:
            self._on_error(c, err)

    def _commit(self, c: _Client) -> None:
        """An auto-commit right after a heartbeat the coordinator accepted. Its answer
        changes nothing the consumer does (the heartbeat's already told it the group is
        stable) and it refreshes the session at the heartbeat's own time."""
        c.next_commit = self.now + self.commit_interval_ms
        self.groups[c.group].stats["requests"] += 1
        row = self._record(c, "commit")
        self._commits += 1
        errors = self.coord.commit_offsets(c.group, c.rid, c.gen,
                                           {COMMIT_PARTITION: self._commits},
                                           group_instance_id=c.inst)
        if row >= 0:
            self._answered(row, errors[COMMIT_PARTITION])

    def _record(self, c: _Client, event: str) -> int:
        """A request as a trace row, when recording and before the end: its index, else
        -1. The incarnation's name is its member id, as the synthetic traces have it;
        `generation` is the one the consumer sent, `error` its answer (`_answered`)."""
        rows = self.trace_rows
        if rows is None or self.now >= self.end_ms:
            return -1
        inc = c.inc
        if event == "join":
            rows.append([self.now, c.group, inc.member, c.inst, event, c.session, c.rto,
                         "consumer", _PROTOCOL_NAMES, inc.client_id, None, None, None])
        else:                               # (LeaveGroup carries no generation)
            rows.append([self.now, c.group, inc.member, c.inst, event, None, None, None, None,
                         inc.client_id, None if event == "leave" else c.gen, None,
                         self._offsets(c) if event == "commit" else None])
        return len(rows) - 1

    def _offsets(self, c: _Client) -> list:
        """What a recorded commit commits: its consumer slot's own partition of topic
        TRACE_TOPIC (the slots of a group numbered in order of their first commit, so
        every incarnation of a slot commits the same one), at the position a consumer
        reading TRACE_RECORDS_PER_S records a second has reached by now."""
        slots = self._partitions.setdefault(c.group, {})
        partition = slots.setdefault(c.inc.slot, len(slots))
        # (a (topic, partition, offset) tuple: Arrow converts it to its struct several
        # times faster than a dict)
        return [(TRACE_TOPIC, partition, self.now * TRACE_RECORDS_PER_S // 1000)]

    def _answered(self, row: int, error) -> None:
        """The answer to a recorded request, in its row (a request answered after the end
        is recorded too: the trace shows what the consumer saw)."""
        self.trace_rows[row][11] = int(error)

    def _check(self, c: _Client, t: int) -> None:
        c.check_at = None
        if c.rid is None or (c.group, c.rid) not in self.by_rid:
            return
        due = c.last_touch + c.session
        if due > t:
            c.check_at = due
            self._push(due, _CHECK, c)
            return
        self._observe(c.group, "session-timeout")

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> Dict[str, pa.Table]:
        with fewer_collections():
            return self._run()

    def _run(self) -> Dict[str, pa.Table]:
        incs = [i for gid in sorted(self.behaviour) for i in self.behaviour[gid]]
        if not incs:
            return self.tables()
        t0 = min(i.start_ms for i in incs)
        self.now = t0
        self._dirty: set = set()
        # the what-if's session timeout is the point: let the coordinator accept it
        config = CoordinatorConfig(
            num_shards=self.num_shards,
            group_min_session_timeout_ms=min([6000] + [self._session_of(i) for i in incs]),
            group_max_session_timeout_ms=max([1_800_000] + [self._session_of(i) for i in incs]),
            group_initial_rebalance_delay_ms=INITIAL_DELAY_MS,
            new_member_join_timeout_ms=NEW_MEMBER_JOIN_TIMEOUT_MS)
        # (a store that keeps nothing: nothing reads a simulation's records back)
        self.coord = GroupCoordinator(config, clock=ManualClock(t0), impl=self.impl,
                                      store=InMemoryStore(group_records=False, offsets=False),
                                      member_id_factory=member_ids(self.config_id, self.shard))
        for gid in sorted(self.behaviour):
            self.groups[gid] = _Group(gid)
            if gid in self.group_end:
                self._push(self.group_end[gid], _GEND, self.groups[gid])
        for inc in incs:
            self._push(inc.start_ms, _START, inc)
        heap = self.heap
        while heap and heap[0][0] <= self.horizon:
            t, _, _, kind, obj, arg = heapq.heappop(heap)
            self._step(t)
            if kind == _CHECK:
                self._check(obj, t)
            elif kind == _GCHECK:
                obj.check_times.discard(t)
                if obj.state in ("Stable", "Empty"):
                    continue        # join/sync timers exist only while rebalancing
                self._observe(obj.gid, "timeout")
                if obj.state == "PreparingRebalance":
                    # a join round that timed out with only static members left re-arms
                    self._arm_rebalance(obj, t, from_empty=False)
            elif kind == _START:
                self._start(obj)
            elif kind == _STOP:
                self._stop(obj)
            elif kind == _GEND:
                self._end_group(obj, t)
            elif kind == _POLL:
                self._poll_timeout(obj)
            else:
                c = obj
                epoch = arg[0] if kind in (_JOINED, _SYNCED) else arg
                if epoch != c.epoch or not c.alive:
                    continue
                if self._defer(c, t, kind, arg):
                    continue
                if kind == _JOINED:
                    self._on_joined(c, arg[1])
                elif kind == _SYNCED:
                    self._on_synced(c, arg[1])
                elif kind == _HB:
                    if c.state == "stable":
                        self._heartbeat(c)
                elif kind == _REJOIN:
                    self._join(c, c.rid or "")
        self._step(self.horizon)
        for gid in sorted(self.groups):
            if self.groups[gid].done is None:
                self._end_group(self.groups[gid], self.horizon)
        return self.tables()

    def _end_group(self, gv: _Group, t: int) -> None:
        """The group's end of observation: what the coordinator did last is recorded, a
        rebalance still open is counted up to now (end -1: unfinished), its counts are
        frozen."""
        self._observe(gv.gid, "timeout")
        if gv.open is not None:
            start, cause, before = gv.open
            gv.open = None
            self.rebalances.append((self.config_id, self.shard, gv.gid, gv.generation, start,
                                    -1, t - start, cause, before, len(gv.members)))
        gv.done = defaultdict(int, gv.stats)

    def tables(self) -> Dict[str, pa.Table]:
        per_group = defaultdict(lambda: [0, 0])
        for r in self.rebalances:
            per_group[r[2]][0] += 1
            per_group[r[2]][1] += r[6]
        groups = []
        for gid in sorted(self.groups):
            gv = self.groups[gid]
            s = gv.done if gv.done is not None else gv.stats
            groups.append((self.config_id, self.shard, gid, s["incarnations"],
                           per_group[gid][0], per_group[gid][1], s["false_expirations"],
                           s["crashes"], s["crashes_detected"], s["poll_timeouts"], s["leaves"],
                           s["fenced"], s["requests"], max(gv.sessions, default=-1),
                           s["static_incarnations"]))
        return {"rebalances": rows_table(self.rebalances, REBALANCES_SCHEMA),
                "removals": rows_table(self.removals, REMOVALS_SCHEMA),
                "groups": rows_table(groups, GROUPS_SCHEMA)}


def simulate_shard(table: pa.Table, config: WhatIfConfig, *, config_id: int = 0,
                   shard: int = 0, end_ms: int, impl: Optional[str] = None,
                   num_shards: int = NUM_SHARDS) -> Dict[str, pa.Table]:
    """One (configuration, shard) simulation: `table` holds that shard's trace rows;
    `end_ms` is the whole trace's end."""
    behaviour = derive_behaviour(table, end_ms)
    with collected_after():     # the simulation dropped inside, its garbage collected (_gc)
        tables = ShardSimulation(behaviour, config, config_id=config_id, shard=shard,
                                 end_ms=end_ms, impl=impl, num_shards=num_shards).run()
    return tables


# -- aggregation ----------------------------------------------------------------------------------

def nearest_rank(values: Sequence[int], p: float) -> int:
    """The p-th percentile by nearest rank (an observed value; -1 for none)."""
    if not values:
        return -1
    v = sorted(values)
    return int(v[max(0, math.ceil(p / 100.0 * len(v)) - 1)])


def canonical(table: pa.Table, name: str) -> pa.Table:
    return sort_canonical(table, SUMMARY_SCHEMA if name == "summary" else TABLES[name],
                          SORT_KEYS[name])


def summarize(tables: Dict[str, pa.Table], configs: Sequence[WhatIfConfig], start_ms: int,
              end_ms: int) -> pa.Table:
    """One row per configuration from the detail tables of all its shards. Every rate
    is over the trace's own span (`hours`), the same for every configuration: the
    simulated span (`sim_hours`) runs a session timeout longer, and a rate over it would
    favour long session timeouts; what happens in that tail is a consequence of the
    trace's events and is counted."""
    reb = tables["rebalances"].to_pylist()
    rem = tables["removals"].to_pylist()
    grp = tables["groups"].to_pylist()
    rows = []
    for i, cfg in enumerate(configs):
        r = [x for x in reb if x["config"] == i]
        counted = [x for x in r if x["cause"] != "initial"]
        g = [x for x in grp if x["config"] == i]
        lat = [x["latency_ms"] for x in rem if x["config"] == i and x["kind"] == "crash"]
        longest = max([x["session_timeout_ms"] for x in g] + [cfg.session_timeout_ms or 0])
        hours = (end_ms - start_ms) / 3_600_000.0
        total_ms = sum(x["duration_ms"] for x in counted)
        durations = [x["duration_ms"] for x in counted]

        def total(name: str) -> int:
            return sum(x[name] for x in g)

        rows.append({
            "config": i, "label": cfg.label, "session_timeout_ms": cfg.session_timeout_ms or -1,
            "static": cfg.static, "rebalance_timeout_ms": cfg.rebalance_timeout_ms or -1,
            "heartbeat_interval_ms": cfg.heartbeat_interval_ms or -1, "groups": len(g),
            "incarnations": total("incarnations"),
            "sim_hours": (end_ms + longest - start_ms) / 3_600_000.0, "hours": hours,
            "rebalances": len(counted), "initial_rebalances": len(r) - len(counted),
            "rebalances_per_hour": len(counted) / hours if hours > 0 else 0.0,
            "rebalancing_ms": total_ms,
            "rebalance_mean_ms": total_ms / len(counted) if counted else 0.0,
            "rebalance_p99_ms": nearest_rank(durations, 99),
            "rebalancing_fraction": (total_ms / (len(g) * hours * 3_600_000.0)
                                     if g and hours > 0 else 0.0),
            "false_expirations": total("false_expirations"), "crashes": total("crashes"),
            "crashes_detected": total("crashes_detected"),
            "crashes_undetected": total("crashes") - total("crashes_detected"),
            "crash_detect_mean_ms": sum(lat) / len(lat) if lat else -1.0,
            "crash_detect_p50_ms": nearest_rank(lat, 50),
            "crash_detect_p99_ms": nearest_rank(lat, 99),
            "poll_timeouts": total("poll_timeouts"), "leaves": total("leaves"),
            "fenced": total("fenced")})
    return pa.Table.from_pylist(rows, schema=SUMMARY_SCHEMA)


def _finish(parts: Dict[str, List[pa.Table]], configs, start_ms, end_ms) -> Dict[str, pa.Table]:
    out = {name: canonical(pa.concat_tables(parts[name]) if parts[name] else schema.empty_table(),
                           name) for name, schema in TABLES.items()}
    out["summary"] = canonical(summarize(out, configs, start_ms, end_ms), "summary")
    return out


def _bounds(table: pa.Table) -> Tuple[int, int]:
    t = table.column("time_ms")
    return pc.min(t).as_py(), pc.max(t).as_py()


def whatif_local(table: pa.Table, configs: Sequence[WhatIfConfig], *, impl: Optional[str] = None,
                 num_shards: int = NUM_SHARDS,
                 progress: Optional[Callable[[int, int], None]] = None) -> Dict[str, pa.Table]:
    """Every (configuration, shard) simulation in this process, in turn (a shard's
    behaviour derived once for all the configurations)."""
    table = table.select([c for c in COLUMNS if c in table.column_names])
    if table.num_rows == 0:
        return _finish(defaultdict(list), configs, 0, 0)
    start_ms, end_ms = _bounds(table)
    by_shard = split_by_shard(table, num_shards)
    parts: Dict[str, List[pa.Table]] = defaultdict(list)
    done, total = 0, len(configs) * len(by_shard)
    for s, rows in by_shard.items():
        for _, out in simulate_configs(rows, configs, shard=s, end_ms=end_ms, impl=impl,
                                       num_shards=num_shards):
            for name, t in out.items():
                parts[name].append(t)
            done += 1
            if progress is not None:
                progress(done, total)
    return _finish(parts, configs, start_ms, end_ms)


def simulate_configs(table: pa.Table, configs: Sequence[WhatIfConfig], *, shard: int,
                     end_ms: int, impl: Optional[str] = None, num_shards: int = NUM_SHARDS):
    """simulate_shard for each configuration of `configs` in turn (its index is its
    config_id), with the shard's behaviour derived once: (config_id, tables) pairs.
    Deriving is about a quarter of a configuration's time."""
    behaviour = derive_behaviour(table, end_ms)
    for config_id, config in enumerate(configs):
        with collected_after():     # (not held across the yield: the caller's time)
            tables = ShardSimulation(behaviour, config, config_id=config_id, shard=shard,
                                     end_ms=end_ms, impl=impl, num_shards=num_shards).run()
        yield config_id, tables


# -- Spark ------------------------------------------------------------------------------------------

def _task_fn(configs: Sequence[WhatIfConfig], impl, num_shards: int):
    """The task of a partition of the packed trace repeated once per configuration
    (spark.SHARD_PIECE_SCHEMA rows plus `config`), shuffled by (configuration, shard):
    each (configuration, shard) simulated in turn up to the trace's end, its three
    tables out as Arrow IPC blobs (exact types, no wide rows); the ingest reports of
    configuration 0 with them."""
    def run(batches):
        from .spark import ShardInput, ingest_blob, out_of_order_report, table_blobs
        got = ShardInput(batches, keys=lambda batch: list(zip(
            batch.column("config").to_pylist(), batch.column("shard").to_pylist())))
        reports = list(got.reports.get((0, 0), ()))      # each configuration has a copy
        for config_id, shard in got.keys():
            rows = got.rows((config_id, shard))
            if config_id == 0:
                reports.append(out_of_order_report(shard, rows))
            out = simulate_shard(rows, configs[config_id], config_id=config_id, shard=shard,
                                 end_ms=got.last[(config_id, shard)], impl=impl,
                                 num_shards=num_shards)
            for name in TABLES:
                yield _keyed(config_id, shard, table_blobs(name, out[name]))
        if reports:
            yield _keyed(-1, -1, ingest_blob(reports))
    return run


def _shard_task_fn(configs: Sequence[WhatIfConfig], impl, num_shards: int):
    """The task of a partition of the packed trace shuffled by shard alone (when there
    are fewer tasks than shards): every configuration of each of its shards in turn, the
    shard's behaviour derived once and its rows received once; the tables out as
    _task_fn's, with the ingest reports."""
    def run(batches):
        from .spark import per_shard, table_blobs

        def work(shard, rows, end_ms):
            for config_id, out in simulate_configs(rows, configs, shard=shard, end_ms=end_ms,
                                                   impl=impl, num_shards=num_shards):
                for name in TABLES:
                    yield _keyed(config_id, shard, table_blobs(name, out[name]))
        return per_shard(batches, work, ingest=lambda blob: _keyed(-1, -1, blob))
    return run


def _keyed(config_id: int, shard: int, blobs: pa.RecordBatch) -> pa.RecordBatch:
    n = blobs.num_rows
    return pa.RecordBatch.from_arrays(
        [pa.array([config_id] * n, pa.int32()), pa.array([shard] * n, pa.int32()),
         blobs.column("table"), blobs.column("ipc")], names=["config", "shard", "table", "ipc"])


_TASK_DDL = "config int, shard int, table string, ipc binary"


def spark_task_layout(n_configs: int, num_shards: int, parallelism: int) -> Tuple[int, str]:
    """(task count, layout) of the grid on Spark: 4 tasks per core, at most one per
    (configuration, shard); "shard" when they are no more than the shards (a task runs
    every configuration of its shards), else "configuration x shard"."""
    n_tasks = max(1, min(n_configs * num_shards, 4 * parallelism))
    return n_tasks, ("shard" if n_tasks <= num_shards else "configuration x shard")


def whatif_spark(spark, trace_path: str, configs: Sequence[WhatIfConfig], *,
                 impl: Optional[str] = None, num_shards: int = NUM_SHARDS,
                 stats=None) -> Dict[str, pa.Table]:
    """The grid on Spark: the (configuration, shard) simulations as tasks, results
    gathered and summarized on the driver (the same tables as `whatif_local`). The
    trace is read, validated and packed by shard in the tasks (spark.packed_trace).
    With fewer tasks (4 per core) than shards, the pieces are shuffled by shard and a
    task runs every configuration of its shards, deriving each shard's behaviour once;
    with more, each packed piece is repeated once per configuration and shuffled by
    (configuration, shard). The ingest counts are merged into `stats` (an IngestStats)
    when given."""
    from pyspark.sql import functions as F

    from .spark import (INGEST_SCHEMA, INGEST_TABLE, blob_tables, default_parallelism,
                        ingest_stats, packed_trace)

    packed = packed_trace(spark, trace_path, num_shards=num_shards, lean=False)
    # The rows are few but each (configuration, shard) is a long computation: an explicit
    # partition count keeps adaptive execution from coalescing them into as few tasks as
    # their bytes would suggest.
    n_tasks, layout = spark_task_layout(len(configs), num_shards, default_parallelism(spark))
    if layout == "shard":
        tasks = packed.repartition(n_tasks, "shard")
        task = _shard_task_fn(list(configs), impl, num_shards)
    else:
        grid = spark.createDataFrame([(i,) for i in range(len(configs))], "config int")
        tasks = packed.crossJoin(F.broadcast(grid)).repartition(n_tasks, "config", "shard")
        task = _task_fn(list(configs), impl, num_shards)
    log.info("what-if on Spark: %d tasks by %s (%s)", n_tasks, layout, task.__qualname__)
    rows = tasks.mapInArrow(task, schema=_TASK_DDL).collect()
    got = blob_tables(rows, {INGEST_TABLE: INGEST_SCHEMA, **TABLES})
    ingest, lo, hi = ingest_stats(got[INGEST_TABLE])
    if stats is not None:
        stats.merge(ingest)
    if lo is None:
        return _finish(defaultdict(list), configs, 0, 0)
    return _finish({name: [got[name]] for name in TABLES}, configs, int(lo), int(hi))


class SparkProgress:
    """Prints the progress of the running Spark stages to stderr while a job runs
    (a background thread polling the status tracker; on a Spark Connect session, which
    has no status tracker here, the progress the server streams with each operation)."""

    def __init__(self, spark, label: str, stream=None, interval: float = 0.5):
        from .spark import is_connect_session
        self.connect = spark if is_connect_session(spark) else None
        self.sc = None if self.connect is not None else spark.sparkContext
        self.label = label
        self.stream = stream or sys.stderr
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._last = None
        self._t0 = self._shown = time.perf_counter()

    def _report(self, done: int, total: int) -> None:
        if total and (done, total) != self._last:
            self._last = (done, total)
            self.stream.write(f"  {self.label}: {done}/{total} tasks of the running stages "
                              f"({time.perf_counter() - self._t0:.1f}s)\n")
            self.stream.flush()

    def _on_connect_progress(self, stages, inflight_tasks, operation_id, done) -> None:
        # called on every update the server streams: at most one line per interval
        now = time.perf_counter()
        if now - self._shown < self.interval:
            return
        self._shown = now
        running = [s for s in stages or () if not s.done]
        self._report(sum(s.num_completed_tasks for s in running),
                     sum(s.num_tasks for s in running))

    def _run(self) -> None:
        tracker = self.sc.statusTracker()
        while not self._stop.wait(self.interval):
            try:
                done = total = 0
                for sid in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(sid)
                    if info is not None:
                        done += info.numCompletedTasks
                        total += info.numTasks
            except Exception:          # the context is going away: stop reporting
                return
            self._report(done, total)

    def __enter__(self) -> "SparkProgress":
        if self.connect is not None:
            self.connect.registerProgressHandler(self._on_connect_progress)
        else:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.connect is not None:
            self.connect.removeProgressHandler(self._on_connect_progress)
            return
        self._stop.set()
        self._thread.join()


# -- output -----------------------------------------------------------------------------------------

def write_results(tables: Dict[str, pa.Table], out_dir: str, configs: Sequence[WhatIfConfig],
                  meta: Optional[dict] = None) -> None:
    """out_dir/<table>.parquet for every table, and out_dir/summary.json (the summary
    rows, the grid and `meta`)."""
    import pyarrow.parquet as pq
    os.makedirs(out_dir, exist_ok=True)
    for name, t in tables.items():
        pq.write_table(t, os.path.join(out_dir, f"{name}.parquet"))
    doc = {"configs": [dict(asdict(c), label=c.label) for c in configs],
           "summary": tables["summary"].to_pylist(), **(meta or {})}
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(doc, f, indent=2)


def read_results(out_dir: str) -> Dict[str, pa.Table]:
    import pyarrow.parquet as pq
    return {name: pq.read_table(os.path.join(out_dir, f"{name}.parquet"))
            for name in list(TABLES) + ["summary"]
            if os.path.exists(os.path.join(out_dir, f"{name}.parquet"))}


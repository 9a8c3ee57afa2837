"""Replay a trace through fastcoord, one GroupCoordinator per coordinator shard.

Each shard (Kafka's offsets partition of the group, `fastcoord.shard_for`: Java
String.hashCode, abs(MIN_VALUE) = 0) runs on its own ManualClock with a deterministic
member_id_factory, in time order (ties by `seq`). The driver plays the clients' side
the way a Kafka consumer does: a join of an unknown member goes in with member id ""
(the answer's MEMBER_ID_REQUIRED id is used from the next join on), a sync goes out
only once its join has been answered (a sync that arrives earlier waits for it), the
leader's sync carries an (empty) assignment for every member of its join answer.
Heartbeats go by member handle through `heartbeat_handle`.

What the coordinator did is read through the public API only: answers and callbacks,
`group_summary` after every join/sync/leave and each answered callback (`describe_group`
too when its members epoch says the member ids changed), and a session
check at each member's predicted session deadline (last accepted contact + session
timeout), where the clock is stepped to exactly that deadline. Time moves by
`advance_time`, or by `set_time_if_idle` before a heartbeat or commit when the
coordinator says that is the same.

Tables (see the *_SCHEMA constants):
- responses: one row per trace request: the error code and when it was answered
  (answered_ms = -1: still parked when the trace ended).
- rebalances: one row per rebalance episode (the group out of Stable/Empty): start,
  end (-1: unfinished), duration, cause (what opened it: member-join, member-rejoin,
  leave, session-timeout, timeout), members before and after, generation at the end.
- expirations: members the coordinator removed without a LeaveGroup: reason
  "session" (no contact for the session timeout) or "rebalance" (did not rejoin or
  sync within the rebalance timeout).
- groups: per-group summary.
"""
from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import CoordinatorConfig, Errors, GroupCoordinator, ManualClock, shard_for

NUM_SHARDS = 50

RESPONSES_SCHEMA = pa.schema([
    ("shard", pa.int32()), ("seq", pa.int64()), ("time_ms", pa.int64()),
    ("group_id", pa.string()), ("member_id", pa.string()), ("event", pa.string()),
    ("error", pa.int32()), ("answered_ms", pa.int64())])
REBALANCES_SCHEMA = pa.schema([
    ("shard", pa.int32()), ("group_id", pa.string()), ("generation", pa.int32()),
    ("start_ms", pa.int64()), ("end_ms", pa.int64()), ("duration_ms", pa.int64()),
    ("cause", pa.string()), ("members_before", pa.int32()), ("members_after", pa.int32())])
EXPIRATIONS_SCHEMA = pa.schema([
    ("shard", pa.int32()), ("group_id", pa.string()), ("member_id", pa.string()),
    ("instance_id", pa.string()), ("time_ms", pa.int64()), ("reason", pa.string()),
    ("last_heartbeat_ms", pa.int64())])
GROUPS_SCHEMA = pa.schema([
    ("shard", pa.int32()), ("group_id", pa.string()), ("events", pa.int64()),
    ("rebalances", pa.int64()), ("expirations", pa.int64()), ("final_generation", pa.int32()),
    ("final_state", pa.string()), ("final_members", pa.int32()), ("rebalancing_ms", pa.int64())])
TABLES = {"responses": RESPONSES_SCHEMA, "rebalances": REBALANCES_SCHEMA,
          "expirations": EXPIRATIONS_SCHEMA, "groups": GROUPS_SCHEMA}
SORT_KEYS = {"responses": ["shard", "seq"], "rebalances": ["group_id", "start_ms"],
             "expirations": ["group_id", "time_ms", "member_id"], "groups": ["group_id"]}

_RIP = int(Errors.REBALANCE_IN_PROGRESS)
_UNKNOWN = int(Errors.UNKNOWN_MEMBER_ID)
_MIDREQ = int(Errors.MEMBER_ID_REQUIRED)
_REBALANCING = ("PreparingRebalance", "CompletingRebalance")


class _Member:
    __slots__ = ("tid", "group", "inst", "rid", "gen", "joining", "pending_sync", "session",
                 "last_touch", "check_at", "leader_members", "leaving", "replaced", "handle",
                 "view")

    def __init__(self, tid, group, inst, view):
        self.tid, self.group, self.inst = tid, group, inst
        self.view = view
        self.rid = None
        self.gen = -1
        self.joining = False
        self.pending_sync = None
        self.session = 10_000
        self.last_touch = -1
        self.check_at = None
        self.leader_members = None
        self.leaving = False
        self.replaced = False
        self.handle = -1


class _GroupView:
    __slots__ = ("gid", "state", "members", "generation", "open", "events", "rebalances",
                 "expirations", "rebalancing_ms", "seen", "rebalance_timeout", "check_at",
                 "epoch")

    def __init__(self, gid):
        self.gid = gid
        self.state = "Empty"
        self.members = set()
        self.generation = 0
        self.open = None            # [start_ms, cause, members_before]
        self.events = 0
        self.rebalances = 0
        self.expirations = 0
        self.rebalancing_ms = 0
        self.seen = None
        self.rebalance_timeout = 0
        self.check_at = None
        self.epoch = None           # the coordinator's members_epoch `members` was read at


class ShardReplay:
    """Replays one shard's rows (already in (time_ms, seq) order)."""

    def __init__(self, shard: int, *, impl: Optional[str] = None, num_shards: int = NUM_SHARDS):
        self.shard = shard
        self.impl = impl
        self.num_shards = num_shards
        self.coord = None
        self.now = 0
        self.members: Dict[tuple, _Member] = {}
        self.by_rid: Dict[tuple, _Member] = {}
        self.static: Dict[tuple, _Member] = {}
        self.groups: Dict[str, _GroupView] = {}
        self.checks: list = []
        self._check_seq = 0
        # responses: one slot per trace row in replay order; the other columns of the
        # table are the sorted trace's own (see tables())
        self.errors: List[int] = []
        self.answered: List[int] = []
        self._sorted: Optional[pa.Table] = None
        self.rebalances: List[tuple] = []
        self.expirations: List[tuple] = []

    # -- setup -------------------------------------------------------------------------
    def _start(self, t0: int) -> None:
        self.clock = ManualClock(t0)
        self.now = t0
        self.coord = GroupCoordinator(CoordinatorConfig(num_shards=self.num_shards),
                                      clock=self.clock, impl=self.impl,
                                      member_id_factory=member_ids(self.shard))

    def _view(self, gid: str) -> _GroupView:
        gv = self.groups.get(gid)
        if gv is None:
            gv = self.groups[gid] = _GroupView(gid)
        return gv

    def _member(self, gid, tid, inst) -> _Member:
        key = (gid, tid)
        m = self.members.get(key)
        if m is None:
            m = self.members[key] = _Member(tid, gid, inst, self._view(gid))
        return m

    # -- time ----------------------------------------------------------------------------
    def _arm(self, m: _Member) -> None:
        if m.check_at is None and m.last_touch >= 0:
            m.check_at = m.last_touch + m.session
            self._check_seq += 1
            heapq.heappush(self.checks, (m.check_at, self._check_seq, m))

    def _step(self, t: int) -> None:
        if t > self.now:
            self.coord.advance_time(t - self.now)
            self.now = t

    def advance_to(self, t: int) -> None:
        checks = self.checks
        while checks and checks[0][0] <= t:
            d, _, m = heapq.heappop(checks)
            if type(m) is _GroupView:
                if m.check_at == d:
                    m.check_at = None
                    self._step(d)
                    self._observe(m.gid, "timeout")
                continue
            m.check_at = None
            if m.rid is None or m.replaced:
                continue
            due = m.last_touch + m.session
            if due > d:
                self._arm(m)
                continue
            self._step(d)
            if m.rid is not None and self.coord.member_handle(m.group, m.rid) == -1:
                self._observe(m.group, "session-timeout")
        self._step(t)

    # -- observation ----------------------------------------------------------------------
    def _observe(self, gid: str, cause: str) -> None:
        gv = self._view(gid)
        now = self.clock.now_ms()
        state, current = read_members(self.coord, gid, gv)
        before = len(gv.members)
        for rid in sorted(gv.members - current):
            m = self.by_rid.pop((gid, rid), None)
            if m is None:
                continue
            if m.rid == rid:
                m.rid = None
                m.handle = -1
            if m.leaving or m.replaced:
                continue
            reason = "session" if now >= m.last_touch + m.session else "rebalance"
            gv.expirations += 1
            self.expirations.append((self.shard, gid, m.tid, m.inst, now, reason, m.last_touch))
        gv.members = current
        if gv.open is None and state in _REBALANCING:
            gv.open = [now, cause, before]
            self._arm_group(gv, now)
        elif gv.open is not None and state not in _REBALANCING:
            start, why, mb = gv.open
            gv.open = None
            gv.rebalances += 1
            gv.rebalancing_ms += now - start
            self.rebalances.append((self.shard, gid, gv.generation, start, now, now - start,
                                    why, mb, len(current)))
        gv.state = state

    def _observe_cb(self, gid: str, kind: str) -> None:
        gv = self.groups[gid]
        if gv.seen != (self.clock.now_ms(), gv.events, kind):
            self._observe(gid, "timeout")
            gv.seen = (self.clock.now_ms(), gv.events, kind)

    def _arm_group(self, gv: _GroupView, now: int) -> None:
        """A group check one rebalance timeout on: where a join or sync round times out."""
        d = now + max(gv.rebalance_timeout, 1)
        if gv.check_at is None or gv.check_at < d:
            gv.check_at = d
            self._check_seq += 1
            heapq.heappush(self.checks, (d, self._check_seq, gv))

    # -- requests -------------------------------------------------------------------------
    def _touch(self, m: _Member) -> None:
        m.last_touch = self.clock.now_ms()
        self._arm(m)

    def _respond(self, idx: int, error: int) -> None:
        self.errors[idx] = int(error)
        self.answered[idx] = self.clock.now_ms()

    def _join(self, m: _Member, idx: int, row) -> None:
        (_, _, gid, _, inst, _, session, rebalance, _, ptype, protocols, client, _) = row
        gv = self._view(gid)
        if inst is not None:
            old = self.static.get((gid, inst))
            if old is not None and old is not m:
                old.replaced = True
            self.static[(gid, inst)] = m
        m.inst = inst
        m.leaving = False
        m.replaced = False
        if session is not None:
            m.session = int(session)
        rto = m.session if rebalance is None else int(rebalance)
        if rto > gv.rebalance_timeout:
            gv.rebalance_timeout = rto
        known = m.rid is not None and m.rid in gv.members
        cause = "member-rejoin" if known else "member-join"
        protos = [(p, b"") for p in (protocols or ["range"])]
        m.joining = True

        def answered(result, m=m, idx=idx, gid=gid):
            err = int(result.error)
            self._respond(idx, err)
            m.joining = False
            if err == _MIDREQ:
                self._adopt(m, result.member_id)
            elif err == 0:
                self._adopt(m, result.member_id)
                m.gen = result.generation_id
                if result.generation_id > gv.generation:
                    gv.generation = result.generation_id
                m.leader_members = ([x.member_id for x in result.members]
                                    if result.leader_id == result.member_id else None)
                self._touch(m)
                self._observe_cb(gid, "join")
                self._arm_group(gv, self.clock.now_ms())
                if m.pending_sync is not None:
                    sidx, m.pending_sync = m.pending_sync, None
                    self._sync(m, sidx)
            elif err == _UNKNOWN:
                self._drop(m)
            if err != 0 and m.pending_sync is not None:
                sidx, m.pending_sync = m.pending_sync, None
                self._sync(m, sidx)

        self.coord.join_group(gid, m.rid or "", ptype or "consumer", protos,
                              session_timeout_ms=m.session,
                              rebalance_timeout_ms=None if rebalance is None else int(rebalance),
                              group_instance_id=inst, client_id=client or "",
                              callback=answered)
        self._observe(gid, cause)

    def _adopt(self, m: _Member, rid: str) -> None:
        if rid and rid != m.rid:
            if m.rid is not None:
                self.by_rid.pop((m.group, m.rid), None)
            m.rid = rid
            m.handle = -1
            self.by_rid[(m.group, rid)] = m

    def _drop(self, m: _Member) -> None:
        if m.rid is not None:
            self.by_rid.pop((m.group, m.rid), None)
        m.rid = None
        m.handle = -1

    def _sync(self, m: _Member, idx: int) -> None:
        if m.joining:
            if m.pending_sync is not None:        # superseded: never sent
                self._respond(m.pending_sync, -1)
            m.pending_sync = idx
            return
        gid = m.group
        assignments = {mid: b"" for mid in m.leader_members} if m.leader_members else None

        def answered(result, m=m, idx=idx, gid=gid):
            err = int(result.error)
            self._respond(idx, err)
            if err == 0:
                self._touch(m)
            elif err == _UNKNOWN:
                self._drop(m)
            self._observe_cb(gid, "sync" if err == 0 else "sync-error")

        self.coord.sync_group(gid, m.gen, m.rid or "", assignments, group_instance_id=m.inst,
                              callback=answered)
        self._observe(gid, "timeout")

    def _leave(self, m: _Member, idx: int) -> None:
        gid = m.group
        m.leaving = True
        res = self.coord.leave_group(gid, [(m.rid or "", m.inst)])
        err = int(res.error) if res.error != Errors.NONE or not res.member_errors \
            else int(res.member_errors[0])
        self._respond(idx, err)
        self._observe(gid, "leave")
        self._drop(m)

    def _commit(self, m: _Member, idx: int, seq: int) -> None:
        res = self.coord.commit_offsets(m.group, m.rid or "", m.gen, {("trace", 0): int(seq)},
                                        group_instance_id=m.inst)
        err = int(next(iter(res.values()))) if res else 0
        self._respond(idx, err)
        if err == 0:
            self._touch(m)

    # -- the loop ----------------------------------------------------------------------------
    def run(self, table: pa.Table, end_ms: Optional[int] = None) -> Dict[str, pa.Table]:
        from .trace import TRACE_SCHEMA
        table = table.select(TRACE_SCHEMA.names).sort_by([("time_ms", "ascending"),
                                                          ("seq", "ascending")])
        self._sorted = table
        n = table.num_rows
        if not n:
            return self.tables()
        # Python values only for the columns every event needs; a join's full row is
        # built from the join rows alone (they are a small share of a trace)
        seqs, times, gids, tids, insts, events = (
            table.column(c).to_pylist()
            for c in ("seq", "time_ms", "group_id", "member_id", "instance_id", "event"))
        join_at = pc.indices_nonzero(pc.equal(table.column("event"), "join")).to_pylist()
        join_rows = dict(zip(join_at, zip(*(table.column(c).take(join_at).to_pylist()
                                            for c in TRACE_SCHEMA.names))))
        self.errors = [-1] * n
        self.answered = [-1] * n
        self._start(times[0])
        members = self.members
        checks = self.checks
        errors, answered = self.errors, self.answered
        coord = self.coord
        advance_time, set_time_if_idle = coord.advance_time, coord.set_time_if_idle
        heartbeat, member_handle = coord.heartbeat_handle, coord.member_handle
        for idx in range(n):
            t = times[idx]
            event = events[idx]
            if checks and checks[0][0] <= t:
                self.advance_to(t)
            elif t > self.now:                  # advance_to(t) without a check due
                # Heartbeats and commits arm only session deadlines: the clock alone
                # moves when the coordinator says that is exactly what advance_time does.
                if not ((event == "heartbeat" or event == "commit") and set_time_if_idle(t)):
                    advance_time(t - self.now)
                self.now = t
            gid = gids[idx]
            m = members.get((gid, tids[idx]))
            if m is None:
                m = self._member(gid, tids[idx], insts[idx])
            m.view.events += 1
            if event == "heartbeat":
                # The commonest event, inline: by the member's handle through
                # heartbeat_handle (heartbeat_batch for one handle). A member without a
                # live handle is unknown to the coordinator and is not sent (no rid
                # means no handle: both are reset together).
                h = m.handle
                if h < 0 and m.rid is not None:
                    h = m.handle = member_handle(gid, m.rid)
                err = heartbeat(h, m.gen) if h >= 0 else _UNKNOWN
                errors[idx] = err
                answered[idx] = t
                if err == 0 or err == _RIP:     # (the second test only on an error)
                    m.last_touch = t
                    if m.check_at is None:
                        self._arm(m)
            elif event == "join":
                self._join(m, idx, join_rows[idx])
            elif event == "sync":
                self._sync(m, idx)
            elif event == "leave":
                self._leave(m, idx)
            elif event == "commit":
                self._commit(m, idx, seqs[idx])
        if end_ms is not None and end_ms > self.now:
            self.advance_to(end_ms)
        for gid in sorted(self.groups):
            self._observe(gid, "timeout")
        return self.tables()

    def tables(self) -> Dict[str, pa.Table]:
        groups = [(self.shard, g.gid, g.events, g.rebalances, g.expirations, g.generation,
                   g.state, len(g.members), g.rebalancing_ms)
                  for g in sorted(self.groups.values(), key=lambda g: g.gid)]
        out = {"responses": self._responses_table()}
        for name, rows in (("rebalances", self.rebalances),
                           ("expirations", self.expirations), ("groups", groups)):
            out[name] = rows_table(rows, TABLES[name])
        return out

    def _responses_table(self) -> pa.Table:
        t = self._sorted
        if t is None:
            return RESPONSES_SCHEMA.empty_table()
        cols = {"shard": pa.array(np.full(t.num_rows, self.shard, np.int32))}
        for c in ("seq", "time_ms", "group_id", "member_id", "event"):
            cols[c] = t.column(c)
        cols["error"] = pa.array(self.errors, pa.int32())
        cols["answered_ms"] = pa.array(self.answered, pa.int64())
        return pa.table(cols).cast(RESPONSES_SCHEMA)


def shard_column(group_ids, num_shards: int = NUM_SHARDS) -> List[int]:
    return [shard_for(g, num_shards) for g in group_ids]    # shard_for remembers groups


def split_by_shard(table: pa.Table, num_shards: int = NUM_SHARDS) -> Dict[int, pa.Table]:
    """The rows of each coordinator shard (by their group id), shards ascending, each
    shard's rows in the table's order; a shard without rows has no entry."""
    shards = pa.array(shard_column(table.column("group_id").to_pylist(), num_shards), pa.int32())
    order = pc.sort_indices(shards)              # a stable sort: table order within a shard
    table = table.take(order)
    ids, counts = np.unique(shards.to_numpy(), return_counts=True)
    out, start = {}, 0
    for s, n in zip(ids.tolist(), counts.tolist()):
        out[s] = table.slice(start, n)
        start += n
    return out


def replay_shard_table(table: pa.Table, shard: int, *, impl=None, end_ms=None,
                       num_shards: int = NUM_SHARDS) -> Dict[str, pa.Table]:
    return ShardReplay(shard, impl=impl, num_shards=num_shards).run(table, end_ms)


def replay_local(table: pa.Table, *, impl=None, num_shards: int = NUM_SHARDS) -> Dict[str, pa.Table]:
    """The single-process replay: every shard in turn, in this process."""
    end_ms = pc.max(table.column("time_ms")).as_py() if table.num_rows else None
    parts = defaultdict(list)
    for s, sub in split_by_shard(table, num_shards).items():
        for name, t in replay_shard_table(sub, s, impl=impl, end_ms=end_ms,
                                          num_shards=num_shards).items():
            parts[name].append(t)
    return {name: canonical(pa.concat_tables(parts[name]) if parts[name]
                            else schema.empty_table(), name)
            for name, schema in TABLES.items()}


def canonical(table: pa.Table, name: str) -> pa.Table:
    """The table in its documented schema and a total order (for comparisons)."""
    return sort_canonical(table, TABLES[name], SORT_KEYS[name])


def sort_canonical(table: pa.Table, schema: pa.Schema, keys: List[str]) -> pa.Table:
    """`table` in `schema`, sorted by `keys` then by every other column: a total order."""
    table = table.select(schema.names).cast(schema)
    keys = keys + [n for n in schema.names if n not in keys]
    return table.sort_by([(k, "ascending") for k in keys])


def read_members(coord: GroupCoordinator, gid: str, view) -> Tuple[str, set]:
    """The group's state and member ids now. `view` remembers the last read (`members`,
    and `epoch`: None before the first): the ids come from `describe_group` only when
    `group_summary`'s members epoch says they changed since (view.epoch is updated;
    view.members is the caller's to replace with the ids returned)."""
    summary = coord.group_summary(gid)
    if summary.members_epoch == view.epoch:
        return summary.state, view.members        # the same member ids as last time
    view.epoch = summary.members_epoch
    return summary.state, {md.member_id for md in coord.describe_group(gid).members}


def rows_table(rows: List[tuple], schema: pa.Schema) -> pa.Table:
    """Row tuples (in `schema`'s column order) as a table of `schema`."""
    cols = list(zip(*rows)) if rows else [[] for _ in schema.names]
    return pa.table([pa.array(list(c), type=f.type) for c, f in zip(cols, schema)],
                    schema=schema)


def member_ids(*scope) -> Callable[[str], str]:
    """A deterministic member_id_factory: "<prefix>-<scope...>-<n>", n = 1, 2, ..."""
    tag = "-".join(str(s) for s in scope)
    counter = itertools.count(1)

    def member_id_factory(prefix: str) -> str:
        return f"{prefix or 'member'}-{tag}-{next(counter)}"
    return member_id_factory

"""Replay a trace through fastcoord, one GroupCoordinator per coordinator shard.

Each shard (Kafka's offsets partition of the group, `fastcoord.shard_for`: Java
String.hashCode, abs(MIN_VALUE) = 0) runs on its own ManualClock with a deterministic
member_id_factory, in time order (ties by `seq`). The driver plays the clients' side
the way a Kafka consumer does: a join of an unknown member goes in with member id ""
(the answer's MEMBER_ID_REQUIRED id is used from the next join on), a sync goes out
only once its join has been answered (a sync that arrives earlier waits for it), the
leader's sync carries an (empty) assignment for every member of its join answer.
Heartbeats and commits go by member handle: runs of consecutive ones are played in one
call (`HeartbeatRun`, C in the native twin: fastcoord/pipeline/_native/runs.pyx), each at its
own time; a commit in a run is one the coordinator accepts as it is (its member table
checks it, `MemberTable.commit_handle`, and its group logic stores the offset,
`GroupLogic.commit_accepted`: the steps of `commit_offsets`). The general path below
plays the rest, one event at a time, the same way (other commits by `commit_offsets`).
The replay's checks (below) are kept in the twin's `CheckHeap`, which a run shares: it
moves a member's session check that has had contact since, drops those that no longer
watch anything (`HeartbeatRun.settle_checks`, also `advance_to`'s first step), and arms
one after a member's first contact; `advance_to` takes every other check.

What the coordinator did is read through the public API (and, for the native twin's
typed calls, the documented internals of docs/native-core-api.md): answers and callbacks,
`group_version` after every join/sync/leave and each answered callback, and
`group_summary` when that moved (`member_ids` too when its members epoch says the
member ids changed), and a session
check at each member's predicted session deadline (last accepted contact + session
timeout), where the clock is stepped to exactly that deadline. Time moves by
`advance_time`, or by `set_time_if_idle` before a heartbeat or commit when the
coordinator says that is the same.

Tables (see the *_SCHEMA constants):
- responses: one row per trace request: the error code and when it was answered
  (error and answered_ms -1: never answered: still parked when the trace ended, or a
  join whose member joined again while it was parked: the coordinator keeps only the
  newer callback, as Kafka does; error -1 with a time: a sync the client never sent,
  superseded while it waited for its join's answer).
- rebalances: one row per rebalance episode (the group out of Stable/Empty): start,
  end, duration, cause (what opened it: member-join, member-rejoin, leave,
  session-timeout, timeout), members before and after, generation at the end. One
  still open when the trace ends is unfinished: end and duration -1, its members and
  generation those at the trace's end.
- expirations: members the coordinator removed without a LeaveGroup: reason
  "session" (no contact for the session timeout) or "rebalance" (did not rejoin or
  sync within the rebalance timeout).
- groups: per-group summary (its rebalances and rebalancing time: the finished ones).
- offsets: the committed offsets at the trace's end: per (group, topic, partition)
  the last offset a commit the coordinator accepted (error 0) named, in replay order
  (time, seq; within a commit, its last entry for the partition), and that commit's
  time. A commit is accepted or refused whole (the replay's coordinator checks the
  member and generation for the request), so its answer says which of its offsets
  count. (The coordinator itself is handed one stand-in partition per commit: it
  keeps no offsets the replay reads back.)
A trace whose group id, member id and event columns come dictionary-encoded (a packed
trace's, spark.pack_by_shard) is read by their indices, and its responses keep those
columns encoded (one dictionary each); `canonical` gives every table its schema's types.
"""
from __future__ import annotations

import array
import itertools
import os
import shutil
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import CoordinatorConfig, Errors, GroupCoordinator, ManualClock, _twins, shard_for
from ..core.results import GroupSummary, JoinGroupMember, JoinGroupResult, SyncGroupResult
from ..core.store import InMemoryStore
from ._gc import collected_after, fewer_collections
from ._pure.runs import COMMIT, HEARTBEAT, LOOK_UP, NO_HANDLE, NOT_ARMED  # both twins' values
from .trace import OPTIONAL, TRACE_SCHEMA

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
OFFSETS_SCHEMA = pa.schema([
    ("shard", pa.int32()), ("group_id", pa.string()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()), ("time_ms", pa.int64())])
_RESPONSES_FIELDS = list(RESPONSES_SCHEMA)   # (read once: the schema wraps each field anew)
_TRACE_NAMES = TRACE_SCHEMA.names            # (read once: the schema makes the list anew)
TABLES = {"responses": RESPONSES_SCHEMA, "rebalances": REBALANCES_SCHEMA,
          "expirations": EXPIRATIONS_SCHEMA, "groups": GROUPS_SCHEMA,
          "offsets": OFFSETS_SCHEMA}
SORT_KEYS = {"responses": ["shard", "seq"], "rebalances": ["group_id", "start_ms"],
             "expirations": ["group_id", "time_ms", "member_id"], "groups": ["group_id"],
             "offsets": ["group_id", "topic", "partition"]}
UNFINISHED = -1     # a rebalance's end and duration when the trace ends before it does
ONE_KEY_PAIRS = 1 << 31   # committed_offsets: (group, topic) numbers below this share a key

# Event codes (HeartbeatRun's kinds: a heartbeat is its HEARTBEAT)
_HEARTBEAT, _JOIN, _SYNC, _LEAVE, _COMMIT, _OTHER = HEARTBEAT, 1, 2, 3, COMMIT, 5
COMMIT_PARTITION = ("trace", 0)    # what a trace's commits commit to (a replay: the seq)
_JOIN_COLUMNS = ("instance_id", "session_timeout_ms", "rebalance_timeout_ms", "protocol_type",
                 "protocols", "client_id")              # ShardReplay._join's row
_EVENT_CODES = {"heartbeat": _HEARTBEAT, "join": _JOIN, "sync": _SYNC, "leave": _LEAVE,
                "commit": _COMMIT}
# A member's handle: NO_HANDLE (no member id at the coordinator), LOOK_UP (one, its
# handle not looked up) or the handle; its check_at: NOT_ARMED or the check's time.
_UNKNOWN = int(Errors.UNKNOWN_MEMBER_ID)
_MIDREQ = int(Errors.MEMBER_ID_REQUIRED)
_IN_REBALANCE = int(Errors.REBALANCE_IN_PROGRESS)
_REBALANCING = ("PreparingRebalance", "CompletingRebalance")
# The answers' fields the driver reads, by position (compiled: an item of the tuple,
# where the field's name is a property look-up and call, a few per answer)
_J_ERROR, _J_GENERATION, _J_LEADER, _J_MEMBER_ID, _J_MEMBERS = (
    JoinGroupResult._fields.index(f)
    for f in ("error", "generation_id", "leader_id", "member_id", "members"))
_M_MEMBER_ID = JoinGroupMember._fields.index("member_id")
_S_ERROR = SyncGroupResult._fields.index("error")
_G_STATE, _G_EPOCH = (GroupSummary._fields.index(f) for f in ("state", "members_epoch"))


def _field(answer: tuple, at: int):
    """The field at position `at` of an answer (a NamedTuple of fastcoord.core.results),
    read as a tuple's item: compiled, tuple's own C subscript (replay.pxd), where the
    field's name would be a property's look-up and call."""
    return answer[at]


class _Column:
    """An attribute kept in one of the replay's arrays (`_Arrays`), at the object's `ix`:
    what HeartbeatRun reads and writes without a Python object per member or group."""

    def __init__(self, array_name: str) -> None:
        self.array_name = array_name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return getattr(obj.arrays, self.array_name)[obj.ix]

    def __set__(self, obj, value) -> None:
        getattr(obj.arrays, self.array_name)[obj.ix] = value


class _Arrays:
    """The replay's per-member and per-group arrays (array.array: Python ints when read
    from Python, C arrays to HeartbeatRun; compiled, the driver holds typed views of
    them, replay.pxd)."""

    def __init__(self, members: int, groups: int) -> None:
        self.handles = array.array("q", [NO_HANDLE]) * members
        self.generations = array.array("i", [-1]) * members
        self.sessions = array.array("q", [10_000]) * members
        self.replaced = array.array("B", [0]) * members
        self.last_touch = array.array("q", [-1]) * members
        self.check_at = array.array("q", [NOT_ARMED]) * members
        self.group_events = array.array("q", [0]) * groups
        self.group_check_at = array.array("q", [NOT_ARMED]) * groups
        self.instances: List[Optional[str]] = [None] * members   # what a commit names


class _Member:
    __slots__ = ("tid", "group", "rid", "joining", "pending_sync",
                 "leader_members", "leaving", "view", "ix", "arrays")
    # (the columns read or written by name; its handle, generation and check time are
    # indexed in the arrays by the driver, and by HeartbeatRun)
    inst = _Column("instances")
    session = _Column("sessions")
    replaced = _Column("replaced")
    last_touch = _Column("last_touch")

    def __init__(self, tid, group, inst, view, ix, arrays):
        self.tid, self.group = tid, group
        self.view = view
        self.ix, self.arrays = ix, arrays    # the rest of its state is in the arrays,
        arrays.instances[ix] = inst          # which start at their defaults (_Arrays)
        self.rid = None
        self.joining = -1           # the trace index of its join in flight (-1: none)
        self.pending_sync = None
        self.leader_members = None
        self.leaving = False


class _GroupView:
    __slots__ = ("gid", "state", "members", "generation", "open", "rebalances",
                 "expirations", "rebalancing_ms", "rebalance_timeout",
                 "epoch", "version", "ix", "arrays")
    events = _Column("group_events")
    # (its check: group_check_at[ix], NOT_ARMED or the check's time)

    def __init__(self, gid, ix, arrays):
        self.gid = gid
        self.ix, self.arrays = ix, arrays
        self.state = "Empty"
        self.members = set()
        self.generation = 0
        self.open = None            # [start_ms, cause, members_before]
        self.rebalances = 0
        self.expirations = 0
        self.rebalancing_ms = 0
        self.rebalance_timeout = 0
        self.epoch = None           # the coordinator's members_epoch `members` was read at
        self.version = None         # the group_version that read was made at


class _Answer:
    """The callback of one join or sync: hands the coordinator's result to the replay's
    handler with the member and the trace index the request was sent for. (What a
    partial of the handler did; compiled, this is an extension type, whose call is a C
    slot where a partial's builds its arguments anew: one per join and sync.)"""
    __slots__ = ("replay", "m", "idx", "sync")

    def __init__(self, replay, m, idx, sync):
        self.replay, self.m, self.idx, self.sync = replay, m, idx, sync

    def __call__(self, result):
        if self.sync:
            self.replay._sync_answered(self.m, self.idx, result)
        else:
            self.replay._join_answered(self.m, self.idx, result)


class ShardReplay:
    """Replays one shard's rows (already in (time_ms, seq) order)."""

    def __init__(self, shard: int, *, impl: Optional[str] = None, num_shards: int = NUM_SHARDS,
                 heartbeat_runs: bool = True):
        self.shard = shard
        self.impl = impl
        self.num_shards = num_shards
        # False: every heartbeat and commit by the general path, which steps the clock
        # in Python and then plays a heartbeat as a run of one and a commit by
        # commit_offsets (the same results, slower: what the tests compare the long
        # runs with)
        self.heartbeat_runs = heartbeat_runs
        self.coord = None
        self.now = 0
        self.members: Dict[tuple, _Member] = {}
        self.by_ix: List[_Member] = []          # the members by their ix
        self.by_rid: Dict[tuple, _Member] = {}
        self.static: Dict[tuple, _Member] = {}
        self.groups: Dict[str, _GroupView] = {}
        self.by_group_ix: List[_GroupView] = []  # the groups by their ix
        self.checks = None          # the twin's CheckHeap (runs), made with the coordinator
        self.group_version = None   # the coordinator's group_version (bound with it)
        self.native_table = None    # its native member table (_start), else None
        self.runs = None            # the twin's HeartbeatRun, made with the trace's arrays
        self.native_runs = None     # ... the native one (_run), else None
        # responses: one slot per trace row in replay order; the other columns of the
        # table are the sorted trace's own (see tables())
        self.errors = array.array("i")
        self.answered = array.array("q")
        self._sorted: Optional[pa.Table] = None
        self.rebalances: List[tuple] = []
        self.expirations: List[tuple] = []

    # -- setup -------------------------------------------------------------------------
    def _start(self, t0: int) -> None:
        # The driver reads this clock's time as `clock._now` (ManualClock.now_ms's value):
        # an answer reads it a few times, a field's load where now_ms would be a Python
        # call each time
        self.clock = ManualClock(t0)
        self.now = t0
        # The store keeps nothing (its writes succeed): nothing reads a replay's group
        # records or offsets back from it (the groups hold their offsets)
        self.coord = GroupCoordinator(CoordinatorConfig(num_shards=self.num_shards),
                                      clock=self.clock, impl=self.impl,
                                      store=InMemoryStore(group_records=False, offsets=False),
                                      member_id_factory=member_ids(self.shard))
        self.checks = _twins.module(self.coord.impl, "pipeline.runs").CheckHeap()
        # Read first by each observation, which reads nothing more while it has not moved
        self.group_version = self.coord.group_version
        # ... from the native member table, held typed (replay.pxd) so that, compiled,
        # the look-up is one C call, not a bound method's: every observation makes it
        self.native_table = (self.coord.member_table if self.coord.impl == "native"
                             else None)

    def _index(self, table: pa.Table) -> Tuple[array.array, array.array]:
        """Every group and member (a (group, member id) pair) of the sorted trace, made
        up front with the instance id of its first event: the index of each event's
        member and group (into by_ix and the arrays), numbered in order of first event."""
        group_names, group_ix = _encoded(table.column("group_id"))
        member_names, member_codes = _encoded(table.column("member_id"))
        group_ix = group_ix.astype(np.int64)
        member_codes = member_codes.astype(np.int64)
        member_ix = _pair_codes(group_ix, member_codes)
        first = _first_occurrences(member_ix)
        # each member's ids from the distinct values (null: the code past them), not from
        # the rows (a take of a dictionary column of several pieces decodes them all)
        gids = _with_null(group_names).take(pa.array(group_ix[first])).to_pylist()
        tids = _with_null(member_names).take(pa.array(member_codes[first])).to_pylist()
        insts = table.column("instance_id").take(pa.array(first)).to_pylist()
        self.arrays = arrays = _Arrays(len(first), int(group_ix.max()) + 1)
        for g, gid in zip(group_ix[first].tolist(), gids):
            if gid not in self.groups:
                self.groups[gid] = _GroupView(gid, g, arrays)
        self.by_group_ix = sorted(self.groups.values(), key=lambda gv: gv.ix)
        for ix, (gid, tid, inst) in enumerate(zip(gids, tids, insts)):
            m = _Member(tid, gid, inst, self.groups[gid], ix, arrays)
            self.members[(gid, tid)] = m
            self.by_ix.append(m)
        return (array.array("i", member_ix.astype(np.int32).tobytes()),
                array.array("i", group_ix.astype(np.int32).tobytes()))

    # -- time ----------------------------------------------------------------------------
    def _arm(self, m: _Member) -> None:
        # (The per-member arrays indexed here directly, not through the _Column
        # attributes: this runs for most requests.)
        arrays, ix = self.arrays, m.ix
        last = arrays.last_touch[ix]
        if arrays.check_at[ix] == NOT_ARMED and last >= 0:
            d = arrays.check_at[ix] = last + arrays.sessions[ix]
            self.checks.push(d, ix)

    def _step(self, t: int) -> None:
        if t > self.now:
            self.coord.advance_time(t - self.now)
            self.now = t

    def advance_to(self, t: int) -> None:
        """Take the checks due by t in order, then step the clock to t. The run settles
        those that need only bookkeeping (HeartbeatRun.settle_checks: a session check
        moved past newer contact, checks that watch nothing dropped); each one it leaves
        is a group's current check or a session that may have run out, taken here at
        its own time."""
        checks = self.checks
        while self.runs.settle_checks(t):
            d, code = checks.pop()
            if code < 0:                    # a group's check (code: ~ its ix)
                gv = self.by_group_ix[~code]
                self.arrays.group_check_at[~code] = NOT_ARMED
                self._step(d)
                self._observe(gv, "timeout")
                continue
            m = self.by_ix[code]
            self.arrays.check_at[code] = NOT_ARMED
            self._step(d)
            if m.rid is not None and self.coord.member_handle(m.group, m.rid) == -1:
                self._observe(m.view, "session-timeout")
        self._step(t)

    # -- observation ----------------------------------------------------------------------
    def _observe(self, gv: _GroupView, cause: str) -> None:
        # (given the group's view, which every caller holds: not looked up by id)
        gid = gv.gid
        if self.native_table is not None:
            version = self.native_table.group_version(gid)
        else:
            version = self.group_version(gid)
        if version == gv.version:           # (most answers of a round: nothing moved)
            return
        read = read_members(self.coord, gid, gv, version)
        if read is None:
            return
        state, current = read
        now = self._clock_now()
        before = len(gv.members)
        for rid in sorted(gv.members - current):
            m = self.by_rid.pop((gid, rid), None)
            if m is None:
                continue
            if m.rid == rid:
                self._drop(m)
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

    def _arm_group(self, gv: _GroupView, now: int) -> None:
        """A group check one rebalance timeout on: where a join or sync round times out."""
        d = now + max(gv.rebalance_timeout, 1)
        check_at = self.arrays.group_check_at
        if check_at[gv.ix] < d:                      # NOT_ARMED (-1) included
            check_at[gv.ix] = d
            self.checks.push(d, ~gv.ix)

    # -- requests -------------------------------------------------------------------------
    def _clock_now(self) -> int:
        """The coordinator's time: its ManualClock's `_now` (compiled: a field of the
        clock's extension type, which replay.pxd declares, read as a load)."""
        return self.clock._now

    def _touch(self, m: _Member) -> None:
        self.arrays.last_touch[m.ix] = self._clock_now()
        self._arm(m)

    def _respond(self, idx: int, error: int) -> None:
        self.errors[idx] = int(error)
        self.answered[idx] = self._clock_now()

    def _join(self, m: _Member, idx: int, row) -> None:
        inst, session, rebalance, ptype, protos, client = row
        gid = m.group
        gv = m.view
        arrays, ix = self.arrays, m.ix
        if inst is not None:
            old = self.static.get((gid, inst))
            if old is not None and old is not m:
                old.replaced = True
            self.static[(gid, inst)] = m
        # m.inst, m.replaced and m.session, in the arrays directly: every join sets them
        arrays.instances[ix] = inst
        arrays.replaced[ix] = False
        m.leaving = False
        if session is None:
            session = arrays.sessions[ix]
        else:
            session = arrays.sessions[ix] = int(session)
        rto = session if rebalance is None else int(rebalance)
        if rto > gv.rebalance_timeout:
            gv.rebalance_timeout = rto
        known = m.rid is not None and m.rid in gv.members
        cause = "member-rejoin" if known else "member-join"
        m.joining = idx
        self.coord.join_group(gid, m.rid or "", ptype or "consumer", protos,
                              session_timeout_ms=session,
                              rebalance_timeout_ms=None if rebalance is None else int(rebalance),
                              group_instance_id=inst, client_id=client or "",
                              callback=_Answer(self, m, idx, False))
        self._observe(gv, cause)

    def _join_answered(self, m: _Member, idx: int, result) -> None:
        """The coordinator's answer to the join at trace index idx."""
        err = int(_field(result, _J_ERROR))
        self._respond(idx, err)
        if m.joining != idx:
            # A join the member has sent again since (a trace can hold two in flight; a
            # client would not): the coordinator answers the older one only when it
            # fences it (a static member's rejoin with member id ""), and the newer join
            # decides the member's id, generation and pending sync.
            return
        m.joining = -1
        if err == _MIDREQ:
            # The trace's member "" is no one: its joins are ones their clients were given
            # no id for (a request log's join answered with an error), each going in
            # with "" again, never with an id another one's answer gave (the next would
            # join as that member: a member in the group that no client is).
            if m.tid != "":
                self._adopt(m, _field(result, _J_MEMBER_ID))
        elif err == 0:
            gv = m.view
            member_id, generation = _field(result, _J_MEMBER_ID), _field(result, _J_GENERATION)
            self._adopt(m, member_id)
            self.arrays.generations[m.ix] = generation
            if generation > gv.generation:
                gv.generation = generation
            m.leader_members = ([_field(x, _M_MEMBER_ID) for x in _field(result, _J_MEMBERS)]
                                if _field(result, _J_LEADER) == member_id else None)
            self._touch(m)
            self._observe(gv, "timeout")
            self._arm_group(gv, self._clock_now())
            if m.pending_sync is not None:
                sidx, m.pending_sync = m.pending_sync, None
                self._sync(m, sidx)
        elif err == _UNKNOWN:
            self._drop(m)
        if err != 0 and m.pending_sync is not None:
            sidx, m.pending_sync = m.pending_sync, None
            self._sync(m, sidx)

    def _adopt(self, m: _Member, rid: str) -> None:
        if rid and rid != m.rid:
            if m.rid is not None:
                self.by_rid.pop((m.group, m.rid), None)
            m.rid = rid
            self.arrays.handles[m.ix] = LOOK_UP
            self.by_rid[(m.group, rid)] = m

    def _drop(self, m: _Member) -> None:
        if m.rid is not None:
            self.by_rid.pop((m.group, m.rid), None)
        m.rid = None
        self.arrays.handles[m.ix] = NO_HANDLE

    def _sync(self, m: _Member, idx: int) -> None:
        if m.joining >= 0:
            if m.pending_sync is not None:        # superseded: never sent
                self._respond(m.pending_sync, -1)
            m.pending_sync = idx
            return
        gid = m.group
        assignments = {mid: b"" for mid in m.leader_members} if m.leader_members else None
        arrays, ix = self.arrays, m.ix
        self.coord.sync_group(gid, arrays.generations[ix], m.rid or "", assignments,
                              group_instance_id=arrays.instances[ix],
                              callback=_Answer(self, m, idx, True))
        self._observe(m.view, "timeout")

    def _sync_answered(self, m: _Member, idx: int, result) -> None:
        """The coordinator's answer to the sync at trace index idx."""
        err = int(_field(result, _S_ERROR))
        self._respond(idx, err)
        if err == 0:
            self._touch(m)
        elif err == _UNKNOWN:
            self._drop(m)
        self._observe(m.view, "timeout")

    def _leave(self, m: _Member, idx: int) -> None:
        gid = m.group
        m.leaving = True
        self._respond(idx, leave_answer(self.coord.leave_group(gid, [(m.rid or "", m.inst)])))
        self._observe(m.view, "leave")
        self._drop(m)

    def _heartbeat(self, m: _Member, idx: int) -> None:
        """A heartbeat of a member the coordinator holds no handle of: one given an id
        by MEMBER_ID_REQUIRED that has not joined yet, or one a newer incarnation of its
        instance id replaced (the runs leave those here). Naming an instance id, it goes
        by id with it, as the server's does: Kafka checks the instance first, and
        answers FENCED_INSTANCE_ID when it is another member's (a replaced member's id,
        which the replay no longer holds, is no member's: "" stands for it). Naming
        none, it is UNKNOWN_MEMBER_ID."""
        inst = self._sorted.column("instance_id")[idx].as_py()
        if inst is None:
            self.errors[idx] = _UNKNOWN
            self.answered[idx] = self.now
            return
        err = int(self.coord.heartbeat(m.group, m.rid or "", self.arrays.generations[m.ix],
                                       inst))
        self._respond(idx, err)
        if err == 0 or err == _IN_REBALANCE:
            self._touch(m)

    def _commit(self, m: _Member, idx: int, seq: int) -> None:
        res = self.coord.commit_offsets(m.group, m.rid or "", self.arrays.generations[m.ix],
                                        {COMMIT_PARTITION: seq}, group_instance_id=m.inst)
        err = int(next(iter(res.values()))) if res else 0
        self._respond(idx, err)
        if err == 0:
            self._touch(m)

    # -- the loop ----------------------------------------------------------------------------
    def run(self, table: pa.Table, end_ms: Optional[int] = None) -> Dict[str, pa.Table]:
        with fewer_collections():
            return self._run(table, end_ms)

    def _run(self, table: pa.Table, end_ms: Optional[int]) -> Dict[str, pa.Table]:
        table = with_trace_columns(table)
        if not in_trace_order(table):
            table = table.sort_by([("time_ms", "ascending"), ("seq", "ascending")])
        for at, field in enumerate(table.schema):
            if pa.types.is_dictionary(field.type):
                # one dictionary for the pieces' (_unified), made once for every reader
                table = table.set_column(at, field, pa.chunked_array([_unified(table.column(at))]))
        kinds = _event_kinds(table.column("event"))
        codes = np.frombuffer(kinds, np.uint8)
        other = codes == _OTHER
        if other.any():
            # rows of no classic event (consumer_heartbeat: the consumer group protocol's,
            # which this replay of the classic protocol does not play): left out, unanswered
            # (the kept rows' codes kept with them: the event column is not read again)
            table = table.filter(pa.array(~other))
            kinds = array.array("B", codes[~other].tobytes())
        self._sorted = table
        n = table.num_rows
        if not n:
            return self.tables()
        member_ix, group_ix = self._index(table)
        times = array.array("q", table.column("time_ms").to_numpy().tobytes())
        seqs = array.array("q", table.column("seq").to_numpy().tobytes())
        # The columns only a join reads, for the join rows alone (a small share of a trace)
        # (found by their kind, already computed, not by comparing the event column's
        # strings a second time)
        # In trace order, as the loop meets the joins: it takes them by a cursor
        join_at = np.flatnonzero(np.frombuffer(kinds, np.uint8) == _JOIN)
        joins = table.select(_JOIN_COLUMNS).take(join_at)
        columns = [_protocol_pairs(joins.column(c)) if c == "protocols"
                   else joins.column(c).to_pylist() for c in _JOIN_COLUMNS]
        join_rows = list(zip(*columns))
        self.errors = errors = array.array("i", [-1]) * n
        self.answered = answered = array.array("q", [-1]) * n
        self._start(times[0])
        arrays, checks, coord = self.arrays, self.checks, self.coord
        runs = self.runs = _twins.module(coord.impl, "pipeline.runs").HeartbeatRun(
            coord, kinds, times, member_ix, group_ix, errors, answered, arrays.handles,
            arrays.generations, arrays.check_at, arrays.last_touch, arrays.group_events,
            checks=checks, sessions=arrays.sessions, replaced=arrays.replaced,
            group_check_at=arrays.group_check_at,
            offsets=seqs, instances=arrays.instances, partition=COMMIT_PARTITION)
        if coord.impl == "native":
            self.native_runs = runs
        self._loop(runs, kinds, times, seqs, member_ix, group_ix, join_rows)
        if end_ms is not None and end_ms > self.now:
            self.advance_to(end_ms)
        for _, gv in sorted(self.groups.items()):
            self._observe(gv, "timeout")
        for _, gv in sorted(self.groups.items()):
            if gv.open is not None:         # still rebalancing at the trace's end
                start, why, mb = gv.open
                self.rebalances.append((self.shard, gv.gid, gv.generation, start, UNFINISHED,
                                        UNFINISHED, why, mb, len(gv.members)))
        gids = pa.array([gv.gid for gv in self.by_group_ix], pa.string())
        return self.tables(committed_offsets(
            table, np.frombuffer(kinds, np.uint8), np.frombuffer(group_ix, np.int32), gids,
            np.frombuffer(errors, np.int32), self.shard))

    def _loop(self, runs, kinds, times, seqs, member_ix, group_ix, join_rows) -> None:
        """Every event in turn: runs of heartbeats and commits by `runs`, the others here."""
        n = len(kinds)
        by_ix, checks, coord = self.by_ix, self.checks, self.coord
        advance_time, set_time_if_idle = coord.advance_time, coord.set_time_if_idle
        member_handle = coord.member_handle
        handles, group_events = self.arrays.handles, self.arrays.group_events
        long_runs = self.heartbeat_runs
        idx = 0
        next_join = 0           # join_rows' cursor: the row of the next join event
        while idx < n:
            kind = kinds[idx]
            if (kind == _HEARTBEAT or kind == _COMMIT) and long_runs:
                # A run of heartbeats and commits in one call; it stops where this path
                # is needed (then the same event comes back here), or at a commit that
                # commit_offsets must answer, with the checks and the clock where this
                # path would put them.
                nxt = self._play(runs, idx, None)
                if self._left_commit(runs):
                    group_events[group_ix[nxt]] += 1
                    self._commit(by_ix[member_ix[nxt]], nxt, seqs[nxt])
                    idx = nxt + 1
                    continue
                if nxt > idx:
                    idx = nxt
                    continue
            t = times[idx]
            if checks.next_due() <= t:
                self.advance_to(t)
            elif t > self.now:                  # advance_to(t) without a check due
                # Heartbeats and commits arm only session deadlines: the clock alone
                # moves when the coordinator says that is exactly what advance_time does.
                if not ((kind == _HEARTBEAT or kind == _COMMIT) and set_time_if_idle(t)):
                    advance_time(t - self.now)
                self.now = t
            ix = member_ix[idx]
            m = by_ix[ix]
            if kind == _HEARTBEAT or (kind == _COMMIT and long_runs):
                # The clock is at t and no check is due: a run from this event on (of
                # this one heartbeat without long runs), once the member's handle is
                # known (looked up once it has a member id). A heartbeat always plays; a
                # commit the coordinator must answer otherwise goes to commit_offsets.
                if handles[ix] == LOOK_UP:
                    h = member_handle(m.group, m.rid)
                    if h >= 0:
                        handles[ix] = h
                if kind == _HEARTBEAT and handles[ix] == LOOK_UP:   # no member by that id
                    group_events[group_ix[idx]] += 1
                    self._heartbeat(m, idx)
                    idx += 1
                    continue
                nxt = self._play(runs, idx, None if long_runs else idx + 1)
                if nxt > idx:
                    idx = nxt
                    continue
            group_events[group_ix[idx]] += 1
            if kind == _COMMIT:
                self._commit(m, idx, seqs[idx])
            elif kind == _HEARTBEAT:            # one the runs leave (_heartbeat)
                self._heartbeat(m, idx)
            elif kind == _JOIN:
                self._join(m, idx, join_rows[next_join])
                next_join += 1
            elif kind == _SYNC:
                self._sync(m, idx)
            elif kind == _LEAVE:
                self._leave(m, idx)
            idx += 1

    def _play(self, runs, idx: int, stop: Optional[int]) -> int:
        """runs.run from event idx (to `stop`), then the replay's clock (a run moves it).
        The next event's index."""
        if self.native_runs is not None:
            # Held typed (replay.pxd): compiled, a C call, with no method look-up,
            # argument parsing or `now` property; this runs for every run the replay
            # plays (a run's `now` is the clock's)
            nxt = self.native_runs.run(idx, stop)
            self.now = self._clock_now()
            return nxt
        nxt = runs.run(idx, stop)
        self.now = runs.now
        return nxt

    def _left_commit(self, runs) -> bool:
        """Did the last run stop at a commit that commit_offsets must answer?"""
        if self.native_runs is not None:
            return self.native_runs.left_commit
        return runs.left_commit

    def tables(self, offsets: Optional[pa.Table] = None) -> Dict[str, pa.Table]:
        """The result tables; `offsets`: the offsets table (committed_offsets), made by
        _run from the replay's own arrays (none: no rows, an empty one)."""
        groups = [(self.shard, g.gid, g.events, g.rebalances, g.expirations, g.generation,
                   g.state, len(g.members), g.rebalancing_ms)
                  for g in sorted(self.groups.values(), key=lambda g: g.gid)]
        out = {"responses": self._responses_table()}
        out["offsets"] = OFFSETS_SCHEMA.empty_table() if offsets is None else offsets
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
        cols["error"] = pa.array(np.frombuffer(self.errors, np.int32))
        cols["answered_ms"] = pa.array(np.frombuffer(self.answered, np.int64))
        # A dictionary-encoded string column (a packed trace's, given one dictionary by
        # _run) stays encoded: decoding it here would cost a pass over every row, and
        # what the table goes to takes it as it is (an Arrow stream, a Parquet file) or
        # decodes it once for all shards (canonical, blob_tables)
        arrays = [cols[f.name] for f in _RESPONSES_FIELDS]
        fields = [pa.field(f.name, a.type) if pa.types.is_dictionary(a.type) else f
                  for f, a in zip(_RESPONSES_FIELDS, arrays)]
        schema = pa.schema(fields)
        if all(a.type == f.type for a, f in zip(arrays, fields)):
            # the usual case: every column already of its type, put together as it is
            # (a cast would check and pass each one on)
            return pa.Table.from_arrays(arrays, schema=schema)
        return pa.table(cols).cast(schema)


def with_trace_columns(table: pa.Table) -> pa.Table:
    """The trace's columns in TRACE_SCHEMA's order; an optional one it lacks (a trace
    made before it existed) as nulls."""
    names = table.column_names
    for name in OPTIONAL:
        if name not in names:
            field = TRACE_SCHEMA.field(name)
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(_TRACE_NAMES)


def committed_offsets(rows: pa.Table, kinds: np.ndarray, groups: np.ndarray, gids: pa.Array,
                      errors: np.ndarray, shard: int) -> pa.Table:
    """The offsets table (OFFSETS_SCHEMA) of replayed trace rows in replay order, from
    their event codes (`kinds`), their groups' numbers (`groups`: into `gids`, the group
    ids) and their answers' error codes: each (group, topic, partition)'s last entry
    among the accepted commits' offsets, with its commit's time; its rows in the order
    of those last commits. An entry with a null field commits nothing. In array
    operations: a stable sort of the entries by (group and topic, partition) puts each
    key's entries together in replay order, the last of each run the one kept."""
    accepted = np.flatnonzero((kinds == _COMMIT) & (errors == 0))
    offsets = rows.column("offsets").take(pa.array(accepted))
    offsets = _one_array(offsets)
    entries = pc.list_flatten(offsets)
    at = accepted[pc.list_parent_indices(offsets).to_numpy(zero_copy_only=False)]
    # (each field with the entry's own validity: the struct's flatten, one call for
    # the three, by name)
    by_name = dict(zip((f.name for f in entries.type), entries.flatten()))
    fields = [by_name[f] for f in ("topic", "partition", "offset")]
    if any(f.null_count for f in fields):
        keep = np.ones(len(entries), bool)
        for f in fields:
            keep &= pc.is_valid(f).to_numpy(zero_copy_only=False)
        fields = [f.filter(pa.array(keep)) for f in fields]
        at = at[keep]
    if not len(at):
        return OFFSETS_SCHEMA.empty_table()
    topic, partition, offset = fields
    topics, topic_codes = _encoded(topic)
    pair = groups[at].astype(np.int64) * len(topics) + topic_codes
    part = partitions = partition.to_numpy(zero_copy_only=False)
    if int(pair.max()) < ONE_KEY_PAIRS:
        # one int64 key (pair, then the partition's 32 bits): one stable sort of a
        # key, faster than a lexsort of two (the partition's bits unsigned: a negative
        # one sorts above the others, still apart from them)
        key = (pair << 32) | (part.astype(np.int64) & 0xFFFFFFFF)
        order = np.argsort(key, kind="stable")
        key = key[order]
        ends = np.ones(len(order), bool)
        ends[:-1] = key[1:] != key[:-1]
    else:
        order = np.lexsort((part, pair))        # stable: replay order within a key
        pair, part = pair[order], part[order]
        ends = np.ones(len(order), bool)
        ends[:-1] = (pair[1:] != pair[:-1]) | (part[1:] != part[:-1])
    last = np.sort(order[ends])
    # The kept entries' fields picked in numpy where they are numbers (no nulls left
    # among them): one Arrow take each costs more than the pick, for a shard's few
    at_last = at[last]
    return pa.table([pa.array(np.full(len(last), shard, np.int32)),
                     gids.take(pa.array(groups[at_last])), topic.take(pa.array(last)),
                     pa.array(partitions[last]),
                     pa.array(offset.to_numpy(zero_copy_only=False)[last]),
                     pa.array(rows.column("time_ms").to_numpy()[at_last])],
                    schema=OFFSETS_SCHEMA)


def _protocol_pairs(column, few_rows: Optional[int] = None) -> list:
    """Each join's protocol names (a list<string> column) as the (name, metadata) pairs
    join_group takes (["range"] when it names none): one list per distinct set of names,
    which every join naming it shares (join_group copies what it keeps). The rows are
    told apart by their names joined into one string, dictionary-encoded by Arrow, so
    only one row per distinct set becomes Python objects; where a name holds the
    separator, or a row a null name, every row is read as Python lists instead, and so
    is a column of fewer rows than `few_rows` (None: _FEW_ROWS)."""
    column = _one_array(column)
    if not len(column):
        return []
    if len(column) < (_FEW_ROWS if few_rows is None else few_rows):
        # a few rows (a small shard's joins): read as Python lists, cheaper than the
        # dozen Arrow calls below, whose fixed cost only many rows repay
        shared = {}
        return [_pairs_of(row, shared) for row in column.to_pylist()]
    names = pc.list_flatten(column)
    if names.null_count == 0 and not pc.any(pc.match_substring(names, _NAME_SEP)).as_py():
        # A row's key: its names joined, null for a null or an empty list (both name
        # none: "range"; a list of one empty name joins to "", not null)
        named = pc.fill_null(pc.greater(pc.list_value_length(column), 0), False)
        keys = pc.if_else(named, pc.binary_join(column, _NAME_SEP), None)
        keys = keys.dictionary_encode(null_encoding="encode")
        codes = keys.indices.to_numpy(zero_copy_only=False)
        firsts = _first_occurrences(codes)
        shared: Dict[tuple, list] = {}
        made = [_pairs_of(row, shared) for row in column.take(pa.array(firsts)).to_pylist()]
        return [made[c] for c in codes.tolist()]
    shared = {}
    return [_pairs_of(row, shared) for row in column.to_pylist()]


def _pairs_of(names: Optional[list], shared: Dict[tuple, list]) -> list:
    """_protocol_pairs' list for one row's names, the one in `shared` if made already."""
    names = tuple(names or ("range",))
    pairs = shared.get(names)
    if pairs is None:
        pairs = shared[names] = [(p, b"") for p in names]
    return pairs


_NAME_SEP = "\x00"          # _protocol_pairs' separator: no protocol name holds it, as a rule
_FEW_ROWS = 1024            # ... and below this many rows, it reads them as Python lists


def _encoded(column) -> Tuple[pa.Array, np.ndarray]:
    """(the distinct values in order of first appearance, each value's number among
    them): pyarrow's dictionary encoding (a hash table, not a sort); null is numbered
    len(distinct), a value of its own. A column already dictionary-encoded (the packed
    trace's, spark.pack_by_shard) is renumbered by its indices (_recoded)."""
    if pa.types.is_dictionary(column.type):
        recoded = _recoded(column)
        if recoded is not None:
            return recoded
        column = column.cast(column.type.value_type)
    enc = _one_array(column).dictionary_encode()
    codes = enc.indices
    if codes.null_count:
        codes = pc.fill_null(codes, len(enc.dictionary))
    return enc.dictionary, codes.to_numpy(zero_copy_only=False)


def _one_array(column) -> pa.Array:
    """A column as one Array: a ChunkedArray's only chunk as it is (combine_chunks
    copies even one: a pass over the column for every reader of it), else its chunks
    combined."""
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _with_null(distinct: pa.Array) -> pa.Array:
    """_encoded's distinct values and a null after them (null's number)."""
    return pa.concat_arrays([distinct, pa.nulls(1, distinct.type)])


def _unified(column) -> pa.DictionaryArray:
    """A dictionary column as one array with one dictionary (its chunks, from different
    pieces of the trace, each have their own): the dictionaries' values are hashed,
    not the rows'."""
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return column.chunk(0)
        column = column.unify_dictionaries().combine_chunks()
    return column


def _recoded(column) -> Optional[Tuple[pa.Array, np.ndarray]]:
    """_encoded for a dictionary column, from its indices: the same numbers, in order of
    first appearance, from an integer pass over them (a packed trace's; an integer hash
    otherwise) where decoding would hash every row's string. None when its dictionary
    repeats a value (Arrow allows it; two indices would then number one value twice):
    the caller decodes the column instead."""
    column = _unified(column)
    distinct = column.dictionary
    codes = pc.fill_null(column.indices, -1).to_numpy(zero_copy_only=False)
    firsts = _first_uses(codes)
    if len(codes) and firsts is not None and len(firsts) == len(distinct):
        # Already so numbered: every value used, each first used after those before it.
        # The packed trace's are: each piece's dictionary in order of first appearance
        # (dictionary_encode), and unifying pieces appends each one's new values in its
        # dictionary's order. An integer pass, where renumbering hashes every row.
        codes = np.where(codes < 0, len(distinct), codes)
    else:
        enc = column.indices.dictionary_encode()
        distinct = distinct.take(enc.dictionary)
        codes = pc.fill_null(enc.indices, len(distinct)).to_numpy(zero_copy_only=False)
    if pc.count_distinct(distinct).as_py() != len(distinct) or distinct.null_count:
        return None
    return distinct, codes


def _dense_codes(column) -> np.ndarray:
    """Each value's number (int64), 0, 1, ... in order of first appearance."""
    return _encoded(column)[1].astype(np.int64)


def _pair_codes(group_codes: np.ndarray, member_codes: np.ndarray) -> np.ndarray:
    """Each row's (group, member id) pair's number, 0, 1, ... in order of first
    appearance, from the two columns' numbers (_dense_codes). Where no member id
    appears in two groups (a trace of client-side ids: the rule, not the exception) the
    member ids' own numbers are already that: the pairs and the ids correspond one to
    one and first appear at the same rows. Three array passes check it, cheaper per row
    than numbering the pairs afresh, which hashes every row again."""
    if not len(member_codes):
        return member_codes
    span = int(member_codes.max()) + 1
    group_of = np.empty(span, np.int64)
    group_of[member_codes] = group_codes
    if np.array_equal(group_of[member_codes], group_codes):
        return member_codes
    return _dense_codes(pa.array(group_codes * span + member_codes))


def _first_occurrences(codes: np.ndarray) -> np.ndarray:
    """Where each code of `codes` (numbered in order of first appearance) first appears:
    exactly where the running maximum grows."""
    firsts = _first_uses(codes)
    if firsts is None:          # (numbered otherwise: where it grows all the same)
        return np.flatnonzero(_running_max_steps(codes) > 0)
    return firsts


def _running_max_steps(codes: np.ndarray) -> np.ndarray:
    """How much the running maximum of `codes` grows at each row (from -1)."""
    return np.diff(np.maximum.accumulate(codes), prepend=-1)


def _first_uses(codes: np.ndarray) -> Optional[np.ndarray]:
    """Where each number of `codes` (0, 1, ...; -1 for none, passed over) is first used,
    when each is first used after every smaller one (the numbers of values in order of
    first appearance: the running maximum grows by one at a time), else None."""
    if not len(codes):
        return np.zeros(0, np.int64)
    # One typed pass (replay.pxd types _first_uses_into), where numpy's running maximum
    # and its steps take three
    out = np.empty(len(codes), np.int64)
    n = _first_uses_into(np.ascontiguousarray(codes, np.int64), out)
    return out[:n] if n >= 0 else None


def _first_uses_into(codes, out) -> int:
    """_first_uses' pass (compiled: replay.pxd types it): the positions into `out`, and
    their count; -1 when a number is first used before a smaller one."""
    top = -1
    n = 0
    for i in range(codes.shape[0]):
        c = codes[i]
        if c > top:
            if c != top + 1:
                return -1
            out[n] = i
            n += 1
            top = c
    return n


_EVENT_NAMES = pa.array(list(_EVENT_CODES))
_EVENT_LOOKUP = np.array(list(_EVENT_CODES.values()) + [_OTHER], np.uint8)


def _event_kinds(column) -> array.array:
    """The events' codes (_HEARTBEAT, ...; _OTHER for an unknown one or null): each
    row's place among the five names (a look-up in a hash set of five, cheaper per row
    than dictionary-encoding the column), null where it is none of them."""
    if pa.types.is_dictionary(column.type):
        # each dictionary value's code, then the rows' by their indices
        column = _unified(column)
        per_value = np.append(np.frombuffer(_event_kinds(column.dictionary), np.uint8),
                              np.uint8(_OTHER))
        at = pc.fill_null(column.indices, len(column.dictionary))
        return array.array("B", per_value[at.to_numpy(zero_copy_only=False)].tobytes())
    column = _one_array(column)
    if column.type != pa.string():          # (a large_string column)
        column = column.cast(pa.string())
    at = pc.index_in(column, value_set=_EVENT_NAMES)
    if at.null_count:                       # (an unknown event or a null one)
        at = pc.fill_null(at, len(_EVENT_CODES))
    return array.array("B", _EVENT_LOOKUP[at.to_numpy(zero_copy_only=False)].tobytes())


def shard_column(group_ids, num_shards: int = NUM_SHARDS) -> List[int]:
    return [shard_for(g, num_shards) for g in group_ids]    # shard_for remembers groups


def shard_array(group_ids, num_shards: int = NUM_SHARDS) -> pa.Int32Array:
    """Each row's coordinator shard (int32), from a column of group ids: the Java hash
    runs once per distinct group, not per row. A null group id is a TypeError, as in
    shard_for: a row no coordinator shard can take."""
    distinct, codes = _encoded(group_ids)
    if len(codes) and codes.max() == len(distinct):            # (null's code)
        raise TypeError("group_id must be a str, got a null group id")
    shards = np.array(shard_column(distinct.to_pylist(), num_shards), np.int32)
    return pa.array(shards[codes])


def split_by_shard(table: pa.Table, num_shards: int = NUM_SHARDS) -> Dict[int, pa.Table]:
    """The rows of each coordinator shard (by their group id), shards ascending, each
    shard's rows in the table's order; a shard without rows has no entry."""
    return split_on(table, shard_array(table.column("group_id"), num_shards))


def split_on(table: pa.Table, shards) -> Dict[int, pa.Table]:
    """The rows of `table` by their value in `shards` (one per row, no nulls), values
    ascending, each one's rows in the table's order: one sort, then slices."""
    shards = _one_array(shards)
    order = pc.sort_indices(shards)              # a stable sort: table order within a shard
    table = table.take(order)
    ids, counts = np.unique(shards.to_numpy(), return_counts=True)
    out, start = {}, 0
    for s, n in zip(ids.tolist(), counts.tolist()):
        out[s] = table.slice(start, n)
        start += n
    return out


def replay_shard(table: pa.Table, shard: int, *, impl=None, end_ms=None,
                 num_shards: int = NUM_SHARDS) -> Tuple[Dict[str, pa.Table], str]:
    """(the shard's replay tables, the twin that replayed it, "none" for no
    coordinator). The replay is dropped inside: its coordinator's cycles are collected
    once, dead (_gc)."""
    with collected_after():
        replay = ShardReplay(shard, impl=impl, num_shards=num_shards)
        tables = replay.run(table, end_ms)
        used = replay.coord.impl if replay.coord is not None else "none"
        del replay
    return tables, used


def replay_shard_table(table: pa.Table, shard: int, *, impl=None, end_ms=None,
                       num_shards: int = NUM_SHARDS) -> Dict[str, pa.Table]:
    return replay_shard(table, shard, impl=impl, end_ms=end_ms, num_shards=num_shards)[0]


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


def fresh_table_dirs(out_dir: str) -> None:
    """out_dir/<table>/ for each table, emptied: files of an earlier replay (of either
    path, single-process or Spark) must not mix with this one's. An earlier runtime.json
    goes too: it describes that replay (a Spark one writes it last, once every table
    is whole)."""
    runtime = os.path.join(out_dir, "runtime.json")
    if os.path.exists(runtime):
        os.unlink(runtime)
    for name in TABLES:
        folder = os.path.join(out_dir, name)
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.makedirs(folder)


def write_table_file(path: str, table: pa.Table) -> None:
    """`table` as the Parquet file `path`, which appears only whole: written under a
    hidden temporary name beside it, then renamed (a Spark task that is retried, or
    runs twice, rewrites the same name with the same rows)."""
    import uuid

    import pyarrow.parquet as pq
    folder, base = os.path.split(path)
    tmp = os.path.join(folder, f".{base}.{uuid.uuid4().hex}.tmp")
    # A dictionary-encoded column (a replay's responses, from a packed trace) goes in as
    # Parquet's own dictionary pages; without the Arrow schema in the file it reads back
    # as its value type, as the same column written plain does.
    encoded = any(pa.types.is_dictionary(f.type) for f in table.schema)
    try:
        pq.write_table(table, tmp, store_schema=not encoded)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def canonical(table: pa.Table, name: str) -> pa.Table:
    """The table in its documented schema and a total order (for comparisons)."""
    return sort_canonical(table, TABLES[name], SORT_KEYS[name])


def sort_canonical(table: pa.Table, schema: pa.Schema, keys: List[str]) -> pa.Table:
    """`table` in `schema`, sorted by `keys` then by every other column: a total order."""
    # (one chunk per column first: a sort of several chunks sorts each, then merges
    # them, and its take picks across them, each dearer than the copy into one)
    table = table.select(schema.names).cast(schema).combine_chunks()
    if _strictly_ordered(table, keys):
        return table        # (what the sort would give: no two rows tie on `keys`)
    keys = keys + [n for n in schema.names if n not in keys]
    return table.sort_by([(k, "ascending") for k in keys])


def _strictly_ordered(table: pa.Table, keys: List[str]) -> bool:
    """Whether the rows are already in strictly ascending order of `keys` (so no two
    share them, and the other columns order nothing): decided for integer key columns
    without nulls, in a few array passes (replay_local's responses, shard then seq, come
    so as a rule); any other key column: False, the caller sorts."""
    columns = []
    for k in keys:
        column = table.column(k)
        if not pa.types.is_integer(column.type) or column.null_count:
            return False
        columns.append(column.to_numpy())
    undecided = np.ones(max(table.num_rows - 1, 0), bool)   # adjacent pairs tied so far
    for c in columns:
        if (undecided & (c[1:] < c[:-1])).any():
            return False
        undecided &= c[1:] == c[:-1]
    return not undecided.any()


def read_members(coord: GroupCoordinator, gid: str, view,
                 version: Optional[int] = None) -> Optional[Tuple[str, set]]:
    """The group's state and member ids now, or None when neither changed since the last
    read. `view` remembers that read: `state` (the caller's to set to the state returned),
    `members` (the caller's to replace with the ids returned), `epoch` and `version`
    (None before the first read; updated here). Nothing more is read while
    `group_version` has not moved; the ids come from `member_ids` only when
    `group_summary`'s members epoch says they changed. `version`: group_version(gid),
    when the caller has just read it.

    None lets an observer skip a request that changed nothing it records (most joins
    and syncs of a rebalance): an observer that opens a rebalance exactly when it reads
    a rebalancing state and closes it when it reads another has nothing to do then."""
    if version is None:
        version = coord.group_version(gid)
    if version == view.version:
        return None
    view.version = version
    summary = coord.group_summary(gid)
    state, epoch = _field(summary, _G_STATE), _field(summary, _G_EPOCH)
    if epoch == view.epoch:
        if state == view.state:
            return None
        return state, view.members        # the same member ids as last time
    view.epoch = epoch
    return state, set(coord.member_ids(gid))


def leave_answer(result) -> int:
    """A one-member LeaveGroup's answer: the request's error, else its member's."""
    if result.error != Errors.NONE or not result.member_errors:
        return int(result.error)
    return int(result.member_errors[0])


def in_trace_order(table: pa.Table) -> bool:
    """Whether the rows are already in (time_ms, seq) order, so that sorting them (a
    stable sort) would change nothing. A trace usually is, and the check is a few array
    passes over two columns, where the sort copies every column."""
    times, seqs = table.column("time_ms"), table.column("seq")
    if times.null_count or seqs.null_count:
        return False                                # the sort puts nulls last
    times, seqs = times.to_numpy(), seqs.to_numpy()
    steps = np.diff(times)
    if (steps < 0).any():
        return False
    seq_steps = np.diff(seqs)
    if not (seq_steps < 0).any():
        # the usual case (seq numbers the rows as written, in time order): no row's seq
        # falls at all, so none within a time (no mask to build: the mask below copies
        # the steps)
        return True
    return not (seq_steps[steps == 0] < 0).any()


def rows_table(rows: List[tuple], schema: pa.Schema) -> pa.Table:
    """Row tuples (in `schema`'s column order, one value per field) as a table of
    `schema`: converted as one array of structs, the table its fields. (One conversion,
    where one per column costs several times as much for the few rows of a shard's
    small tables: every shard's replay makes three.)"""
    row_type = _ROW_TYPES.get(id(schema))
    if row_type is None or row_type[0] is not schema:
        # (each schema's struct type made once: its fields, read through the schema's
        # iterator, are a wrapped object each)
        row_type = _ROW_TYPES[id(schema)] = (schema, pa.struct(list(schema)))
    table = pa.Table.from_struct_array(pa.array(rows, type=row_type[1]))
    return table.replace_schema_metadata(schema.metadata) if schema.metadata else table


_ROW_TYPES: Dict[int, Tuple[pa.Schema, pa.DataType]] = {}    # rows_table's, by schema


def member_ids(*scope) -> Callable[[str], str]:
    """A deterministic member_id_factory: "<prefix>-<scope...>-<n>", n = 1, 2, ..."""
    tag = "-".join(str(s) for s in scope)
    counter = itertools.count(1)

    def member_id_factory(prefix: str) -> str:
        return f"{prefix or 'member'}-{tag}-{next(counter)}"
    return member_id_factory

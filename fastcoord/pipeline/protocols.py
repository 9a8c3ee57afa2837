"""Protocol what-if: the trace's consumers under Kafka's eager and cooperative classic
rebalancing and under the consumer group protocol (KIP-848), owning partitions.

`fastcoord whatif --protocol classic-eager,classic-cooperative,consumer` acts out the
behaviour whatif.py derives from a trace (joins, pauses, crashes, leaves, restarts) for
every configuration of the settings grid under each protocol, against a real
GroupCoordinator on a ManualClock (zero network latency, as whatif.py), and follows who
consumes which partition:

- classic-eager (whatif.ShardSimulation's consumer, with partitions): a member revokes
  everything when it (re)joins and takes what its SyncGroup answer gives; the leader
  assigns with the range assignor (contiguous ranges over the member ids in order;
  fastcoord.core.assignors' "range").
- classic-cooperative (KIP-429, the cooperative-sticky assignor): a member keeps
  consuming what it owns through a rebalance; the leader computes a sticky balanced
  target (the uniform assignor of fastcoord.core.assignors) from the partitions each
  member owns and withholds, for this generation, any
  partition another member still owns; the owner revokes it at its SyncGroup answer
  and rejoins at once, and the follow-up rebalance gives it to its new owner (each
  JoinGroup carries the owned partitions and generation, as Kafka's subscription does:
  the change is what makes a follower's rejoin start that rebalance).
- consumer: ConsumerGroupHeartbeat every group.consumer.heartbeat.interval.ms (the
  grid's heartbeat interval, else Kafka 4's default 5 s) with the owned partitions,
  the server-side uniform assignor; each answer's assignment is reconciled at once
  (revoke what it leaves out, take what it adds) and acknowledged by a heartbeat at
  once; the coordinator gives a partition only once its owner released it. No
  group-wide barrier. A clean stop leaves with epoch -1 (-2 for a static member); a
  member told UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH loses its partitions and joins
  again with epoch 0. The session timeout is the grid's (group.consumer.session.timeout.ms).

In every protocol a stopping process releases its partitions when it stops, a crashed
one when it crashes (nobody consumes them until the coordinator hands them on), and a
poll timeout or a fencing loses them. A partition is *unavailable* while no live
process holds it (from its release to its next owner taking it) and the group has a
running process to hold it; a stall of the process that holds it (a pause of the
trace) is not counted, nor a time in which none of the group's processes runs (all
stopped or crashed, before a restart or to the end): both are the same under every
protocol. The trace format carries no partition numbers, so each group has
`partitions` of one topic (`--partitions`, default 12).

Every figure is measured over the same window for every configuration and protocol:
per group, from the latest of the runs' first steady assignments (every partition
owned once, the running processes' shares within one of each other, once the group's
first processes have all started: formation_end; forming the group, which each
protocol does differently and a trace of a running system does not contain, is left
out) to the trace's end plus the grid's largest session timeout (every run is
simulated up to there). Measured per group:
partition-unavailable time, rebalances (classic: a join round, the follow-up of a
cooperative one included; consumer: a new group epoch), members paused (per rebalance,
the live members that had to stop consuming at least one partition they kept before:
a leaving or crashed member is not counted) and partitions revoked (a leaving one's
included).
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import pyarrow as pa

from .. import CoordinatorConfig, Errors, GroupCoordinator, ManualClock
from ..core.assignors import compute_assignment
from ..core.consumer_embedded import encode_subscription
from ..core.store import InMemoryStore
from ._gc import fewer_collections
from .replay import NUM_SHARDS, member_ids, rows_table, sort_canonical, split_by_shard
from .whatif import (_FENCED, _HB, _ILLEGAL, _JOINED, _NONE, _POLL, _REJOIN, _START, _STOP,
                     _SYNCED, _UNKNOWN, COLUMNS, DEFAULT_MAX_POLL_MS, DEFAULT_SESSION_MS,
                     INITIAL_DELAY_MS, RETRY_BACKOFF_MS, Incarnation, ShardSimulation, WhatIfConfig, _Client,
                     derive_behaviour)

PROTOCOLS = ("classic-eager", "classic-cooperative", "consumer")
_TOPIC = "t"                      # the classic assignors' one topic (a name of their own)
DEFAULT_PARTITIONS = 12
CONSUMER_HEARTBEAT_MS = 5000      # Kafka 4's group.consumer.heartbeat.interval.ms default

_RECONCILE = _REJOIN              # (its priority among same-ms events: an answer's)
_FENCED_EPOCH = int(Errors.FENCED_MEMBER_EPOCH)
_FENCED_INSTANCE = int(Errors.FENCED_INSTANCE_ID)

GROUPS_SCHEMA = pa.schema([
    ("config", pa.int32()), ("protocol", pa.string()), ("shard", pa.int32()),
    ("group_id", pa.string()), ("partitions", pa.int32()), ("window_start_ms", pa.int64()),
    ("window_end_ms", pa.int64()), ("unavailable_ms", pa.int64()), ("rebalances", pa.int64()),
    ("members_paused", pa.int64()), ("partitions_revoked", pa.int64())])
SUMMARY_SCHEMA = pa.schema([
    ("config", pa.int32()), ("protocol", pa.string()), ("label", pa.string()),
    ("groups", pa.int64()), ("partitions", pa.int64()), ("window_s", pa.float64()),
    ("partition_unavailable_s", pa.float64()), ("unavailable_fraction", pa.float64()),
    ("rebalances", pa.int64()), ("members_paused", pa.int64()),
    ("members_paused_per_rebalance", pa.float64()), ("partitions_revoked", pa.int64())])
TABLES = {"protocol_groups": GROUPS_SCHEMA, "protocol_summary": SUMMARY_SCHEMA}
SORT_KEYS = {"protocol_groups": ["config", "protocol", "group_id"],
             "protocol_summary": ["config", "protocol"]}


def parse_protocols(text: str) -> List[str]:
    """'classic-eager,consumer' -> the names, checked (ValueError in one line)."""
    names = [v.strip() for v in text.split(",")]
    bad = [v for v in names if v not in PROTOCOLS]
    if bad or not names or len(set(names)) != len(names):
        raise ValueError(f"expected a comma list of {', '.join(PROTOCOLS)} (each once), "
                         f"got {text!r}")
    return names


# -- who consumes what ------------------------------------------------------------------------

class Ledger:
    """Which processes consume each partition of one group, every interval in which none
    did (after the partition was first owned), the revocations and the rebalances."""

    def __init__(self, partitions: int):
        self.n = partitions
        self.holders: List[set] = [set() for _ in range(partitions)]
        self.free_since: List[Optional[int]] = [None] * partitions
        self.ever = [False] * partitions
        self.unheld = partitions              # partitions no process holds
        self.full_at: Optional[int] = None    # the group's first steady assignment (_Owned)
        self.gaps: List[Tuple[int, int, int]] = []           # (partition, from, to)
        self.revocations: List[tuple] = []    # (time, member, count, paused, rebalance key)
        self.rebalances: Dict[object, int] = {}               # key -> start (first seen)
        self.horizon: Optional[int] = None
        # the intervals in which none of the group's processes runs (disjoint, sorted):
        # a partition unheld then has nobody to hold it under any protocol
        self.idle: List[Tuple[int, int]] = []

    def take(self, who, parts, now: int) -> None:
        for p in parts:
            h = self.holders[p]
            if not h:
                self.unheld -= 1
                if self.free_since[p] is not None:
                    self.gaps.append((p, self.free_since[p], now))
                    self.free_since[p] = None
            h.add(who)
            self.ever[p] = True

    def release(self, who, parts, now: int) -> None:
        for p in parts:
            h = self.holders[p]
            if who in h:
                h.discard(who)
                if not h:
                    self.unheld += 1
                    self.free_since[p] = now

    def rebalance(self, key, now: int) -> None:
        self.rebalances.setdefault(key, now)

    def close(self, horizon: int) -> None:
        """The end of the run: a partition still unheld is so up to `horizon`."""
        self.horizon = horizon
        for p, since in enumerate(self.free_since):
            if since is not None:
                self.gaps.append((p, since, horizon))
                self.free_since[p] = None


def formation_end(incarnations: Sequence[Incarnation]) -> int:
    """When the last of a group's first processes starts: those that start one after
    another, each within the initial rebalance delay of the one before (the classic
    coordinator gathers them into its first generation so). Its formation ends at its
    first steady assignment after that."""
    starts = sorted(inc.start_ms for inc in incarnations)
    if not starts:
        return 0
    end = starts[0]
    for t in starts[1:]:
        if t - end > INITIAL_DELAY_MS:
            break
        end = t
    return end


def _partitions_of(partitions: Union[int, Mapping[str, int]], gid: str) -> int:
    n = partitions.get(gid, DEFAULT_PARTITIONS) if isinstance(partitions, Mapping) else partitions
    if not isinstance(n, int) or n <= 0:
        raise ValueError(f"partitions must be a positive int, got {n!r} for group {gid!r}")
    return n


class _Owned:
    """The partitions each simulated process holds, kept in its group's ledger."""

    def _init_owned(self, behaviour, partitions) -> None:
        self.ledgers = {gid: Ledger(_partitions_of(partitions, gid)) for gid in behaviour}
        self.owned: Dict[object, set] = defaultdict(set)
        self.live: Dict[str, set] = defaultdict(set)     # each group's running processes
        self.formed_after = {gid: formation_end(incs) for gid, incs in behaviour.items()}

    def _take(self, c, parts) -> None:
        parts = set(parts) - self.owned[c]
        if parts:
            self.owned[c] |= parts
            ledger = self.ledgers[c.group]
            ledger.take(c, sorted(parts), self.now)
            self._note_steady(c.group)

    def _note_steady(self, gid: str) -> None:
        ledger = self.ledgers[gid]
        if ledger.full_at is None and self.now >= self.formed_after[gid] and self._steady(gid):
            ledger.full_at = self.now

    def _steady(self, gid: str) -> bool:
        """Whether every partition has one owner and the running processes hold balanced
        shares (sizes within one). The first time it holds once the group's first
        processes have all started (formation_end) is the end of the group's formation,
        however the protocol went about it (a consumer-protocol group first gives
        everything to its first member, then moves partitions to each one that joins:
        that first member alone is no end of it)."""
        ledger = self.ledgers[gid]
        sizes = [len(self.owned[c]) for c in self.live[gid]]
        return (ledger.unheld == 0 and bool(sizes) and sum(sizes) == ledger.n
                and max(sizes) - min(sizes) <= 1)

    def _release(self, c, parts, paused: bool, key=None) -> None:
        """c stops consuming `parts`; `paused`: a member that stays (a revocation of a
        rebalance), else a process that stops or loses everything. `key`: the rebalance
        it belongs to, when not the group's latest."""
        parts = set(parts) & self.owned[c]
        if not parts:
            return
        self.owned[c] -= parts
        ledger = self.ledgers[c.group]
        ledger.release(c, sorted(parts), self.now)
        ledger.revocations.append((self.now, c.inc.member, len(parts), paused,
                                   self._rebalance_key(c.group) if key is None else key))

    def _release_all(self, c) -> None:
        self._release(c, set(self.owned[c]), paused=False)

    def _rebalance_key(self, gid: str):
        raise NotImplementedError


# -- the classic protocol ---------------------------------------------------------------------

def assignment(name: str, members: Sequence[str], n: int,
               current: Optional[Mapping[str, Sequence[int]]] = None, *,
               impl: Optional[str] = None) -> Dict[str, List[int]]:
    """One topic of n partitions over `members` with the core's assignor `name`
    (fastcoord.core.assignors): "range" (members in id order, contiguous ranges, the
    first n % len(members) one longer: the classic RangeAssignor's result for one topic)
    or "uniform" (balanced, keeping each member's `current` partitions where balance
    allows: the cooperative-sticky assignor's target)."""
    got = compute_assignment(name, [(m, None, [_TOPIC]) for m in members], {_TOPIC: n},
                             {m: {_TOPIC: list(ps)} for m, ps in (current or {}).items()
                              if m in members and ps}, impl=impl)
    return {m: list(got[m].get(_TOPIC, ())) for m in members}


def cooperative_assignment(owned: Mapping[str, Sequence[int]], n: int, *,
                           impl: Optional[str] = None) -> Dict[str, List[int]]:
    """KIP-429's answer to a join round. `owned`: every member's owned partitions, as its
    JoinGroup reported them (a partition claimed twice: the first member id's). The
    target keeps owned partitions where balance allows (the uniform assignor); each
    member's answer leaves out the partitions another member still owns: they move at
    the follow-up rebalance, once released."""
    ordered = sorted(owned)
    claimed: Dict[int, str] = {}
    for m in ordered:
        for p in sorted(owned[m]):
            if 0 <= p < n:
                claimed.setdefault(p, m)
    current = {m: [p for p in sorted(owned[m]) if claimed.get(p) == m] for m in ordered}
    target = assignment("uniform", ordered, n, current, impl=impl)
    return {m: sorted(p for p in target[m] if claimed.get(p, m) == m) for m in ordered}


def _encode(parts: Sequence[int]) -> bytes:
    return ",".join(map(str, parts)).encode()


def _decode(data: bytes) -> set:
    return {int(p) for p in data.decode().split(",") if p}


class ClassicSimulation(_Owned, ShardSimulation):
    """whatif.ShardSimulation's classic consumers, owning partitions: eager (revoke
    everything at a join) or cooperative (keep consuming; revoke at the SyncGroup answer
    what the assignment leaves out, then rejoin at once)."""

    def __init__(self, behaviour, config: WhatIfConfig, *, cooperative: bool,
                 partitions: Union[int, Mapping[str, int]], reaction_ms: int = 0, **kw):
        super().__init__(behaviour, config, **kw)
        self.cooperative = cooperative
        self.reaction_ms = reaction_ms
        self._init_owned(behaviour, partitions)
        self._open_seen: Dict[str, object] = {}     # the rebalance (gv.open) last seen
        self._keys: Dict[str, int] = defaultdict(int)
        # the rebalance each member's SyncGroup belongs to: a revocation at its answer is
        # that rebalance's, though another member's rejoin may have opened the next
        self._sync_keys: Dict[object, int] = {}

    def _rebalance_key(self, gid: str):
        return self._keys[gid]

    def _push(self, t: int, kind: int, obj, arg=None) -> None:
        if kind in (_JOINED, _SYNCED):
            t += self.reaction_ms         # the consumer handles an answer that much later
        super()._push(t, kind, obj, arg)

    def _observe(self, gid: str, cause: str) -> None:
        super()._observe(gid, cause)
        gv = self.groups[gid]
        if gv.open is not None and gv.open is not self._open_seen.get(gid):
            self._open_seen[gid] = gv.open
            self._keys[gid] += 1
            self.ledgers[gid].rebalance(self._keys[gid], gv.open[0])

    def _join_protocols(self, c: _Client) -> list:
        """Cooperative: the subscription Kafka's consumer sends (ConsumerProtocol v1+),
        with the partitions c owns and its generation. The coordinator compares it with
        the member's last one: a follower rejoining a Stable group with the same
        metadata gets the current generation back without a rebalance, so the owned
        partitions are what makes the follow-up rejoin after a revocation start the
        rebalance that hands the revoked partitions on."""
        if not self.cooperative:
            return super()._join_protocols(c)
        return [("cooperative-sticky", encode_subscription(
            [_TOPIC], None, {_TOPIC: sorted(self.owned[c])}, c.gen))]

    def _join(self, c: _Client, rid: str) -> None:
        super()._join(c, rid)
        self.live[c.group].add(c)
        if not self.cooperative:
            self._release(c, set(self.owned[c]), paused=True)
        self._note_steady(c.group)      # (one that holds nothing can complete the balance)

    def _sync(self, c: _Client) -> None:
        # ShardSimulation._sync with the leader's assignment (the rest as there)
        c.state = "syncing"
        self._sync_keys[c] = self._keys[c.group]
        self.groups[c.group].stats["requests"] += 1
        assignments = None          # (a follower sends none)
        if c.leader_members:
            n = self.ledgers[c.group].n
            if self.cooperative:
                plan = cooperative_assignment({m: self._owned_by(c.group, m)
                                               for m in c.leader_members}, n, impl=self.impl)
            else:
                plan = assignment("range", c.leader_members, n, impl=self.impl)
            assignments = {m: _encode(ps) for m, ps in plan.items()}
        row = self._record(c, "sync")
        self.coord.sync_group(c.group, c.gen, c.rid, assignments, group_instance_id=c.inst,
                              callback=self._respond(_SYNCED, c, row))
        self._observe(c.group, "timeout")

    def _owned_by(self, gid: str, rid: str) -> List[int]:
        """What member `rid`'s JoinGroup reported owning (its process's partitions)."""
        c = self.by_rid.get((gid, rid))
        return sorted(self.owned[c]) if c is not None and c.alive else []

    def _on_synced(self, c: _Client, result) -> None:
        revoked = set()
        if int(result.error) == _NONE:
            new = _decode(result.assignment)
            revoked = self.owned[c] - new
            self._release(c, revoked, paused=True, key=self._sync_keys.get(c))
            self._take(c, new)
        super()._on_synced(c, result)
        if revoked and self.cooperative:
            self._join(c, c.rid)          # KIP-429: the follow-up rebalance

    def _on_error(self, c: _Client, err: int) -> None:
        if err in (_UNKNOWN, _ILLEGAL, _FENCED):
            self._release_all(c)          # lost: its generation is gone
        super()._on_error(c, err)
        if not c.alive:                   # (fenced: the process stops)
            self.live[c.group].discard(c)

    def _stop(self, c: _Client) -> None:
        if c.alive:
            self._release_all(c)
        super()._stop(c)
        self.live[c.group].discard(c)

    def _poll_timeout(self, c: _Client) -> None:
        if c.alive:
            self._release_all(c)
        super()._poll_timeout(c)


# -- the consumer protocol --------------------------------------------------------------------

class ConsumerSimulation(_Owned, ShardSimulation):
    """The same consumers under the consumer group protocol (KIP-848): one coordinator
    for the shard's groups, each group subscribed to its own topic (named as the group).
    Events as whatif.ShardSimulation's (whose plumbing it keeps, not its classic
    consumer): starts, stops, poll timeouts at the end of a pause longer than
    max.poll.interval.ms, heartbeats, and the reconciliation of an answer's assignment
    `reaction_ms` after it (a paused process does each when its pause ends). Answers
    come inside the call (an in-memory store)."""

    def __init__(self, behaviour: Dict[str, List[Incarnation]], config: WhatIfConfig, *,
                 partitions: Union[int, Mapping[str, int]], reaction_ms: int = 0, **kw):
        super().__init__(behaviour, config, **kw)
        self.reaction_ms = reaction_ms
        # The consumer protocol's session timeout is the group's (a broker config), not
        # each consumer's: the grid's, else (the baseline's "trace") the median of what
        # the trace's consumers carried
        sessions = sorted(self._session_of(i) for incs in behaviour.values() for i in incs)
        self.session = config.session_timeout_ms or (
            sessions[len(sessions) // 2] if sessions else DEFAULT_SESSION_MS)
        hb = config.heartbeat_interval_ms or CONSUMER_HEARTBEAT_MS
        self.heartbeat_ms = hb if hb < self.session else max(1, self.session // 3)
        self.losses: Dict[object, int] = defaultdict(int)    # times each process lost all
        self._init_owned(behaviour, partitions)

    def _rebalance_key(self, gid: str):
        epoch = self.coord.consumer_group_describe([gid])[0].group_epoch
        self.ledgers[gid].rebalance(epoch, self.now)
        return epoch

    def run(self) -> "ConsumerSimulation":
        with fewer_collections():
            self._run()
        return self

    def _consumer_config(self) -> CoordinatorConfig:
        """The grid's session timeout and the heartbeat interval, as the group.consumer.*
        configs (their bounds set to them)."""
        values = {}
        for kind, value in (("session_timeout_ms", self.session),
                            ("heartbeat_interval_ms", self.heartbeat_ms)):
            for bound in ("", "min_", "max_"):
                values[f"group_consumer_{bound}{kind}"] = value
        return CoordinatorConfig(num_shards=self.num_shards, **values)

    def _run(self) -> None:
        incs = [i for gid in sorted(self.behaviour) for i in self.behaviour[gid]]
        if not incs:
            return
        t0 = min(i.start_ms for i in incs)
        self.now = t0
        self.coord = GroupCoordinator(self._consumer_config(), clock=ManualClock(t0),
                                      impl=self.impl,
                                      store=InMemoryStore(group_records=False, offsets=False),
                                      member_id_factory=member_ids(self.config_id, self.shard))
        self.coord.set_topics({gid: self.ledgers[gid].n for gid in self.behaviour})
        for inc in incs:
            self._push(inc.start_ms, _START, inc)
        heap = self.heap
        while heap and heap[0][0] <= self.horizon:
            t, _, _, kind, obj, arg = heapq.heappop(heap)
            self._step(t)
            if kind == _START:
                self._start(obj)
            elif kind == _STOP:
                self._stop(obj)
            elif kind == _POLL:
                self._poll_timeout(obj)
            elif not obj.alive:
                continue
            elif obj.paused_until(t) is not None:      # done when the pause ends
                self._push(obj.paused_until(t), kind, obj, arg)
            elif kind == _HB:
                if arg == obj.epoch:
                    self._heartbeat(obj)
            elif kind == _RECONCILE:
                if arg[0] == self.losses[obj]:          # (an assignment it since lost is not)
                    self._reconcile(obj, arg[1])
        self._step(self.horizon)

    def _step(self, t: int) -> None:
        if t > self.now:
            self.coord.advance_time(t - self.now)
            self.now = t

    def _start(self, inc: Incarnation) -> None:
        cfg = self.cfg
        inst = (inc.instance_id or inc.slot) if cfg.static == "on" else (
            None if cfg.static == "off" else inc.instance_id)
        rto = cfg.rebalance_timeout_ms or inc.rebalance_timeout_ms or DEFAULT_MAX_POLL_MS
        c = _Client(inc, inst, self.heartbeat_ms, rto, self.session)
        c.rid = inc.member                 # Kafka 4's client makes its own member id
        c.gen = 0
        self.live[c.group].add(c)
        self._note_steady(c.group)      # (one that holds nothing can complete the balance)
        if inc.end != "end":
            self._push(inc.stop_ms, _STOP, c)
        for a, b in inc.pauses:
            if b - a > rto:
                self._push(b, _POLL, c)
        self._heartbeat(c)

    def _send(self, c: _Client, epoch: int):
        """One ConsumerGroupHeartbeat with the owned partitions (a join, epoch 0, is a
        full request); its answer."""
        out: list = []
        # (a join carries an empty owned list, as Kafka requires: no topic entry at all)
        kw = dict(rebalance_timeout_ms=c.rto, subscribed_topic_names=[c.group],
                  owned_partitions={}) if epoch == 0 else \
            dict(owned_partitions={c.group: sorted(self.owned[c])})
        self.coord.consumer_group_heartbeat(
            c.group, c.rid, epoch, instance_id=c.inst, client_id=c.inc.slot,
            callback=out.append, **kw)
        if not out:
            raise RuntimeError("a ConsumerGroupHeartbeat was not answered inside the call")
        return out[0]

    def _heartbeat(self, c: _Client) -> None:
        """A heartbeat (a join with epoch 0, or an acknowledgement): its answer, an
        assignment reconciled `reaction_ms` later, the next heartbeat one interval on
        (each one sent restarts the interval, as Kafka's client does)."""
        sent = c.gen
        result = self._send(c, sent)
        c.epoch += 1
        err = int(result.error)
        if err != _NONE:
            self._on_error(c, err, sent)
            return
        c.gen = result.member_epoch
        self.ledgers[c.group].rebalance(c.gen, self.now)
        if result.assignment is not None:
            self._push(self.now + self.reaction_ms, _RECONCILE, c,
                       (self.losses[c], set(result.assignment.get(c.group, ()))))
        self._push(self.now + self.heartbeat_ms, _HB, c, c.epoch)

    def _reconcile(self, c: _Client, new: set) -> None:
        """Revoke what the assignment leaves out, take what it adds; a change is
        acknowledged by a heartbeat at once."""
        revoked, added = self.owned[c] - new, new - self.owned[c]
        self._release(c, revoked, paused=True)
        self._take(c, added)
        if revoked or added:
            self._heartbeat(c)

    def _lose(self, c: _Client) -> None:
        self.losses[c] += 1
        self._release_all(c)

    def _on_error(self, c: _Client, err: int, sent: int) -> None:
        if err in (_UNKNOWN, _FENCED_EPOCH) and sent != 0:
            self._lose(c)                  # fenced: join again with epoch 0 at once
            c.gen = 0
            self._heartbeat(c)
        elif err == _FENCED_INSTANCE:      # another process took its instance id: fatal
            self._lose(c)
            c.alive = False
            self.live[c.group].discard(c)
        else:                              # retried after a backoff
            self._push(self.now + RETRY_BACKOFF_MS, _HB, c, c.epoch)

    def _leave_epoch(self, c: _Client) -> int:
        return -2 if c.inst is not None else -1

    def _stop(self, c: _Client) -> None:
        if not c.alive:
            return
        self._lose(c)
        c.alive = False
        self.live[c.group].discard(c)
        c.epoch += 1
        if c.inc.end != "crash" and c.gen > 0:
            self._send(c, self._leave_epoch(c))

    def _poll_timeout(self, c: _Client) -> None:
        """max.poll.interval.ms passed during a pause: leave, then join again."""
        if not c.alive:
            return
        self._lose(c)
        if c.gen > 0:
            self._send(c, self._leave_epoch(c))
        c.gen = 0
        self._heartbeat(c)


# -- running and measuring ----------------------------------------------------------------------

def simulate(protocol: str, behaviour: Dict[str, List[Incarnation]], config: WhatIfConfig, *,
             partitions: Union[int, Mapping[str, int]], config_id: int = 0, shard: int = 0,
             end_ms: int, horizon: int, impl: Optional[str] = None,
             num_shards: int = NUM_SHARDS, reaction_ms: int = 0) -> Dict[str, Ledger]:
    """One (configuration, protocol, shard) run of a trace ending at `end_ms`, measured up
    to `horizon` (the same for every run): each group's ledger."""
    kw = dict(partitions=partitions, config_id=config_id, shard=shard, end_ms=end_ms, impl=impl,
              num_shards=num_shards, reaction_ms=reaction_ms)
    if protocol == "consumer":
        sim = ConsumerSimulation(behaviour, config, **kw).run()
    elif protocol in ("classic-eager", "classic-cooperative"):
        sim = ClassicSimulation(behaviour, config, cooperative=protocol == "classic-cooperative",
                                **kw)
        sim.run()
    else:
        raise ValueError(f"unknown protocol {protocol!r}")
    for gid, ledger in sim.ledgers.items():
        ledger.close(horizon)
        ledger.idle = idle_intervals(behaviour.get(gid, ()), horizon)
    return sim.ledgers


def idle_intervals(incarnations: Sequence[Incarnation], horizon: int) -> List[Tuple[int, int]]:
    """The intervals, from the first process's start to `horizon`, in which none of a
    group's processes (its incarnations) runs: disjoint and in order."""
    spans = sorted((inc.start_ms, horizon if inc.stop_ms < 0 else min(inc.stop_ms, horizon))
                   for inc in incarnations)
    idle: List[Tuple[int, int]] = []
    covered = None                      # the end of the spans merged so far
    for start, stop in spans:
        if covered is not None and start > covered:
            idle.append((covered, start))
        covered = stop if covered is None else max(covered, stop)
    if covered is not None and covered < horizon:
        idle.append((covered, horizon))
    return idle


def _overlap(a: int, b: int, lo: int, hi: int) -> int:
    return max(0, min(b, hi) - max(a, lo))


def _group_row(ledger: Ledger, lo: int, hi: int) -> Tuple[int, int, int, int]:
    """(unavailable ms, rebalances, members paused, partitions revoked) in [lo, hi]."""
    unavailable = sum(_overlap(a, b, lo, hi)
                      - sum(_overlap(max(a, i), min(b, j), lo, hi) for i, j in ledger.idle)
                      for _, a, b in ledger.gaps)
    counted = {k for k, start in ledger.rebalances.items() if lo <= start <= hi}
    paused = {(key, member) for t, member, _, was_paused, key in ledger.revocations
              if was_paused and key in counted}
    revoked = sum(n for t, _, n, _, _ in ledger.revocations if lo <= t <= hi)
    return unavailable, len(counted), len(paused), revoked


def protocol_whatif(table: pa.Table, configs: Sequence[WhatIfConfig],
                    protocols: Sequence[str] = PROTOCOLS, *,
                    partitions: Union[int, Mapping[str, int]] = DEFAULT_PARTITIONS,
                    impl: Optional[str] = None, num_shards: int = NUM_SHARDS,
                    reaction_ms: int = 0,
                    progress: Optional[Callable[[int, int], None]] = None) -> Dict[str, pa.Table]:
    """Every (configuration, protocol, shard) in this process: the protocol_groups and
    protocol_summary tables (a configuration's index in `configs` is its id).
    `reaction_ms`: how long after an answer a consumer acts on it (its poll loop and a
    round trip; 0, the default, as whatif.py: what the protocols themselves cost)."""
    if not isinstance(reaction_ms, int) or reaction_ms < 0:
        raise ValueError(f"reaction_ms must be a non-negative int, got {reaction_ms!r}")
    for p in protocols:
        if p not in PROTOCOLS:
            raise ValueError(f"unknown protocol {p!r} (known: {', '.join(PROTOCOLS)})")
    table = table.select([c for c in COLUMNS if c in table.column_names])
    runs: Dict[tuple, Dict[str, Ledger]] = {}
    if table.num_rows:
        import pyarrow.compute as pc
        end_ms = pc.max(table.column("time_ms")).as_py()
        # a configuration that takes the trace's sessions ("trace": None) may run to the
        # longest the trace carried, or Kafka's default for consumers that carried none
        carried = pc.max(table.column("session_timeout_ms")).as_py() \
            if "session_timeout_ms" in table.column_names else None
        longest = max(carried or 0, DEFAULT_SESSION_MS)
        horizon = end_ms + max(c.session_timeout_ms or longest for c in configs)
        by_shard = split_by_shard(table, num_shards)
        done, total = 0, len(by_shard) * len(configs) * len(protocols)
        for shard, rows in by_shard.items():
            behaviour = derive_behaviour(rows, end_ms)
            for ci, cfg in enumerate(configs):
                for proto in protocols:
                    runs[(ci, proto, shard)] = simulate(
                        proto, behaviour, cfg, partitions=partitions, config_id=ci,
                        shard=shard, end_ms=end_ms, horizon=horizon, impl=impl,
                        num_shards=num_shards,
                        reaction_ms=reaction_ms)
                    done += 1
                    if progress is not None:
                        progress(done, total)
    return _tables(runs, configs, protocols)


def _tables(runs: Dict[tuple, Dict[str, Ledger]], configs, protocols) -> Dict[str, pa.Table]:
    # the window of each group: the same for every run
    starts: Dict[str, List[int]] = defaultdict(list)
    for ledgers in runs.values():
        for gid, ledger in ledgers.items():
            if ledger.full_at is not None:
                starts[gid].append(ledger.full_at)
    rows = []
    for (ci, proto, shard), ledgers in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                              kv[0][2])):
        for gid in sorted(ledgers):
            ledger = ledgers[gid]
            hi = ledger.horizon
            lo = max(starts[gid]) if starts[gid] else hi
            lo = min(lo, hi)
            rows.append((ci, proto, shard, gid, ledger.n, lo, hi) + _group_row(ledger, lo, hi))
    groups = rows_table(rows, GROUPS_SCHEMA)
    summary = []
    for ci, cfg in enumerate(configs):
        for proto in protocols:
            g = [r for r in rows if r[0] == ci and r[1] == proto]
            window_ms = sum(r[6] - r[5] for r in g)
            exposure = sum((r[6] - r[5]) * r[4] for r in g)
            unavailable = sum(r[7] for r in g)
            rebalances = sum(r[8] for r in g)
            paused = sum(r[9] for r in g)
            summary.append((ci, proto, cfg.label, len(g), sum(r[4] for r in g),
                            window_ms / 1000.0, unavailable / 1000.0,
                            unavailable / exposure if exposure else 0.0, rebalances, paused,
                            paused / rebalances if rebalances else 0.0,
                            sum(r[10] for r in g)))
    return {"protocol_groups": canonical(groups, "protocol_groups"),
            "protocol_summary": canonical(rows_table(summary, SUMMARY_SCHEMA),
                                          "protocol_summary")}


def canonical(table: pa.Table, name: str) -> pa.Table:
    """The table in its schema, in the protocol order of PROTOCOLS within a configuration."""
    order = {p: i for i, p in enumerate(PROTOCOLS)}
    rows = sorted(sort_canonical(table, TABLES[name], SORT_KEYS[name]).to_pylist(),
                  key=lambda r: (r["config"], order[r["protocol"]]))
    return pa.Table.from_pylist(rows, schema=TABLES[name])


def write_results(tables: Dict[str, pa.Table], out_dir: str) -> None:
    """out_dir/protocol_summary.parquet and out_dir/protocol_groups.parquet."""
    import os

    import pyarrow.parquet as pq
    os.makedirs(out_dir, exist_ok=True)
    for name in TABLES:
        pq.write_table(tables[name], os.path.join(out_dir, f"{name}.parquet"))


def read_results(out_dir: str) -> Dict[str, pa.Table]:
    """The protocol tables of a what-if output directory (none when it has none)."""
    import os

    import pyarrow.parquet as pq
    return {name: pq.read_table(os.path.join(out_dir, f"{name}.parquet")) for name in TABLES
            if os.path.exists(os.path.join(out_dir, f"{name}.parquet"))}

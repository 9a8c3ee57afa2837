"""Rolling restart of one consumer group: how long partitions go unconsumed, classic eager
protocol against the consumer group protocol (KIP-848), on one coordinator per variant.

    python benchmarks/rolling_restart.py [bench_results] [--members 100] [--partitions 1000]
                                         [--down-ms 5000] [--phases spread|lockstep]
                                         [--ack immediate|next] [--reaction-ms 0]

A group of `members` simulated clients consumes one topic of `partitions` partitions. The
clients restart one at a time: stop, stay down `down-ms`, start again; the next stops as
soon as the group is stable again with every partition owned. Per partition, every
interval during which no running client owned it (from its revocation, or its owner's
stop, to the next owner taking it) is summed: partition-unavailable time. Variants:

  classic-eager-range        JoinGroup/SyncGroup, eager: on a rebalance each member
  classic-eager-roundrobin   revokes everything at its JoinGroup and takes its new
                             partitions at SyncGroup; the leader assigns (range or
                             roundrobin); LeaveGroup on stop; heartbeat every 3 s
  consumer-dynamic-{5s,3s}   ConsumerGroupHeartbeat every 5 s (Kafka's default) or 3 s;
                             owned partitions reported truthfully; revokes what the
                             answer leaves out, takes what it gives; leaves with epoch -1
  consumer-static-{5s,3s}    the same with an instance id, leaving with epoch -2

Deterministic: a ManualClock, member ids by counter, heartbeat phases on a fixed grid.
Writes OUT/rolling-restart.json and OUT/rolling-restart.md when OUT is given.
"""
from __future__ import annotations

import heapq
import itertools
import json
import pathlib
import sys
import time
from typing import Callable, Dict, List, Optional, Set

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock

TOPIC = "orders"
GROUP = "rolling"
SESSION_MS = 45_000              # the Java client's session.timeout.ms default
REBALANCE_TIMEOUT_MS = 300_000   # its max.poll.interval.ms default
CLASSIC_HEARTBEAT_MS = 3_000     # its heartbeat.interval.ms default
IDLE_STEP_MS = 100               # time passing with no client event pending


class Ownership:
    """Which running client owns each partition, and every interval nobody did."""

    def __init__(self, partitions: int) -> None:
        self.owner: List[Optional[int]] = [None] * partitions
        self.last_owner: List[Optional[int]] = [None] * partitions
        self.free_since: List[int] = [0] * partitions
        self.free = partitions          # partitions no running client owns
        self.measuring = False
        self.unavailable_ms = 0
        self.longest_ms = 0
        self.gaps = 0
        self.moves = 0

    def release(self, client: int, partitions, now: int) -> None:
        for p in partitions:
            if self.owner[p] != client:
                raise AssertionError(f"client {client} releases partition {p} it does not own")
            self.owner[p] = None
            self.free_since[p] = now
        self.free += len(partitions)

    def take(self, client: int, partitions, now: int) -> None:
        for p in partitions:
            if self.owner[p] is not None:
                raise AssertionError(f"partition {p} taken by client {client} while client "
                                     f"{self.owner[p]} owns it")
            self.owner[p] = client
            if self.measuring:
                gap = now - self.free_since[p]
                self.unavailable_ms += gap
                self.longest_ms = max(self.longest_ms, gap)
                self.gaps += 1
                self.moves += self.last_owner[p] != client
            self.last_owner[p] = client
        self.free -= len(partitions)

    def all_owned(self) -> bool:
        return self.free == 0


class Simulation:
    """A discrete-event loop over one coordinator on a ManualClock: events are
    (time, sequence, action); the coordinator's clock is moved to each event's time
    before it runs. A client's reaction to an answer is an event at the answer's time
    (reaction delay 0)."""

    def __init__(self, config: CoordinatorConfig, members: int, partitions: int,
                 heartbeat_ms: int, phases: str, reaction_ms: int = 0,
                 impl: Optional[str] = None) -> None:
        self.clock = ManualClock()
        ids = itertools.count()
        self.coord = GroupCoordinator(config, clock=self.clock, impl=impl,
                                      member_id_factory=lambda prefix: f"{prefix}-{next(ids):06}")
        self.members = members
        self.partitions = partitions
        self.heartbeat_ms = heartbeat_ms
        self.reaction_ms = reaction_ms
        # member i heartbeats at phase_i + k * interval (a fixed grid, see the .md)
        self.phase = [0 if phases == "lockstep" else i * heartbeat_ms // members
                      for i in range(members)]
        self.events: list = []
        self.seq = itertools.count()
        self.own = Ownership(partitions)
        self.requests = 0
        # each client slot: its member id, partitions, whether its process runs, and
        # an incarnation that retires the events of an earlier process or heartbeat chain
        self.member_id: List[str] = [""] * members
        self.owned: List[Set[int]] = [set() for _ in range(members)]
        self.up = [False] * members
        self.incarnation = [0] * members

    def now(self) -> int:
        return self.clock.now_ms()

    def start_all(self) -> None:
        for c in range(self.members):
            self.start(c)

    def at(self, when: int, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (when, next(self.seq), action))

    def react(self, action: Callable[[], None]) -> None:
        """A client's reaction to an answer: `reaction_ms` after it (its poll loop's delay
        and the round trip), 0 by default."""
        self.at(self.now() + self.reaction_ms, action)

    def next_grid(self, client: int, after: int) -> int:
        """The first heartbeat time of `client`'s grid strictly after `after`."""
        phase = self.phase[client]
        k = (after - phase) // self.heartbeat_ms + 1
        return phase + max(k, 0) * self.heartbeat_ms

    def run_until(self, done: Callable[[], bool], limit_ms: int) -> None:
        deadline = self.now() + limit_ms
        while not done():
            if not self.events:
                # only the coordinator's timers can move things (the initial rebalance
                # delay while the group forms): let time pass
                if self.now() >= deadline:
                    raise AssertionError(f"condition not reached within {limit_ms} ms")
                self.coord.advance_time(IDLE_STEP_MS)
                continue
            when, _, action = heapq.heappop(self.events)
            if when > deadline:
                raise AssertionError(f"condition not reached within {limit_ms} ms")
            if when > self.now():
                self.coord.advance_time(when - self.now())
            action()

    def rolling_restart(self, down_ms: int) -> dict:
        """Form the group, then restart every client once; returns the figures."""
        self.start_all()
        self.run_until(self.stable, 120_000)
        formed_at = self.now()
        self.own.measuring = True
        epoch_before = self.group_epoch()
        for client in range(self.members):
            self.stop(client)
            restart = self.now() + down_ms
            self.at(restart, lambda c=client: self.start(c))
            self.run_until(lambda c=client: self.now() >= restart and self.running(c)
                           and self.stable(), 600_000)
        own = self.own
        assert own.all_owned()
        return {
            "unavailable_partition_s": round(own.unavailable_ms / 1000, 3),
            "per_restart_partition_s": round(own.unavailable_ms / 1000 / self.members, 3),
            "longest_gap_ms": own.longest_ms,
            "gaps": own.gaps,
            "moves": own.moves,
            "rebalances": self.group_epoch() - epoch_before,
            "simulated_s": round((self.now() - formed_at) / 1000, 3),
            "requests": self.requests,
        }


# ---------------------------------------------------------------------------------------
# classic protocol, eager
# ---------------------------------------------------------------------------------------

def assign_range(member_ids: List[str], partitions: int) -> Dict[str, List[int]]:
    """The classic RangeAssignor for one topic: members by id, consecutive ranges, the
    first `partitions % n` one longer."""
    ordered = sorted(member_ids)
    n = len(ordered)
    quota, extra = divmod(partitions, n)
    out, start = {}, 0
    for i, m in enumerate(ordered):
        size = quota + (i < extra)
        out[m] = list(range(start, start + size))
        start += size
    return out


def assign_roundrobin(member_ids: List[str], partitions: int) -> Dict[str, List[int]]:
    """The classic RoundRobinAssignor for one topic: partition p to the (p mod n)-th
    member by id."""
    ordered = sorted(member_ids)
    out: Dict[str, List[int]] = {m: [] for m in ordered}
    for p in range(partitions):
        out[ordered[p % len(ordered)]].append(p)
    return out


CLASSIC_ASSIGNORS = {"range": assign_range, "roundrobin": assign_roundrobin}


class ClassicEager(Simulation):
    """Clients of the classic protocol with an eager assignor, as the Java consumer
    behaves: a heartbeat answered REBALANCE_IN_PROGRESS makes the member revoke all its
    partitions and send JoinGroup (no heartbeats while it waits); the leader assigns from
    the JoinGroup answer's member list; SyncGroup's answer gives the new partitions;
    on stop, revoke all and LeaveGroup."""

    def __init__(self, assignor: str, **kw) -> None:
        super().__init__(CoordinatorConfig(), heartbeat_ms=CLASSIC_HEARTBEAT_MS, **kw)
        self.assign = CLASSIC_ASSIGNORS[assignor]
        self.protocols = [(assignor, TOPIC.encode())]
        self.generation = [-1] * self.members
        self.joining = [False] * self.members     # a JoinGroup or SyncGroup in flight

    def group_epoch(self) -> int:
        return max(self.generation)

    def running(self, c: int) -> bool:
        return self.up[c] and not self.joining[c]

    def stable(self) -> bool:
        if not all(self.running(c) for c in range(self.members) if self.up[c]):
            return False
        return self.own.all_owned() and self.coord.describe_group(GROUP).state == "Stable"

    def start(self, c: int) -> None:
        self.up[c] = True
        self.incarnation[c] += 1
        self.member_id[c] = ""          # a new process: no member id yet
        self.join(c)

    def stop(self, c: int) -> None:
        self.own.release(c, sorted(self.owned[c]), self.now())
        self.owned[c] = set()
        self.requests += 1
        result = self.coord.leave_group(GROUP, [(self.member_id[c], None)])
        assert result.error == Errors.NONE, result
        self.up[c] = False
        self.incarnation[c] += 1

    def join(self, c: int) -> None:
        """Revoke everything (eager), then JoinGroup."""
        if self.owned[c]:
            self.own.release(c, sorted(self.owned[c]), self.now())
            self.owned[c] = set()
        self.joining[c] = True
        inc = self.incarnation[c]
        self.requests += 1
        self.coord.join_group(
            GROUP, self.member_id[c], "consumer", self.protocols, session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS, client_id=f"client-{c:03}",
            callback=lambda r: self.react(lambda: self.joined(c, inc, r)))

    def joined(self, c: int, inc: int, result) -> None:
        if inc != self.incarnation[c]:
            return
        if result.error == Errors.MEMBER_ID_REQUIRED:
            self.member_id[c] = result.member_id
            self.join(c)
            return
        assert result.error == Errors.NONE, result
        plan = None
        if result.member_id == result.leader_id:
            parts = self.assign([m.member_id for m in result.members], self.partitions)
            plan = {m: ",".join(map(str, ps)).encode() for m, ps in parts.items()}
        self.generation[c] = result.generation_id
        self.requests += 1
        self.coord.sync_group(GROUP, result.generation_id, self.member_id[c], plan,
                              callback=lambda r: self.react(lambda: self.synced(c, inc, r)))

    def synced(self, c: int, inc: int, result) -> None:
        if inc != self.incarnation[c]:
            return
        if result.error == Errors.REBALANCE_IN_PROGRESS:
            self.join(c)
            return
        assert result.error == Errors.NONE, result
        taken = {int(p) for p in result.assignment.decode().split(",") if p}
        self.owned[c] = taken
        self.own.take(c, sorted(taken), self.now())
        self.joining[c] = False
        self.schedule_heartbeat(c)

    def schedule_heartbeat(self, c: int) -> None:
        inc = self.incarnation[c]
        self.at(self.next_grid(c, self.now()), lambda: self.heartbeat(c, inc))

    def heartbeat(self, c: int, inc: int) -> None:
        if inc != self.incarnation[c] or self.joining[c]:
            return
        self.requests += 1
        error = self.coord.heartbeat(GROUP, self.member_id[c], self.generation[c])
        if error == Errors.REBALANCE_IN_PROGRESS:
            self.joining[c] = True      # (no heartbeat until it has joined)
            self.react(lambda: self.join(c) if inc == self.incarnation[c] else None)
            return
        assert error == Errors.NONE, error
        self.schedule_heartbeat(c)


# ---------------------------------------------------------------------------------------
# consumer group protocol (KIP-848)
# ---------------------------------------------------------------------------------------

class ConsumerProtocol(Simulation):
    """Clients of the consumer group protocol, as Kafka 4's Java consumer behaves: a
    ConsumerGroupHeartbeat on its grid, reporting its owned partitions; an answer's
    assignment is reconciled at once (revoke what it leaves out, take what it adds),
    then acknowledged by a heartbeat at once (`ack="immediate"`, the Java client) or at
    the next grid point (`ack="next"`); on stop, revoke all and leave with epoch -1
    (dynamic) or -2 (static: its partitions wait for its instance id)."""

    def __init__(self, static: bool, heartbeat_ms: int, ack: str, **kw) -> None:
        config = CoordinatorConfig(group_consumer_heartbeat_interval_ms=heartbeat_ms,
                                   group_consumer_min_heartbeat_interval_ms=min(heartbeat_ms, 5_000))
        super().__init__(config, heartbeat_ms=heartbeat_ms, **kw)
        self.static = static
        self.ack = ack
        self.coord.set_topics({TOPIC: self.partitions})
        self.client_ids = itertools.count()
        self.epoch = [0] * self.members
        self.inflight = [False] * self.members      # an answer not yet handled

    def group_epoch(self) -> int:
        return self.coord.consumer_group_describe([GROUP])[0].group_epoch

    def running(self, c: int) -> bool:
        return self.up[c] and self.epoch[c] > 0

    def stable(self) -> bool:
        return self.own.all_owned() and \
            self.coord.consumer_group_describe([GROUP])[0].state == "Stable"

    def start(self, c: int) -> None:
        """A new process: a new member id (Kafka 4's client makes its own), epoch 0."""
        self.up[c] = True
        self.incarnation[c] += 1
        self.member_id[c] = f"member-{next(self.client_ids):06}"
        self.epoch[c] = 0
        self.send(c, first=True)

    def stop(self, c: int) -> None:
        self.own.release(c, sorted(self.owned[c]), self.now())
        self.owned[c] = set()
        leave = -2 if self.static else -1
        out: list = []
        self.requests += 1
        self.coord.consumer_group_heartbeat(GROUP, self.member_id[c], leave,
                                            instance_id=self.instance(c), callback=out.append)
        assert out and out[0].error == Errors.NONE, out
        self.up[c] = False
        self.inflight[c] = False
        self.epoch[c] = leave
        self.incarnation[c] += 1

    def instance(self, c: int) -> Optional[str]:
        return f"instance-{c:03}" if self.static else None

    def send(self, c: int, first: bool = False) -> None:
        inc = self.incarnation[c]
        kw = dict(rebalance_timeout_ms=REBALANCE_TIMEOUT_MS, subscribed_topic_names=[TOPIC],
                  owned_partitions={}) if first else \
            dict(owned_partitions={TOPIC: sorted(self.owned[c])})
        self.requests += 1
        self.inflight[c] = True
        self.coord.consumer_group_heartbeat(
            GROUP, self.member_id[c], self.epoch[c], instance_id=self.instance(c),
            callback=lambda r: self.react(lambda: self.answered(c, inc, r)), **kw)
        if inc == self.incarnation[c]:
            self.at(self.next_grid(c, self.now()), lambda: self.tick(c, inc))

    def tick(self, c: int, inc: int) -> None:
        if inc != self.incarnation[c]:
            return
        if self.inflight[c]:
            # one heartbeat in flight at a time, as the Java client: skip this grid point
            self.at(self.next_grid(c, self.now()), lambda: self.tick(c, inc))
            return
        self.incarnation[c] += 1        # (this tick's successor is scheduled by send)
        self.send(c)

    def answered(self, c: int, inc: int, result) -> None:
        if not self.up[c] or self.member_id[c] != result.member_id:
            return
        assert result.error == Errors.NONE, result
        self.inflight[c] = False
        self.epoch[c] = result.member_epoch
        if result.assignment is None:
            return
        new = set(result.assignment.get(TOPIC, ()))
        revoked, added = self.owned[c] - new, new - self.owned[c]
        if revoked:
            self.own.release(c, sorted(revoked), self.now())
        if added:
            self.own.take(c, sorted(added), self.now())
        self.owned[c] = new
        if (revoked or added) and self.ack == "immediate":
            self.incarnation[c] += 1        # the ack restarts the heartbeat grid's chain
            self.send(c)


# ---------------------------------------------------------------------------------------
# the variants, the report
# ---------------------------------------------------------------------------------------

def variants(ack: str) -> Dict[str, Callable[..., Simulation]]:
    """{name: factory(members=, partitions=, phases=, impl=)}, in the report's order."""
    return {
        "classic-eager-range": lambda **kw: ClassicEager("range", **kw),
        "classic-eager-roundrobin": lambda **kw: ClassicEager("roundrobin", **kw),
        "consumer-dynamic-5s": lambda **kw: ConsumerProtocol(False, 5_000, ack, **kw),
        "consumer-dynamic-3s": lambda **kw: ConsumerProtocol(False, 3_000, ack, **kw),
        "consumer-static-5s": lambda **kw: ConsumerProtocol(True, 5_000, ack, **kw),
        "consumer-static-3s": lambda **kw: ConsumerProtocol(True, 3_000, ack, **kw),
    }


def run(members: int = 100, partitions: int = 1_000, down_ms: int = 5_000,
        phases: str = "spread", ack: str = "immediate", reaction_ms: int = 0, only=None,
        impl=None) -> dict:
    """Every variant (or those named in `only`) on the `impl` twin: {name: figures}."""
    out = {}
    for name, make in variants(ack).items():
        if only is not None and name not in only:
            continue
        t = time.perf_counter()
        sim = make(members=members, partitions=partitions, phases=phases,
                   reaction_ms=reaction_ms, impl=impl)
        figures = sim.rolling_restart(down_ms)
        figures["wall_s"] = round(time.perf_counter() - t, 2)
        out[name] = figures
    return out


COLUMNS = [("unavailable_partition_s", "unavailable (partition-s)"),
           ("per_restart_partition_s", "per restart (partition-s)"),
           ("longest_gap_ms", "longest gap (ms)"), ("gaps", "gaps"), ("moves", "moves"),
           ("rebalances", "generations / epochs"), ("simulated_s", "simulated (s)")]


def table(results: dict) -> List[str]:
    lines = ["| variant | " + " | ".join(title for _, title in COLUMNS) + " |",
             "|---|" + "---:|" * len(COLUMNS)]
    for name, figures in results.items():
        cells = [f"{figures[key]:,}" for key, _ in COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


CONSUMER = ["consumer-dynamic-5s", "consumer-dynamic-3s", "consumer-static-5s",
            "consumer-static-3s"]
# (title, the parameters changed, the variants run or None for all, what it shows)
SENSITIVITY = [
    ("heartbeat phases in lockstep (every member heartbeats at the same instants)",
     dict(phases="lockstep"), None,
     "Every member learns of a rebalance at the same instant, so with no latency an eager "
     "rebalance completes at once and only the stopped member's partitions wait (for the "
     "next heartbeat). This is eager's best case and an artefact of reaction time 0: "
     "every JoinGroup/SyncGroup round trip and every commit on revocation adds to the "
     "gap of every partition in eager, and only to the moved ones in the consumer "
     "protocol (the last section: lockstep with a reaction of 100 ms)."),
    ("consumer protocol: a reconciliation acknowledged at the next heartbeat, not at once",
     dict(ack="next"), CONSUMER,
     "A revoked partition is released to the coordinator one heartbeat later: the gaps "
     "of moved partitions grow by up to one interval."),
    ("down 30 s instead of 5 s", dict(down_ms=30_000), None,
     "A static member's partitions wait for it the whole time it is down; a dynamic "
     "member's are handed over at once, so its figures do not depend on the down time."),
    ("every client reacts to an answer 100 ms after it", dict(reaction_ms=100), None,
     "A poll loop's delay plus a round trip: an eager rebalance's gaps grow by a join's "
     "and a sync's reaction, for every partition."),
    ("lockstep phases and a reaction of 100 ms", dict(phases="lockstep", reaction_ms=100),
     None,
     "Eager's best case (every member learns of a rebalance at once) with a realistic "
     "reaction: each rebalance still leaves every partition unconsumed for a JoinGroup's "
     "and a SyncGroup's reaction (2 x 100 ms x every partition), several times what the "
     "consumer protocol costs."),
]

NOTES = """\
## What is modelled, and how

- **One coordinator per variant**, `GroupCoordinator(clock=ManualClock())` on the
  native core (the pure twin gives the same figures), default configuration (`group_initial_rebalance_delay_ms` 3,000: it
  delays only the group's first formation, which is not measured). The consumer
  variants set `group_consumer_heartbeat_interval_ms` (and its minimum, for 3 s).
- **Clients are simulated** in `benchmarks/rolling_restart.py` and react to every answer
  with **no delay** in the main table (reaction time 0, no network latency, no
  processing time, no offset commit on revocation): what the protocol itself costs. The
  reaction rows delay every client's reaction to an answer by 100 ms instead (a
  consumer protocol client then has one heartbeat in flight at a time, as the Java
  client: a grid point that finds one in flight is skipped).
- **Heartbeat timing**: client `i` heartbeats on a fixed grid, at `i * interval / N + k *
  interval` (phases spread evenly over the interval), whatever else happens: the timer
  is not restarted by a rebalance or by an extra heartbeat. A real fleet's phases drift
  with poll loops and the network; the lockstep row below is the other extreme.
- **Classic eager** (Java's classic consumer with `range` or `roundrobin`): a heartbeat
  answered REBALANCE_IN_PROGRESS makes the member revoke all its partitions and send
  JoinGroup at once; it sends no heartbeat while its JoinGroup waits; the leader
  computes the assignment from the JoinGroup answer; SyncGroup's answer gives the new
  partitions. A stopping member revokes everything and sends LeaveGroup (the Java
  client's close); a started one joins with no member id (MEMBER_ID_REQUIRED, then again
  with the id it was given). Session timeout 45 s, rebalance timeout 300 s, heartbeat 3 s.
- **Consumer protocol** (Kafka 4's Java consumer): ConsumerGroupHeartbeat on the grid
  with the owned partitions reported truthfully; an answer's assignment is applied at
  once (revoke what it leaves out, take what it adds) and, when it changed anything,
  acknowledged by an extra heartbeat at once (the Java client does so; the `ack="next"`
  row waits for the grid instead). A started process makes a new member id (Kafka 4's
  client does) and joins with epoch 0; a stopping one revokes everything and leaves with
  epoch -1 (dynamic) or -2 (static, with its instance id: the coordinator keeps its
  partitions for it, so they stay unconsumed while it is down and come back with its
  join's answer). Server-side assignor: `uniform` (the default).
- **Measured**, from the first stop to the end: for every partition, each interval in
  which no running client owned it, from its revocation (or its owner's stop) to the
  next owner taking it. *Unavailable* is their sum in partition-seconds; *gaps* how many
  intervals (a partition revoked and given back to the same member at the same instant
  counts a gap of 0 ms); *moves* how many times a partition went to another client slot
  than its last owner (a restarted slot is the same slot); *generations / epochs* the
  classic generations or the consumer group epochs that passed. The simulation checks
  that no partition is ever owned by two clients and every answer is error-free.
- **The next restart** starts when the group is stable again (every running member
  synced, or reconciled, and every partition owned) and the restarted member is back.
"""


def reading(results: dict) -> List[str]:
    """A sentence comparing the main rows, when they were all run."""
    names = ("classic-eager-range", "consumer-dynamic-5s", "consumer-dynamic-3s",
             "consumer-static-5s")
    if not all(n in results for n in names):
        return []
    eager, dyn5, dyn3, static5 = (results[n]["unavailable_partition_s"] for n in names)
    return [f"Classic eager leaves partitions unconsumed {eager / dyn5:,.0f} times as long as "
            f"the consumer protocol's dynamic members at its default 5 s heartbeat "
            f"({eager / dyn3:,.0f} times at 3 s); static members cost their partitions "
            f"exactly the down time ({static5:,} partition-s), with no partition moved "
            "and no rebalance."]


def report(params: dict, results: dict, sensitivity: list, command: str) -> str:
    lines = ["# Rolling restart: partition-unavailable time, classic eager vs consumer protocol",
             "", f"- command: `{command}`",
             "- parameters: " + ", ".join(f"{k} {v}" for k, v in params.items()),
             f"- variants: {len(results)}, each on its own coordinator; deterministic (a "
             "ManualClock, member ids by counter): the figures are the same on every run",
             "", "## Every member restarted once", ""]
    lines += table(results)
    lines += ["", *reading(results), ""]
    for title, changed, shows, rows in sensitivity:
        lines += [f"## Sensitivity: {title}", "",
                  "- changed: " + ", ".join(f"{k} {v}" for k, v in changed.items()), ""]
        lines += table(rows)
        lines += ["", shows, ""]
    lines.append(NOTES)
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help="folder for rolling-restart.json and .md (with "
                                           "the sensitivity runs)")
    ap.add_argument("--members", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1_000)
    ap.add_argument("--down-ms", type=int, default=5_000)
    ap.add_argument("--phases", choices=("spread", "lockstep"), default="spread")
    ap.add_argument("--ack", choices=("immediate", "next"), default="immediate")
    ap.add_argument("--reaction-ms", type=int, default=0)
    a = ap.parse_args(argv)
    params = dict(members=a.members, partitions=a.partitions, down_ms=a.down_ms,
                  phases=a.phases, ack=a.ack, reaction_ms=a.reaction_ms)
    results = run(**params)
    print("\n".join(table(results)))
    if a.out:
        sensitivity = []
        for title, changed, only, shows in SENSITIVITY:
            rows = run(**{**params, **changed}, only=only)
            sensitivity.append((title, changed, shows, rows))
            print(f"{title}\n" + "\n".join(table(rows)))
        folder = pathlib.Path(a.out)
        folder.mkdir(parents=True, exist_ok=True)
        command = "python benchmarks/rolling_restart.py " + " ".join(
            argv if argv is not None else sys.argv[1:])
        (folder / "rolling-restart.json").write_text(json.dumps(
            {"command": command, "parameters": params, "results": results,
             "sensitivity": [{"title": t, "changed": c, "results": r}
                             for t, c, _, r in sensitivity]}, indent=1) + "\n")
        (folder / "rolling-restart.md").write_text(
            report(params, results, sensitivity, command) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

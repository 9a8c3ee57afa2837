"""Random churn of real confluent-kafka (librdkafka) consumers speaking the consumer
group protocol (KIP-848, `group.protocol=consumer`) to `fastcoord serve`, each in its own
process on 127.0.0.1. The protocol's central promise is checked under it:

- a partition is never owned by two members at once: the coordinator is described
  (ConsumerGroupDescribe on the wire) every SAMPLE_S throughout, and no snapshot has a
  (topic, partition) in two members' current assignments (what each member owns, not
  its target), nor in two targets, nor a partition of a topic the member does not
  subscribe to; the epochs never go back. A member that was SIGKILLed still owns its
  partitions until its session runs out: it is still a member, one of the members;
- the consumers' own views agree: no two consumer processes report holding the same
  partition at once for longer than CLIENT_OVERLAP_S, while the churn runs (sampled)
  and over the whole history of their reports at the end (a process holds what it
  reported until it is killed or asked to close). The latency of the reports is all
  the slack a correct group needs; ConsumerGroupDescribe shows no member's partitions
  still to revoke, so this is the only look at them, and a coordinator that moved a
  partition a heartbeat early would show an overlap shorter than it;
- once the churn stops, FINAL_LIVE consumers left, the group converges (bounded): Stable,
  its members exactly the live processes, each at its target, every partition of the
  subscribed topics assigned exactly once (balanced when the subscriptions are the
  same), each process holding what the coordinator says it holds; the admin client
  describes the same; the server exits 0 with no traceback logged.

The churn, from a seeded random.Random (the seed is printed; FASTCOORD_CHAOS_SEED
replays it, FASTCOORD_CHAOS_SECONDS sets its length): members subscribed to "orders"
by name, others by the regex `^orders.*` (which adds orders-eu; payments matches
nothing) and two static members (`group.instance.id`); SIGKILL of any member, clean
close of any, a new member, a static member closed and restarted at once with its
instance id (its successor takes over its partitions), a static member killed or
closed and restarted later, once the coordinator released its instance id (librdkafka
treats UNRELEASED_INSTANCE_ID as fatal: a successor of a killed static member must wait
out its session). Process starts are bounded; every wait is bounded; processes are
stopped by PID. Real timing varies run to run: the seed replays the choices, not the
interleaving."""
from __future__ import annotations

import collections
import os
import random
import re
import threading
import time
import traceback
from typing import Dict, FrozenSet, List, Optional, Tuple

import pytest

from helpers.server import ClientCluster, ClientProc, RawConn
# the consumer-protocol client tests' short consumer-protocol timeouts (6 s sessions)
from test_consumer_clients import SERVER_FLAGS

pytestmark = pytest.mark.clients

GROUP = "chaos"
TOPICS = {"orders": 12, "orders-eu": 5, "payments": 3}
NAMED = "orders"
REGEX = "^orders.*"                                  # orders and orders-eu
REGEX_TOPICS = frozenset({"orders", "orders-eu"})
STATIC_IDS = ("inst-a", "inst-b")
CHURN_S = float(os.environ.get("FASTCOORD_CHAOS_SECONDS") or 32)
SAMPLE_S = 0.15         # between two ConsumerGroupDescribe
# How long two consumer processes may both report holding one partition: each reports
# a change once its poll returns, read by a thread of this process; the one giving a
# partition up does so before its heartbeat lets the coordinator move it on, so an
# overlap is only the reports' latency (some 0.05 s at most seen, on 2 cores loaded 5)
CLIENT_OVERLAP_S = 1.0
STEP_S = (0.7, 2.2)     # between two churn actions
BURST_P = 0.25          # the chance that the next action comes at once (within 0.2 s)
MAX_LIVE = 6            # running consumer processes at most
# processes started by the churn (the initial five aside): 14 in the default 32 s
MAX_STARTS = max(4, int(CHURN_S * 0.45))
FINAL_LIVE = 3
START_BOUND = 40.0      # seconds: the initial five settle (a loaded 2-core machine)
CONVERGE_BOUND = 30.0   # seconds: the group converges once the churn stopped
UNREACHABLE_S = 5.0     # the coordinator not answering a describe for this long fails

TP = Tuple[str, int]
NOT_FOUND = 69          # GROUP_ID_NOT_FOUND: before the first member joined


def _tps(topic_partitions) -> FrozenSet[TP]:
    return frozenset((t.topic_name, p) for t in topic_partitions for p in t.partitions)


def _fmt(tps) -> str:
    by_topic: Dict[str, List[int]] = collections.defaultdict(list)
    for t, p in sorted(tps):
        by_topic[t].append(p)
    return " ".join(f"{t}{ps}" for t, ps in by_topic.items()) or "-"


class SnapMember:
    __slots__ = ("member_id", "client_id", "instance_id", "epoch", "names", "regex",
                 "assigned", "target")

    def __init__(self, m) -> None:
        self.member_id = m.member_id
        self.client_id = m.client_id
        self.instance_id = m.instance_id
        self.epoch = m.member_epoch
        self.names = frozenset(m.subscribed_topic_names)
        self.regex = m.subscribed_topic_regex
        self.assigned = _tps(m.assignment.topic_partitions)
        self.target = _tps(m.target_assignment.topic_partitions)

    def subscribed(self) -> FrozenSet[str]:
        """Its topics: named, or matched by its regex (librdkafka sends `^orders.*` as
        "(^orders.*)"), matched whole as Kafka does."""
        topics = self.names & TOPICS.keys()
        if self.regex:
            topics |= {t for t in TOPICS if re.fullmatch(self.regex, t)}
        return frozenset(topics)

    def __str__(self) -> str:
        static = f" instance={self.instance_id}" if self.instance_id else ""
        sub = self.regex or ",".join(sorted(self.names))
        return (f"{self.client_id:>6} {self.member_id[:8]} epoch={self.epoch}{static} "
                f"sub={sub} assigned={_fmt(self.assigned)} target={_fmt(self.target)}")


class Snapshot:
    """One ConsumerGroupDescribe of the group, at `t` seconds into the test."""

    def __init__(self, t: float, group) -> None:
        self.t = t
        self.error = int(group.error_code)
        self.state = group.group_state
        self.group_epoch = group.group_epoch
        self.assignment_epoch = group.assignment_epoch
        self.members = [SnapMember(m) for m in group.members]

    def by_client(self) -> Dict[str, SnapMember]:
        return {m.client_id: m for m in self.members}

    def instance(self, instance_id: str) -> Optional[SnapMember]:
        for m in self.members:
            if m.instance_id == instance_id:
                return m
        return None

    def __str__(self) -> str:
        head = (f"t={self.t:.2f}s error={self.error} state={self.state} "
                f"group_epoch={self.group_epoch} assignment_epoch={self.assignment_epoch}")
        return "\n".join([head] + [f"    {m}" for m in self.members])


def snapshot_problems(snap: Snapshot, prev: Optional[Snapshot]) -> List[str]:
    """What is wrong with one snapshot (and since the one before it)."""
    problems = []
    owners: Dict[TP, List[str]] = collections.defaultdict(list)
    targets: Dict[TP, List[str]] = collections.defaultdict(list)
    for m in snap.members:
        for tp in m.assigned:
            owners[tp].append(m.client_id)
        for tp in m.target:
            targets[tp].append(m.client_id)
        subscribed = m.subscribed()
        for t, p in m.assigned | m.target:
            if t not in subscribed or not 0 <= p < TOPICS.get(t, 0):
                problems.append(f"{m.client_id} holds or targets {t}-{p}, not of its "
                                f"subscription {sorted(subscribed)}")
        if m.epoch > snap.group_epoch or (m.epoch < 0 and m.epoch != -2):
            problems.append(f"{m.client_id} at member epoch {m.epoch}, group epoch "
                            f"{snap.group_epoch}")
    for tp, who in sorted(owners.items()):
        if len(who) > 1:
            problems.append(f"DOUBLE OWNERSHIP: {tp[0]}-{tp[1]} in the assignments of {who}")
    for tp, who in sorted(targets.items()):
        if len(who) > 1:
            problems.append(f"{tp[0]}-{tp[1]} in the targets of {who}")
    if snap.assignment_epoch > snap.group_epoch:
        problems.append("assignment epoch ahead of the group epoch")
    if prev is not None and (snap.group_epoch < prev.group_epoch
                             or snap.assignment_epoch < prev.assignment_epoch):
        problems.append(f"epochs went back: {prev.group_epoch}/{prev.assignment_epoch} -> "
                        f"{snap.group_epoch}/{snap.assignment_epoch}")
    return problems


def client_overlaps(consumers, now: float) -> List[Tuple[float, TP, str, str]]:
    """(how long, partition, process, process) for each time two processes both
    reported holding a partition, longest first."""
    intervals: Dict[TP, List[Tuple[float, float, str]]] = collections.defaultdict(list)
    for c in consumers:
        for tp, spans in c.holdings(now).items():
            intervals[tp].extend((a, b, c.name) for a, b in spans)
    out = []
    for tp, spans in intervals.items():
        for i, (a1, b1, n1) in enumerate(spans):
            for a2, b2, n2 in spans[i + 1:]:
                both = min(b1, b2) - max(a1, a2)
                if n1 != n2 and both > 0:
                    out.append((both, tp, n1, n2))
    return sorted(out, reverse=True)


class Consumer:
    """One consumer process of the chaos."""

    def __init__(self, proc: ClientProc, subscription: str, instance_id: Optional[str]):
        self.proc = proc
        self.name = proc.name
        self.subscription = subscription
        self.instance_id = instance_id
        self.state = "running"          # then closing, closed or killed
        self.stopped_at: Optional[float] = None     # (monotonic) killed, or asked to close

    def holdings(self, now: float) -> Dict[TP, List[Tuple[float, float]]]:
        """When it held each partition, as it reported (monotonic time of each report
        read; until it was killed or closed)."""
        out: Dict[TP, List[Tuple[float, float]]] = collections.defaultdict(list)
        since: Dict[TP, float] = {}
        for t, held in self.proc.history:
            for tp in held - since.keys():
                since[tp] = t
            for tp in set(since) - held:
                out[tp].append((since.pop(tp), t))
        end = self.stopped_at if self.stopped_at is not None else now
        for tp, t in since.items():
            out[tp].append((t, max(t, end)))
        return out

    def __str__(self) -> str:
        held = self.proc.assignment
        static = f" {self.instance_id}" if self.instance_id else ""
        errors = f" poll errors: {self.proc.poll_errors[-2:]}" if self.proc.poll_errors else ""
        return (f"{self.name} ({self.subscription}{static}, {self.state}): "
                f"{'-' if held is None else _fmt(held)}{errors}")


class Watcher(threading.Thread):
    """Describes the group every SAMPLE_S and checks each snapshot, and the running
    processes' reported assignments; keeps the first violation."""

    def __init__(self, chaos: "Chaos") -> None:
        super().__init__(name="chaos-watcher", daemon=True)
        self.chaos = chaos
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.last: Optional[Snapshot] = None
        self.recent: "collections.deque[Snapshot]" = collections.deque(maxlen=4)
        self.count = 0
        self.errors: List[str] = []
        self.violation: Optional[str] = None
        self.overlap_since: Dict[Tuple[TP, FrozenSet[str]], float] = {}
        self.max_overlap = 0.0

    def run(self) -> None:
        conn = None
        unanswered_since = None
        while not self.halt.is_set():
            try:
                if conn is None:
                    conn = RawConn(self.chaos.cluster.server.port, timeout=5)
                (group,) = conn.call(69, 0, {"group_ids": [GROUP],
                                             "include_authorized_operations": False}).groups
            except Exception as exc:  # reported if it lasts
                self.errors.append(f"{self.chaos.now():.2f}s {type(exc).__name__}: {exc}")
                if conn is not None:
                    conn.close()
                    conn = None
                unanswered_since = unanswered_since or time.monotonic()
                if time.monotonic() - unanswered_since > UNREACHABLE_S:
                    self._fail(f"the coordinator did not answer a describe for "
                               f"{UNREACHABLE_S}s: {self.errors[-3:]}", None)
            else:
                unanswered_since = None
                try:
                    self._check(Snapshot(self.chaos.now(), group))
                except Exception:  # the test's own fault: reported
                    self._fail(f"the watcher failed:\n{traceback.format_exc()}", self.last)
                    return
            self.halt.wait(SAMPLE_S)
        if conn is not None:
            conn.close()

    def _check(self, snap: Snapshot) -> None:
        prev = self.last
        if snap.error == NOT_FOUND and prev is None:
            return
        problems = [f"describe answered error {snap.error}"] if snap.error else \
            snapshot_problems(snap, prev)
        with self.lock:
            self.last = snap
            self.recent.append(snap)
            self.count += 1
        if problems:
            self._fail("\n".join(problems), snap, prev)
        self._check_clients(snap.t)

    def _check_clients(self, now: float) -> None:
        held: Dict[TP, List[str]] = collections.defaultdict(list)
        for c in list(self.chaos.consumers):
            if c.state == "running" and c.proc.assignment:
                for tp in c.proc.assignment:
                    held[tp].append(c.name)
        seen = set()
        for tp, who in held.items():
            if len(who) > 1:
                key = (tp, frozenset(who))
                seen.add(key)
                since = self.overlap_since.setdefault(key, now)
                self.max_overlap = max(self.max_overlap, now - since)
                if now - since > CLIENT_OVERLAP_S:
                    self._fail(f"the running processes {sorted(who)} all report "
                               f"{tp[0]}-{tp[1]} as assigned for {now - since:.1f}s",
                               self.last)
        for key in list(self.overlap_since):
            if key not in seen:
                del self.overlap_since[key]

    def _fail(self, what: str, snap: Optional[Snapshot], prev: Optional[Snapshot] = None):
        if self.violation is None:
            clients = "\n".join(f"    {c}" for c in list(self.chaos.consumers))
            self.violation = (f"{what}\n  snapshot: {snap}\n  the snapshot before: {prev}\n"
                              f"  processes:\n{clients}")

    def latest(self) -> Optional[Snapshot]:
        with self.lock:
            return self.last

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)


class Chaos:
    def __init__(self, cluster: ClientCluster, rng: random.Random, seed: int) -> None:
        self.cluster = cluster
        self.rng = rng
        self.seed = seed
        self.t0 = time.monotonic()
        self.consumers: List[Consumer] = []
        self.actions: List[str] = []
        self.starts = 0
        self.serial = 0
        # instance id -> (not before, whether it must be gone from the group, not
        # merely left for now, when its last process was stopped): a static member to
        # start again
        self.pending: Dict[str, Tuple[float, bool, float]] = {}
        self.watcher = Watcher(self)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def log(self, what: str) -> None:
        self.actions.append(f"{self.now():6.2f}s {what}")

    def running(self, static: Optional[bool] = None) -> List[Consumer]:
        return [c for c in self.consumers if c.state == "running"
                and (static is None or (c.instance_id is not None) == static)]

    # -- actions ------------------------------------------------------------------
    def start(self, subscription: str, instance_id: Optional[str] = None) -> Consumer:
        self.serial += 1
        prefix = {None: "d", "inst-a": "sa", "inst-b": "sb"}[instance_id]
        if subscription == REGEX:
            prefix = "rx"
        name = f"{prefix}{self.serial}"
        options = {"group_protocol": "consumer"}
        if instance_id is not None:
            options["instance_id"] = instance_id
        proc = self.cluster.spawn("confluent", GROUP, subscription, name, **options)
        consumer = Consumer(proc, subscription, instance_id)
        self.consumers.append(consumer)
        self.log(f"start {name} ({subscription}{', ' + instance_id if instance_id else ''})")
        return consumer

    def kill(self, c: Consumer) -> None:
        c.state = "killed"
        c.proc.kill()
        c.stopped_at = time.monotonic()
        held = c.proc.history[-1][1] if c.proc.history else ()
        self.log(f"SIGKILL {c.name} (it reported {_fmt(held)})")

    def close(self, c: Consumer) -> None:
        c.state = "closing"
        # (what it held counts as held until now: it revokes within its close, before
        # its leave reaches the coordinator, but reports nothing more)
        c.stopped_at = started = time.monotonic()
        c.proc.close()
        c.state = "closed"
        self.log(f"close {c.name} ({time.monotonic() - started:.1f}s)")

    def released(self, instance_id: str, gone: bool, stopped: float) -> bool:
        """Whether the coordinator lets a new incarnation of `instance_id` join, by a
        snapshot described after its last process was `stopped` (a join it sent just
        before its SIGKILL may still arrive: a margin): the instance is no member (or,
        unless `gone`, one that left for now: epoch -2). librdkafka gives up for good
        on UNRELEASED_INSTANCE_ID."""
        snap = self.watcher.latest()
        if snap is None or snap.t < stopped + 0.5:
            return False
        member = snap.instance(instance_id)
        return member is None or (not gone and member.epoch == -2)

    def wait_released(self, instance_id: str, gone: bool, stopped: float,
                      timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.released(instance_id, gone, stopped):
                return True
            time.sleep(0.05)
        return False

    def static_bounce(self, c: Consumer) -> None:
        """A static member closed (it leaves for now, epoch -2) and restarted at once
        with its instance id: its successor takes over its partitions."""
        self.close(c)
        stopped = self.now()
        if not self.wait_released(c.instance_id, False, stopped, 5.0):
            self.log(f"{c.instance_id} not released 5s after its close: restart later")
            self.pending[c.instance_id] = (self.now(), False, stopped)
            return
        self.starts += 1
        self.start(NAMED, c.instance_id)

    def step(self) -> None:
        rng = self.rng
        now = self.now()
        # static members due to start again, once their instance id is released
        for instance_id, (not_before, gone, stopped) in sorted(self.pending.items()):
            if now >= not_before and self.starts < MAX_STARTS and \
                    len(self.running()) < MAX_LIVE and \
                    self.released(instance_id, gone, stopped):
                del self.pending[instance_id]
                self.starts += 1
                self.start(NAMED, instance_id)
                return
        running = self.running()
        choices = []
        if len(running) >= 2:
            choices += [("kill", 3), ("close", 2)]
        if len(running) < MAX_LIVE and self.starts < MAX_STARTS:
            choices.append(("start", 3))
        if self.running(static=True) and self.starts < MAX_STARTS:
            choices.append(("bounce", 2))
        if not choices:
            return
        action = rng.choices([a for a, _ in choices], [w for _, w in choices])[0]
        if action == "start":
            self.starts += 1
            self.start(REGEX if rng.random() < 0.3 else NAMED)
        elif action == "bounce":
            self.static_bounce(rng.choice(self.running(static=True)))
        else:
            victim = rng.choice(running)
            (self.kill if action == "kill" else self.close)(victim)
            if victim.instance_id is not None and rng.random() < 0.7:
                # killed: it owns the instance id until its session ran out; closed: it
                # left for now and a successor may take over at once
                self.pending[victim.instance_id] = (now + rng.uniform(0.0, 8.0),
                                                    action == "kill", self.now())

    # -- phases -------------------------------------------------------------------
    def expected(self, live: List[Consumer]) -> FrozenSet[TP]:
        topics = set()
        for c in live:
            topics |= REGEX_TOPICS if c.subscription == REGEX else {c.subscription}
        return frozenset((t, p) for t in topics for p in range(TOPICS[t]))

    def converged(self, live: List[Consumer], since: float) -> Optional[str]:
        """None once the group has converged on `live` in a snapshot taken after
        `since`; else what is still off."""
        snap = self.watcher.latest()
        if snap is None or snap.t <= since:
            return "no snapshot yet"
        if snap.state != "Stable":
            return f"group {snap.state}"
        members = snap.by_client()
        names = {c.name for c in live}
        if len(snap.members) != len(live) or members.keys() != names:
            return f"members {sorted(m.client_id for m in snap.members)}, live {sorted(names)}"
        held: List[TP] = []
        for m in snap.members:
            if m.assigned != m.target:
                return f"{m.client_id} not at its target"
            held.extend(m.assigned)
        if len(held) != len(set(held)) or set(held) != self.expected(live):
            return f"assigned {_fmt(held)}, expected {_fmt(self.expected(live))}"
        if len({c.subscription for c in live}) == 1:
            sizes = [len(m.assigned) for m in snap.members]
            if max(sizes) - min(sizes) > 1:
                return f"unbalanced: {sizes}"
        for c in live:
            if c.proc.assignment != members[c.name].assigned:
                return f"{c.name} reports {c.proc.assignment}, the coordinator says " \
                       f"{_fmt(members[c.name].assigned)}"
        return None

    def wait_converged(self, live: List[Consumer], bound: float, what: str) -> float:
        since = self.now()
        deadline = time.monotonic() + bound
        off = "not checked"
        while time.monotonic() < deadline and self.watcher.violation is None:
            off = self.converged(live, since)
            if off is None:
                return self.now() - since
            time.sleep(0.1)
        self.check_violation()
        raise AssertionError(self.report(f"{what}: no convergence within {bound}s ({off})"))

    def check_violation(self) -> None:
        if self.watcher.violation is not None:
            raise AssertionError(self.report(f"VIOLATION\n{self.watcher.violation}"))

    def report(self, headline: str) -> str:
        snaps = "\n".join(f"  {s}" for s in list(self.watcher.recent))
        logs = "\n".join(f"--- {c.name} ({c.state})\n{c.proc.log()[-1500:]}"
                         for c in self.consumers if c.state == "running")
        return (f"chaos seed {self.seed} (FASTCOORD_CHAOS_SEED={self.seed} replays the "
                f"churn): {headline}\n"
                f"last churn actions:\n  " + "\n  ".join(self.actions[-15:]) + "\n"
                "processes:\n  " + "\n  ".join(str(c) for c in self.consumers) + "\n"
                f"last snapshots:\n{snaps}\n"
                f"describe errors: {self.watcher.errors[-5:]}\n"
                f"(the server's request log and each process's log: {self.cluster.tmp_path})\n"
                f"--- server\n{self.cluster.server.log()[-3000:]}\n{logs}")



def settle_and_check(chaos, cluster) -> list:
    """The churn over: FINAL_LIVE consumers left (static ones to start again are not),
    the group converged on them, and the admin client describing the same group.
    Returns the live consumers."""
    chaos.pending.clear()
    while len(chaos.running()) > FINAL_LIVE:
        chaos.close(chaos.rng.choice(chaos.running()))
    while len(chaos.running()) < FINAL_LIVE:
        chaos.start(REGEX if chaos.rng.random() < 0.3 else NAMED)
    live = chaos.running()
    took = chaos.wait_converged(live, CONVERGE_BOUND, "after the churn")
    chaos.log(f"converged in {took:.1f}s after the churn")
    chaos.check_violation()

    # the admin client sees the same group
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": cluster.server.bootstrap,
                         "broker.address.family": "v4"})
    (future,) = admin.describe_consumer_groups([GROUP], request_timeout=10).values()
    group = future.result(timeout=15)
    assert group.type == ConsumerGroupType.CONSUMER and \
        group.state.name == "STABLE", chaos.report(f"admin client: {group}")
    got = {m.client_id: {(tp.topic, tp.partition)
                         for tp in m.assignment.topic_partitions}
           for m in group.members}
    assert got == {c.name: set(c.proc.assignment) for c in live}, \
        chaos.report(f"the admin client describes {got}")
    del admin, future           # (its threads stop before the server does)
    return live

@pytest.mark.slow
def test_no_partition_has_two_owners_under_random_churn_and_the_group_converges(tmp_path):
    seed = int(os.environ.get("FASTCOORD_CHAOS_SEED") or int.from_bytes(os.urandom(4), "little"))
    print(f"chaos seed {seed}: FASTCOORD_CHAOS_SEED={seed} replays the churn")
    declared = [f"{t}:{n}" for t, n in TOPICS.items()]
    with ClientCluster(tmp_path, *SERVER_FLAGS, topics=declared) as cluster:
        chaos = Chaos(cluster, random.Random(seed), seed)
        chaos.watcher.start()
        try:
            for subscription, instance_id in [(NAMED, None), (NAMED, None), (REGEX, None),
                                              (NAMED, STATIC_IDS[0]), (NAMED, STATIC_IDS[1])]:
                chaos.start(subscription, instance_id)
            took = chaos.wait_converged(chaos.running(), START_BOUND, "the initial five")
            chaos.log(f"the initial five converged in {took:.1f}s")

            churn_until = time.monotonic() + CHURN_S
            while time.monotonic() < churn_until and chaos.watcher.violation is None:
                # now and then a burst: the next action while the last one's rebalance
                # is under way
                burst = chaos.rng.random() < BURST_P
                time.sleep(chaos.rng.uniform(0.0, 0.2) if burst else chaos.rng.uniform(*STEP_S))
                chaos.step()
            chaos.check_violation()

            settle_and_check(chaos, cluster)

            fatal = {c.name: c.proc.poll_errors for c in chaos.consumers
                     if any("_FATAL" in e for e in c.proc.poll_errors)}
            assert not fatal, chaos.report(f"fatal consumer errors: {fatal}")
        finally:
            chaos.watcher.stop()
        print(f"chaos seed {seed}: {chaos.watcher.count} snapshots, {len(chaos.actions)} "
              f"actions, {len(chaos.consumers)} processes, longest client-view overlap sampled "
              f"{chaos.watcher.max_overlap:.2f}s, describe errors {len(chaos.watcher.errors)}")
        overlaps = client_overlaps(chaos.consumers, time.monotonic())
        print(f"client-view overlaps from the reports' history (longest first): "
              f"{[(round(d, 3), tp, a, b) for d, tp, a, b in overlaps[:5]]}")
        assert not overlaps or overlaps[0][0] <= CLIENT_OVERLAP_S, chaos.report(
            f"two processes reported holding one partition at once (seconds, partition, "
            f"processes): {overlaps[:5]}")
        print("\n".join(chaos.actions))
        print(f"final: {chaos.watcher.latest()}")

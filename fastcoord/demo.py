"""`make run`: simulated consumer groups on a ManualClock, printed as they happen.

Groups of members join (with the member-id round trip), the leader assigns,
everyone syncs; then simulated minutes of heartbeats (batched, the hot path), a
crashed member that the session timeout removes, a clean leave, and the
rebalances both cause; then a group on the consumer group protocol (KIP-848).
Deterministic: a ManualClock and counter-based member ids.
"""
from __future__ import annotations

import itertools
import time
from typing import Dict, List

import numpy as np

from .core.clock import ManualClock
from .core.config import CoordinatorConfig
from .core.coordinator import GroupCoordinator
from .core.errors import Errors
from ._progress import Progress

SESSION_MS = 10_000
HEARTBEAT_MS = 3_000
PROTOCOLS = [("range", b"orders")]


class SimGroup:
    """The client side of one consumer group: member ids and the generation they hold."""

    def __init__(self, coord: GroupCoordinator, group_id: str, size: int):
        self.coord = coord
        self.group_id = group_id
        self.member_ids: List[str] = [""] * size
        self.generation = -1
        self.assignments: Dict[str, bytes] = {}

    def join_all(self) -> None:
        """Every member (re)joins; results arrive when the join completes."""
        self.results = {}
        for i, member_id in enumerate(self.member_ids):
            self._join(i, member_id)

    def _join(self, i: int, member_id: str) -> None:
        def answered(result, i=i):
            if result.error == Errors.MEMBER_ID_REQUIRED:
                self.member_ids[i] = result.member_id
                self._join(i, result.member_id)
            else:
                self.results[i] = result
        self.coord.join_group(self.group_id, member_id, "consumer", PROTOCOLS,
                              session_timeout_ms=SESSION_MS, rebalance_timeout_ms=SESSION_MS,
                              client_id=f"client-{i}", callback=answered)

    def sync_all(self) -> None:
        """After a completed join: the leader assigns round-robin, everyone syncs."""
        joined = {i: r for i, r in self.results.items() if r.error == Errors.NONE}
        if not joined:
            return
        leader = next(r for r in joined.values() if r.member_id == r.leader_id)
        self.generation = leader.generation_id
        plan = {m.member_id: f"partitions of {m.member_id}".encode() for m in leader.members}
        self.member_ids = [r.member_id for _, r in sorted(joined.items())]
        for r in joined.values():
            self.coord.sync_group(self.group_id, r.generation_id, r.member_id,
                                  plan if r.member_id == leader.member_id else None,
                                  callback=lambda res, m=r.member_id: self.assignments.__setitem__(
                                      m, res.assignment))


def settle(coord: GroupCoordinator, sims, step_ms: int = 500, limit_ms: int = 60_000) -> int:
    """Advance time until every member of `sims` has its join answered (the initial
    rebalance delay re-arms while members keep arriving, as in Kafka); then sync."""
    waited = 0
    while waited < limit_ms and any(len(s.results) < len(s.member_ids) for s in sims):
        coord.advance_time(step_ms)
        waited += step_ms
    for sim in sims:
        sim.sync_all()
    return waited


def run_demo(groups: int = 2000, members: int = 10, seconds: int = 60, impl=None) -> int:
    clock = ManualClock()
    ids = itertools.count()
    coord = GroupCoordinator(CoordinatorConfig(), clock=clock, impl=impl,
                             member_id_factory=lambda prefix: f"{prefix}-{next(ids)}")
    print(f"fastcoord demo: {groups} groups x {members} members on the {coord.impl} core, "
          f"session timeout {SESSION_MS} ms, heartbeat every {HEARTBEAT_MS} ms")

    t0 = time.perf_counter()
    sims = [SimGroup(coord, f"group-{g}", members) for g in range(groups)]
    for sim in sims:
        sim.join_all()
    waited = settle(coord, sims)
    stable = len(coord.list_groups(["Stable"]))
    print(f"  t={clock.now_ms() / 1000:.1f}s: {stable}/{groups} groups stable at generation "
          f"{sims[0].generation} ({groups * members:,} members joined with the member-id round "
          f"trip, initial rebalance delay {waited} ms) in {time.perf_counter() - t0:.2f} s of CPU")

    # Heartbeats: the hot path, batched through member handles.
    handles = np.array([coord.member_handle(s.group_id, m) for s in sims for m in s.member_ids],
                       dtype=np.int64)
    gens = np.array([s.generation for s in sims for _ in s.member_ids], dtype=np.int32)
    crashed = sims[0].member_ids[0]
    alive = handles != coord.member_handle(sims[0].group_id, crashed)
    h_alive, g_alive = handles[alive], gens[alive]
    rounds = max(1, seconds * 1000 // HEARTBEAT_MS)
    print(f"  {seconds} simulated seconds of heartbeats; {crashed} of group-0 has crashed silently")
    progress = Progress(rounds, "heartbeats")
    spent, beats, expired_at = 0.0, 0, None
    for r in range(rounds):
        t = time.perf_counter()
        errors = coord.heartbeat_batch(h_alive, g_alive)
        spent += time.perf_counter() - t
        beats += len(h_alive)
        if expired_at is None and (errors == Errors.REBALANCE_IN_PROGRESS).any():
            # What a real consumer does on REBALANCE_IN_PROGRESS: rejoin, then sync.
            expired_at = clock.now_ms()
            g0 = sims[0]
            g0.member_ids = [m for m in g0.member_ids if m != crashed]
            g0.join_all()
            g0.sync_all()
            gens[:members] = g0.generation
            g_alive = gens[alive]
        coord.advance_time(HEARTBEAT_MS)
        progress.update(r + 1)
    progress.close()
    print(f"  {beats:,} batched heartbeats in {spent:.3f} s of CPU: {beats / max(spent, 1e-9) / 1e6:.1f} M/s")
    if expired_at is not None:
        print(f"  t={expired_at / 1000:.0f}s: {crashed}'s session had expired; group-0's members "
              f"got REBALANCE_IN_PROGRESS, rejoined and synced: generation {sims[0].generation}, "
              f"{coord.describe_group('group-0').state}")

    # Scalar heartbeats (the per-request path a server uses), timed on one round.
    t = time.perf_counter()
    n = 0
    for sim in sims[1:]:
        for m in sim.member_ids:
            coord.heartbeat(sim.group_id, m, sim.generation)
            n += 1
    spent = time.perf_counter() - t
    print(f"  {n:,} scalar heartbeats (string ids): {n / spent / 1e6:.2f} M/s")

    # group-1 loses a member by a clean leave and rebalances.
    g0, g1 = sims[0], sims[1]
    leaving = g1.member_ids.pop()
    result = coord.leave_group(g1.group_id, [(leaving, None)])
    print(f"  {leaving} left group-1 ({result.member_errors[0].name}) -> "
          f"{coord.describe_group('group-1').state}")
    g1.join_all()
    settle(coord, [g1])
    for sim in (g0, g1):
        d = coord.describe_group(sim.group_id)
        print(f"  {sim.group_id}: {d.state}, generation {sim.generation}, "
              f"{len(d.members)} members, each with its assignment: "
              f"{all(m.assignment for m in d.members)}")
    states: Dict[str, int] = {}
    for listing in coord.list_groups():
        states[listing.state] = states.get(listing.state, 0) + 1
    print(f"  groups by state: {states}")
    consumer_ok = consumer_protocol_demo(coord)
    return 0 if states.get("Stable") == groups and consumer_ok else 1


def consumer_protocol_demo(coord: GroupCoordinator) -> bool:
    """The consumer group protocol (KIP-848) on the same coordinator: members join with
    epoch 0, the server-side assignor assigns, a join and a leave reconcile member by
    member (revocation before assignment), a static member comes back."""
    print("consumer group protocol (KIP-848): group 'orders-848', topic orders (12 partitions)")
    coord.set_topics({"orders": 12})
    epochs: Dict[str, int] = {}
    owned: Dict[str, dict] = {}
    static = {"m-c": "instance-c"}

    def beat(member: str, epoch: int, **kw) -> None:
        out = []
        coord.consumer_group_heartbeat("orders-848", member, epoch, callback=out.append,
                                       instance_id=static.get(member), **kw)
        result = out[0]
        if result.error != Errors.NONE:
            raise RuntimeError(f"{member}: {result.error.name} {result.error_message}")
        epochs[member] = result.member_epoch
        if result.assignment is not None:
            owned[member] = result.assignment

    def settle_all() -> int:
        rounds = 0
        while coord.consumer_group_describe(["orders-848"])[0].state != "Stable":
            rounds += 1
            for member in list(epochs):
                beat(member, epochs[member], owned_partitions=owned.get(member, {}))
            coord.advance_time(5_000)
        return rounds

    def show(event: str) -> None:
        d = coord.consumer_group_describe(["orders-848"])[0]
        parts = ", ".join(f"{m.member_id}@{m.member_epoch}={m.assignment.get('orders', [])}"
                          for m in d.members)
        print(f"  {event}: {d.state}, group epoch {d.group_epoch}: {parts}")

    for member in ("m-a", "m-b"):
        beat(member, 0, rebalance_timeout_ms=60_000, subscribed_topic_names=["orders"],
             owned_partitions={})
    rounds = settle_all()
    show(f"two members joined, stable after {rounds} heartbeat round(s)")
    beat("m-c", 0, rebalance_timeout_ms=60_000, subscribed_topic_names=["orders"],
         owned_partitions={})
    show("m-c (static) joined: the others first revoke, then m-c is assigned")
    rounds = settle_all()
    show(f"reconciled in {rounds} round(s)")
    beat("m-c", -2)
    epochs.pop("m-c")
    show("m-c left for a restart (epoch -2): its partitions wait for it")
    beat("m-c", 0, rebalance_timeout_ms=60_000, subscribed_topic_names=["orders"],
         owned_partitions={})
    settle_all()
    show("m-c came back with its instance id: the same partitions, no rebalance")
    beat("m-a", -1)
    epochs.pop("m-a")
    rounds = settle_all()
    show(f"m-a left: reconciled in {rounds} round(s)")
    return coord.consumer_group_describe(["orders-848"])[0].state == "Stable"

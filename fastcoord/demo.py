"""`make run`: simulated consumer groups on a ManualClock, printed as they happen.

Groups of members join (with the member-id round trip), the leader assigns,
everyone syncs; then simulated minutes of heartbeats (batched, the hot path), a
crashed member that the session timeout removes, a clean leave, and the
rebalances both cause. Deterministic: a ManualClock and counter-based member ids.
"""
from __future__ import annotations

import itertools
import time
from typing import Dict, List

import numpy as np

from .clock import ManualClock
from .config import CoordinatorConfig
from .coordinator import GroupCoordinator
from .errors import Errors
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
    coord.advance_time(coord.config.group_initial_rebalance_delay_ms)   # initial delay
    for sim in sims:
        sim.sync_all()
    stable = sum(1 for l in coord.list_groups(["Stable"]))
    print(f"  formed {stable}/{groups} stable groups ({groups * members} members, "
          f"generation {sims[0].generation}) in {time.perf_counter() - t0:.2f} s of CPU")

    # Heartbeats: the hot path, batched through member handles.
    handles = np.array([coord.member_handle(s.group_id, m) for s in sims for m in s.member_ids],
                       dtype=np.int64)
    gens = np.array([s.generation for s in sims for _ in s.member_ids], dtype=np.int32)
    crashed = coord.member_handle(sims[0].group_id, sims[0].member_ids[0])
    alive = handles != crashed        # member 0 of group-0 has crashed: it never heartbeats
    rounds = max(1, seconds * 1000 // HEARTBEAT_MS)
    print(f"  {seconds} simulated seconds of heartbeats; group-0's first member crashed silently")
    progress = Progress(rounds, "heartbeats")
    spent = 0.0
    rebalancing = []
    for r in range(rounds):
        t = time.perf_counter()
        errors = coord.heartbeat_batch(handles[alive], gens[alive])
        spent += time.perf_counter() - t
        if (errors == Errors.REBALANCE_IN_PROGRESS).any():
            hit = {s.group_id for s in sims}
            rebalancing.append((clock.now_ms(), int((errors == Errors.REBALANCE_IN_PROGRESS).sum())))
            break
        coord.advance_time(HEARTBEAT_MS)
        progress.update(r + 1)
    progress.close()
    beats = int(alive.sum()) * (len(rebalancing) and r + 1 or rounds)
    print(f"  {beats:,} batched heartbeats in {spent:.3f} s: {beats / max(spent, 1e-9) / 1e6:.1f} M/s")
    when = (rebalancing[0][0] if rebalancing else clock.now_ms())
    print(f"  t={when / 1000:.0f}s: session of the crashed member expired -> group-0 is "
          f"{coord.describe_group('group-0').state}; its members see REBALANCE_IN_PROGRESS")

    # Scalar heartbeats (the per-request path a server uses), timed on one round.
    t = time.perf_counter()
    n = 0
    for sim in sims[1:]:
        for m in sim.member_ids:
            coord.heartbeat(sim.group_id, m, sim.generation)
            n += 1
    spent = time.perf_counter() - t
    print(f"  {n:,} scalar heartbeats: {n / spent / 1e6:.2f} M/s")

    # group-0's survivors rejoin; group-1 loses a member by a clean leave.
    g0, g1 = sims[0], sims[1]
    g0.member_ids = [m for m in g0.member_ids[1:]]
    g0.join_all()
    g0.sync_all()
    leaving = g1.member_ids.pop()
    result = coord.leave_group(g1.group_id, [(leaving, None)])
    print(f"  {leaving} left group-1 ({result.member_errors[0].name}) -> "
          f"{coord.describe_group('group-1').state}")
    g1.join_all()
    g1.sync_all()
    for sim in (g0, g1):
        d = coord.describe_group(sim.group_id)
        print(f"  {sim.group_id}: {d.state}, generation {sim.generation}, "
              f"{len(d.members)} members, protocol {d.protocol_name}")
    states: Dict[str, int] = {}
    for listing in coord.list_groups():
        states[listing.state] = states.get(listing.state, 0) + 1
    print(f"  groups by state: {states}")
    return 0

"""Build coordinators full of stable groups, fast, for the benchmarks."""
from __future__ import annotations

import itertools
from typing import List, Tuple

import numpy as np

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock

SESSION_MS = 30_000
PROTOCOLS = [("range", b"x")]


def build_stable(impl: str, groups: int, members_per_group: int, *, num_shards: int = 50):
    """A coordinator with `groups` stable groups of `members_per_group` dynamic members.
    Returns (coord, [(group_id, member_id, generation)], handles int64, generations int32)."""
    clock = ManualClock()
    ids = itertools.count()
    coord = GroupCoordinator(
        CoordinatorConfig(group_initial_rebalance_delay_ms=0, num_shards=num_shards),
        clock=clock, impl=impl, member_id_factory=lambda prefix: f"{prefix}-{next(ids)}")
    joined: List[list] = [[] for _ in range(groups)]
    for g in range(groups):
        gid = f"group-{g}"
        box = joined[g]
        for _ in range(members_per_group):
            coord.join_group(gid, "", "consumer", PROTOCOLS, session_timeout_ms=SESSION_MS,
                             require_known_member_id=False, callback=box.append)
    coord.advance_time(0)
    members: List[Tuple[str, str, int]] = []
    for g in range(groups):
        gid = f"group-{g}"
        results = joined[g]
        assert len(results) == members_per_group and all(r.error == Errors.NONE for r in results)
        leader = results[0].leader_id
        gen = results[0].generation_id
        plan = {r.member_id: b"a" for r in results}
        for r in results:
            coord.sync_group(gid, gen, r.member_id, plan if r.member_id == leader else None,
                             callback=_ignore)
            members.append((gid, r.member_id, gen))
    handles = np.array([coord.member_handle(g, m) for g, m, _ in members], dtype=np.int64)
    gens = np.array([gen for _, _, gen in members], dtype=np.int32)
    return coord, members, handles, gens


def _ignore(_result) -> None:
    pass

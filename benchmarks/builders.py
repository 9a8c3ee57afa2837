"""Build coordinators full of stable groups, fast, for the benchmarks."""
from __future__ import annotations

import itertools
from typing import List, Tuple

import numpy as np

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock

SESSION_MS = 30_000
PROTOCOLS = [("range", b"x")]


def build_stable(impl: str, groups: int, members_per_group: int, *, num_shards: int = 50,
                 static: bool = False):
    """A coordinator with `groups` stable groups of `members_per_group` dynamic members
    (static ones, with group instance ids, when `static`). Returns (coord,
    [(group_id, member_id, generation)], handles int64, generations int32); with
    `static`, each member's tuple ends with its instance id."""
    clock = ManualClock()
    ids = itertools.count()
    coord = GroupCoordinator(
        CoordinatorConfig(group_initial_rebalance_delay_ms=0, num_shards=num_shards),
        clock=clock, impl=impl, member_id_factory=lambda prefix: f"{prefix}-{next(ids)}")
    joined: List[list] = [[] for _ in range(groups)]
    for g in range(groups):
        gid = f"group-{g}"
        box = joined[g]
        for k in range(members_per_group):
            coord.join_group(gid, "", "consumer", PROTOCOLS, session_timeout_ms=SESSION_MS,
                             require_known_member_id=False, callback=box.append,
                             group_instance_id=f"{gid}-instance-{k}" if static else None)
    coord.advance_time(0)
    members: List[Tuple[str, str, int]] = []
    for g in range(groups):
        gid = f"group-{g}"
        results = joined[g]
        assert len(results) == members_per_group and all(r.error == Errors.NONE for r in results)
        leader = results[0].leader_id
        gen = results[0].generation_id
        plan = {r.member_id: b"a" for r in results}
        instances = ({m.member_id: m.group_instance_id for m in coord.describe_group(gid).members}
                     if static else {})
        for r in results:
            inst = instances.get(r.member_id)
            coord.sync_group(gid, gen, r.member_id, plan if r.member_id == leader else None,
                             group_instance_id=inst, callback=_ignore)
            members.append((gid, r.member_id, gen, inst) if static else (gid, r.member_id, gen))
    handles = np.array([coord.member_handle(g, m) for g, m, *_ in members], dtype=np.int64)
    gens = np.array([gen for _, _, gen, *_ in members], dtype=np.int32)
    return coord, members, handles, gens


def _ignore(_result) -> None:
    pass

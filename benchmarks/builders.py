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


def build_consumer_groups(impl: str, groups: int, per_group: int, *, partitions: int = 10,
                          store=None):
    """A coordinator (on `store`; default the coordinator's own) whose `groups` consumer
    groups (KIP-848) of `per_group` members, all subscribed to one topic of
    `partitions`, are all Stable, every member at its group's epoch: (coord,
    [(group_id, member_id, member_epoch)])."""
    coord = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(0), impl=impl,
                             store=store)
    coord.set_topics({"t": partitions})
    out: list = []
    hb = coord.consumer_group_heartbeat
    settled = []
    for g in range(groups):
        gid = f"group-{g}"
        epochs, owned = {}, {}
        for i in range(per_group):
            mid = f"{gid}-member-{i}"
            hb(gid, mid, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=["t"],
               owned_partitions={}, callback=out.append)
            epochs[mid], owned[mid] = out[-1].member_epoch, out[-1].assignment
        # report what each owns until every one is reconciled (a few rounds; the bound
        # makes a group that never settles an error rather than a hang)
        for _ in range(50):
            for mid in epochs:
                hb(gid, mid, epochs[mid], owned_partitions=owned[mid], callback=out.append)
                r = out[-1]
                assert r.error == Errors.NONE, r
                epochs[mid] = r.member_epoch
                if r.assignment is not None:
                    owned[mid] = r.assignment
            out.clear()
            if coord.consumer_group_describe([gid])[0].state == "Stable":
                break
        else:
            raise AssertionError(f"{gid} did not become Stable")
        settled.append((gid, epochs))
    # the (group, member, epoch) tuples made in one pass after the setup, as
    # build_stable makes its own: adjacent in memory rather than scattered among the
    # settling rounds' garbage, so a benchmark calling them in random order pays the
    # same harness misses on both protocols
    members = [(gid, mid, epoch) for gid, epochs in settled for mid, epoch in epochs.items()]
    return coord, members

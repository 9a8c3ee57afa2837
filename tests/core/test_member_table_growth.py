"""A member table past its first chunk index: the native table keeps member slots in
chunks of 4,096 and indexes the chunks in an array that starts at 16 entries (65,536
members) and doubles, keeping the outgrown index until the table goes. Members on both
sides of that growth must heartbeat, expire and leave as the pure twin's do; the pure
twin, which has no chunks, runs the same body at a tenth of the size."""
from __future__ import annotations

import itertools

import numpy as np

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock

SESSION_MS = 10_000
GROUPS = 350
PER_GROUP = {"native": 200, "pure": 20}   # native: 70,000 members in 18 chunks


def _stable(impl):
    clock = ManualClock()
    ids = itertools.count()
    coord = GroupCoordinator(CoordinatorConfig(group_initial_rebalance_delay_ms=0, num_shards=8),
                             clock=clock, impl=impl,
                             member_id_factory=lambda prefix: f"{prefix}-{next(ids)}")
    joined = {f"g{g}": [] for g in range(GROUPS)}
    for gid, box in joined.items():
        for _ in range(PER_GROUP[impl]):
            coord.join_group(gid, "", "consumer", [("range", b"")],
                             session_timeout_ms=SESSION_MS, require_known_member_id=False,
                             callback=box.append)
    coord.advance_time(0)
    members = []
    for gid, results in joined.items():
        assert len(results) == PER_GROUP[impl] and {r.error for r in results} == {Errors.NONE}
        gen, leader = results[0].generation_id, results[0].leader_id
        plan = {r.member_id: b"" for r in results}
        for r in results:
            coord.sync_group(gid, gen, r.member_id, plan if r.member_id == leader else None,
                             callback=lambda _r: None)
            members.append((gid, r.member_id, gen))
    return coord, members


def test_members_past_the_first_chunk_index_heartbeat_and_expire(impl):
    coord, members = _stable(impl)
    if impl == "native":        # past the first index: 16 chunks of 4,096 slots
        assert coord.member_table.stats()["slots"] > 16 * 4096
    handles = np.array([coord.member_handle(g, m) for g, m, _ in members], dtype=np.int64)
    assert len(set(handles.tolist())) == len(members)
    gens = np.array([gen for *_, gen in members], dtype=np.int32)

    # every third member heartbeats (scalar, then batch) half way through its session;
    # the others stay silent and expire when it ends
    kept = members[::3]
    coord.advance_time(SESSION_MS // 2)
    assert {coord.heartbeat(g, m, gen) for g, m, gen in kept} == {Errors.NONE}
    errors = coord.heartbeat_batch(np.ascontiguousarray(handles[::3]),
                                   np.ascontiguousarray(gens[::3]))
    assert set(np.asarray(errors).tolist()) == {int(Errors.NONE)}
    assert coord.advance_time(SESSION_MS // 2 + 1) > 0

    alive = {(g, m) for g, m, _ in kept}
    described = {(g, m.member_id) for g in {g for g, _, _ in members}
                 for m in coord.describe_group(g).members}
    assert described == alive
    # the last member (in the grown index's newest chunk) leaves cleanly
    g, m, _ = kept[-1]
    assert coord.leave_group(g, [(m, None)]).error == Errors.NONE
    assert m not in {x.member_id for x in coord.describe_group(g).members}

"""The server's side of offsets retention: its tick runs the coordinator's retention pass
in slices (the pass itself: tests/core/test_offsets_retention.py). Here, not in the core
tier, because it builds a CoordinatorServer, which needs the server extra."""
from __future__ import annotations

import asyncio
import time

from fastcoord import CoordinatorConfig
from fastcoord.server import CoordinatorServer, ServerConfig


def test_server_runs_the_pass_a_slice_a_tick(impl):
    """The server's tick runs one slice of the pass once the check is due: with many
    groups to remove no tick removes more than a slice, and after enough ticks all are
    gone (the work per tick counted in groups, not timed)."""
    n, slice_groups = 20_000, 1000
    server = CoordinatorServer(ServerConfig(port=0, impl=impl, coordinator=CoordinatorConfig(
        group_min_session_timeout_ms=10, offsets_retention_check_interval_ms=1)))
    server.retention_slice_groups = slice_groups
    server.loop = asyncio.new_event_loop()      # (not run: it only holds the next tick)
    try:
        coord = server.coord
        for i in range(n):                      # one-shot joins (MEMBER_ID_REQUIRED)
            coord.join_group(f"oneshot-{i}", "", "consumer", [("range", b"")],
                             session_timeout_ms=10, rebalance_timeout_ms=10,
                             require_known_member_id=True, callback=lambda result: None)
        assert len(coord.list_groups()) == n
        time.sleep(0.05)                        # the pending members' sessions pass
        removed_per_tick = []
        left = n
        for _ in range(3 * n // slice_groups):
            server._tick()
            now_left = len(coord.list_groups())
            removed_per_tick.append(left - now_left)
            left = now_left
            if not left:
                break
    finally:
        server.loop.close()
    assert left == 0, left
    assert max(removed_per_tick) <= slice_groups, max(removed_per_tick)
    assert sum(1 for r in removed_per_tick if r) >= n // slice_groups

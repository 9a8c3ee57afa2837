"""Real, unmodified Kafka consumers against `fastcoord serve`.

kafka-python, aiokafka and confluent-kafka (librdkafka), each consumer in its own
process, the server in another, on 127.0.0.1; every wait is bounded.
"""
from __future__ import annotations

import time

import pytest

from helpers.server import (
    HEARTBEAT_MS, SESSION_MS, ClientCluster, ClientProc, assert_covered, describe,
    wait_until,
)

pytestmark = pytest.mark.clients

LIBS = ["kafka-python", "aiokafka", "confluent"]
TOPIC = "orders"
PARTITIONS = [(TOPIC, p) for p in range(4)]
REBALANCE_BOUND = 20.0      # seconds: generous for a loaded 2-core machine


@pytest.fixture
def cluster(tmp_path):
    """A server and a `spawn(lib, name, **options)` that starts consumers in `group`."""
    with ClientCluster(tmp_path, topics=[f"{TOPIC}:4"]) as cluster:
        def spawn(lib: str, name: str, group: str = "g", **options) -> ClientProc:
            return cluster.spawn(lib, group, TOPIC, name, **options)

        spawn.server = cluster.server
        yield spawn


def _covered(clients, timeout=REBALANCE_BOUND, *, all_busy=True) -> None:
    assert_covered(clients, PARTITIONS, timeout, all_busy=all_busy)


@pytest.mark.parametrize("lib", LIBS)
def test_group_lifecycle(cluster, lib):
    """Two consumers split 4 partitions; a third joins; one closes and its successor
    reads back what it committed."""
    a, b = cluster(lib, f"{lib}-a"), cluster(lib, f"{lib}-b")
    _covered([a, b])
    assert len(a.assignment) == len(b.assignment) == 2

    c = cluster(lib, f"{lib}-c")
    _covered([a, b, c])           # each of the three holds at least one partition
    assert sorted(len(x.assignment) for x in (a, b, c)) == [1, 1, 2]

    mine = sorted(a.assignment)
    offsets = {tp: 100 + 10 * i for i, tp in enumerate(mine)}
    a.commit(offsets)
    started = time.monotonic()
    a.close()
    _covered([b, c])
    took = time.monotonic() - started
    assert took < 10, f"partitions of a closed consumer moved only after {took:.1f}s"
    for tp in mine:
        successor = b if tp in b.assignment else c
        assert successor.committed([tp]) == {tp: offsets[tp]}
    # a partition nobody committed reads back as "no offset"
    untouched = [tp for tp in PARTITIONS if tp not in mine]
    assert b.committed(untouched) == {tp: None for tp in untouched}


@pytest.mark.parametrize("lib", LIBS)
def test_killed_consumer_partitions_move_after_session_timeout(cluster, lib):
    a, b = cluster(lib, f"{lib}-a"), cluster(lib, f"{lib}-b")
    _covered([a, b])
    a.kill()                       # SIGKILL: no LeaveGroup, only the session timeout tells
    killed = time.monotonic()
    assert wait_until(lambda: b.assignment == frozenset(PARTITIONS), REBALANCE_BOUND), \
        describe([b])
    moved = time.monotonic() - killed
    # The member's last heartbeat was at most one interval before the kill; the
    # survivor learns of the rebalance at its next heartbeat and rejoins.
    low = (SESSION_MS - HEARTBEAT_MS) / 1000 - 0.1
    high = (SESSION_MS + 4 * HEARTBEAT_MS) / 1000 + 1.5
    assert low <= moved <= high, f"partitions moved {moved:.2f}s after the kill, " \
        f"expected within [{low:.2f}, {high:.2f}]s"


@pytest.mark.parametrize("lib", LIBS)
def test_static_member_restart_within_session_timeout_keeps_assignment(cluster, lib):
    session = 8000        # long enough for a Python process to restart inside it
    opts = dict(session_ms=session)
    a = cluster(lib, f"{lib}-a", instance_id="static-a", **opts)
    b = cluster(lib, f"{lib}-b", instance_id="static-b", **opts)
    _covered([a, b])
    # settle: no rebalance in flight
    time.sleep(0.5)
    before_a, b_changes = a.assignment, len(b.history)
    a.kill()
    restarted = cluster(lib, f"{lib}-a2", instance_id="static-a", **opts)
    assert wait_until(lambda: bool(restarted.assignment), REBALANCE_BOUND), restarted.log()
    assert restarted.assignment == before_a
    # The other member saw no rebalance (a static rejoin does not bump the generation)
    time.sleep(1.0)
    assert len(b.history) == b_changes, f"b's assignment changed: {b.history}"


def test_group_mixing_all_three_clients(cluster):
    members = [cluster(lib, f"mixed-{lib}", group="mixed") for lib in LIBS]
    _covered(members)
    assert sorted(len(m.assignment) for m in members) == [1, 1, 2]
    # one leaves: the other two (different libraries) take over
    members[0].close()
    _covered(members[1:])
    committer = members[1]
    tp = sorted(committer.assignment)[0]
    committer.commit({tp: 7})
    assert members[2].committed([tp]) == {tp: 7}

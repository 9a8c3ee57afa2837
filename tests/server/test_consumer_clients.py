"""Real confluent-kafka (librdkafka) consumers speaking the consumer group protocol
(KIP-848, `group.protocol=consumer`) to `fastcoord serve`, each in its own process, on
127.0.0.1; the admin client describes and lists the group. Every wait is bounded."""
from __future__ import annotations

import time

import pytest

from helpers.server import (
    ClientCluster, ClientProc, ServerProc, assert_covered, exact_cover, stop_all, wait_until,
)

pytestmark = pytest.mark.clients

TOPIC = "orders"
PARTITIONS = [(TOPIC, p) for p in range(6)]
BOUND = 20.0            # seconds: generous for a loaded 2-core machine
# Short consumer-protocol timeouts so that the test's rebalances take a moment.
SERVER_FLAGS = ["--group-consumer-min-session-timeout-ms", "2000",
                "--group-consumer-session-timeout-ms", "6000",
                "--group-consumer-min-heartbeat-interval-ms", "100",
                "--group-consumer-heartbeat-interval-ms", "300"]


@pytest.fixture
def cluster(tmp_path):
    with ClientCluster(tmp_path, *SERVER_FLAGS, topics=[f"{TOPIC}:6"]) as cluster:
        def spawn(name: str, group: str = "cg") -> ClientProc:
            return cluster.spawn("confluent", group, TOPIC, name, group_protocol="consumer")

        spawn.server = cluster.server
        yield spawn


def _covered(clients, timeout=BOUND) -> None:
    assert_covered(clients, PARTITIONS, timeout, balanced=True)


def _admin(server):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": server.bootstrap,
                        "broker.address.family": "v4"})


def test_three_members_split_six_partitions_commit_and_hand_over(cluster):
    """Three consumers hold two partitions each; a commit reads back; one closes and
    its partitions move to the others quickly; its successor reads its commit."""
    a, b, c = cluster("cg-a"), cluster("cg-b"), cluster("cg-c")
    _covered([a, b, c])
    assert sorted(len(x.assignment) for x in (a, b, c)) == [2, 2, 2]
    mine = sorted(a.assignment)
    offsets = {tp: 100 + i for i, tp in enumerate(mine)}
    a.commit(offsets)
    assert a.committed(mine) == offsets
    started = time.monotonic()
    a.close()
    _covered([b, c])
    took = time.monotonic() - started
    assert took < 10, f"a closed member's partitions moved only after {took:.1f}s"
    for tp in mine:
        successor = b if tp in b.assignment else c
        assert successor.committed([tp]) == {tp: offsets[tp]}


def test_the_admin_client_describes_and_lists_a_consumer_group(cluster):
    from confluent_kafka import ConsumerGroupType
    a, b = cluster("cg-a"), cluster("cg-b")
    _covered([a, b])
    admin = _admin(cluster.server)
    (future,) = admin.describe_consumer_groups(["cg"], request_timeout=10).values()
    group = future.result(timeout=15)
    assert group.type == ConsumerGroupType.CONSUMER, group
    assert str(group.state.name) == "STABLE"
    got = {m.client_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
           for m in group.members}
    assert got == {"cg-a": set(a.assignment), "cg-b": set(b.assignment)}
    consumer = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER},
                                          request_timeout=10).result(timeout=15)
    assert [(g.group_id, g.type) for g in consumer.valid] == [("cg", ConsumerGroupType.CONSUMER)]
    classic = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC},
                                         request_timeout=10).result(timeout=15)
    assert classic.valid == []


def test_a_killed_member_is_taken_over_after_the_session_timeout(cluster):
    """SIGKILL leaves no goodbye: the member's partitions move once its session (6 s)
    has run out, not before, and within a second or so after it."""
    a, b, c = cluster("cg-a"), cluster("cg-b"), cluster("cg-c")
    _covered([a, b, c])
    killed_at = time.monotonic()
    c.kill()
    assert not exact_cover([a, b], PARTITIONS)
    _covered([a, b], timeout=BOUND)
    took = time.monotonic() - killed_at
    # its last heartbeat came at most one interval (0.3 s) before the kill
    assert 6.0 - 0.3 - 0.2 <= took <= 6.0 + 1.5, f"taken over after {took:.2f}s"
    assert sorted(len(x.assignment) for x in (a, b)) == [3, 3]


def test_a_static_member_restarted_within_its_session_keeps_its_partitions(tmp_path):
    server = ServerProc(tmp_path / "server.log", *SERVER_FLAGS, topics=[f"{TOPIC}:6"])
    clients = []

    def spawn(name, instance):
        client = ClientProc("confluent", server.bootstrap, "cg", TOPIC, name, tmp_path,
                            group_protocol="consumer", instance_id=instance)
        clients.append(client)
        return client

    try:
        a, b = spawn("st-a", "instance-a"), spawn("st-b", "instance-b")
        _covered([a, b])
        mine, theirs = a.assignment, b.assignment
        changes_of_b = len(b.history)
        a.close()                          # a static member's close: epoch -2, partitions kept
        time.sleep(1.0)
        assert b.assignment == theirs      # nothing moved to b meanwhile
        a2 = spawn("st-a2", "instance-a")
        _covered([a2, b])
        assert a2.assignment == mine
        assert b.assignment == theirs and len(b.history) == changes_of_b, b.history
    finally:
        stop_all(clients, server)


def _epochs(server, group: str):
    """(group epoch, {client id: (member id, member epoch)}) from ConsumerGroupDescribe
    on the wire."""
    from helpers.server import RawConn
    conn = RawConn(server.port)
    try:
        (g,) = conn.call(69, 0, {"group_ids": [group],
                                  "include_authorized_operations": False}).groups
    finally:
        conn.close()
    return g.error_code, g.group_epoch, {m.client_id: (m.member_id, m.member_epoch)
                                         for m in g.members}


@pytest.mark.slow
def test_a_restart_of_serve_keeps_the_groups_members_and_partitions(tmp_path):
    """`fastcoord serve --data-dir` killed by PID (SIGKILL) and started again on the same
    port within the session timeout: the consumer group is loaded from the store, its
    members keep their ids, epochs and partitions, and the consumers see no revocation
    (their assignment never changes)."""
    flags = SERVER_FLAGS + ["--group-consumer-session-timeout-ms", "20000"]
    server = ServerProc(tmp_path / "server-1.log", *flags, topics=[f"{TOPIC}:6"])
    clients = []
    try:
        for name in ("cg-a", "cg-b", "cg-c"):
            clients.append(ClientProc("confluent", server.bootstrap, "cg", TOPIC, name, tmp_path,
                                      group_protocol="consumer"))
            _covered(clients)                # the group epoch grows with each join
        a, b, c = clients
        clients[2].close()                   # and with a leave
        clients.pop()
        _covered([a, b])
        assert wait_until(lambda: _epochs(server, "cg")[2].keys() == {"cg-a", "cg-b"}, BOUND)
        before = _epochs(server, "cg")
        held = {x.name: x.assignment for x in (a, b)}
        changes = {x.name: len(x.history) for x in (a, b)}
        port = server.port
        server.proc.kill()                   # SIGKILL by PID: nothing is flushed at exit
        server.proc.wait(timeout=10)
        server.stop()
        server = ServerProc(tmp_path / "server-2.log", *flags, "--port", str(port),
                            topics=[f"{TOPIC}:6"])
        assert server.port == port
        assert _epochs(server, "cg") == before
        # the consumers heartbeat on, keeping what they hold: no revocation, no new epoch
        time.sleep(3.0)
        assert {x.name: x.assignment for x in (a, b)} == held
        assert {x.name: len(x.history) for x in (a, b)} == changes, \
            [(x.name, x.history) for x in (a, b)]
        assert _epochs(server, "cg") == before
        assert not a.poll_errors and not b.poll_errors, (a.poll_errors, b.poll_errors)
    finally:
        stop_all(clients, server)

"""Incremental cooperative rebalancing (KIP-429) with real clients: confluent-kafka
(librdkafka) consumers of the classic group protocol with
`partition.assignment.strategy=cooperative-sticky`, each in its own process, against
`fastcoord serve` on 127.0.0.1. Checked:

- three members joining one after another split 6 partitions 2-2-2, each partition held
  once; each join after the first took two rounds (the server's request log: JoinGroup
  answers of two new generations), the incremental protocol's revoke-then-assign; no
  member lost a partition and got it back, and what each holds at the end it has held
  without a break since it first got it (the assignments each client process reports
  when they change, read between polls 50 ms apart: an eager revocation that is undone
  within one poll is not seen there, which is why the rounds are counted too); the
  admin client describes a classic group whose assignor is cooperative-sticky;
- one of three closes cleanly: its partitions move to the other two, which keep theirs
  throughout (sticky), 3-3, each partition held once;
- rolling migration to `group.protocol=consumer`, which Kafka 4 allows only while no
  classic member's last assignment carries user data (ConsumerGroup.fromClassicGroup:
  "userData from a custom assignor would be lost"). librdkafka's cooperative-sticky
  echoes a member's sticky state (its previous partitions, the generation) into its
  assignment once it has one, i.e. from its second generation on:
  - once the two members left after one closed have been given its partitions, the
    member restarted with the consumer protocol is answered GROUP_ID_NOT_FOUND (fatal
    for librdkafka) and gets nothing; the group stays a classic cooperative-sticky one;
  - a group whose members all joined its first generation (a longer initial rebalance
    delay) is upgraded when a consumer-protocol member joins: each classic member is
    replaced in turn by one of the consumer protocol, each partition held once after
    every step, and the admin client describes a consumer group at the end.
  (A range group migrates in any generation: test_consumer_migration_clients.py.)

Every wait is bounded."""
from __future__ import annotations

import json

import pytest

from helpers.server import ClientCluster, ClientProc, assert_covered, describe, wait_until
# (the consumer-protocol tests' topic, admin client and short consumer-protocol timeouts)
from test_consumer_clients import PARTITIONS, TOPIC, _admin
from test_consumer_migration_clients import SERVER_FLAGS

pytestmark = pytest.mark.clients

GROUP = "coop"
BOUND = 40.0            # seconds: generous for a loaded 2-core machine


@pytest.fixture
def cluster(request, tmp_path):
    """A server (given the extra flags a test passes as the fixture's parameter) and a
    `spawn(name, protocol)` that starts a consumer of `GROUP`: classic with
    cooperative-sticky, or of the consumer protocol."""
    flags = getattr(request, "param", [])
    with ClientCluster(tmp_path, *SERVER_FLAGS, *flags, topics=[f"{TOPIC}:6"]) as cluster:
        def spawn(name: str, protocol: str = "classic") -> ClientProc:
            options = {"group_protocol": "consumer"} if protocol == "consumer" \
                else {"assignor": "cooperative-sticky"}
            return cluster.spawn("confluent", GROUP, TOPIC, name, **options)

        spawn.server = cluster.server
        yield spawn


def _covered(server, clients) -> None:
    assert_covered(clients, PARTITIONS, BOUND, balanced=True, server=server)


def _describe(server):
    admin = _admin(server)      # held until the answer is in: its futures die with it
    (future,) = admin.describe_consumer_groups([GROUP], request_timeout=10).values()
    return future.result(timeout=15)


def _join_rounds(server) -> int:
    """How many generations the server's JoinGroup answers gave (its request log, which
    is flushed every second)."""
    generations = set()
    with open(server.request_log_path) as f:
        for line in f:
            if not line.endswith("\n"):
                break                   # a line still being written
            entry = json.loads(line)
            if entry["api"] == "JoinGroup" and entry.get("answer_generation") is not None:
                generations.add(entry["answer_generation"])
    return len(generations)


def _regained(history) -> set:
    """The partitions held, lost and held again in a client's reported `history`."""
    lost, regained, previous = set(), set(), frozenset()
    for _, current in history:
        regained |= current & lost
        lost |= previous - current
        previous = current
    return regained


def _histories(clients) -> str:
    return "\n".join(f"{c.name}: {[sorted(a) for _, a in c.history]}" for c in clients)


def test_members_joining_one_by_one_keep_what_they_keep(cluster):
    from confluent_kafka import ConsumerGroupType
    server = cluster.server
    members = []
    for name in ("coop-a", "coop-b", "coop-c"):
        members.append(cluster(name))
        _covered(server, members)
        rounds = 2 * len(members) - 1
        assert wait_until(lambda: _join_rounds(server) >= rounds, BOUND), \
            (_join_rounds(server), rounds, _histories(members))
    assert [len(m.assignment) for m in members] == [2, 2, 2], describe(members)
    for m in members:
        assert not _regained(m.history), _histories(members)
        # what it holds at the end it has held without a break since it first got it
        for tp in m.assignment:
            first = next(i for i, (_, a) in enumerate(m.history) if tp in a)
            assert all(tp in a for _, a in m.history[first:]), _histories(members)
    group = _describe(server)
    assert group.type == ConsumerGroupType.CLASSIC, group
    assert group.partition_assignor == "cooperative-sticky", group


def test_a_closed_members_partitions_move_and_the_others_keep_theirs(cluster):
    server = cluster.server
    a, b, c = cluster("coop-a"), cluster("coop-b"), cluster("coop-c")
    _covered(server, [a, b, c])
    kept = {x.name: (x.assignment, len(x.history)) for x in (b, c)}
    a.close()
    _covered(server, [b, c])
    assert [len(x.assignment) for x in (b, c)] == [3, 3], describe([b, c])
    for x in (b, c):
        held, since = kept[x.name]
        after = x.history[since - 1:]       # from what it held when a closed
        assert all(held <= now for _, now in after), _histories([b, c])
        assert not _regained(after), _histories([b, c])


def test_no_upgrade_while_the_assignments_carry_sticky_state(cluster):
    from confluent_kafka import ConsumerGroupType
    server = cluster.server
    clients = [cluster(f"classic-{i}") for i in range(3)]
    _covered(server, clients)
    clients[0].close()
    _covered(server, clients[1:])       # a new generation: every assignment has user data
    newcomer = cluster("consumer-0", "consumer")
    assert wait_until(lambda: any("The group id does not exist" in e
                                  for e in newcomer.poll_errors), BOUND), \
        (newcomer.poll_errors, newcomer.history, server.log()[-4000:])
    assert all(not held for _, held in newcomer.history), newcomer.history
    group = _describe(server)
    assert group.type == ConsumerGroupType.CLASSIC, group
    assert group.partition_assignor == "cooperative-sticky", group
    got = {m.client_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
           for m in group.members}
    assert got == {c.name: set(c.assignment) for c in clients[1:]}, \
        (got, describe(clients[1:]))


@pytest.mark.parametrize("cluster", [["--group-initial-rebalance-delay-ms", "2000"]],
                         indirect=True)
def test_rolling_migration_of_a_group_in_its_first_generation(cluster):
    from confluent_kafka import ConsumerGroupType
    server = cluster.server
    clients = [cluster(f"classic-{i}") for i in range(3)]
    _covered(server, clients)
    assert wait_until(lambda: _join_rounds(server) >= 1, BOUND)
    assert _join_rounds(server) == 1, "the members did not all join the first generation"
    for i in range(3):
        clients.append(cluster(f"consumer-{i}", "consumer"))
        _covered(server, clients)
        assert _describe(server).type == ConsumerGroupType.CONSUMER
        clients.pop(0).close()
        _covered(server, clients)
    group = _describe(server)
    assert group.type == ConsumerGroupType.CONSUMER, group
    got = {m.client_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
           for m in group.members}
    assert got == {c.name: set(c.assignment) for c in clients}, (got, describe(clients))

"""Online migration between the group protocols with real clients (Kafka 4's mixed
groups, docs/consumer-protocol.md): confluent-kafka (librdkafka) consumers of one group,
each in its own process on 127.0.0.1, restarted one by one from the classic protocol
(range) to `group.protocol=consumer`, and back. Every partition is covered exactly
once at the end and the commits made before read back. Every wait is bounded."""
from __future__ import annotations

import pytest

from helpers.server import ClientCluster, ClientProc, assert_covered
# (the consumer-protocol tests' topic and short consumer-protocol timeouts)
from test_consumer_clients import PARTITIONS, SERVER_FLAGS as CONSUMER_FLAGS, TOPIC

pytestmark = pytest.mark.clients

BOUND = 40.0            # seconds: generous for a loaded 2-core machine
SERVER_FLAGS = CONSUMER_FLAGS + ["--group-initial-rebalance-delay-ms", "0"]


@pytest.fixture
def cluster(tmp_path):
    with ClientCluster(tmp_path, *SERVER_FLAGS, topics=[f"{TOPIC}:6"]) as cluster:
        def spawn(name: str, protocol: str, instance_id=None) -> ClientProc:
            options = {"group_protocol": "consumer"} if protocol == "consumer" \
                else {"assignor": "range"}
            if instance_id is not None:
                options["instance_id"] = instance_id
            return cluster.spawn("confluent", "mig", TOPIC, name, **options)

        spawn.server = cluster.server
        yield spawn


def _covered(server, clients, timeout=BOUND) -> None:
    assert_covered(clients, PARTITIONS, timeout, balanced=True, server=server)


def _group_type(server) -> str:
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": server.bootstrap, "broker.address.family": "v4"})
    listed = admin.list_consumer_groups(request_timeout=10).result(timeout=15)
    types = {g.group_id: g.type.name for g in listed.valid}
    return types.get("mig", "").lower()


def _rolling_restart(cluster, start: str, end: str, static: bool = False) -> None:
    server = cluster.server
    instance = (lambda i: f"instance-{i}") if static else (lambda i: None)
    clients = [cluster(f"{start}-{i}", start, instance(i)) for i in range(3)]
    _covered(server, clients)
    offsets = {tp: 100 + p for p, tp in enumerate(PARTITIONS)}
    for c in clients:
        c.commit({tp: offsets[tp] for tp in c.assignment})
    for i in range(3):
        clients[i].close()
        clients[i] = cluster(f"{end}-{i}", end, instance(i))
        _covered(server, clients)
        # a group with both kinds of member is a consumer group (a mixed one)
        assert _group_type(server) == ("consumer" if i < 2 else end)
    for c in clients:
        assert c.committed(sorted(c.assignment)) == {tp: offsets[tp] for tp in c.assignment}


def test_rolling_restart_from_classic_to_consumer(cluster):
    _rolling_restart(cluster, "classic", "consumer")


def test_rolling_restart_from_consumer_to_classic(cluster):
    _rolling_restart(cluster, "consumer", "classic")


def test_static_members_restart_from_classic_to_consumer(cluster):
    """A static member's successor of the other protocol takes over its instance id."""
    _rolling_restart(cluster, "classic", "consumer", static=True)


def test_static_members_restart_from_consumer_to_classic(cluster):
    _rolling_restart(cluster, "consumer", "classic", static=True)

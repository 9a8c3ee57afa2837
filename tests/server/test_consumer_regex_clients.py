"""Real confluent-kafka (librdkafka) consumers subscribing by regular expression under
the consumer group protocol (KIP-848, `group.protocol=consumer`) to `fastcoord serve`
on 127.0.0.1, each in its own process. librdkafka sends a subscription starting with
"^" as ConsumerGroupHeartbeat's SubscribedTopicRegex, which the server resolves with
RE2 against the topics it declares (docs/consumer-protocol.md). Checked:

- two members subscribed to `^orders-.*`, the server declaring orders-a (4 partitions),
  orders-b (2) and payments (3): between them they hold the 6 orders-* partitions, each
  once, and nothing of payments;
- a member subscribed by name to orders-a, then one by `^orders-.*`: every orders-*
  partition is held exactly once and the regex member gets partitions, also when the
  regex resolves only to the topic the other member named (no orders-b declared),
  which must still bump the group epoch.

A topic created later that matches a regex is not checked here: `fastcoord serve`
declares its topics at start (`--topic`, the config file) and has no documented way to
add one while it runs. Every wait is bounded; processes are stopped by PID."""
from __future__ import annotations

import pytest

from helpers.server import ClientCluster, ClientProc, assert_covered
# the consumer-protocol client tests' time bound and short consumer-protocol timeouts
from test_consumer_clients import BOUND, SERVER_FLAGS

pytestmark = pytest.mark.clients

REGEX = "^orders-.*"
TOPICS = {"orders-a": 4, "orders-b": 2, "payments": 3}
NAMED_ONLY = {"orders-a": 4, "payments": 3}      # the regex matches only orders-a


def _orders(topics: dict) -> list:
    return [(t, p) for t, n in topics.items() if t.startswith("orders-") for p in range(n)]


@pytest.fixture
def cluster(request, tmp_path):
    """A server declaring `request.param` (default TOPICS); `cluster(name, subscription)`
    starts a consumer of group "cg" subscribed to one topic name or regex."""
    topics = getattr(request, "param", TOPICS)
    declared = [f"{t}:{n}" for t, n in topics.items()]
    with ClientCluster(tmp_path, *SERVER_FLAGS, topics=declared) as cluster:
        def spawn(name: str, subscription: str) -> ClientProc:
            return cluster.spawn("confluent", "cg", subscription, name,
                                 group_protocol="consumer")

        spawn.server = cluster.server
        spawn.topics = topics
        yield spawn


def test_two_regex_members_split_the_matching_topics_and_nothing_else(cluster):
    a, b = cluster("rx-a", REGEX), cluster("rx-b", REGEX)
    assert_covered([a, b], _orders(TOPICS), BOUND, balanced=True, server=cluster.server)
    assert sorted(len(x.assignment) for x in (a, b)) == [3, 3]
    assert not a.poll_errors and not b.poll_errors, (a.poll_errors, b.poll_errors)


@pytest.mark.parametrize("cluster", [TOPICS, NAMED_ONLY], indirect=True,
                         ids=["regex-adds-a-topic", "regex-matches-only-the-named-topic"])
def test_a_regex_member_joining_a_member_subscribed_by_name_gets_partitions(cluster):
    named = cluster("by-name", "orders-a")
    assert_covered([named], _orders({"orders-a": 4}), BOUND, server=cluster.server)
    regex = cluster("by-regex", REGEX)
    assert_covered([named, regex], _orders(cluster.topics), BOUND, server=cluster.server)
    assert {t for t, _ in named.assignment} == {"orders-a"}, named.assignment
    assert not named.poll_errors and not regex.poll_errors, \
        (named.poll_errors, regex.poll_errors)

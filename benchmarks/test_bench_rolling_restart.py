"""Rolling restart of a group: partition-unavailable time, classic eager vs the consumer
group protocol (benchmarks/rolling_restart.py; its report: bench_results/rolling-restart.md).

With ``--benchmark-only`` (``make bench``) each variant restarts the 100 members of a group
consuming 1,000 partitions, once (the simulation is deterministic), and its figures go to
extra_info: the median is the CPU time of simulating it, the columns are the protocol's
figures. With ``--benchmark-disable`` (``make test``) the group is 10 members on 100
partitions and the figures are checked: both twins agree, and each protocol moves what it
should.
"""
import pytest

from fastcoord import _twins

import rolling_restart

IMPLS = ["native", "pure"] if _twins.NATIVE_AVAILABLE else ["pure"]
SMALL = dict(members=10, partitions=100, down_ms=5_000)


@pytest.mark.parametrize("variant", list(rolling_restart.variants("immediate")))
def test_rolling_restart(benchmark, variant):
    benchmark.group = "rolling-restart-100-members-1000-partitions"
    benchmark.extra_info["peer"] = variant
    size = SMALL if benchmark.disabled else {}      # (disabled: checked below)
    result = benchmark.pedantic(rolling_restart.run, kwargs=dict(only=[variant], **size),
                                rounds=1, iterations=1)
    figures = result[variant]
    figures.pop("wall_s")
    benchmark.extra_info.update(figures)


@pytest.fixture(scope="module")
def small():
    """{impl: {variant: figures}} of the small group, on every twin."""
    out = {}
    for impl in IMPLS:
        out[impl] = rolling_restart.run(**SMALL, impl=impl)
        for figures in out[impl].values():
            figures.pop("wall_s")
    return out


def test_twins_agree(small):
    assert all(small[impl] == small[IMPLS[0]] for impl in IMPLS)


def test_eager_revokes_everything_twice_per_restart(small):
    members, partitions = SMALL["members"], SMALL["partitions"]
    for name in ("classic-eager-range", "classic-eager-roundrobin"):
        figures = small[IMPLS[0]][name]
        # a leave's rebalance and a join's: each revokes every partition
        assert figures["gaps"] == 2 * members * partitions
        assert figures["rebalances"] == 2 * members


def test_consumer_dynamic_moves_only_the_restarted_members_partitions(small):
    members, partitions = SMALL["members"], SMALL["partitions"]
    eager = small[IMPLS[0]]["classic-eager-range"]["unavailable_partition_s"]
    for name in ("consumer-dynamic-5s", "consumer-dynamic-3s"):
        figures = small[IMPLS[0]][name]
        # its share goes to the others when it leaves, and a share back when it joins
        assert figures["moves"] == figures["gaps"] == 2 * partitions
        assert figures["rebalances"] == 2 * members
        interval_s = int(name[-2])
        assert figures["longest_gap_ms"] <= interval_s * 1000
        assert 0 < figures["unavailable_partition_s"] < eager / 2


def test_consumer_static_gets_its_partitions_back_without_rebalance(small):
    partitions, down_ms = SMALL["partitions"], SMALL["down_ms"]
    for name in ("consumer-static-5s", "consumer-static-3s"):
        figures = small[IMPLS[0]][name]
        assert figures["moves"] == 0 and figures["rebalances"] == 0
        # every partition waits exactly the down time of its owner, once
        assert figures["gaps"] == partitions
        assert figures["longest_gap_ms"] == down_ms
        assert figures["unavailable_partition_s"] == partitions * down_ms / 1000


def test_a_reaction_delay_reaches_every_eager_partition(small):
    """Lockstep heartbeats: eager's best case. With no reaction time only the stopped
    member's share waits; with 100 ms, every partition waits a join's and a sync's
    reaction at each rebalance, while a static member's wait grows by one reaction."""
    members, partitions, down_ms = SMALL["members"], SMALL["partitions"], SMALL["down_ms"]
    names = ["classic-eager-range", "consumer-static-5s"]
    instant = rolling_restart.run(**SMALL, phases="lockstep", only=names)
    slow = rolling_restart.run(**SMALL, phases="lockstep", reaction_ms=100, only=names)
    share_s = partitions // members * rolling_restart.CLASSIC_HEARTBEAT_MS / 1000
    assert instant["classic-eager-range"]["unavailable_partition_s"] == members * share_s
    eager = slow["classic-eager-range"]["unavailable_partition_s"]
    # each of a restart's two rebalances: the running members' partitions wait a
    # join's and a sync's reaction
    running = partitions - partitions // members
    assert eager >= members * 2 * running * 2 * 0.1
    assert slow["consumer-static-5s"]["longest_gap_ms"] == down_ms + 100

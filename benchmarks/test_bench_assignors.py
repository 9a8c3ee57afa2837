"""Assignor benchmarks: a consumer group's target assignment (KIP-848), native vs pure.

Rows (fixed seeds; members subscribe to topics of 1,000 or 10,000 partitions each):
  uniform-full-1k-10k        1,000 members, 10 topics x 1,000 partitions, all members
                             subscribed to all: the homogeneous builder, no current target
  uniform-full-10k-100k      10,000 members, 10 topics x 10,000 partitions
  uniform-join-1k-10k        one member joins the first row's group: the current target
                             is the first row's result (the incremental case)
  uniform-heterogeneous-1k   1,000 members each subscribed to 1-10 of 50 topics of 200
                             partitions: the heterogeneous builder
  range-1k-10k               the first row's group with the range assignor
Each row runs both twins, so the native/pure ratio comes from one run.

With ``--benchmark-disable`` (``make test``) the groups are 20 times smaller so this
runs as a test; the result is checked against the other twin's there.
"""
import random

import pytest

from fastcoord import _twins
from fastcoord.core.assignors import compute_assignment

IMPLS = ["native", "pure"] if _twins.NATIVE_AVAILABLE else ["pure"]
ROUNDS = {"native": 10, "pure": 3}


@pytest.fixture(scope="module")
def scale(request):
    """The divisor of the group sizes: 20 when benchmarks are disabled (a test run)."""
    return 20 if request.config.getoption("benchmark_disable") else 1


def homogeneous(members, topics, partitions):
    names = {f"topic-{t:02}": partitions for t in range(topics)}
    subscribed = frozenset(names)
    return [(f"member-{i:05}", None, subscribed) for i in range(members)], names


def heterogeneous(members, seed=42):
    rnd = random.Random(seed)
    topics = {f"topic-{t:02}": 200 for t in range(50)}
    names = sorted(topics)
    return [(f"member-{i:05}", None, frozenset(rnd.sample(names, rnd.randint(1, 10))))
            for i in range(members)], topics


def run(benchmark, impl, group, name, members, topics, current=None):
    current = current or {}
    benchmark.group = group
    benchmark.extra_info.update(peer=impl, ops=1, members=len(members),
                                partitions=sum(topics.values()))
    result = benchmark.pedantic(compute_assignment, args=(name, members, topics, current),
                                kwargs={"impl": impl}, rounds=ROUNDS[impl], iterations=1)
    other = "pure" if impl == "native" else "native"
    if other in IMPLS and benchmark.disabled:
        assert result == compute_assignment(name, members, topics, current, impl=other)
    assert set(result) == {m[0] for m in members}
    return result


@pytest.mark.parametrize("impl", IMPLS)
def test_uniform_full_1k_10k(benchmark, impl, scale):
    members, topics = homogeneous(1_000 // scale, 10, 1_000 // scale)
    run(benchmark, impl, "uniform-full-1k-10k", "uniform", members, topics)


@pytest.mark.parametrize("impl", IMPLS)
def test_uniform_full_10k_100k(benchmark, impl, scale):
    members, topics = homogeneous(10_000 // scale, 10, 10_000 // scale)
    run(benchmark, impl, "uniform-full-10k-100k", "uniform", members, topics)


@pytest.mark.parametrize("impl", IMPLS)
def test_uniform_join_1k_10k(benchmark, impl, scale):
    members, topics = homogeneous(1_000 // scale, 10, 1_000 // scale)
    current = compute_assignment("uniform", members, topics, {})
    joined = members + [("joiner", None, members[0][2])]
    result = run(benchmark, impl, "uniform-join-1k-10k", "uniform", joined, topics, current)
    moved = sum(1 for m, a in current.items() for t, ps in a.items() for p in ps if p not in result[m].get(t, ()))
    benchmark.extra_info.update(moved=moved)


@pytest.mark.parametrize("impl", IMPLS)
def test_uniform_heterogeneous_1k(benchmark, impl, scale):
    members, topics = heterogeneous(1_000 // scale)
    run(benchmark, impl, "uniform-heterogeneous-1k-50-topics", "uniform", members, topics)


@pytest.mark.parametrize("impl", IMPLS)
def test_range_1k_10k(benchmark, impl, scale):
    members, topics = homogeneous(1_000 // scale, 10, 1_000 // scale)
    run(benchmark, impl, "range-1k-10k", "range", members, topics)

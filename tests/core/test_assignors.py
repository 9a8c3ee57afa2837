"""The consumer group protocol's assignors (fastcoord.core.assignors), both twins.

Kafka 4.0's assignor tests translated (UniformHeterogeneousAssignmentBuilderTest,
UniformHomogeneousAssignmentBuilderTest, RangeAssignorTest), Kafka's topic ids replaced
by names topic1..topic4 (their order is the same). Where a Kafka expectation depends on
a Java hash map's iteration order (the homogeneous builder's topics) the expectation
here is the one the same algorithm gives with topics ordered by name, and the
invariants Kafka checks are checked as well. Then properties on random groups.
"""
import gc
import math
import random

import pytest
from hypothesis import given, settings, strategies as st

import fastcoord
from fastcoord.core.assignors import ASSIGNORS, compute_assignment
from helpers.tier import examples


def assign(impl, name, members, topics, current=None):
    return compute_assignment(name, members, topics, current or {}, impl=impl)


def m(member_id, *topics, rack=None):
    return (member_id, rack, frozenset(topics))


def check_valid(members, topics, result):
    """Every existing partition some member subscribes to is assigned to exactly one
    member, that member subscribes to its topic, every member is in the result, each
    topic's partitions are a sorted tuple, never empty."""
    subs = {entry[0]: set(entry[2]) for entry in members}
    assert set(result) == set(subs)
    owner = {}
    for mid, assignment in result.items():
        for topic, parts in assignment.items():
            assert topic in subs[mid], (mid, topic)
            assert type(parts) is tuple and parts and list(parts) == sorted(parts)
            for p in parts:
                assert 0 <= p < topics[topic]
                assert (topic, p) not in owner, (topic, p)
                owner[topic, p] = mid
    wanted = {(t, p) for s in subs.values() for t in s if t in topics for p in range(topics[t])}
    assert set(owner) == wanted


def sizes(result):
    return {mid: sum(len(p) for p in a.values()) for mid, a in result.items()}


# -- uniform, heterogeneous (Kafka's UniformHeterogeneousAssignmentBuilderTest) -----

def test_het_first_assignment_two_members_two_topics(impl):
    members = [m("A", "topic1", "topic3"), m("B", "topic3")]
    topics = {"topic1": 3, "topic3": 6}
    result = assign(impl, "uniform", members, topics)
    assert result == {"A": {"topic1": (0, 1, 2), "topic3": (4,)}, "B": {"topic3": (0, 1, 2, 3, 5)}}


def test_het_more_members_than_partitions(impl):
    members = [m("A", "topic3"), m("B", "topic3"), m("C", "topic1")]
    result = assign(impl, "uniform", members, {"topic1": 2, "topic3": 1})
    assert result == {"A": {"topic3": (0,)}, "B": {}, "C": {"topic1": (0, 1)}}


def test_het_reassignment_given_unbalanced_previous(impl):
    members = [m("A", "topic1"), m("B", "topic1", "topic2"), m("C", "topic1", "topic2", "topic3")]
    topics = {"topic1": 6, "topic2": 4, "topic3": 4}
    current = {"A": {"topic1": [0, 1, 2]}, "B": {"topic1": [3], "topic2": [0]},
               "C": {"topic1": [4, 5], "topic2": [1, 2, 3], "topic3": [0, 1, 2, 3]}}
    result = assign(impl, "uniform", members, topics, current)
    assert result == {"A": {"topic1": (0, 1, 2, 5)}, "B": {"topic1": (3,), "topic2": (0, 1, 2, 3)},
                      "C": {"topic1": (4,), "topic3": (0, 1, 2, 3)}}


def test_het_partitions_added(impl):
    members = [m("A", "topic1", "topic3"), m("B", "topic1", "topic2", "topic3", "topic4")]
    topics = {"topic1": 6, "topic2": 5, "topic3": 3, "topic4": 3}
    current = {"A": {"topic1": [0, 1, 2, 3], "topic3": [0, 1]},
               "B": {"topic2": [0, 1, 2], "topic4": [0, 1, 2]}}
    result = assign(impl, "uniform", members, topics, current)
    assert result == {"A": {"topic1": (0, 1, 2, 3, 4, 5), "topic3": (0, 1, 2)},
                      "B": {"topic2": (0, 1, 2, 3, 4), "topic4": (0, 1, 2)}}


def test_het_member_added_and_partitions_added(impl):
    # A's current topic2 partition is dropped: A no longer subscribes to topic2
    members = [m("A", "topic1"), m("B", "topic1", "topic2"), m("C", "topic1", "topic2")]
    topics = {"topic1": 6, "topic2": 7}
    current = {"A": {"topic1": [0, 2], "topic2": [0]}, "B": {"topic1": [1], "topic2": [1, 2]}}
    result = assign(impl, "uniform", members, topics, current)
    assert result == {"A": {"topic1": (0, 2, 3, 4, 5)}, "B": {"topic1": (1,), "topic2": (1, 2, 6)},
                      "C": {"topic2": (0, 3, 4, 5)}}


def test_het_member_removed(impl):
    members = [m("A", "topic1", "topic3"), m("B", "topic2")]
    topics = {"topic1": 3, "topic2": 8, "topic3": 3}
    current = {"A": {"topic1": [0, 1, 2], "topic3": [0, 1]}, "B": {"topic2": [3, 4, 5, 6]},
               "C": {"topic2": [0, 1, 2, 7], "topic3": [2]}}  # C left the group
    result = assign(impl, "uniform", members, topics, current)
    assert result == {"A": {"topic1": (0, 1, 2), "topic3": (0, 1, 2)},
                      "B": {"topic2": (0, 1, 2, 3, 4, 5, 6, 7)}}


def test_het_topic_deleted(impl):
    # topic2 no longer exists: its partitions vanish from the target, the rest stays
    members = [m("A", "topic1", "topic2"), m("B", "topic1")]
    current = {"A": {"topic1": [0], "topic2": [0, 1]}, "B": {"topic1": [1, 2]}}
    result = assign(impl, "uniform", members, {"topic1": 3}, current)
    check_valid(members, {"topic1": 3}, result)
    assert result == {"A": {"topic1": (0,)}, "B": {"topic1": (1, 2)}}


# -- uniform, homogeneous (Kafka's UniformHomogeneousAssignmentBuilderTest) ---------

def test_hom_no_subscription(impl):
    assert assign(impl, "uniform", [m("A")], {"topic1": 3}) == {"A": {}}


def test_hom_nonexistent_topic_is_ignored(impl):
    # Kafka's builder throws; its TargetAssignmentBuilder never passes such a topic
    assert assign(impl, "uniform", [m("A", "topic2")], {"topic1": 3}) == {"A": {}}


def test_hom_first_assignment(impl):
    # quotas in member order: A gets the extra partition; hand-out is topic by name
    members = [m("A", "topic1", "topic3"), m("B", "topic1", "topic3")]
    topics = {"topic1": 3, "topic3": 2}
    result = assign(impl, "uniform", members, topics)
    assert result == {"A": {"topic1": (0, 1, 2)}, "B": {"topic3": (0, 1)}}
    check_valid(members, topics, result)


def test_hom_more_members_than_partitions(impl):
    members = [m("A", "topic3"), m("B", "topic3"), m("C", "topic3")]
    result = assign(impl, "uniform", members, {"topic3": 2})
    assert sorted(sizes(result).values()) == [0, 1, 1]
    assert result == {"A": {"topic3": (0,)}, "B": {"topic3": (1,)}, "C": {}}


def test_hom_large_sample_valid_and_balanced(impl):
    topics = {f"topic-{i}": 3 for i in range(1, 101)}
    members = [m(f"member{i}", *topics) for i in range(1, 50)]
    result = assign(impl, "uniform", members, topics)
    check_valid(members, topics, result)
    assert max(sizes(result).values()) - min(sizes(result).values()) <= 1


def test_hom_unbalanced_previous(impl):
    members = [m("A", "topic1", "topic2"), m("B", "topic1", "topic2")]
    topics = {"topic1": 3, "topic2": 3}
    current = {"A": {"topic1": [0, 1], "topic2": [0, 1]}, "B": {"topic1": [2], "topic2": [2]}}
    result = assign(impl, "uniform", members, topics, current)
    assert result == {"A": {"topic1": (0, 1), "topic2": (0,)}, "B": {"topic1": (2,), "topic2": (1, 2)}}


def test_hom_partitions_added(impl):
    members = [m("A", "topic1", "topic2"), m("B", "topic1", "topic2")]
    topics = {"topic1": 6, "topic2": 5}
    current = {"A": {"topic1": [0, 2], "topic2": [0]}, "B": {"topic1": [1], "topic2": [1, 2]}}
    result = assign(impl, "uniform", members, topics, current)
    # every current partition kept; the new ones fill the quotas (A 6, B 5)
    assert result == {"A": {"topic1": (0, 2, 3, 4, 5), "topic2": (0,)},
                      "B": {"topic1": (1,), "topic2": (1, 2, 3, 4)}}


def test_hom_member_added(impl):
    members = [m("A", "topic1", "topic2"), m("B", "topic1", "topic2"), m("C", "topic1", "topic2")]
    topics = {"topic1": 3, "topic2": 3}
    current = {"A": {"topic1": [0, 2], "topic2": [0]}, "B": {"topic1": [1], "topic2": [1, 2]}}
    result = assign(impl, "uniform", members, topics, current)
    assert result == {"A": {"topic1": (0, 2)}, "B": {"topic1": (1,), "topic2": (1,)},
                      "C": {"topic2": (0, 2)}}


def test_hom_member_removed(impl):
    members = [m("A", "topic1", "topic2"), m("B", "topic1", "topic2")]
    topics = {"topic1": 3, "topic2": 3}
    current = {"A": {"topic1": [0], "topic2": [0]}, "B": {"topic1": [1], "topic2": [1]},
               "C": {"topic1": [2], "topic2": [2]}}
    result = assign(impl, "uniform", members, topics, current)
    assert result == {"A": {"topic1": (0, 2), "topic2": (0,)}, "B": {"topic1": (1,), "topic2": (1, 2)}}


def test_hom_subscription_removed(impl):
    members = [m("A", "topic2"), m("B", "topic2")]
    topics = {"topic1": 2, "topic2": 3}
    current = {"A": {"topic1": [0], "topic2": [0]}, "B": {"topic1": [1], "topic2": [1, 2]}}
    result = assign(impl, "uniform", members, topics, current)
    # B keeps its lowest partition up to its quota and gives back 2
    assert result == {"A": {"topic2": (0, 2)}, "B": {"topic2": (1,)}}


def test_hom_partition_claimed_twice_goes_to_first(impl):
    members = [m("A", "t"), m("B", "t")]
    result = assign(impl, "uniform", members, {"t": 2}, {"A": {"t": [1]}, "B": {"t": [1, 7, -1]}})
    assert result == {"A": {"t": (1,)}, "B": {"t": (0,)}}


# -- range (Kafka's RangeAssignorTest) ------------------------------------------------

def test_range_one_member_two_topics(impl):
    result = assign(impl, "range", [m("A", "topic1", "topic3")], {"topic1": 3, "topic3": 2})
    assert result == {"A": {"topic1": (0, 1, 2), "topic3": (0, 1)}}


def test_range_co_partitioned(impl):
    members = [m("B", "topic1", "topic3"), m("A", "topic1", "topic3")]
    result = assign(impl, "range", members, {"topic1": 3, "topic3": 3})
    # members sorted by id whatever their order: A first, with the extra partition
    assert result == {"A": {"topic1": (0, 1), "topic3": (0, 1)}, "B": {"topic1": (2,), "topic3": (2,)}}


def test_range_heterogeneous(impl):
    members = [m("A", "topic1", "topic2"), m("B", "topic3"), m("C", "topic2", "topic3")]
    topics = {"topic1": 3, "topic2": 3, "topic3": 2}
    result = assign(impl, "range", members, topics)
    assert result == {"A": {"topic1": (0, 1, 2), "topic2": (0, 1)}, "B": {"topic3": (0,)},
                      "C": {"topic2": (2,), "topic3": (1,)}}


def test_range_more_members_than_partitions(impl):
    members = [m("A", "topic1"), m("B", "topic1"), m("C", "topic1")]
    assert assign(impl, "range", members, {"topic1": 2}) == {"A": {"topic1": (0,)}, "B": {"topic1": (1,)}, "C": {}}


def test_range_static_members_first_by_instance_id(impl):
    # Kafka's sortMemberIds: static members by instance id, then dynamic ones by id
    members = [("A", None, frozenset({"t"})), ("B", None, frozenset({"t"}), "i2"),
               ("C", None, frozenset({"t"}), "i1"), ("D", None, frozenset({"t"}), None)]
    result = assign(impl, "range", members, {"t": 6})
    assert result == {"C": {"t": (0, 1)}, "B": {"t": (2, 3)}, "A": {"t": (4,)}, "D": {"t": (5,)}}
    # the uniform assignor does not read instance ids
    plain = [entry[:3] for entry in members]
    assert assign(impl, "uniform", members, {"t": 6}) == assign(impl, "uniform", plain, {"t": 6})


def test_range_is_not_sticky(impl):
    # Kafka 4.0's range assignor ignores the current assignment
    members = [m("A", "t"), m("B", "t")]
    result = assign(impl, "range", members, {"t": 4}, {"A": {"t": [2, 3]}, "B": {"t": [0, 1]}})
    assert result == {"A": {"t": (0, 1)}, "B": {"t": (2, 3)}}


def test_range_member_id_order_is_utf16(impl):
    # Java compares UTF-16 code units: U+FFFD sorts after an astral character there,
    # before it by code point
    members = [m("\ufffd", "t"), m("\U0001f600", "t")]
    result = assign(impl, "range", members, {"t": 3})
    assert result == {"\U0001f600": {"t": (0, 1)}, "\ufffd": {"t": (2,)}}


# -- the result as objects ---------------------------------------------------------------

GROUPS = [  # homogeneous, heterogeneous, with a current target
    ([m(f"m{i}", "t", "u") for i in range(7)], {"t": 20, "u": 9}, {}),
    ([m(f"m{i}", *(["t", "u"] if i % 2 else ["u"])) for i in range(7)], {"t": 20, "u": 9}, {}),
    ([m(f"m{i}", "t", "u") for i in range(7)], {"t": 20, "u": 9}, {"m1": {"t": [0, 1, 2], "u": [4]}}),
]


@pytest.mark.parametrize("name", ASSIGNORS)
@pytest.mark.parametrize("members, topics, current", GROUPS)
def test_results_share_no_mutable_object(impl, name, members, topics, current):
    """Every dict of a result is its own: neither another member's nor another call's.
    Each topic's partitions are a tuple, immutable (ints and tuples may be shared)."""
    first = assign(impl, name, members, topics, current)
    second = assign(impl, name, members, topics, current)
    assert first == second
    dicts = [first, second, *first.values(), *second.values()]
    assert len({id(d) for d in dicts}) == len(dicts)
    assert all(type(ps) is tuple for a in (*first.values(), *second.values()) for ps in a.values())
    for assignment in first.values():
        for topic in list(assignment):
            assignment[topic] += (-1,)
        assignment["other"] = (0,)
    first.clear()
    assert second == assign(impl, name, members, topics, current)


@pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE, reason="the native twin's objects")
@pytest.mark.parametrize("name", ASSIGNORS)
@pytest.mark.parametrize("members, topics, current", GROUPS)
def test_native_result_is_untracked_by_the_cyclic_collector(name, members, topics, current):
    """The native twin's partition tuples (ints only: in no cycle) are untracked, and so
    the member dicts holding them: a group's target adds nothing to any collection. A
    dict given a container afterwards is tracked again, as CPython tracks any dict."""
    result = compute_assignment(name, members, topics, current, impl="native")
    assert any(result.values())
    for assignment in result.values():
        assert not gc.is_tracked(assignment)
        assert not any(gc.is_tracked(ps) for ps in assignment.values())
    some = next(a for a in result.values() if a)
    some["caller's"] = []
    assert gc.is_tracked(some)


@pytest.mark.parametrize("name", ASSIGNORS)
def test_cyclic_collector_state_is_kept(impl, name):
    """The native twin pauses the cyclic collector while it makes a result: it is back
    on after, and still off when it was off."""
    members, topics, current = GROUPS[2]
    assert gc.isenabled()
    assign(impl, name, members, topics, current)
    assert gc.isenabled()
    gc.disable()
    try:
        assign(impl, name, members, topics, current)
        assert not gc.isenabled()
    finally:
        gc.enable()


class _Probe:
    """A container made through the type's allocator (no free list): the collection that
    is due, if any, runs when one is made."""


@pytest.mark.parametrize("name", ASSIGNORS)
def test_collection_made_due_runs_in_the_call(impl, name):
    """The native twin pauses the cyclic collector while it makes a result, then runs
    the collection the result's containers made due before it returns, not at the
    caller's next allocation (where the caller would pay for it)."""
    members = [m(f"m{i:04}", "t", "u") for i in range(2000)]
    inside, starts = [False], []

    def callback(phase, info):
        if phase == "start":
            starts.append(inside[0])

    gc.collect()
    gc.callbacks.append(callback)
    try:
        inside[0] = True  # set and read without making a container
        result = assign(impl, name, members, {"t": 3000, "u": 3000})
        inside[0] = False
        _Probe()
    finally:
        gc.callbacks.remove(callback)
    assert starts and all(starts)
    assert len(result) == len(members)


# -- arguments --------------------------------------------------------------------------

@pytest.mark.parametrize("args, error", [
    (("sticky", [], {}, {}), ValueError),
    ((1, [], {}, {}), TypeError),
    (("uniform", [m("A"), m("A")], {}, {}), ValueError),
    (("uniform", [m("A")], {"t": -1}, {}), ValueError),
    (("uniform", [m("A")], {"t": 2 ** 31}, {}), ValueError),
    (("uniform", [m("A")], {"t": 1.5}, {}), TypeError),
    (("uniform", [m("A")], {"t": True}, {}), TypeError),
    (("uniform", [m("A")], {1: 1}, {}), TypeError),
    (("uniform", [("A", None)], {}, {}), TypeError),
    (("uniform", [("A", None, frozenset(), "i", 1)], {}, {}), TypeError),
    (("range", [("A", None, frozenset(), 7)], {}, {}), TypeError),
    (("range", [("A", None, frozenset(), "i"), ("B", None, frozenset(), "i")], {}, {}), ValueError),
    (("uniform", [(1, None, frozenset())], {}, {}), TypeError),
    (("uniform", [("A", 5, frozenset())], {}, {}), TypeError),
    (("uniform", [("A", None, "t")], {}, {}), TypeError),
    (("uniform", [("A", None, {1})], {}, {}), TypeError),
    (("uniform", "AB", {}, {}), TypeError),
    (("uniform", [m("A", "t")], [], {}), TypeError),
    (("range", [m("A", "t")], {"t": 1}, []), TypeError),
    (("uniform", [m("A", "t")], {"t": 1}, {"A": [0]}), TypeError),
    (("uniform", [m("A", "t")], {"t": 1}, {"A": {"t": ["0"]}}), TypeError),
    (("uniform", [m("A", "t")], {"t": 1}, {"A": {"t": [0.0]}}), TypeError),
    (("uniform", [m("A", "t")], {"t": 1}, {"A": {"t": "0"}}), TypeError),
    (("uniform", [m("A", "t")], {"t": 1}, {"A": {1: [0]}}), TypeError),
])
def test_bad_arguments(impl, args, error):
    with pytest.raises(error):
        compute_assignment(*args, impl=impl)


def test_unknown_impl():
    with pytest.raises(ValueError):
        compute_assignment("uniform", [], {}, {}, impl="fast")


def test_empty_group(impl):
    assert ASSIGNORS == ("uniform", "range")
    for name in ASSIGNORS:
        assert compute_assignment(name, [], {"t": 3}, {}, impl=impl) == {}


def test_racks_are_carried_not_used(impl):
    plain = assign(impl, "uniform", [m("A", "t"), m("B", "t", "u")], {"t": 5, "u": 2})
    racked = assign(impl, "uniform", [m("A", "t", rack="r1"), m("B", "t", "u", rack="r2")], {"t": 5, "u": 2})
    assert plain == racked


# -- properties ---------------------------------------------------------------------

TOPIC_NAMES = [f"t{i}" for i in range(6)]


@st.composite
def groups(draw, homogeneous=None, max_members=8):
    topics = {t: draw(st.integers(0, 12)) for t in draw(st.sets(st.sampled_from(TOPIC_NAMES), max_size=5))}
    n = draw(st.integers(1, max_members))
    ids = draw(st.lists(st.text("abcXYZ", min_size=1, max_size=3), min_size=n, max_size=n, unique=True))
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    common = draw(st.frozensets(st.sampled_from(TOPIC_NAMES)))
    members = [(mid, None, common if homogeneous else draw(st.frozensets(st.sampled_from(TOPIC_NAMES))))
               for mid in ids]
    if draw(st.booleans()):
        # some static members (instance ids: a distinct sample of the ids reversed)
        members = [entry + (draw(st.sampled_from([None, entry[0][::-1] + "#"])),) for entry in members]
    # a current assignment: random, possibly stale (gone members, partitions, topics)
    current = {}
    for mid in ids + ["gone"]:
        if draw(st.booleans()):
            current[mid] = {t: draw(st.lists(st.integers(-1, 14), max_size=6))
                            for t in draw(st.sets(st.sampled_from(TOPIC_NAMES), max_size=3))}
    return members, topics, current


@settings(max_examples=examples(150), deadline=None)
@given(groups(), st.sampled_from(ASSIGNORS))
def test_property_valid(group, name):
    members, topics, current = group
    for impl in IMPLS:
        check_valid(members, topics, compute_assignment(name, members, topics, current, impl=impl))


IMPLS = ["native", "pure"] if fastcoord.NATIVE_AVAILABLE else ["pure"]


@pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE, reason="the native twin is not built")
@settings(max_examples=examples(300), deadline=None)
@given(groups(), st.sampled_from(ASSIGNORS))
def test_property_twins_agree(group, name):
    members, topics, current = group
    native = compute_assignment(name, members, topics, current, impl="native")
    pure = compute_assignment(name, members, topics, current, impl="pure")
    assert native == pure


@settings(max_examples=100, deadline=None)
@given(groups(homogeneous=True))
def test_property_homogeneous_balanced(group):
    members, topics, current = group
    for impl in IMPLS:
        result = compute_assignment("uniform", members, topics, current, impl=impl)
        counts = sizes(result).values()
        assert max(counts) - min(counts) <= 1


def kafka_quotas(total, n):
    """The homogeneous builder's quotas, in member order."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.integers(0, 60), st.integers(1, 3), st.booleans(), st.randoms(use_true_random=False))
def test_property_stickiness_join_and_leave(n, per_topic, n_topics, join, rnd):
    """From a balanced target, a member joins (last) or one leaves: every member keeps
    min(held, quota) of its partitions, so exactly sum(max(0, held - quota)) partitions
    of staying members move (plus the leaver's own), the fewest Kafka's quota order
    allows; and never more than a balanced move needs, ceil(P / N') plus the members
    whose quota rose above what they held."""
    topics = {f"t{i}": per_topic for i in range(n_topics)}
    total = per_topic * n_topics
    members = [m(f"m{i:02}", *topics) for i in range(n)]
    for impl in IMPLS:
        before = compute_assignment("uniform", members, topics, {}, impl=impl)
        after_members = members + [m("new", *topics)] if join else members[:]
        if not join:
            after_members.pop(rnd.randrange(n))
            if not after_members:
                continue
        after = compute_assignment("uniform", after_members, topics, before, impl=impl)
        check_valid(after_members, topics, after)
        quotas = kafka_quotas(total, len(after_members))
        held = [sizes(before).get(mid, 0) for mid, _, _ in after_members]
        owner_before = {(t, p): mid for mid, a in before.items() for t, ps in a.items() for p in ps}
        owner_after = {(t, p): mid for mid, a in after.items() for t, ps in a.items() for p in ps}
        moved = sum(1 for tp, mid in owner_before.items() if owner_after[tp] != mid)
        left = 0 if join else total - sum(held)
        assert moved == left + sum(max(0, h - q) for h, q in zip(held, quotas))
        deficits = sum(1 for h, q in zip(held, quotas) if q > h)
        assert moved - left <= math.ceil(total / len(after_members)) + deficits


def test_stickiness_unchanged_group_moves_nothing(impl):
    rnd = random.Random(7)
    topics = {f"t{i}": rnd.randrange(1, 40) for i in range(8)}
    members = [m(f"m{i}", *rnd.sample(sorted(topics), 3)) for i in range(12)]
    first = assign(impl, "uniform", members, topics)
    assert assign(impl, "uniform", members, topics, first) == first


@pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE, reason="the native twin is not built")
@settings(max_examples=100, deadline=None)
@given(groups(homogeneous=False), st.integers(0, 3))
def test_property_twins_agree_on_the_qsort_path(group, limit):
    """The native balancer orders members by load with a counting sort when loads span
    few values, qsort otherwise: force the second (and tiny spans for the first)."""
    from fastcoord.core._native import engines

    members, topics, current = group
    engines._assignors_test_sort_limit(limit)
    try:
        native = compute_assignment("uniform", members, topics, current, impl="native")
    finally:
        engines._assignors_test_sort_limit(1 << 62)
    assert native == compute_assignment("uniform", members, topics, current, impl="pure")


@pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE, reason="the native twin is not built")
@pytest.mark.parametrize("name", ASSIGNORS)
def test_twins_agree_many_topics_names_as_distinct_objects(name):
    """Topic names that are equal but distinct str objects, across more topics than the
    native twin's first table of name objects holds: numbered as one topic each."""
    rnd = random.Random(11)
    topics = {f"topic-{t:03}": rnd.randint(0, 9) for t in range(120)}
    names = sorted(topics) + ["not-created"]

    def fresh(text):  # an equal str, another object
        return "".join(list(text))

    members = [(f"m{i:03}", None, frozenset(fresh(t) for t in rnd.sample(names, rnd.randint(1, 40))))
               for i in range(60)]
    current = {f"m{i:03}": {fresh(t): [0, 1, 2] for t in rnd.sample(names, 3)} for i in range(0, 60, 3)}
    native = compute_assignment(name, members, topics, current, impl="native")
    assert native == compute_assignment(name, members, topics, current, impl="pure")
    check_valid(members, topics, native)


def test_current_partition_ids_out_of_range_or_not_plain_ints(impl):
    import numpy as np

    members = [m("A", "t"), m("B", "t")]
    current = {"A": {"t": [2 ** 70, -(2 ** 70), np.int64(2)]}, "B": {"t": (np.int32(0), 3)}}
    # 2**70 and -2**70 do not exist and are dropped; numpy ints are ints
    result = assign(impl, "uniform", members, {"t": 4}, current)
    assert result == {"A": {"t": (1, 2)}, "B": {"t": (0, 3)}}


class _Emptying:
    """A partition id whose __index__ empties the list it is in (hostile input)."""

    def __init__(self, ids, value):
        self.ids, self.value = ids, value

    def __index__(self):
        self.ids.clear()
        return self.value


def test_current_list_emptied_by_a_partition_id(impl):
    # the list is read as a list iterator reads it: what follows the emptying id is gone
    ids = [None, 2, 3]
    ids[0] = _Emptying(ids, 1)
    result = assign(impl, "uniform", [m("A", "t"), m("B", "t")], {"t": 4}, {"A": {"t": ids}})
    assert result == {"A": {"t": (0, 1)}, "B": {"t": (2, 3)}}



class _Index(int):
    """An int subclass: read through __index__, not as a plain int."""


class _Growing:
    """A partition id whose __index__ appends to the list it is in (hostile input)."""

    def __init__(self, ids, value, extra):
        self.ids, self.value, self.extra = ids, value, extra

    def __index__(self):
        self.ids.append(self.extra)
        return self.value


def _hostile_current(previous):
    """A previous result's lists, some of their ints replaced by others of the same
    value or by objects read through __index__ (which may change the list)."""
    current = {mid: {t: list(ps) for t, ps in a.items()} for mid, a in previous.items()}
    ids = current["m0"]["t"]
    ids[1] = int(str(ids[1]))         # an equal int, another object (above the small ints)
    ids[2] = _Index(ids[2])
    ids[3] = 2 ** 80                  # out of range: dropped
    ids[4] = ids[5]                   # a repeat
    ids.insert(6, ids[0] + 999)       # another member's partition, claimed again
    growing = current["m1"]["t"]
    growing[3] = _Growing(growing, growing[3], int("2999"))
    emptying = current["m2"]["t"]
    emptying[3] = _Emptying(emptying, emptying[3])
    current["m3"]["t"].reverse()      # descending
    current["m4"]["t"] = [int(str(p)) for p in current["m4"]["t"]]
    current["m5"]["u"] = (p for p in [0, 1, 2])  # not a list
    current["gone"] = {"t": list(range(100))}     # not a member
    return current


def test_current_ints_that_are_not_a_results_own(impl):
    """A previous result's lists hold the very int objects the native twin makes its
    results from; other ints of the same values (made anew, big, a subclass, objects
    with an __index__ that changes the list) are read by value, as the pure twin does."""
    topics = {"t": 3000, "u": 40}
    members = [m(f"m{i}", "t", "u") for i in range(6)]
    previous = assign(impl, "uniform", members, topics)
    joined = members + [m("joiner", "t", "u")]
    result = assign(impl, "uniform", joined, topics, _hostile_current(previous))
    check_valid(joined, topics, result)
    assert result == assign("pure", "uniform", joined, topics, _hostile_current(previous))
    # the same reads with heterogeneous subscriptions (the other builder)
    joined = members + [m("joiner", "t")]
    result = assign(impl, "uniform", joined, topics, _hostile_current(previous))
    check_valid(joined, topics, result)
    assert result == assign("pure", "uniform", joined, topics, _hostile_current(previous))

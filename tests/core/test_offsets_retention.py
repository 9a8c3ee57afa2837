"""Offsets retention (Kafka 2.1+'s offsets.retention.minutes) and OffsetDelete, at the
coordinator: when an Empty group's, a simple consumer's and a Stable group's offsets
expire, the removal of unused Empty groups, the tombstones a durable store gets (and
what a restart and compaction make of them), and the memory churned groups leave."""
from __future__ import annotations

import gc
import struct
import time
import tracemalloc

import pytest

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock, shard_for
from fastcoord.storage import DurableStore, load_into
from fastcoord.core.store import InMemoryStore

from helpers.protocol import DEAD, EMPTY, GROUP, MAX_SESSION, NONE, SESSION, STABLE, Proto

RETENTION_MIN = 1
RETENTION = RETENTION_MIN * 60_000
TOPIC, OTHER = "topic", "other"


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocol Subscription v0: version, topics, user data (null)."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        raw = t.encode()
        out += struct.pack(">h", len(raw)) + raw
    return out + struct.pack(">i", -1)


def proto(impl, store=None, **kw) -> Proto:
    return Proto(impl, store=store, offsets_retention_minutes=RETENTION_MIN, **kw)


def stable_group(h: Proto, *topics: str):
    """A Stable consumer group of two members subscribed to `topics`, with session
    timeouts long enough to outlive the retention the tests wait for."""
    return h.form_group(2, session=MAX_SESSION, rebalance=MAX_SESSION,
                        protocols=[("range", subscription(*topics))])


def committed(h: Proto, group: str = GROUP) -> dict:
    err, found = h.fetch(group=group)
    assert err == NONE
    return {tp: om.offset for tp, om in found.items()}


def test_config_defaults_and_validation():
    c = CoordinatorConfig()
    assert (c.offsets_retention_minutes, c.offsets_retention_check_interval_ms) == \
        (10080, 600_000)
    for bad in (0, -1, 2**31):
        with pytest.raises(ValueError, match="offsets_retention_minutes"):
            CoordinatorConfig(offsets_retention_minutes=bad)
    for bad in (0, -5, 2**63):
        with pytest.raises(ValueError, match="offsets_retention_check_interval_ms"):
            CoordinatorConfig(offsets_retention_check_interval_ms=bad)
    with pytest.raises(TypeError):
        CoordinatorConfig(offsets_retention_minutes=1.5)


def test_empty_consumer_group_offsets_expire_retention_after_it_became_empty(impl):
    h = proto(impl)
    g = stable_group(h, TOPIC)
    assert h.commit(g.leader, g.generation, {(TOPIC, 0): 5, (TOPIC, 1): 6}) == \
        {(TOPIC, 0): NONE, (TOPIC, 1): NONE}
    # Stable and subscribed: the commits' age does not matter
    h.advance(2 * RETENTION)
    assert h.coord.cleanup_group_metadata() == (0, 0)
    assert committed(h) == {(TOPIC, 0): 5, (TOPIC, 1): 6}
    assert h.leave(*g.members).error == NONE
    assert h.state() == EMPTY
    # Empty since now: not one ms before the retention passed
    h.advance(RETENTION - 1)
    assert h.coord.cleanup_group_metadata() == (0, 0)
    assert committed(h) == {(TOPIC, 0): 5, (TOPIC, 1): 6}
    h.advance(1)
    assert h.coord.cleanup_group_metadata() == (2, 1)
    assert committed(h) == {}
    assert h.state() == DEAD
    assert h.coord.list_groups() == []


def test_stable_group_keeps_subscribed_offsets_and_expires_the_others(impl):
    h = proto(impl)
    g = stable_group(h, TOPIC)
    h.commit(g.leader, g.generation, {(TOPIC, 0): 1, (OTHER, 0): 2})
    h.advance(RETENTION - 1)
    assert h.coord.cleanup_group_metadata() == (0, 0)
    h.advance(1)
    assert h.coord.cleanup_group_metadata() == (1, 0)
    assert committed(h) == {(TOPIC, 0): 1}
    h.advance(5 * RETENTION)
    assert h.coord.cleanup_group_metadata() == (0, 0)
    assert committed(h) == {(TOPIC, 0): 1} and h.state() == STABLE


def test_stable_group_with_unreadable_subscriptions_keeps_every_offset(impl):
    h = proto(impl)
    g = h.form_group(2, session=MAX_SESSION, rebalance=MAX_SESSION,
                     protocols=[("range", b"\x00\x00\x7f\xff\xff\xff")])   # count past the end
    h.commit(g.leader, g.generation, {(OTHER, 0): 2})
    h.advance(5 * RETENTION)
    assert h.coord.cleanup_group_metadata() == (0, 0)
    assert committed(h) == {(OTHER, 0): 2}


def test_simple_consumer_offsets_expire_each_retention_after_its_commit(impl):
    store = InMemoryStore()
    h = proto(impl, store=store)
    assert h.commit("", -1, {(TOPIC, 0): 1}) == {(TOPIC, 0): NONE}
    h.advance(RETENTION // 2)
    h.commit("", -1, {(TOPIC, 1): 2})
    h.advance(RETENTION // 2 - 1)
    assert h.coord.cleanup_group_metadata() == (0, 0)
    h.advance(1)
    assert h.coord.cleanup_group_metadata() == (1, 0)
    assert committed(h) == {(TOPIC, 1): 2}
    assert list(store.offsets[GROUP]) == [(TOPIC, 1)]        # its tombstone
    assert h.state() == EMPTY
    h.advance(RETENTION // 2)
    assert h.coord.cleanup_group_metadata() == (1, 1)
    assert h.state() == DEAD and committed(h) == {}
    assert GROUP not in store.offsets and GROUP not in store.groups


def test_group_left_by_a_member_id_required_join_is_removed_once_the_member_expires(impl):
    h = proto(impl)
    h.pending()                                   # MEMBER_ID_REQUIRED: Empty, one pending
    assert h.coord.cleanup_group_metadata() == (0, 0)
    assert [g.group_id for g in h.coord.list_groups()] == [GROUP]
    h.advance(501)                                # the pending member's session (500 ms)
    assert h.coord.cleanup_group_metadata() == (0, 1)
    assert h.coord.list_groups() == [] and h.state() == DEAD
    # the id is free again: a new group of that name starts from scratch
    assert h.join_old().result is None and h.state() == "PreparingRebalance"


def test_groups_with_members_or_offsets_are_not_removed(impl):
    h = proto(impl)
    stable_group(h, TOPIC)
    h.commit("", -1, {(TOPIC, 0): 1}, group="simple")
    assert h.coord.cleanup_group_metadata() == (0, 0)
    assert sorted(g.group_id for g in h.coord.list_groups()) == [GROUP, "simple"]


def test_offset_delete(impl):
    store = InMemoryStore()
    h = proto(impl, store=store)
    assert h.coord.delete_offsets("nope", [(TOPIC, 0)]) == (Errors.GROUP_ID_NOT_FOUND, {})
    assert h.coord.delete_offsets("", [(TOPIC, 0)]) == (Errors.INVALID_GROUP_ID, {})
    g = stable_group(h, TOPIC)
    h.commit(g.leader, g.generation, {(TOPIC, 0): 1, (OTHER, 0): 2, (OTHER, 1): 3})
    assert h.coord.delete_offsets(GROUP, [(TOPIC, 0), (OTHER, 0), (OTHER, 7)]) == (NONE, {
        (TOPIC, 0): Errors.GROUP_SUBSCRIBED_TO_TOPIC, (OTHER, 0): NONE, (OTHER, 7): NONE})
    assert committed(h) == {(TOPIC, 0): 1, (OTHER, 1): 3}
    assert sorted(store.offsets[GROUP]) == [(OTHER, 1), (TOPIC, 0)]
    h.leave(*g.members)
    assert h.coord.delete_offsets(GROUP, [(TOPIC, 0)]) == (NONE, {(TOPIC, 0): NONE})
    assert committed(h) == {(OTHER, 1): 3} and h.state() == EMPTY
    # the last offset of an Empty group: the group goes with it
    assert h.coord.delete_offsets(GROUP, [(OTHER, 1)]) == (NONE, {(OTHER, 1): NONE})
    assert h.state() == DEAD and GROUP not in store.offsets and GROUP not in store.groups
    # a group with members of another protocol type
    r = h.join_old(group="connect", ptype="connect")
    h.run_until_done([r])
    assert h.coord.delete_offsets("connect", [(TOPIC, 0)]) == (Errors.NON_EMPTY_GROUP, {})
    with pytest.raises(TypeError):
        h.coord.delete_offsets(GROUP, "topic")


# -- the durable store ---------------------------------------------------------------------
def _durable(path, clock: ManualClock) -> DurableStore:
    # the store's record times on the test's clock: compaction and reload read them
    return DurableStore(path, num_shards=50, compact_after_segments=None,
                        tombstone_retention_ms=RETENTION, wall_clock_ms=clock.now_ms)


def _reloaded(impl, path, now_ms: int):
    clock = ManualClock(now_ms)
    store = _durable(path, clock)
    coord = GroupCoordinator(CoordinatorConfig(offsets_retention_minutes=RETENTION_MIN),
                             clock=clock, store=store, impl=impl)
    load_into(coord, store)
    return coord, store, clock


def test_durable_tombstones_outlive_a_restart_and_are_compacted_away(impl, tmp_path):
    clock = ManualClock(1_000_000)
    store = _durable(tmp_path, clock)
    h = Proto(impl, store=store, offsets_retention_minutes=RETENTION_MIN, start_ms=1_000_000)
    store.wall_clock_ms = h.clock.now_ms
    h.commit("", -1, {(TOPIC, 0): 1}, group="simple")
    h.commit("", -1, {(TOPIC, 0): 1, (TOPIC, 1): 2}, group="half")
    h.advance(RETENTION // 2)
    h.commit("", -1, {(TOPIC, 1): 3}, group="half")
    h.advance(RETENTION // 2)
    assert h.coord.cleanup_group_metadata() == (2, 1)
    store.flush()
    store.close()
    coord, store, clock = _reloaded(impl, tmp_path, h.now)
    assert [g.group_id for g in coord.list_groups()] == ["half"]
    assert {tp: om.offset for tp, om in coord.fetch_offsets("half")[1].items()} == {(TOPIC, 1): 3}
    assert coord.fetch_offsets("simple")[1] == {}
    # compaction, past the tombstones' retention: nothing of "simple", one offset of "half"
    clock.advance(RETENTION)
    shard = shard_for("simple", 50)
    stats = store.compact(shard)
    assert stats["records_before"] >= 2
    groups, offsets = store.load_shard(shard)
    assert "simple" not in groups and "simple" not in offsets
    half = shard_for("half", 50)
    store.compact(half)
    groups, offsets = store.load_shard(half)
    assert {tp: om.offset for tp, om in offsets["half"].items()} == {(TOPIC, 1): 3}
    store.close()


def test_empty_group_reloaded_keeps_its_empty_since_time(impl, tmp_path):
    clock = ManualClock(1_000_000)
    store = _durable(tmp_path, clock)
    h = Proto(impl, store=store, offsets_retention_minutes=RETENTION_MIN, start_ms=1_000_000)
    store.wall_clock_ms = h.clock.now_ms
    r = h.join_old(protocols=[("range", subscription(TOPIC))])
    h.run_until_done([r])
    assert r.error == NONE
    h.leave(r.result.member_id)                 # the group record is written as it empties
    assert h.state() == EMPTY
    assert h.commit("", -1, {(TOPIC, 0): 7}) == {(TOPIC, 0): NONE}
    empty_at = h.now
    store.flush()
    store.close()
    coord, store, clock = _reloaded(impl, tmp_path, empty_at + RETENTION - 1000)
    assert coord.describe_group(GROUP).state == EMPTY
    assert coord.cleanup_group_metadata() == (0, 0)
    clock.advance(1000)
    assert coord.cleanup_group_metadata() == (1, 1)
    store.flush()
    store.close()
    coord, store, clock = _reloaded(impl, tmp_path, empty_at + RETENTION)
    assert coord.list_groups() == []
    store.close()


# -- memory ----------------------------------------------------------------------------------
def test_churned_groups_leave_no_memory_after_the_retention_check(impl):
    n = 20_000
    h = proto(impl, store=InMemoryStore())
    ids = [f"churn-{i}" for i in range(n)]
    for gid in ids:      # the shard look-up's bounded cache: filled before the baseline
        shard_for(gid, 50)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        started = time.monotonic()
        for i, gid in enumerate(ids):
            if i % 2:
                h.commit("", -1, {(TOPIC, 0): i}, group=gid)        # a simple consumer
            else:
                h.pending(group=gid)                              # a one-shot join
        grown = tracemalloc.get_traced_memory()[0] - before
        h.advance(RETENTION)
        assert h.coord.cleanup_group_metadata() == (n // 2, n)
        gc.collect()       # (a group and its record refer to each other: the GC frees them)
        left = tracemalloc.get_traced_memory()[0] - before
        elapsed = time.monotonic() - started
    finally:
        tracemalloc.stop()
    assert h.coord.list_groups() == []
    assert grown > 4_000_000, grown              # what the groups held
    assert left < grown / 10, (left, grown)      # all but what dicts keep of their peak
    assert elapsed < 60, elapsed


# -- the retention pass in slices ------------------------------------------------------------
def _one_shot(h: Proto, group: str) -> None:
    """A group made by a JoinGroup answered MEMBER_ID_REQUIRED: removable once its
    pending member's session (SESSION ms) passed."""
    h.pending(group=group)


def _emptied(h: Proto, group: str) -> None:
    """A consumer group that had a member and is Empty now, with offsets."""
    g = h.form_group(1, group=group, session=MAX_SESSION, rebalance=MAX_SESSION,
                     protocols=[("range", subscription(TOPIC))])
    h.commit(g.leader, g.generation, {(TOPIC, 0): 1}, group=group)
    assert h.leave(g.leader, group=group).error == NONE


def _stable(h: Proto, group: str) -> None:
    """A Stable consumer group subscribed to TOPIC with offsets of TOPIC and OTHER."""
    g = h.form_group(1, group=group, session=MAX_SESSION, rebalance=MAX_SESSION,
                     protocols=[("range", subscription(TOPIC))])
    h.commit(g.leader, g.generation, {(TOPIC, 0): 1, (OTHER, 0): 2}, group=group)


def _simple(h: Proto, group: str) -> None:
    h.commit("", -1, {(TOPIC, 0): 1, (TOPIC, 1): 2}, group=group)


_KINDS = {"one-shot": _one_shot, "emptied": _emptied, "stable": _stable, "simple": _simple}


def _state(h: Proto, store: InMemoryStore) -> tuple:
    """Every group's state and committed offsets, and what the store holds."""
    groups = {}
    for listed in h.coord.list_groups():
        gid = listed.group_id
        groups[gid] = (h.state(gid), committed(h, gid))
    stored = (sorted(store.groups), {g: sorted(v) for g, v in store.offsets.items() if v})
    return groups, stored


def _steps_until_done(coord, max_groups: int) -> list:
    steps = []
    while True:
        step = coord.cleanup_group_metadata_step(max_groups)
        steps.append(step)
        if step[2]:
            return steps


def test_step_validates_its_budget(impl):
    h = proto(impl)
    for bad in (0, -1, 2**62 + 1):
        with pytest.raises(ValueError, match="max_groups"):
            h.coord.cleanup_group_metadata_step(bad)
    for bad in (1.5, True, "3", None):
        with pytest.raises(TypeError, match="max_groups"):
            h.coord.cleanup_group_metadata_step(bad)
    assert h.coord.cleanup_group_metadata_step() == (0, 0, True)     # no group: done at once


def test_a_pass_in_slices_examines_each_group_once_at_the_time_of_its_slice(impl):
    h = proto(impl)
    ids = [f"simple-{i}" for i in range(5)]
    for gid in ids:
        h.commit("", -1, {(TOPIC, 0): 1}, group=gid)
    h.advance(RETENTION - 1)
    # slice 1: two groups, one ms short of the retention
    assert h.coord.cleanup_group_metadata_step(2) == (0, 0, False)
    h.advance(1)
    # slices 2 and 3 see the later time: the three others go, never more than the budget
    assert h.coord.cleanup_group_metadata_step(2) == (2, 2, False)
    assert h.coord.cleanup_group_metadata_step(2) == (1, 1, True)
    assert len(h.coord.list_groups()) == 2
    # the next call starts the next pass, over the two left
    assert h.coord.cleanup_group_metadata_step(5) == (2, 2, True)
    assert h.coord.list_groups() == []


def test_groups_created_or_removed_mid_pass(impl):
    store = InMemoryStore()
    h = proto(impl, store=store)
    for gid in ("a", "b", "c", "d"):
        _one_shot(h, gid)
    h.advance(SESSION + 1)                      # all four are removable now
    assert h.coord.cleanup_group_metadata_step(1) == (0, 1, False)      # "a"
    # mid-pass: "b" removed by hand, "c" removed and made again (a fresh commit), a new
    # group "e" removable at once
    assert h.coord.delete_groups(["b", "c"]) == {"b": NONE, "c": NONE}
    _simple(h, "c")
    _one_shot(h, "e")
    h.advance(SESSION + 1)
    steps = _steps_until_done(h.coord, 1)
    # "b" skipped, the new "c" examined (its offsets are fresh: kept), "d" removed; "e"
    # came after the pass started: left to the next one
    assert [s[:2] for s in steps] == [(0, 0), (0, 0), (0, 1)], steps
    assert sorted(g.group_id for g in h.coord.list_groups()) == ["c", "e"]
    assert committed(h, "c") == {(TOPIC, 0): 1, (TOPIC, 1): 2}
    assert h.coord.cleanup_group_metadata_step(10) == (0, 1, True)
    assert [g.group_id for g in h.coord.list_groups()] == ["c"]
    assert sorted(store.offsets) == ["c"] and "d" not in store.groups


def test_a_whole_pass_leaves_a_pass_in_slices_where_it_was(impl):
    h = proto(impl)
    for i in range(4):
        _one_shot(h, f"g{i}")
    h.advance(SESSION + 1)
    assert h.coord.cleanup_group_metadata_step(1) == (0, 1, False)
    _one_shot(h, "late")                        # after the slices' pass started
    h.advance(SESSION + 1)
    assert h.coord.cleanup_group_metadata() == (0, 4)
    # the pass in slices goes on over its own ids: all gone already
    assert h.coord.cleanup_group_metadata_step(2) == (0, 0, False)
    assert h.coord.cleanup_group_metadata_step(2) == (0, 0, True)


@pytest.fixture(scope="module")
def population_strategy():
    from hypothesis import strategies as st
    group = st.tuples(st.sampled_from(sorted(_KINDS)), st.integers(0, 2 * RETENTION))
    mutation = st.tuples(st.sampled_from(["create", "delete"]), st.integers(0, 14),
                         st.sampled_from(["one-shot", "simple"]))
    return st.fixed_dictionaries({
        "groups": st.lists(group, max_size=14),
        "wait": st.integers(0, 2 * RETENTION),
        "budget": st.integers(1, 5),
        "mutations": st.lists(st.lists(mutation, max_size=3), max_size=6),
    })


def _populated(impl, case) -> tuple:
    """A coordinator with the case's groups, each made `delay` ms after the one before."""
    store = InMemoryStore()
    h = proto(impl, store=store)
    for i, (kind, delay) in enumerate(case["groups"]):
        h.advance(delay)
        _KINDS[kind](h, f"g{i}")
    h.advance(case["wait"])
    return h, store


def _mutate(h: Proto, mutations: list, made: list) -> None:
    """Between slices: remove a group of the population by hand (if it is Empty), or
    make a new one (its id counted in `made`)."""
    for action, index, kind in mutations:
        if action == "delete":
            h.coord.delete_groups([f"g{index}"])
        else:
            made.append(kind)
            _KINDS[kind](h, f"new-{len(made)}")


def test_a_pass_in_slices_ends_as_a_whole_pass_does(impl, population_strategy):
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=40, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(population_strategy)
    def run(case):
        # the reference: a whole pass, then the changes made between the slices
        whole, whole_store = _populated(impl, case)
        totals = whole.coord.cleanup_group_metadata()
        made: list = []
        for between in case["mutations"]:
            _mutate(whole, between, made)
        # in slices, with the changes between them (the clock stands still)
        sliced, sliced_store = _populated(impl, case)
        n = len(sliced.coord.list_groups())
        steps, pending, made = [], list(case["mutations"]), []
        while not steps or not steps[-1][2]:
            steps.append(sliced.coord.cleanup_group_metadata_step(case["budget"]))
            if pending:
                _mutate(sliced, pending.pop(0), made)
        for between in pending:
            _mutate(sliced, between, made)
        assert len(steps) == max(1, -(-n // case["budget"]))      # each group once
        assert all(removed <= case["budget"] for _, removed, _ in steps)
        assert _state(sliced, sliced_store) == _state(whole, whole_store)
        if not case["mutations"]:
            assert tuple(map(sum, zip(*steps)))[:2] == totals

    run()


def test_reaper_runs_the_pass_in_slices(impl):
    from fastcoord import SystemClock
    from fastcoord.core.coordinator import RETENTION_SLICE_GROUPS
    n = 3 * RETENTION_SLICE_GROUPS + 1
    coord = GroupCoordinator(CoordinatorConfig(group_min_session_timeout_ms=10,
                                               offsets_retention_check_interval_ms=50),
                             clock=SystemClock(), impl=impl)
    for i in range(n):
        coord.join_group(f"oneshot-{i}", "", "consumer", [("range", b"")],
                         session_timeout_ms=10, rebalance_timeout_ms=10,
                         require_known_member_id=True, callback=lambda result: None)
    steps = []
    step = coord.cleanup_group_metadata_step

    def recorded(*args):
        steps.append(step(*args))
        return steps[-1]
    coord.cleanup_group_metadata_step = recorded
    coord.start()
    try:
        deadline = time.monotonic() + 20
        while coord.list_groups() and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        coord.close()
    assert coord.list_groups() == []
    assert sum(removed for _, removed, _ in steps) == n
    assert max(removed for _, removed, _ in steps) <= RETENTION_SLICE_GROUPS

"""A consumer group's writes after one of them failed, both twins.

The coordinator gives the store a group's changes as they happen, each record holding
only the members that changed, and answers a heartbeat once its record is stored. When
one record fails (a full disk) while later ones of the same group are already on their
way, those later records describe changes made on top of the lost one. Kafka never
answers them: a failed append reverts the group to its last committed state. Here a
later record of such a chain is refused too, by the store's fold (and so by a load),
and its heartbeat gets NOT_COORDINATOR; the group's next record is whole.
"""
import copy

import pytest

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock
from fastcoord.core.consumer_records import fold_consumer_record
from fastcoord.core.store import DeferredStore, InMemoryStore
from fastcoord.storage.records import fold_consumer

E = Errors
ALL = {"foo": [0, 1, 2, 3]}


def make(impl, store, now=0):
    coord = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(now), impl=impl, store=store)
    coord.set_topics({"foo": 4})
    return coord


def send(coord, member_id, epoch, group="g", **kw):
    """A ConsumerGroupHeartbeat: its answer list (empty while its write is pending)."""
    out = []
    coord.consumer_group_heartbeat(group, member_id, epoch, callback=out.append, **kw)
    return out


def joined(coord, member_id, group="g"):
    return send(coord, member_id, 0, group, rebalance_timeout_ms=30_000,
                subscribed_topic_names=["foo"], owned_partitions={})


def reload(impl, store):
    """A new coordinator that loaded the group from `store`."""
    coord = make(impl, InMemoryStore())
    shards = [s for s in range(coord.config.num_shards) if coord.owns_shard(s)]
    for s in shards:
        coord.begin_loading(s)
    coord.load_group("g", store.groups["g"], store.offsets.get("g", {}))
    for s in shards:
        coord.finish_loading(s)
    return coord


def members(coord):
    d = coord.consumer_group_describe(["g"])[0]
    return d, {m.member_id: m for m in d.members}


def chain_broken(impl):
    """m1 owns foo 0-3 at epoch 1 (stored). m2 joins (write A) and m1's next heartbeat
    starts giving partitions up (write B, only m1's record) before A is confirmed.
    A fails. (coord, store, m2's answers, m1's answers)"""
    store = DeferredStore()
    coord = make(impl, store)
    first = joined(coord, "m1")
    store.complete_all()
    assert first[0].member_epoch == 1 and first[0].assignment == ALL
    m2 = joined(coord, "m2")
    m1 = send(coord, "m1", 1, owned_partitions=ALL)
    assert m2 == [] and m1 == [] and len(store.pending) == 2
    assert not store.pending[1][2]["full"]        # B holds m1's record only
    store.complete(0, E.NOT_COORDINATOR)          # A: lost
    assert [r.error for r in m2] == [E.NOT_COORDINATOR]
    return coord, store, m2, m1


def test_a_record_made_on_top_of_a_failed_one_is_not_answered_as_stored(impl):
    coord, store, _, m1 = chain_broken(impl)
    stored_before = copy.deepcopy(store.groups["g"])
    store.complete(0, E.NONE)                     # B: the store took it
    assert [r.error for r in m1] == [E.NOT_COORDINATOR]
    # the store kept the state both clients were last answered from
    assert store.groups["g"] == stored_before


def test_a_restart_after_the_broken_chain_loads_a_consistent_group(impl):
    coord, store, _, _ = chain_broken(impl)
    store.complete(0, E.NONE)
    again = reload(impl, store)
    d, ms = members(again)
    assert (d.group_epoch, d.assignment_epoch) == (1, 1)
    assert set(ms) == {"m1"} and ms["m1"].member_epoch == 1
    assert ms["m1"].assignment == ALL and ms["m1"].target_assignment == ALL


def test_the_next_record_after_a_failure_is_whole_and_stored(impl):
    coord, store, _, m1 = chain_broken(impl)
    store.complete(0, E.NONE)
    retry = send(coord, "m1", 1, owned_partitions=ALL)    # m1 asks again
    assert len(store.pending) == 1 and store.pending[0][2]["full"]
    store.complete_all()
    assert retry[0].error == E.NONE
    d, ms = members(coord)
    stored = store.groups["g"]
    assert stored["group_epoch"] == d.group_epoch and set(stored["members"]) == set(ms)


@pytest.mark.parametrize("fold", [fold_consumer_record, fold_consumer])
def test_a_fold_skips_a_partial_record_that_does_not_follow(fold):
    def record(seq, full, members):
        return {"consumer": True, "full": full, "group_epoch": seq, "assignment_epoch": seq,
                "metadata": {}, "resolved": {}, "members": dict(members), "seq": seq}

    state = fold(None, record(1, True, {"a": {"x": 1}}))
    state = fold(state, record(2, False, {"b": {"x": 2}}))
    assert set(state["members"]) == {"a", "b"} and state["seq"] == 2
    gap = fold(state, record(4, False, {"c": {"x": 4}}))      # 3 never came
    assert set(gap["members"]) == {"a", "b"} and gap["seq"] == 2
    after = fold(gap, record(5, False, {"d": {"x": 5}}))      # nor anything after it
    assert set(after["members"]) == {"a", "b"} and after["seq"] == 2
    whole = fold(after, record(6, True, {"e": {"x": 6}}))     # until a whole record
    assert set(whole["members"]) == {"e"} and whole["seq"] == 6
    # records written before sequence numbers fold as they did
    old = {k: v for k, v in record(7, False, {"f": {"x": 7}}).items() if k != "seq"}
    assert set(fold(whole, old)["members"]) == {"e", "f"}


def test_refused_writes_are_logged_once_per_group_not_per_heartbeat(impl, caplog):
    store = InMemoryStore()
    coord = make(impl, store)
    store.fail_with = E.NOT_COORDINATOR            # a full disk
    caplog.set_level("WARNING", logger="fastcoord")
    group = f"logged-{impl}"       # (the log's limit is per group and process-wide)
    for i in range(5):
        assert [r.error for r in joined(coord, f"m{i}", group)] == [E.NOT_COORDINATOR]
    lines = [r for r in caplog.records if "the next write carries the whole group" in r.message]
    assert len(lines) == 1 and f"consumer group {group}:" in lines[0].message

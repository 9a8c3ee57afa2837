"""Assignment epochs (KIP-1251, Kafka 4.3): a consumer-protocol member may commit offsets
at an older member epoch, for the partitions it still holds since that epoch or before.

The group's assignor is a fixed one (as in test_consumer_protocol), so each step's
target is known: m1 holds foo-0..3 from epoch 1, gives foo-2 and foo-3 to m2 at epoch 2,
then foo-1 to m3 at epoch 3. Both twins; a restart over the durable store keeps the
epochs.
"""
import time

import pytest

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock
from fastcoord.core.consumer import ConsumerMember
from fastcoord.core.consumer_records import fill_member, member_record
from fastcoord.storage import DurableStore, load_into

import test_consumer_migration as migration
from test_consumer_protocol import fixed, hb, make

E = Errors


def commit(coord, member_id, epoch, *partitions):
    """The error of one commit of `partitions` of foo by `member_id` at `epoch` (Kafka
    answers a refused commit's every partition with one error)."""
    out = coord.commit_offsets("g", member_id, epoch, {("foo", p): 100 + p for p in partitions})
    errors = set(out.values())
    assert len(errors) == 1, out
    return errors.pop()


def two_members(coord, heartbeat=hb):
    """m1 at epoch 2 holding foo-0 and foo-1 (assigned at epoch 1); m2 at epoch 2 holding
    foo-2 and foo-3 (assigned at epoch 2)."""
    coord.set_topics({"foo": 4})
    assignor = fixed(coord)
    assignor.next = {"m1": {"foo": [0, 1, 2, 3]}}
    r = join_with(heartbeat, coord, "m1")
    assert (r.member_epoch, r.assignment) == (1, {"foo": [0, 1, 2, 3]})
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2, 3]}}
    r = join_with(heartbeat, coord, "m2")
    assert r.member_epoch == 2
    r = heartbeat(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1, 2, 3]})
    assert (r.member_epoch, r.assignment) == (1, {"foo": [0, 1]})       # revoke 2, 3 first
    r = heartbeat(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]})
    assert r.member_epoch == 2
    r = heartbeat(coord, "g", "m2", 2, owned_partitions={})
    assert (r.member_epoch, r.assignment) == (2, {"foo": [2, 3]})
    return assignor


def join_with(heartbeat, coord, member_id):
    return heartbeat(coord, "g", member_id, 0, subscribed_topic_names=["foo"],
                     rebalance_timeout_ms=30_000, owned_partitions={})


def test_an_older_epoch_commits_the_partitions_held_since_then(impl):
    coord, _ = make(impl)
    two_members(coord)
    # m1 holds foo-0 and foo-1 since epoch 1: a commit at epoch 1 is not fenced
    assert commit(coord, "m1", 1, 0, 1) == E.NONE
    # one partition it no longer holds fails the whole commit
    assert commit(coord, "m1", 1, 0, 2) == E.STALE_MEMBER_EPOCH
    assert commit(coord, "m1", 1, 3) == E.STALE_MEMBER_EPOCH
    # an epoch newer than the member's stays fenced
    assert commit(coord, "m1", 3, 0) == E.STALE_MEMBER_EPOCH
    # m2 got foo-2 and foo-3 at epoch 2: epoch 1 is before it held them
    assert commit(coord, "m2", 1, 2) == E.STALE_MEMBER_EPOCH
    assert commit(coord, "m2", 2, 2, 3) == E.NONE
    # the member's own epoch commits every partition, held or not (as in Kafka)
    assert commit(coord, "m1", 2, 3) == E.NONE
    assert coord.fetch_offsets("g", [("foo", 0)])[1][("foo", 0)].offset == 100
    # an epoch below any assignment (0) is fenced, and an empty commit passes
    assert commit(coord, "m1", 0, 0) == E.STALE_MEMBER_EPOCH
    assert coord.commit_offsets("g", "m1", 1, {}) == {}


def test_partitions_being_revoked_keep_their_assignment_epoch(impl):
    coord, _ = make(impl)
    assignor = two_members(coord)
    assignor.next = {"m1": {"foo": [0]}, "m2": {"foo": [2, 3]}, "m3": {"foo": [1]}}
    assert join_with(hb, coord, "m3").member_epoch == 3
    r = hb(coord, "g", "m1", 2, owned_partitions={"foo": [0, 1]})
    assert (r.member_epoch, r.assignment) == (2, {"foo": [0]})         # foo-1 being revoked
    # foo-1 is pending revocation, held since epoch 1
    assert commit(coord, "m1", 1, 0, 1) == E.NONE
    r = hb(coord, "g", "m1", 2, owned_partitions={"foo": [0]})
    assert r.member_epoch == 3
    # revoked now: m1 no longer holds foo-1, at any older epoch
    assert commit(coord, "m1", 1, 1) == E.STALE_MEMBER_EPOCH
    assert commit(coord, "m1", 2, 1) == E.STALE_MEMBER_EPOCH
    assert commit(coord, "m1", 1, 0) == E.NONE


def test_a_partition_given_back_later_takes_the_new_epoch(impl):
    coord, _ = make(impl)
    assignor = two_members(coord)
    # foo-1 goes from m1 to m3 at epoch 3, and back to m1 at epoch 4 when m3 leaves
    assignor.next = {"m1": {"foo": [0]}, "m2": {"foo": [2, 3]}, "m3": {"foo": [1]}}
    assert join_with(hb, coord, "m3").member_epoch == 3
    hb(coord, "g", "m1", 2, owned_partitions={"foo": [0, 1]})
    assert hb(coord, "g", "m1", 2, owned_partitions={"foo": [0]}).member_epoch == 3
    assert hb(coord, "g", "m3", 3, owned_partitions={}).assignment == {"foo": [1]}
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2, 3]}}
    assert hb(coord, "g", "m3", -1).error == E.NONE
    r = hb(coord, "g", "m1", 3, owned_partitions={"foo": [0]})
    assert (r.member_epoch, r.assignment) == (4, {"foo": [0, 1]})
    # foo-1 was m1's at epochs 1 and 2, not since: only epoch 4 covers it again
    assert commit(coord, "m1", 2, 1) == E.STALE_MEMBER_EPOCH
    assert commit(coord, "m1", 3, 1) == E.STALE_MEMBER_EPOCH
    assert commit(coord, "m1", 2, 0) == E.NONE
    assert commit(coord, "m1", 4, 1) == E.NONE


def test_a_classic_member_keeps_the_strict_check(impl):
    """A member of the classic protocol in a consumer group commits with its generation:
    an older one is ILLEGAL_GENERATION (KIP-1251 is the consumer protocol's)."""
    coord = migration.make(impl)
    (m1, gen), _ = migration.classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    migration.cg_join(coord, "c1")          # the group is a consumer group now
    assert coord.commit_offsets("g", m1, gen, {("t", 1): 7}) == {("t", 1): E.NONE}
    assert coord.commit_offsets("g", m1, gen - 1, {("t", 1): 8}) == \
        {("t", 1): E.ILLEGAL_GENERATION}


def test_the_epochs_go_to_the_record_and_an_old_record_is_strict():
    member = ConsumerMember("m1")
    member.member_epoch = 5
    member.assigned = {"foo": frozenset({0, 1, 2})}
    member.revoking = {"bar": frozenset({7})}
    member.assignment_epochs = {"foo": {0: 2, 1: 2, 2: 5}, "bar": {7: 1}}

    class Group:
        target = {}

    record = member_record(Group, member)
    assert record["assignment_epochs"] == [["bar", 1, [7]], ["foo", 2, [0, 1]],
                                           ["foo", 5, [2]]]
    back = ConsumerMember("m1")
    fill_member(back, record)
    assert back.assignment_epochs == member.assignment_epochs
    # a record from before the epochs: every held partition at the member's epoch
    del record["assignment_epochs"]
    older = ConsumerMember("m1")
    fill_member(older, record)
    assert older.assignment_epochs == {}
    for bad in ({"foo": 1}, [["foo", 1]], [["foo", "1", [0]]], [["foo", 1, [0, "1"]]],
                [[1, 1, [0]]]):
        record["assignment_epochs"] = bad
        with pytest.raises(ValueError):
            fill_member(ConsumerMember("m1"), record)


def _waited(coord, group_id, member_id, epoch, **kw):
    out = []
    coord.consumer_group_heartbeat(group_id, member_id, epoch, callback=out.append, **kw)
    deadline = time.monotonic() + 10
    while not out:
        assert time.monotonic() < deadline, "no answer"
        time.sleep(0.001)
    return out[0]


def test_the_epochs_survive_a_restart(impl, tmp_path):
    config = CoordinatorConfig(num_shards=1)
    store = DurableStore(tmp_path, num_shards=1, fsync="always")
    coord = GroupCoordinator(config, clock=ManualClock(0), store=store, impl=impl)
    load_into(coord, store)
    try:
        two_members(coord, heartbeat=_waited)
    finally:
        coord.close()
        store.close()
    store = DurableStore(tmp_path, num_shards=1)
    again = GroupCoordinator(config, clock=ManualClock(0), store=store, impl=impl)
    load_into(again, store)
    try:
        # without the kept epochs m1's partitions would count as assigned at epoch 2
        assert commit(again, "m1", 1, 0, 1) == E.NONE
        assert commit(again, "m2", 1, 2) == E.STALE_MEMBER_EPOCH
    finally:
        again.close()
        store.close()

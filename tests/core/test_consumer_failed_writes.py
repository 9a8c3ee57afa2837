"""A consumer group's writes after one of them failed, both twins.

The coordinator gives the store a group's changes as they happen, each record holding
only the members that changed, and answers a heartbeat once its record is stored. When
one record fails (a full disk) while later ones of the same group are already on their
way, those later records describe changes made on top of the lost one. Kafka never
answers them: a failed append reverts the group to its last committed state. Here a
later record of such a chain is refused too, by the store's fold (and so by a load),
and its heartbeat gets NOT_COORDINATOR; the group in memory goes back to what the
store holds (with the records before the failed one); the group's next record is whole.
"""
import copy
import gc

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, invariant, rule,
                                 run_state_machine_as_test)

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock
from fastcoord.core.consumer_records import fold_consumer_record
from fastcoord.core.store import DeferredStore, InMemoryStore
from fastcoord.storage.records import fold_consumer
from helpers.consumer_views import in_memory, memory_is_committed, stored_is_committed
from helpers.tier import examples

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


def load_into(coord, store):
    """`coord` with the group loaded from `store` (every shard loaded again)."""
    shards = range(coord.config.num_shards)
    for s in shards:
        coord.begin_loading(s)
    coord.load_group("g", store.groups["g"], store.offsets.get("g", {}))
    for s in shards:
        coord.finish_loading(s)
    return coord


def reload(impl, store):
    """A new coordinator that loaded the group from `store`."""
    return load_into(make(impl, InMemoryStore()), store)


def settled_m1(impl):
    """m1 alone in the group, owning foo 0-3 at epoch 1, settled (every write stored):
    (coord, store)."""
    store = DeferredStore()
    coord = make(impl, store)
    joined(coord, "m1")
    store.complete_all()
    send(coord, "m1", 1, owned_partitions=ALL)
    store.complete_all()
    return coord, store


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


# -- the group in memory after a failed write -------------------------------------------

def view(coord, group="g"):
    """What a failed write must leave as the store has it: the group's epochs, state and
    members with their epochs, assignments and targets (not their sessions), in memory."""
    d = in_memory(coord, group)     # (a write on its way shows: it is what fails)
    return (d.error, d.state, d.group_epoch, d.assignment_epoch,
            sorted((m.member_id, m.member_epoch, m.assignment, m.target_assignment,
                    m.subscribed_topic_names) for m in d.members))


def test_describe_shows_what_the_store_confirmed(impl):
    """Kafka describes a group at its last committed offset: a change whose record is on
    its way is in the group (in memory) but not in ConsumerGroupDescribe's answer; a
    new group is not found until its first record is stored. The heartbeat that made
    the change is answered once it is stored, as the describe then shows it."""
    store = DeferredStore()
    coord = make(impl, store)
    first = joined(coord, "m1")
    d = coord.consumer_group_describe(["g"])[0]
    assert (d.error, d.state, d.error_message) == (E.GROUP_ID_NOT_FOUND, "Dead",
                                                    "Group g not found.")
    assert in_memory(coord, "g").group_epoch == 1
    store.complete_all()
    assert [r.error for r in first] == [E.NONE]
    before = coord.consumer_group_describe(["g"])[0]
    assert (before.error, before.group_epoch, [m.member_id for m in before.members]) == \
        (E.NONE, 1, ["m1"])
    second = joined(coord, "m2")
    assert second == [] and in_memory(coord, "g").group_epoch == 2
    assert coord.consumer_group_describe(["g"])[0] == before
    store.complete_all()
    after = coord.consumer_group_describe(["g"])[0]
    assert after == in_memory(coord, "g")
    assert (after.group_epoch, sorted(m.member_id for m in after.members)) == (2, ["m1", "m2"])
    assert [r.error for r in second] == [E.NONE]


def test_describe_of_a_change_whose_write_failed_never_shows_it(impl):
    store = DeferredStore()
    coord = make(impl, store)
    joined(coord, "m1")
    store.complete_all()
    before = coord.consumer_group_describe(["g"])[0]
    send(coord, "m1", 1, subscribed_topic_names=["foo", "bar"])
    assert coord.consumer_group_describe(["g"])[0] == before
    store.complete(0, E.NOT_COORDINATOR)
    assert coord.consumer_group_describe(["g"])[0] == before == in_memory(coord, "g")


def test_a_store_without_consumer_group_state_describes_the_group_in_memory(impl):
    """A store that keeps no consumer group state answers at once: there is nothing
    committed to describe but the group itself."""
    class KeepsNoConsumerState(InMemoryStore):
        store_consumer_group = None

    store = KeepsNoConsumerState()
    coord = make(impl, store)
    joined(coord, "m1")
    d = coord.consumer_group_describe(["g"])[0]
    assert (d.error, d.group_epoch, [m.member_id for m in d.members]) == (E.NONE, 1, ["m1"])
    assert d == in_memory(coord, "g")


def test_a_join_whose_write_failed_leaves_no_member_behind(impl):
    store = DeferredStore()
    coord = make(impl, store)
    joined(coord, "m1")
    store.complete_all()
    before = view(coord)
    m2 = joined(coord, "m2")
    assert view(coord)[2] == 2                    # m2 is in the group while its write waits
    store.complete(0, E.NOT_COORDINATOR)
    assert [r.error for r in m2] == [E.NOT_COORDINATOR]
    assert view(coord) == before == view(reload(impl, store))
    # m1 is not asked to give anything up for a member that never joined, and is
    # answered from the group as stored (its own next record is whole)
    again = send(coord, "m1", 1, owned_partitions=ALL)
    assert len(store.pending) == 1 and store.pending[0][2]["full"]
    store.complete_all()
    assert (again[0].error, again[0].member_epoch) == (E.NONE, 1)
    assert view(coord) == before == view(reload(impl, store))
    # m2 joins again and the group rebalances as it would have
    m2 = joined(coord, "m2")
    store.complete_all()
    assert (m2[0].error, m2[0].member_epoch) == (E.NONE, 2)


def test_the_broken_chain_reverts_the_group_to_what_is_stored(impl):
    coord, store, _, m1 = chain_broken(impl)
    d, ms = members(coord)
    # m2's join and what m1 was told to give up for it are gone with the failed write
    assert (d.group_epoch, d.assignment_epoch, set(ms)) == (1, 1, {"m1"})
    assert ms["m1"].assignment == ALL and ms["m1"].target_assignment == ALL
    store.complete(0, E.NONE)                     # B comes back: refused, nothing moves
    assert [r.error for r in m1] == [E.NOT_COORDINATOR]
    assert view(coord) == view(reload(impl, store))


def test_a_leave_whose_write_failed_leaves_the_member_in(impl):
    store = DeferredStore()
    coord = make(impl, store)
    joined(coord, "m1")
    store.complete_all()
    joined(coord, "m2")
    store.complete_all()
    before = view(coord)
    left = send(coord, "m2", -1)
    assert {m[0] for m in view(coord)[4]} == {"m1"}
    store.complete(0, E.NOT_COORDINATOR)
    assert [r.error for r in left] == [E.NOT_COORDINATOR]
    assert view(coord) == before == view(reload(impl, store))
    # it is a member as before: its heartbeat is answered (once the group, whole, is
    # written again)
    epoch = [m for m in before[4] if m[0] == "m2"][0][1]
    again = send(coord, "m2", epoch)
    store.complete_all()
    assert [r.error for r in again] == [E.NONE] and view(coord) == before


def test_a_revert_gives_the_members_new_handles(impl):
    coord, store = settled_m1(impl)
    old = coord.consumer_member_handle("g", "m1")
    assert coord.consumer_heartbeat_handle(old, 1).member_epoch == 1     # settled
    joined(coord, "m2")
    store.complete(0, E.NOT_COORDINATOR)
    assert coord.consumer_heartbeat_handle(old, 1) is None
    again = send(coord, "m1", 1, owned_partitions=ALL)
    store.complete_all()
    assert [(r.error, r.member_epoch) for r in again] == [(E.NONE, 1)]
    new = coord.consumer_member_handle("g", "m1")
    assert new != old and coord.consumer_heartbeat_handle(new, 1).member_epoch == 1


def test_a_revert_keeps_each_members_session_end(impl):
    """m1 last heartbeats at 0 (sessions of 45 s); at 30 s m2's join fails. m1's
    session still ends at 45 s, as Kafka's timers, which a revert leaves alone; m2,
    never added, has none."""
    store = InMemoryStore()
    coord = make(impl, store)
    joined(coord, "m1")
    coord.advance_time(30_000)
    store.fail_with = E.NOT_COORDINATOR
    assert [r.error for r in joined(coord, "m2")] == [E.NOT_COORDINATOR]
    store.fail_with = E.NONE
    coord.advance_time(14_000)
    assert set(members(coord)[1]) == {"m1"}
    coord.advance_time(2_000)                    # 46 s: m1's session ended
    assert members(coord)[1] == {}


def test_a_revert_keeps_a_revoking_members_deadline(impl):
    """m1 must give partitions up from 0 s (rebalance timeout 30 s); at 20 s m3's join
    fails. m1, still revoking in what the store holds, is fenced at 30 s, as Kafka's
    rebalance timer, which a revert leaves alone (not a timeout from the revert)."""
    store = InMemoryStore()
    coord = make(impl, store)
    joined(coord, "m1")
    joined(coord, "m2")
    assert [r.error for r in send(coord, "m1", 1, owned_partitions=ALL)] == [E.NONE]
    assert members(coord)[1]["m1"].member_epoch == 1        # revoking, at its epoch
    coord.advance_time(20_000)
    store.fail_with = E.NOT_COORDINATOR
    assert [r.error for r in joined(coord, "m3")] == [E.NOT_COORDINATOR]
    store.fail_with = E.NONE
    coord.advance_time(9_000)
    assert "m1" in members(coord)[1]
    coord.advance_time(2_000)                    # 31 s
    assert set(members(coord)[1]) == {"m2"}


def test_a_group_whose_first_write_failed_is_no_group(impl):
    """As Kafka's group whose creating append failed: it never was. Nothing is written
    for it (the store never held it)."""
    store = DeferredStore()
    coord = make(impl, store)
    first = joined(coord, "m1")
    assert coord.group_version("g") >= 0
    store.complete(0, E.NOT_COORDINATOR)
    assert [r.error for r in first] == [E.NOT_COORDINATOR]
    d = coord.consumer_group_describe(["g"])[0]
    assert (d.error, d.state) == (E.GROUP_ID_NOT_FOUND, "Dead")
    assert coord.group_version("g") == -1 and coord.list_groups() == []
    assert store.pending == [] and "g" not in store.groups
    # the client's retry creates it as its first join would have
    again = joined(coord, "m1")
    store.complete_all()
    assert (again[0].error, again[0].member_epoch, again[0].assignment) == (E.NONE, 1, ALL)


def test_a_new_group_with_offsets_stays_after_its_first_write_failed(impl):
    """Offsets committed to the group while its first write was on its way are the
    group's to keep: it stays, Empty at epoch 0."""
    store = DeferredStore()
    coord = make(impl, store)
    joined(coord, "m1")
    out = []
    coord.commit_offsets("g", "m1", 1, {("foo", 0): 5}, callback=out.append)
    store.complete(1, E.NONE)                     # the offsets
    store.complete(0, E.NOT_COORDINATOR)          # the join
    d = in_memory(coord, "g")
    assert (d.error, d.state, d.group_epoch, d.members) == (E.NONE, "Empty", 0, [])
    # the store holds the group's offsets and nothing of the consumer group: as Kafka's
    # group that holds only offsets, a classic one (its "simple" group)
    d = coord.consumer_group_describe(["g"])[0]
    assert (d.error, d.error_message) == (E.GROUP_ID_NOT_FOUND, "Group g is not a consumer group.")
    err, offsets = coord.fetch_offsets("g", [("foo", 0)])
    assert (err, offsets[("foo", 0)].offset) == (E.NONE, 5)


def test_a_failure_keeps_the_changes_of_earlier_records_still_on_their_way(impl):
    """A store that answers its writes out of order (the test store can): the later
    record fails first, so the group goes back to the stored state with the earlier
    record's changes, which the store then confirms."""
    store = DeferredStore()
    coord = make(impl, store)
    joined(coord, "m1")
    store.complete_all()
    m2 = joined(coord, "m2")                      # A
    after_a = view(coord)
    m3 = joined(coord, "m3")                      # B, on top of A
    assert len(store.pending) == 2
    store.complete(1, E.NOT_COORDINATOR)          # B fails first
    assert [r.error for r in m3] == [E.NOT_COORDINATOR]
    assert view(coord) == after_a
    store.complete(0, E.NONE)                     # A is stored
    assert [r.error for r in m2] == [E.NONE]
    assert view(coord) == after_a == view(reload(impl, store))


def test_a_whole_record_written_after_the_failed_one_stands(impl):
    """B fails first (the group goes back to A's state), m1's next heartbeat writes the
    group whole (W); then A fails too: W already holds everything the group is, so
    nothing is reverted, and the store ends with W."""
    store = DeferredStore()
    coord = make(impl, store)
    joined(coord, "m1")
    store.complete_all()
    m2 = joined(coord, "m2")                      # A
    joined(coord, "m3")                           # B
    store.complete(1, E.NOT_COORDINATOR)
    w = send(coord, "m1", 1, owned_partitions=ALL)
    assert store.pending[1][2]["full"]
    before = view(coord)
    store.complete(0, E.NOT_COORDINATOR)          # A fails
    assert [r.error for r in m2] == [E.NOT_COORDINATOR]
    assert view(coord) == before
    store.complete(0, E.NONE)                     # W
    assert [r.error for r in w] == [E.NONE]
    assert view(coord) == before == view(reload(impl, store))



def test_a_write_failing_after_its_shard_was_unloaded_changes_nothing(impl):
    """The group moved away (its shard unloaded) while its write was on its way, then
    the write fails: the group that left is not brought back, no member of it stays in
    the member table, and the shard loaded again serves the group as stored."""
    coord, store = settled_m1(impl)
    m2 = joined(coord, "m2")
    for s in range(coord.config.num_shards):
        if coord.owns_shard(s):
            coord.unload_shard(s)
    store.complete(0, E.NOT_COORDINATOR)
    assert [r.error for r in m2] == [E.NOT_COORDINATOR]
    assert coord.consumer_member_handle("g", "m1") == -1
    assert coord._logic.owners == {}              # (no slot left to a group that left)
    load_into(coord, store)
    assert view(coord) == view(reload(impl, store))
    again = send(coord, "m1", 1, owned_partitions=ALL)
    store.complete_all()
    assert [(r.error, r.member_epoch) for r in again] == [(E.NONE, 1)]
    h = coord.consumer_member_handle("g", "m1")
    assert h != -1 and coord.consumer_heartbeat_handle(h, 1).member_epoch == 1


# -- a random history of writes confirmed and refused ---------------------------------

class FailedWrites(RuleBasedStateMachine):
    """Consumer-protocol clients join, heartbeat (owning what they were given), leave
    and go silent while the store confirms or refuses their group's writes in order.
    Whenever no write is on its way, the group is what the store holds (no group,
    when its first write failed): a failed write leaves nothing of itself behind; and
    described from memory it is what the coordinator's copy of the store describes."""

    impl = "native"         # (the test makes one class per twin)
    memory_checked = [0]    # states where describe's two views were compared
    stored_checked = [0]    # the same, for describe_stored with writes on their way

    def __init__(self):
        super().__init__()
        self.store = DeferredStore()
        self.coord = make(self.impl, self.store)
        self.epochs = {}        # member id -> the epoch it was last answered (0: joining)
        self.owned = {}
        self.waiting = {}       # member id -> its answer list

    def _take(self, member_id):
        out = self.waiting.pop(member_id, None)
        if out:
            r = out[0]
            if r.error == E.NONE:
                self.epochs[member_id] = r.member_epoch
                if r.assignment is not None:
                    self.owned[member_id] = r.assignment
            elif r.error in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID, E.NOT_COORDINATOR):
                self.epochs[member_id] = 0
                self.owned[member_id] = {}
        elif out is not None:
            self.waiting[member_id] = out

    @rule(member=st.sampled_from(["a", "b", "c"]))
    def heartbeat(self, member):
        self._take(member)
        if member in self.waiting:
            return
        epoch = self.epochs.get(member, 0)
        if epoch <= 0:
            self.waiting[member] = joined(self.coord, member)
        else:
            self.waiting[member] = send(self.coord, member, epoch,
                                        owned_partitions=self.owned.get(member, {}))

    @rule(member=st.sampled_from(["a", "b", "c"]))
    def leave(self, member):
        self._take(member)
        if self.epochs.get(member, 0) > 0 and member not in self.waiting:
            send(self.coord, member, -1)
            self.epochs[member] = 0
            self.owned[member] = {}

    @rule(count=st.integers(1, 3), failing=st.booleans())
    def store_answers(self, count, failing):
        for _ in range(min(count, len(self.store.pending))):
            self.store.complete(0, E.NOT_COORDINATOR if failing else E.NONE)

    @rule(ms=st.sampled_from([1_000, 20_000, 45_000]))
    def advance(self, ms):
        self.coord.advance_time(ms)

    @invariant()
    def as_stored(self):
        if memory_is_committed(self.coord, "g"):
            self.memory_checked[0] += 1
        if stored_is_committed(self.coord, "g") and self.store.pending:
            self.stored_checked[0] += 1
        if self.store.pending:
            return
        stored = self.store.groups.get("g")
        if stored is None:
            d = self.coord.consumer_group_describe(["g"])[0]
            assert d.error == E.GROUP_ID_NOT_FOUND
        else:
            assert view(self.coord) == view(reload(self.impl, self.store))


def test_failed_writes_leave_the_group_as_stored(impl):
    machine = type(f"FailedWrites_{impl}", (FailedWrites,), {"impl": impl,
                                                              "memory_checked": [0],
                                                              "stored_checked": [0]})
    run_state_machine_as_test(machine, settings=settings(max_examples=examples(150),
                                                         stateful_step_count=40,
                                                         deadline=None))
    assert machine.memory_checked[0] > 0 and machine.stored_checked[0] > 0


def test_the_copy_kept_for_reverts_costs_the_collector_little_per_member(impl):
    """What the store confirmed is kept to revert a failed write. Over a store that
    keeps no record in memory (as the durable store, whose records are on disk), that
    copy adds no container the garbage collector visits
    for each member (a member's record as dicts and lists would add about nine): a
    settled member costs at most 15 tracked objects, where each is visited in every
    full collection."""
    coord = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(0), impl=impl,
                             store=InMemoryStore(group_records=False))
    coord.set_topics({"foo": 10})
    gc.collect()
    before = len(gc.get_objects())
    out = []
    for g in range(200):
        group_id = f"g{g}"
        held = {}
        for i in range(10):
            coord.consumer_group_heartbeat(group_id, f"m{i}", 0, rebalance_timeout_ms=30_000,
                                           subscribed_topic_names=["foo"],
                                           owned_partitions={}, callback=out.append)
            held[f"m{i}"] = (out[-1].member_epoch, out[-1].assignment)
        for _ in range(3):          # each reports what it owns until all are reconciled
            for member_id, (epoch, owned) in list(held.items()):
                coord.consumer_group_heartbeat(group_id, member_id, epoch,
                                               owned_partitions=owned, callback=out.append)
                r = out[-1]
                held[member_id] = (r.member_epoch, owned if r.assignment is None
                                   else r.assignment)
        assert coord.consumer_group_describe([group_id])[0].state == "Stable"
    out.clear()
    gc.collect()
    gc.collect()
    per_member = (len(gc.get_objects()) - before) / 2000
    assert per_member <= 15, per_member


def _sets_equal_to(names):
    """The tracked frozensets equal to `names` but `names` itself, wherever they are held."""
    return [o for o in gc.get_objects() if type(o) is frozenset and o == names and o is not names]


def test_members_subscribed_alike_hold_one_set(impl):
    """Members of a group that subscribe to the same topics, each request with its own
    list of names, hold one subscription set between them, as they joined and as they
    were loaded again: every set is an object each full collection visits."""
    store = InMemoryStore()
    coord = make(impl, store)
    names = frozenset({"foo", "-".join(["no", "such", "topic"])})   # made at run time
    for i in range(20):
        answer = send(coord, f"m{i}", 0, rebalance_timeout_ms=30_000,
                      subscribed_topic_names=sorted(names), owned_partitions={})
        assert answer[0].error == E.NONE
    gc.collect()
    assert len(_sets_equal_to(names)) == 1
    again = reload(impl, store)
    del coord
    gc.collect()
    assert len(_sets_equal_to(names)) == 1
    members = again.consumer_group_describe(["g"])[0].members
    assert len(members) == 20
    assert all(set(m.subscribed_topic_names) == names for m in members)

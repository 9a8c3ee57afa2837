"""The twins agree on mixed groups (Kafka 4's online migration): one random history of
a group whose members are classic consumers (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, commits by generation) and consumer-protocol consumers (heartbeats,
commits by member epoch), members switching protocol (a rolling restart), crashing
without leaving, the topic growing, time passing, the store confirming or refusing
parked writes (in order, and now and then out of order) and the coordinator
restarting from what its store holds, drives a native and a pure coordinator side by
side. Every answer, whenever it comes (a parked join is answered
at a later step), must be the same in both; so must the group's type, its listing,
both descriptions, its offsets and what each store holds and has parked; no
partition is ever assigned to two consumer-protocol members; and a group that only
consumer-protocol clients used is, whenever no write is on its way, what its store
holds (a failed write reverts it)."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import fastcoord
from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock
from fastcoord.core.consumer_embedded import (
    decode_assignment, encode_assignment, encode_subscription,
)
from fastcoord.core.store import DeferredStore
from helpers.classic_clients import range_assign, take_join_answer
from helpers.consumer_views import memory_is_committed, stored_is_committed
from helpers.tier import examples

pytestmark = pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE,
                                reason="needs the native core to compare against")

E = Errors
GROUP = "g"
CLIENTS = 4
SESSION = 3_000         # the classic members' session timeout
REBALANCE = 2_000
PARTITIONS = [4, 6]     # the topic "t" grows from 4 to 6 partitions
STEPS = [0, 200, 1000, 2500]


def make(impl, store, now=0, ids=None):
    """A coordinator on `store` whose clock reads `now`, making member ids from `ids`."""
    ids = itertools.count() if ids is None else ids
    config = CoordinatorConfig(num_shards=2, group_initial_rebalance_delay_ms=0,
                               group_consumer_session_timeout_ms=5000,
                               group_consumer_min_session_timeout_ms=5000,
                               group_consumer_heartbeat_interval_ms=1000,
                               group_consumer_min_heartbeat_interval_ms=1000,
                               group_min_session_timeout_ms=1000)
    coord = GroupCoordinator(config, clock=ManualClock(now), impl=impl, store=store,
                             member_id_factory=lambda prefix: f"made-{next(ids)}")
    coord.set_topics({"t": PARTITIONS[0]})
    return coord


class Client:
    """What one consumer process knows: its protocol, member id, generation or epoch,
    partitions, and the answers it waits for (each a pair of lists, native's and
    pure's, filled by the callbacks)."""

    def __init__(self, kind, member_id=""):
        self.kind = kind                # "classic" or "consumer"
        self.member_id = member_id      # a consumer-protocol client makes its own
        self.generation = -1            # classic generation, or the member epoch
        self.assigned = None            # partitions of "t"; None while (re)joining
        self.joining = None
        self.syncing = None
        self.waiting = None             # a consumer-protocol heartbeat's answer list

    def forget_answers(self):
        """What it waits for will never come (the coordinator restarted): a client
        times out and asks again."""
        self.joining = self.syncing = self.waiting = None


class MixedTwins(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.stores = (DeferredStore(), DeferredStore())
        self.ids = (itertools.count(), itertools.count())
        self.native = make("native", self.stores[0], ids=self.ids[0])
        self.pure = make("pure", self.stores[1], ids=self.ids[1])
        self.now = 0
        self.partitions = PARTITIONS[0]
        self.incarnations = itertools.count()
        self.clients = [self.new_client("classic", k) for k in range(CLIENTS)]
        self.answers = []       # every (native's, pure's) answer list handed out
        self.reordered = False  # the store answered a write before an older one
        self.classic_joined = False     # a classic client sent a JoinGroup

    def new_client(self, kind, k):
        return Client(kind, "" if kind == "classic" else f"c{k}-{next(self.incarnations)}")

    def both(self, call):
        """call(coord, callback) on both twins: the pair of answer lists, compared at
        once and after every later step (an answer may come later)."""
        pair = ([], [])
        call(self.native, pair[0].append)
        call(self.pure, pair[1].append)
        assert pair[0] == pair[1]
        self.answers.append(pair)
        return pair[0]

    def same(self, call):
        """call(coord) on both twins, which must return the same."""
        a, b = call(self.native), call(self.pure)
        assert a == b
        return a

    # -- classic clients --------------------------------------------------------------
    def classic_step(self, c):
        if c.joining is None and c.syncing is None and c.assigned is None:
            self.classic_joined = True
            sub = encode_subscription(["t"], None, None, -1)
            c.joining = self.both(lambda coord, cb: coord.join_group(
                GROUP, c.member_id, "consumer", [("range", sub)], session_timeout_ms=SESSION,
                rebalance_timeout_ms=REBALANCE, callback=cb))
            return
        if c.joining is not None:
            if not c.joining:
                return                  # parked: its answer comes with the rebalance
            r, c.joining = c.joining[0], None
            if not take_join_answer(c, r):
                return
            assignments = None
            if r.leader_id == r.member_id:
                assignments = {mid: encode_assignment({"t": ps}) for mid, ps in range_assign(
                    [m.member_id for m in r.members], self.partitions).items()}
            c.syncing = self.both(lambda coord, cb: coord.sync_group(
                GROUP, c.generation, c.member_id, assignments, callback=cb))
            return
        if c.syncing is not None:
            if not c.syncing:
                return
            s, c.syncing = c.syncing[0], None
            if s.error == E.NONE:
                c.assigned = decode_assignment(s.assignment).get("t", [])
            elif s.error == E.UNKNOWN_MEMBER_ID:
                c.member_id = ""
            return
        error = self.same(lambda coord: coord.heartbeat(GROUP, c.member_id, c.generation))
        if error != E.NONE:
            c.assigned = None
            if error == E.UNKNOWN_MEMBER_ID:
                c.member_id = ""

    # -- consumer-protocol clients ------------------------------------------------------
    def consumer_step(self, c, steady):
        if c.waiting is not None:
            if not c.waiting:
                return                  # its write is not confirmed yet
            r, c.waiting = c.waiting[0], None
            if r.error in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID):
                c.generation, c.assigned = 0, None
            elif r.error == E.NONE:
                c.generation = r.member_epoch
                if r.assignment is not None:
                    c.assigned = r.assignment.get("t", [])
            return
        if c.generation <= 0:
            c.waiting = self.both(lambda coord, cb: coord.consumer_group_heartbeat(
                GROUP, c.member_id, 0, rebalance_timeout_ms=REBALANCE,
                subscribed_topic_names=["t"], owned_partitions={}, callback=cb))
        elif steady:
            c.waiting = self.both(lambda coord, cb: coord.consumer_group_heartbeat(
                GROUP, c.member_id, c.generation, callback=cb))
        else:
            c.waiting = self.both(lambda coord, cb: coord.consumer_group_heartbeat(
                GROUP, c.member_id, c.generation,
                owned_partitions={"t": c.assigned} if c.assigned else {}, callback=cb))

    # -- rules ---------------------------------------------------------------------------
    @initialize(consumers=st.sampled_from([0, 2, CLIENTS, CLIENTS]))
    def start(self, consumers):
        """The clients the group starts with: classic ones, or some (or all) already on
        the consumer protocol."""
        for k in range(consumers):
            self.clients[k] = self.new_client("consumer", k)

    @rule(k=st.integers(0, CLIENTS - 1), steady=st.booleans())
    def step_one(self, k, steady):
        self.step(k, steady)

    def step(self, k, steady):
        c = self.clients[k]
        if c.kind == "classic":
            self.classic_step(c)
        else:
            self.consumer_step(c, steady)

    @rule(rounds=st.integers(1, 6), steady=st.booleans(), ms=st.sampled_from([0, 100, 500]),
          confirm=st.sampled_from([True, True, False]))
    def step_all(self, rounds, steady, ms, confirm):
        """Every client steps, `rounds` times, `ms` apart, the store confirming every
        write after each round (`confirm`): how a group gets somewhere."""
        for _ in range(rounds):
            for k in range(CLIENTS):
                self.step(k, steady)
            if confirm:
                for store in self.stores:
                    store.complete_all()
            self.same(lambda coord: coord.advance_time(ms))

    @rule(k=st.integers(0, CLIENTS - 1))
    def switch_protocol(self, k):
        """A rolling restart's step: the member leaves and comes back on the other
        protocol."""
        c = self.clients[k]
        if c.kind == "classic":
            if c.member_id:
                self.same(lambda coord: coord.leave_group(GROUP, [(c.member_id, None)]))
        elif c.generation > 0:
            self.both(lambda coord, cb: coord.consumer_group_heartbeat(
                GROUP, c.member_id, -1, callback=cb))
        self.clients[k] = self.new_client("consumer" if c.kind == "classic" else "classic", k)

    @rule(k=st.integers(0, CLIENTS - 1))
    def crash(self, k):
        """The process dies without leaving; a new one of the same kind takes its place
        (the old member goes by its session or rebalance timeout)."""
        self.clients[k] = self.new_client(self.clients[k].kind, k)

    @rule(k=st.integers(0, CLIENTS - 1), offset=st.integers(0, 3))
    def commit(self, k, offset):
        c = self.clients[k]
        if not c.member_id or not c.assigned:
            return
        version = 9 if c.kind == "consumer" else None
        self.both(lambda coord, cb: coord.commit_offsets(
            GROUP, c.member_id, c.generation, {("t", p): offset for p in c.assigned},
            api_version=version, callback=cb))

    @rule()
    def grow_topic(self):
        if self.partitions == PARTITIONS[0]:
            self.partitions = PARTITIONS[1]
            self.native.set_topics({"t": self.partitions})
            self.pure.set_topics({"t": self.partitions})

    @rule(ms=st.sampled_from(STEPS))
    def advance(self, ms):
        self.same(lambda coord: coord.advance_time(ms))

    @rule(count=st.integers(1, 4), failing=st.sampled_from([False, False, True]),
          last_first=st.sampled_from([False, False, False, True]))
    def store_answers(self, count, failing, last_first):
        """The store confirms (or, a full disk, refuses) `count` parked writes: the
        oldest first as a log does, or `last_first` the newest."""
        error = E.NOT_COORDINATOR if failing else E.NONE
        for _ in range(count):
            if not self.stores[0].pending:
                return
            self.reordered |= last_first and len(self.stores[0].pending) > 1
            for store in self.stores:
                store.complete(-1 if last_first else 0, error)

    @rule()
    def restart(self):
        """The coordinator stops and a new one loads the group from its store, at the
        same time: the clients carry on (what they wait for is never answered)."""
        now = self.native.clock.now_ms()
        assert now == self.pure.clock.now_ms()
        twins, stores = [], []
        for impl, old, ids in zip(("native", "pure"), self.stores, self.ids):
            store = DeferredStore()         # what the old one held; its parked writes lost
            store.groups = dict(old.groups)
            store.offsets = {gid: dict(offs) for gid, offs in old.offsets.items()}
            stores.append(store)
            coord = make(impl, store, now=now, ids=ids)
            coord.set_topics({"t": self.partitions})
            shards = [s for s in range(coord.config.num_shards) if coord.owns_shard(s)]
            for shard in shards:
                coord.begin_loading(shard)
            if GROUP in store.groups or GROUP in store.offsets:
                coord.load_group(GROUP, store.groups.get(GROUP), store.offsets.get(GROUP, {}))
            for shard in shards:
                coord.finish_loading(shard)
            twins.append(coord)
        self.native, self.pure = twins
        self.stores = tuple(stores)
        self.reordered = False
        for c in self.clients:
            c.forget_answers()

    # -- what must hold after every step --------------------------------------------------
    @invariant()
    def memory_described_as_committed(self):
        """With no write on its way, describing the group from memory (as describe does
        then) gives what its confirmed copy gives; with writes on their way, the copy's
        members that no write changed are read from memory as well."""
        for coord in (self.native, self.pure):
            for group in [GROUP]:
                memory_is_committed(coord, group)
                stored_is_committed(coord, group)

    @invariant()
    def same_answers(self):
        for native, pure in self.answers:
            assert native == pure

    @invariant()
    def same_group(self):
        self.same(lambda coord: coord.list_groups())
        self.same(lambda coord: coord.group_type(GROUP))
        self.same(lambda coord: coord.describe_group(GROUP))
        described = self.same(lambda coord: coord.consumer_group_describe([GROUP]))[0]
        owners = {}
        for m in described.members:
            for p in m.assignment.get("t", []):
                assert p not in owners, (p, owners[p], m.member_id)
                owners[p] = m.member_id
        self.same(lambda coord: coord.fetch_offsets(GROUP))
        assert self.stores[0].groups == self.stores[1].groups
        assert self.stores[0].offsets == self.stores[1].offsets
        assert [w[:3] for w in self.stores[0].pending] == [w[:3] for w in self.stores[1].pending]

    @invariant()
    def one_slot_per_member(self):
        """Every member holds one slot of the member table (of either protocol, and a
        classic member told to join again with its new id), and no slot outlives its
        member: a leaked slot's session would fence whoever has its id later."""
        for coord in (self.native, self.pure):
            group = coord._logic._get_group(GROUP)
            held = 0
            if group is not None:
                members = group.members if group.consumer is None else group.consumer.members
                held = len(members) + len(group.pending)
            table = coord.member_table.stats()
            assert table["slots"] - table["free"] == held

    @invariant()
    def as_stored(self):
        """A group only consumer-protocol clients ever used, with no write on its way
        (and none answered out of order), is what its store holds: a failed write left
        nothing of itself behind, as Kafka reverts a group to its committed state.
        (Once a classic client joined, the group may be classic, whose state in memory
        runs ahead of its record during a rebalance, as Kafka's does.)"""
        if self.classic_joined or self.reordered or self.stores[0].pending:
            return
        stored = self.stores[0].groups.get(GROUP)
        d = self.native.consumer_group_describe([GROUP])[0]
        if stored is None:
            # never written, or its first write failed: no group (as Kafka's)
            assert d.error == E.GROUP_ID_NOT_FOUND
            return
        assert d.error == E.NONE
        assert (d.group_epoch, d.assignment_epoch) == (stored["group_epoch"],
                                                       stored["assignment_epoch"])
        assert {m.member_id: (m.member_epoch, m.assignment, m.target_assignment)
                for m in d.members} == {
            mid: (m["member_epoch"], {t: ps for t, ps in m["assigned"].items()},
                  m["target"]) for mid, m in stored["members"].items()}


MixedTwins.TestCase.settings = settings(
    max_examples=examples(100), stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_mixed_twins_agree = MixedTwins.TestCase


def test_writes_of_a_new_incarnation_after_lost_ones_are_not_folded_into_an_old_one():
    """Found by the machine: a consumer group whose last member's removal is refused by
    the store, that went classic and came back as a new consumer group whose first
    (whole) record the store refused too. The new group's next (partial) record must not
    pass for the successor of the old group's record the store still holds: folded
    there it made a state that never was, two members owning one partition, which a
    restart loaded."""
    state = MixedTwins()

    def check():
        state.as_stored()
        state.one_slot_per_member()
        state.same_answers()
        state.same_group()

    state.start(consumers=2)
    for step in (lambda: state.step_one(k=0, steady=False),
                 lambda: state.store_answers(count=1, failing=False, last_first=False),
                 lambda: state.advance(ms=2500),
                 lambda: state.advance(ms=2500),    # c0's session ends: its removal parked
                 lambda: state.switch_protocol(k=0),
                 lambda: state.switch_protocol(k=2),
                 lambda: state.step_all(confirm=False, ms=0, rounds=1, steady=False),
                 lambda: state.store_answers(count=2, failing=True, last_first=False),
                 lambda: state.store_answers(count=1, failing=False, last_first=False),
                 state.restart):
        step()
        check()
    state.teardown()

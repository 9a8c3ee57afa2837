"""The twins agree on the consumer group protocol: one random stream of
ConsumerGroupHeartbeats (joins, steady and full heartbeats, stale epochs, leaves,
static leaves and rejoins), the steady heartbeat's fast paths by handle and in
batches (with handles kept from earlier incarnations), topic changes, offset commits
and time steps drives a native and a pure coordinator side by side; every answer and
every group's description must be identical, and no partition is ever owned by two
members."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import fastcoord
from fastcoord import CoordinatorConfig, GroupCoordinator, ManualClock
from helpers.consumer_views import memory_is_committed, stored_is_committed
from helpers.tier import examples

pytestmark = pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE,
                                reason="needs the native core to compare against")

GROUPS = ["g-a", "g-b"]
MEMBERS = ["m1", "m2", "m3", "m4"]
INSTANCES = [None, None, "i-1", "i-2"]
TOPIC_MAPS = [{"foo": 4, "bar": 2}, {"foo": 6, "bar": 2, "baz": 3}, {"foo": 2}]
SUBSCRIPTIONS = [["foo"], ["foo", "bar"], ["bar", "baz"], ["baz"]]
REGEXES = [None, None, "ba.*", "ba("]     # the last refused: INVALID_REGULAR_EXPRESSION
STEPS = [0, 100, 1000, 3000, 6000]


def make(impl):
    ids = itertools.count()
    config = CoordinatorConfig(num_shards=4, group_consumer_session_timeout_ms=5000,
                               group_consumer_min_session_timeout_ms=5000,
                               group_consumer_heartbeat_interval_ms=1000,
                               group_consumer_min_heartbeat_interval_ms=1000,
                               group_consumer_max_size=3)
    coord = GroupCoordinator(config, clock=ManualClock(), impl=impl,
                             member_id_factory=lambda prefix: f"made-{next(ids)}")
    coord.set_topics(TOPIC_MAPS[0])
    return coord


class ConsumerTwins(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.native, self.pure = make("native"), make("pure")
        # every handle either twin gave out, (native's, pure's) per (group, member): a
        # handle outlives its incarnation here, as it may in a broker
        self.handles = {}

    def both(self, call):
        answers = []
        for coord in (self.native, self.pure):
            out = []
            call(coord, out.append)
            assert len(out) == 1
            answers.append(out[0])
        assert answers[0] == answers[1]
        return answers[0]

    def member(self, group, member_id):
        for m in self.native.consumer_group_describe([group])[0].members:
            if m.member_id == member_id:
                return m
        return None

    @rule(group=st.sampled_from(GROUPS), member=st.sampled_from(MEMBERS),
          topics=st.sampled_from(SUBSCRIPTIONS), regex=st.sampled_from(REGEXES),
          instance=st.sampled_from(INSTANCES), assignor=st.sampled_from([None, "uniform", "range"]),
          timeout=st.sampled_from([500, 2000]))
    def join(self, group, member, topics, regex, instance, assignor, timeout):
        self.both(lambda c, cb: c.consumer_group_heartbeat(
            group, member, 0, instance_id=instance, rebalance_timeout_ms=timeout,
            subscribed_topic_names=topics, subscribed_topic_regex=regex,
            server_assignor=assignor, owned_partitions={}, callback=cb))

    @rule(group=st.sampled_from(GROUPS), member=st.sampled_from(MEMBERS),
          revoke=st.booleans(), full=st.booleans())
    def heartbeat(self, group, member, revoke, full):
        """A cooperative member: its current epoch, owning what it was last given (or,
        `revoke` False, still holding everything it had)."""
        m = self.member(group, member)
        if m is None:
            return
        owned = m.assignment if revoke else None
        kwargs = {}
        if full:
            kwargs = dict(rebalance_timeout_ms=2000, subscribed_topic_names=["foo", "bar"],
                          owned_partitions=m.assignment)
        self.both(lambda c, cb: c.consumer_group_heartbeat(
            group, member, m.member_epoch, instance_id=m.instance_id,
            **({"owned_partitions": owned} if not full else {}), **kwargs, callback=cb))

    @rule(group=st.sampled_from(GROUPS), member=st.sampled_from(MEMBERS),
          delta=st.sampled_from([-2, -1, 1]))
    def wrong_epoch(self, group, member, delta):
        m = self.member(group, member)
        epoch = (m.member_epoch if m is not None else 1) + delta
        if epoch < 1:
            return
        self.both(lambda c, cb: c.consumer_group_heartbeat(
            group, member, epoch, owned_partitions={}, callback=cb))

    @rule(group=st.sampled_from(GROUPS), member=st.sampled_from(MEMBERS),
          static=st.booleans())
    def leave(self, group, member, static):
        m = self.member(group, member)
        instance = m.instance_id if m is not None else None
        self.both(lambda c, cb: c.consumer_group_heartbeat(
            group, member, -2 if static else -1, instance_id=instance, callback=cb))

    def handle_pair(self, group, member, fresh):
        """The member's handles in both twins: taken now (`fresh`), or the ones taken
        at an earlier step (maybe of an incarnation gone since)."""
        if fresh or (group, member) not in self.handles:
            pair = (self.native.consumer_member_handle(group, member),
                    self.pure.consumer_member_handle(group, member))
            assert (pair[0] < 0) == (pair[1] < 0), pair
            if pair[0] < 0:
                return None
            self.handles[(group, member)] = pair
        return self.handles[(group, member)]

    def pick(self, group, pick):
        """One of the group's members now (by `pick`), or None when it has none."""
        members = self.native.consumer_group_describe([group])[0].members
        return members[pick % len(members)] if members else None

    def steady_slow(self, group, member, epoch):
        """The heartbeat a fast path left alone, as its caller then sends it."""
        self.both(lambda c, cb: c.consumer_group_heartbeat(group, member, epoch, callback=cb))

    @rule(group=st.sampled_from(GROUPS), pick=st.integers(0, 7), fresh=st.booleans(),
          delta=st.sampled_from([0, 0, 0, -1, 1]))
    def steady_by_handle(self, group, pick, fresh, delta):
        m = self.pick(group, pick)
        if m is None:
            return
        pair = self.handle_pair(group, m.member_id, fresh)
        epoch = m.member_epoch + delta
        answers = [self.native.consumer_heartbeat_handle(pair[0], epoch),
                   self.pure.consumer_heartbeat_handle(pair[1], epoch)]
        assert answers[0] == answers[1]
        if answers[0] is None and epoch > 0:
            self.steady_slow(group, m.member_id, epoch)

    @rule(group=st.sampled_from(GROUPS), picks=st.lists(st.integers(0, 7), max_size=4),
          fresh=st.booleans())
    def steady_batch(self, group, picks, fresh):
        calls = []
        for pick in picks:
            m = self.pick(group, pick)
            if m is not None:
                calls.append((m.member_id, self.handle_pair(group, m.member_id, fresh),
                              m.member_epoch))
        epochs = np.array([e for _, _, e in calls], dtype=np.int32)
        answered = [self.native.consumer_heartbeat_batch(
                        np.array([p[0] for _, p, _ in calls], dtype=np.int64), epochs),
                    self.pure.consumer_heartbeat_batch(
                        np.array([p[1] for _, p, _ in calls], dtype=np.int64), epochs)]
        assert answered[0].tolist() == answered[1].tolist()
        for (member, _, epoch), done in zip(calls, answered[0].tolist()):
            if not done:
                self.steady_slow(group, member, epoch)

    @rule(topics=st.sampled_from(TOPIC_MAPS))
    def set_topics(self, topics):
        self.native.set_topics(topics)
        self.pure.set_topics(topics)

    @rule(group=st.sampled_from(GROUPS), member=st.sampled_from(MEMBERS + [""]),
          delta=st.sampled_from([0, 0, 1]))
    def commit(self, group, member, delta):
        m = self.member(group, member)
        epoch = (m.member_epoch + delta) if m is not None else -1
        results = [c.commit_offsets(group, member, epoch, {("foo", 0): 5})
                   for c in (self.native, self.pure)]
        assert results[0] == results[1]

    @rule(ms=st.sampled_from(STEPS))
    def advance(self, ms):
        assert self.native.advance_time(ms) == self.pure.advance_time(ms)

    @invariant()
    def memory_described_as_committed(self):
        """With no write on its way, describing the group from memory (as describe does
        then) gives what its confirmed copy gives; with writes on their way, the copy's
        members that no write changed are read from memory as well."""
        for coord in (self.native, self.pure):
            for group in GROUPS:
                memory_is_committed(coord, group)
                stored_is_committed(coord, group)

    @invariant()
    def same_groups(self):
        native = self.native.consumer_group_describe(GROUPS)
        assert native == self.pure.consumer_group_describe(GROUPS)
        assert self.native.list_groups() == self.pure.list_groups()
        # every member holds one slot of the member table and no slot outlives its
        # member (a leaked slot's session would fence whoever has its id later)
        for coord in (self.native, self.pure):
            table = coord.member_table.stats()
            assert table["slots"] - table["free"] == sum(len(d.members) for d in native)
        for desc in native:
            owners = {}
            for m in desc.members:
                for topic, parts in m.assignment.items():
                    for p in parts:
                        assert (topic, p) not in owners, (desc.group_id, topic, p)
                        owners[(topic, p)] = m.member_id


ConsumerTwins.TestCase.settings = settings(
    max_examples=examples(100), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_consumer_twins_agree = ConsumerTwins.TestCase

"""The twins agree: one random stream of requests and time steps drives a native and a
pure coordinator side by side; every response, every callback (in order), every group's
state and member set must be identical. Also checks the group invariants at every step."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import fastcoord
from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock, OffsetAndMetadata
from helpers.invariants import group_invariants
from helpers.tier import examples

pytestmark = pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE,
                                reason="needs the native core to compare against")

GROUPS = ["g-a", "g-b", "g-c"]
INSTANCES = [None, None, "i-1", "i-2"]
PROTOCOL_SETS = [
    [("range", b"v1")],
    [("range", b"v2")],
    [("roundrobin", b"v1"), ("range", b"v1")],
]
SESSIONS = [10, 300, 1000]
STEPS = [0, 1, 10, 100, 299, 300, 1000, 3000]


def make(impl):
    ids = itertools.count()
    config = CoordinatorConfig(group_min_session_timeout_ms=10, group_max_session_timeout_ms=10_000,
                               group_initial_rebalance_delay_ms=100, group_max_size=6,
                               num_shards=4)
    return GroupCoordinator(config, clock=ManualClock(), impl=impl,
                            member_id_factory=lambda prefix: f"{prefix}-{next(ids)}")


class TwinMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.native, self.pure = make("native"), make("pure")
        self.logs = {"native": [], "pure": []}
        self.known = {g: [""] for g in GROUPS}    # member ids seen per group
        self.generations = {g: [0] for g in GROUPS}
        self.joined = {g: [] for g in GROUPS}     # (member id, generation, leader id) of NONE joins
        self.step = 0
        self.seen = 0                             # log entries already harvested
        self.versions = {}                        # (twin, group) -> (version, summary read)

    def both(self, g, call):
        """Run one request on both twins; every callback is logged with the request's
        step and group, and the logs must stay identical."""
        self.step += 1
        results = []
        for name, coord in (("native", self.native), ("pure", self.pure)):
            log = self.logs[name]
            results.append(call(coord, lambda r, log=log, step=self.step: log.append((step, g, r))))
        assert results[0] == results[1]
        assert self.logs["native"] == self.logs["pure"]
        new = self.logs["pure"][self.seen:]
        self.seen = len(self.logs["pure"])
        for _, group, result in new:
            if group is None:
                continue
            member_id = getattr(result, "member_id", "")
            gen = getattr(result, "generation_id", -1)
            if member_id and member_id not in self.known[group]:
                self.known[group].append(member_id)
            if gen >= 0 and gen not in self.generations[group]:
                self.generations[group].append(gen)
            if type(result).__name__ == "JoinGroupResult" and result.error == Errors.NONE:
                self.joined[group].append((member_id, gen, result.leader_id))
        return results[1]

    @rule(g=st.sampled_from(GROUPS), data=st.data(), instance=st.sampled_from(INSTANCES),
          protocols=st.sampled_from(PROTOCOL_SETS), session=st.sampled_from(SESSIONS),
          require=st.booleans())
    def join(self, g, data, instance, protocols, session, require):
        member_id = data.draw(st.sampled_from(self.known[g]))
        self.both(g, lambda c, cb: c.join_group(
            g, member_id, "consumer", protocols, session_timeout_ms=session,
            rebalance_timeout_ms=session, group_instance_id=instance,
            require_known_member_id=require, callback=cb))

    @precondition(lambda self: any(self.joined.values()))
    @rule(data=st.data())
    def sync_after_join(self, data):
        """What a real client does next: sync with the id and generation its join returned
        (the leader with an assignment for every member it was told about)."""
        g = data.draw(st.sampled_from([g for g in GROUPS if self.joined[g]]))
        member_id, gen, leader_id = data.draw(st.sampled_from(self.joined[g][-6:]))
        plan = {m: m.encode() for m in self.known[g] if m} if member_id == leader_id else None
        self.both(g, lambda c, cb: c.sync_group(g, gen, member_id, plan, callback=cb))

    @precondition(lambda self: any(self.joined.values()))
    @rule(data=st.data())
    def heartbeat_after_join(self, data):
        g = data.draw(st.sampled_from([g for g in GROUPS if self.joined[g]]))
        member_id, gen, _ = data.draw(st.sampled_from(self.joined[g][-6:]))
        self.both(g, lambda c, cb: c.heartbeat(g, member_id, gen))

    @rule(g=st.sampled_from(GROUPS), data=st.data(), instance=st.sampled_from(INSTANCES),
          leader=st.booleans())
    def sync(self, g, data, instance, leader):
        member_id = data.draw(st.sampled_from(self.known[g]))
        gen = data.draw(st.sampled_from(self.generations[g]))
        plan = {m: m.encode() for m in self.known[g] if m} if leader else None
        self.both(g, lambda c, cb: c.sync_group(g, gen, member_id, plan,
                                             group_instance_id=instance, callback=cb))

    @rule(g=st.sampled_from(GROUPS), data=st.data(), instance=st.sampled_from(INSTANCES))
    def heartbeat(self, g, data, instance):
        member_id = data.draw(st.sampled_from(self.known[g]))
        gen = data.draw(st.sampled_from(self.generations[g]))
        self.both(g, lambda c, cb: c.heartbeat(g, member_id, gen, instance))

    @rule(g=st.sampled_from(GROUPS), data=st.data())
    def heartbeat_batch(self, g, data):
        import numpy as np
        member_id = data.draw(st.sampled_from(self.known[g]))
        gen = data.draw(st.sampled_from(self.generations[g]))

        def call(c, cb):
            h = c.member_handle(g, member_id)
            out = c.heartbeat_batch(np.array([h], dtype=np.int64), np.array([gen], dtype=np.int32))
            return h >= 0, out.tolist()
        self.both(g, call)

    @rule(g=st.sampled_from(GROUPS), data=st.data(), instance=st.sampled_from(INSTANCES))
    def leave(self, g, data, instance):
        member_id = data.draw(st.sampled_from(self.known[g]))
        self.both(g, lambda c, cb: c.leave_group(g, [(member_id, instance)]))

    @rule(g=st.sampled_from(GROUPS), data=st.data(), offset=st.integers(0, 100))
    def commit(self, g, data, offset):
        member_id = data.draw(st.sampled_from(self.known[g]))
        gen = data.draw(st.sampled_from(self.generations[g] + [-1]))
        self.both(g, lambda c, cb: c.commit_offsets(g, member_id, gen,
                                                 {("t", 0): OffsetAndMetadata(offset, "m")}))

    @rule(ms=st.sampled_from(STEPS))
    def advance(self, ms):
        self.both(None, lambda c, cb: c.advance_time(ms))

    @rule(g=st.sampled_from(GROUPS))
    def delete(self, g):
        self.both(g, lambda c, cb: c.delete_groups([g]))

    @invariant()
    def same_groups(self):
        for g in GROUPS:
            n, p = self.native.describe_group(g), self.pure.describe_group(g)
            assert n == p
            assert self.native.fetch_offsets(g) == self.pure.fetch_offsets(g) or \
                _same_offsets(self.native.fetch_offsets(g), self.pure.fetch_offsets(g))
        assert sorted(self.native.list_groups()) == sorted(self.pure.list_groups())
        group_invariants(self.native)
        group_invariants(self.pure)

    @invariant()
    def version_moves_with_state_and_members(self):
        """group_version unmoved since the last look: group_summary's state and members
        epoch unmoved too (what a replay relies on to skip the summary)."""
        for name, coord in (("native", self.native), ("pure", self.pure)):
            for g in GROUPS:
                version, summary = coord.group_version(g), coord.group_summary(g)
                read = (summary.error, summary.state, summary.members_epoch)
                last = self.versions.get((name, g))
                if last is not None and last[0] == version:
                    assert read == last[1], (name, g, version)
                self.versions[(name, g)] = (version, read)


def _same_offsets(a, b):
    return a[0] == b[0] and {k: v.offset for k, v in a[1].items()} == \
        {k: v.offset for k, v in b[1].items()}


TwinMachine.TestCase.settings = settings(
    max_examples=examples(200), stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_native_and_pure_agree = pytest.mark.slow(TwinMachine.TestCase)

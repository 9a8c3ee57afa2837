"""Helpers for the protocol conformance suite (tests/test_protocol_*.py).

Everything here drives `fastcoord.GroupCoordinator` through its public API only
(spec/api.md) on a `ManualClock`, with a deterministic member-id factory, so
that every scenario is exactly reproducible and every timing assertion can use
exact millisecond arithmetic.

Defaults mirror the configuration Kafka's own coordinator tests use:
min session 10 ms, max session 600000 ms, initial rebalance delay 50 ms,
group max size 4, session and rebalance timeouts of 500 ms.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

from fastcoord import (
    CoordinatorConfig, Errors, GroupCoordinator, GroupState, ManualClock, shard_for,
)

GROUP = "groupId"
# Maps to a different shard than GROUP with the default 50 shards (13 vs 18).
OTHER_GROUP = "otherGroup"
PTYPE = "consumer"
RANGE = "range"
RR = "roundrobin"
META = b""
PROTOCOLS = [(RANGE, META)]
SUPERSET = [(RANGE, META), (RR, META)]

MIN_SESSION = 10
MAX_SESSION = 600_000
MAX_SIZE = 4
SESSION = 500
REBALANCE = 500
DELAY = 50
NEW_MEMBER_TIMEOUT = 300_000
NUM_SHARDS = 50
CLIENT_ID = "consumer-test"
CLIENT_HOST = "localhost"

LEADER_INSTANCE = "leader"
FOLLOWER_INSTANCE = "follower"

NONE = Errors.NONE

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


class IdFactory:
    """Deterministic member ids: f"{prefix}-{n}" with a counter per coordinator."""

    def __init__(self) -> None:
        self.count = 0
        self.prefixes: List[str] = []

    def __call__(self, prefix: str) -> str:
        self.count += 1
        self.prefixes.append(prefix)
        return f"{prefix}-{self.count}"


def default_config(**overrides) -> CoordinatorConfig:
    values = dict(
        group_min_session_timeout_ms=MIN_SESSION,
        group_max_session_timeout_ms=MAX_SESSION,
        group_initial_rebalance_delay_ms=DELAY,
        group_max_size=MAX_SIZE,
        num_shards=NUM_SHARDS,
    )
    values.update(overrides)
    return CoordinatorConfig(**values)


class Reply:
    """Captures a join/sync callback. `result` is None while the request is parked."""

    __slots__ = ("results",)

    def __init__(self) -> None:
        self.results: list = []

    def __call__(self, result) -> None:
        self.results.append(result)

    @property
    def done(self) -> bool:
        return bool(self.results)

    @property
    def result(self):
        assert len(self.results) <= 1, f"callback invoked {len(self.results)} times: {self.results}"
        return self.results[0] if self.results else None

    @property
    def error(self) -> Errors:
        r = self.result
        assert r is not None, "request is still parked"
        return r.error

    def __repr__(self) -> str:
        return f"Reply({self.results!r})"


MemberRef = Union[str, Tuple[str, Optional[str]]]


@dataclass
class Formed:
    """A group formed by `Proto.form_group`."""

    generation: int
    leader: str
    members: List[str]                       # join order, leader first
    instances: Dict[str, Optional[str]]      # member id -> group instance id
    assignments: Dict[str, bytes] = field(default_factory=dict)
    protocol: Optional[str] = None
    formed_at: int = 0

    @property
    def followers(self) -> List[str]:
        return [m for m in self.members if m != self.leader]

    @property
    def follower(self) -> str:
        return self.followers[0]


class Proto:
    """A coordinator plus its clock, id factory and (optional) store, with terse
    request helpers. Every helper goes through the public API."""

    def __init__(self, impl: str, *, store=None, start_ms: int = 0, **config_overrides) -> None:
        self.impl = impl
        self.clock = ManualClock(start_ms)
        self.ids = IdFactory()
        self.store = store
        self.config = default_config(**config_overrides)
        self.coord = GroupCoordinator(self.config, clock=self.clock, store=store, impl=impl,
                                      member_id_factory=self.ids)

    # ---- time -------------------------------------------------------------
    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def advance(self, ms: int) -> None:
        assert ms >= 0, ms
        before = self.now
        self.coord.advance_time(ms)
        assert self.now == before + ms, "advance_time must leave the clock at old time + ms"

    def advance_to(self, t: int) -> None:
        assert t >= self.now, (t, self.now)
        self.advance(t - self.now)

    def run_until_done(self, replies: Sequence[Reply], step: int = DELAY, limit: int = 100) -> None:
        for _ in range(limit):
            if all(r.done for r in replies):
                return
            self.advance(step)
        raise AssertionError(f"requests still parked after {limit * step} ms: {replies}")

    # ---- requests -----------------------------------------------------------
    def send_join(self, member_id: str = "", *, group: str = GROUP, instance: Optional[str] = None,
                  protocols=PROTOCOLS, ptype: str = PTYPE, session: int = SESSION,
                  rebalance: Optional[int] = REBALANCE, require_known: bool = True,
                  client_id: str = CLIENT_ID, client_host: str = CLIENT_HOST) -> Reply:
        reply = Reply()
        kwargs = dict(session_timeout_ms=session, group_instance_id=instance,
                      require_known_member_id=require_known, client_id=client_id,
                      client_host=client_host, callback=reply)
        if rebalance is not None:
            kwargs["rebalance_timeout_ms"] = rebalance
        self.coord.join_group(group, member_id, ptype, protocols, **kwargs)
        return reply

    def join_old(self, member_id: str = "", **kw) -> Reply:
        """A join as old clients send it (no MEMBER_ID_REQUIRED round trip)."""
        return self.send_join(member_id, require_known=False, **kw)

    def pending(self, **kw) -> str:
        """Send a dynamic join with member id "" and return the id handed out with 79."""
        r = self.send_join("", require_known=True, **kw)
        assert r.error == Errors.MEMBER_ID_REQUIRED, r
        assert r.result.member_id
        return r.result.member_id

    def join_new(self, **kw) -> Reply:
        """A new dynamic member: the 79 round trip, then the join with the new id."""
        member_id = self.pending(**kw)
        return self.send_join(member_id, require_known=True, **kw)

    def send_sync(self, member_id: str, generation: int, assignments=None, *, group: str = GROUP,
                  instance: Optional[str] = None, ptype: Optional[str] = None,
                  pname: Optional[str] = None) -> Reply:
        reply = Reply()
        self.coord.sync_group(group, generation, member_id, assignments, group_instance_id=instance,
                              protocol_type=ptype, protocol_name=pname, callback=reply)
        return reply

    def heartbeat(self, member_id: str, generation: int, *, group: str = GROUP,
                  instance: Optional[str] = None) -> Errors:
        return self.coord.heartbeat(group, member_id, generation, instance)

    def leave(self, *members: MemberRef, group: str = GROUP):
        identities = [m if isinstance(m, tuple) else (m, None) for m in members]
        return self.coord.leave_group(group, identities)

    def commit(self, member_id: str, generation: int, offsets, *, group: str = GROUP,
               instance: Optional[str] = None) -> dict:
        return self.coord.commit_offsets(group, member_id, generation, offsets,
                                         group_instance_id=instance)

    def fetch(self, partitions=None, *, group: str = GROUP, require_stable: bool = False):
        return self.coord.fetch_offsets(group, partitions, require_stable=require_stable)

    def describe(self, group: str = GROUP):
        return self.coord.describe_group(group)

    def state(self, group: str = GROUP) -> str:
        return self.describe(group).state

    def member_ids(self, group: str = GROUP) -> set:
        return {m.member_id for m in self.describe(group).members}

    def has_member(self, member_id: str, group: str = GROUP) -> bool:
        return member_id in self.member_ids(group)

    # ---- groups -------------------------------------------------------------
    def form_group(self, n: int = 2, *, static: bool = False,
                   instances: Optional[Sequence[str]] = None, group: str = GROUP,
                   session: int = SESSION, rebalance: int = REBALANCE, protocols=SUPERSET,
                   sync: bool = True, assignments: Optional[Dict[int, bytes]] = None) -> Formed:
        """Form a group of n members joining together from scratch (first joiner leads),
        then (sync=True) sync everyone so the group is Stable. Returns a Formed."""
        if static and instances is None:
            instances = [LEADER_INSTANCE] + [
                FOLLOWER_INSTANCE if i == 1 else f"{FOLLOWER_INSTANCE}{i}" for i in range(1, n)]
        replies = []
        for i in range(n):
            kw = dict(group=group, session=session, rebalance=rebalance, protocols=protocols)
            if static:
                replies.append(self.send_join("", instance=instances[i], **kw))
            else:
                replies.append(self.join_new(**kw))
        self.run_until_done(replies)
        results = [r.result for r in replies]
        for res in results:
            assert res.error == NONE, results
        gen = results[0].generation_id
        assert all(res.generation_id == gen for res in results), results
        leader = results[0].leader_id
        assert leader == results[0].member_id, "the first member to join must lead"
        ids = [res.member_id for res in results]
        assert len(set(ids)) == n
        inst = {ids[i]: (instances[i] if static else None) for i in range(n)}
        formed = Formed(generation=gen, leader=leader, members=ids, instances=inst,
                        protocol=results[0].protocol_name, formed_at=self.now)
        if not sync:
            return formed
        assign = {m: (assignments[i] if assignments else f"assignment-{m}".encode())
                  for i, m in enumerate(ids)}
        ls = self.send_sync(leader, gen, assign, group=group, instance=inst[leader])
        assert ls.error == NONE, ls
        assert ls.result.assignment == assign[leader]
        for m in ids[1:]:
            fs = self.send_sync(m, gen, group=group, instance=inst[m])
            assert fs.error == NONE, fs
            assert fs.result.assignment == assign[m]
        assert self.state(group) == STABLE
        formed.assignments = assign
        return formed


def join_members_of(result) -> Dict[str, Optional[str]]:
    """member id -> instance id from a leader's JoinGroupResult."""
    return {m.member_id: m.group_instance_id for m in result.members}


def other_shard_group() -> str:
    assert shard_for(OTHER_GROUP, NUM_SHARDS) != shard_for(GROUP, NUM_SHARDS)
    return OTHER_GROUP


def offsets_of(fetched: dict) -> Dict[Tuple[str, int], int]:
    return {tp: om.offset for tp, om in fetched.items()}

"""Every join and sync gets exactly one answer, whatever removes its member.

A server answers a connection's requests in order, so one request left unanswered
holds every later answer on its connection forever. These tests park joins and syncs
(the leader's sync on a store that holds its writes until the test completes them:
DeferredStore), drive each path that removes a member (leave, session expiry, sync
expiry, static fencing, deletion, shard unload, a failed store write) and check that
every callback handed out fired exactly once.
"""
from __future__ import annotations

import pytest

from fastcoord.core.store import DeferredStore
from helpers.protocol import (
    FOLLOWER_INSTANCE, GROUP, LEADER_INSTANCE, NONE, PREPARING, PROTOCOLS, REBALANCE, SESSION,
    SUPERSET, Proto, Reply,
)
from fastcoord import Errors, shard_for

UNKNOWN = Errors.UNKNOWN_MEMBER_ID


class Counted(Proto):
    """A Proto that keeps every join and sync callback it hands out."""

    def __init__(self, impl: str, **kw) -> None:
        self.store_ = DeferredStore()
        super().__init__(impl, store=self.store_, **kw)
        self.replies: list = []

    def send_join(self, *args, **kw) -> Reply:
        reply = super().send_join(*args, **kw)
        self.replies.append(reply)
        return reply

    def send_sync(self, *args, **kw) -> Reply:
        reply = super().send_sync(*args, **kw)
        self.replies.append(reply)
        return reply

    def form_group(self, n: int = 2, *, sync: bool = True, **kw):
        """Proto.form_group, its leader's write completed by the test (Stable)."""
        f = super().form_group(n, sync=False, **kw)
        if sync:
            syncs = [self.send_sync(m, f.generation, {x: b"a" for x in f.members}
                                    if m == f.leader else None, instance=f.instances[m])
                     for m in f.members]
            self.store_.complete_all()
            assert [s.error for s in syncs] == [NONE] * n
        return f

    def settle(self) -> None:
        """Finish every parked store write and let every timer run out."""
        for _ in range(20):
            self.store_.complete_all()
            self.advance(SESSION + REBALANCE)

    def assert_each_answered_once(self) -> None:
        self.settle()
        counts = [len(r.results) for r in self.replies]
        assert counts == [1] * len(self.replies), list(zip(counts, self.replies))


def _parked_leader_sync(h: Counted, static: bool = False):
    """A formed group whose follower's sync and leader's sync are parked, the leader's
    on its assignment's store write."""
    f = h.form_group(2, static=static, sync=False)
    fs = h.send_sync(f.follower, f.generation, instance=f.instances[f.follower])
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"},
                     instance=f.instances[f.leader])
    assert not fs.done and not ls.done
    assert [p[0] for p in h.store_.pending] == ["group"]
    return f, fs, ls


def test_leader_leaving_while_its_sync_is_stored_is_answered_unknown_member(impl):
    """The wedge of the hardening issue: the leader's sync, parked on the store, is
    answered UNKNOWN_MEMBER_ID when the leader leaves (what the same sync would get
    once it has left); the follower's, REBALANCE_IN_PROGRESS (the group rebalances)."""
    h = Counted(impl)
    f, fs, ls = _parked_leader_sync(h)
    assert h.leave(f.leader).member_errors == [NONE]
    assert ls.error == UNKNOWN
    assert fs.error == Errors.REBALANCE_IN_PROGRESS
    assert h.state() == PREPARING
    h.store_.complete_all()             # the write lands late: nobody is answered again
    assert len(ls.results) == len(fs.results) == 1
    h.assert_each_answered_once()


def test_follower_leaving_while_parked_in_sync_is_answered(impl):
    h = Counted(impl)
    f = h.form_group(2, sync=False)
    fs = h.send_sync(f.follower, f.generation)
    h.leave(f.follower)
    assert fs.error == UNKNOWN
    h.assert_each_answered_once()


def test_static_leader_leaving_by_instance_id_while_its_sync_is_stored(impl):
    h = Counted(impl)
    f, fs, ls = _parked_leader_sync(h, static=True)
    assert h.leave(("", LEADER_INSTANCE)).member_errors == [NONE]
    assert ls.error == UNKNOWN
    h.assert_each_answered_once()


def test_static_fencing_while_the_leaders_sync_is_stored(impl):
    """A new incarnation of the leader's instance fences the parked sync at once."""
    h = Counted(impl)
    f, fs, ls = _parked_leader_sync(h, static=True)
    h.send_join("", instance=LEADER_INSTANCE)
    assert ls.error == Errors.FENCED_INSTANCE_ID
    h.assert_each_answered_once()


def test_sync_expiry_while_the_leaders_sync_is_stored(impl):
    """A third member never syncs: the sync deadline removes it and the rest rebalance."""
    h = Counted(impl)
    f = h.form_group(3, sync=False)
    ls = h.send_sync(f.leader, f.generation, {m: b"x" for m in f.members})
    fs = h.send_sync(f.followers[0], f.generation)
    h.advance(REBALANCE + 1)
    assert ls.error == fs.error == Errors.REBALANCE_IN_PROGRESS
    h.assert_each_answered_once()


def test_session_expiry_of_members_with_parked_joins_and_syncs(impl):
    """Nobody heartbeats: parked joins and syncs are answered as their members go."""
    h = Counted(impl)
    f, fs, ls = _parked_leader_sync(h)
    h.join_new()                        # a third member's join, parked in the new round
    h.advance(2 * (SESSION + REBALANCE))
    assert ls.done and fs.done
    h.assert_each_answered_once()


def test_unload_answers_a_static_rejoin_parked_on_the_store(impl):
    """A Stable group's static rejoin waits for its write; the shard goes away first:
    the join is answered NOT_COORDINATOR, once (the write's failure later adds nothing)."""
    h = Counted(impl)
    h.form_group(2, static=True)
    rejoin = h.send_join("", instance=FOLLOWER_INSTANCE)
    assert not rejoin.done and h.store_.pending
    h.coord.unload_shard(shard_for(GROUP, h.config.num_shards))
    assert rejoin.error == Errors.NOT_COORDINATOR
    h.store_.complete_all(Errors.UNKNOWN_SERVER_ERROR)
    h.assert_each_answered_once()


@pytest.mark.parametrize("outcome", [Errors.NONE, Errors.UNKNOWN_SERVER_ERROR])
def test_leave_of_a_static_rejoin_parked_on_the_store(impl, outcome):
    """The rejoined incarnation leaves while its write is parked: its join is answered
    UNKNOWN_MEMBER_ID, and the write's outcome, success or failure, answers nothing
    again nor brings the member back."""
    h = Counted(impl)
    f = h.form_group(2, static=True)
    rejoin = h.send_join("", instance=FOLLOWER_INSTANCE)
    assert h.leave(("", FOLLOWER_INSTANCE)).member_errors == [NONE]
    assert rejoin.error == UNKNOWN
    h.store_.complete_all(outcome)
    assert len(rejoin.results) == 1
    assert h.member_ids() == {f.leader}
    h.assert_each_answered_once()


def test_unload_and_delete_answer_everything_parked(impl):
    h = Counted(impl)
    f, fs, ls = _parked_leader_sync(h)
    h.coord.unload_shard(shard_for(GROUP, h.config.num_shards))
    assert ls.error == fs.error == Errors.NOT_COORDINATOR
    h.assert_each_answered_once()

    h = Counted(impl)
    f = h.form_group(2)
    h.leave(*f.members)
    assert h.coord.delete_groups([GROUP]) == {GROUP: NONE}
    h.assert_each_answered_once()


def test_store_failure_of_the_leaders_assignment_answers_every_sync(impl):
    h = Counted(impl)
    f, fs, ls = _parked_leader_sync(h)
    h.store_.complete(0, Errors.UNKNOWN_SERVER_ERROR)
    assert ls.error == fs.error == Errors.UNKNOWN_SERVER_ERROR
    h.assert_each_answered_once()


def test_a_second_join_of_a_member_answers_the_first(impl):
    """A member's join parked in a rebalance, then another join of the same member (a
    client retrying on a new connection, or pipelining): the later one takes part in
    the round; the earlier is answered REBALANCE_IN_PROGRESS, not dropped."""
    h = Counted(impl)
    f = h.form_group(2)
    first = h.send_join(f.leader)
    assert not first.done and h.state() == PREPARING
    second = h.send_join(f.leader)
    assert first.error == Errors.REBALANCE_IN_PROGRESS
    follower = h.send_join(f.follower)
    h.run_until_done([second, follower])
    assert second.error == follower.error == NONE
    assert second.result.generation_id == f.generation + 1
    h.assert_each_answered_once()


def test_a_second_sync_of_a_member_answers_the_first(impl):
    h = Counted(impl)
    f = h.form_group(2, sync=False)
    first = h.send_sync(f.follower, f.generation)
    second = h.send_sync(f.follower, f.generation)
    assert first.error == Errors.REBALANCE_IN_PROGRESS
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    h.store_.complete_all()
    assert (second.error, second.result.assignment) == (NONE, b"F")
    assert ls.error == NONE
    h.assert_each_answered_once()


class _Client:
    """One consumer of the random walk: its member id and generation as last answered."""

    def __init__(self, instance) -> None:
        self.instance = instance
        self.member_id = ""
        self.generation = -1

    def joined(self, result) -> None:
        if result.error in (NONE, Errors.MEMBER_ID_REQUIRED):
            self.member_id = result.member_id
            self.generation = result.generation_id
        elif result.error in (UNKNOWN, Errors.FENCED_INSTANCE_ID):
            self.member_id = ""


@pytest.mark.parametrize("seed", range(6))
def test_random_walk_answers_every_request_once(impl, seed):
    """Joins, syncs (the leader's parked on the store), leaves, heartbeats, time and
    store completions and failures in a random order, static and dynamic members
    mixed: no callback ever fires twice, and once the shard is unloaded and the store
    and timers have run out, every one has fired once."""
    import random

    rng = random.Random(seed)
    h = Counted(impl)
    clients = [_Client(f"i{k}" if k % 2 else None) for k in range(4)]
    joins: list = []                    # (reply, client) of joins not yet answered
    for _ in range(400):
        for reply, client in [j for j in joins if j[0].done]:
            joins.remove((reply, client))
            client.joined(reply.result)
        c = rng.choice(clients)
        op = rng.random()
        if op < 0.3:
            joins.append((h.send_join(c.member_id, instance=c.instance,
                                      protocols=rng.choice([PROTOCOLS, SUPERSET])), c))
        elif op < 0.55:
            everyone = {x.member_id: b"a" for x in clients if x.member_id}
            h.send_sync(c.member_id, c.generation, everyone, instance=c.instance)
        elif op < 0.62:
            h.leave((c.member_id, c.instance) if rng.random() < 0.7 else ("", c.instance))
        elif op < 0.75:
            h.heartbeat(c.member_id, c.generation, instance=c.instance)
        elif op < 0.9:
            h.advance(rng.choice([1, 50, 200, SESSION + 1]))
        elif h.store_.pending:
            h.store_.complete(rng.randrange(len(h.store_.pending)),
                              rng.choice([NONE, NONE, Errors.UNKNOWN_SERVER_ERROR]))
        assert all(len(r.results) <= 1 for r in h.replies), h.replies
    h.coord.unload_shard(shard_for(GROUP, h.config.num_shards))
    h.assert_each_answered_once()

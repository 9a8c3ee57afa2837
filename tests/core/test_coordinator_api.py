"""The coordinator's own API beyond the protocol: loading from a store, the reaper on a
real clock, the command-line demo."""
from __future__ import annotations

import itertools
import subprocess
import sys
import time

import pytest

from fastcoord import (CoordinatorConfig, Errors, GroupCoordinator, ManualClock,
                       OffsetAndMetadata, SystemClock, shard_for)
from fastcoord.core.store import InMemoryStore


def formed_group(impl, store, clock=None):
    ids = itertools.count()
    coord = GroupCoordinator(CoordinatorConfig(group_initial_rebalance_delay_ms=0,
                                               group_min_session_timeout_ms=10),
                             clock=clock or ManualClock(), store=store, impl=impl,
                             member_id_factory=lambda p: f"m{next(ids)}")
    joined = []
    for _ in range(3):
        coord.join_group("g", "", "consumer", [("range", b"sub")], session_timeout_ms=300,
                         require_known_member_id=False, callback=joined.append)
    coord.advance_time(0) if isinstance(coord.clock, ManualClock) else coord.expire_due()
    return coord, joined


def sync_all(coord, joined):
    leader = joined[0].leader_id
    synced = []
    for r in joined:
        coord.sync_group("g", r.generation_id, r.member_id,
                         {x.member_id: x.member_id.encode() for x in joined}
                         if r.member_id == leader else None, callback=synced.append)
    return synced


def test_load_group_restores_members_assignments_and_offsets(impl):
    store = InMemoryStore()
    coord, joined = formed_group(impl, store)
    assert [r.error for r in sync_all(coord, joined)] == [Errors.NONE] * 3
    assert coord.commit_offsets("g", joined[0].member_id, 1, {("t", 0): 7, ("t", 1): 9}) == \
        {("t", 0): Errors.NONE, ("t", 1): Errors.NONE}

    fresh = GroupCoordinator(CoordinatorConfig(group_min_session_timeout_ms=10),
                             clock=ManualClock(50_000), impl=impl)
    shard = shard_for("g")
    fresh.begin_loading(shard)
    fresh.load_group("g", store.groups["g"], store.offsets["g"])
    # While loading: heartbeat answers NONE blindly, sync REBALANCE_IN_PROGRESS (Kafka).
    assert fresh.heartbeat("g", joined[1].member_id, 1) == Errors.NONE
    fresh.finish_loading(shard)
    before, after = coord.describe_group("g"), fresh.describe_group("g")
    assert after == before and after.state == "Stable"
    assert fresh.fetch_offsets("g")[1][("t", 1)].offset == 9
    # Loaded members get fresh deadlines (now + session): alive 299 ms later, gone at 300.
    assert fresh.heartbeat("g", joined[2].member_id, 1) == Errors.NONE
    fresh.advance_time(299)
    assert len(fresh.describe_group("g").members) == 3
    for r in joined[:2]:                          # two keep heartbeating, the third does not
        assert fresh.heartbeat("g", r.member_id, 1) == Errors.NONE
    fresh.advance_time(1)
    after = fresh.describe_group("g")
    assert after.state == "PreparingRebalance"
    assert {m.member_id for m in after.members} == {r.member_id for r in joined[:2]}


def test_load_group_takes_int_offsets_as_offset_and_metadata(impl):
    coord = GroupCoordinator(clock=ManualClock(), impl=impl)
    coord.begin_loading(shard_for("g"))
    coord.load_group("g", None, {("t", 0): 7, ("t", 1): OffsetAndMetadata(8, "m", 2, 5)})
    coord.finish_loading(shard_for("g"))
    error, offsets = coord.fetch_offsets("g")
    assert error == Errors.NONE
    assert offsets == {("t", 0): OffsetAndMetadata(7), ("t", 1): OffsetAndMetadata(8, "m", 2, 5)}
    assert type(offsets[("t", 0)]) is OffsetAndMetadata


def test_load_group_over_max_size_rebalances(impl):
    store = InMemoryStore()
    coord, joined = formed_group(impl, store)
    sync_all(coord, joined)
    small = GroupCoordinator(CoordinatorConfig(group_max_size=2), clock=ManualClock(), impl=impl)
    small.begin_loading(shard_for("g"))
    small.load_group("g", store.groups["g"], {})
    small.finish_loading(shard_for("g"))
    assert small.describe_group("g").state == "PreparingRebalance"


def test_load_group_twice_is_refused(impl):
    coord = GroupCoordinator(clock=ManualClock(), impl=impl)
    coord.load_group("g", None, {("t", 0): 1})
    with pytest.raises(Exception, match="already loaded"):
        coord.load_group("g", None, {})
    assert coord.fetch_offsets("g")[1][("t", 0)].offset == 1


def test_reaper_expires_a_member_on_a_real_clock(impl):
    """With a SystemClock nothing calls advance_time: the reaper thread must expire the
    member that stops heartbeating, not before its 300 ms session, and soon after it."""
    coord, joined = formed_group(impl, InMemoryStore(), clock=SystemClock())
    with coord:                                   # start() ... close()
        synced = sync_all(coord, joined)
        assert [r.error for r in synced] == [Errors.NONE] * 3
        last_beat = time.monotonic()              # the sync refreshed every session
        gone_after = None
        while time.monotonic() - last_beat < 3.0:
            for r in joined[:2]:                  # member 2 never heartbeats again
                coord.heartbeat("g", r.member_id, 1)
            members = {m.member_id for m in coord.describe_group("g").members}
            if joined[2].member_id not in members:
                gone_after = time.monotonic() - last_beat
                break
            time.sleep(0.01)
    assert gone_after is not None, "the reaper never expired the silent member"
    assert gone_after >= 0.29                     # not before the session timeout
    assert coord._reaper is None                  # close() joined the thread


def test_reaper_close_is_prompt(impl):
    coord = GroupCoordinator(clock=SystemClock(), impl=impl)
    coord.start()
    t = time.monotonic()
    coord.close()
    assert time.monotonic() - t < 0.5


def test_demo_runs_and_ends_stable():
    out = subprocess.run([sys.executable, "-m", "fastcoord", "demo", "--groups", "30",
                          "--seconds", "30"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "30/30 groups stable" in out.stdout
    assert "groups by state: {'Stable': 30}" in out.stdout


def test_group_summary_and_member_ids_follow_describe(impl):
    coord, joined = formed_group(impl, InMemoryStore())

    def check():
        s, d = coord.group_summary("g"), coord.describe_group("g")
        assert (s.error, s.state, s.num_members) == (d.error, d.state, len(d.members))
        assert coord.member_ids("g") == [m.member_id for m in d.members]
        return s

    s1 = check()
    assert (s1.state, s1.generation, s1.num_members) == ("CompletingRebalance", 1, 3)
    sync_all(coord, joined)
    assert coord.heartbeat("g", joined[1].member_id, 1) == Errors.NONE
    coord.commit_offsets("g", joined[1].member_id, 1, {("t", 0): 1})
    s2 = check()
    assert s2.state == "Stable" and s2.members_epoch == s1.members_epoch   # same ids
    coord.leave_group("g", [(joined[2].member_id, None)])
    s3 = check()
    assert s3.num_members == 2 and s3.members_epoch != s2.members_epoch
    # A static member's replacement renames it: the ids change, the count does not.
    got = []
    coord.join_group("g", "", "consumer", [("range", b"sub")], session_timeout_ms=300,
                     group_instance_id="i1", require_known_member_id=False, callback=got.append)
    added = check()                                     # a new member: another id
    assert added.num_members == 3 and added.members_epoch != s3.members_epoch
    coord.advance_time(300)
    s4 = check()                                        # the two silent members expired
    assert s4.num_members == 1 and s4.members_epoch != added.members_epoch
    coord.join_group("g", "", "consumer", [("range", b"sub")], session_timeout_ms=300,
                     group_instance_id="i1", require_known_member_id=False, callback=got.append)
    s5 = check()
    assert s5.num_members == s4.num_members and s5.members_epoch != s4.members_epoch
    assert coord.group_summary("nope") == (Errors.NONE, "Dead", 0, 0, -1)
    assert coord.group_summary(None).error == Errors.INVALID_GROUP_ID
    with pytest.raises(TypeError):
        coord.group_summary(7)
    assert coord.member_ids("nope") == [] and coord.member_ids(None) == []
    with pytest.raises(TypeError, match="group_id"):
        coord.member_ids(7)
    # Epochs never repeat, not even for a group deleted and made again.
    fresh, _ = formed_group(impl, InMemoryStore())
    assert fresh.group_summary("g").members_epoch not in {s.members_epoch for s in
                                                          (s1, s2, s3, s4, s5)}


def test_group_version_moves_with_state_and_member_ids_only(impl):
    coord, joined = formed_group(impl, InMemoryStore())
    seen = [coord.group_version("g")]                   # CompletingRebalance

    def moved() -> bool:
        version = coord.group_version("g")
        fresh = version not in seen
        seen.append(version)
        return fresh

    assert coord.group_summary("g").state == "CompletingRebalance"
    sync_all(coord, joined)                             # -> Stable, the same members
    assert moved()
    assert coord.heartbeat("g", joined[1].member_id, 1) == Errors.NONE
    coord.commit_offsets("g", joined[1].member_id, 1, {("t", 0): 1})
    assert not moved()                                  # neither state nor ids changed
    coord.leave_group("g", [(joined[2].member_id, None)])
    assert moved() and coord.group_summary("g").state == "PreparingRebalance"
    got = []
    coord.join_group("g", joined[0].member_id, "consumer", [("range", b"sub")],
                     session_timeout_ms=300, callback=got.append)
    assert not moved() and not got                      # a known member rejoins: waits
    assert coord.group_version("nope") == -1
    assert coord.group_version(None) == -2              # INVALID_GROUP_ID

    class Name(str):                                    # (the checked path's answer)
        pass
    assert coord.group_version(Name("g")) == coord.group_version("g") == seen[-1]
    coord.unload_shard(shard_for("g", coord.config.num_shards))
    assert coord.group_version("g") == -2               # NOT_COORDINATOR
    with pytest.raises(TypeError, match="group_id"):
        coord.group_version(7)


def test_advance_time_checks_its_step_and_its_clock(impl):
    class Ms(int):
        pass

    class Later(ManualClock):
        __slots__ = ()
    for clock in (ManualClock(10), Later(10)):
        coord = GroupCoordinator(clock=clock, impl=impl)
        for bad, error in ((True, TypeError), (1.5, TypeError), (None, TypeError),
                           (-1, ValueError), (2**62 + 1, ValueError), (2**80, ValueError)):
            with pytest.raises(error, match="ms"):
                coord.advance_time(bad)
        with pytest.raises(ValueError, match="2\\*\\*62"):    # the target is beyond
            coord.advance_time(2**62 - 5)
        assert clock.now_ms() == 10
        assert coord.advance_time(Ms(5)) == 0 and clock.now_ms() == 15
        assert coord.advance_time(5) == 0 and clock.now_ms() == 20
    with pytest.raises(TypeError, match="ManualClock"):
        GroupCoordinator(clock=SystemClock(), impl=impl).advance_time(1)


def test_advance_time_on_a_clock_set_out_of_range_names_it(impl):
    """A clock set beyond the timer's range: both twins answer the same ValueError and
    leave the clock where it was."""
    for far in (2**62 + 7, 2**70, -(2**70)):
        clock = ManualClock(0)
        coord = GroupCoordinator(clock=clock, impl=impl)
        clock._now = far                        # (set_ms would refuse only going back)
        with pytest.raises(ValueError, match="now_ms out of range"):
            coord.advance_time(1)
        assert clock.now_ms() == far


def test_set_time_if_idle_moves_only_the_clock_when_nothing_can_tell(impl):
    clock = ManualClock(0)
    coord = GroupCoordinator(CoordinatorConfig(), clock=clock, impl=impl)
    assert coord.set_time_if_idle(100) and clock.now_ms() == 100      # nothing scheduled
    assert coord.set_time_if_idle(50) and clock.now_ms() == 100       # never goes back
    assert not coord.set_time_if_idle(400) and clock.now_ms() == 100  # next 400 ms window
    coord.advance_time(300)
    assert coord.set_time_if_idle(799) and not coord.set_time_if_idle(800)
    got = []
    coord.join_group("g", "", "consumer", [("range", b"")], session_timeout_ms=6000,
                     require_known_member_id=False, callback=got.append)
    coord.advance_time(2900 - clock.now_ms())          # the initial delay ends at 3799
    assert coord.set_time_if_idle(3198) and not coord.set_time_if_idle(3200)
    coord.advance_time(3600 - clock.now_ms())
    # (the wheel's bucket of the deadline may expire a little before it: conservative)
    assert coord.set_time_if_idle(3700) and not coord.set_time_if_idle(3799) and not got
    coord.advance_time(3798 - clock.now_ms())
    assert not got
    coord.advance_time(1)
    assert got and got[0].error == Errors.NONE
    with pytest.raises(TypeError):
        coord.set_time_if_idle(1.5)
    with pytest.raises(ValueError):
        coord.set_time_if_idle(-1)
    # Session deadlines can be under 400 ms: the level they land in is the 20 ms one
    short = GroupCoordinator(CoordinatorConfig(group_min_session_timeout_ms=399),
                             clock=ManualClock(0), impl=impl)
    assert short.set_time_if_idle(19) and not short.set_time_if_idle(20)
    with pytest.raises(TypeError):
        GroupCoordinator(CoordinatorConfig(), clock=SystemClock(), impl=impl).set_time_if_idle(1)


@pytest.mark.parametrize("min_session,sessions", [(6000, (6000, 7000)), (300, (300, 450))],
                         ids=["sessions-over-400ms", "sessions-under-400ms"])
def test_set_time_if_idle_before_heartbeats_and_commits_changes_nothing(impl, min_session,
                                                                        sessions):
    """Random joins, leaves, heartbeats and commits, with the clock set by
    set_time_if_idle before heartbeats and commits whenever it agrees, against the same
    run with advance_time every time: the same answers, callbacks and states. With
    session timeouts under the wheel's 400 ms level, the 20 ms level must stay put."""
    import random

    def run(lazy):
        rng = random.Random(5)
        clock = ManualClock(0)
        ids = itertools.count()
        config = CoordinatorConfig(group_initial_rebalance_delay_ms=500,
                                   group_min_session_timeout_ms=min_session)
        coord = GroupCoordinator(config, clock=clock, impl=impl,
                                 member_id_factory=lambda p: f"m{next(ids)}")
        log, gens = [], {}

        def joined(result):
            log.append(("join", clock.now_ms(), result.error, result.member_id,
                        result.generation_id))
            if result.error == Errors.NONE:
                gens[result.member_id] = result.generation_id
                coord.sync_group("g", result.generation_id, result.member_id,
                                 {m.member_id: b"" for m in result.members} or None,
                                 callback=lambda r: log.append(("sync", clock.now_ms(), r.error)))

        now = 0
        for step in range(3000):
            now += rng.choice((0, 1, 3, 40, 150, 700))
            kind = rng.random()
            if kind < 0.5 and gens:
                mid = rng.choice(sorted(gens))
                if lazy and coord.set_time_if_idle(now):
                    log.append(("idle", now))
                else:
                    coord.advance_time(now - clock.now_ms())
                if rng.random() < 0.6:
                    log.append(("hb", now, coord.heartbeat("g", mid, gens[mid])))
                else:
                    log.append(("commit", now, coord.commit_offsets(
                        "g", mid, gens[mid], {("t", 0): step})))
            else:
                coord.advance_time(now - clock.now_ms())
                if kind < 0.57 or not gens:
                    coord.join_group("g", "", "consumer", [("range", b"")],
                                     session_timeout_ms=rng.choice(sessions),
                                     require_known_member_id=False, callback=joined)
                elif kind < 0.6:
                    coord.leave_group("g", [(rng.choice(sorted(gens)), None)])
                elif kind < 0.65:
                    mid = rng.choice(sorted(gens))
                    coord.join_group("g", mid, "consumer", [("range", b"")],
                                     session_timeout_ms=sessions[0], callback=joined)
            log.append(("state", coord.describe_group("g")))
        coord.advance_time(60_000)
        log.append(("end", coord.describe_group("g"), len(coord._logic.timer)))
        return log

    lazy = run(True)
    idle = sum(1 for e in lazy if e[0] == "idle")
    assert [e for e in lazy if e[0] != "idle"] == run(False)
    assert sum(1 for e in lazy if e[0] == "hb") > 500
    # the clock really was set without the timer, often with time moving
    assert idle > 200 and len({e[1] for e in lazy if e[0] == "idle"}) > 100


HOT_PATHS = ("heartbeat", "heartbeat_batch", "heartbeat_handle", "member_handle",
             "consumer_group_heartbeat")


def test_hot_paths_are_declared_on_the_class(impl):
    """The hot paths are methods of GroupCoordinator, with docstrings and signatures
    (help(), IDEs and type checkers read the class), while an instance holds each bound
    to its member table's method (no Python frame in the native twin); called through
    the class, each answers what the instance's does."""
    import inspect

    import numpy as np
    for name in HOT_PATHS:
        method = inspect.getattr_static(GroupCoordinator, name)
        assert callable(method) and method.__doc__, name
        assert list(inspect.signature(method).parameters)[0] == "self", name
    coord, joined = formed_group(impl, InMemoryStore())
    for name in HOT_PATHS:
        assert getattr(coord, name).__self__ is coord.member_table, name
    member, generation = joined[0].member_id, joined[0].generation_id
    assert (GroupCoordinator.heartbeat(coord, "g", member, generation)
            == coord.heartbeat("g", member, generation))
    assert (GroupCoordinator.heartbeat(coord, "g", member, generation + 1)
            == coord.heartbeat("g", member, generation + 1) == Errors.ILLEGAL_GENERATION)
    handle = GroupCoordinator.member_handle(coord, "g", member)
    assert handle == coord.member_handle("g", member) != -1
    assert GroupCoordinator.member_handle(coord, "g", "nobody") == -1
    assert (GroupCoordinator.heartbeat_handle(coord, handle, generation)
            == coord.heartbeat_handle(handle, generation))
    handles, gens = np.array([handle, handle], np.int64), np.array([generation, 0], np.int32)
    assert (GroupCoordinator.heartbeat_batch(coord, handles, gens).tolist()
            == coord.heartbeat_batch(handles, gens).tolist())


def test_coordinators_of_a_twin_share_their_delayed_operation_classes(impl):
    """The group logic of every coordinator of a twin takes the same DelayedJoin,
    InitialDelayedJoin and DelayedSync (core/groups.py _delayed_op_classes), made once:
    classes of its own cost every coordinator (one per replayed shard) three class
    creations, and left three cyclic class graphs for the collector."""
    first, joined = formed_group(impl, InMemoryStore())
    second, _ = formed_group(impl, InMemoryStore())
    assert first._logic._join_ops is second._logic._join_ops
    assert first._logic._sync_ops is second._logic._sync_ops
    assert all(s.error == Errors.NONE for s in sync_all(first, joined))   # still theirs to run


def test_make_result_builds_the_named_tuple_and_refuses_a_non_tuple_type(impl):
    """The member table's make_result (every answer the group logic builds) gives what
    the class itself gives, typed as it; a class that is no tuple is a TypeError, not
    an object whose memory the items are written past."""
    from fastcoord.core.results import JoinGroupMember
    coord = GroupCoordinator(CoordinatorConfig(), clock=ManualClock(), impl=impl)
    made = coord.member_table.make_result(JoinGroupMember, ("m-1", None, b"meta"))
    assert type(made) is JoinGroupMember and made == JoinGroupMember("m-1", None, b"meta")
    assert made.member_id == "m-1" and made.metadata == b"meta"
    offset = coord.member_table.make_result(OffsetAndMetadata, (7, "", -1, 5))
    assert type(offset) is OffsetAndMetadata and offset == OffsetAndMetadata(7, "", -1, 5)
    assert coord.member_table.make_result(tuple, (1, 2)) == (1, 2)
    with pytest.raises(TypeError):
        coord.member_table.make_result(dict, (1,))

"""What a coordinator does when it loads its groups (a restart, or a shard moving here),
against Apache Kafka: the classic groups of Kafka 3.x's GroupMetadataManager
(loadGroupsAndOffsets) and GroupCoordinator.onGroupLoaded, Kafka 4's
GroupMetadataManager.replay(GroupMetadataKey/Value) and onLoaded, and Kafka 4's consumer
groups (onLoaded: sessions scheduled anew at the group's consumer session timeout,
members in UNREVOKED_PARTITIONS given their rebalance timeout). Each test builds a group
over an InMemoryStore, loads what the store holds into a second coordinator, and checks
what a client sees there. Both twins.
"""
from __future__ import annotations

import itertools

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock
from fastcoord.core.consumer_embedded import encode_assignment, encode_subscription
from fastcoord.core.store import InMemoryStore

E = Errors
SESSION = 10_000          # the classic members' session timeout
REBALANCE = 30_000        # every member's rebalance timeout
CONSUMER_SESSION = 45_000  # Kafka's group.consumer.session.timeout.ms default


# -- helpers ----------------------------------------------------------------------------
_COORDS = itertools.count()


def make(impl, store=None, now=0, **config):
    """A coordinator whose member ids are unique across coordinators (as Kafka's
    UUIDs are): a reloaded coordinator never makes an id a loaded member has."""
    config.setdefault("group_initial_rebalance_delay_ms", 0)
    ids = itertools.count()
    tag = next(_COORDS)
    coord = GroupCoordinator(CoordinatorConfig(**config), clock=ManualClock(now), impl=impl,
                             store=store,
                             member_id_factory=lambda prefix: f"m{next(ids)}-c{tag}")
    coord.set_topics({"t": 6})
    return coord


def reload(impl, store, group="g", now=0, group_config=None, **config):
    """A new coordinator (its clock at `now`) that loaded `group` from `store`, with
    `group_config` set for the group before the load."""
    again = make(impl, now=now, **config)
    if group_config:
        again.set_group_config(group, group_config)
    shards = [s for s in range(again.config.num_shards) if again.owns_shard(s)]
    for s in shards:
        again.begin_loading(s)
    again.load_group(group, store.groups.get(group), store.offsets.get(group, {}))
    for s in shards:
        again.finish_loading(s)
    return again


def sub(owned=None, generation=-1):
    return encode_subscription(["t"], None, owned, generation)


def cjoin(coord, member_id, instance_id=None, protocols=None, session=SESSION):
    out = []
    coord.join_group("g", member_id, "consumer", protocols or [("range", sub())],
                     session_timeout_ms=session, rebalance_timeout_ms=REBALANCE,
                     group_instance_id=instance_id, require_known_member_id=False,
                     callback=out.append)
    return out


def csync(coord, generation, member_id, assignments=None, instance_id=None):
    out = []
    coord.sync_group("g", generation, member_id, assignments, group_instance_id=instance_id,
                     callback=out.append)
    return out


def classic_group(coord, assignments, instance_ids=None):
    """A Stable classic group, one member per entry of `assignments` (partitions of
    "t"); returns the join answers in join order (the first is the leader's)."""
    instance_ids = instance_ids or [None] * len(assignments)
    answers = [cjoin(coord, "", instance_id=i) for i in instance_ids]
    coord.advance_time(1)
    results = [a[0] for a in answers]
    assert all(r.error == E.NONE for r in results), results
    plan = {r.member_id: encode_assignment({"t": ps}) for r, ps in zip(results, assignments)}
    for r, i in zip(results, instance_ids):
        synced = csync(coord, r.generation_id, r.member_id,
                       plan if r.member_id == r.leader_id else None, instance_id=i)
        assert synced and synced[0].error == E.NONE, synced
    return results


def chb(coord, member_id, epoch, **kw):
    out = []
    coord.consumer_group_heartbeat("g", member_id, epoch, callback=out.append, **kw)
    assert len(out) == 1, out
    return out[0]


def cg_join(coord, member_id, **kw):
    kw.setdefault("subscribed_topic_names", ["t"])
    return chb(coord, member_id, 0, rebalance_timeout_ms=REBALANCE, owned_partitions={}, **kw)


def cg_members(coord):
    d = coord.consumer_group_describe(["g"])[0]
    assert d.error == E.NONE, d
    return d, {m.member_id: m for m in d.members}


def settle(coord):
    for _ in range(8):
        d, members = cg_members(coord)
        for m in members.values():
            chb(coord, m.member_id, m.member_epoch, instance_id=m.instance_id,
                owned_partitions=m.assignment)
        if cg_members(coord)[0].state == "Stable":
            return
    raise AssertionError("the group did not settle")


# =======================================================================================
# classic groups
# =======================================================================================
def test_a_group_restarted_before_the_leaders_sync_comes_back_at_its_stored_generation(impl):
    """Kafka writes a classic group's record with the leader's SyncGroup (or when it
    becomes Empty), never when a join completes: a coordinator that restarts while the
    group is CompletingRebalance loads the generation of the last sync, Stable, with its
    assignments; a SyncGroup of the newer generation is ILLEGAL_GENERATION there (the
    members rejoin), a heartbeat of the stored one NONE."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    first = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    stored = coord.describe_group("g")
    gen = first[0].generation_id
    # a rebalance: both rejoin, the join completes (CompletingRebalance), no sync yet
    a, b = cjoin(coord, first[0].member_id), cjoin(coord, first[1].member_id)
    coord.advance_time(1)
    assert a and b and a[0].generation_id == gen + 1
    assert coord.group_summary("g").state == "CompletingRebalance"

    again = reload(impl, store, now=5_000)
    assert again.describe_group("g") == stored
    assert again.group_summary("g").generation == gen
    assert csync(again, gen + 1, first[1].member_id)[0].error == E.ILLEGAL_GENERATION
    assert again.heartbeat("g", first[1].member_id, gen) == E.NONE


def test_a_loaded_group_at_its_max_size_stays_stable(impl):
    """onLoaded prepares a rebalance only when the group has more members than
    group.max.size (strictly)."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    classic_group(coord, [[0, 1], [2, 3], [4, 5]])
    again = reload(impl, store, group_max_size=3)
    assert again.group_summary("g").state == "Stable"


def test_a_loaded_group_over_its_max_size_keeps_only_max_size_rejoining_members(impl):
    """Kafka: the over-capacity group loaded prepares a rebalance; in
    PreparingRebalance a rejoin is accepted while fewer than group.max.size members
    await their join (acceptJoiningMember), so the last of three to rejoin is refused
    GROUP_MAX_SIZE_REACHED and removed, and the next generation has two members."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    first = classic_group(coord, [[0, 1], [2, 3], [4, 5]])
    gen = first[0].generation_id
    again = reload(impl, store, group_max_size=2)
    assert again.group_summary("g").state == "PreparingRebalance"
    answers = [cjoin(again, r.member_id) for r in first]
    assert answers[2] and answers[2][0].error == E.GROUP_MAX_SIZE_REACHED
    # (Kafka 3.x completes the join at once, all remaining members having joined;
    # 4.x when the rebalance timeout passes: either way before the sessions matter,
    # as members awaiting their join are not expired)
    if not (answers[0] and answers[1]):
        again.advance_time(REBALANCE)
    assert answers[0] and answers[1], answers
    assert [a[0].error for a in answers[:2]] == [E.NONE, E.NONE]
    assert answers[0][0].generation_id == gen + 1
    assert sorted(m.member_id for m in answers[0][0].members) == \
        sorted(r.member_id for r in first[:2])
    assert sorted(again.member_ids("g")) == sorted(r.member_id for r in first[:2])


def test_the_loaded_leader_stays_leader_when_it_rejoins(impl):
    """The record's leader is the loaded group's leader (replay: leaderId from the
    record); a rebalance after the load in which it rejoins keeps it leader, whoever
    rejoins first."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    first = classic_group(coord, [[0, 1], [2, 3], [4, 5]])
    leader = first[0].leader_id
    again = reload(impl, store)
    followers = [r.member_id for r in first if r.member_id != leader]
    answers = [cjoin(again, followers[1], protocols=[("range", sub(owned={"t": [4]}))])]
    answers += [cjoin(again, m) for m in (followers[0], leader)]
    again.advance_time(1)
    assert all(a for a in answers), answers
    assert {a[0].leader_id for a in answers} == {leader}


def test_a_loaded_static_member_restarting_with_an_unknown_id_gets_its_assignment(impl):
    """A static member's instance id is loaded with it: rejoining with an unknown member
    id (a restarted client) with the same protocol replaces its member id without a
    rebalance (a follower in a Stable group), and its sync returns its stored
    assignment; the old member id is fenced."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    first = classic_group(coord, [[0, 1, 2], [3, 4, 5]], instance_ids=["i0", "i1"])
    gen = first[0].generation_id
    follower = first[1]
    again = reload(impl, store)
    r = cjoin(again, "", instance_id="i1")
    assert r and r[0].error == E.NONE and r[0].generation_id == gen
    assert r[0].member_id != follower.member_id
    assert again.group_summary("g").state == "Stable"
    s = csync(again, gen, r[0].member_id, instance_id="i1")
    assert s and s[0].error == E.NONE
    assert s[0].assignment == encode_assignment({"t": [3, 4, 5]})
    assert again.heartbeat("g", follower.member_id, gen, "i1") == E.FENCED_INSTANCE_ID


def test_a_loaded_empty_group_keeps_its_generation_and_offsets(impl):
    """An Empty group's record (written as its last member left) loads Empty at its
    generation, with its protocol type and offsets; the next member's join makes the
    generation after it."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    first = classic_group(coord, [[0, 1, 2, 3, 4, 5]])
    gen = first[0].generation_id
    assert coord.commit_offsets("g", first[0].member_id, gen, {("t", 0): 11}) == {
        ("t", 0): E.NONE}
    coord.leave_group("g", [(first[0].member_id, None)])
    before = coord.describe_group("g")
    assert before.state == "Empty"
    again = reload(impl, store)
    after = again.describe_group("g")
    assert after == before and after.protocol_type == "consumer"
    assert again.group_summary("g").generation == coord.group_summary("g").generation
    assert again.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 11
    r = cjoin(again, "")
    again.advance_time(1)
    assert r and r[0].generation_id == coord.group_summary("g").generation + 1


# =======================================================================================
# consumer groups (Kafka 4)
# =======================================================================================
def mixed_group(coord):
    """A consumer group: classic members (session SESSION) and c1 (consumer protocol),
    the first classic member left in UNREVOKED_PARTITIONS by its rejoin (it still owns
    a partition of c1's target)."""
    first = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    assert cg_join(coord, "c1").error == E.NONE
    gen = first[0].generation_id
    m1, m2 = first[0].member_id, first[1].member_id
    assert cjoin(coord, m1, protocols=[("range", sub(owned={"t": [0, 1, 2]}, generation=gen))])
    return m1, m2


def test_loaded_classic_members_of_a_consumer_group_keep_their_own_session_timeout(impl):
    """Not as Kafka (docs/consumer-protocol.md): Kafka 4's onLoaded schedules every
    member's session with the group's consumer session timeout (45 s by default),
    classic members too, until their next heartbeat, join or sync. Here a classic
    member keeps the session timeout it joined with across the load: silent, it is
    fenced a classic session (10 s) after the load, as it would have been before."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    m1, m2 = mixed_group(coord)
    again = reload(impl, store)
    _, members = cg_members(again)
    assert set(members) == {m1, m2, "c1"}
    again.advance_time(SESSION - 1)
    assert set(cg_members(again)[1]) == {m1, m2, "c1"}
    c1 = cg_members(again)[1]["c1"]
    chb(again, "c1", c1.member_epoch, owned_partitions=c1.assignment)
    again.advance_time(1)
    assert set(cg_members(again)[1]) == {"c1"}


def test_a_loaded_classic_member_still_revoking_gets_its_rebalance_timeout(impl):
    """Kafka 4's onLoaded gives every member in UNREVOKED_PARTITIONS its rebalance
    timeout, whatever its protocol (no useClassicProtocol check there): a classic member
    loaded while revoking, that keeps heartbeating but never rejoins to finish its
    revocation, is fenced when the rebalance timeout after the load passes (its epoch
    unchanged). The other classic member (Stable, behind the group epoch) is only told
    to rejoin by its heartbeats (REBALANCE_IN_PROGRESS), which start its join timeout
    (a rebalance timeout from its first such heartbeat, 5 s after the load): it is
    still there when the revoking member's rebalance timeout fires."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    m1, m2 = mixed_group(coord)
    assert store.groups["g"]["members"][m1]["state"] == 1      # UNREVOKED_PARTITIONS
    assert store.groups["g"]["members"][m2]["state"] == 0
    again = reload(impl, store)
    for _ in range(REBALANCE // 5_000):
        again.advance_time(5_000)
        _, members = cg_members(again)
        for mid, m in members.items():
            if mid == "c1":
                chb(again, "c1", m.member_epoch, owned_partitions=m.assignment)
            else:
                assert again.heartbeat("g", mid, m.member_epoch) == E.REBALANCE_IN_PROGRESS
    assert again.clock.now_ms() == REBALANCE
    _, members = cg_members(again)
    assert m2 in members and "c1" in members
    assert m1 not in members


def test_a_loaded_static_member_away_at_epoch_minus_two(impl):
    """A static member that left for now (epoch -2) is loaded as such: rejoining with
    its instance id (epoch 0, a new member id) gets its partitions back at its epoch;
    not rejoining, it is removed a consumer session after the load (onLoaded schedules
    its session too) and the group epoch moves."""
    for rejoin in (True, False):
        store = InMemoryStore()
        coord = make(impl, store=store)
        assert cg_join(coord, "a", instance_id="ia").error == E.NONE
        assert cg_join(coord, "b").error == E.NONE
        settle(coord)
        _, members = cg_members(coord)
        a = members["a"]
        assert chb(coord, "a", -2, instance_id="ia").member_epoch == -2
        before, _ = cg_members(coord)
        again = reload(impl, store, now=1_000)
        assert cg_members(again)[0] == before
        if rejoin:
            r = cg_join(again, "a2", instance_id="ia")
            assert (r.error, r.member_epoch) == (E.NONE, a.member_epoch)
            assert r.assignment == a.assignment
            assert cg_members(again)[0].group_epoch == before.group_epoch
        else:
            again.advance_time(CONSUMER_SESSION - 1)
            assert "a" in cg_members(again)[1]
            b = cg_members(again)[1]["b"]
            chb(again, "b", b.member_epoch, owned_partitions=b.assignment)
            again.advance_time(1)
            d, members = cg_members(again)
            assert "a" not in members and d.group_epoch == before.group_epoch + 1


def test_a_loaded_empty_consumer_group_keeps_its_epoch(impl):
    """An Empty consumer group loads Empty at its group epoch (replay of its epoch
    record); the next member makes epoch + 1."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    assert cg_join(coord, "a").error == E.NONE
    assert cg_join(coord, "b").error == E.NONE
    settle(coord)
    for m in ("a", "b"):
        assert chb(coord, m, -1).error == E.NONE
    before, _ = cg_members(coord)
    assert before.state == "Empty"
    again = reload(impl, store)
    assert cg_members(again)[0] == before
    r = cg_join(again, "c")
    assert (r.error, r.member_epoch) == (E.NONE, before.group_epoch + 1)


def test_a_loaded_member_behind_its_target_is_given_it_on_its_next_heartbeat(impl):
    """The target assignment is replayed with its epoch: a member that had not yet
    heartbeated since the target moved gets the new epoch and assignment on its first
    heartbeat after the load, and the group settles without a new target (the group
    epoch stays)."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    assert cg_join(coord, "a").error == E.NONE
    settle(coord)
    assert cg_join(coord, "b").error == E.NONE          # a must give partitions to b
    before, members = cg_members(coord)
    assert members["a"].member_epoch < before.group_epoch
    again = reload(impl, store, now=1_000)
    assert cg_members(again)[0] == before
    a = members["a"]
    r = chb(again, "a", a.member_epoch, owned_partitions=a.assignment)
    assert r.error == E.NONE and r.assignment is not None      # its assignment moved
    settle(again)
    after, members = cg_members(again)
    assert after.group_epoch == before.group_epoch == after.assignment_epoch
    assert {m.member_epoch for m in members.values()} == {before.group_epoch}


def test_the_group_session_config_applies_to_loaded_members(impl):
    """onLoaded's session timeout is the group's (consumerGroupSessionTimeoutMs(groupId):
    its consumer.session.timeout.ms config when it has one): members loaded into a
    group configured for 60 s are still there 45 s after the load."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    assert cg_join(coord, "a").error == E.NONE
    settle(coord)
    again = reload(impl, store, group_config={"consumer.session.timeout.ms": 60_000})
    again.advance_time(CONSUMER_SESSION)
    assert "a" in cg_members(again)[1]
    again.advance_time(60_000 - CONSUMER_SESSION)
    assert cg_members(again)[1] == {}

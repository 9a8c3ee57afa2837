"""Online migration between the classic and the consumer group protocols (Kafka 4's
mixed groups, core/consumer_mixed.py), both twins.

Translations of Kafka's GroupMetadataManagerTest upgrade, downgrade and mixed-group
cases (testOnlineMigration*, testClassicGroupJoin/Sync/Heartbeat/LeaveToConsumerGroup*,
testConsumerGroupHeartbeatToClassicGroup*), written against fastcoord's API, then
rolling restarts driven by simulated clients: a classic group whose members move one by
one to the consumer protocol, and back. Time is a ManualClock: every test is bounded by
its loops.
"""
import pytest

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock
from fastcoord.core.consumer_embedded import (
    decode_assignment, decode_subscription, encode_assignment, encode_subscription,
)
from fastcoord.core.store import DeferredStore, InMemoryStore
from helpers.classic_clients import range_assign, take_join_answer

E = Errors
TOPICS = {"t": 6}
SESSION = 10_000        # the classic members' session timeout
REBALANCE = 30_000


def make(impl, store=None, **config):
    config.setdefault("group_initial_rebalance_delay_ms", 0)
    clock = ManualClock(0)
    coord = GroupCoordinator(CoordinatorConfig(**config), clock=clock, impl=impl, store=store)
    coord.set_topics(TOPICS)
    return coord


def sub(topics=("t",), owned=None, generation=-1, rack=None):
    return encode_subscription(list(topics), rack, owned, generation)


def cjoin(coord, member_id, protocols=None, instance_id=None, require_known=False,
          protocol_type="consumer", session=SESSION, group="g"):
    """A classic JoinGroup; its answer (a list: empty while it is parked)."""
    out = []
    coord.join_group(group, member_id, protocol_type, protocols or [("range", sub())],
                     session_timeout_ms=session, rebalance_timeout_ms=REBALANCE,
                     group_instance_id=instance_id, require_known_member_id=require_known,
                     callback=out.append)
    return out


def csync(coord, generation, member_id, assignments=None, instance_id=None,
          protocol_type=None, protocol_name=None, group="g"):
    out = []
    coord.sync_group(group, generation, member_id, assignments, group_instance_id=instance_id,
                     protocol_type=protocol_type, protocol_name=protocol_name,
                     callback=out.append)
    return out


def chb(coord, member_id, epoch, group="g", **kw):
    """A consumer-protocol heartbeat; its answer."""
    out = []
    coord.consumer_group_heartbeat(group, member_id, epoch, callback=out.append, **kw)
    assert len(out) == 1, out
    return out[0]


def cg_join(coord, member_id, topics=("t",), group="g", **kw):
    return chb(coord, member_id, 0, group=group, rebalance_timeout_ms=REBALANCE,
               subscribed_topic_names=list(topics), owned_partitions={}, **kw)


def group_type(coord, group="g"):
    return {g.group_id: g.group_type for g in coord.list_groups()}.get(group)


def described(coord, group="g"):
    d = coord.consumer_group_describe([group])[0]
    assert d.error == E.NONE, d
    return d, {m.member_id: m for m in d.members}


def classic_group(coord, assignments, group="g"):
    """A Stable classic group: one member per entry of `assignments` (the partitions of
    "t" the leader gives it). Returns [(member id, generation)] in that order."""
    answers = [cjoin(coord, "", group=group) for _ in assignments]
    coord.advance_time(1)
    assert all(len(a) == 1 and a[0].error == E.NONE for a in answers), answers
    results = [a[0] for a in answers]
    by_id = {r.member_id: encode_assignment({"t": ps}) for r, ps in zip(results, assignments)}
    for r in results:
        synced = csync(coord, r.generation_id, r.member_id,
                       by_id if r.member_id == r.leader_id else None, group=group)
        assert synced and synced[0].error == E.NONE, synced
    return [(r.member_id, r.generation_id) for r in results]


# ---------------------------------------------------------------------------------------
# the embedded protocol's decoder (hostile bytes)
# ---------------------------------------------------------------------------------------
def test_embedded_protocol_round_trips_and_refuses_hostile_bytes():
    data = encode_subscription(["a", "b"], "rack1", {"a": [1, 0]}, 7)
    s = decode_subscription(data)
    assert (s.version, s.topics, s.owned, s.generation, s.rack_id) == \
        (3, ["a", "b"], {"a": [0, 1]}, 7, "rack1")
    assert decode_assignment(encode_assignment({"t": [2, 1]}, 1)) == {"t": [1, 2]}
    assert decode_assignment(b"") == {}
    v0 = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
    assert decode_subscription(v0).topics == ["t"] and decode_subscription(v0).owned == {}
    for bad in (b"", b"\x00", b"\xff\xff\x00\x00\x00\x00", b"\x00\x00\x7f\xff\xff\xff",
                b"\x00\x00\x00\x00\x00\x01\x00\x05ab", b"\x00\x00\x00\x00\x00\x01\x00\x02\xff\xfe"
                + b"\xff\xff\xff\xff", data[:-3], None, 12):
        with pytest.raises(ValueError):
            decode_subscription(bad)
    for bad in (b"\x00", b"\x00\x03\x7f\xff\xff\xff", b"\x00\x03\x00\x00\x00\x01\x00\x01t\x40\x00\x00\x00"):
        with pytest.raises(ValueError):
            decode_assignment(bad)


# ---------------------------------------------------------------------------------------
# upgrade (testOnlineMigrationClassicToConsumer*, testConsumerGroupHeartbeatToClassicGroup)
# ---------------------------------------------------------------------------------------
def test_a_consumer_join_upgrades_a_classic_group(impl):
    coord = make(impl)
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    assert coord.commit_offsets("g", m1, gen, {("t", 0): 42}) == {("t", 0): E.NONE}
    r = cg_join(coord, "c1")
    assert r.error == E.NONE and r.member_epoch == gen + 1
    assert group_type(coord) == "consumer"
    d, members = described(coord)
    assert set(members) == {m1, m2, "c1"}
    assert d.group_epoch == gen + 1
    assert (members[m1].classic, members[m2].classic, members["c1"].classic) == \
        (True, True, False)
    # the classic members come at the classic generation, owning their assignment
    assert members[m1].member_epoch == gen and members[m1].assignment == {"t": [0, 1, 2]}
    assert members[m2].member_epoch == gen and members[m2].assignment == {"t": [3, 4, 5]}
    # nothing given twice: c1 gets only what nobody owns (nothing yet)
    assert r.assignment == {}
    assert coord.fetch_offsets("g")[1][("t", 0)].offset == 42


def test_upgrade_answers_parked_joins_rebalance_in_progress(impl):
    coord = make(impl)
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    parked = cjoin(coord, m1, protocols=[("range", sub(("t", "u")))])   # a new rebalance
    assert parked == []
    r = cg_join(coord, "c1")
    assert r.error == E.NONE
    assert [p.error for p in parked] == [E.REBALANCE_IN_PROGRESS]
    # the classic member heartbeats at its generation: it must rejoin
    assert coord.heartbeat("g", m1, gen) == E.REBALANCE_IN_PROGRESS
    assert coord.heartbeat("g", m2, gen + 5) == E.ILLEGAL_GENERATION


@pytest.mark.parametrize("policy, upgraded", [("bidirectional", True), ("upgrade", True),
                                              ("downgrade", False), ("disabled", False)])
def test_upgrade_follows_the_migration_policy(impl, policy, upgraded, caplog):
    coord = make(impl, group_consumer_migration_policy=policy)
    (m1, gen), _ = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    with caplog.at_level("INFO", logger="fastcoord.coordinator"):
        r = cg_join(coord, "c1")
    assert (r.error == E.NONE) == upgraded
    assert group_type(coord) == ("consumer" if upgraded else "classic")
    if not upgraded:
        assert r.error == E.GROUP_ID_NOT_FOUND
        assert "the online upgrade is disabled" in caplog.text     # refused for the policy
        assert coord.heartbeat("g", m1, gen) == E.NONE             # the group untouched


def test_the_classic_rounds_of_an_upgraded_group_end_with_it(impl):
    """The initial join round still under way when a group upgrades is over: after a
    downgrade, its old timer does not end the new round early."""
    coord = make(impl, group_initial_rebalance_delay_ms=3000)
    first = [cjoin(coord, "") for _ in range(2)]        # parked: the initial delay
    assert first == [[], []]
    coord.advance_time(100)
    assert cg_join(coord, "c1").error == E.NONE
    assert [a[0].error for a in first] == [E.REBALANCE_IN_PROGRESS] * 2
    m1, m2 = \
        [m for m in described(coord)[1] if m != "c1"]
    coord.advance_time(100)
    assert chb(coord, "c1", -1).error == E.NONE         # downgraded, rebalancing
    assert coord.group_summary("g").state == "PreparingRebalance"
    rejoined = cjoin(coord, m1)
    coord.advance_time(3000)                            # past the first round's delay
    coord.heartbeat("g", m2, coord.group_summary("g").generation)
    assert rejoined == []                               # still waiting for m2
    assert set(coord.member_ids("g")) == {m1, m2}
    other = cjoin(coord, m2)
    assert rejoined and other and rejoined[0].error == other[0].error == E.NONE


def test_upgrade_refuses_another_protocol_type_a_too_big_group_and_bad_bytes(impl):
    coord = make(impl)
    for mid in ("", ""):
        cjoin(coord, mid, group="connect", protocol_type="connect",
              protocols=[("v1", b"anything")])
    coord.advance_time(1)
    assert cg_join(coord, "c1", group="connect").error == E.GROUP_ID_NOT_FOUND
    assert group_type(coord, "connect") == "classic"

    small = make(impl, group_consumer_max_size=1)
    classic_group(small, [[0, 1, 2], [3, 4, 5]])
    assert cg_join(small, "c1").error == E.GROUP_ID_NOT_FOUND
    assert group_type(small) == "classic"
    # at the limit: the group would fit, the joining member would not
    full = make(impl, group_consumer_max_size=2)
    classic_group(full, [[0, 1, 2], [3, 4, 5]])
    assert cg_join(full, "c1").error == E.GROUP_MAX_SIZE_REACHED
    assert group_type(full) == "classic"
    roomy = make(impl, group_consumer_max_size=3)
    classic_group(roomy, [[0, 1, 2], [3, 4, 5]])
    assert cg_join(roomy, "c1").error == E.NONE
    assert group_type(roomy) == "consumer"

    bad = make(impl)
    answers = [cjoin(bad, "", protocols=[("range", b"\x00\x03\x00\x00")]) for _ in range(2)]
    bad.advance_time(1)
    assert all(a[0].error == E.NONE for a in answers)
    assert cg_join(bad, "c1").error == E.GROUP_ID_NOT_FOUND
    assert group_type(bad) == "classic"
    # the classic group is untouched: its members still heartbeat
    r = answers[0][0]
    assert bad.heartbeat("g", r.member_id, r.generation_id) in (E.NONE, E.REBALANCE_IN_PROGRESS)


def test_a_join_with_an_invalid_regex_leaves_the_classic_group_as_it_was(impl):
    """Kafka converts, then refuses the regex, and the conversion goes with the request's
    records: the group stays classic, its members undisturbed."""
    coord = make(impl)
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    r = chb(coord, "c1", 0, rebalance_timeout_ms=REBALANCE, subscribed_topic_regex="t(",
            owned_partitions={})
    assert r.error == E.INVALID_REGULAR_EXPRESSION
    assert r.error_message.startswith("SubscribedTopicRegex `t(` is not a valid regular "
                                      "expression")
    assert group_type(coord) == "classic"
    assert coord.heartbeat("g", m1, gen) == E.NONE
    assert coord.heartbeat("g", m2, gen) == E.NONE
    assert {m.member_id for m in coord.describe_group("g").members} == {m1, m2}
    # a valid one converts it
    r = chb(coord, "c1", 0, rebalance_timeout_ms=REBALANCE, subscribed_topic_regex="t.*",
            owned_partitions={})
    assert r.error == E.NONE and group_type(coord) == "consumer"


def test_a_static_member_restarts_with_the_consumer_protocol_keeping_its_partitions(impl):
    # (a classic static member is replaced at once: only two consumer-protocol members
    # need the old one to have left, epoch -2)
    coord = make(impl)
    answers = [cjoin(coord, "", instance_id=i) for i in ("i1", "i2")]
    coord.advance_time(1)
    r1, r2 = answers[0][0], answers[1][0]
    leader = r1 if r1.leader_id == r1.member_id else r2
    plan = {r1.member_id: encode_assignment({"t": [0, 1, 2]}),
            r2.member_id: encode_assignment({"t": [3, 4, 5]})}
    for r in (r1, r2):
        csync(coord, r.generation_id, r.member_id, plan if r is leader else None,
              instance_id=r.member_id and ("i1" if r is r1 else "i2"))
    assert coord.group_summary("g").state == "Stable"
    r = cg_join(coord, "c1", instance_id="i1")
    assert r.error == E.NONE and r.assignment == {"t": [0, 1, 2]}
    _, members = described(coord)
    assert set(members) == {"c1", r2.member_id} and not members["c1"].classic
    # the old incarnation is fenced
    assert coord.heartbeat("g", r1.member_id, r1.generation_id, "i1") == E.FENCED_INSTANCE_ID
    # c1, in the classic member's place, has the consumer protocol's session (45 s), not
    # the classic member's 10 s it took the place of
    coord.advance_time(SESSION + 1)
    assert "c1" in described(coord)[1]
    coord.advance_time(45_000 - SESSION - 2)
    assert "c1" in described(coord)[1]
    coord.advance_time(1)
    assert "c1" not in described(coord)[1]


# ---------------------------------------------------------------------------------------
# classic members in a consumer group (testClassicGroup*ToConsumerGroup*)
# ---------------------------------------------------------------------------------------
def test_classic_rejoin_sync_and_heartbeat_in_a_consumer_group(impl):
    coord = make(impl)
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    cg_join(coord, "c1")
    _, members = described(coord)
    # m1 rejoins (eagerly: it owns nothing now); its answer is its member epoch
    joined = cjoin(coord, m1)
    assert len(joined) == 1 and joined[0].error == E.NONE
    j = joined[0]
    assert (j.member_id, j.protocol_type, j.protocol_name, j.leader_id, j.members) == \
        (m1, "consumer", "range", "", [])
    _, members = described(coord)
    assert j.generation_id == members[m1].member_epoch == gen + 1
    synced = csync(coord, j.generation_id, m1, protocol_type="consumer", protocol_name="range")
    assert synced[0].error == E.NONE
    assert decode_assignment(synced[0].assignment) == members[m1].assignment
    assert coord.heartbeat("g", m1, j.generation_id) in (E.NONE, E.REBALANCE_IN_PROGRESS)
    # the wrong generation, protocol, or a consumer-protocol member
    assert csync(coord, j.generation_id + 1, m1)[0].error == E.ILLEGAL_GENERATION
    assert csync(coord, j.generation_id, m1, protocol_name="roundrobin")[0].error == \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert csync(coord, j.generation_id, m1, protocol_type="connect")[0].error == \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert coord.heartbeat("g", "c1", 2) == E.UNKNOWN_MEMBER_ID
    assert csync(coord, 2, "c1")[0].error == E.UNKNOWN_MEMBER_ID
    assert coord.heartbeat("g", "nobody", 2) == E.UNKNOWN_MEMBER_ID


def test_a_classic_member_with_partitions_to_revoke_is_told_to_rejoin(impl):
    coord = make(impl)
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    cg_join(coord, "c1")
    # m1 rejoins still owning its partitions (a cooperative client): it must revoke first
    owned = {"t": [0, 1, 2]}
    j = cjoin(coord, m1, protocols=[("range", sub(owned=owned, generation=gen))])[0]
    _, members = described(coord)
    target = set(members[m1].target_assignment.get("t", []))
    assert len(target) == 2             # (three members, six partitions)
    assert j.generation_id == gen       # it keeps its epoch while it revokes
    assert coord.heartbeat("g", m1, gen) == E.REBALANCE_IN_PROGRESS
    # the sync gives what it keeps (not what it must give up)
    s = csync(coord, gen, m1)[0]
    assert s.error == E.NONE
    assert set(decode_assignment(s.assignment).get("t", [])) == target & {0, 1, 2}
    # having revoked, it rejoins and moves to the group's epoch
    j = cjoin(coord, m1, protocols=[("range", sub(owned={"t": sorted(target & {0, 1, 2})},
                                                  generation=gen))])[0]
    assert j.generation_id == described(coord)[0].group_epoch


def test_new_classic_member_joins_a_consumer_group(impl):
    coord = make(impl)
    cg_join(coord, "c1")
    r = cjoin(coord, "", require_known=True)[0]
    assert r.error == E.MEMBER_ID_REQUIRED and r.member_id
    j = cjoin(coord, r.member_id)[0]
    assert j.error == E.NONE and j.member_id == r.member_id
    d, members = described(coord)
    assert set(members) == {"c1", r.member_id}
    assert j.generation_id == members[r.member_id].member_epoch
    # a protocol type other than "consumer", or no protocol in common, is refused
    assert cjoin(coord, "", protocol_type="connect")[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    assert cjoin(coord, "", protocols=[("roundrobin", sub())])[0].error == \
        E.INCONSISTENT_GROUP_PROTOCOL
    # a consumer-protocol member's id joining with JoinGroup turns it classic (Kafka)
    assert cjoin(coord, "c1")[0].error == E.NONE
    assert described(coord)[1]["c1"].classic


def test_classic_offsets_in_a_consumer_group_are_checked_by_generation(impl):
    coord = make(impl)
    (m1, gen), _ = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    cg_join(coord, "c1")
    # a classic client commits with OffsetCommit below v9: allowed for a classic member
    assert coord.commit_offsets("g", m1, gen, {("t", 1): 7}, api_version=8) == \
        {("t", 1): E.NONE}
    assert coord.commit_offsets("g", m1, gen + 3, {("t", 1): 8}, api_version=8) == \
        {("t", 1): E.ILLEGAL_GENERATION}
    assert coord.commit_offsets("g", "c1", 1, {("t", 1): 8}, api_version=8) == \
        {("t", 1): E.UNSUPPORTED_VERSION}


def test_classic_leave_from_a_consumer_group(impl):
    coord = make(impl)
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    cg_join(coord, "c1")
    cg_join(coord, "c2")
    epoch = described(coord)[0].group_epoch
    # (a LeaveGroup removes members of either protocol: the admin client's removal,
    # KAFKA-18188)
    result = coord.leave_group("g", [(m1, None), ("c2", None), ("nobody", None)])
    assert result.member_errors == [E.NONE, E.NONE, E.UNKNOWN_MEMBER_ID]
    d, members = described(coord)
    assert set(members) == {m2, "c1"} and d.group_epoch == epoch + 1
    assert group_type(coord) == "consumer"
    # several in one request: the epoch moves once
    r = cjoin(coord, "")[0]
    epoch = described(coord)[0].group_epoch
    assert coord.leave_group("g", [(m2, None), (r.member_id, None)]).member_errors == \
        [E.NONE, E.NONE]
    d, members = described(coord)
    assert set(members) == {"c1"} and d.group_epoch == epoch + 1


def test_classic_member_that_does_not_rejoin_or_sync_in_time_is_fenced(impl):
    coord = make(impl)
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    cg_join(coord, "c1")
    assert coord.heartbeat("g", m1, gen) == E.REBALANCE_IN_PROGRESS   # its join timeout
    j = cjoin(coord, m2)[0]                                           # its sync timeout
    for _ in range(REBALANCE // 5000 + 1):
        coord.advance_time(5000)
        chb(coord, "c1", described(coord)[1]["c1"].member_epoch)
        coord.heartbeat("g", m1, gen)          # (keeps its session: not a rejoin)
        coord.heartbeat("g", m2, j.generation_id)
    d, members = described(coord)
    assert set(members) == {"c1"}


def test_classic_member_session_runs_on_its_join_session_timeout(impl):
    coord = make(impl)
    cg_join(coord, "c1")
    short, long = cjoin(coord, "", session=6000)[0], cjoin(coord, "", session=20_000)[0]
    assert short.error == long.error == E.NONE
    for _ in range(2):                  # c1 heartbeats; the classic members are silent
        coord.advance_time(3500)
        chb(coord, "c1", described(coord)[1]["c1"].member_epoch)
    members = described(coord)[1]
    assert short.member_id not in members and long.member_id in members


# ---------------------------------------------------------------------------------------
# downgrade (testOnlineMigrationConsumerToClassic*, testLastConsumerProtocolMember*)
# ---------------------------------------------------------------------------------------
def mixed_group(coord):
    """A consumer group of c1 (consumer protocol) and two classic members m1, m2."""
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    cg_join(coord, "c1")
    return m1, m2


def test_last_consumer_member_leaving_downgrades_with_a_rebalance(impl):
    coord = make(impl)
    m1, m2 = mixed_group(coord)
    epoch = described(coord)[0].group_epoch
    r = chb(coord, "c1", -1)
    assert r.error == E.NONE
    assert group_type(coord) == "classic"
    summary = coord.group_summary("g")
    # (the generation is the group epoch before the member left, as Kafka converts
    # instead of fencing)
    assert summary.state == "PreparingRebalance" and summary.generation == epoch
    assert set(coord.member_ids("g")) == {m1, m2}
    # the classic members rejoin the classic group as usual
    assert coord.heartbeat("g", m1, epoch) == E.REBALANCE_IN_PROGRESS
    a, b = cjoin(coord, m1), cjoin(coord, m2)
    assert a and b and a[0].generation_id == b[0].generation_id == epoch + 1
    assert coord.group_summary("g").state == "CompletingRebalance"


def test_last_consumer_member_fenced_by_session_timeout_downgrades(impl):
    coord = make(impl, group_consumer_session_timeout_ms=6000,
                 group_consumer_min_session_timeout_ms=6000)
    m1, m2 = mixed_group(coord)
    _, members = described(coord)
    gens = {m: members[m].member_epoch for m in (m1, m2)}
    for _ in range(3):                    # c1 falls silent; the classic members do not
        coord.advance_time(5000)
        for m in (m1, m2):
            coord.heartbeat("g", m, gens[m])
    assert group_type(coord) == "classic"
    assert set(coord.member_ids("g")) == {m1, m2}


@pytest.mark.parametrize("policy, downgraded", [("bidirectional", True), ("downgrade", True),
                                                ("upgrade", False), ("disabled", False)])
def test_downgrade_follows_the_migration_policy(impl, policy, downgraded, caplog):
    coord = make(impl)
    cg_join(coord, "c1")                # (a mixed group without an upgrade)
    m1, m2 = cjoin(coord, "")[0].member_id, cjoin(coord, "")[0].member_id
    # the policy changes once the group is mixed (with "disabled" from the start, the
    # classic members could not have joined: KAFKA-20640)
    coord._logic.consumers.mixed.config = CoordinatorConfig(
        group_consumer_migration_policy=policy)
    with caplog.at_level("INFO", logger="fastcoord.coordinator"):
        assert chb(coord, "c1", -1).error == E.NONE
    assert group_type(coord) == ("classic" if downgraded else "consumer")
    if downgraded:
        assert set(coord.member_ids("g")) == {m1, m2}
    else:
        assert set(described(coord)[1]) == {m1, m2}
        assert "the online downgrade is disabled" in caplog.text


def test_no_downgrade_over_the_classic_max_size(impl):
    coord = make(impl)
    m1, m2 = mixed_group(coord)
    coord._logic.consumers.mixed.config = CoordinatorConfig(group_max_size=1)
    assert chb(coord, "c1", -1).error == E.NONE
    assert group_type(coord) == "consumer"


def test_classic_static_member_replacing_the_last_consumer_member_downgrades(impl):
    coord = make(impl)
    cg_join(coord, "c1", instance_id="i1")
    r = cjoin(coord, "", require_known=True)[0]
    cjoin(coord, r.member_id)
    # a classic static member takes over instance i1
    j = cjoin(coord, "", instance_id="i1")
    assert j and j[0].error == E.NONE
    assert group_type(coord) == "classic"
    assert coord.group_summary("g").state == "Stable"      # no rebalance: a replacement
    assert set(coord.member_ids("g")) == {r.member_id, j[0].member_id}
    assert coord.heartbeat("g", j[0].member_id, j[0].generation_id, "i1") == E.NONE
    assert coord.heartbeat("g", "c1", j[0].generation_id, "i1") == E.FENCED_INSTANCE_ID


def test_downgrade_gives_each_member_its_target_assignment(impl):
    coord = make(impl)
    cg_join(coord, "c1", instance_id="i1")
    r = cjoin(coord, "", require_known=True)[0]
    cjoin(coord, r.member_id)
    for _ in range(5):                         # c1 revokes, the classic member rejoins
        d, members = described(coord)
        chb(coord, "c1", members["c1"].member_epoch,
            owned_partitions={"t": members["c1"].assignment.get("t", [])})
        cjoin(coord, r.member_id)
    d, members = described(coord)
    target = members[r.member_id].target_assignment
    new = cjoin(coord, "", instance_id="i1")[0]
    assert group_type(coord) == "classic"
    s = csync(coord, new.generation_id, r.member_id)[0]
    assert s.error == E.NONE and decode_assignment(s.assignment) == target


# ---------------------------------------------------------------------------------------
# durability: classic members of a consumer group are in its record
# ---------------------------------------------------------------------------------------
def test_a_mixed_group_goes_back_to_its_stored_state_when_a_write_fails(impl):
    """A consumer join and a classic join whose writes fail: neither member is added,
    as Kafka reverts the failed append; the classic members carry on as before."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    m1, m2 = mixed_group(coord)

    def seen():
        d, members = described(coord)
        return d.group_epoch, d.assignment_epoch, {
            m: (x.member_epoch, x.assignment, x.target_assignment, x.classic)
            for m, x in members.items()}

    before = seen()
    beats = {m: coord.heartbeat("g", m, before[2][m][0]) for m in (m1, m2)}
    store.fail_with = E.NOT_COORDINATOR          # a full disk
    assert cg_join(coord, "c2").error == E.NOT_COORDINATOR
    assert seen() == before
    joined = cjoin(coord, "")
    assert [j.error for j in joined] == [E.NOT_COORDINATOR]
    assert seen() == before
    store.fail_with = E.NONE
    assert {m: coord.heartbeat("g", m, before[2][m][0]) for m in (m1, m2)} == beats
    assert cg_join(coord, "c2").error == E.NONE
    assert "c2" in described(coord)[1]


def test_a_revert_keeps_the_classic_members_session_ends(impl):
    """m2 (classic, 10 s sessions) last heartbeats at 0; at 6 s a consumer join fails
    to be written and the group is reverted. m2's session still ends at 10 s, as
    Kafka's session timers, which a revert leaves alone; m1 and c1, which go on
    heartbeating, stay."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    m1, m2 = mixed_group(coord)
    _, members = described(coord)
    coord.advance_time(3000)
    assert coord.heartbeat("g", m1, members[m1].member_epoch) in (E.NONE, E.REBALANCE_IN_PROGRESS)
    coord.advance_time(3000)                              # 6 s
    store.fail_with = E.NOT_COORDINATOR
    assert cg_join(coord, "c2").error == E.NOT_COORDINATOR
    store.fail_with = E.NONE
    for _ in range(3):                                    # to 10.5 s
        coord.advance_time(1500)
        chb(coord, "c1", described(coord)[1]["c1"].member_epoch)
        coord.heartbeat("g", m1, members[m1].member_epoch)
    assert set(described(coord)[1]) == {"c1", m1}


def test_a_revert_keeps_a_classic_members_deadline_to_rejoin(impl):
    """c2 joins at 0 s and m1, a classic member, is told to rejoin (within 30 s); at
    10 s c3's join fails. m1 goes on heartbeating without rejoining: it is fenced at
    30 s, as Kafka's join timer, which a revert leaves alone."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    m1, m2 = mixed_group(coord)
    assert cg_join(coord, "c2").error == E.NONE
    _, members = described(coord)
    epochs = {m: members[m].member_epoch for m in (m1, m2)}
    assert coord.heartbeat("g", m1, epochs[m1]) == E.REBALANCE_IN_PROGRESS
    seen = {}
    for step in range(1, 16):                             # every 2 s, to 30 s
        coord.advance_time(2_000)
        if step == 5:                                     # 10 s
            store.fail_with = E.NOT_COORDINATOR
            assert cg_join(coord, "c3").error == E.NOT_COORDINATOR
            store.fail_with = E.NONE
        for m in (m1, m2):                                # (sessions of 10 s)
            coord.heartbeat("g", m, epochs[m])
        for c in ("c1", "c2"):
            chb(coord, c, described(coord)[1][c].member_epoch)
        seen[coord.clock.now_ms() // 1000] = m1 in described(coord)[1]
    assert seen[28] and not seen[30], seen


def reload_classic(impl, store):
    """A new coordinator that loaded group "g" from `store`."""
    again = make(impl)
    shards = [s for s in range(again.config.num_shards) if again.owns_shard(s)]
    for s in shards:
        again.begin_loading(s)
    again.load_group("g", store.groups.get("g"), store.offsets.get("g", {}))
    for s in shards:
        again.finish_loading(s)
    return again


def test_a_conversion_whose_write_failed_leaves_the_classic_group(impl):
    """The consumer join that converts a Stable classic group fails to be written: as
    Kafka's conversion goes with the failed append, the group is the classic group
    again, its members Stable at their generation with their assignments, as a restart
    would load it; the retried join converts it."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    before = coord.describe_group("g")
    assert before.state == "Stable" and store.groups["g"]["generation"] == gen
    store.fail_with = E.NOT_COORDINATOR          # a full disk
    assert cg_join(coord, "c1").error == E.NOT_COORDINATOR
    assert group_type(coord) == "classic"
    assert coord.describe_group("g") == before == reload_classic(impl, store).describe_group("g")
    assert [coord.heartbeat("g", m, gen) for m in (m1, m2)] == [E.NONE, E.NONE]
    assert coord.consumer_group_describe(["g"])[0].error == E.GROUP_ID_NOT_FOUND
    store.fail_with = E.NONE
    assert cg_join(coord, "c1").error == E.NONE
    assert group_type(coord) == "consumer"
    assert set(described(coord)[1]) == {m1, m2, "c1"}


def test_a_failed_conversion_keeps_the_classic_members_session_ends(impl):
    """m2 (10 s sessions) last heartbeats at 0; at 6 s a converting consumer join fails
    to be written and the classic group is back. m2's session still ends at 10 s, as
    Kafka's session timers, which the failed conversion leaves alone; m1 stays."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    coord.advance_time(6000)
    assert coord.heartbeat("g", m1, gen) == E.NONE
    store.fail_with = E.NOT_COORDINATOR
    assert cg_join(coord, "c1").error == E.NOT_COORDINATOR
    store.fail_with = E.NONE
    assert group_type(coord) == "classic"
    for _ in range(3):                                    # to 10.5 s
        coord.advance_time(1500)
        coord.heartbeat("g", m1, gen)
    assert set(coord.member_ids("g")) == {m1}


def test_a_failed_conversion_keeps_every_protocol_the_members_offered(impl):
    """Members offering two protocols (range chosen): after a failed conversion, a
    follower's JoinGroup offering the same two is its current generation's answer, no
    rebalance, as Kafka's classic group, which the failed conversion left as it was."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    both = [("range", sub()), ("roundrobin", sub())]
    first = [cjoin(coord, "", protocols=both) for _ in range(2)]
    coord.advance_time(1)
    results = [a[0] for a in first]
    assert all(r.error == E.NONE for r in results), results
    leader = next(r for r in results if r.member_id == r.leader_id)
    gen = leader.generation_id
    assignments = {r.member_id: encode_assignment({"t": ps})
                   for r, ps in zip(results, ([0, 1, 2], [3, 4, 5]))}
    for r in results:
        synced = csync(coord, gen, r.member_id, assignments if r is leader else None)
        assert synced and synced[0].error == E.NONE, synced
    store.fail_with = E.NOT_COORDINATOR
    assert cg_join(coord, "c1").error == E.NOT_COORDINATOR
    store.fail_with = E.NONE
    follower = next(r for r in results if r is not leader)    # (a leader's rejoin rebalances)
    again = cjoin(coord, follower.member_id, protocols=both)
    assert again and (again[0].error, again[0].generation_id) == (E.NONE, gen)
    assert coord.describe_group("g").state == "Stable"


def test_a_failed_conversion_of_a_rebalancing_group_rebalances_it_again(impl):
    """A classic group in a rebalance (a third member's join parked) is converted and
    the write fails: the parked join was answered REBALANCE_IN_PROGRESS by the
    conversion, so the classic group rebalances again and its members' rejoins
    complete a new generation."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    parked = cjoin(coord, m1)           # the leader rejoins: a rebalance starts
    assert parked == []
    store.fail_with = E.NOT_COORDINATOR
    assert cg_join(coord, "c1").error == E.NOT_COORDINATOR
    assert [p.error for p in parked] == [E.REBALANCE_IN_PROGRESS]
    assert group_type(coord) == "classic"
    assert coord.describe_group("g").state == "PreparingRebalance"
    assert coord.heartbeat("g", m2, gen) == E.REBALANCE_IN_PROGRESS
    store.fail_with = E.NONE
    answers = [cjoin(coord, m) for m in (m1, m2)]
    coord.advance_time(1)
    assert [(a[0].error, a[0].generation_id) for a in answers] == [(E.NONE, gen + 1)] * 2


def test_a_conversion_whose_assignor_raised_leaves_the_classic_group(impl):
    """The converting join's target cannot be computed (the assignor raises): the join
    answers UNKNOWN_SERVER_ERROR and the group is the classic group again."""
    coord = make(impl, store=InMemoryStore())
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    before = coord.describe_group("g")
    real = coord._logic.consumers.assign
    coord._logic.consumers.assign = lambda *args: 1 / 0
    assert cg_join(coord, "c1").error == E.UNKNOWN_SERVER_ERROR
    assert group_type(coord) == "classic" and coord.describe_group("g") == before
    assert [coord.heartbeat("g", m, gen) for m in (m1, m2)] == [E.NONE, E.NONE]
    coord._logic.consumers.assign = real
    assert cg_join(coord, "c1").error == E.NONE and group_type(coord) == "consumer"


def test_an_empty_classic_group_taken_over_comes_back_when_the_write_fails(impl):
    """A consumer join takes over an empty classic group (its offsets stay with it);
    the write fails: the empty classic group is back, offsets and all."""
    store = InMemoryStore()
    coord = make(impl, store=store)
    (m1, gen), = classic_group(coord, [[0, 1, 2, 3, 4, 5]])
    assert coord.commit_offsets("g", m1, gen, {("t", 0): 7}) == {("t", 0): E.NONE}
    assert coord.leave_group("g", [(m1, None)]).error == E.NONE
    assert coord.describe_group("g").state == "Empty"
    store.fail_with = E.NOT_COORDINATOR
    assert cg_join(coord, "c1").error == E.NOT_COORDINATOR
    assert group_type(coord) == "classic"
    d = coord.describe_group("g")
    assert (d.state, d.protocol_type) == ("Empty", "consumer")
    err, offsets = coord.fetch_offsets("g", [("t", 0)])
    assert (err, offsets[("t", 0)].offset) == (E.NONE, 7)
    store.fail_with = E.NONE
    assert cg_join(coord, "c1").error == E.NONE and group_type(coord) == "consumer"


class ParkingStore(DeferredStore):
    """Writes at once, as InMemoryStore, until `parking` is set; then as DeferredStore."""

    def __init__(self):
        super().__init__()
        self.parking = False

    def store_group(self, *args):
        (DeferredStore if self.parking else InMemoryStore).store_group(self, *args)

    def store_consumer_group(self, *args):
        (DeferredStore if self.parking else InMemoryStore).store_consumer_group(self, *args)


def downgrade_pending(impl):
    """A mixed group (c1, classic m1 and m2) whose records are all stored, and c1's
    leave, which downgrades it, with the downgrade's record on its way:
    (coord, store, the leave's answers, the consumer group's description before)."""
    store = ParkingStore()
    coord = make(impl, store=store)
    mixed_group(coord)
    before = described(coord)
    store.parking = True
    left = []
    coord.consumer_group_heartbeat("g", "c1", -1, callback=left.append)
    assert group_type(coord) == "classic"
    assert [p[0] for p in store.pending] == ["group"]       # the classic record
    return coord, store, left, before


def test_a_downgrade_is_answered_once_its_record_is_stored(impl):
    coord, store, left, _ = downgrade_pending(impl)
    assert left == []
    store.complete(0, E.NONE)
    assert [r.error for r in left] == [E.NONE]
    assert group_type(coord) == "classic"
    assert store.groups["g"]["generation"] == coord.group_summary("g").generation


def test_a_group_whose_downgrade_is_on_its_way_is_described_as_the_store_holds_it(impl):
    """ConsumerGroupDescribe answers from the last committed state, as Kafka's: until
    the downgrade's classic record is stored, the store (and so a restart) holds the
    consumer group with c1 in it."""
    coord, store, left, (d0, members0) = downgrade_pending(impl)
    d, members = described(coord)
    assert (d.state, d.group_epoch, d.assignment_epoch) == \
        (d0.state, d0.group_epoch, d0.assignment_epoch)
    assert members == members0 and "c1" in members
    store.complete(0, E.NONE)
    d = coord.consumer_group_describe(["g"])[0]
    assert (d.error, d.error_message) == (E.GROUP_ID_NOT_FOUND, "Group g is not a consumer group.")


def test_a_group_whose_upgrade_is_on_its_way_is_still_the_classic_group(impl):
    """A classic group converted by c1's join: until the consumer group's first record is
    stored, the store holds the classic group (Kafka's describe at the committed offset
    finds a classic group)."""
    store = ParkingStore()
    coord = make(impl, store=store)
    classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    store.parking = True
    joined = []
    coord.consumer_group_heartbeat("g", "c1", 0, callback=joined.append,
                                   rebalance_timeout_ms=REBALANCE,
                                   subscribed_topic_names=["t"], owned_partitions={})
    assert joined == [] and group_type(coord) == "consumer"
    d = coord.consumer_group_describe(["g"])[0]
    assert (d.error, d.error_message) == (E.GROUP_ID_NOT_FOUND, "Group g is not a consumer group.")
    store.complete_all()
    assert [r.error for r in joined] == [E.NONE]
    d, members = described(coord)
    assert set(members) == {"c1"} | set(coord.member_ids("g")) and len(members) == 3


def test_a_downgrade_whose_write_failed_is_the_consumer_group_again(impl):
    """Kafka reverts the failed append of a downgrade: the group is the consumer group
    the store holds (the member that left is in it again) and the leave fails; the
    classic members' rejoins, parked in the downgrade's rebalance, are answered
    REBALANCE_IN_PROGRESS and join the consumer group as classic members again."""
    coord, store, left, (d0, members0) = downgrade_pending(impl)
    m1, m2 = (m for m in members0 if m != "c1")
    rejoin = cjoin(coord, m1)
    assert rejoin == []                                  # parked: the classic rebalance
    store.complete(0, E.NOT_COORDINATOR)                 # a full disk
    assert [r.error for r in left] == [E.NOT_COORDINATOR]
    assert [r.error for r in rejoin] == [E.REBALANCE_IN_PROGRESS]
    assert group_type(coord) == "consumer"
    d, members = described(coord)
    assert (d.group_epoch, d.assignment_epoch) == (d0.group_epoch, d0.assignment_epoch)
    assert {m: (x.member_epoch, x.assignment, x.classic) for m, x in members.items()} == \
        {m: (x.member_epoch, x.assignment, x.classic) for m, x in members0.items()}
    assert store.groups["g"]["consumer"]                 # the store held it all along
    again = cjoin(coord, m1)
    beat = []
    coord.consumer_group_heartbeat("g", "c1", members["c1"].member_epoch, callback=beat.append)
    store.complete_all()
    assert [r.error for r in again + beat] == [E.NONE, E.NONE]
    # the leave, retried, downgrades the group
    retried = []
    coord.consumer_group_heartbeat("g", "c1", -1, callback=retried.append)
    store.complete_all()
    assert [r.error for r in retried] == [E.NONE] and group_type(coord) == "classic"


def test_a_downgrade_by_a_session_timeout_whose_write_failed_is_reverted(impl):
    """c1 falls silent and its session fences it, downgrading the group; the record
    fails: the consumer group is back with c1 in it, its session starting again."""
    store = ParkingStore()
    coord = make(impl, store=store, group_consumer_session_timeout_ms=6000,
                 group_consumer_min_session_timeout_ms=6000)
    m1, m2 = mixed_group(coord)
    d0, members0 = described(coord)
    gens = {m: members0[m].member_epoch for m in (m1, m2)}
    store.parking = True
    for _ in range(2):                    # c1 falls silent; the classic members do not
        coord.advance_time(4000)
        for m in (m1, m2):
            coord.heartbeat("g", m, gens[m])
    assert group_type(coord) == "classic" and [p[0] for p in store.pending] == ["group"]
    store.complete(0, E.NOT_COORDINATOR)
    assert group_type(coord) == "consumer"
    d, members = described(coord)
    assert d.group_epoch == d0.group_epoch and set(members) == {"c1", m1, m2}
    beat = []
    coord.consumer_group_heartbeat("g", "c1", members["c1"].member_epoch, callback=beat.append)
    store.complete_all()
    assert [b.error for b in beat] == [E.NONE]


def test_a_static_replacement_that_downgrades_waits_for_the_record(impl):
    """A classic static member takes over the last consumer-protocol member's instance
    id, downgrading the group: its JoinGroup is answered once the classic record is
    stored; when the store refuses it, the join gets the error and c1 is back."""
    for error in (E.NONE, E.NOT_COORDINATOR):
        store = ParkingStore()
        coord = make(impl, store=store)
        cg_join(coord, "c1", instance_id="i1")
        r = cjoin(coord, "", require_known=True)[0]
        cjoin(coord, r.member_id)
        store.parking = True
        j = cjoin(coord, "", instance_id="i1")
        assert j == [] and group_type(coord) == "classic"
        store.complete(0, error)
        assert [x.error for x in j] == [error]
        if error == E.NONE:
            assert set(coord.member_ids("g")) == {r.member_id, j[0].member_id}
        else:
            assert group_type(coord) == "consumer"
            assert set(described(coord)[1]) == {"c1", r.member_id}


def test_a_failed_downgrade_record_with_a_later_classic_one_leaves_the_group_classic(impl):
    """The classic group made by the downgrade completes its rebalance, and its next
    record is given to the store, before the downgrade's fails: that record stands
    for the group, which stays classic; the leave still gets the error."""
    coord, store, left, (_, members0) = downgrade_pending(impl)
    m1, m2 = (m for m in members0 if m != "c1")
    joins = [cjoin(coord, m) for m in (m1, m2)]
    assert all(len(j) == 1 and j[0].error == E.NONE for j in joins), joins
    leader = joins[0][0] if joins[0][0].member_id == joins[0][0].leader_id else joins[1][0]
    synced = csync(coord, leader.generation_id, leader.member_id,
                   {m1: encode_assignment({"t": [0, 1, 2]}),
                    m2: encode_assignment({"t": [3, 4, 5]})})
    assert [p[0] for p in store.pending] == ["group", "group"] and synced == []
    store.complete(0, E.NOT_COORDINATOR)
    assert [r.error for r in left] == [E.NOT_COORDINATOR]
    assert group_type(coord) == "classic"
    store.complete(0, E.NONE)
    assert [s.error for s in synced] == [E.NONE]
    assert coord.group_summary("g").state == "Stable"


def test_classic_members_survive_a_reload(impl):
    store = InMemoryStore()
    coord = make(impl, store=store)
    m1, m2 = mixed_group(coord)
    record = store.groups["g"]
    assert record["consumer"] and record["members"][m1]["classic"]["session_timeout_ms"] == SESSION
    assert record["members"]["c1"]["classic"] is None
    before = described(coord)[1]
    again = make(impl)
    shard = [s for s in range(again.config.num_shards) if again.owns_shard(s)]
    for s in shard:
        again.begin_loading(s)
    again.load_group("g", record, store.offsets.get("g", {}))
    for s in shard:
        again.finish_loading(s)
    after = described(again)[1]
    assert {m: (x.member_epoch, x.assignment) for m, x in after.items()} == \
        {m: (x.member_epoch, x.assignment) for m, x in before.items()}
    assert again.heartbeat("g", m1, after[m1].member_epoch) == E.REBALANCE_IN_PROGRESS
    assert chb(again, "c1", -1).error == E.NONE          # and it still downgrades
    assert group_type(again) == "classic"


# ---------------------------------------------------------------------------------------
# rolling restarts, simulated clients
# ---------------------------------------------------------------------------------------
class ClassicClient:
    """An eager classic consumer: JoinGroup, SyncGroup (range when leader), Heartbeat;
    on REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION it gives up its partitions and
    rejoins."""

    def __init__(self, coord):
        self.coord = coord
        self.member_id = ""
        self.generation = -1
        self.assigned = None        # partitions of "t" once synced; None while rejoining
        self.joining = None
        self.syncing = None

    def step(self):
        c = self.coord
        if self.joining is None and self.syncing is None and self.assigned is None:
            self.joining = cjoin(c, self.member_id, require_known=True)
            return
        if self.joining:
            r = self.joining[0]
            self.joining = None
            if not take_join_answer(self, r):
                return
            assignments = None
            if r.leader_id == r.member_id:
                assignments = {mid: encode_assignment({"t": ps}) for mid, ps in
                               range_assign([m.member_id for m in r.members], TOPICS["t"]).items()}
            self.syncing = csync(c, self.generation, self.member_id, assignments)
            return
        if self.syncing:
            s = self.syncing[0]
            self.syncing = None
            if s.error == E.NONE:
                self.assigned = decode_assignment(s.assignment).get("t", [])
            elif s.error == E.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            return
        if self.assigned is not None:
            error = c.heartbeat("g", self.member_id, self.generation)
            if error != E.NONE:
                self.assigned = None
                if error == E.UNKNOWN_MEMBER_ID:
                    self.member_id = ""

    def commit(self, offset):
        if not self.assigned:
            return {}
        return self.coord.commit_offsets("g", self.member_id, self.generation,
                                         {("t", p): offset for p in self.assigned})

    def leave(self):
        if self.member_id:
            self.coord.leave_group("g", [(self.member_id, None)])

    def stable(self):
        return self.assigned is not None and self.joining is None and self.syncing is None


class ConsumerClient:
    """A consumer-protocol client: it heartbeats what it owns, takes what it is given."""

    def __init__(self, coord, member_id):
        self.coord = coord
        self.member_id = member_id
        self.epoch = 0
        self.assigned = []
        self.last = None

    def step(self):
        if self.epoch == 0:
            r = cg_join(self.coord, self.member_id)
        else:
            r = chb(self.coord, self.member_id, self.epoch,
                    owned_partitions={"t": self.assigned} if self.assigned else {})
        self.last = r.error
        if r.error in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID):
            self.epoch, self.assigned = 0, []
            return
        if r.error != E.NONE:
            return
        self.epoch = r.member_epoch
        if r.assignment is not None:
            self.assigned = r.assignment.get("t", [])

    def commit(self, offset):
        if not self.assigned:
            return {}
        return self.coord.commit_offsets("g", self.member_id, self.epoch,
                                         {("t", p): offset for p in self.assigned},
                                         api_version=9)

    def leave(self):
        chb(self.coord, self.member_id, -1)

    def stable(self):
        return self.last == E.NONE


def settle(coord, clients, rounds=60):
    """Step every client, a second apart, until each is stable, the group is Stable,
    and every partition of "t" is owned by exactly one client. Bounded by `rounds`."""
    for _ in range(rounds):
        for client in clients:
            client.step()
        coord.advance_time(1000)
        owned = sorted(p for c in clients for p in (c.assigned or []))
        states = {g.group_id: g.state for g in coord.list_groups()}
        if all(c.stable() for c in clients) and states.get("g") == "Stable" \
                and owned == list(range(TOPICS["t"])):
            return
    raise AssertionError(f"did not settle: {[(type(c).__name__, c.assigned) for c in clients]}, "
                         f"{coord.list_groups()}")


def test_rolling_restart_from_classic_to_consumer(impl):
    coord = make(impl)
    clients = [ClassicClient(coord) for _ in range(3)]
    settle(coord, clients)
    assert group_type(coord) == "classic"
    for i, c in enumerate(clients):
        assert set(c.commit(100 + i).values()) <= {E.NONE}
    for i in range(3):
        clients[i].leave()
        clients[i] = ConsumerClient(coord, f"c{i}")
        settle(coord, clients)
        assert group_type(coord) == "consumer"
        for j, c in enumerate(clients):     # everyone keeps working, both kinds
            assert set(c.commit(200 + 10 * i + j).values()) <= {E.NONE}
    d, members = described(coord)
    assert set(members) == {"c0", "c1", "c2"} and d.state == "Stable"
    offsets = coord.fetch_offsets("g")[1]
    assert sorted(p for (t, p) in offsets) == list(range(TOPICS["t"]))


def test_rolling_restart_from_consumer_to_classic(impl):
    coord = make(impl)
    clients = [ConsumerClient(coord, f"c{i}") for i in range(3)]
    settle(coord, clients)
    assert group_type(coord) == "consumer"
    for i, c in enumerate(clients):
        assert set(c.commit(100 + i).values()) <= {E.NONE}
    for i in range(3):
        clients[i].leave()
        clients[i] = ClassicClient(coord)
        settle(coord, clients)
        assert group_type(coord) == ("classic" if i == 2 else "consumer")
        for j, c in enumerate(clients):
            assert set(c.commit(200 + 10 * i + j).values()) <= {E.NONE}
    assert coord.group_summary("g").state == "Stable"
    assert len(coord.member_ids("g")) == 3
    offsets = coord.fetch_offsets("g")[1]
    assert sorted(p for (t, p) in offsets) == list(range(TOPICS["t"]))


# ---------------------------------------------------------------------------------------
# the member table hands over a consumer group's heartbeats, and only those
# ---------------------------------------------------------------------------------------
def test_the_table_asks_the_group_logic_only_for_consumer_groups(impl):
    coord = make(impl)
    (m1, gen), _ = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    asked = []
    table = coord.member_table
    mixed = table.mixed_heartbeat

    def fallback(*args):
        asked.append(args)
        return mixed(*args)

    table.mixed_heartbeat = fallback
    assert coord.heartbeat("g", m1, gen) == E.NONE
    assert coord.heartbeat("g", "stranger", gen) == E.UNKNOWN_MEMBER_ID
    assert coord.heartbeat("g", m1, gen, "nobody") == E.UNKNOWN_MEMBER_ID
    assert asked == []                  # a classic group: the table answers alone
    cg_join(coord, "c1")
    assert coord.heartbeat("g", m1, gen) == E.REBALANCE_IN_PROGRESS
    assert coord.heartbeat("g", "c1", 1, "nobody") == E.UNKNOWN_MEMBER_ID
    assert asked == [("g", m1, gen, None), ("g", "c1", 1, "nobody")]


def test_a_classic_join_in_a_consumer_group_is_answered_once_stored(impl):
    from fastcoord.core.store import DeferredStore
    store = DeferredStore()
    coord = make(impl, store=store)
    chb_out = []
    coord.consumer_group_heartbeat("g", "c1", 0, rebalance_timeout_ms=REBALANCE,
                                   subscribed_topic_names=["t"], owned_partitions={},
                                   callback=chb_out.append)
    store.complete_all()
    assert chb_out and chb_out[0].error == E.NONE
    joined = cjoin(coord, "")
    assert joined == []                 # its member is written first
    record = store.pending[-1][2]
    [(member_id, m)] = [(k, v) for k, v in record["members"].items() if k != "c1"]
    assert m["classic"]["session_timeout_ms"] == SESSION
    store.complete_all()
    assert joined and joined[0].error == E.NONE and joined[0].member_id == member_id
    # a failed write answers its error
    again = cjoin(coord, "", protocols=[("range", sub(("t", "u")))])
    store.complete_all(E.NOT_COORDINATOR)
    assert again and again[0].error == E.NOT_COORDINATOR


def test_heartbeats_from_other_threads_while_the_group_converts(impl):
    """Classic heartbeats race upgrades and downgrades (the table reads the group's kind
    without its lock, the group logic re-checks under it): every answer is one a
    heartbeat may get, nothing raises, nothing deadlocks."""
    import threading
    coord = make(impl)
    current = dict(classic_group(coord, [[0, 1, 2], [3, 4, 5]]))   # member id -> generation
    allowed = {E.NONE, E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID}
    seen, errors, stop, beats = set(), [], threading.Event(), [0]

    def beat():
        try:
            while not stop.is_set():
                for member_id, gen in list(current.items()):
                    seen.add(coord.heartbeat("g", member_id, gen))
                    beats[0] += 1
        except Exception as exc:        # (reported below, with the test's failure)
            errors.append(exc)

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(30):
            assert cg_join(coord, "c1").error == E.NONE
            assert group_type(coord) == "consumer"
            members = described(coord)[1]
            current.update((m, members[m].member_epoch) for m in current)
            assert chb(coord, "c1", -1).error == E.NONE
            assert group_type(coord) == "classic"
            current.update((m, coord.group_summary("g").generation) for m in current)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors and not any(t.is_alive() for t in threads)
    # (which answers the threads saw depends on how they were scheduled against the
    # conversions: only that each is a possible one, and that they ran, is certain)
    assert seen <= allowed and beats[0] > 0

"""Online migration between the classic and the consumer group protocols: cases of
Kafka's GroupMetadataManagerTest (4.0/4.1) that test_consumer_migration.py does not pin
down, written against fastcoord's API (both twins). Each test names the Kafka test or
code path (GroupMetadataManager unless said) whose outcome it asserts.
"""
from fastcoord.core.consumer_embedded import decode_assignment

from tests.core.test_consumer_migration import (
    E, REBALANCE, cg_join, chb, cjoin, classic_group, csync, described, group_type,
    make, mixed_group, sub,
)


def epoch_of(coord, member_id):
    return described(coord)[1][member_id].member_epoch


def classic_static_pair(coord):
    """A consumer group: static consumer-protocol member c1 (instance i1) and a dynamic
    classic member m, which joined (and synced) after c1. Returns m's id."""
    cg_join(coord, "c1", instance_id="i1")
    r = cjoin(coord, "", require_known=True)[0]
    j = cjoin(coord, r.member_id)[0]
    assert j.error == E.NONE
    assert csync(coord, j.generation_id, r.member_id)[0].error == E.NONE
    return r.member_id


# ---------------------------------------------------------------------------------------
# upgrade
# ---------------------------------------------------------------------------------------
def test_upgrade_of_a_completing_rebalance_group_answers_parked_syncs(impl):
    """testConsumerGroupHeartbeatWithCompletingRebalanceClassicGroup; convertToConsumerGroup
    (completeAllSyncFutures(REBALANCE_IN_PROGRESS)) and ConsumerGroup.fromClassicGroup (a
    member that never synced has an empty assignment, at the classic generation)."""
    coord = make(impl)
    answers = [cjoin(coord, "") for _ in range(2)]
    coord.advance_time(1)
    results = [a[0] for a in answers]
    assert all(r.error == E.NONE for r in results)
    gen = results[0].generation_id
    follower = next(r for r in results if r.member_id != r.leader_id)
    parked = csync(coord, gen, follower.member_id)
    assert parked == []                     # CompletingRebalance: waits for the leader
    assert coord.group_summary("g").state == "CompletingRebalance"
    r = cg_join(coord, "c1")
    assert r.error == E.NONE and r.member_epoch == gen + 1
    assert [p.error for p in parked] == [E.REBALANCE_IN_PROGRESS]
    _, members = described(coord)
    for x in results:
        assert (members[x.member_id].member_epoch, members[x.member_id].assignment,
                members[x.member_id].classic) == (gen, {}, True)
        assert coord.heartbeat("g", x.member_id, gen) == E.REBALANCE_IN_PROGRESS
    # nothing was owned: c1 gets its share at once
    assert sorted(r.assignment["t"]) == described(coord)[1]["c1"].target_assignment["t"]


def test_upgraded_members_keep_their_classic_session_timeout(impl):
    """convertToConsumerGroup: each converted member's session timeout is scheduled with
    its classic session timeout (classicProtocolSessionTimeout), not the consumer
    group's 45 s."""
    coord = make(impl)
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    assert cg_join(coord, "c1").error == E.NONE
    for _ in range(4):                      # to 10 s: m2 is silent
        coord.advance_time(2500 - (1 if _ == 3 else 0))
        chb(coord, "c1", epoch_of(coord, "c1"))
        coord.heartbeat("g", m1, gen)
    assert m2 in described(coord)[1]
    coord.advance_time(2)
    chb(coord, "c1", epoch_of(coord, "c1"))
    coord.heartbeat("g", m1, gen)
    assert set(described(coord)[1]) == {m1, "c1"}


# ---------------------------------------------------------------------------------------
# classicGroupJoinToConsumerGroup
# ---------------------------------------------------------------------------------------
def test_classic_join_to_a_full_consumer_group(impl):
    """testJoiningConsumerGroupThrowsExceptionIfGroupOverMaxSize: throwIfConsumerGroupIsFull
    comes first (before MEMBER_ID_REQUIRED); a member already in the group rejoins."""
    coord = make(impl, group_consumer_max_size=2)
    cg_join(coord, "c1")
    m = cjoin(coord, "")[0]
    assert m.error == E.NONE
    assert cjoin(coord, "")[0].error == E.GROUP_MAX_SIZE_REACHED
    assert cjoin(coord, "", require_known=True)[0].error == E.GROUP_MAX_SIZE_REACHED
    assert cjoin(coord, "ghost")[0].error == E.GROUP_MAX_SIZE_REACHED
    assert cjoin(coord, m.member_id)[0].error == E.NONE
    assert set(described(coord)[1]) == {"c1", m.member_id}


def test_classic_join_with_an_unknown_member_id_adds_that_member(impl):
    """getOrMaybeSubscribeDynamicConsumerGroupMember(createIfNotExists=true): a dynamic
    classic member with a member id the group does not know is created under that id
    (no UNKNOWN_MEMBER_ID, unlike a classic group)."""
    coord = make(impl)
    cg_join(coord, "c1")
    j = cjoin(coord, "ghost")
    assert j and j[0].error == E.NONE and j[0].member_id == "ghost"
    assert described(coord)[1]["ghost"].classic


def test_static_classic_join_needs_no_known_member_id(impl):
    """JoinGroupRequest.requiresKnownMemberId is false with a group instance id: a new
    static classic member joins at once."""
    coord = make(impl)
    cg_join(coord, "c1")
    j = cjoin(coord, "", instance_id="s1", require_known=True)
    assert j and j[0].error == E.NONE and j[0].member_id
    _, members = described(coord)
    assert members[j[0].member_id].instance_id == "s1"


def test_static_classic_rejoin_with_unknown_instance_or_other_member_id(impl):
    """testStaticMemberJoiningConsumerGroupWithUnknownInstanceId / WithUnmatchedMemberId:
    a known member id (createIfNotExists=false) with an instance id the group does not
    know is UNKNOWN_MEMBER_ID; with another member's instance id FENCED_INSTANCE_ID."""
    coord = make(impl)
    cg_join(coord, "c1")
    s = cjoin(coord, "", instance_id="s1")[0]
    assert s.error == E.NONE
    assert cjoin(coord, s.member_id, instance_id="nope")[0].error == E.UNKNOWN_MEMBER_ID
    assert cjoin(coord, "other", instance_id="s1")[0].error == E.FENCED_INSTANCE_ID
    assert cjoin(coord, s.member_id, instance_id="s1")[0].error == E.NONE


def test_classic_rejoin_with_a_new_subscription_bumps_the_group_epoch(impl):
    """testJoiningConsumerGroupWithExistingDynamicMemberAndNewSubscription (shape): the
    subscription read from the JoinGroup's first protocol changed, so the group epoch is
    bumped and a new target computed; the answer is the member epoch."""
    coord = make(impl)
    coord.set_topics({"t": 6, "u": 4})
    m1, m2 = mixed_group(coord)
    assert cjoin(coord, m1)[0].error == E.NONE         # caught up, eagerly
    d0, _ = described(coord)
    j = cjoin(coord, m1, protocols=[("range", sub(("t", "u")))])[0]
    assert j.error == E.NONE
    d, members = described(coord)
    assert d.group_epoch == d0.group_epoch + 1
    assert members[m1].subscribed_topic_names == ["t", "u"]
    assert "u" in {t for m in members.values() for t in m.target_assignment}
    assert j.generation_id == members[m1].member_epoch


# ---------------------------------------------------------------------------------------
# classicGroupSyncToConsumerGroup
# ---------------------------------------------------------------------------------------
def test_classic_sync_to_consumer_group_unknown_and_fenced_instance(impl):
    """testClassicGroupSyncToConsumerGroupWithUnknownMemberId / WithFencedInstanceId
    (validateConsumerGroupMember): an instance id nobody has is UNKNOWN_MEMBER_ID; one
    held by another member id FENCED_INSTANCE_ID."""
    coord = make(impl)
    cg_join(coord, "c1")
    s = cjoin(coord, "", instance_id="s1")[0]
    assert csync(coord, s.generation_id, s.member_id, instance_id="s1")[0].error == E.NONE
    assert csync(coord, s.generation_id, s.member_id, instance_id="nope")[0].error == \
        E.UNKNOWN_MEMBER_ID
    assert csync(coord, s.generation_id, "other", instance_id="s1")[0].error == \
        E.FENCED_INSTANCE_ID
    assert csync(coord, s.generation_id, "nobody")[0].error == E.UNKNOWN_MEMBER_ID


def test_classic_sync_rebalance_in_progress_starts_the_join_timeout(impl):
    """testClassicGroupSyncToConsumerGroupRebalanceInProgress; throwIfRebalanceInProgress
    schedules the join timeout (scheduleConsumerGroupJoinTimeoutIfAbsent): a member told
    REBALANCE_IN_PROGRESS by its SyncGroup that never rejoins is fenced after its
    rebalance timeout, its heartbeats notwithstanding."""
    coord = make(impl)
    (m1, gen), (m2, _) = classic_group(coord, [[0, 1, 2], [3, 4, 5]])
    cg_join(coord, "c1")
    assert csync(coord, gen, m1)[0].error == E.REBALANCE_IN_PROGRESS
    # m2 rejoins and syncs (it is not fenced); m1 only heartbeats
    j2 = cjoin(coord, m2)[0]
    assert csync(coord, j2.generation_id, m2)[0].error == E.NONE
    for _ in range(REBALANCE // 5000 - 1):
        coord.advance_time(5000)
        chb(coord, "c1", epoch_of(coord, "c1"))
        coord.heartbeat("g", m1, gen)
        coord.heartbeat("g", m2, epoch_of(coord, m2))
    assert m1 in described(coord)[1]
    coord.advance_time(5001)
    assert set(described(coord)[1]) == {"c1", m2}


def test_classic_sync_resets_the_session(impl):
    """classicGroupSyncToConsumerGroup reschedules the member's session timeout with its
    classic session timeout once the sync is done."""
    coord = make(impl)
    m1, m2 = mixed_group(coord)
    j = cjoin(coord, m2)[0]               # m2's session: 10 s from here
    assert j.error == E.NONE
    coord.advance_time(8000)
    chb(coord, "c1", epoch_of(coord, "c1"))
    coord.heartbeat("g", m1, epoch_of(coord, m1))
    assert csync(coord, j.generation_id, m2)[0].error == E.NONE    # and now from here
    coord.advance_time(8000)              # 16 s after the join, 8 s after the sync
    chb(coord, "c1", epoch_of(coord, "c1"))
    coord.heartbeat("g", m1, epoch_of(coord, m1))
    assert m2 in described(coord)[1]
    coord.advance_time(2001)
    assert m2 not in described(coord)[1]


# ---------------------------------------------------------------------------------------
# classicGroupHeartbeatToConsumerGroup
# ---------------------------------------------------------------------------------------
def test_classic_heartbeat_to_consumer_group_static_checks(impl):
    """testClassicGroupHeartbeatToConsumerWithUnknownMember / WithFencedInstanceId /
    WithMemberNotUsingClassicProtocol / WithIllegalGenerationId, in Kafka's order:
    member (instance) lookup, classic protocol, generation."""
    coord = make(impl)
    cg_join(coord, "c1", instance_id="ci")
    s = cjoin(coord, "", instance_id="s1")[0]
    gen = s.generation_id
    assert coord.heartbeat("g", s.member_id, gen, "s1") == E.NONE
    assert coord.heartbeat("g", s.member_id, gen, "nope") == E.UNKNOWN_MEMBER_ID
    assert coord.heartbeat("g", "other", gen, "s1") == E.FENCED_INSTANCE_ID
    assert coord.heartbeat("g", "other", gen + 7, "s1") == E.FENCED_INSTANCE_ID
    # a consumer-protocol static member: UNKNOWN_MEMBER_ID, whatever the generation
    assert coord.heartbeat("g", "c1", gen + 7, "ci") == E.UNKNOWN_MEMBER_ID
    assert coord.heartbeat("g", s.member_id, gen + 1, "s1") == E.ILLEGAL_GENERATION


def test_classic_heartbeat_when_the_partitions_it_waits_for_are_released(impl):
    """testClassicGroupHeartbeatToConsumerGroupRebalanceInProgress, third condition: a
    member in UNRELEASED_PARTITIONS is answered NONE while another member still owns
    what it waits for, REBALANCE_IN_PROGRESS once that is free
    (waitingOnUnreleasedPartition)."""
    coord = make(impl)
    r = cg_join(coord, "c1")
    assert sorted(r.assignment["t"]) == [0, 1, 2, 3, 4, 5]
    j = cjoin(coord, "m")[0]
    assert j.error == E.NONE
    d, members = described(coord)
    assert j.generation_id == d.group_epoch and members["m"].assignment == {}
    assert csync(coord, j.generation_id, "m")[0].error == E.NONE
    assert coord.heartbeat("g", "m", j.generation_id) == E.NONE     # c1 still owns them
    r = chb(coord, "c1", epoch_of(coord, "c1"), owned_partitions={"t": list(range(6))})
    kept = r.assignment["t"]
    assert len(kept) == 3
    assert coord.heartbeat("g", "m", j.generation_id) == E.NONE     # c1 revoking
    chb(coord, "c1", epoch_of(coord, "c1"), owned_partitions={"t": kept})
    assert coord.heartbeat("g", "m", j.generation_id) == E.REBALANCE_IN_PROGRESS


# ---------------------------------------------------------------------------------------
# classicGroupLeaveToConsumerGroup
# ---------------------------------------------------------------------------------------
def test_classic_leave_of_static_members(impl):
    """testConsumerGroupMemberUsingClassicProtocolBatchLeaveGroup (static part): an
    unknown instance id is UNKNOWN_MEMBER_ID, another member's id with the instance id
    FENCED_INSTANCE_ID, the instance id alone (the admin's removal) removes it; the
    group epoch moves once."""
    coord = make(impl)
    cg_join(coord, "c1")
    assert cjoin(coord, "", instance_id="s1")[0].error == E.NONE
    s2 = cjoin(coord, "", instance_id="s2")[0]
    epoch = described(coord)[0].group_epoch
    result = coord.leave_group("g", [("", "nope"), ("other", "s1"), ("", "s1"),
                                     (s2.member_id, "s2")])
    assert result.member_errors == [E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID, E.NONE, E.NONE]
    d, members = described(coord)
    assert set(members) == {"c1"} and d.group_epoch == epoch + 1


# ---------------------------------------------------------------------------------------
# downgrade
# ---------------------------------------------------------------------------------------
def test_last_consumer_member_fenced_by_its_rebalance_timeout_downgrades(impl):
    """testLastConsumerProtocolMemberRebalanceTimeoutInConsumerGroup: the last
    consumer-protocol member does not revoke within its rebalance timeout
    (scheduleConsumerGroupRebalanceTimeout -> consumerGroupFenceMember): the group
    becomes classic, without it, and rebalances."""
    coord = make(impl)
    cg_join(coord, "c1")
    j = cjoin(coord, "m")[0]
    assert csync(coord, j.generation_id, "m")[0].error == E.NONE
    r = chb(coord, "c1", epoch_of(coord, "c1"), owned_partitions={"t": list(range(6))})
    assert len(r.assignment["t"]) == 3                  # three to revoke
    epoch = described(coord)[0].group_epoch
    for _ in range(REBALANCE // 5000 - 1):              # c1 never revokes
        coord.advance_time(5000)
        chb(coord, "c1", epoch_of(coord, "c1"), owned_partitions={"t": list(range(6))})
        assert coord.heartbeat("g", "m", j.generation_id) == E.NONE
    assert group_type(coord) == "consumer"
    coord.advance_time(5000)
    assert group_type(coord) == "classic"
    summary = coord.group_summary("g")
    assert (summary.state, summary.generation) == ("PreparingRebalance", epoch)
    assert coord.member_ids("g") == ["m"]


def test_downgrade_at_exactly_the_classic_max_size(impl):
    """validateOnlineDowngradeWithFencedMember refuses only when the remaining members
    are more than group.classic.max.size (numMembers() - 1 > classicGroupMaxSize)."""
    coord = make(impl, group_max_size=2)
    m1, m2 = mixed_group(coord)
    assert chb(coord, "c1", -1).error == E.NONE
    assert group_type(coord) == "classic"
    assert set(coord.member_ids("g")) == {m1, m2}


def test_static_replacement_downgrade_gives_the_new_member_the_old_ones_target(impl):
    """testLastStaticConsumerProtocolMemberReplacedByClassicProtocolMember;
    ClassicGroup.fromConsumerGroup: the joining static member takes the target
    assignment of the member it replaced; the group is Stable at the group epoch and a
    SyncGroup gives each member its assignment."""
    coord = make(impl)
    m = classic_static_pair(coord)
    _, members = described(coord)
    c1_target = members["c1"].target_assignment
    m_target = members[m].target_assignment
    epoch = described(coord)[0].group_epoch
    j = cjoin(coord, "", instance_id="i1")[0]
    assert j.error == E.NONE and j.protocol_name == "range"
    assert group_type(coord) == "classic"
    summary = coord.group_summary("g")
    assert (summary.state, summary.generation) == ("Stable", epoch)
    s = csync(coord, epoch, j.member_id, instance_id="i1")[0]
    assert s.error == E.NONE and decode_assignment(s.assignment) == c1_target
    s = csync(coord, epoch, m)[0]
    assert s.error == E.NONE and decode_assignment(s.assignment) == m_target


def test_last_consumer_static_member_rejoining_with_the_classic_protocol_downgrades(impl):
    """classicGroupJoinToConsumerGroup step 4: the replaced member is whoever holds the
    joining static member's instance id (group.staticMemberId(instanceId)), even the
    joiner itself: c1, the last consumer-protocol member, sending a JoinGroup under its
    own member id and instance id passes validateOnlineDowngradeWithReplacedMemberId
    (every other member is classic) and the group is converted to a classic group
    holding c1 (as a classic member) and m. (The same in the later
    validateOnlineDowngradeWithReplacedMember.)"""
    coord = make(impl)
    m = classic_static_pair(coord)
    j = cjoin(coord, "c1", instance_id="i1")
    assert j and j[0].error == E.NONE and j[0].member_id == "c1"
    assert group_type(coord) == "classic"
    assert set(coord.member_ids("g")) == {"c1", m}


def test_no_downgrade_while_a_consumer_member_remains_after_a_classic_leave(impl):
    """classicGroupLeaveToConsumerGroup / consumerGroupFenceMember: classic members
    leaving (or fenced) never downgrade a group that keeps a consumer-protocol member;
    the last classic member gone, the group is a plain consumer group."""
    coord = make(impl)
    m1, m2 = mixed_group(coord)
    assert coord.leave_group("g", [(m1, None), (m2, None)]).member_errors == [E.NONE, E.NONE]
    assert group_type(coord) == "consumer"
    _, members = described(coord)
    assert set(members) == {"c1"} and not members["c1"].classic


# ---------------------------------------------------------------------------------------
# ListGroups of a mixed group
# ---------------------------------------------------------------------------------------
def test_list_groups_of_a_mixed_group(impl):
    """ConsumerGroup.asListedGroup: protocol type "consumer", the consumer group's state
    (members behind the target epoch: Reconciling), group type "consumer"."""
    coord = make(impl)
    mixed_group(coord)
    [listing] = coord.list_groups()
    assert (listing.group_id, listing.protocol_type, listing.state, listing.group_type) == \
        ("g", "consumer", "Reconciling", "consumer")
    assert [g.group_id for g in coord.list_groups(types=["classic"])] == []
    assert [g.group_id for g in coord.list_groups(states=["reconciling"])] == ["g"]


def test_downgrade_policy_upgrade_keeps_an_all_classic_consumer_group(impl):
    """validateOnlineDowngradeWithFencedMember: with the "upgrade" policy the last
    consumer-protocol member leaves a consumer group of classic members; their JoinGroup,
    SyncGroup and Heartbeat keep going to the consumer group."""
    coord = make(impl, group_consumer_migration_policy="upgrade")
    m1, m2 = mixed_group(coord)
    assert chb(coord, "c1", -1).error == E.NONE
    assert group_type(coord) == "consumer"
    j = cjoin(coord, m1)[0]
    assert j.error == E.NONE and j.generation_id == epoch_of(coord, m1)
    assert csync(coord, j.generation_id, m1)[0].error == E.NONE
    assert coord.heartbeat("g", m1, j.generation_id) in (E.NONE, E.REBALANCE_IN_PROGRESS)


def test_static_replacement_with_a_new_subscription_downgrades_into_a_rebalance(impl):
    """KAFKA-19546 (in 4.0.2 and 4.1.1; earlier 4.0/4.1 releases stay Stable):
    classicGroupJoinToConsumerGroup passes hasSubscriptionChanged to
    convertToClassicGroup, which prepares a rebalance when the classic static member that
    replaced the last consumer-protocol member subscribes to other topics."""
    coord = make(impl)
    coord.set_topics({"t": 6, "u": 4})
    m = classic_static_pair(coord)
    j = cjoin(coord, "", instance_id="i1", protocols=[("range", sub(("t", "u")))])
    assert j and j[0].error == E.NONE
    assert group_type(coord) == "classic"
    assert set(coord.member_ids("g")) == {m, j[0].member_id}
    assert coord.group_summary("g").state == "PreparingRebalance"


def test_replacing_a_classic_static_member_of_an_all_classic_consumer_group(impl):
    """validateOnlineDowngradeWithReplacedMember(Id) -> ConsumerGroup.
    allMembersUseClassicProtocolExcept(member): true only when the replaced member does
    NOT use the classic protocol. A consumer group whose members all use the classic
    protocol (c1, dynamic, turned classic by its own JoinGroup, which downgrades
    nothing) is not downgraded when a classic static member is replaced by a new
    classic incarnation: it stays a consumer group."""
    coord = make(impl)
    cg_join(coord, "c1")
    s = cjoin(coord, "", instance_id="s1")[0]
    assert s.error == E.NONE
    assert cjoin(coord, "c1")[0].error == E.NONE          # c1 now uses the classic protocol
    assert group_type(coord) == "consumer"
    assert all(m.classic for m in described(coord)[1].values())
    j = cjoin(coord, "", instance_id="s1")
    assert j and j[0].error == E.NONE
    assert group_type(coord) == "consumer"
    assert set(described(coord)[1]) == {"c1", j[0].member_id}

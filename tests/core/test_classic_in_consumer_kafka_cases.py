"""Classic-protocol members inside a consumer group (Kafka 4's online migration),
checked against Kafka's GroupMetadataManagerTest: the cases of classic SyncGroup,
Heartbeat, LeaveGroup, JoinGroup and OffsetCommit/OffsetFetch to a consumer group that
test_consumer_migration.py and test_consumer_migration_kafka_cases.py do not pin down,
written against fastcoord's API (both twins). Each test names the Kafka test method
whose outcome it asserts; where fastcoord differs, the test keeps Kafka's answer.
Time is a ManualClock, so every test is bounded by its loops.
"""
import struct

from fastcoord.core.consumer_embedded import decode_assignment

from tests.core.test_consumer_migration import (
    E, REBALANCE, SESSION, cg_join, chb, cjoin, csync, described, group_type, make,
    mixed_group, sub,
)


def epoch_of(coord, member_id):
    return described(coord)[1][member_id].member_epoch


def group_epoch(coord):
    return described(coord)[0].group_epoch


def classic_member(coord, instance_id=None, protocols=None, session=SESSION):
    """A classic member joins the consumer group and syncs; its JoinGroup answer."""
    j = cjoin(coord, "", instance_id=instance_id, protocols=protocols, session=session)[0]
    assert j.error == E.NONE, j
    assert csync(coord, j.generation_id, j.member_id, instance_id=instance_id)[0].error == E.NONE
    return j


def keep_alive(coord, *classic, consumer=("c1",)):
    """A heartbeat from each consumer-protocol member (owning what it is assigned, so
    revoking what it must) and each classic (member, generation)."""
    members = described(coord)[1]
    for member_id in consumer:
        chb(coord, member_id, members[member_id].member_epoch,
            owned_partitions=members[member_id].assignment)
    for member_id, generation in classic:
        coord.heartbeat("g", member_id, generation)


def subscription_v(version, topics=("t",)):
    """ConsumerProtocolSubscription bytes written at `version` (0-3): topics, null user
    data, then no owned partitions (v1+), generation -1 (v2+), null rack (v3+)."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1)
    if version >= 1:
        out += struct.pack(">i", 0)
    if version >= 2:
        out += struct.pack(">i", -1)
    if version >= 3:
        out += struct.pack(">h", -1)
    return out


# ---------------------------------------------------------------------------------------
# classicGroupSyncToConsumerGroup
# ---------------------------------------------------------------------------------------
def test_sync_answers_in_the_members_consumer_protocol_version(impl):
    # testClassicGroupSyncToConsumerGroupWithAllConsumerProtocolVersions
    coord = make(impl)
    cg_join(coord, "c1")
    for version in range(4):
        j = cjoin(coord, "", protocols=[("range", subscription_v(version))])[0]
        assert j.error == E.NONE
        s = csync(coord, j.generation_id, j.member_id, protocol_type="consumer",
                  protocol_name="range")[0]
        assert s.error == E.NONE
        assert struct.unpack(">h", s.assignment[:2])[0] == version
        assert decode_assignment(s.assignment) == described(coord)[1][j.member_id].assignment


def test_sync_of_a_consumer_protocol_member_is_unknown_member(impl):
    # testClassicGroupSyncToConsumerGroupWithUnknownMemberId (member not using the classic protocol)
    coord = make(impl)
    cg_join(coord, "c1")
    s = csync(coord, epoch_of(coord, "c1"), "c1", protocol_type="consumer",
              protocol_name="range")[0]
    assert s.error == E.UNKNOWN_MEMBER_ID


def test_sync_with_null_protocol_fields_passes_and_echoes_them(impl):
    # testClassicGroupSyncToConsumerGroupWithInconsistentGroupProtocol (null type/name pass)
    coord = make(impl)
    cg_join(coord, "c1")
    j = cjoin(coord, "m")[0]
    s = csync(coord, j.generation_id, "m", protocol_type="consumer", protocol_name=None)[0]
    assert (s.error, s.protocol_type, s.protocol_name) == (E.NONE, "consumer", None)
    s = csync(coord, j.generation_id, "m", protocol_type=None, protocol_name="range")[0]
    assert (s.error, s.protocol_type, s.protocol_name) == (E.NONE, None, "range")


def test_sync_checks_the_generation_before_the_protocol(impl):
    # testClassicGroupSyncToConsumerGroupWithIllegalGeneration (throwIfGenerationIdUnmatched first)
    coord = make(impl)
    cg_join(coord, "c1")
    j = cjoin(coord, "m")[0]
    s = csync(coord, j.generation_id - 1, "m", protocol_type="connect",
              protocol_name="roundrobin")[0]
    assert s.error == E.ILLEGAL_GENERATION


def test_sync_behind_the_group_epoch_is_rebalance_in_progress(impl):
    # testClassicGroupSyncToConsumerGroupRebalanceInProgress
    coord = make(impl)
    cg_join(coord, "c1")
    m = classic_member(coord)
    epoch = group_epoch(coord)
    cg_join(coord, "c2")                                # the group epoch moves past m
    assert group_epoch(coord) == epoch + 1
    assert csync(coord, m.generation_id, m.member_id)[0].error == E.REBALANCE_IN_PROGRESS
    # the join timeout it started fences it, heartbeats notwithstanding
    for _ in range(REBALANCE // 5000 - 1):
        coord.advance_time(5000)
        keep_alive(coord, (m.member_id, m.generation_id), consumer=("c1", "c2"))
    assert m.member_id in described(coord)[1]
    coord.advance_time(5001)
    assert m.member_id not in described(coord)[1]


# ---------------------------------------------------------------------------------------
# classicGroupHeartbeatToConsumerGroup
# ---------------------------------------------------------------------------------------
def test_heartbeat_keeps_the_classic_session(impl):
    # testClassicGroupHeartbeatToConsumerGroupMaintainsSession
    coord = make(impl)
    cg_join(coord, "c1")
    m = classic_member(coord)
    for _ in range(4):                                  # 20 s: twice the session
        coord.advance_time(SESSION // 2)
        assert coord.heartbeat("g", m.member_id, m.generation_id) == E.NONE
        chb(coord, "c1", epoch_of(coord, "c1"))
    assert m.member_id in described(coord)[1]


def test_heartbeat_with_an_unknown_member_or_instance(impl):
    # testClassicGroupHeartbeatToConsumerWithUnknownMember
    coord = make(impl)
    cg_join(coord, "c1")
    epoch = group_epoch(coord)
    assert coord.heartbeat("g", "unknown-member-id", epoch) == E.UNKNOWN_MEMBER_ID
    assert coord.heartbeat("g", "unknown-member-id", epoch, "unknown-instance-id") == \
        E.UNKNOWN_MEMBER_ID


def test_heartbeat_of_a_member_behind_the_group_epoch(impl):
    # testClassicGroupHeartbeatToConsumerGroupRebalanceInProgress (member epoch < group epoch)
    coord = make(impl)
    cg_join(coord, "c1")
    m = classic_member(coord)
    assert coord.heartbeat("g", m.member_id, m.generation_id) == E.NONE
    cg_join(coord, "c2")
    assert coord.heartbeat("g", m.member_id, m.generation_id) == E.REBALANCE_IN_PROGRESS
    # having rejoined it is at the group epoch; its rejoin cancelled the join timeout
    j = cjoin(coord, m.member_id)[0]
    assert j.error == E.NONE and j.generation_id == group_epoch(coord)
    assert csync(coord, j.generation_id, m.member_id)[0].error == E.NONE
    for _ in range(REBALANCE // 5000 + 1):
        coord.advance_time(5000)
        keep_alive(coord, (m.member_id, j.generation_id), consumer=("c1", "c2"))
    assert m.member_id in described(coord)[1]


def test_join_timeout_is_scheduled_once(impl):
    # testConsumerGroupMemberUsingClassicProtocolFencedWhenJoinTimeout
    # (scheduleConsumerGroupJoinTimeoutIfAbsent: later heartbeats do not push it back)
    coord = make(impl)
    cg_join(coord, "c1")
    m = classic_member(coord)
    cg_join(coord, "c2")
    assert coord.heartbeat("g", m.member_id, m.generation_id) == E.REBALANCE_IN_PROGRESS
    coord.advance_time(REBALANCE - 1000)
    keep_alive(coord, (m.member_id, m.generation_id), consumer=("c1", "c2"))
    coord.advance_time(1001)
    assert m.member_id not in described(coord)[1]
    assert coord.heartbeat("g", m.member_id, m.generation_id) == E.UNKNOWN_MEMBER_ID


def test_classic_member_fenced_by_its_session_timeout(impl):
    # testConsumerGroupMemberUsingClassicProtocolFencedWhenSessionTimeout
    coord = make(impl)
    cg_join(coord, "c1")
    m = classic_member(coord, session=6000)
    epoch = group_epoch(coord)
    coord.advance_time(5000)
    keep_alive(coord)
    assert m.member_id in described(coord)[1]
    coord.advance_time(1001)
    assert m.member_id not in described(coord)[1]
    assert group_epoch(coord) == epoch + 1
    assert group_type(coord) == "consumer"


# ---------------------------------------------------------------------------------------
# classicGroupLeaveToConsumerGroup
# ---------------------------------------------------------------------------------------
def test_batch_leave_of_every_member_with_per_member_errors(impl):
    # testConsumerGroupMemberUsingClassicProtocolBatchLeaveGroup
    coord = make(impl)
    cg_join(coord, "c3", instance_id="i3")
    m1 = classic_member(coord)
    m2 = classic_member(coord, instance_id="i2")
    # m1 is told to rejoin (its join timeout), m2 rejoins (its sync timeout)
    assert coord.heartbeat("g", m1.member_id, m1.generation_id) == E.REBALANCE_IN_PROGRESS
    assert cjoin(coord, m2.member_id, instance_id="i2")[0].error == E.NONE
    epoch = group_epoch(coord)
    result = coord.leave_group("g", [
        (m1.member_id, None), ("", "i2"), ("c3", "i3"),
        ("unknown-member-id", None), ("", "unknown-instance-id"), ("unknown-member-id", "i3"),
    ])
    assert result.error == E.NONE
    assert result.member_errors == [E.NONE, E.NONE, E.NONE, E.UNKNOWN_MEMBER_ID,
                                    E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID]
    d, members = described(coord)
    assert members == {} and group_type(coord) == "consumer"
    assert d.group_epoch == epoch + 1 and d.assignment_epoch == epoch + 1
    coord.advance_time(REBALANCE + SESSION)              # no timer of theirs fires
    assert group_epoch(coord) == epoch + 1


def test_leave_without_a_valid_member_changes_nothing(impl):
    # testClassicGroupLeaveToConsumerGroupWithoutValidLeaveGroupMember
    coord = make(impl)
    cg_join(coord, "c1")
    epoch = group_epoch(coord)
    result = coord.leave_group("g", [("unknown-member-id", None)])
    assert (result.error, result.member_errors) == (E.NONE, [E.UNKNOWN_MEMBER_ID])
    assert group_epoch(coord) == epoch and set(described(coord)[1]) == {"c1"}


def test_a_member_named_twice_leaves_once(impl):
    # classicGroupLeaveToConsumerGroup (validLeaveGroupMembers is a set: one epoch bump)
    coord = make(impl)
    cg_join(coord, "c1")
    m = classic_member(coord)
    epoch = group_epoch(coord)
    result = coord.leave_group("g", [(m.member_id, None), (m.member_id, None)])
    assert result.member_errors == [E.NONE, E.NONE]
    assert group_epoch(coord) == epoch + 1 and set(described(coord)[1]) == {"c1"}


def test_last_consumer_members_removed_by_the_admin_downgrade(impl):
    # testLastConsumerProtocolMemberLeavingConsumerGroupByAdminApi
    coord = make(impl, group_consumer_migration_policy="downgrade")
    cg_join(coord, "c3")
    cg_join(coord, "c4", instance_id="i4")
    m1 = classic_member(coord)
    m2 = classic_member(coord, instance_id="i2")
    epoch = group_epoch(coord)
    result = coord.leave_group("g", [(m2.member_id, None), ("c3", None), ("", "i4")])
    assert result.member_errors == [E.NONE, E.NONE, E.NONE]
    assert group_type(coord) == "classic"
    assert coord.member_ids("g") == [m1.member_id]
    summary = coord.group_summary("g")
    assert (summary.state, summary.generation) == ("PreparingRebalance", epoch)
    j = cjoin(coord, m1.member_id)
    assert j and j[0].error == E.NONE and j[0].generation_id == epoch + 1
    assert j[0].leader_id == m1.member_id


def test_leave_of_a_classic_member_keeps_a_consumer_group_with_a_consumer_member(impl):
    # testConsumerGroupMemberUsingClassicProtocolBatchLeaveGroupUpdatingSubscriptionMetadata
    coord = make(impl)
    coord.set_topics({"t": 6, "u": 4})
    cg_join(coord, "c2", topics=("u",))
    m1 = classic_member(coord, protocols=[("range", sub(("t", "u")))])
    epoch = group_epoch(coord)
    assert coord.leave_group("g", [(m1.member_id, None)]).member_errors == [E.NONE]
    assert group_type(coord) == "consumer" and group_epoch(coord) == epoch + 1
    r = chb(coord, "c2", epoch_of(coord, "c2"))
    assert r.error == E.NONE and r.member_epoch == epoch + 1
    assert described(coord)[1]["c2"].target_assignment == {"u": [0, 1, 2, 3]}


# ---------------------------------------------------------------------------------------
# classicGroupJoinToConsumerGroup
# ---------------------------------------------------------------------------------------
def test_unsupported_protocol_is_checked_before_member_id_required(impl):
    # classicGroupJoinToConsumerGroup: throwIfClassicProtocolIsNotSupported before
    # requiresKnownMemberId
    coord = make(impl)
    cg_join(coord, "c1")
    classic_member(coord)
    assert cjoin(coord, "", protocols=[("roundrobin", sub())], require_known=True)[0].error \
        == E.INCONSISTENT_GROUP_PROTOCOL
    assert cjoin(coord, "", protocol_type="connect", require_known=True)[0].error == \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert len(described(coord)[1]) == 2


def test_join_with_a_session_timeout_out_of_bounds(impl):
    # classicGroupJoin: the session timeout is checked before the group type
    coord = make(impl)
    cg_join(coord, "c1")
    for session in (1000, 2_000_000):
        assert cjoin(coord, "", session=session)[0].error == E.INVALID_SESSION_TIMEOUT
    assert set(described(coord)[1]) == {"c1"}


def test_the_only_classic_member_cannot_switch_to_another_protocol(impl):
    # ConsumerGroup.supportsClassicProtocols: every classic member, the joiner included
    coord = make(impl)
    cg_join(coord, "c1")
    m = classic_member(coord)
    j = cjoin(coord, m.member_id, protocols=[("roundrobin", sub())])[0]
    assert j.error == E.INCONSISTENT_GROUP_PROTOCOL
    # one protocol in common with every classic member is enough
    j = cjoin(coord, m.member_id, protocols=[("roundrobin", sub()), ("range", sub())])[0]
    assert (j.error, j.protocol_name) == (E.NONE, "roundrobin")


def test_first_classic_member_may_use_any_protocol_name(impl):
    # ConsumerGroup.supportsClassicProtocols with no classic member yet
    coord = make(impl)
    cg_join(coord, "c1")
    j = cjoin(coord, "", protocols=[("sticky", sub())])[0]
    assert (j.error, j.protocol_name) == (E.NONE, "sticky")
    assert cjoin(coord, "", protocols=[("range", sub())])[0].error == \
        E.INCONSISTENT_GROUP_PROTOCOL


def test_rejoin_with_new_protocols_but_the_same_topics_keeps_the_epoch(impl):
    # hasMemberSubscriptionChanged: a new member record, no epoch bump without new topics
    coord = make(impl)
    cg_join(coord, "c1")
    m = classic_member(coord)
    epoch = group_epoch(coord)
    j = cjoin(coord, m.member_id, protocols=[("range", sub()), ("cooperative-sticky", sub())])[0]
    assert j.error == E.NONE and j.generation_id == epoch
    assert group_epoch(coord) == epoch


def test_rejoin_dropping_a_topic_bumps_the_epoch_and_revokes_it(impl):
    # testJoiningConsumerGroupWithExistingDynamicMemberAndNewSubscription (topics removed)
    coord = make(impl)
    coord.set_topics({"t": 6, "u": 4})
    cg_join(coord, "c1", topics=("t",))
    m = classic_member(coord, protocols=[("range", sub(("t", "u")))])
    j = cjoin(coord, m.member_id, protocols=[("range", sub(("t", "u")))])[0]
    s = csync(coord, j.generation_id, m.member_id)[0]
    held = decode_assignment(s.assignment)
    assert "u" in held
    epoch = group_epoch(coord)
    j = cjoin(coord, m.member_id, protocols=[("range", sub(("t",), owned=held))])[0]
    assert j.error == E.NONE and group_epoch(coord) == epoch + 1
    member = described(coord)[1][m.member_id]
    assert member.subscribed_topic_names == ["t"] and "u" not in member.assignment


# ---------------------------------------------------------------------------------------
# OffsetCommit / OffsetFetch of a classic member
# ---------------------------------------------------------------------------------------
def test_classic_member_commit_at_an_old_generation_is_illegal(impl):
    # ConsumerGroup.validateOffsetCommit -> validateMemberEpoch (no Kafka test of its own here):
    # strict equality for a classic member, whatever the api version
    coord = make(impl)
    m1, _ = mixed_group(coord)
    old = epoch_of(coord, m1)
    j = cjoin(coord, m1)[0]
    assert j.generation_id > old
    assert coord.commit_offsets("g", m1, old, {("t", 0): 5}, api_version=9) == \
        {("t", 0): E.ILLEGAL_GENERATION}
    assert coord.commit_offsets("g", m1, j.generation_id, {("t", 0): 5}, api_version=9) == \
        {("t", 0): E.NONE}
    assert coord.commit_offsets("g", "nobody", j.generation_id, {("t", 0): 6},
                                api_version=8) == {("t", 0): E.UNKNOWN_MEMBER_ID}


def test_classic_member_offset_fetch_checks_its_generation(impl):
    # ConsumerGroup.validateOffsetFetch -> validateMemberEpoch (ILLEGAL_GENERATION when classic)
    coord = make(impl)
    m1, _ = mixed_group(coord)
    gen = epoch_of(coord, m1)
    assert coord.commit_offsets("g", m1, gen, {("t", 1): 7}, api_version=8) == \
        {("t", 1): E.NONE}
    error, offsets = coord.fetch_offsets("g", [("t", 1)], member_id=m1, member_epoch=gen)
    assert error == E.NONE and offsets[("t", 1)].offset == 7
    assert coord.fetch_offsets("g", [("t", 1)], member_id=m1, member_epoch=gen + 1)[0] == \
        E.ILLEGAL_GENERATION
    assert coord.fetch_offsets("g", [("t", 1)], member_id="nobody", member_epoch=gen)[0] == \
        E.UNKNOWN_MEMBER_ID

"""OffsetCommit, OffsetFetch, OffsetDelete and offsets retention against Apache Kafka 4's
OffsetMetadataManagerTest (group-coordinator), and the decisions its cases exercise:
OffsetMetadataManager (validateOffsetCommit, fetchOffsets, deleteOffsets,
cleanupExpiredOffsets), ClassicGroup and ConsumerGroup (validateOffsetCommit,
validateOffsetFetch, validateOffsetDelete, offsetExpirationCondition,
isSubscribedToTopic) and GroupCoordinatorShard.cleanupGroupMetadata: the cases, or the
parts of them, that the other offsets tests (test_protocol_offsets.py,
test_offsets_retention.py, test_protocol_kafka_cases.py, test_consumer_kafka_cases.py)
do not already pin down.

Each test asserts Kafka's answer through fastcoord's public API and names the Kafka test
method it comes from. Transactional offsets, record replay and metrics are out of scope
(they have no counterpart here). Both twins.
"""
from __future__ import annotations

import pytest

from fastcoord import Errors, OffsetAndMetadata
from fastcoord.core.consumer_embedded import encode_subscription
from fastcoord.core.store import DeferredStore

from helpers.protocol import (
    COMPLETING, DEAD, EMPTY, GROUP, MAX_SESSION, NONE, RANGE, STABLE, Proto, offsets_of,
)

E = Errors
RETENTION = 60_000                      # offsets_retention_minutes=1
BAR0, BAR1 = ("bar", 0), ("bar", 1)


# -- helpers ----------------------------------------------------------------------------
def retention_proto(impl, **config) -> Proto:
    """A coordinator with a one-minute retention whose consumer-protocol members' sessions
    outlive the minutes the retention tests wait."""
    return Proto(impl, offsets_retention_minutes=1,
                 group_consumer_max_session_timeout_ms=MAX_SESSION,
                 group_consumer_session_timeout_ms=MAX_SESSION, **config)


def subscription(*topics: str) -> bytes:
    return encode_subscription(list(topics), None, None, -1)


def heartbeat(h: Proto, member_id: str, epoch: int, **kw):
    out = []
    h.coord.consumer_group_heartbeat(GROUP, member_id, epoch, callback=out.append, **kw)
    assert len(out) == 1 and out[0].error == NONE, out
    return out[0]


def consumer_member(h: Proto, member_id: str = "member", topics=("bar",)) -> int:
    """A consumer-protocol (KIP-848) member joins the group; its member epoch."""
    return heartbeat(h, member_id, 0, rebalance_timeout_ms=30_000,
                     subscribed_topic_names=list(topics), owned_partitions={}).member_epoch


def emptied_consumer_group(h: Proto) -> None:
    """A consumer group whose only member joined and left: Empty, of the consumer type."""
    consumer_member(h)
    heartbeat(h, "member", -1)
    assert h.coord.group_type(GROUP) == "consumer"


def classic_member_of_consumer_group(h: Proto):
    """A classic JoinGroup into a consumer group: (its member id, its generation, which
    is its member epoch)."""
    consumer_member(h, "other")
    r = h.join_old("", protocols=[(RANGE, subscription("bar"))])
    assert r.error == NONE and h.coord.group_type(GROUP) == "consumer", r
    return r.result.member_id, r.result.generation_id


def commit(h: Proto, member_id: str, epoch: int, offsets: dict) -> dict:
    """An OffsetCommit v9 (the latest Kafka 4.0 answers with member epochs)."""
    return h.coord.commit_offsets(GROUP, member_id, epoch, offsets, api_version=9)


def fetched(h: Proto, partitions=None, **member) -> tuple:
    """(error, {tp: (offset, metadata, leader epoch)}) of an OffsetFetch."""
    error, found = h.coord.fetch_offsets(GROUP, partitions, **member)
    return error, {tp: (om.offset, om.metadata, om.leader_epoch) for tp, om in found.items()}


# -- OffsetCommit: classic and simple groups ---------------------------------------------
@pytest.mark.parametrize("version", range(11))
def test_commit_with_a_generation_to_an_unknown_group_answers_by_version(impl, version):
    # OffsetMetadataManagerTest.testOffsetCommitWithUnknownGroup
    h = Proto(impl)
    expected = E.GROUP_ID_NOT_FOUND if version >= 9 else E.ILLEGAL_GENERATION
    assert h.coord.commit_offsets(GROUP, "member", 10, {BAR0: 100}, api_version=version) == \
        {BAR0: expected}
    assert h.coord.list_groups() == []


def test_commit_with_a_generation_to_a_group_without_members_is_unknown_member(impl):
    # OffsetMetadataManagerTest.testGenericGroupOffsetCommitWithUnknownMemberId
    h = Proto(impl)
    assert h.commit("", -1, {BAR1: 1}) == {BAR1: NONE}           # an Empty simple group
    assert h.commit("member", 10, {BAR0: 100}) == {BAR0: E.UNKNOWN_MEMBER_ID}
    assert offsets_of(h.fetch([BAR0])[1]) == {BAR0: -1}


def test_static_member_committing_under_an_unknown_instance_id_is_unknown_member(impl):
    # OffsetMetadataManagerTest.testGenericGroupOffsetCommitWithFencedInstanceId
    h = Proto(impl)
    f = h.form_group(1, static=True, instances=["new-instance-id"])
    for generation in (10, f.generation):
        assert h.commit(f.leader, generation, {BAR0: 100}, instance="old-instance-id") == \
            {BAR0: E.UNKNOWN_MEMBER_ID}
    assert offsets_of(h.fetch([BAR0])[1]) == {BAR0: -1}


def test_commit_without_member_or_generation_while_completing_rebalance(impl):
    # OffsetMetadataManagerTest.testGenericGroupOffsetCommitWithoutMemberIdAndGeneration
    h = Proto(impl)
    h.form_group(1, sync=False)
    assert h.state() == COMPLETING
    assert h.commit("", -1, {BAR0: 100}) == {BAR0: E.UNKNOWN_MEMBER_ID}


def test_commit_restarts_the_members_session(impl):
    # OffsetMetadataManagerTest.testGenericGroupOffsetCommitMaintainsSession
    h = Proto(impl)
    f = h.form_group(1, session=5000, rebalance=5000)
    h.advance(2500)
    assert h.commit(f.leader, f.generation, {BAR0: 100}) == {BAR0: NONE}
    h.advance(2500)                      # the session the sync started is over
    assert h.has_member(f.leader)
    h.advance(2500)                      # the one the commit started is over too
    assert not h.has_member(f.leader)


def test_simple_commit_with_an_instance_id_creates_the_group(impl):
    # OffsetMetadataManagerTest.testSimpleGroupOffsetCommitWithInstanceId
    h = Proto(impl, start_ms=1234)
    assert h.commit("", -1, {BAR0: 100}, instance="instance-id") == {BAR0: NONE}
    d = h.describe()
    assert (d.state, d.protocol_type, d.members) == (EMPTY, "", [])
    assert h.fetch([BAR0]) == (NONE, {BAR0: OffsetAndMetadata(100, "", -1, 1234)})


# -- OffsetCommit: consumer groups (KIP-848) ---------------------------------------------
def test_classic_member_of_a_consumer_group_commits_at_its_generation_only(impl):
    # OffsetMetadataManagerTest.testConsumerGroupOffsetCommitWithIllegalGenerationId
    h = Proto(impl)
    member, generation = classic_member_of_consumer_group(h)
    for wrong in (generation - 1, generation + 1):
        assert commit(h, member, wrong, {BAR0: 100}) == {BAR0: E.ILLEGAL_GENERATION}
    assert commit(h, member, generation, {BAR0: 100}) == {BAR0: NONE}


def test_consumer_group_member_commit_keeps_leader_epoch_metadata_and_time(impl):
    # OffsetMetadataManagerTest.testConsumerGroupOffsetCommit
    h = Proto(impl, start_ms=5000)
    epoch = consumer_member(h)
    assert commit(h, "member", epoch, {BAR0: OffsetAndMetadata(100, "metadata", 10)}) == \
        {BAR0: NONE}
    assert h.fetch([BAR0]) == (NONE, {BAR0: OffsetAndMetadata(100, "metadata", 10, 5000)})


def test_consumer_group_commit_with_metadata_too_large(impl):
    # OffsetMetadataManagerTest.testConsumerGroupOffsetCommitWithOffsetMetadataTooLarge
    h = Proto(impl, offset_metadata_max_bytes=5)
    epoch = consumer_member(h)
    result = commit(h, "member", epoch, {BAR0: OffsetAndMetadata(100, "toolarge", 10),
                                         BAR1: OffsetAndMetadata(100, "small", 10)})
    assert result == {BAR0: E.OFFSET_METADATA_TOO_LARGE, BAR1: NONE}
    assert fetched(h) == (NONE, {BAR1: (100, "small", 10)})


def test_admin_commit_to_an_empty_consumer_group(impl):
    # OffsetMetadataManagerTest.testConsumerGroupOffsetCommitFromAdminClient
    h = Proto(impl)
    emptied_consumer_group(h)
    assert h.commit("", -1, {BAR0: 100}) == {BAR0: NONE}
    assert h.coord.group_type(GROUP) == "consumer"
    assert fetched(h) == (NONE, {BAR0: (100, "", -1)})


@pytest.mark.parametrize("version", range(1, 9))
def test_consumer_protocol_member_commit_below_v9_is_unsupported_version(impl, version):
    # OffsetMetadataManagerTest.testConsumerGroupOffsetCommitWithVersionSmallerThanVersion9
    h = Proto(impl)
    epoch = consumer_member(h)
    assert h.coord.commit_offsets(GROUP, "member", epoch + 1, {BAR0: 100},
                                  api_version=version) == {BAR0: E.UNSUPPORTED_VERSION}
    assert offsets_of(h.fetch([BAR0])[1]) == {BAR0: -1}


# -- OffsetFetch ------------------------------------------------------------------------
def test_fetch_of_an_unknown_group_answers_invalid_offsets(impl):
    # OffsetMetadataManagerTest.testFetchOffsetsWithUnknownGroup
    h = Proto(impl)
    parts = [("foo", 0), ("foo", 1), BAR0]
    assert fetched(h, parts) == (NONE, {tp: (-1, "", -1) for tp in parts})


def test_fetch_all_sees_only_written_offsets(impl):
    # OffsetMetadataManagerTest.testFetchAllOffsetsAtDifferentCommittedOffset
    store = DeferredStore()
    h = Proto(impl, store=store)
    answers = []
    h.coord.commit_offsets(GROUP, "", -1, {("foo", 0): 100}, callback=answers.append)
    store.complete_all()
    h.coord.commit_offsets(GROUP, "", -1, {("foo", 0): 101, BAR0: 200},
                           callback=answers.append)
    assert offsets_of(h.fetch()[1]) == {("foo", 0): 100}
    store.complete_all()
    assert answers == [{("foo", 0): NONE}, {("foo", 0): NONE, BAR0: NONE}]
    assert offsets_of(h.fetch()[1]) == {("foo", 0): 101, BAR0: 200}


def test_member_fetch_at_its_epoch(impl):
    # OffsetMetadataManagerTest.testConsumerGroupOffsetFetchWithMemberIdAndEpoch
    h = Proto(impl)
    epoch = consumer_member(h)
    commit(h, "member", epoch, {BAR0: OffsetAndMetadata(100, "metadata", 1)})
    for parts in ([BAR0], None):
        assert fetched(h, parts, member_id="member", member_epoch=epoch) == \
            (NONE, {BAR0: (100, "metadata", 1)})


def test_admin_fetch_from_a_consumer_group_with_members(impl):
    # OffsetMetadataManagerTest.testConsumerGroupOffsetFetchFromAdminClient
    h = Proto(impl)
    epoch = consumer_member(h)
    commit(h, "member", epoch, {BAR0: OffsetAndMetadata(100, "metadata", 1)})
    for parts in ([BAR0], None):
        assert fetched(h, parts) == (NONE, {BAR0: (100, "metadata", 1)})


def test_member_fetch_from_an_empty_consumer_group_is_unknown_member(impl):
    # OffsetMetadataManagerTest.testConsumerGroupOffsetFetchWithUnknownMemberId
    h = Proto(impl)
    emptied_consumer_group(h)
    for member_id in ("", "member"):
        for parts in ([BAR0], None):
            assert h.coord.fetch_offsets(GROUP, parts, member_id=member_id,
                                         member_epoch=0)[0] == E.UNKNOWN_MEMBER_ID


def test_member_fetch_all_at_another_epoch_is_stale(impl):
    # OffsetMetadataManagerTest.testConsumerGroupOffsetFetchWithStaleMemberEpoch
    h = Proto(impl)
    epoch = consumer_member(h)
    for parts in ([BAR0], None):
        assert h.coord.fetch_offsets(GROUP, parts, member_id="member",
                                     member_epoch=epoch + 9)[0] == E.STALE_MEMBER_EPOCH


def test_classic_member_fetch_at_another_generation_is_illegal_generation(impl):
    # OffsetMetadataManagerTest.testConsumerGroupOffsetFetchWithIllegalGenerationId
    h = Proto(impl)
    member, generation = classic_member_of_consumer_group(h)
    for parts in ([BAR0], None):
        assert h.coord.fetch_offsets(GROUP, parts, member_id=member,
                                     member_epoch=generation + 8)[0] == E.ILLEGAL_GENERATION
        assert h.coord.fetch_offsets(GROUP, parts, member_id=member,
                                     member_epoch=generation)[0] == NONE


# -- OffsetDelete and DeleteGroups --------------------------------------------------------
def test_offset_delete_of_a_simple_groups_last_offset_removes_the_group(impl):
    # OffsetMetadataManagerTest.testGenericGroupOffsetDelete; classic groups follow Kafka
    # 3.x here (handleDeleteOffsets removes the group left without offsets), where Kafka
    # 4 leaves it to the next retention pass (docs/offsets-retention.md)
    h = Proto(impl)
    h.commit("", -1, {BAR0: 100})
    assert h.coord.delete_offsets(GROUP, [BAR0]) == (NONE, {BAR0: NONE})
    assert offsets_of(h.fetch([BAR0])[1]) == {BAR0: -1}
    assert h.state() == DEAD
    assert h.coord.cleanup_group_metadata() == (0, 0)


def test_offset_delete_of_an_empty_consumer_groups_last_offset_leaves_the_group(impl):
    # OffsetMetadataManagerTest.testConsumerGroupOffsetDelete
    h = Proto(impl)
    emptied_consumer_group(h)
    h.commit("", -1, {BAR0: 100})
    assert h.coord.delete_offsets(GROUP, [BAR0]) == (NONE, {BAR0: NONE})
    assert offsets_of(h.fetch([BAR0])[1]) == {BAR0: -1}
    assert h.coord.group_type(GROUP) == "consumer"
    assert h.coord.cleanup_group_metadata() == (0, 1)
    assert h.coord.group_type(GROUP) is None


@pytest.mark.parametrize("kind", ["classic", "consumer"])
def test_delete_group_deletes_all_its_offsets(impl, kind):
    # OffsetMetadataManagerTest.testDeleteGroupAllOffsets
    h = Proto(impl)
    if kind == "consumer":
        emptied_consumer_group(h)
    parts = [("bar-0", 0), ("bar-0", 1), ("bar-1", 0)]
    assert h.commit("", -1, dict.fromkeys(parts, 100)) == dict.fromkeys(parts, NONE)
    assert h.coord.delete_groups([GROUP]) == {GROUP: NONE}
    assert h.fetch() == (NONE, {})
    assert offsets_of(h.fetch(parts)[1]) == dict.fromkeys(parts, -1)


# -- retention (cleanupExpiredOffsets, offsetExpirationCondition) ------------------------
def test_groups_without_an_expiration_condition_keep_their_offsets(impl):
    # OffsetMetadataManagerTest.testCleanupExpiredOffsetsEmptyOffsetExpirationCondition
    h = retention_proto(impl)
    # a Stable group of another protocol type
    join = h.join_old("", group="connect", ptype="connect", session=MAX_SESSION,
                      rebalance=MAX_SESSION)
    h.run_until_done([join])
    member, generation = join.result.member_id, join.result.generation_id
    assert h.send_sync(member, generation, {member: b""}, group="connect").error == NONE
    assert h.commit(member, generation, {BAR0: 1}, group="connect") == {BAR0: NONE}
    # a consumer group completing a rebalance, with an offset of a topic it does not read
    assert h.commit("", -1, {("other", 0): 2}) == {("other", 0): NONE}
    h.form_group(1, sync=False, session=MAX_SESSION, rebalance=MAX_SESSION,
                 protocols=[(RANGE, subscription("bar"))])
    h.advance(2 * RETENTION)
    assert (h.state("connect"), h.state()) == (STABLE, COMPLETING)
    assert h.coord.cleanup_group_metadata() == (0, 0)
    assert offsets_of(h.fetch(group="connect")[1]) == {BAR0: 1}
    assert offsets_of(h.fetch()[1]) == {("other", 0): 2}


def test_consumer_group_offsets_of_unsubscribed_topics_expire_after_their_commit(impl):
    # OffsetMetadataManagerTest.testCleanupExpiredOffsets
    h = retention_proto(impl)
    first, second = ("firstTopic", 0), ("secondTopic", 0)
    epoch = consumer_member(h, topics=("firstTopic",))
    assert commit(h, "member", epoch, {first: 100, second: 100}) == {first: NONE, second: NONE}
    h.advance(500)
    assert commit(h, "member", epoch, {("secondTopic", 1): 100}) == {("secondTopic", 1): NONE}
    h.advance(RETENTION - 500)
    assert h.coord.cleanup_group_metadata() == (1, 0)
    assert set(offsets_of(h.fetch()[1])) == {first, ("secondTopic", 1)}
    h.advance(500)
    assert h.coord.cleanup_group_metadata() == (1, 0)
    assert set(offsets_of(h.fetch()[1])) == {first}
    # no longer subscribed to firstTopic: its offset, past the retention, goes too
    heartbeat(h, "member", epoch, subscribed_topic_names=["thirdTopic"])
    assert h.coord.cleanup_group_metadata() == (1, 0)
    assert h.fetch() == (NONE, {})


def test_empty_consumer_group_offsets_expire_retention_after_their_commit(impl):
    # ConsumerGroupTest.testOffsetExpirationCondition (via cleanupExpiredOffsets)
    h = retention_proto(impl)
    epoch = consumer_member(h)
    assert commit(h, "member", epoch, {BAR0: 100}) == {BAR0: NONE}
    h.advance(RETENTION // 2)
    heartbeat(h, "member", -1)
    h.advance(RETENTION // 2)
    # every offset expired: the Empty group goes with them
    assert h.coord.cleanup_group_metadata() == (1, 1)
    assert h.coord.group_type(GROUP) is None


def test_empty_consumer_group_without_offsets_is_removed_by_the_retention_pass(impl):
    # OffsetMetadataManagerTest.testCleanupExpiredOffsetsGroupHasNoOffsets
    h = retention_proto(impl)
    emptied_consumer_group(h)
    assert h.coord.cleanup_group_metadata() == (0, 1)
    assert h.coord.group_type(GROUP) is None


def test_empty_classic_group_offsets_expire_retention_after_it_became_empty(impl):
    # ClassicGroupTest.testOffsetExpirationCondition (via cleanupExpiredOffsets)
    h = retention_proto(impl)
    f = h.form_group(1, session=MAX_SESSION, rebalance=MAX_SESSION,
                     protocols=[(RANGE, subscription("bar"))])
    assert h.commit(f.leader, f.generation, {BAR0: 1}) == {BAR0: NONE}
    h.leave(f.leader)
    h.advance(RETENTION - 1)
    # committed after the group became Empty: it expires with the group's others
    assert h.commit("", -1, {BAR1: 2}) == {BAR1: NONE}
    assert h.coord.cleanup_group_metadata() == (0, 0)
    h.advance(1)
    assert h.coord.cleanup_group_metadata() == (2, 1)
    assert h.state() == DEAD

"""OffsetCommit (v0-v9) and OffsetFetch (v0-v9) on the wire, Kafka's KafkaApis answers
that the other server tests leave out: an empty topics list, duplicate and negative
partitions, v1's commit timestamp, v2-v4's retention time, v7's group instance id, a
classic group's v9 requests, per-topic ACLs at the versions the server tests do not
reach, require_stable with a commit still being written, v8+'s batched groups (each its
own error, all topics or named ones), the empty group id at v8/v9.

Each a real frame through KafkaApis to the real GroupCoordinator (in process, ManualClock),
asserting Kafka's answer. Reference: apache/kafka 3.x (classic groups: KafkaApis.scala's
handleOffsetCommitRequest / handleOffsetFetchRequest, GroupCoordinatorAdapter.scala,
GroupCoordinator.scala, GroupMetadataManager.scala, GroupMetadata.scala) and 4.x
(consumer-protocol requests: group-coordinator's GroupCoordinatorService,
OffsetMetadataManager, ClassicGroup)."""
from __future__ import annotations

import pytest

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock
from fastcoord.core.store import DeferredStore
from fastcoord.server.security import Acl, Security

from tests.server.test_classic_wire_checks import (
    _commit_body, _join_body, _send, _stable_member,
)
from tests.server.test_consumer_protocol_wire import TOPICS, _apis, _call

E = Errors
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_AUTHORIZATION_FAILED = 29
DAY_MS = 24 * 3600 * 1000
# The anonymous client may read the group "g*" and the topics "orders" and "nope" (a
# topic this broker does not have); "payments" exists but is not its to see.
ACLS = [Acl("User:ANONYMOUS", ("Read",), group="g", prefixed=True),
        Acl("User:ANONYMOUS", ("Read",), topic="orders"),
        Acl("User:ANONYMOUS", ("Read",), topic="nope")]


def _wire(impl, *, store=None, acls=None, **config):
    """KafkaApis over a real coordinator (ManualClock at 0), with ACLs when given."""
    config.setdefault("group_initial_rebalance_delay_ms", 0)
    coord = GroupCoordinator(CoordinatorConfig(**config), clock=ManualClock(0), store=store,
                             impl=impl)
    coord.set_topics(dict(TOPICS))
    return _apis(coord, security=None if acls is None else Security(acls=acls))


def _errors(answer) -> list:
    """An OffsetCommit answer as [((topic, partition), error)], in answer order."""
    return [((t.name, p.partition_index), p.error_code)
            for t in answer.topics for p in t.partitions]


def _fetched(answer) -> list:
    """An OffsetFetch answer (or one v8+ group) as [((topic, partition), (offset, error))]."""
    return [((t.name, p.partition_index), (p.committed_offset, p.error_code))
            for t in answer.topics for p in t.partitions]


def _fetch_body(version, group, topics, require_stable=False):
    """A v1-v7 OffsetFetch body; `topics` {name: partitions} or None (all, v2+)."""
    body = {"group_id": group, "topics": None if topics is None else [
        {"name": n, "partition_indexes": ps} for n, ps in topics.items()]}
    if version >= 7:
        body["require_stable"] = require_stable
    return body


def _fetch_groups(apis, version, groups, require_stable=False):
    """A v8+ OffsetFetch of `groups` [(group id, {name: partitions} or None)]; v9 as an
    admin (no member id, epoch -1). Returns the answer's groups."""
    entries = []
    for group, topics in groups:
        entry = {"group_id": group, "topics": None if topics is None else [
            {"name": n, "partition_indexes": ps} for n, ps in topics.items()]}
        if version >= 9:
            entry.update(member_id=None, member_epoch=-1)
        entries.append(entry)
    return _call(apis, 9, version, {"groups": entries, "require_stable": require_stable}).groups


def _commit(apis, version, group, partitions, **member):
    return _errors(_call(apis, 8, version, _commit_body(version, group, partitions, **member)))


# ---- OffsetCommit -----------------------------------------------------------------------

@pytest.mark.parametrize("version", [1, 2, 8, 9])
def test_commit_of_no_topics_answers_no_topics_and_makes_no_group(impl, version):
    # KafkaApis.handleOffsetCommitRequest: authorizedTopicsRequest.isEmpty -> the builder's
    # (empty) answer, the coordinator never asked
    apis = _wire(impl)
    answer = _call(apis, 8, version, _commit_body(version, "quiet", []))
    assert tuple(answer.topics) == ()
    assert apis.coord.group_type("quiet") is None


@pytest.mark.parametrize("version", [1, 6, 9])
def test_commit_of_a_negative_partition_is_unknown_topic_or_partition(impl, version):
    # handleOffsetCommitRequest: metadataCache.getPartitionInfo(topic, -1) is empty
    apis = _wire(impl)
    got = dict(_commit(apis, version, "neg", [("orders", -1, 3, None), ("orders", 2, 4, None)]))
    assert got == {("orders", -1): UNKNOWN_TOPIC_OR_PARTITION, ("orders", 2): 0}


@pytest.mark.parametrize("version", [2, 8])
def test_commit_of_a_duplicate_partition_is_answered_per_entry_and_the_last_value_kept(
        impl, version):
    # OffsetMetadataManager.commitOffset (Kafka 4): each request entry is answered and
    # written, so the last value stays (Kafka 3.x's adapter answered a repeated
    # partition once: docs/offsets-retention.md)
    apis = _wire(impl)
    got = _commit(apis, version, "dup", [("orders", 1, 5, "a"), ("orders", 1, 8, "b")])
    assert got == [(("orders", 1), 0), (("orders", 1), 0)]
    fetched = _call(apis, 9, 5, _fetch_body(5, "dup", {"orders": [1]})).topics[0].partitions[0]
    assert (fetched.committed_offset, fetched.metadata) == (8, "b")


def test_commit_v1_commit_timestamp_is_not_kept(impl):
    # GroupCoordinatorAdapter.createOffsetAndMetadata (3.x) dates a v1 commit by its
    # commit_timestamp; fastcoord dates every commit when it takes it, so a client's
    # clock cannot expire offsets early (docs/offsets-retention.md)
    apis = _wire(impl, offsets_retention_minutes=7 * 24 * 60)
    apis.coord.advance_time(8 * DAY_MS)
    body = _commit_body(1, "old", [("orders", 0, 11, None), ("orders", 1, 12, None)])
    body["topics"][0]["partitions"][0]["commit_timestamp"] = 1   # 8 days ago, past retention
    assert _errors(_call(apis, 8, 1, body)) == [(("orders", 0), 0), (("orders", 1), 0)]
    assert apis.coord.cleanup_group_metadata() == (0, 0)
    fetched = _call(apis, 9, 1, _fetch_body(1, "old", {"orders": [0, 1]}))
    assert _fetched(fetched) == [(("orders", 0), (11, 0)), (("orders", 1), (12, 0))]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_commit_v2_to_v4_with_a_retention_time_commits(impl, version):
    # GroupCoordinatorAdapter.commitOffsets: retention_time_ms only sets the expiry
    # (fastcoord documents that it ignores it); the commit itself is answered as any
    apis = _wire(impl)
    body = _commit_body(version, "ret", [("orders", 3, 21, "m")])
    body["retention_time_ms"] = 60_000
    assert _errors(_call(apis, 8, version, body)) == [(("orders", 3), 0)]
    fetched = _call(apis, 9, 3, _fetch_body(3, "ret", {"orders": [3]}))
    assert _fetched(fetched) == [(("orders", 3), (21, 0))]


def _static_member(apis, group, instance):
    """A static member (JoinGroup v5 with `instance`) joined and synced: (member id,
    generation)."""
    answers = _send(apis, 11, 5, _join_body(5, group, instance=instance))
    apis.coord.advance_time(10)
    (joined,) = answers()
    assert joined.error_code == 0, joined
    synced = _call(apis, 14, 3, {"group_id": group, "generation_id": joined.generation_id,
                                 "member_id": joined.member_id, "group_instance_id": instance,
                                 "assignments": [{"member_id": joined.member_id,
                                                  "assignment": b"a"}]})
    assert synced.error_code == 0
    return joined.member_id, joined.generation_id


def test_commit_v7_checks_the_group_instance_id(impl):
    # GroupCoordinator.validateCurrentMember (3.x): an instance id mapped to another member
    # FENCED_INSTANCE_ID, an unknown one UNKNOWN_MEMBER_ID, its own member commits
    apis = _wire(impl)
    member, generation = _static_member(apis, "gs", "i-1")
    part = [("orders", 0, 4, None)]

    def commit(member_id, instance):
        body = _commit_body(7, "gs", part, generation, member_id)
        body["group_instance_id"] = instance
        return _errors(_call(apis, 8, 7, body))[0][1]

    assert commit(member, "i-1") == 0
    assert commit("someone-else", "i-1") == int(E.FENCED_INSTANCE_ID)
    assert commit(member, "i-2") == int(E.UNKNOWN_MEMBER_ID)


def test_commit_v9_by_a_classic_member_carries_its_generation(impl):
    # ClassicGroup.validateOffsetCommit (4.x): generation_id_or_member_epoch is the
    # classic member's generation: its own commits, another ILLEGAL_GENERATION
    apis = _wire(impl)
    member, generation = _stable_member(apis, "gc")
    part = [("orders", 2, 9, None)]
    assert _commit(apis, 9, "gc", part, generation=generation, member=member) == \
        [(("orders", 2), 0)]
    assert _commit(apis, 9, "gc", part, generation=generation + 1, member=member) == \
        [(("orders", 2), int(E.ILLEGAL_GENERATION))]


@pytest.mark.parametrize("version", [1, 9])
def test_commit_metadata_limit_and_null_metadata(impl, version):
    # GroupCoordinator.validateOffsetMetadataLength (3.x) / OffsetMetadataManager
    # .isMetadataInvalid (4.x): over offset.metadata.max.bytes that partition alone
    # OFFSET_METADATA_TOO_LARGE; null metadata is stored as ""
    apis = _wire(impl)
    got = dict(_commit(apis, version, "meta", [("orders", 0, 1, None),
                                               ("orders", 1, 2, "y" * 4097)]))
    assert got == {("orders", 0): 0, ("orders", 1): int(E.OFFSET_METADATA_TOO_LARGE)}
    parts = _call(apis, 9, 6, _fetch_body(6, "meta", {"orders": [0, 1]})).topics[0].partitions
    assert [(p.committed_offset, p.metadata) for p in parts] == [(1, ""), (-1, "")]


@pytest.mark.parametrize("version", [1, 9])
def test_commit_checks_read_on_each_topic_before_its_existence(impl, version):
    # handleOffsetCommitRequest: filterByAuthorized(READ, TOPIC) first (29 for every
    # partition of a denied topic, existing or not), then metadataCache (3)
    apis = _wire(impl, acls=ACLS)
    got = dict(_commit(apis, version, "g-acl", [("orders", 0, 1, None), ("payments", 0, 1, None),
                                                ("nope", 0, 1, None), ("orders", 7, 1, None)]))
    assert got == {("orders", 0): 0, ("payments", 0): TOPIC_AUTHORIZATION_FAILED,
                   ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION,
                   ("orders", 7): UNKNOWN_TOPIC_OR_PARTITION}


def test_commit_to_a_denied_group_with_no_topics_answers_no_topics(impl):
    # handleOffsetCommitRequest: getErrorResponse(GROUP_AUTHORIZATION_FAILED) of a request
    # with no partitions has no topics; with partitions, 30 on each
    apis = _wire(impl, acls=ACLS)
    assert tuple(_call(apis, 8, 8, _commit_body(8, "other", [])).topics) == ()
    assert _commit(apis, 8, "other", [("orders", 0, 1, None)]) == \
        [(("orders", 0), int(E.GROUP_AUTHORIZATION_FAILED))]


def test_commit_and_fetch_of_the_empty_group_id_at_v8_and_v9(impl):
    # GroupCoordinatorService.commitOffsets / fetchOffsets (4.x): only a null group id is
    # INVALID_GROUP_ID; "" commits (generation -1) and is fetched, alone or batched
    apis = _wire(impl)
    assert _commit(apis, 9, "", [("orders", 4, 17, None)]) == [(("orders", 4), 0)]
    (empty, other) = _fetch_groups(apis, 8, [("", {"orders": [4]}), ("x", None)])
    assert (empty.group_id, empty.error_code, _fetched(empty)) == \
        ("", 0, [(("orders", 4), (17, 0))])
    assert (other.error_code, tuple(other.topics)) == (0, ())


# ---- OffsetFetch ------------------------------------------------------------------------

def _pending_commit(impl):
    """Group "gp" with orders-0 at 5 and orders-1 at 6 stored, then orders-0 at 9 being
    written (the store holds the write): (apis, store, the commit's answers)."""
    store = DeferredStore()
    apis = _wire(impl, store=store)
    first = _send(apis, 8, 2, _commit_body(2, "gp", [("orders", 0, 5, None),
                                                     ("orders", 1, 6, None)]))
    store.complete_all()
    assert _errors(first()[0]) == [(("orders", 0), 0), (("orders", 1), 0)]
    second = _send(apis, 8, 2, _commit_body(2, "gp", [("orders", 0, 9, None)]))
    assert store.pending and second() == []
    return apis, store, second


@pytest.mark.parametrize("version", [7, 8])
def test_fetch_require_stable_answers_a_pending_partition_unstable_alone(impl, version):
    # GroupMetadataManager.getOffsets (3.x): requireStable and a pending commit of that
    # partition -> that partition UNSTABLE_OFFSET_COMMIT, offset -1; the group's error and
    # the other partitions as usual (GroupCoordinator.handleFetchOffsets: Errors.NONE)
    apis, _, _ = _pending_commit(impl)
    topics = {"orders": [0, 1]}
    if version == 7:
        answer = _call(apis, 9, 7, _fetch_body(7, "gp", topics, require_stable=True))
    else:
        (answer,) = _fetch_groups(apis, 8, [("gp", topics)], require_stable=True)
    assert answer.error_code == 0
    assert _fetched(answer) == [(("orders", 0), (-1, int(E.UNSTABLE_OFFSET_COMMIT))),
                                (("orders", 1), (6, 0))]


def test_fetch_without_require_stable_sees_the_last_stored_offset(impl):
    # GroupMetadataManager.getOffsets: without requireStable, group.offset(tp), the offset
    # stored before the pending commit; once stored, the new one
    apis, store, second = _pending_commit(impl)
    answer = _call(apis, 9, 7, _fetch_body(7, "gp", {"orders": [0]}))
    assert _fetched(answer) == [(("orders", 0), (5, 0))]
    store.complete_all()
    assert _errors(second()[0]) == [(("orders", 0), 0)]
    answer = _call(apis, 9, 7, _fetch_body(7, "gp", {"orders": [0]}, require_stable=True))
    assert _fetched(answer) == [(("orders", 0), (9, 0))]


@pytest.mark.parametrize("version", [1, 5])
def test_fetch_of_a_negative_partition_answers_no_offset(impl, version):
    # GroupMetadataManager.getOffsets: a partition the group has no offset for (whatever
    # its number) -> INVALID_OFFSET with no error
    apis = _wire(impl)
    _commit(apis, 2, "fn", [("orders", 0, 3, None)])
    answer = _call(apis, 9, version, _fetch_body(version, "fn", {"orders": [-1, 0]}))
    assert _fetched(answer) == [(("orders", -1), (-1, 0)), (("orders", 0), (3, 0))]


def test_fetch_of_a_duplicate_partition_is_answered_per_entry(impl):
    # OffsetMetadataManager.fetchOffsets (Kafka 4) answers each request entry (Kafka 3.x's
    # getOffsets answered a repeated partition once)
    apis = _wire(impl)
    _commit(apis, 2, "fd", [("orders", 2, 8, None)])
    answer = _call(apis, 9, 5, _fetch_body(5, "fd", {"orders": [2, 2]}))
    assert _fetched(answer) == [(("orders", 2), (8, 0)), (("orders", 2), (8, 0))]


@pytest.mark.parametrize("version", [8, 9])
def test_fetch_v8_batched_groups_each_answered_with_its_own_error(impl, version):
    # KafkaApis.handleOffsetFetchRequestV8AndAbove / fetchOffsetsForGroup: per group, a
    # denied group GROUP_AUTHORIZATION_FAILED with no topics, an unknown one -1 offsets and
    # no error, a named denied topic 29 per partition, all topics without the denied ones
    apis = _wire(impl, acls=ACLS + [Acl("User:ANONYMOUS", ("Read",), topic="payments",
                                        deny=True)])
    assert _commit(apis, 2, "g1", [("orders", 1, 5, None)]) == [(("orders", 1), 0)]
    # (a commit the ACLs would refuse, made on the coordinator directly)
    apis.coord.commit_offsets("g1", "", -1, {("payments", 0): 7})
    denied, unknown, named, everything = _fetch_groups(apis, version, [
        ("other", {"orders": [1]}), ("g-none", {"orders": [1]}),
        ("g1", {"orders": [1], "payments": [0]}), ("g1", None)])
    assert (denied.group_id, denied.error_code, tuple(denied.topics)) == \
        ("other", int(E.GROUP_AUTHORIZATION_FAILED), ())
    assert (unknown.error_code, _fetched(unknown)) == (0, [(("orders", 1), (-1, 0))])
    assert named.error_code == 0
    assert sorted(_fetched(named)) == [(("orders", 1), (5, 0)),
                                       (("payments", 0), (-1, TOPIC_AUTHORIZATION_FAILED))]
    assert (everything.error_code, _fetched(everything)) == (0, [(("orders", 1), (5, 0))])


def test_fetch_v9_of_a_classic_group_ignores_member_id_and_epoch(impl):
    # ClassicGroup.validateOffsetFetch (4.x): only a Dead group fails; the member id and
    # epoch of a v9 request are not checked against a classic group
    apis = _wire(impl)
    member, generation = _stable_member(apis, "gk")
    _commit(apis, 8, "gk", [("orders", 5, 31, None)], generation=generation, member=member)
    answer = _call(apis, 9, 9, {"groups": [{"group_id": "gk", "member_id": "stranger",
                                            "member_epoch": 99, "topics": None}],
                                "require_stable": False})
    (group,) = answer.groups
    assert (group.error_code, _fetched(group)) == (0, [(("orders", 5), (31, 0))])


@pytest.mark.parametrize("version", [2, 7])
def test_fetch_of_an_empty_topics_list_answers_nothing(impl, version):
    # KafkaApis.fetchOffsets: an empty (not null) list is not all partitions: nothing to
    # fetch, no error
    apis = _wire(impl)
    _commit(apis, 2, "fe", [("orders", 0, 3, None)])
    answer = _call(apis, 9, version, _fetch_body(version, "fe", {}))
    assert (answer.error_code, tuple(answer.topics)) == (0, ())

"""The classic group APIs on the wire, Kafka 3.x's KafkaApis checks and answers that the
other server tests leave out: per-version request checks (SyncGroup v5's mandatory
protocol fields, ApiVersions v3's client software fields, FindCoordinator's key type),
what each API answers while the coordinator is loading a shard, the empty group id by
API, JoinGroup/LeaveGroup/OffsetCommit/OffsetFetch answers by version, DeleteGroups of a
repeated name.

Each a real frame through KafkaApis to the real GroupCoordinator (in process, ManualClock),
asserting Kafka's answer. Reference: apache/kafka core/.../kafka/server/KafkaApis.scala of
3.x (the ZooKeeper-era file with handleOffsetFetchRequestBetweenV1AndV7), the old
core/.../coordinator/group/GroupCoordinator.scala, and clients/.../common/requests."""
from __future__ import annotations

import pytest

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock
from fastcoord.core.config import shard_for
from fastcoord.server.apis import Session
from fastcoord.server.protocol import (
    SUPPORTED_VERSIONS, decode_request, decode_response, encode_request, encode_response,
)

from tests.server.test_consumer_protocol_wire import TOPICS, _apis, _call

E = Errors
INVALID_REQUEST = 42
UNKNOWN_TOPIC_OR_PARTITION = 3


def _real(impl, **config):
    config.setdefault("group_initial_rebalance_delay_ms", 0)
    coord = GroupCoordinator(CoordinatorConfig(**config), clock=ManualClock(0), impl=impl)
    coord.set_topics(dict(TOPICS))
    return _apis(coord)


def _send(apis, api_key, version, body):
    """Send a frame; returns a function giving the decoded answers so far (a list)."""
    frame = encode_request(api_key, version, 9, body, client_id="classic")
    request = decode_request(frame[4:], apis.versions)
    session = Session("10.0.0.8")
    session.client_id = request.client_id
    replies = []
    apis.handle(session, request, replies.append)

    def answers():
        out = []
        for r in replies:
            data = encode_response(api_key, version, 9, r)
            out.append(decode_response(api_key, version, data[4:])[1])
        return out
    return answers


def _join_body(version, group="g", member="", instance=None, protocol_type="consumer",
               protocols=(("range", b"m"),), session_ms=10_000):
    body = {"group_id": group, "session_timeout": session_ms, "member_id": member,
            "protocol_type": protocol_type,
            "protocols": [{"name": n, "metadata": m} for n, m in protocols]}
    if version >= 1:
        body["rebalance_timeout"] = 10_000
    if version >= 5:
        body["group_instance_id"] = instance
    return body


def _joined_member(apis, group="g"):
    """One dynamic member joined (v5: MEMBER_ID_REQUIRED, then again) and not synced:
    (member id, generation)."""
    first = _call(apis, 11, 5, _join_body(5, group))
    assert first.error_code == int(E.MEMBER_ID_REQUIRED)
    answers = _send(apis, 11, 5, _join_body(5, group, member=first.member_id))
    apis.coord.advance_time(10)
    (joined,) = answers()
    assert joined.error_code == 0, joined
    return joined.member_id, joined.generation_id


def _stable_member(apis, group="g"):
    member, generation = _joined_member(apis, group)
    synced = _call(apis, 14, 3, {"group_id": group, "generation_id": generation,
                                 "member_id": member, "group_instance_id": None,
                                 "assignments": [{"member_id": member, "assignment": b"a"}]})
    assert synced.error_code == 0
    return member, generation


def _loading(apis, group):
    apis.coord.begin_loading(shard_for(group, apis.coord.config.num_shards))


# ---- SyncGroup v5: protocol type and name are mandatory ---------------------------------

@pytest.mark.parametrize("missing", ["protocol_type", "protocol_name"])
def test_sync_v5_without_protocol_type_or_name_is_inconsistent_group_protocol(impl, missing):
    """KafkaApis.handleSyncGroupRequest: `!syncGroupRequest.areMandatoryProtocolTypeAndName
    Present()` (v5+: both non-null) answers INCONSISTENT_GROUP_PROTOCOL before the ACL
    check and before the coordinator sees the request."""
    apis = _real(impl)
    member, generation = _joined_member(apis)
    body = {"group_id": "g", "generation_id": generation, "member_id": member,
            "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": member, "assignment": b"a"}]}
    body[missing] = None
    answer = _call(apis, 14, 5, body)
    assert answer.error_code == int(E.INCONSISTENT_GROUP_PROTOCOL)
    assert answer.assignment == b""


def test_sync_v5_without_protocol_fields_to_an_unknown_group_is_still_inconsistent(impl):
    apis = _real(impl)
    answer = _call(apis, 14, 5, {"group_id": "nobody", "generation_id": 1, "member_id": "m",
                                 "group_instance_id": None, "protocol_type": None,
                                 "protocol_name": None, "assignments": []})
    assert answer.error_code == int(E.INCONSISTENT_GROUP_PROTOCOL)


def test_sync_v4_needs_no_protocol_fields_and_v5_with_them_syncs(impl):
    apis = _real(impl)
    member, generation = _joined_member(apis)
    answer = _call(apis, 14, 5, {"group_id": "g", "generation_id": generation,
                                 "member_id": member, "group_instance_id": None,
                                 "protocol_type": "consumer", "protocol_name": "range",
                                 "assignments": [{"member_id": member, "assignment": b"a"}]})
    assert (answer.error_code, answer.protocol_type, answer.protocol_name,
            answer.assignment) == (0, "consumer", "range", b"a")
    # a wrong name (non-null) is the coordinator's INCONSISTENT_GROUP_PROTOCOL
    wrong = _call(apis, 14, 5, {"group_id": "g", "generation_id": generation,
                                "member_id": member, "group_instance_id": None,
                                "protocol_type": "consumer", "protocol_name": "sticky",
                                "assignments": []})
    assert wrong.error_code == int(E.INCONSISTENT_GROUP_PROTOCOL)


# ---- ApiVersions ------------------------------------------------------------------------

@pytest.mark.parametrize("name,version", [("", "1.0"), ("bad name", "1.0"),
                                          ("-lead", "1.0"), ("ok", ""), ("ok", "1.0.")])
def test_api_versions_v3_with_an_invalid_client_software_field_is_invalid_request(
        impl, name, version):
    """KafkaApis.handleApiVersionsRequest: `!apiVersionRequest.isValid` (v3+: both
    client software fields match [a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?) answers
    getErrorResponse(INVALID_REQUEST): error 42 and no api keys."""
    apis = _real(impl)
    answer = _call(apis, 18, 3, {"client_software_name": name,
                                 "client_software_version": version})
    assert answer.error_code == INVALID_REQUEST
    assert tuple(answer.api_keys) == ()


def test_api_versions_v3_with_valid_fields_lists_every_api(impl):
    apis = _real(impl)
    answer = _call(apis, 18, 3, {"client_software_name": "apache-kafka-java",
                                 "client_software_version": "3.7.0-SNAPSHOT"})
    assert answer.error_code == 0
    assert {k.api_key for k in answer.api_keys} == set(SUPPORTED_VERSIONS)
    # v0-2 have no such fields: always valid
    assert _call(apis, 18, 2, {}).error_code == 0


def test_unsupported_api_versions_version_lists_only_api_versions(impl):
    """ApiVersionsRequest.getErrorResponse(UNSUPPORTED_VERSION) (KIP-511): the v0 answer's
    api_keys hold ApiVersions' own range alone."""
    apis = _real(impl)
    frame = encode_request(18, 3, 9, {"client_software_name": "a",
                                      "client_software_version": "1"}, client_id="x")
    frame = frame[:6] + (SUPPORTED_VERSIONS[18][1] + 1).to_bytes(2, "big") + frame[8:]
    request = decode_request(frame[4:], apis.versions)
    replies = []
    apis.handle(Session("10.0.0.8"), request, replies.append)
    data = encode_response(18, 0, 9, replies[0])
    answer = decode_response(18, 0, data[4:])[1]
    assert answer.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in answer.api_keys] == [
        (18, *SUPPORTED_VERSIONS[18])]


# ---- FindCoordinator ----------------------------------------------------------------------

@pytest.mark.parametrize("version", [1, 2, 3])
def test_find_coordinator_unknown_key_type_is_invalid_request(impl, version):
    """KafkaApis.getCoordinator: CoordinatorType.forId of an unknown type throws
    InvalidRequestException, answered INVALID_REQUEST (no node)."""
    apis = _real(impl)
    answer = _call(apis, 10, version, {"key": "g", "key_type": 7})
    assert answer.error_code == INVALID_REQUEST
    assert answer.node_id == -1


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_find_coordinator_of_a_group_answers_this_broker(impl, version):
    apis = _real(impl)
    body = {"key": "g"} if version == 0 else {"key": "g", "key_type": 0}
    answer = _call(apis, 10, version, body)
    assert (answer.error_code, answer.node_id, answer.port) == (0, 0, 9092)


# ---- DeleteGroups ---------------------------------------------------------------------------

def test_delete_groups_answers_a_repeated_name_once(impl):
    """KafkaApis.handleDeleteGroupsRequest: groupsNames.asScala.distinct, the results a
    map by group id: one result per distinct name."""
    apis = _real(impl)
    _call(apis, 8, 2, _commit_body(2, "simple", [("orders", 0, 1, None)]))
    answer = _call(apis, 42, 2, {"groups_names": ["simple", "x", "simple", "x"]})
    got = sorted((r.group_id, r.error_code) for r in answer.results)
    assert got == [("simple", 0), ("x", int(E.GROUP_ID_NOT_FOUND))]


# ---- the coordinator loading ------------------------------------------------------------------

def test_list_groups_while_loading_is_coordinator_load_in_progress(impl):
    """GroupCoordinator.handleListGroups (3.x): an active coordinator answers
    COORDINATOR_LOAD_IN_PROGRESS while any partition is loading (groupManager.isLoading),
    with the groups it holds; KafkaApis.handleListGroupsRequest carries that error."""
    apis = _real(impl)
    _stable_member(apis, "held")
    loading = next(s for s in range(50) if s != shard_for("held", 50))
    apis.coord.begin_loading(loading)
    for version in (0, 3, 4):
        body = {"states_filter": []} if version >= 4 else {}
        answer = _call(apis, 16, version, body)
        assert answer.error_code == int(E.COORDINATOR_LOAD_IN_PROGRESS), version
        assert [g.group_id for g in answer.groups] == ["held"], version
    apis.coord.finish_loading(loading)
    assert _call(apis, 16, 4, {"states_filter": []}).error_code == 0


def test_list_groups_of_a_coordinator_shutting_down_is_not_available(impl):
    """GroupCoordinator.handleListGroups (3.x, and Kafka 4's service): a coordinator that
    is not active answers COORDINATOR_NOT_AVAILABLE with no groups."""
    apis = _real(impl)
    _stable_member(apis, "held")
    apis.coord.active = False
    for version in (0, 4):
        body = {"states_filter": []} if version >= 4 else {}
        answer = _call(apis, 16, version, body)
        assert (answer.error_code, list(answer.groups)) == (int(E.COORDINATOR_NOT_AVAILABLE), [])


@pytest.mark.parametrize("version", [2, 5, 7])
def test_offset_fetch_v2_to_v7_error_answer_has_no_topics(impl, version):
    """KafkaApis.handleOffsetFetchRequestBetweenV1AndV7: a group error answers
    offsetFetchRequest.getErrorResponse(error), which from v2 is the top-level error
    with no partitions (the coordinator's handleFetchOffsets gives error -> Map.empty)."""
    apis = _real(impl)
    _loading(apis, "lg")
    body = {"group_id": "lg", "topics": [{"name": "orders", "partition_indexes": [0, 1]}]}
    if version >= 7:
        body["require_stable"] = False
    answer = _call(apis, 9, version, body)
    assert answer.error_code == int(E.COORDINATOR_LOAD_IN_PROGRESS)
    assert tuple(answer.topics) == ()


def test_offset_fetch_v1_error_is_carried_by_each_partition(impl):
    """getErrorResponse below v2: every requested partition gets the error, offset -1."""
    apis = _real(impl)
    _loading(apis, "lg")
    answer = _call(apis, 9, 1, {"group_id": "lg", "topics": [
        {"name": "orders", "partition_indexes": [0, 1]}]})
    got = [(p.partition_index, p.committed_offset, p.error_code)
           for t in answer.topics for p in t.partitions]
    assert got == [(0, -1, 14), (1, -1, 14)]


def test_offset_fetch_v8_group_error_answers_that_group_with_no_topics(impl):
    """handleOffsetFetchRequestV8AndAbove: each group's (error, Map.empty) from
    fetchOffsets; a loading group answers its error and no topics, the others theirs."""
    apis = _real(impl)
    _call(apis, 8, 2, _commit_body(2, "ok", [("orders", 0, 4, "x")]))
    loading = "lg" if shard_for("lg", 50) != shard_for("ok", 50) else "lg2"
    _loading(apis, loading)
    topics = [{"name": "orders", "partition_indexes": [0]}]
    answer = _call(apis, 9, 8, {"groups": [{"group_id": loading, "topics": topics},
                                           {"group_id": "ok", "topics": topics}],
                                "require_stable": False})
    lg, ok = answer.groups
    assert (lg.error_code, tuple(lg.topics)) == (int(E.COORDINATOR_LOAD_IN_PROGRESS), ())
    assert ok.error_code == 0 and ok.topics[0].partitions[0].committed_offset == 4


def test_loading_answers_of_the_other_apis(impl):
    """GroupCoordinator.validateGroupStatus while loading: COORDINATOR_LOAD_IN_PROGRESS,
    except a heartbeat (NONE) and a sync (REBALANCE_IN_PROGRESS); a join answers it with
    the member id it sent; a commit answers it for every partition."""
    apis = _real(impl)
    _loading(apis, "lg")
    join = _call(apis, 11, 5, _join_body(5, "lg", member="m-1"))
    assert (join.error_code, join.member_id, join.generation_id) == (14, "m-1", -1)
    sync = _call(apis, 14, 3, {"group_id": "lg", "generation_id": 1, "member_id": "m",
                               "group_instance_id": None, "assignments": []})
    assert sync.error_code == int(E.REBALANCE_IN_PROGRESS)
    hb = _call(apis, 12, 3, {"group_id": "lg", "generation_id": 1, "member_id": "m",
                             "group_instance_id": None})
    assert hb.error_code == 0
    leave = _call(apis, 13, 3, {"group_id": "lg", "members": [
        {"member_id": "m", "group_instance_id": None}]})
    assert (leave.error_code, tuple(leave.members)) == (14, ())
    commit = _call(apis, 8, 2, _commit_body(2, "lg", [("orders", 0, 1, None),
                                                      ("orders", 1, 1, None)]))
    assert [p.error_code for p in commit.topics[0].partitions] == [14, 14]
    described = _call(apis, 15, 2, {"groups": ["lg"]}).groups[0]
    assert (described.error_code, described.group_state, tuple(described.members)) == \
        (14, "", ())
    assert _call(apis, 42, 1, {"groups_names": ["lg"]}).results[0].error_code == 14


# ---- the empty group id by API -------------------------------------------------------------

def test_empty_group_id_is_invalid_for_the_membership_apis(impl):
    """GroupCoordinator.isValidGroupId: join, sync, heartbeat and leave need a non-empty
    group id (INVALID_GROUP_ID)."""
    apis = _real(impl)
    assert _call(apis, 11, 5, _join_body(5, "")).error_code == int(E.INVALID_GROUP_ID)
    assert _call(apis, 11, 0, _join_body(0, "")).error_code == int(E.INVALID_GROUP_ID)
    assert _call(apis, 14, 3, {"group_id": "", "generation_id": 1, "member_id": "m",
                               "group_instance_id": None, "assignments": []}
                 ).error_code == int(E.INVALID_GROUP_ID)
    assert _call(apis, 12, 3, {"group_id": "", "generation_id": 1, "member_id": "m",
                               "group_instance_id": None}).error_code == int(E.INVALID_GROUP_ID)
    assert _call(apis, 13, 0, {"group_id": "", "member_id": "m"}
                 ).error_code == int(E.INVALID_GROUP_ID)
    assert _call(apis, 13, 3, {"group_id": "", "members": [
        {"member_id": "m", "group_instance_id": None}]}).error_code == int(E.INVALID_GROUP_ID)


def test_empty_group_id_is_accepted_by_the_offset_and_admin_apis(impl):
    """isValidGroupId: OffsetCommit, OffsetFetch, DescribeGroups and DeleteGroups accept
    the empty group id (non-null only)."""
    apis = _real(impl)
    commit = _call(apis, 8, 2, _commit_body(2, "", [("orders", 0, 7, None)]))
    assert commit.topics[0].partitions[0].error_code == 0
    fetched = _call(apis, 9, 3, {"group_id": "", "topics": [
        {"name": "orders", "partition_indexes": [0]}]})
    assert (fetched.error_code, fetched.topics[0].partitions[0].committed_offset) == (0, 7)
    described = _call(apis, 15, 0, {"groups": [""]}).groups[0]
    assert (described.error_code, described.group_state) == (0, "Empty")
    assert _call(apis, 42, 0, {"groups_names": [""]}).results[0].error_code == 0


# ---- JoinGroup by version ------------------------------------------------------------------

def test_join_v4_static_member_is_not_asked_for_a_member_id(impl):
    """KafkaApis.handleJoinGroupRequest: requireKnownMemberId = version >= 4 and no
    group instance id. A static member's first join (v5) is taken at once."""
    apis = _real(impl)
    answers = _send(apis, 11, 5, _join_body(5, instance="i-1"))
    apis.coord.advance_time(10)
    (joined,) = answers()
    assert joined.error_code == 0 and joined.member_id.startswith("i-1-")
    assert joined.generation_id == 1 and joined.leader == joined.member_id


@pytest.mark.parametrize("version", [0, 3])
def test_join_before_v4_with_no_member_id_joins_at_once(impl, version):
    apis = _real(impl)
    answers = _send(apis, 11, version, _join_body(version))
    apis.coord.advance_time(10)
    (joined,) = answers()
    assert joined.error_code == 0 and joined.member_id and joined.generation_id == 1


@pytest.mark.parametrize("version,name", [(6, ""), (7, None)])
def test_join_error_protocol_name_by_version(impl, version, name):
    """handleJoinGroupRequest: an error's protocol name is null from v7, "" before
    (GroupCoordinator.NoProtocol); its protocol type null (v7+)."""
    apis = _real(impl)
    answer = _call(apis, 11, version, _join_body(version, "", member="m"))
    assert answer.error_code == int(E.INVALID_GROUP_ID)
    assert answer.protocol_name == name
    assert (answer.generation_id, answer.leader, tuple(answer.members)) == (-1, "", ())
    if version >= 7:
        assert answer.protocol_type is None


def test_join_v7_answers_the_protocol_type_and_name(impl):
    apis = _real(impl)
    first = _call(apis, 11, 7, _join_body(7))
    assert first.error_code == int(E.MEMBER_ID_REQUIRED)
    answers = _send(apis, 11, 7, _join_body(7, member=first.member_id))
    apis.coord.advance_time(10)
    (joined,) = answers()
    assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")


def test_join_with_a_session_timeout_out_of_bounds_is_invalid_session_timeout(impl):
    apis = _real(impl)
    for ms in (5999, 1_800_001):
        answer = _call(apis, 11, 5, _join_body(5, session_ms=ms))
        assert answer.error_code == int(E.INVALID_SESSION_TIMEOUT), ms


def test_join_with_no_protocols_is_inconsistent_group_protocol(impl):
    apis = _real(impl)
    answer = _call(apis, 11, 5, _join_body(5, protocols=()))
    assert answer.error_code == int(E.INCONSISTENT_GROUP_PROTOCOL)
    answer = _call(apis, 11, 5, _join_body(5, protocol_type=""))
    assert answer.error_code == int(E.INCONSISTENT_GROUP_PROTOCOL)


# ---- LeaveGroup by version ----------------------------------------------------------------

def test_leave_v0_to_v2_carry_the_member_error_at_the_top(impl):
    """LeaveGroupResponse (version <= 2): the top-level error, else the first member
    error; no member list."""
    apis = _real(impl)
    member, _ = _stable_member(apis)
    for version in (0, 1, 2):
        answer = _call(apis, 13, version, {"group_id": "g", "member_id": "ghost"})
        assert answer.error_code == int(E.UNKNOWN_MEMBER_ID), version
    assert _call(apis, 13, 2, {"group_id": "g", "member_id": member}).error_code == 0
    # an unknown group: UNKNOWN_MEMBER_ID for the member
    assert _call(apis, 13, 1, {"group_id": "nobody", "member_id": "m"}).error_code == 25


def test_leave_v3_batch_has_per_member_errors(impl):
    """handleLeaveGroup: top-level NONE, each member its own error, in request order."""
    apis = _real(impl)
    member, _ = _stable_member(apis)
    answer = _call(apis, 13, 4, {"group_id": "g", "members": [
        {"member_id": "ghost", "group_instance_id": None},
        {"member_id": member, "group_instance_id": None},
        {"member_id": "", "group_instance_id": "nobody"}]})
    assert answer.error_code == 0
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in answer.members] == [
        ("ghost", None, 25), (member, None, 0), ("", "nobody", 25)]
    gone = _call(apis, 13, 3, {"group_id": "nobody", "members": [
        {"member_id": "m", "group_instance_id": None}]})
    assert (gone.error_code, [m.error_code for m in gone.members]) == (0, [25])


# ---- OffsetCommit per partition -------------------------------------------------------------

def _commit_body(version, group, partitions, generation=-1, member=""):
    body = {"group_id": group, "generation_id_or_member_epoch": generation,
            "member_id": member, "topics": []}
    if 2 <= version <= 4:
        body["retention_time_ms"] = -1
    if version >= 7:
        body["group_instance_id"] = None
    by_topic = {}
    for topic, p, offset, metadata in partitions:
        part = {"partition_index": p, "committed_offset": offset,
                "committed_metadata": metadata}
        if version == 1:
            part["commit_timestamp"] = -1
        if version >= 6:
            part["committed_leader_epoch"] = -1
        by_topic.setdefault(topic, []).append(part)
    body["topics"] = [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
    return body


@pytest.mark.parametrize("version", [2, 5, 8])
def test_offset_commit_per_partition_errors(impl, version):
    """handleOffsetCommitRequest: a topic not in the metadata cache or a partition it
    lacks UNKNOWN_TOPIC_OR_PARTITION; GroupCoordinator.validateOffsetMetadataLength:
    metadata above offset.metadata.max.bytes (4096) OFFSET_METADATA_TOO_LARGE for that
    partition alone; the others committed."""
    apis = _real(impl)
    body = _commit_body(version, "c", [("orders", 0, 1, "x" * 4096),
                                       ("orders", 1, 2, "x" * 4097),
                                       ("orders", 99, 3, None), ("nope", 0, 4, None)])
    answer = _call(apis, 8, version, body)
    got = {(t.name, p.partition_index): p.error_code
           for t in answer.topics for p in t.partitions}
    assert got == {("orders", 0): 0, ("orders", 1): int(E.OFFSET_METADATA_TOO_LARGE),
                   ("orders", 99): UNKNOWN_TOPIC_OR_PARTITION,
                   ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION}
    fetched = _call(apis, 9, 5, {"group_id": "c", "topics": [
        {"name": "orders", "partition_indexes": [0, 1]}]})
    assert [p.committed_offset for p in fetched.topics[0].partitions] == [1, -1]


def test_offset_commit_by_a_member_checks_generation_and_member(impl):
    """validateOffsetCommit of a classic group: an unknown member UNKNOWN_MEMBER_ID, a
    wrong generation ILLEGAL_GENERATION; a commit while CompletingRebalance
    REBALANCE_IN_PROGRESS."""
    apis = _real(impl)
    member, generation = _joined_member(apis)
    parts = [("orders", 0, 1, None)]
    assert _call(apis, 8, 5, _commit_body(5, "g", parts, generation, member)
                 ).topics[0].partitions[0].error_code == int(E.REBALANCE_IN_PROGRESS)
    _call(apis, 14, 3, {"group_id": "g", "generation_id": generation, "member_id": member,
                        "group_instance_id": None, "assignments": []})
    assert _call(apis, 8, 5, _commit_body(5, "g", parts, generation, member)
                 ).topics[0].partitions[0].error_code == 0
    assert _call(apis, 8, 5, _commit_body(5, "g", parts, generation, "ghost")
                 ).topics[0].partitions[0].error_code == int(E.UNKNOWN_MEMBER_ID)
    assert _call(apis, 8, 5, _commit_body(5, "g", parts, generation + 1, member)
                 ).topics[0].partitions[0].error_code == int(E.ILLEGAL_GENERATION)


# ---- OffsetFetch --------------------------------------------------------------------------

def test_offset_fetch_all_partitions_and_unknown_ones(impl):
    """v2+: null topics asks for every committed offset; an asked partition without an
    offset (even of an unknown topic) answers -1 with no error."""
    apis = _real(impl)
    _call(apis, 8, 2, _commit_body(2, "f", [("orders", 3, 9, "m"), ("payments", 1, 2, "")]))
    everything = _call(apis, 9, 3, {"group_id": "f", "topics": None})
    got = {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
           for t in everything.topics for p in t.partitions}
    assert got == {("orders", 3): (9, "m", 0), ("payments", 1): (2, "", 0)}
    asked = _call(apis, 9, 1, {"group_id": "f", "topics": [
        {"name": "nope", "partition_indexes": [0]}]})
    p = asked.topics[0].partitions[0]
    assert (p.committed_offset, p.error_code) == (-1, 0)

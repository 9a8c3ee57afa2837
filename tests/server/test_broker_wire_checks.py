"""The broker APIs a coordinator-only server still answers, against Kafka's KafkaApis:
Metadata (null and empty topic lists, unknown and invalid names, repeated names, topic
ids before v12, authorized operations), FindCoordinator (v0-3: the error message, the
transaction key type, an empty key), ListOffsets (the special timestamps on an empty
log, other timestamps, unknown and repeated partitions, the current leader epoch),
Fetch (v4-12: empty answers, unknown partitions, offsets out of range, the leader epoch,
fetch sessions, when an answer waits for max_wait_ms) and Produce (refused, but with
Kafka's per-partition errors where Kafka decides before appending).

fastcoord declares each topic's partitions led by node 0 at leader epoch 0 with an
empty log (log start = log end = high watermark = 0): each test asserts what a Kafka
broker holding exactly that answers. Each a real frame through KafkaApis to the real
GroupCoordinator (in process, ManualClock). Reference: apache/kafka 3.x
core/.../kafka/server/KafkaApis.scala, ReplicaManager.scala, cluster/Partition.scala,
log/UnifiedLog.scala, FetchSession.scala and clients/.../common/requests."""
from __future__ import annotations

import pytest
from kio.static.primitive import Records

from fastcoord import ManualClock, Purgatory, Timer
from fastcoord.server.security import Acl

from tests.server.test_classic_wire_checks import _real, _send
from tests.server.test_consumer_protocol_wire import TOPICS, _call
from tests.server.test_offsets_wire_checks import _wire

NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_NOT_AVAILABLE = 15
INVALID_TOPIC_EXCEPTION = 17
TOPIC_AUTHORIZATION_FAILED = 29
INVALID_REQUEST = 42
FETCH_SESSION_ID_NOT_FOUND = 70
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
INVALID_RECORD = 87
NOT_ASKED = -2**31
# AclEntry.supportedOperations as AclOperation code bits, granted in full without an
# authorizer: TOPIC (Read 3, Write 4, Create 5, Delete 6, Alter 7, Describe 8,
# DescribeConfigs 10, AlterConfigs 11), CLUSTER (Create 5, Alter 7, Describe 8,
# ClusterAction 9, DescribeConfigs 10, AlterConfigs 11, IdempotentWrite 12)
TOPIC_OPERATIONS = sum(1 << c for c in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << c for c in (5, 7, 8, 9, 10, 11, 12))
METADATA_VERSIONS = [0, 1, 4, 7, 9, 10, 12]
FETCH_VERSIONS = [4, 7, 11, 12]


# ---- helpers ---------------------------------------------------------------------------

def _metadata(apis, version, topics, *, auto_create=False, topic_ops=False, cluster_ops=False):
    """Metadata at `version` asking for `topics` (names, or dicts of name and id; None:
    every topic)."""
    if topics is not None:
        topics = [t if isinstance(t, dict) else {"name": t, "topic_id": None} for t in topics]
    return _call(apis, 3, version, {
        "topics": topics, "allow_auto_topic_creation": auto_create,
        "include_cluster_authorized_operations": cluster_ops,
        "include_topic_authorized_operations": topic_ops})


def _list_offsets_body(partitions, *, replica_id=-1, isolation=0):
    """A ListOffsets body; `partitions` are (topic, partition, timestamp[, current
    leader epoch]) in order, a topic entry for each run of one topic."""
    topics = []
    for topic, partition, timestamp, *epoch in partitions:
        if not topics or topics[-1]["name"] != topic:
            topics.append({"name": topic, "partitions": []})
        topics[-1]["partitions"].append({
            "partition_index": partition, "timestamp": timestamp,
            "current_leader_epoch": epoch[0] if epoch else -1, "max_num_offsets": 1})
    return {"replica_id": replica_id, "isolation_level": isolation, "topics": topics}


def _offsets(apis, version, partitions, **kw):
    answer = _call(apis, 2, version, _list_offsets_body(partitions, **kw))
    return [p for t in answer.topics for p in t.partitions]


def _fetch_body(topic="orders", partition=0, offset=0, *, leader_epoch=-1, max_wait=0,
                min_bytes=1, isolation=0, session=(0, -1)):
    return {"replica_id": -1, "max_wait": max_wait, "min_bytes": min_bytes,
            "max_bytes": 1 << 20, "isolation_level": isolation,
            "session_id": session[0], "session_epoch": session[1], "rack_id": "",
            "forgotten_topics_data": [], "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "fetch_offset": offset, "log_start_offset": -1,
                "current_leader_epoch": leader_epoch, "partition_max_bytes": 1 << 20}]}]}


def _fetched(apis, version, *args, **kw):
    """The one partition of a Fetch answer."""
    (topic,) = _call(apis, 1, version, _fetch_body(*args, **kw)).responses
    (partition,) = topic.partitions
    return partition


def _produce(apis, version, topic, partition, records=b""):
    answer = _call(apis, 0, version, {
        "transactional_id": None, "acks": -1, "timeout": 1000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition,
                                                "records": Records(records)}]}]})
    ((t, p),) = [(t, p) for t in answer.responses for p in t.partition_responses]
    return t.name, p


def _record_batch() -> bytes:
    """One magic-2 record batch of one record (kafka-python's builder)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 16)
    builder.append(0, timestamp=1_700_000_000_000, key=None, value=b"v", headers=[])
    return bytes(builder.build())


# ---- Metadata ----------------------------------------------------------------------------

@pytest.mark.parametrize("version", METADATA_VERSIONS)
def test_metadata_of_every_topic_and_of_none(impl, version):
    # KafkaApis.handleTopicMetadataRequest: MetadataRequest.isAllTopics (null, or v0's empty list)
    apis = _real(impl)
    every = _metadata(apis, version, None if version else [])
    assert sorted(t.name for t in every.topics) == sorted(TOPICS)
    (broker,) = every.brokers
    assert (broker.node_id, broker.host, broker.port) == (0, "127.0.0.1", 9092)
    assert getattr(broker, "rack", None) is None
    if version >= 1:
        assert every.controller_id == 0
        assert _metadata(apis, version, []).topics == ()   # from v1 an empty list is none
    if version >= 2:
        assert every.cluster_id == "fastcoord"
    for topic in every.topics:
        assert topic.error_code == NONE and not getattr(topic, "is_internal", False)
        assert [p.partition_index for p in topic.partitions] == list(range(TOPICS[topic.name]))
        for p in topic.partitions:
            assert (p.error_code, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes)) \
                == (NONE, 0, (0,), (0,))
            assert getattr(p, "leader_epoch", 0) == 0
            assert tuple(getattr(p, "offline_replicas", ())) == ()


@pytest.mark.parametrize("auto_create", [False, True])
def test_metadata_of_an_unknown_topic(impl, auto_create):
    # KafkaApis.getTopicMetadata with auto.create.topics.enable=false (topics are declared)
    apis = _real(impl)
    (topic,) = _metadata(apis, 9, ["nope"], auto_create=auto_create).topics
    assert (topic.error_code, topic.name, topic.partitions) == \
        (UNKNOWN_TOPIC_OR_PARTITION, "nope", ())


@pytest.mark.parametrize("name", ["bad name!", "..", "a" * 250, ""])
def test_metadata_of_an_invalid_topic_name_is_invalid_topic_exception(impl, name):
    # KafkaApis.getTopicMetadata: Topic.validate fails -> INVALID_TOPIC_EXCEPTION
    apis = _real(impl)
    (topic,) = _metadata(apis, 9, [name]).topics
    assert (topic.error_code, topic.name) == (INVALID_TOPIC_EXCEPTION, name)


def test_metadata_answers_a_repeated_topic_once(impl):
    # KafkaApis.handleTopicMetadataRequest: the topics asked for are a Set
    apis = _real(impl)
    answer = _metadata(apis, 9, ["orders", "orders", "nope", "nope"])
    assert sorted(t.name for t in answer.topics) == ["nope", "orders"]


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_before_v12_refuses_topic_ids_and_null_names(impl, version):
    # KafkaApis.handleTopicMetadataRequest: InvalidRequestException, MetadataRequest.getErrorResponse
    apis = _real(impl)
    orders = apis.topic_ids.id_of("orders")
    for asked in ({"name": "orders", "topic_id": orders}, {"name": None, "topic_id": orders}):
        answer = _metadata(apis, version, [asked])
        assert [t.error_code for t in answer.topics] == [INVALID_REQUEST], asked
        assert answer.brokers == ()


@pytest.mark.parametrize("version", [8, 10, 12])
def test_metadata_answers_the_topic_operations_asked_for(impl, version):
    # KafkaApis.handleTopicMetadataRequest: AuthHelper.authorizedOperations, all ops without an authorizer
    apis = _real(impl)
    asked = _metadata(apis, version, ["orders"], topic_ops=True)
    assert [t.topic_authorized_operations for t in asked.topics] == [TOPIC_OPERATIONS]
    plain = _metadata(apis, version, ["orders"])
    assert [t.topic_authorized_operations for t in plain.topics] == [NOT_ASKED]


@pytest.mark.parametrize("version", [8, 9, 10])
def test_metadata_v8_to_v10_answer_the_cluster_operations_asked_for(impl, version):
    # KafkaApis.handleTopicMetadataRequest: clusterAuthorizedOperations for v8-v10 when asked
    apis = _real(impl)
    assert _metadata(apis, version, [], cluster_ops=True).cluster_authorized_operations \
        == CLUSTER_OPERATIONS
    assert _metadata(apis, version, []).cluster_authorized_operations == NOT_ASKED


# ---- FindCoordinator -------------------------------------------------------------------

@pytest.mark.parametrize("version", [1, 2, 3])
def test_find_coordinator_success_carries_the_message_of_none(impl, version):
    # KafkaApis.handleFindCoordinatorRequestLessThanV4: setErrorMessage(Errors.NONE.message()) = "NONE"
    apis = _real(impl)
    answer = _call(apis, 10, version, {"key": "g", "key_type": 0})
    assert (answer.error_code, answer.node_id, answer.error_message) == (NONE, 0, "NONE")


@pytest.mark.parametrize("version", [1, 2, 3])
def test_find_coordinator_of_a_transaction_is_not_available(impl, version):
    # KafkaApis.getCoordinator: no __transaction_state topic -> COORDINATOR_NOT_AVAILABLE, Node.noNode
    apis = _real(impl)
    answer = _call(apis, 10, version, {"key": "txn-1", "key_type": 1})
    assert (answer.error_code, answer.node_id, answer.host, answer.port) == \
        (COORDINATOR_NOT_AVAILABLE, -1, "", -1)


@pytest.mark.parametrize("version", [0, 3])
def test_find_coordinator_of_an_empty_group_id_answers_this_broker(impl, version):
    # KafkaApis.getCoordinator: a key is not validated, its partition's leader answers
    apis = _real(impl)
    answer = _call(apis, 10, version, {"key": "", "key_type": 0})
    assert (answer.error_code, answer.node_id, answer.port) == (NONE, 0, 9092)


# ---- ListOffsets -----------------------------------------------------------------------

@pytest.mark.parametrize("version", [1, 2, 4, 6])
@pytest.mark.parametrize("replica_id, isolation", [(-1, 0), (-1, 1), (-2, 0)])
def test_list_offsets_earliest_and_latest_of_an_empty_log_are_zero(impl, version, replica_id,
                                                                    isolation):
    # Partition.fetchOffsetForTimestamp: LATEST -> last fetchable offset, EARLIEST -> log start
    apis = _real(impl)
    parts = _offsets(apis, version, [("orders", 0, -1), ("orders", 1, -2)],
                     replica_id=replica_id, isolation=isolation)
    for p in parts:
        assert (p.error_code, p.timestamp, p.offset) == (NONE, -1, 0)
        assert getattr(p, "leader_epoch", 0) == 0


@pytest.mark.parametrize("timestamp", [0, 1_700_000_000_000, -3])
def test_list_offsets_of_any_other_timestamp_in_an_empty_log_finds_nothing(impl, timestamp):
    # KafkaApis.handleListOffsetRequestV1AndAbove: fetchOffsetForTimestamp None -> offset -1, timestamp -1
    apis = _real(impl)
    (p,) = _offsets(apis, 6, [("orders", 0, timestamp)])
    assert (p.error_code, p.timestamp, p.offset, p.leader_epoch) == (NONE, -1, -1, -1)


def test_list_offsets_of_an_unknown_topic_or_partition(impl):
    # KafkaApis.handleListOffsetRequestV1AndAbove: UnknownTopicOrPartitionException -> buildErrorResponse
    apis = _real(impl)
    parts = _offsets(apis, 6, [("orders", 6, -1), ("orders", -1, -1), ("nope", 0, -2)])
    assert [(p.error_code, p.timestamp, p.offset) for p in parts] == \
        [(UNKNOWN_TOPIC_OR_PARTITION, -1, -1)] * 3


def test_list_offsets_of_a_repeated_partition_is_invalid_request(impl):
    # KafkaApis.handleListOffsetRequestV1AndAbove: offsetRequest.duplicatePartitions -> INVALID_REQUEST
    apis = _real(impl)
    parts = _offsets(apis, 6, [("orders", 0, -1), ("orders", 0, -2), ("orders", 1, -1)])
    assert [(p.partition_index, p.error_code, p.offset) for p in parts] == \
        [(0, INVALID_REQUEST, -1), (0, INVALID_REQUEST, -1), (1, NONE, 0)]


@pytest.mark.parametrize("version", [4, 6])
def test_list_offsets_checks_the_current_leader_epoch(impl, version):
    # Partition.checkCurrentLeaderEpoch: newer than the leader's 0 -> UNKNOWN_LEADER_EPOCH,
    # older (any other negative than -1, "none") -> FENCED_LEADER_EPOCH
    apis = _real(impl)
    parts = _offsets(apis, version, [("orders", 0, -1, -1), ("orders", 1, -1, 0),
                                     ("orders", 2, -1, 3), ("orders", 3, -1, -5)])
    assert [(p.error_code, p.offset) for p in parts] == \
        [(NONE, 0), (NONE, 0), (UNKNOWN_LEADER_EPOCH, -1), (FENCED_LEADER_EPOCH, -1)]


# ---- Fetch ---------------------------------------------------------------------------------

@pytest.mark.parametrize("version", FETCH_VERSIONS)
@pytest.mark.parametrize("isolation", [0, 1])
def test_fetch_of_an_empty_partition_is_empty_at_offset_zero(impl, version, isolation):
    # ReplicaManager.readFromLocalLog / KafkaApis.handleFetchRequest processResponseCallback
    apis = _real(impl)
    answer = _call(apis, 1, version, _fetch_body(isolation=isolation))
    assert getattr(answer, "error_code", NONE) == NONE      # (top-level from v7)
    (p,) = answer.responses[0].partitions
    assert (p.error_code, p.high_watermark, p.last_stable_offset) == (NONE, 0, 0)
    assert getattr(p, "log_start_offset", 0) == 0
    assert getattr(p, "preferred_read_replica", -1) == -1
    assert not p.records


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_aborted_transactions_are_null_unless_read_committed(impl, version):
    # LocalLog.read: aborted transactions only for FetchTxnCommitted; KafkaApis sets orNull
    apis = _real(impl)
    assert _fetched(apis, version, isolation=0).aborted_transactions is None
    assert _fetched(apis, version, isolation=1).aborted_transactions == ()


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_of_an_unknown_topic_or_partition_has_no_offsets(impl, version):
    # KafkaApis.handleFetchRequest: FetchResponse.partitionResponse (high watermark -1, others default -1)
    apis = _real(impl)
    for topic, partition in (("nope", 0), ("orders", 6)):
        p = _fetched(apis, version, topic, partition)
        assert (p.error_code, p.high_watermark, p.last_stable_offset) == \
            (UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
        assert getattr(p, "log_start_offset", -1) == -1
        assert not p.records


@pytest.mark.parametrize("offset", [5, -1])
def test_fetch_beyond_the_log_end_answers_empty_not_out_of_range(impl, offset):
    # Kafka's LocalLog.read answers OFFSET_OUT_OF_RANGE; fastcoord answers empty on purpose
    # (docs/server.md): a consumer that reset would commit 0 over its group's offsets
    apis = _real(impl)
    p = _fetched(apis, 12, offset=offset)
    assert (p.error_code, p.high_watermark, p.log_start_offset) == (NONE, 0, 0)
    assert p.error_code != OFFSET_OUT_OF_RANGE and not p.records


@pytest.mark.parametrize("version", [9, 12])
def test_fetch_checks_the_current_leader_epoch(impl, version):
    # Partition.readRecords -> checkCurrentLeaderEpoch against the leader's 0
    apis = _real(impl)
    assert _fetched(apis, version, leader_epoch=0).error_code == NONE
    newer = _fetched(apis, version, leader_epoch=3)
    assert (newer.error_code, newer.high_watermark) == (UNKNOWN_LEADER_EPOCH, -1)
    assert _fetched(apis, version, leader_epoch=-5).error_code == FENCED_LEADER_EPOCH


@pytest.mark.parametrize("version", [7, 12])
def test_fetch_of_a_session_never_made_is_fetch_session_id_not_found(impl, version):
    # FetchManager.newContext: an incremental fetch of an unknown session -> SessionErrorContext
    apis = _real(impl)
    for full in ((0, 0), (0, -1), (1234, -1)):       # full fetches: sessionless answers
        answer = _call(apis, 1, version, _fetch_body(session=full))
        assert (answer.error_code, answer.session_id, len(answer.responses)) == (NONE, 0, 1)
    answer = _call(apis, 1, version, _fetch_body(session=(1234, 1)))
    assert (answer.error_code, answer.session_id, answer.responses) == \
        (FETCH_SESSION_ID_NOT_FOUND, 0, ())


@pytest.mark.parametrize("case, held", [
    ("waits for data", True),
    ("min_bytes 0", False),
    ("unknown partition only", False),
    ("offset past the log end (answered empty here: docs/server.md)", True),
    ("newer leader epoch", False),
])
def test_fetch_waits_only_when_kafka_would(impl, case, held):
    # ReplicaManager.fetchMessages: at once if no partition to read, min bytes 0 or a read error
    apis = _real(impl)
    timer = Timer(ManualClock(0), impl=impl)
    apis.fetch_purgatory = Purgatory("fetch", timer)
    body = {"waits for data": _fetch_body(max_wait=500),
            "min_bytes 0": _fetch_body(max_wait=500, min_bytes=0),
            "unknown partition only": _fetch_body("nope", max_wait=500),
            "offset past the log end (answered empty here: docs/server.md)":
                _fetch_body(offset=5, max_wait=500),
            "newer leader epoch": _fetch_body(leader_epoch=3, max_wait=500)}[case]
    answers = _send(apis, 1, 12, body)
    assert (answers() == []) == held
    timer.advance_to(500)
    assert len(answers()) == 1


# ---- Produce ---------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [3, 8])
def test_produce_to_an_unknown_topic_or_partition(impl, version):
    # KafkaApis.handleProduceRequest: !metadataCache.contains(tp) -> UNKNOWN_TOPIC_OR_PARTITION
    apis = _real(impl)
    for topic, partition in (("nope", 0), ("orders", 6)):
        name, p = _produce(apis, version, topic, partition)
        assert (name, p.index, p.error_code, p.base_offset) == \
            (topic, partition, UNKNOWN_TOPIC_OR_PARTITION, -1)


@pytest.mark.parametrize("version", [3, 8])
def test_produce_without_a_record_batch_is_invalid_record(impl, version):
    # KafkaApis.handleProduceRequest: ProduceRequest.validateRecords (v3+: one v2 batch) -> INVALID_RECORD
    apis = _real(impl)
    _, p = _produce(apis, version, "orders", 0)
    assert (p.error_code, p.base_offset) == (INVALID_RECORD, -1)


@pytest.mark.parametrize("version", [3, 8])
def test_produce_to_a_declared_partition_is_refused_with_no_offset(impl, version):
    # KafkaApis.handleProduceRequest / ProduceResponse.PartitionResponse(error): base offset -1
    apis = _real(impl)
    _, p = _produce(apis, version, "orders", 0, _record_batch())
    assert p.error_code != NONE and p.base_offset == -1
    assert getattr(p, "log_start_offset", -1) == -1



# ---- with ACLs ---------------------------------------------------------------------------

def test_produce_needs_write_on_the_topic(impl):
    # KafkaApis.handleProduceRequest: authorizedTopics (WRITE) first, else TOPIC_AUTHORIZATION_FAILED
    apis = _wire(impl, acls=[Acl("User:ANONYMOUS", ("All",), topic="orders"),
                             Acl("User:ANONYMOUS", ("Read",), topic="payments")])
    _, allowed = _produce(apis, 8, "orders", 0, _record_batch())
    _, denied = _produce(apis, 8, "payments", 0, _record_batch())
    assert allowed.error_code == INVALID_REQUEST            # refused: no records kept
    assert denied.error_code == TOPIC_AUTHORIZATION_FAILED


def test_metadata_operations_are_what_the_acls_allow(impl):
    # AuthHelper.authorizedOperations with an authorizer: the allowed ones (Read implies
    # Describe); the cluster's: none, no ACL names it
    apis = _wire(impl, acls=[Acl("User:ANONYMOUS", ("Read",), topic="orders")])
    answer = _metadata(apis, 10, ["orders"], topic_ops=True, cluster_ops=True)
    assert [t.topic_authorized_operations for t in answer.topics] == [(1 << 3) | (1 << 8)]
    assert answer.cluster_authorized_operations == 0

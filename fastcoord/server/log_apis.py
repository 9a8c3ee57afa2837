"""The log APIs of a broker that keeps no logs: ListOffsets, Fetch and Produce answered
as a Kafka broker whose every declared partition is led here, at leader epoch 0, with an
empty log (log start = log end = high watermark = 0), with Kafka's per-partition checks
(KafkaApis, ReplicaManager, Partition.checkCurrentLeaderEpoch, FetchManager).

One deliberate difference: a fetch at an offset past the empty log's end answers empty,
not OFFSET_OUT_OF_RANGE. A consumer told its position is out of range resets it (to 0
here) and then commits that, overwriting the offsets its group committed: a coordinator
must not make its clients lose them (docs/server.md).
"""
from __future__ import annotations

from collections import Counter
from typing import Callable, Dict, Optional

from fastcoord import DelayedOperation

from .error_codes import (
    FENCED_LEADER_EPOCH, FETCH_SESSION_ID_NOT_FOUND, INVALID_RECORD, INVALID_REQUEST, NONE,
    TOPIC_AUTHORIZATION_FAILED, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION,
)
from .protocol import duration_ms

__all__ = ["LogApis", "MAX_FETCH_WAIT_MS"]

LEADER_EPOCH = 0            # every partition's, led here since it was declared
NO_EPOCH = -1               # a request that names no leader epoch
FULL_FETCH_EPOCHS = (0, -1)  # a fetch session's initial and final epochs: no session needed
MAX_FETCH_WAIT_MS = 30_000
# a v2 record batch's header: base offset (8), batch length (4), leader epoch (4), magic (1)
_BATCH_HEADER = 61
PRODUCE_REFUSED = "fastcoord is a coordinator-only broker: it stores no records"


def leader_epoch_error(requested: int) -> int:
    """Partition.checkCurrentLeaderEpoch against this broker's leader epoch 0."""
    if requested == NO_EPOCH or requested == LEADER_EPOCH:
        return NONE
    return FENCED_LEADER_EPOCH if requested < LEADER_EPOCH else UNKNOWN_LEADER_EPOCH


def record_batch_error(records: Optional[bytes]) -> int:
    """ProduceRequest.validateRecords from v3: exactly one record batch, of magic 2."""
    data = bytes(records or b"")
    if len(data) < _BATCH_HEADER or data[16] != 2:
        return INVALID_RECORD
    length = int.from_bytes(data[8:12], "big", signed=True)
    return NONE if length + 12 == len(data) else INVALID_RECORD


class DelayedFetch(DelayedOperation):
    """An empty fetch: nothing can ever complete it early; it answers on expiry (or
    when the server shuts down and force-completes it)."""

    def __init__(self, delay_ms: int, answer: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self._answer = answer

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        self._answer()

    def on_expiration(self) -> None:
        pass


class LogApis:
    """ListOffsets, Fetch and Produce over the declared topics ({name: partitions}).
    `topic_allowed(session, operation, topic)` is the server's topic ACL check;
    `purgatory()` the fetch purgatory an empty fetch waits in (None: answer at once)."""

    def __init__(self, topics: Dict[str, int], topic_allowed, purgatory) -> None:
        self.topics = topics
        self._topic_allowed = topic_allowed
        self._purgatory = purgatory

    def known(self, topic: str, partition: int) -> bool:
        return 0 <= partition < self.topics.get(topic, 0)

    def list_offsets(self, session, request, reply) -> None:
        """An empty log: the earliest (-2) and latest (-1) offsets are 0; any other
        timestamp finds no offset (-1). A partition named twice is INVALID_REQUEST each
        time (KafkaApis: duplicatePartitions)."""
        named = Counter((t.name, p.partition_index)
                        for t in request.body.topics for p in t.partitions)
        topics = []
        for t in request.body.topics:
            parts = []
            for p in t.partitions:
                if named[(t.name, p.partition_index)] > 1:
                    error = INVALID_REQUEST
                elif not self.known(t.name, p.partition_index):
                    error = UNKNOWN_TOPIC_OR_PARTITION
                else:
                    error = leader_epoch_error(getattr(p, "current_leader_epoch", NO_EPOCH))
                found = error == NONE and p.timestamp in (-1, -2)
                parts.append({"partition_index": p.partition_index, "error_code": error,
                              "timestamp": -1, "offset": 0 if found else -1,
                              "leader_epoch": LEADER_EPOCH if found else -1})
            topics.append({"name": t.name, "partitions": parts})
        reply({"topics": topics})

    def fetch(self, session, request, reply) -> None:
        """Every declared partition is empty; an unknown one, or one at a leader epoch
        other than 0, answers its error with no offsets. An incremental fetch (epoch
        other than 0 and -1) names a session this broker never made (it makes none:
        session id 0). As Kafka, the answer waits `max_wait` only when every partition
        reads without error and `min_bytes` is above 0."""
        body = request.body
        if getattr(body, "session_epoch", -1) not in FULL_FETCH_EPOCHS:
            reply({"error_code": FETCH_SESSION_ID_NOT_FOUND, "session_id": 0,
                   "responses": []})
            return
        committed = getattr(body, "isolation_level", 0) == 1
        topics = []
        readable = False    # a partition read without error
        failed = False
        for t in body.topics:
            parts = []
            for p in t.partitions:
                if not self.known(t.topic, p.partition):
                    error = UNKNOWN_TOPIC_OR_PARTITION
                else:
                    error = leader_epoch_error(getattr(p, "current_leader_epoch", NO_EPOCH))
                if error == NONE:
                    readable = True
                    parts.append({"partition_index": p.partition, "error_code": NONE,
                                  "high_watermark": 0, "last_stable_offset": 0,
                                  "log_start_offset": 0,
                                  "aborted_transactions": () if committed else None,
                                  "preferred_read_replica": -1, "records": b""})
                else:
                    failed = True
                    parts.append({"partition_index": p.partition, "error_code": error,
                                  "high_watermark": -1, "last_stable_offset": -1,
                                  "log_start_offset": -1, "aborted_transactions": None,
                                  "preferred_read_replica": -1, "records": b""})
            topics.append({"topic": t.topic, "partitions": parts})
        answer = {"error_code": NONE, "session_id": 0, "responses": topics}
        wait_ms = min(max(duration_ms(body.max_wait), 0), MAX_FETCH_WAIT_MS)
        purgatory = self._purgatory()
        if (wait_ms == 0 or purgatory is None or body.min_bytes <= 0 or failed
                or not readable):
            reply(answer)
            return
        purgatory.try_complete_else_watch(DelayedFetch(wait_ms, lambda: reply(answer)),
                                          ["fetch"])

    def produce(self, session, request, reply) -> None:
        """KafkaApis.handleProduceRequest's checks before it appends: Write on the
        topic, the partition exists, and from v3 one record batch of magic 2; a
        request passing them is refused (this broker stores no records)."""
        version = request.api_version
        topics = []
        for t in request.body.topic_data:
            parts = []
            allowed = self._topic_allowed(session, "Write", t.name)
            for p in t.partition_data:
                message = None
                if not allowed:
                    error = TOPIC_AUTHORIZATION_FAILED
                elif not self.known(t.name, p.index):
                    error = UNKNOWN_TOPIC_OR_PARTITION
                elif version >= 3 and record_batch_error(p.records) != NONE:
                    error = INVALID_RECORD
                else:
                    error, message = INVALID_REQUEST, PRODUCE_REFUSED
                parts.append({"index": p.index, "error_code": error, "base_offset": -1,
                              "record_errors": (), "error_message": message})
            topics.append({"name": t.name, "partition_responses": parts})
        reply({"responses": topics})

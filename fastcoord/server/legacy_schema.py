"""Codecs for the request versions Kafka 3.x still serves and kio (built from Kafka 4's
message definitions) no longer has: OffsetCommit v0-1 and OffsetFetch v0.

The classes follow kio's conventions (frozen keyword dataclasses whose fields carry their
Kafka type), so kio's readers and writers and `protocol.build` work on them unchanged.
The field layouts are those of Kafka 3.9's OffsetCommitRequest.json and
OffsetFetchRequest.json at those versions. The responses of these versions are laid
out exactly as OffsetCommit v2's and OffsetFetch v1's, whose kio classes serve them.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, Tuple

from kio.schema.offset_commit.v2.response import OffsetCommitResponse as _CommitResponseV2
from kio.schema.offset_fetch.v1.request import OffsetFetchRequest as _FetchRequestV1
from kio.schema.offset_fetch.v1.response import OffsetFetchResponse as _FetchResponseV1
from kio.schema.request_header.v1.header import RequestHeader
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i64

__all__ = ["LEGACY_REQUESTS", "LEGACY_RESPONSES"]


def _entity(version: int, kind=EntityType.nested):
    """The class attributes kio's entities carry, for an OffsetCommit entity."""
    def decorate(cls):
        cls.__type__ = kind
        cls.__version__ = i16(version)
        cls.__flexible__ = False
        cls.__api_key__ = i16(8)
        cls.__header_schema__ = RequestHeader
        return dataclass(frozen=True, slots=True, kw_only=True)(cls)
    return decorate


@_entity(0)
class OffsetCommitRequestPartitionV0:
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    committed_offset: i64 = field(metadata={"kafka_type": "int64"})
    committed_metadata: str | None = field(metadata={"kafka_type": "string"})


@_entity(0)
class OffsetCommitRequestTopicV0:
    name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[OffsetCommitRequestPartitionV0, ...]


@_entity(0, EntityType.request)
class OffsetCommitRequestV0:
    group_id: str = field(metadata={"kafka_type": "string"})
    topics: tuple[OffsetCommitRequestTopicV0, ...]


@_entity(1)
class OffsetCommitRequestPartitionV1:
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    committed_offset: i64 = field(metadata={"kafka_type": "int64"})
    commit_timestamp: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    committed_metadata: str | None = field(metadata={"kafka_type": "string"})


@_entity(1)
class OffsetCommitRequestTopicV1:
    name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[OffsetCommitRequestPartitionV1, ...]


@_entity(1, EntityType.request)
class OffsetCommitRequestV1:
    group_id: str = field(metadata={"kafka_type": "string"})
    generation_id_or_member_epoch: i32 = field(metadata={"kafka_type": "int32"},
                                               default=i32(-1))
    member_id: str = field(metadata={"kafka_type": "string"})
    topics: tuple[OffsetCommitRequestTopicV1, ...]


# (api key, version) -> class
LEGACY_REQUESTS: Dict[Tuple[int, int], Any] = {
    (8, 0): OffsetCommitRequestV0, (8, 1): OffsetCommitRequestV1, (9, 0): _FetchRequestV1,
}
LEGACY_RESPONSES: Dict[Tuple[int, int], Any] = {
    (8, 0): _CommitResponseV2, (8, 1): _CommitResponseV2, (9, 0): _FetchResponseV1,
}

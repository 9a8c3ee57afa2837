"""Result value types returned by the coordinator (identical for both twins)."""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from .errors import Errors

__all__ = [
    "JoinGroupMember", "JoinGroupResult", "SyncGroupResult", "LeaveGroupResult",
    "OffsetAndMetadata", "MemberDescription", "GroupDescription", "GroupListing",
    "GroupSummary", "ConsumerGroupHeartbeatResult", "ConsumerGroupDescription",
    "ConsumerGroupMemberDescription",
]


class JoinGroupMember(NamedTuple):
    member_id: str
    group_instance_id: Optional[str]
    metadata: bytes


class JoinGroupResult(NamedTuple):
    error: Errors
    generation_id: int = -1
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None
    leader_id: str = ""
    member_id: str = ""
    members: List[JoinGroupMember] = []
    skip_assignment: bool = False


class SyncGroupResult(NamedTuple):
    error: Errors
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None
    assignment: bytes = b""


class LeaveGroupResult(NamedTuple):
    error: Errors
    member_errors: List[Errors]


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    leader_epoch: int = -1
    commit_timestamp_ms: int = -1


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


class GroupDescription(NamedTuple):
    error: Errors
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: List[MemberDescription]


class GroupSummary(NamedTuple):
    """A cheap read of a group (GroupCoordinator.group_summary). `members_epoch` changes
    whenever the set of member ids changes (never repeats within a process): a reader
    that saw the same epoch before knows the member ids without describing the group.
    -1: the group does not exist (no members); -2: an error (no members)."""
    error: Errors
    state: str
    generation: int
    num_members: int
    members_epoch: int


class GroupListing(NamedTuple):
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"     # "classic" or "consumer" (KIP-848)


class ConsumerGroupHeartbeatResult(NamedTuple):
    """A ConsumerGroupHeartbeat's answer. `assignment`: {topic: sorted partitions}, or
    None when it did not change since the member's last answer (and the request was
    not a full one)."""
    error: Errors
    error_message: Optional[str] = None
    member_id: Optional[str] = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Optional[Dict[str, List[int]]] = None


class ConsumerGroupMemberDescription(NamedTuple):
    member_id: str
    instance_id: Optional[str]
    rack_id: Optional[str]
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: List[str]
    subscribed_topic_regex: Optional[str]
    assignment: Dict[str, List[int]]
    target_assignment: Dict[str, List[int]]
    classic: bool = False       # the member uses the classic protocol (a mixed group)


class ConsumerGroupDescription(NamedTuple):
    """A consumer group as ConsumerGroupDescribe answers it; `state` is Kafka's name
    ("Empty", "Assigning", "Reconciling", "Stable", "Dead"). `error_message`: why a
    group is GROUP_ID_NOT_FOUND (Kafka's text), None otherwise."""
    error: Errors
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: List[ConsumerGroupMemberDescription]
    error_message: Optional[str] = None


TopicPartition = Tuple[str, int]

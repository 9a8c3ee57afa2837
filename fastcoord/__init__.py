"""fastcoord: Kafka's classic consumer-group coordinator, hierarchical timing wheel
and delayed-operation purgatory, with a Cython core and a pure-Python twin.

The public API (docs/api.md) and nothing else lives here.
"""
from __future__ import annotations

from ._twins import IMPLEMENTATION, NATIVE_AVAILABLE
from .core.clock import ManualClock, SystemClock
from .core.config import CoordinatorConfig, shard_for
from .core.errors import Errors, GroupState
from .core.group_configs import GroupConfigError
from .core.results import (
    ConsumerGroupDescription, ConsumerGroupHeartbeatResult, ConsumerGroupMemberDescription,
    GroupDescription, GroupListing, GroupSummary, JoinGroupMember, JoinGroupResult,
    LeaveGroupResult, MemberDescription, OffsetAndMetadata, SyncGroupResult,
)
from .core.timer import Timer, TimerHandle
from .core.purgatory import DelayedOperation, Purgatory
from .core.coordinator import GroupCoordinator

__version__ = "0.1.0"

__all__ = [
    "IMPLEMENTATION", "NATIVE_AVAILABLE",
    "ManualClock", "SystemClock", "CoordinatorConfig", "shard_for",
    "Errors", "GroupState", "GroupConfigError",
    "ConsumerGroupDescription", "ConsumerGroupHeartbeatResult", "ConsumerGroupMemberDescription",
    "GroupDescription", "GroupListing", "GroupSummary", "JoinGroupMember", "JoinGroupResult",
    "LeaveGroupResult", "MemberDescription", "OffsetAndMetadata", "SyncGroupResult",
    "Timer", "TimerHandle", "Purgatory", "DelayedOperation", "GroupCoordinator",
]

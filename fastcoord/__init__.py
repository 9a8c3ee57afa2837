"""fastcoord: Kafka's classic consumer-group coordinator, hierarchical timing wheel
and delayed-operation purgatory, with a Cython core and a pure-Python twin.

The public API (docs/api.md) and nothing else lives here.
"""
from __future__ import annotations

from ._compat import IMPLEMENTATION, NATIVE_AVAILABLE
from .clock import ManualClock, SystemClock
from .config import CoordinatorConfig, shard_for
from .errors import Errors, GroupState
from .results import (
    GroupDescription, GroupListing, GroupSummary, JoinGroupMember, JoinGroupResult,
    LeaveGroupResult, MemberDescription, OffsetAndMetadata, SyncGroupResult,
)
from .timing import DelayedOperation, Purgatory, Timer, TimerHandle
from .coordinator import GroupCoordinator

__version__ = "0.1.0"

__all__ = [
    "IMPLEMENTATION", "NATIVE_AVAILABLE",
    "ManualClock", "SystemClock", "CoordinatorConfig", "shard_for",
    "Errors", "GroupState",
    "GroupDescription", "GroupListing", "GroupSummary", "JoinGroupMember", "JoinGroupResult",
    "LeaveGroupResult", "MemberDescription", "OffsetAndMetadata", "SyncGroupResult",
    "Timer", "TimerHandle", "Purgatory", "DelayedOperation", "GroupCoordinator",
]

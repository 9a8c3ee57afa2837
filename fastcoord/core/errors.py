"""Kafka's error codes and group states: plain values shared by both twins."""
from __future__ import annotations

import enum

__all__ = ["Errors", "GroupState", "CoordinatorError"]


class Errors(enum.IntEnum):
    """Kafka's error codes, with Kafka's names and numbers."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    GROUP_AUTHORIZATION_FAILED = 30
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128


class GroupState(str, enum.Enum):
    """The classic protocol's group states; values are Kafka's names."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:  # "Stable", not "GroupState.STABLE"
        return self.value


class CoordinatorError(RuntimeError):
    """A broken invariant inside the coordinator (an illegal state transition):
    a programming error, never a protocol answer."""

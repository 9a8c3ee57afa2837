"""Coordinator configuration and Kafka's group -> offsets-partition mapping."""
from __future__ import annotations

import dataclasses
import functools
from typing import FrozenSet, Optional

__all__ = ["CoordinatorConfig", "shard_for", "java_string_hashcode"]

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
# Kafka reads offsets.retention.minutes as an int; in ms it must stay an int64
_RETENTION_MINUTES_MAX = _INT32_MAX


@dataclasses.dataclass(frozen=True)
class CoordinatorConfig:
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = _INT32_MAX
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = 300_000
    num_shards: int = 50
    owned_shards: Optional[FrozenSet[int]] = None
    tick_ms: int = 1
    wheel_size: int = 20
    purge_interval: int = 1000
    # Kafka's offsets.retention.minutes and offsets.retention.check.interval.ms: an Empty
    # group's offsets expire this long after it became Empty, a simple consumer's each
    # this long after its commit; the check (GroupCoordinator.cleanup_group_metadata)
    # runs every interval, and removes the groups left Empty without offsets
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600_000

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if field.name == "owned_shards":
                continue
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{field.name} must be an int, got {type(value).__name__}")
        nonneg = ("group_min_session_timeout_ms", "group_max_session_timeout_ms",
                  "group_initial_rebalance_delay_ms", "offset_metadata_max_bytes",
                  "new_member_join_timeout_ms")
        for name in nonneg:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        positive = ("group_max_size", "num_shards", "tick_ms", "wheel_size", "purge_interval",
                    "offsets_retention_minutes", "offsets_retention_check_interval_ms")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(
                "group_min_session_timeout_ms must be <= group_max_session_timeout_ms "
                f"({self.group_min_session_timeout_ms} > {self.group_max_session_timeout_ms})")
        if self.group_max_size > _INT32_MAX:
            raise ValueError(f"group_max_size must fit in an int32, got {self.group_max_size}")
        for name in ("group_max_session_timeout_ms", "new_member_join_timeout_ms"):
            if getattr(self, name) > _INT32_MAX:
                raise ValueError(f"{name} must fit in an int32, got {getattr(self, name)}")
        if self.offsets_retention_minutes > _RETENTION_MINUTES_MAX:
            raise ValueError("offsets_retention_minutes must be at most "
                             f"{_RETENTION_MINUTES_MAX}, got {self.offsets_retention_minutes}")
        if self.offsets_retention_check_interval_ms > _INT64_MAX:
            raise ValueError("offsets_retention_check_interval_ms must fit in an int64, got "
                             f"{self.offsets_retention_check_interval_ms}")
        if self.owned_shards is not None:
            try:
                shards = frozenset(self.owned_shards)
            except TypeError:
                raise TypeError("owned_shards must be None or an iterable of ints") from None
            for shard in shards:
                if isinstance(shard, bool) or not isinstance(shard, int):
                    raise TypeError(f"owned_shards must hold ints, got {shard!r}")
                if not 0 <= shard < self.num_shards:
                    raise ValueError(f"owned_shards: shard {shard} is outside [0, {self.num_shards})")
            object.__setattr__(self, "owned_shards", shards)


def java_string_hashcode(s: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, as an int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def shard_for(group_id: str, num_shards: int = 50) -> int:
    """Kafka's partitionFor: Utils.abs(groupId.hashCode) % num_shards (abs(MIN_VALUE) = 0)."""
    if type(group_id) is str and type(num_shards) is int and num_shards > 0:
        return _shard_of(group_id, num_shards)          # every request: checks that pass
    if not isinstance(group_id, str):
        raise TypeError(f"group_id must be a str, got {type(group_id).__name__}")
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards <= 0:
        raise ValueError(f"num_shards must be a positive int, got {num_shards!r}")
    return _shard_of(group_id, num_shards)


@functools.lru_cache(maxsize=1 << 16)
def _shard_of(group_id: str, num_shards: int) -> int:
    # Every request maps its group to a shard; the Java hash walks the string in Python,
    # so the answer for the groups in use is remembered.
    h = java_string_hashcode(group_id)
    h = 0 if h == -(2**31) else abs(h)
    return h % num_shards

"""Coordinator configuration and Kafka's group -> offsets-partition mapping."""
from __future__ import annotations

import dataclasses
import functools
from typing import FrozenSet, Optional, Tuple

__all__ = ["CoordinatorConfig", "shard_for", "java_string_hashcode"]

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
# Kafka reads offsets.retention.minutes as an int; in ms it must stay an int64
_RETENTION_MINUTES_MAX = _INT32_MAX
# The server-side assignors of the consumer group protocol, and its migration policies
# (Kafka's group.consumer.migration.policy: which way a group may convert online)
CONSUMER_ASSIGNORS = ("uniform", "range")
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")
_NOT_INT_FIELDS = ("owned_shards", "group_consumer_assignors", "group_consumer_migration_policy")


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
    # The consumer group protocol (KIP-848), Kafka's group.consumer.* configs
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_min_heartbeat_interval_ms: int = 5_000
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    group_consumer_max_size: int = _INT32_MAX
    group_consumer_assignors: Tuple[str, ...] = ("uniform", "range")   # the first: default
    group_consumer_migration_policy: str = "bidirectional"
    # Kafka's group.consumer.regex.refresh.interval.ms: a group's regexes are resolved
    # again this long after their last resolution even when no topic changed (the rights
    # of the heartbeat that resolves them may have)
    group_consumer_regex_refresh_interval_ms: int = 600_000

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if field.name in _NOT_INT_FIELDS:
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
        self._check_consumer_configs()
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


    def _check_consumer_configs(self) -> None:
        """Kafka's bounds on the group.consumer.* configs, each error naming the field."""
        for name in ("group_consumer_session_timeout_ms", "group_consumer_min_session_timeout_ms",
                     "group_consumer_max_session_timeout_ms",
                     "group_consumer_heartbeat_interval_ms",
                     "group_consumer_min_heartbeat_interval_ms",
                     "group_consumer_max_heartbeat_interval_ms", "group_consumer_max_size",
                     "group_consumer_regex_refresh_interval_ms"):
            value = getattr(self, name)
            if not 1 <= value <= _INT32_MAX:
                raise ValueError(f"{name} must be in [1, {_INT32_MAX}], got {value}")
        for kind in ("session_timeout", "heartbeat_interval"):
            lo = getattr(self, f"group_consumer_min_{kind}_ms")
            hi = getattr(self, f"group_consumer_max_{kind}_ms")
            value = getattr(self, f"group_consumer_{kind}_ms")
            if lo > hi:
                raise ValueError(f"group_consumer_min_{kind}_ms must be <= "
                                 f"group_consumer_max_{kind}_ms ({lo} > {hi})")
            if not lo <= value <= hi:
                raise ValueError(f"group_consumer_{kind}_ms must be within "
                                 f"[group_consumer_min_{kind}_ms, group_consumer_max_{kind}_ms] "
                                 f"= [{lo}, {hi}], got {value}")
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise ValueError("group_consumer_heartbeat_interval_ms must be below "
                             "group_consumer_session_timeout_ms "
                             f"({self.group_consumer_heartbeat_interval_ms} >= "
                             f"{self.group_consumer_session_timeout_ms})")
        assignors = self.group_consumer_assignors
        if isinstance(assignors, str):
            assignors = tuple(a.strip() for a in assignors.split(",") if a.strip())
        try:
            assignors = tuple(assignors)
        except TypeError:
            raise TypeError("group_consumer_assignors must be a sequence of assignor names") from None
        if not assignors:
            raise ValueError("group_consumer_assignors must name at least one assignor")
        for name in assignors:
            if name not in CONSUMER_ASSIGNORS:
                raise ValueError(f"group_consumer_assignors: unknown assignor {name!r} "
                                 f"(known: {', '.join(CONSUMER_ASSIGNORS)})")
        if len(set(assignors)) != len(assignors):
            raise ValueError(f"group_consumer_assignors names an assignor twice: {assignors}")
        object.__setattr__(self, "group_consumer_assignors", assignors)
        policy = self.group_consumer_migration_policy
        if not isinstance(policy, str):
            raise TypeError("group_consumer_migration_policy must be a str, "
                            f"got {type(policy).__name__}")
        if policy.lower() not in MIGRATION_POLICIES:
            raise ValueError("group_consumer_migration_policy must be one of "
                             f"{', '.join(MIGRATION_POLICIES)}, got {policy!r}")
        object.__setattr__(self, "group_consumer_migration_policy", policy.lower())


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

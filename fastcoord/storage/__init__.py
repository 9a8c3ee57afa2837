"""Durable group state: fsync'd, CRC32C-checksummed, compacted logs of group metadata
and committed offsets, one per shard (Kafka's `__consumer_offsets` partitions).

    from fastcoord import GroupCoordinator, CoordinatorConfig
    from fastcoord.storage import DurableStore, load_into

    store = DurableStore("data", num_shards=50, fsync="always")
    coord = GroupCoordinator(CoordinatorConfig(num_shards=50), store=store)
    load_into(coord, store)        # every owned shard: begin_loading, load_group, finish_loading

Durability promises (the `fsync` policy):

- "always" (default): a write is acknowledged (`done(Errors.NONE)`, hence the leader's
  SyncGroup answer and each OffsetCommit answer) only after it is fsync'd (fdatasync).
  Survives kill -9, OS crashes and power loss (as far as the disk honours fsync).
  Concurrent writes to a shard share one write + one fsync (group commit).
- "interval": acknowledged once written to the OS, fsync'd every `fsync_interval_ms`.
  Survives kill -9 of this process; an OS crash or power loss can lose the writes
  acknowledged during the last interval.

Recovery: a torn last record (crash mid-write) is truncated with a warning; a corrupt
record anywhere else makes `load_shard` raise `CorruptLogError` (file and byte offset)
unless `repair=True`, which truncates the log there and logs what it dropped.
The record format is documented in `fastcoord.storage.records`.
"""
from .log import CorruptLogError
from .durable import FAULT_POINTS, DurableStore, load_into

__all__ = ["DurableStore", "CorruptLogError", "load_into", "FAULT_POINTS"]

"""Where the coordinator persists group metadata and offsets.

A store has two methods; each takes a completion callback that receives an
`Errors` (NONE on success) once the write is durable. The coordinator answers
a leader's SyncGroup and every OffsetCommit only from that callback, and never
holds a group lock while calling the store.

    store_group(group_id, record, done)      record: dict (see GroupCoordinator), None: deleted
    store_offsets(group_id, offsets, done)   offsets: {(topic, partition): OffsetAndMetadata}

and may have two more: one for expired and deleted offsets (a store without it is
not told), one for consumer groups (KIP-848; a store without it keeps none of their
state, and their heartbeats are answered at once):

    delete_offsets(group_id, partitions, done)   partitions: [(topic, partition)]
    store_consumer_group(group_id, record, done) record: consumer_records.consumer_record's

A store whose `keeps_group_records` attribute is False is given None for every group
record: the coordinator does not build them (a replay's leader sync would build a
record of every member that nothing reads).

`InMemoryStore` completes at once (the default); it also writes one offset with no
callback, `store_offset_now(group_id, tp, om) -> Errors` (a replay's commits).
`InMemoryStore(group_records=False)` keeps offsets only; with `offsets=False` too it
keeps nothing, a sink whose writes succeed (a replay's, a what-if's).
`DeferredStore` parks each write until the test completes or fails it: the way to test
"answer only after the write"; it has no `store_offset_now`.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

from .consumer_records import fold_consumer_record
from .errors import Errors

__all__ = ["InMemoryStore", "DeferredStore"]

Done = Callable[[Errors], None]

# Errors.NONE read once: on Python 3.11 every `Errors.X` takes the slow attribute path
# (EnumType defines __getattr__), and every write compares with it.
_NONE = Errors.NONE


class InMemoryStore:
    """Keeps the latest record per group and every committed offset; writes succeed at once
    unless `fail_with` is set (then every write fails with that error).

    Thread-safe without a lock: every write is dict operations that are each atomic (on
    dicts keyed by str and (str, int), no Python code runs inside one), and a group's
    offsets dict, once made, is never replaced (setdefault; a tombstone drops it), so concurrent writers lose
    nothing and a reader sees each commit's offsets whole. No lock, because
    store_offset_now runs for every commit of a replay. Compiled (store.pxd), its fields are an
    extension type's: the native HeartbeatRun reads `fail_with`, `keeps_offsets` and
    `offsets` at every commit of a replay as loads."""

    __slots__ = ("groups", "offsets", "fail_with", "keeps_group_records", "keeps_offsets")

    def __init__(self, *, group_records: bool = True, offsets: bool = True) -> None:
        """`group_records` False: keep no group records. The coordinator then gives
        store_group None for every record (it does not build them): `groups` stays
        empty. `offsets` False: keep no offsets (`offsets` stays empty; the groups
        still hold theirs in memory). Both False: a sink whose writes succeed, for a
        run that never reads the store back (a trace replay, which wrote every commit
        to it)."""
        for name, value in (("group_records", group_records), ("offsets", offsets)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
        self.groups: Dict[str, dict] = {}
        self.offsets: Dict[str, dict] = {}
        self.fail_with: Errors = Errors.NONE
        self.keeps_group_records = group_records
        self.keeps_offsets = offsets

    def store_group(self, group_id: str, record: Optional[dict], done: Done) -> None:
        """record None: the group is gone (a tombstone), its offsets with it."""
        error = self.fail_with
        if error == _NONE:
            if record is None:
                self.groups.pop(group_id, None)
                self.offsets.pop(group_id, None)
            elif self.keeps_group_records:
                self.groups[group_id] = record
        done(error)

    def store_consumer_group(self, group_id: str, record: dict, done: Done) -> None:
        """A consumer group's changes (core/consumer.py, consumer_record): folded into
        the group's record, which is then what consumer_record(group, None) would give."""
        error = self.fail_with
        if error == _NONE and self.keeps_group_records:
            self._fold_consumer(group_id, record)
        done(error)

    def _fold_consumer(self, group_id: str, record: dict) -> None:
        folded = fold_consumer_record(self.groups.get(group_id), record)
        if folded is not None:      # (None: a partial record over nothing, skipped)
            self.groups[group_id] = folded

    def delete_offsets(self, group_id: str, partitions, done: Done) -> None:
        """Tombstones for single offsets (expired, or deleted by OffsetDelete)."""
        error = self.fail_with
        if error == _NONE:
            offsets = self.offsets.get(group_id)
            if offsets is not None:
                for tp in partitions:       # (the dict stays: see the class doc)
                    offsets.pop(tp, None)
        done(error)

    def store_offsets(self, group_id: str, offsets: dict, done: Done) -> None:
        error = self.fail_with
        if error == _NONE and self.keeps_offsets:
            self.offsets.setdefault(group_id, {}).update(offsets)
        done(error)

    def store_offset_now(self, group_id: str, tp: Tuple[str, int], om) -> Errors:
        """One offset written at once: the error returned rather than passed to a
        callback (a replay's commits: GroupLogic.commit_accepted). The native
        HeartbeatRun makes these same dict writes itself for an exact InMemoryStore
        (fastcoord/pipeline/_native/runs.pyx, c_commit_accepted): both store what
        commit_offsets stores for the offset alone (tests/pipeline/test_runs.py,
        test_a_runs_commit_leaves_what_commit_offsets_leaves)."""
        error = self.fail_with
        if error == _NONE and self.keeps_offsets:
            offsets = self.offsets.get(group_id)
            if offsets is None:
                offsets = self.offsets.setdefault(group_id, {})
            offsets[tp] = om
        return error


class DeferredStore(InMemoryStore):
    """Parks every write; `complete(i, error=NONE)` finishes the i-th parked write
    (applying it on success) and `complete_all()` finishes them in order."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: List[Tuple[str, str, object, Done]] = []

    store_offset_now = None                # it parks every write: none is written at once

    def store_group(self, group_id: str, record: dict, done: Done) -> None:
        self.pending.append(("group", group_id, record, done))

    def store_offsets(self, group_id: str, offsets: dict, done: Done) -> None:
        self.pending.append(("offsets", group_id, offsets, done))

    def store_consumer_group(self, group_id: str, record: dict, done: Done) -> None:
        self.pending.append(("consumer", group_id, record, done))

    def complete(self, index: int = 0, error: Errors = Errors.NONE) -> None:
        kind, group_id, payload, done = self.pending.pop(index)
        if error == Errors.NONE:
            if kind == "group":
                self.groups[group_id] = payload
            elif kind == "consumer":
                self._fold_consumer(group_id, payload)
            else:
                self.offsets.setdefault(group_id, {}).update(payload)
        done(error)

    def complete_all(self, error: Errors = Errors.NONE) -> None:
        while self.pending:
            self.complete(0, error)

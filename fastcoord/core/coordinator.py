"""The thin Python API of the group coordinator (docs/api.md).

It checks arguments (TypeError / ValueError naming the argument), translates them
and dispatches to the twin's core; it holds no protocol state of its own. The
heartbeat hot paths (`heartbeat`, `heartbeat_batch`, `member_handle`) are bound
straight to the twin's member table, so a native heartbeat never runs Python code;
so is `group_version`, and `advance_time` to the twin's ManualStepper (on a
ManualClock): each hands what it does not answer itself to the checked method here.
"""
from __future__ import annotations

import functools
import logging
import queue
import threading
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .. import _twins
from .assignors import compute_assignment
from .clock import ManualClock, SystemClock
from .config import CoordinatorConfig
from .errors import Errors
from .group_configs import check_group_config
from .results import (
    ConsumerGroupDescription, GroupDescription, GroupListing, GroupSummary, JoinGroupResult, LeaveGroupResult,
    OffsetAndMetadata, SyncGroupResult,
)
from .states import SHARD_LOADING
from .store import InMemoryStore

log = logging.getLogger("fastcoord.coordinator")


def _group_logic_module(impl: str):
    """The twin's group state machine: one source, core/groups.py. Compiled in place it
    is the native twin's module; the pure twin runs the same file from source."""
    if impl == "native":
        from . import groups
    else:
        from ._pure import groups
    return groups

__all__ = ["GroupCoordinator"]

TopicPartition = Tuple[str, int]
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_MAX_STEP = 2**62
# the groups one slice of a retention pass examines (cleanup_group_metadata_step's
# default, what the reaper and the server run between timers and requests)
RETENTION_SLICE_GROUPS = 1000


# The checks answer at once for the exact types callers nearly always pass (the hot
# paths: a commit per poll, a join per rebalance), and explain anything else.

def _check_str(name: str, value, *, optional: bool = False) -> None:
    if type(value) is str or (value is None and optional):
        return
    if not isinstance(value, str):
        kind = "a str or None" if optional else "a str"
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__}")


def _check_int(name: str, value, *, optional: bool = False, lo=_INT32_MIN, hi=_INT32_MAX) -> None:
    if type(value) is int and lo <= value <= hi:
        return
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")


def _check_callable(name: str, value) -> None:
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}")


def _check_protocols(protocols) -> List[Tuple[str, bytes]]:
    if type(protocols) is list:
        # A join per rebalance: a list of (str, bytes) pairs, checked in one pass without
        # a call per item (a copy: the member keeps it); anything else, below.
        for item in protocols:
            if not (type(item) is tuple and len(item) == 2 and type(item[0]) is str
                    and type(item[1]) is bytes):
                break
        else:
            return protocols[:]
    if isinstance(protocols, (str, bytes)) or not isinstance(protocols, Iterable):
        raise TypeError("protocols must be a sequence of (name, metadata_bytes) pairs")
    return [_check_protocol(item) for item in protocols]


def _check_protocol(item) -> Tuple[str, bytes]:
    if type(item) is tuple and len(item) == 2 and type(item[0]) is str \
            and type(item[1]) is bytes:
        return item
    if not isinstance(item, tuple) and not isinstance(item, list) or len(item) != 2:
        raise TypeError(f"protocols must hold (name, metadata_bytes) pairs, got {item!r}")
    name, metadata = item
    if not isinstance(name, str):
        raise TypeError(f"protocols: a protocol name must be a str, got {type(name).__name__}")
    if not isinstance(metadata, (bytes, bytearray, memoryview)):
        raise TypeError(f"protocols: metadata of {name!r} must be bytes, "
                        f"got {type(metadata).__name__}")
    return (name, bytes(metadata))


def _check_partition(tp) -> TopicPartition:
    if type(tp) is tuple and len(tp) == 2 and type(tp[0]) is str and type(tp[1]) is int:
        return tp
    if not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str) \
            or isinstance(tp[1], bool) or not isinstance(tp[1], int):
        raise TypeError(f"a partition must be a (topic: str, partition: int) tuple, got {tp!r}")
    return tp


def _check_assignments(assignments) -> Dict[str, bytes]:
    """A checked copy of a leader's `assignments` ({} for None)."""
    if type(assignments) is dict:
        # A leader's sync: {member id: bytes}, checked in one pass without a call per
        # item; anything else (another type anywhere) through the checks below.
        for mid, data in assignments.items():
            if not (type(mid) is str and type(data) is bytes):
                break
        else:
            return assignments.copy()
    checked: Dict[str, bytes] = {}
    if assignments is not None:
        if not isinstance(assignments, Mapping):
            raise TypeError("assignments must be a mapping of member id to bytes, or None")
        for mid, data in assignments.items():
            if not isinstance(mid, str):
                raise TypeError(f"assignments: member ids must be str, got {type(mid).__name__}")
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"assignments[{mid!r}] must be bytes, got {type(data).__name__}")
            checked[mid] = bytes(data)
    return checked


def _check_names(name: str, values) -> Optional[List[str]]:
    """An optional iterable of str (not a str itself), as a list."""
    if values is None:
        return None
    if isinstance(values, str):
        raise TypeError(f"{name} must be an iterable of str, not a str")
    values = list(values)
    for value in values:
        _check_str(name, value)
    return values


def _check_owned(owned) -> Dict[str, frozenset]:
    """owned_partitions: {topic: iterable of partition ints}, checked and copied."""
    if not isinstance(owned, Mapping):
        raise TypeError("owned_partitions must be a mapping of topic to partitions or None, "
                        f"got {type(owned).__name__}")
    checked = {}
    for topic, partitions in owned.items():
        _check_str("owned_partitions: a topic", topic)
        if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Iterable):
            raise TypeError(f"owned_partitions[{topic!r}] must be an iterable of int")
        parts = []
        for p in partitions:
            _check_int(f"owned_partitions[{topic!r}]", p, lo=0)
            parts.append(p)
        checked[topic] = frozenset(parts)
    return checked


def _check_offsets(offsets) -> Dict[TopicPartition, "OffsetAndMetadata | int"]:
    """A checked copy of `offsets`. An offset given alone as an int stays that int: it
    stands for OffsetAndMetadata(offset), which a commit makes once, with its commit time
    (load_group makes it at once); every other value is an OffsetAndMetadata."""
    if type(offsets) is dict:
        # A commit per poll: {(topic: str, partition: int): offset: int}, checked in one
        # pass without a call per item. Anything else (another type anywhere, an
        # OffsetAndMetadata) goes through the checks below from the start, which raise the
        # error the first bad item deserves.
        checked = {}
        for tp, value in offsets.items():
            if not (type(tp) is tuple and len(tp) == 2 and type(tp[0]) is str
                    and type(tp[1]) is int and type(value) is int):
                break
            checked[tp] = value
        else:
            return checked
    elif not isinstance(offsets, Mapping):
        raise TypeError("offsets must be a mapping of (topic, partition) to offsets")
    return {_check_partition(tp): _check_offset(tp, value) for tp, value in offsets.items()}


def _check_offset(tp, value) -> "OffsetAndMetadata | int":
    if type(value) is int:
        return value
    if isinstance(value, OffsetAndMetadata):
        om = value
    elif isinstance(value, int) and not isinstance(value, bool):
        om = OffsetAndMetadata(value)
    else:
        raise TypeError(f"offsets[{tp!r}] must be an OffsetAndMetadata or an int, "
                        f"got {type(value).__name__}")
    if isinstance(om.offset, bool) or not isinstance(om.offset, int):
        raise TypeError(f"offsets[{tp!r}].offset must be an int")
    if om.metadata is not None and not isinstance(om.metadata, str):
        raise TypeError(f"offsets[{tp!r}].metadata must be a str or None")
    if isinstance(om.leader_epoch, bool) or not isinstance(om.leader_epoch, int):
        raise TypeError(f"offsets[{tp!r}].leader_epoch must be an int")
    return om


class GroupCoordinator:
    """Kafka's group coordinator: the classic protocol and the consumer group protocol
    (KIP-848, docs/consumer-protocol.md). Thread-safe; see docs/api.md."""

    def __init__(self, config: Optional[CoordinatorConfig] = None, *, clock=None, store=None,
                 impl: Optional[str] = None,
                 member_id_factory: Optional[Callable[[str], str]] = None) -> None:
        if config is None:
            config = CoordinatorConfig()
        elif not isinstance(config, CoordinatorConfig):
            raise TypeError(f"config must be a CoordinatorConfig, got {type(config).__name__}")
        if clock is None:
            clock = SystemClock()
        elif not callable(getattr(clock, "now_ms", None)):
            raise TypeError("clock must have a now_ms() method")
        if store is None:
            store = InMemoryStore()
        elif not (callable(getattr(store, "store_group", None))
                  and callable(getattr(store, "store_offsets", None))):
            raise TypeError("store must have store_group() and store_offsets() methods")
        if member_id_factory is not None:
            _check_callable("member_id_factory", member_id_factory)
        self.impl = _twins.resolve(impl)
        self.config = config
        self.clock = clock
        self.store = store
        # The group state machine: core/groups.py, compiled (native) or as Python (pure)
        self._logic = _group_logic_module(self.impl).GroupLogic(
            config, clock, store, member_id_factory,
            _twins.module(self.impl, "core.members"), _twins.module(self.impl, "core.timer"),
            _twins.module(self.impl, "core.purgatory"),
            functools.partial(compute_assignment, impl=self.impl))
        table = self._logic.table
        # Documented internals for the pipeline's trace runs (docs/native-core-api.md):
        # the twin's member table (its native type is cimported), timing wheel, and the
        # group logic's entry point for a run's commit
        self.member_table = table
        self.timer = self._logic.timer
        self.commit_accepted = self._logic.commit_accepted
        # The hot paths go straight to the member table (no Python frame in native): the
        # instance's attributes shadow the class's methods of the same names below,
        # which document them and do the same through the table.
        self.heartbeat = table.heartbeat
        self.heartbeat_batch = table.heartbeat_batch
        self.heartbeat_handle = table.heartbeat_handle
        self.member_handle = table.member_handle
        # group_version too: the table answers for a group it holds, and hands every
        # other case to the checked path below (the class's group_version)
        self.group_version = table.group_version
        table.version_fallback = self._group_version_checked
        # consumer_group_heartbeat too: the table answers a settled member's steady
        # heartbeat (docs/consumer-protocol.md) and hands every other case to the class's
        # method, the checked path
        self.consumer_group_heartbeat = table.consumer_heartbeat
        table.consumer_fallback = self._consumer_heartbeat_checked
        self.consumer_member_handle = table.consumer_member_handle
        self.consumer_heartbeat_batch = table.consumer_heartbeat_batch
        self.consumer_heartbeat_handle = table.consumer_heartbeat_handle
        self._reaper: Optional[threading.Thread] = None
        self._stop = threading.Event()
        wheel = _twins.module(self.impl, "core.timer")
        self._time_lock = wheel.StepLock()     # (the stepper's: a C mutex in native)
        if type(clock) is ManualClock:
            # A replay or what-if steps time before most requests: one call into the
            # twin's stepper (C in native) for an int step in range
            self.advance_time = wheel.ManualStepper(
                self._logic.timer, self._time_lock, self._logic.flush,
                self._advance_time_checked).advance

    # -- requests that can be parked --------------------------------------------
    def join_group(self, group_id: str, member_id: str, protocol_type: str,
                   protocols: Sequence[Tuple[str, bytes]], *, session_timeout_ms: int,
                   rebalance_timeout_ms: Optional[int] = None,
                   group_instance_id: Optional[str] = None, require_known_member_id: bool = True,
                   client_id: str = "", client_host: str = "",
                   callback: Callable[[JoinGroupResult], None]) -> None:
        # The usual arguments (exact types, in range) pass at a glance; any other runs the
        # checks one by one, in order, which name the first argument at fault.
        if (type(group_id) is str and type(member_id) is str and type(protocol_type) is str
                and type(session_timeout_ms) is int
                and _INT32_MIN <= session_timeout_ms <= _INT32_MAX
                and (rebalance_timeout_ms is None
                     or (type(rebalance_timeout_ms) is int
                         and _INT32_MIN <= rebalance_timeout_ms <= _INT32_MAX))
                and (group_instance_id is None or type(group_instance_id) is str)
                and type(require_known_member_id) is bool
                and type(client_id) is str and type(client_host) is str):
            checked = _check_protocols(protocols)
            if rebalance_timeout_ms is None:
                rebalance_timeout_ms = session_timeout_ms
        else:
            _check_str("group_id", group_id, optional=True)   # None: missing -> INVALID_GROUP_ID
            _check_str("member_id", member_id)
            _check_str("protocol_type", protocol_type)
            checked = _check_protocols(protocols)
            _check_int("session_timeout_ms", session_timeout_ms)
            if rebalance_timeout_ms is None:
                rebalance_timeout_ms = session_timeout_ms
            _check_int("rebalance_timeout_ms", rebalance_timeout_ms)
            _check_str("group_instance_id", group_instance_id, optional=True)
            if not isinstance(require_known_member_id, bool):
                raise TypeError("require_known_member_id must be a bool")
            _check_str("client_id", client_id)
            _check_str("client_host", client_host)
        _check_callable("callback", callback)
        logic = self._logic
        logic.join_group(group_id, member_id, protocol_type, checked, session_timeout_ms,
                         rebalance_timeout_ms, group_instance_id, require_known_member_id,
                         client_id, client_host, callback)
        logic.flush()

    def sync_group(self, group_id: str, generation_id: int, member_id: str,
                   assignments: Optional[Mapping[str, bytes]] = None, *,
                   group_instance_id: Optional[str] = None, protocol_type: Optional[str] = None,
                   protocol_name: Optional[str] = None,
                   callback: Callable[[SyncGroupResult], None]) -> None:
        # As in join_group: the usual arguments pass at a glance, any other one by one.
        if not (type(group_id) is str and type(generation_id) is int
                and _INT32_MIN <= generation_id <= _INT32_MAX and type(member_id) is str):
            _check_str("group_id", group_id, optional=True)   # None: missing -> INVALID_GROUP_ID
            _check_int("generation_id", generation_id)
            _check_str("member_id", member_id)
        checked = _check_assignments(assignments)
        if not ((group_instance_id is None or type(group_instance_id) is str)
                and (protocol_type is None or type(protocol_type) is str)
                and (protocol_name is None or type(protocol_name) is str)):
            _check_str("group_instance_id", group_instance_id, optional=True)
            _check_str("protocol_type", protocol_type, optional=True)
            _check_str("protocol_name", protocol_name, optional=True)
        _check_callable("callback", callback)
        logic = self._logic
        logic.sync_group(group_id, generation_id, member_id, checked, group_instance_id,
                         protocol_type, protocol_name, callback)
        logic.flush()

    # heartbeat(group_id, member_id, generation_id, group_instance_id=None) -> Errors,
    # member_handle(group_id, member_id) -> int and heartbeat_batch(handles, generation_ids)
    # are bound to the member table in __init__, and so is
    # heartbeat_handle(handle, generation_id) -> int: heartbeat_batch for one handle
    # without the arrays (the same checks and effect; the error code as an int).

    def leave_group(self, group_id: str,
                    members: Sequence[Tuple[str, Optional[str]]]) -> LeaveGroupResult:
        _check_str("group_id", group_id, optional=True)   # None: missing -> INVALID_GROUP_ID
        if isinstance(members, (str, bytes)) or not isinstance(members, Iterable):
            raise TypeError("members must be a sequence of (member_id, group_instance_id) pairs")
        checked = []
        for item in members:
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise TypeError(f"members must hold (member_id, group_instance_id) pairs, got {item!r}")
            _check_str("members: member_id", item[0])
            _check_str("members: group_instance_id", item[1], optional=True)
            checked.append((item[0], item[1]))
        result = self._logic.leave_group(group_id, checked)
        self._logic.flush()
        return result

    # -- offsets -------------------------------------------------------------------------
    def commit_offsets(self, group_id: str, member_id: str, generation_id: int,
                       offsets: Mapping[TopicPartition, "OffsetAndMetadata | int"], *,
                       group_instance_id: Optional[str] = None,
                       callback: Optional[Callable[[dict], None]] = None,
                       api_version: Optional[int] = None):
        """Commit offsets. Without `callback`, waits for the store and returns
        {(topic, partition): Errors}; with it, returns None and calls `callback(result)`
        once the store has answered (what a server with a durable store wants).
        `api_version`: the OffsetCommit version of the request a server is answering,
        for the answers Kafka gives by version (None: as before v9, as the classic
        protocol's contract says, except a consumer group's member epoch checks)."""
        # A commit per poll: the usual arguments (exact types, in range) pass at a glance;
        # any other runs the checks one by one, which name the argument at fault.
        if not (type(group_id) is str and type(member_id) is str
                and type(generation_id) is int and _INT32_MIN <= generation_id <= _INT32_MAX):
            _check_str("group_id", group_id, optional=True)   # None: missing -> INVALID_GROUP_ID
            _check_str("member_id", member_id)
            _check_int("generation_id", generation_id)
        checked = _check_offsets(offsets)
        if group_instance_id is not None:
            _check_str("group_instance_id", group_instance_id, optional=True)
        if api_version is not None:
            _check_int("api_version", api_version, lo=0, hi=32767)
        logic = self._logic
        if callback is not None:
            _check_callable("callback", callback)
            logic.commit_offsets(group_id, member_id, generation_id, checked,
                                 group_instance_id, callback, api_version)
            logic.flush()
            return None
        # Usually answered before flush() returns (an in-memory store, or an error), else
        # from a store's thread: get() takes the answer at once or waits for it.
        answer: "queue.SimpleQueue[dict]" = queue.SimpleQueue()
        logic.commit_offsets(group_id, member_id, generation_id, checked,
                             group_instance_id, answer.put, api_version)
        logic.flush()
        return answer.get()

    def fetch_offsets(self, group_id: str, partitions: Optional[Iterable[TopicPartition]] = None,
                      *, require_stable: bool = False, member_id: Optional[str] = None,
                      member_epoch: int = -1) -> Tuple[Errors, Dict[TopicPartition, OffsetAndMetadata]]:
        """Committed offsets. `member_id` and `member_epoch` (OffsetFetch v9) are checked
        against a consumer group's member when given: UNKNOWN_MEMBER_ID,
        STALE_MEMBER_EPOCH. With `require_stable`, a partition whose commit is still
        being written answers offset -1 and makes the top-level error
        UNSTABLE_OFFSET_COMMIT (fetch_offsets_with_errors answers it per partition)."""
        error, found, unstable = self.fetch_offsets_with_errors(
            group_id, partitions, require_stable=require_stable, member_id=member_id,
            member_epoch=member_epoch)
        if unstable and error == Errors.NONE:
            error = Errors.UNSTABLE_OFFSET_COMMIT
        return error, found

    def fetch_offsets_with_errors(
            self, group_id: str, partitions: Optional[Iterable[TopicPartition]] = None, *,
            require_stable: bool = False, member_id: Optional[str] = None,
            member_epoch: int = -1,
    ) -> Tuple[Errors, Dict[TopicPartition, OffsetAndMetadata], Dict[TopicPartition, Errors]]:
        """fetch_offsets in Kafka's answer's shape: (the group's error, {tp: offset},
        {tp: error} of the partitions answered with one). A partition whose commit is
        still being written is UNSTABLE_OFFSET_COMMIT (offset -1) when `require_stable`;
        the group's error stays NONE, as Kafka's OffsetFetch answers it."""
        _check_str("group_id", group_id, optional=True)   # None: missing -> INVALID_GROUP_ID
        if partitions is not None:
            partitions = [_check_partition(tp) for tp in partitions]
        _check_str("member_id", member_id, optional=True)
        _check_int("member_epoch", member_epoch)
        error, found, unstable = self._logic.fetch_offsets(
            group_id, partitions, bool(require_stable), member_id, member_epoch)
        return error, found, dict.fromkeys(unstable, Errors.UNSTABLE_OFFSET_COMMIT)

    # -- admin ----------------------------------------------------------------------------
    def describe_group(self, group_id: str) -> GroupDescription:
        _check_str("group_id", group_id, optional=True)   # None: missing -> INVALID_GROUP_ID
        return self._logic.describe_group(group_id)

    def group_type(self, group_id: str) -> Optional[str]:
        """"consumer" for a consumer-protocol (KIP-848) group, including one whose
        members are still partly classic ones mid-migration; "classic" for any other
        group the coordinator holds; None when it holds none of that id."""
        _check_str("group_id", group_id)
        return self._logic.group_type(group_id)

    def group_summary(self, group_id: str) -> GroupSummary:
        """A cheap read of a group: GroupSummary(error, state, generation, num_members,
        members_epoch). state and the member count are describe_group's; members_epoch
        changes whenever the group's set of member ids does (and never repeats), so a
        caller that remembers it describes the group only when the members changed."""
        if type(group_id) is not str:     # (after every join, sync and leave of a replay)
            _check_str("group_id", group_id, optional=True)   # None: missing -> INVALID_GROUP_ID
        return self._logic.group_summary(group_id)

    # -- the hot paths (each bound on the instance to the member table's method) --------
    def heartbeat(self, group_id: str, member_id: str, generation_id: int,
                  group_instance_id: Optional[str] = None) -> Errors:
        """Kafka's Heartbeat: NONE, or the error code the protocol prescribes
        (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID,
        NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS ...). Answered by the member table
        alone: the native twin runs no Python code for it."""
        return self.member_table.heartbeat(group_id, member_id, generation_id,
                                           group_instance_id)

    def member_handle(self, group_id: str, member_id: str) -> int:
        """A handle naming the member for heartbeat_batch and heartbeat_handle, or -1
        when the coordinator does not know it. It stays valid while the member stays;
        a handle of a member that left answers UNKNOWN_MEMBER_ID."""
        return self.member_table.member_handle(group_id, member_id)

    def heartbeat_batch(self, handles, generation_ids):
        """One heartbeat per element (int64 handles, int32 generations, numpy arrays or
        buffers of equal length), in order, with each one's result and effect: an int16
        numpy array of error codes. The native twin runs the loop in C without the GIL."""
        return self.member_table.heartbeat_batch(handles, generation_ids)

    def heartbeat_handle(self, handle: int, generation_id: int) -> int:
        """heartbeat_batch for one handle, without arrays: the error code as an int."""
        return self.member_table.heartbeat_handle(handle, generation_id)

    def consumer_member_handle(self, group_id: str, member_id: str) -> int:
        """A handle naming a consumer-protocol member for consumer_heartbeat_batch and
        consumer_heartbeat_handle, or -1 when the coordinator does not know it. It names
        one incarnation: a member that left, or a static member replaced, is missed."""
        return self.member_table.consumer_member_handle(group_id, member_id)

    def consumer_heartbeat_batch(self, handles, member_epochs):
        """Steady ConsumerGroupHeartbeats by handle (int64 handles, int32 member epochs,
        numpy arrays of equal length), each as consumer_group_heartbeat with every
        optional field None from the client id and host the member last used: a bool
        numpy array, True where the member was settled at that epoch (the answer is its
        cached one: no error, the assignment unchanged; its session refreshed), False
        where nothing was done and the heartbeat needs consumer_group_heartbeat. The
        native twin runs the loop in C without the GIL."""
        return self.member_table.consumer_heartbeat_batch(handles, member_epochs)

    def consumer_heartbeat_handle(self, handle: int, member_epoch: int):
        """consumer_heartbeat_batch for one handle: the ConsumerGroupHeartbeatResult
        consumer_group_heartbeat would give, or None (then call that)."""
        return self.member_table.consumer_heartbeat_handle(handle, member_epoch)

    def group_version(self, group_id: str) -> int:
        """A number that changes whenever the group's state or its member ids change,
        and never repeats (-1: no such group; -2: group_summary would answer an error):
        a caller that remembers it reads group_summary only when it moved, which costs
        a fraction of group_summary itself (a replay asks after every join and sync,
        most of which change neither)."""
        return self._group_version_checked(group_id)

    def _group_version_checked(self, group_id) -> int:
        # (group_version's every case; an instance reads most through its member table)
        if type(group_id) is not str:
            _check_str("group_id", group_id, optional=True)   # None: missing -> -2
        return self._logic.group_version(group_id)

    def member_ids(self, group_id: str) -> List[str]:
        """The member ids of describe_group's members, in its order, without building
        their descriptions (a replay reads them whenever group_summary's members epoch
        moves)."""
        _check_str("group_id", group_id, optional=True)   # None: like describe_group's
        return self._logic.member_ids(group_id)

    def list_groups(self, states: Optional[Iterable[str]] = None,
                    types: Optional[Iterable[str]] = None) -> List[GroupListing]:
        """Every group, or those in one of `states` and of one of `types` ("classic",
        "consumer"); names match in any case. None while the coordinator is not
        `active`."""
        return self._logic.list_groups(_check_names("states", states),
                                       _check_names("types", types))

    # -- the consumer group protocol (KIP-848) --------------------------------------
    def set_topics(self, topics: Mapping[str, int]) -> None:
        """The topics the server-side assignors see ({name: partition count}), replacing
        the whole map. Subscribed groups re-target at their next heartbeat."""
        if not isinstance(topics, Mapping):
            raise TypeError(f"topics must be a mapping of str to int, got {type(topics).__name__}")
        checked = {}
        for name, count in topics.items():
            _check_str("topics: a topic name", name)
            if not name:
                raise ValueError("topics: a topic name must not be empty")
            _check_int(f"topics[{name!r}]", count, lo=0)
            checked[name] = count
        self._logic.consumers.set_topics(checked)

    def topics(self) -> Dict[str, int]:
        """The topics map set_topics gave (a copy)."""
        return dict(self._logic.consumers.topics)

    def set_group_config(self, group_id: str, configs: Mapping[str, Union[int, str]]) -> None:
        """Replace the group's dynamic configs (Kafka 4's group configs, `kafka-configs
        --entity-type groups`) with `configs` ({}: none, the coordinator's defaults):
        `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms`, ints (or
        their decimal text). Checked as Kafka checks them (docs/api.md): GroupConfigError
        (a ValueError) says what is refused, and nothing changes. The group need not
        exist; its consumer-protocol members take the values from their next heartbeat."""
        _check_str("group_id", group_id)
        if not group_id:
            raise ValueError("group_id must not be empty")
        checked = check_group_config(self._logic.config, configs)
        self._logic.consumers.set_group_config(group_id, checked)

    def group_config(self, group_id: str) -> Dict[str, int]:
        """The group's dynamic configs as set_group_config left them (those set only)."""
        _check_str("group_id", group_id)
        return dict(self._logic.consumers.group_configs.get(group_id, {}))

    def group_configs(self) -> Dict[str, Dict[str, int]]:
        """Every group's dynamic configs ({group id: {name: value}}, groups with some)."""
        return {g: dict(v) for g, v in self._logic.consumers.group_configs.items()}

    def consumer_group_heartbeat(self, group_id: str, member_id: str, member_epoch: int, *,
                                 instance_id: Optional[str] = None,
                                 rack_id: Optional[str] = None,
                                 rebalance_timeout_ms: int = -1,
                                 subscribed_topic_names: Optional[Iterable[str]] = None,
                                 subscribed_topic_regex: Optional[str] = None,
                                 server_assignor: Optional[str] = None,
                                 owned_partitions: Optional[Mapping[str, Iterable[int]]] = None,
                                 client_id: str = "", client_host: str = "",
                                 callback: Callable,
                                 topic_filter: Optional[Callable[[str], bool]] = None) -> None:
        """Kafka's ConsumerGroupHeartbeat (docs/api.md): `member_epoch` 0 joins, -1
        leaves, -2 leaves a static member's place for now; None leaves an optional field
        unchanged. `callback(ConsumerGroupHeartbeatResult)` runs once, inside the call
        or when the store confirms a write. `topic_filter(name) -> bool`, when given,
        names the topics the heartbeat's sender may describe: the group's regexes, when
        this heartbeat resolves them, match only those (as Kafka resolves them with the
        requester's rights); None: every topic. An instance holds this bound to its member
        table, which answers a settled member's steady heartbeat itself (no Python frame
        in the native twin) and hands every other case here."""
        self._consumer_heartbeat_checked(group_id, member_id, member_epoch, instance_id,
                                         rack_id, rebalance_timeout_ms, subscribed_topic_names,
                                         subscribed_topic_regex, server_assignor,
                                         owned_partitions, client_id, client_host, callback,
                                         topic_filter)

    def _consumer_heartbeat_checked(self, group_id, member_id, member_epoch, instance_id,
                                    rack_id, rebalance_timeout_ms, subscribed_topic_names,
                                    subscribed_topic_regex, server_assignor, owned_partitions,
                                    client_id, client_host, callback,
                                    topic_filter=None) -> None:
        # (consumer_group_heartbeat's every case, the slow path; an instance's member
        # table answers a settled member's steady heartbeat and hands the rest here)
        _check_str("group_id", group_id)
        _check_str("member_id", member_id)
        _check_int("member_epoch", member_epoch)
        _check_str("instance_id", instance_id, optional=True)
        _check_str("rack_id", rack_id, optional=True)
        _check_int("rebalance_timeout_ms", rebalance_timeout_ms)
        if subscribed_topic_names is not None:
            if isinstance(subscribed_topic_names, str):
                raise TypeError("subscribed_topic_names must be an iterable of str, not a str")
            subscribed_topic_names = list(subscribed_topic_names)
            for name in subscribed_topic_names:
                _check_str("subscribed_topic_names", name)
        _check_str("subscribed_topic_regex", subscribed_topic_regex, optional=True)
        _check_str("server_assignor", server_assignor, optional=True)
        if owned_partitions is not None:
            owned_partitions = _check_owned(owned_partitions)
        _check_str("client_id", client_id)
        _check_str("client_host", client_host)
        _check_callable("callback", callback)
        if topic_filter is not None:
            _check_callable("topic_filter", topic_filter)
        logic = self._logic
        logic.consumers.heartbeat(group_id, member_id, member_epoch, instance_id, rack_id,
                                  rebalance_timeout_ms, subscribed_topic_names,
                                  subscribed_topic_regex, server_assignor, owned_partitions,
                                  client_id, client_host, callback, topic_filter)
        logic.flush()

    def consumer_group_describe(self, group_ids: Iterable[str]) -> List[ConsumerGroupDescription]:
        """Kafka's ConsumerGroupDescribe: one description per id, in order
        (GROUP_ID_NOT_FOUND for an unknown or classic group)."""
        if isinstance(group_ids, str):
            raise TypeError("group_ids must be an iterable of str, not a str")
        group_ids = list(group_ids)
        for gid in group_ids:
            _check_str("group_ids", gid)
        return self._logic.consumers.describe(group_ids)

    def delete_groups(self, group_ids: Iterable[str]) -> Dict[str, Errors]:
        if isinstance(group_ids, str):
            raise TypeError("group_ids must be an iterable of str, not a str")
        group_ids = list(group_ids)
        for gid in group_ids:
            _check_str("group_ids", gid, optional=True)         # None: missing -> INVALID_GROUP_ID
        result = self._logic.delete_groups(group_ids)
        self._logic.flush()
        return result

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                       ) -> Tuple[Errors, Dict[TopicPartition, Errors]]:
        """Kafka's OffsetDelete: (group error, {(topic, partition): Errors}). An Empty
        group's offsets go; a consumer group with members keeps those of the topics it
        subscribes to (GROUP_SUBSCRIBED_TO_TOPIC); another group with members answers
        NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND (the map is empty after a
        group error). The store gets tombstones (`store.delete_offsets`, when it has one)."""
        _check_str("group_id", group_id, optional=True)   # None: missing -> INVALID_GROUP_ID
        if isinstance(partitions, (str, bytes)):
            raise TypeError("partitions must be an iterable of (topic, partition)")
        checked = [_check_partition(tp) for tp in partitions]
        result = self._logic.delete_offsets(group_id, checked)
        self._logic.flush()
        return result

    def cleanup_group_metadata(self) -> Tuple[int, int]:
        """One whole offsets retention pass (`start()`'s reaper and the server run it in
        slices, cleanup_group_metadata_step): expire the offsets past
        offsets_retention_minutes, remove the groups left Empty without offsets, members
        or pending joins, and write their tombstones. Returns (offsets expired, groups
        removed)."""
        result = self._logic.cleanup_group_metadata()
        self._logic.flush()
        return result

    def cleanup_group_metadata_step(self, max_groups: int = RETENTION_SLICE_GROUPS
                                    ) -> Tuple[int, int, bool]:
        """The retention check in slices, so that no call examines more than
        `max_groups` groups: each call goes on with the pass under way (the first one
        starts it), examining each group as cleanup_group_metadata does, at the time
        of the call. A pass examines every group of the table at its start once (one
        created since waits for the next pass). Returns (offsets expired, groups
        removed, whether the pass is done); after a done, the next call starts a new
        pass, so a driver waits for the interval first."""
        _check_int("max_groups", max_groups, lo=1, hi=_MAX_STEP)
        result = self._logic.cleanup_group_metadata_step(max_groups)
        self._logic.flush()
        return result

    # -- shards ---------------------------------------------------------------------------
    def _check_shard(self, shard) -> int:
        _check_int("shard", shard, lo=0, hi=self.config.num_shards - 1)
        return shard

    def owns_shard(self, shard: int) -> bool:
        return self._logic.table.shard_state(self._check_shard(shard)) != 0

    def begin_loading(self, shard: int) -> None:
        self._logic.begin_loading(self._check_shard(shard))

    def loading(self) -> bool:
        """Whether a shard is loading (between begin_loading and finish_loading)."""
        table = self._logic.table
        return any(table.shard_state(shard) == SHARD_LOADING
                   for shard in range(self.config.num_shards))

    def finish_loading(self, shard: int) -> None:
        self._logic.finish_loading(self._check_shard(shard))
        self._logic.flush()

    def load_group(self, group_id: str, record: Optional[dict],
                   offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Install a group read back from durable storage, between begin_loading(shard) and
        finish_loading(shard) of its shard. `record` is the dict the coordinator gave
        `store.store_group` (None for a group that has only offsets)."""
        _check_str("group_id", group_id)
        if record is not None and not isinstance(record, dict):
            raise TypeError("record must be a dict or None")
        checked = _check_offsets(offsets)
        self._logic.install_loaded_group(group_id, record, {
            tp: OffsetAndMetadata(om) if type(om) is int else om for tp, om in checked.items()})

    def unload_shard(self, shard: int) -> None:
        self._logic.unload_shard(self._check_shard(shard))
        self._logic.flush()

    # -- time -------------------------------------------------------------------------------
    def _manual_clock(self, method: str, hint: str = "") -> ManualClock:
        clock = self.clock
        if not isinstance(clock, ManualClock):
            raise TypeError(f"{method} needs a ManualClock{hint}")
        return clock

    def advance_time(self, ms: int) -> int:
        """ManualClock only: move time by `ms`, firing everything due in deadline order
        with the clock reading each deadline while it fires. Returns how many fired."""
        return self._advance_time_checked(ms)

    def _advance_time_checked(self, ms) -> int:
        # (advance_time's every case; on a ManualClock, an instance steps through the
        # twin's ManualStepper, bound in __init__, which hands this anything unusual)
        clock = self._manual_clock("advance_time", "; use expire_due() with other clocks")
        _check_int("ms", ms, lo=0, hi=_MAX_STEP)
        with self._time_lock:
            target = clock.now_ms() + ms
            fired = self._logic.timer.advance_to(target, step_clock=True)
            clock.set_ms(target)
        self._logic.flush()
        return fired

    def set_time_if_idle(self, now_ms: int) -> bool:
        """ManualClock only: set the clock to `now_ms` (it never goes back) without
        stepping the timer, when that is exactly what advance_time(now_ms - now) would
        do for what comes next; else do nothing and return False (use advance_time).

        True means: nothing is due up to now_ms, and the timer says that every timer
        armed from then on with a delay of at least group_min_session_timeout_ms lands in
        the wheel exactly where it would after advance_time (Timer.idle_through).
        Heartbeats and offset commits arm only session deadlines, which are at least that
        far away. A trace replay steps the clock this way before them and keeps
        advance_time for the other requests."""
        clock = self.clock
        if not (type(clock) is ManualClock and type(now_ms) is int and 0 <= now_ms <= _MAX_STEP):
            clock = self._manual_clock("set_time_if_idle")
            _check_int("now_ms", now_ms, lo=0, hi=_MAX_STEP)
        with self._time_lock:
            target = clock.now_ms()
            if now_ms > target:
                target = now_ms
            if not self._logic.timer.idle_through(target,
                                                  self.config.group_min_session_timeout_ms):
                return False
            clock.set_ms(target)
        return True

    def expire_due(self) -> int:
        """Fire everything due at clock.now_ms()."""
        with self._time_lock:
            target = self.clock.now_ms()
            fired = self._logic.timer.advance_to(target)
        self._logic.flush()
        return fired

    def start(self, max_wait_ms: int = 10) -> "GroupCoordinator":
        """Start the reaper thread that fires due timers (for a SystemClock). It sleeps
        until the next deadline, at most `max_wait_ms` (so a newly armed earlier deadline
        is late by at most that much), and never spins when nothing is due."""
        if self._reaper is not None:
            return self
        _check_int("max_wait_ms", max_wait_ms, lo=1, hi=60_000)
        self._stop.clear()
        timer = self._logic.timer
        interval = self.config.offsets_retention_check_interval_ms
        next_check = [self.clock.now_ms() + interval]
        in_pass = [False]        # a retention pass is under way

        def reap():
            while not self._stop.is_set():
                self.expire_due()
                # the retention check in slices, between which timers fire
                if in_pass[0] or self.clock.now_ms() >= next_check[0]:
                    if not in_pass[0]:
                        next_check[0] = self.clock.now_ms() + interval
                    try:
                        in_pass[0] = not self.cleanup_group_metadata_step()[2]
                    except Exception:
                        in_pass[0] = False
                        log.exception("the offsets retention check failed")
                nxt = timer.next_deadline_ms()
                wait = max_wait_ms if nxt is None else min(max(nxt - self.clock.now_ms(), 0),
                                                             max_wait_ms)
                if in_pass[0]:
                    wait = 0
                self._stop.wait(wait / 1000.0 if wait > 0 else 0.0005)

        self._reaper = threading.Thread(target=reap, name="fastcoord-reaper", daemon=True)
        self._reaper.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join()
            self._reaper = None

    def __enter__(self) -> "GroupCoordinator":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- introspection ------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self._logic.table.active

    @active.setter
    def active(self, value: bool) -> None:
        """False makes every request answer COORDINATOR_NOT_AVAILABLE (a shutting-down broker)."""
        self._logic.table.active = bool(value)

    def __repr__(self) -> str:
        return f"GroupCoordinator(impl={self.impl!r}, groups={len(self._logic.table.groups)})"

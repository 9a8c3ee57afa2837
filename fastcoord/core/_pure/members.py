"""Member heartbeat tables, pure-Python twin of `fastcoord/core/_native/parts/members.pyx`.

The hot path of the coordinator lives here: a heartbeat finds the group record,
finds the member's slot, checks state and generation and stores
`deadline = now + session_timeout`. It allocates nothing and touches the timing
wheel only when the member has no entry armed (or its deadline moved earlier).
Each slot keeps ONE wheel entry; when it comes due the table re-checks it lazily:
if the deadline moved, the entry is re-inserted at the new deadline, otherwise the
group logic (`on_deadline`) decides whether the member expires.

A handle is `slot | slot_generation << 32`; freeing a slot bumps its generation,
and so does renaming its member (a static member's new incarnation), so a stale
handle can never reach the slot's next member.
"""
from __future__ import annotations

import logging
import threading

import numpy as np

from ..config import shard_for
from ..errors import Errors

__all__ = ["GroupRecord", "MemberTable"]

from ..states import DEAD, EMPTY, PR, SHARD_ACTIVE, SHARD_LOADING, STABLE
_NOT_ARMED = -1

E_NONE = Errors.NONE
E_UNKNOWN = Errors.UNKNOWN_MEMBER_ID
E_ILLEGAL_GENERATION = Errors.ILLEGAL_GENERATION
E_REBALANCING = Errors.REBALANCE_IN_PROGRESS
E_NOT_AVAILABLE = Errors.COORDINATOR_NOT_AVAILABLE
E_NOT_COORDINATOR = Errors.NOT_COORDINATOR
E_INVALID_GROUP = Errors.INVALID_GROUP_ID
E_FENCED = Errors.FENCED_INSTANCE_ID

log = logging.getLogger("fastcoord.coordinator")


class GroupRecord:
    """What the heartbeat path needs of a group: its reentrant lock (this object is the
    lock: `with rec:`), state and generation (mirrored by the group logic), its shard,
    and member id -> slot for members that have joined (pending ones are not here)."""

    __slots__ = ("group_id", "state", "generation", "shard", "slots", "group", "_lock",
                 "cquiet", "ctopics")

    def __init__(self, group_id: str, shard: int) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.generation = 0
        self.shard = shard
        self.slots: dict = {}
        self.group = None
        self._lock = threading.RLock()
        # A consumer group's quiet point (MemberTable.consumer_quiet): the group epoch at
        # which nothing is pending for it (0: something is), and the topics version its
        # metadata was computed from
        self.cquiet = 0
        self.ctopics = -1

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self):
        self._lock.acquire()
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        self._lock.release()


class _Slot:
    """One member's heartbeat state."""

    __slots__ = ("rec", "joined", "session_timeout_ms", "deadline_ms", "armed_ms",
                 "consumer_id", "cepoch", "cached")

    def __init__(self, rec, joined, session_timeout_ms, deadline_ms):
        self.rec = rec
        self.joined = joined
        self.session_timeout_ms = session_timeout_ms
        self.deadline_ms = deadline_ms
        self.armed_ms = _NOT_ARMED     # deadline of the live wheel entry, or _NOT_ARMED
        self.consumer_id = None        # a consumer-protocol member's id (consumer_bind)
        self.cepoch = 0                # the member epoch it is settled at; 0: none
        self.cached = None             # (result, client_id, client_host) while settled


class MemberTable:
    def __init__(self, clock, timer, num_shards: int) -> None:
        self.clock = clock
        self.timer = timer
        self.num_shards = num_shards
        self.groups: dict = {}                 # group id -> GroupRecord
        self.active = True
        self.on_deadline = None                # set by the group logic: f(slot)
        self.version_fallback = None           # set by the coordinator: f(group_id)
        # set by the group logic: f(group_id, member_id, generation_id, instance_id), the
        # classic heartbeat of a consumer group (whose classic members the table does
        # not hold: mixed groups)
        self.mixed_heartbeat = None
        self.consumer_fallback = None          # set by the coordinator: its checked path
        self._consumers: dict = {}             # (group id, member id) -> consumer slot
        self._ctopics = 0                      # the consumer logic's topics version
        self._shards = bytearray(num_shards)
        self._slots: list = []                 # slot -> _Slot or None
        self._slot_gens: list = []             # slot -> generation (bumped when freed)
        self._free: list = []
        self._alloc_lock = threading.Lock()

    # -- shards and groups --------------------------------------------------
    def set_shard_state(self, shard: int, state: int) -> None:
        self._shards[shard] = state

    def shard_state(self, shard: int) -> int:
        return self._shards[shard]

    def make_result(self, cls, values: tuple):
        """A result NamedTuple (fastcoord.core.results) from its field values, without
        the call through its Python __new__: the group logic's answers."""
        return tuple.__new__(cls, values)

    def current_thread(self) -> int:
        """The calling thread's identifier."""
        return threading.get_ident()

    def new_group(self, group_id: str, shard: int) -> GroupRecord:
        rec = GroupRecord(group_id, shard)
        self.groups[group_id] = rec
        return rec

    def drop_group(self, group_id: str) -> None:
        self.groups.pop(group_id, None)

    # -- slots ----------------------------------------------------------------
    def alloc(self, rec, member_id: str, session_timeout_ms: int, deadline_ms: int,
              pending: bool) -> int:
        """A slot for a new member (or a pending one, not yet visible to heartbeats),
        armed at `deadline_ms`. Caller holds `rec`'s lock."""
        with self._alloc_lock:
            if self._free:
                slot = self._free.pop()
            else:
                slot = len(self._slots)
                self._slots.append(None)
                self._slot_gens.append(0)
        s = _Slot(rec, not pending, session_timeout_ms, deadline_ms)
        self._slots[slot] = s
        if not pending:
            rec.slots[member_id] = slot
        self._arm(slot, s, deadline_ms)
        return slot

    def promote(self, slot: int, member_id: str, session_timeout_ms: int,
                deadline_ms: int) -> None:
        """A pending member joined: make it visible and give it a new deadline."""
        s = self._slots[slot]
        s.rec.slots[member_id] = slot
        s.joined = True
        s.session_timeout_ms = session_timeout_ms
        self.set_deadline(slot, deadline_ms)

    def free(self, slot: int, member_id=None) -> None:
        s = self._slots[slot]
        if s is None:
            return
        if member_id is not None and s.rec.slots.get(member_id) == slot:
            del s.rec.slots[member_id]
        self._consumer_unbind(slot, s)
        self._slots[slot] = None       # its wheel entry, if any, is now stale
        with self._alloc_lock:
            self._slot_gens[slot] = (self._slot_gens[slot] + 1) & 0x7FFFFFFF
            self._free.append(slot)

    def rename(self, slot: int, old_id: str, new_id: str) -> None:
        """The slot's member takes a new id (a static member's replacement or its undoing):
        a new incarnation, so the slot's generation moves on as when it is freed, and a
        handle taken for the old id misses it, answering what a heartbeat by that id
        answers (UNKNOWN_MEMBER_ID). The slot's wheel entry is re-armed under the new
        generation (the one it had is now stale)."""
        s = self._slots[slot]
        slots = s.rec.slots
        if slots.get(old_id) == slot:
            del slots[old_id]
        slots[new_id] = slot
        with self._alloc_lock:
            self._slot_gens[slot] = (self._slot_gens[slot] + 1) & 0x7FFFFFFF
        self._arm(slot, s, s.deadline_ms)

    def set_session_timeout(self, slot: int, session_timeout_ms: int) -> None:
        self._slots[slot].session_timeout_ms = session_timeout_ms

    def touch(self, slot: int) -> None:
        """Refresh the session: deadline = now + session timeout."""
        s = self._slots[slot]
        self._refresh(slot, s, self.clock.now_ms() + s.session_timeout_ms)

    def set_deadline(self, slot: int, deadline_ms: int) -> None:
        s = self._slots[slot]
        self._refresh(slot, s, deadline_ms)

    def deadline(self, slot: int) -> int:
        return self._slots[slot].deadline_ms

    def _refresh(self, slot: int, s: _Slot, deadline_ms: int) -> None:
        s.deadline_ms = deadline_ms
        if s.armed_ms == _NOT_ARMED or deadline_ms < s.armed_ms:
            # Rare: not armed, or a shorter timeout (the lazy re-check would come too late).
            # An older entry stays in the wheel and is ignored when it fires.
            self._arm(slot, s, deadline_ms)
        # else: the common case. The entry fires at the old deadline and moves on.

    def _arm(self, slot: int, s: _Slot, deadline_ms: int) -> None:
        """Give the slot a wheel entry at `deadline_ms`, tagged slot | generation << 32.
        Entries are never cancelled: a stale one is recognised when it fires."""
        s.armed_ms = deadline_ms
        self.timer.schedule_tag_at(deadline_ms, self, slot | (self._slot_gens[slot] << 32))

    def on_timer(self, tag: int, deadline_ms: int) -> None:
        """A wheel entry of slot `tag & 0xFFFFFFFF` came due."""
        slot, gen = tag & 0xFFFFFFFF, tag >> 32
        s = self._slots[slot] if slot < len(self._slots) else None
        if s is None or self._slot_gens[slot] != gen or s.armed_ms != deadline_ms:
            return                                  # stale: freed or re-armed since
        with s.rec:
            if self._slots[slot] is not s or s.armed_ms != deadline_ms:
                return
            if s.deadline_ms > deadline_ms:         # heartbeats moved it: check again later
                self._arm(slot, s, s.deadline_ms)
                return
            s.armed_ms = _NOT_ARMED
        self.on_deadline(slot)

    # -- reads ------------------------------------------------------------------
    def group_version(self, group_id) -> int:
        """GroupCoordinator.group_version, bound to it: the version of a group the group
        logic holds, in an active shard of an active table; every other case, and any
        other argument, goes to `version_fallback`, the coordinator's checked path."""
        if type(group_id) is str and self.active:
            rec = self.groups.get(group_id)
            if rec is not None and rec.group is not None \
                    and self._shards[rec.shard] == SHARD_ACTIVE:
                return rec.group.version
        return self.version_fallback(group_id)

    # -- consumer-protocol members (KIP-848) ----------------------------------------
    # A consumer member's slot stays pending for the classic paths (a classic Heartbeat
    # naming it answers UNKNOWN_MEMBER_ID, as Kafka's); consumer_heartbeat finds it by
    # (group id, member id). The slow path (core/consumer.py) publishes what
    # consumer_heartbeat may answer alone: each member's settled epoch and cached
    # answer, and its group's quiet point.
    def consumer_bind(self, slot: int, member_id: str) -> None:
        """The consumer member of `slot` is findable by consumer heartbeats under
        `member_id` (a static member's replacement re-binds its slot), unsettled. The
        caller holds the group's lock."""
        s = self._slots[slot]
        rebind = s.consumer_id is not None
        self._consumer_unbind(slot, s)
        s.consumer_id = member_id
        self._consumers[(s.rec.group_id, member_id)] = slot
        if rebind:
            # A new incarnation, as rename's: a handle taken for the old id misses it
            with self._alloc_lock:
                self._slot_gens[slot] = (self._slot_gens[slot] + 1) & 0x7FFFFFFF
            self._arm(slot, s, s.deadline_ms)

    def _consumer_unbind(self, slot: int, s: _Slot) -> None:
        s.cepoch = 0
        s.cached = None
        if s.consumer_id is not None:
            key = (s.rec.group_id, s.consumer_id)
            if self._consumers.get(key) == slot:
                del self._consumers[key]
            s.consumer_id = None

    def consumer_settle(self, slot: int, member_epoch: int, result, client_id: str,
                        client_host: str) -> None:
        """The member's steady heartbeat at `member_epoch` (> 0), from `client_id` at
        `client_host`, is answered `result` while its group is quiet at that epoch."""
        if member_epoch <= 0:
            raise ValueError(f"member_epoch must be > 0, got {member_epoch}")
        s = self._slots[slot]
        s.cached = (result, client_id, client_host)
        s.cepoch = member_epoch

    def consumer_unsettle(self, slot: int) -> None:
        """The member's next heartbeat runs the slow path."""
        s = self._slots[slot]
        s.cepoch = 0
        s.cached = None

    def consumer_quiet(self, rec, group_epoch: int, topics_version: int) -> None:
        """The group is quiet at `group_epoch` (0: not quiet) with its metadata computed
        from `topics_version`."""
        rec.cquiet = group_epoch
        rec.ctopics = topics_version

    def consumer_topics(self, topics_version: int) -> None:
        """set_topics moved the topics version: no group is quiet at the old one."""
        self._ctopics = topics_version

    def consumer_steady(self, group_id, member_id, member_epoch, client_id, client_host):
        """The cached answer of a settled member's steady heartbeat (its session
        refreshed), or None, having changed nothing: the slow path's to answer."""
        if not (type(group_id) is str and type(member_id) is str and type(member_epoch) is int
                and type(client_id) is str and type(client_host) is str and self.active
                and 0 < member_epoch <= 0x7FFFFFFF):
            return None
        slot = self._consumers.get((group_id, member_id))
        if slot is None:
            return None
        s = self._slots[slot]
        if s is None:
            return None
        rec = s.rec
        if self._shards[rec.shard] != SHARD_ACTIVE:
            return None
        with rec:
            # Re-checked under the group's lock, under which the slow path publishes.
            if (self._slots[slot] is not s or s.consumer_id != member_id
                    or s.cepoch != member_epoch or rec.cquiet != member_epoch
                    or rec.ctopics != self._ctopics):
                return None
            result, cached_client, cached_host = s.cached
            if client_id != cached_client or client_host != cached_host:
                return None     # a new client id or host: the slow path records it
            self._refresh(slot, s, self.clock.now_ms() + s.session_timeout_ms)
            return result

    def consumer_heartbeat(self, group_id, member_id, member_epoch, *, instance_id=None,
                           rack_id=None, rebalance_timeout_ms=-1, subscribed_topic_names=None,
                           subscribed_topic_regex=None, server_assignor=None,
                           owned_partitions=None, client_id="", client_host="", callback,
                           topic_filter=None):
        """GroupCoordinator.consumer_group_heartbeat, bound to it: a settled member's
        steady heartbeat (every optional field None, rebalance_timeout_ms -1, at its
        settled epoch, in an active shard) is answered here, its session refreshed and
        `callback` given the slow path's answer, cached; every other case, and any
        other argument, goes to `consumer_fallback` (every argument, in order), the
        coordinator's checked path. (`topic_filter` matters only where regexes are
        resolved: never in a steady answer, which a group with regexes to resolve does
        not get.)"""
        result = None
        if (instance_id is None and rack_id is None and subscribed_topic_names is None
                and subscribed_topic_regex is None and server_assignor is None
                and owned_partitions is None and type(rebalance_timeout_ms) is int
                and rebalance_timeout_ms == -1 and callable(callback)
                and (topic_filter is None or callable(topic_filter))):
            result = self.consumer_steady(group_id, member_id, member_epoch, client_id,
                                          client_host)
        if result is None:
            self.consumer_fallback(group_id, member_id, member_epoch, instance_id, rack_id,
                                   rebalance_timeout_ms, subscribed_topic_names,
                                   subscribed_topic_regex, server_assignor, owned_partitions,
                                   client_id, client_host, callback, topic_filter)
            return
        try:
            callback(result)
        except Exception:
            log.exception("a coordinator callback raised; the group state is unaffected")

    # -- consumer members by handle ------------------------------------------------
    def consumer_member_handle(self, group_id: str, member_id: str) -> int:
        """The consumer member's handle for consumer_heartbeat_batch, or -1 if unknown."""
        _check_ids(group_id, member_id)
        slot = self._consumers.get((group_id, member_id))
        return -1 if slot is None else self.handle(slot)

    def consumer_heartbeat_batch(self, handles, member_epochs):
        """One steady heartbeat per element (consumer_heartbeat with every optional field
        None, from the client id and host the member last used): True where the member
        was settled at that epoch in a quiet group, so the answer is its cached one and
        its session is refreshed; False where nothing was done and the heartbeat needs
        consumer_group_heartbeat."""
        handles, member_epochs = check_batch(handles, member_epochs, "member_epochs")
        out = np.zeros(len(handles), dtype=np.bool_)
        now = self.clock.now_ms()
        for i, (h, epoch) in enumerate(zip(handles.tolist(), member_epochs.tolist())):
            out[i] = self._consumer_steady_handle(h, epoch, now) is not None
        return out

    def consumer_heartbeat_handle(self, handle: int, member_epoch: int):
        """consumer_heartbeat_batch for one member: its cached answer (the
        ConsumerGroupHeartbeatResult consumer_group_heartbeat would give), or None,
        having changed nothing."""
        check_handle_args(handle, member_epoch, "member_epoch")
        return self._consumer_steady_handle(handle, member_epoch, self.clock.now_ms())

    def _consumer_steady_handle(self, h: int, member_epoch: int, now: int):
        slot = h & 0xFFFFFFFF
        if (h < 0 or slot >= len(self._slots) or self._slot_gens[slot] != (h >> 32)
                or not self.active or member_epoch <= 0):
            return None
        s = self._slots[slot]
        if s is None or s.consumer_id is None:
            return None
        rec = s.rec
        if self._shards[rec.shard] != SHARD_ACTIVE:
            return None
        with rec:
            # Re-checked under the group's lock, under which the slow path publishes.
            if (self._slot_gens[slot] != (h >> 32) or self._slots[slot] is not s
                    or s.consumer_id is None or s.cepoch != member_epoch
                    or rec.cquiet != member_epoch or rec.ctopics != self._ctopics
                    or s.cached is None):
                return None
            self._refresh(slot, s, now + s.session_timeout_ms)
            return s.cached[0]

    # -- handles ----------------------------------------------------------------
    def handle(self, slot: int) -> int:
        return slot | (self._slot_gens[slot] << 32)

    def member_handle(self, group_id: str, member_id: str) -> int:
        _check_ids(group_id, member_id)
        rec = self.groups.get(group_id)
        if rec is None:
            return -1
        slot = rec.slots.get(member_id)
        return -1 if slot is None else self.handle(slot)

    # -- the hot path ---------------------------------------------------------------
    def heartbeat(self, group_id, member_id, generation_id, group_instance_id=None):
        if type(group_id) is not str:
            if group_id is None:                 # a missing group id, as Kafka's null
                return E_INVALID_GROUP
            raise TypeError(f"group_id must be a str or None, got {type(group_id).__name__}")
        if type(member_id) is not str:
            raise TypeError(f"member_id must be a str, got {type(member_id).__name__}")
        if type(generation_id) is not int:
            raise TypeError(f"generation_id must be an int, got {type(generation_id).__name__}")
        if group_instance_id is not None and type(group_instance_id) is not str:
            raise TypeError("group_instance_id must be a str or None, "
                            f"got {type(group_instance_id).__name__}")
        if not group_id:
            return E_INVALID_GROUP
        if not self.active:
            return E_NOT_AVAILABLE
        rec = self.groups.get(group_id)
        shard_state = self._shards[rec.shard if rec is not None
                                   else shard_for(group_id, self.num_shards)]
        if shard_state != SHARD_ACTIVE:
            return E_NONE if shard_state == SHARD_LOADING else E_NOT_COORDINATOR
        if rec is None:
            return E_UNKNOWN
        if group_instance_id is not None and rec.group is None:
            return E_UNKNOWN        # (a record the group logic has not yet given its group)
        with rec:
            state = rec.state
            if state == DEAD:
                return E_NOT_AVAILABLE
            if group_instance_id is not None:
                # A static member: its instance id is checked before its member id, as
                # Kafka does. Mapped to no member: unknown; to another (a newer
                # incarnation): fenced.
                current = rec.group.static.get(group_instance_id)
                if current is None:
                    return self._missed(rec, group_id, member_id, generation_id,
                                        group_instance_id)
                if current != member_id:
                    return E_FENCED
            slot = rec.slots.get(member_id)
            if slot is None:
                return self._missed(rec, group_id, member_id, generation_id, group_instance_id)
            if generation_id != rec.generation:
                return E_ILLEGAL_GENERATION
            if state == EMPTY:
                return E_UNKNOWN
            s = self._slots[slot]
            self._refresh(slot, s, self.clock.now_ms() + s.session_timeout_ms)
            return E_REBALANCING if state == PR else E_NONE

    def _missed(self, rec, group_id, member_id, generation_id, group_instance_id):
        """A heartbeat of a member the table does not hold: unknown, unless the group is
        a consumer group, whose members (classic ones of a mixed group among them) the
        group logic answers for (`mixed_heartbeat`). Caller holds `rec`'s lock."""
        # -- mixed groups --
        group = rec.group
        if group is not None and group.consumer is not None \
                and self.mixed_heartbeat is not None:
            return self.mixed_heartbeat(group_id, member_id, generation_id, group_instance_id)
        # -- end mixed groups --
        return E_UNKNOWN

    def heartbeat_batch(self, handles, generation_ids):
        handles, generation_ids = check_batch(handles, generation_ids)
        out = np.empty(len(handles), dtype=np.int16)
        now = self.clock.now_ms()
        active = self.active
        for i, (h, gen) in enumerate(zip(handles.tolist(), generation_ids.tolist())):
            out[i] = self._heartbeat_handle(h, gen, now, active)
        return out

    def heartbeat_handle(self, handle: int, generation_id: int) -> int:
        """heartbeat_batch for one member, without the arrays: the same checks and effect,
        the error code as an int."""
        check_handle_args(handle, generation_id)
        return int(self._heartbeat_handle(handle, generation_id, self.clock.now_ms(), self.active))

    def _heartbeat_handle(self, h: int, generation_id: int, now: int, active: bool) -> int:
        slot = h & 0xFFFFFFFF
        if h < 0 or slot >= len(self._slots) or self._slot_gens[slot] != (h >> 32):
            return E_UNKNOWN
        s = self._slots[slot]
        if s is None:
            return E_UNKNOWN
        if not active:
            return E_NOT_AVAILABLE
        rec = s.rec
        shard_state = self._shards[rec.shard]
        if shard_state != SHARD_ACTIVE:
            return E_NONE if shard_state == SHARD_LOADING else E_NOT_COORDINATOR
        with rec:
            if self._slot_gens[slot] != (h >> 32) or self._slots[slot] is not s:
                return E_UNKNOWN
            state = rec.state
            if state == DEAD:
                return E_NOT_AVAILABLE
            if not s.joined:
                return E_UNKNOWN                     # still pending
            if generation_id != rec.generation:
                return E_ILLEGAL_GENERATION
            if state == EMPTY:
                return E_UNKNOWN
            self._refresh(slot, s, now + s.session_timeout_ms)
            return E_REBALANCING if state == PR else E_NONE

    def commit_handle(self, handle: int, generation_id: int, instance_id=None) -> int:
        """The member table's part of an offset commit by a member's handle (a trace
        replay's commits): where GroupLogic.commit_offsets would accept the commit (shard
        active, the member joined, its generation the group's, the group Stable or
        PreparingRebalance, a static member's instance id its own), touch the member's
        session as that does and return its slot, for GroupLogic.commit_accepted to store
        the offsets. Otherwise -1, having changed nothing: commit_offsets decides."""
        check_handle_args(handle, generation_id)
        if instance_id is not None and type(instance_id) is not str:
            raise TypeError(f"instance_id must be a str or None, got {type(instance_id).__name__}")
        slot = handle & 0xFFFFFFFF
        if handle < 0 or slot >= len(self._slots) or not self.active:
            return -1
        s = self._slots[slot]
        if s is None or self._slot_gens[slot] != (handle >> 32):
            return -1
        rec = s.rec
        if self._shards[rec.shard] != SHARD_ACTIVE:
            return -1
        with rec:
            # Re-checked under the group's lock, as the heartbeat does.
            if self._slots[slot] is not s or self._slot_gens[slot] != (handle >> 32):
                return -1
            if not s.joined or generation_id != rec.generation or rec.state not in (STABLE, PR):
                return -1
            if instance_id is not None:
                # commit_offsets' static check: the instance id must map to this member
                current = rec.group.static.get(instance_id)
                if current is None or rec.slots.get(current) != slot:
                    return -1
            self._refresh(slot, s, self.clock.now_ms() + s.session_timeout_ms)
            return slot

    def stats(self) -> dict:
        return {"slots": len(self._slots), "free": len(self._free), "groups": len(self.groups)}


def _check_ids(group_id, member_id) -> None:
    if type(group_id) is not str:
        raise TypeError(f"group_id must be a str, got {type(group_id).__name__}")
    if type(member_id) is not str:
        raise TypeError(f"member_id must be a str, got {type(member_id).__name__}")


def check_batch(handles, generation_ids, second: str = "generation_ids"):
    """Validate heartbeat_batch arguments before any effect (both twins); `second`
    names the int32 array (consumer_heartbeat_batch's member_epochs)."""
    for name, arr, dtype in (("handles", handles, np.int64),
                             (second, generation_ids, np.int32)):
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"{name} must be a numpy.ndarray of {np.dtype(dtype).name}, "
                            f"got {type(arr).__name__}")
        if arr.dtype != dtype:
            raise TypeError(f"{name} must have dtype {np.dtype(dtype).name}, got {arr.dtype}")
        if arr.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional, got {arr.ndim} dimensions")
        if not arr.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")
    if len(handles) != len(generation_ids):
        raise ValueError(f"handles and {second} differ in length "
                         f"({len(handles)} != {len(generation_ids)})")
    return handles, generation_ids


def check_handle_args(handle, generation_id, second: str = "generation_id") -> None:
    """Validate heartbeat_handle arguments (both twins): an int64 and an int32, no bool;
    `second` names the int32 (consumer_heartbeat_handle's member_epoch)."""
    if type(handle) is not int:
        raise TypeError(f"handle must be an int, got {type(handle).__name__}")
    if type(generation_id) is not int:
        raise TypeError(f"{second} must be an int, got {type(generation_id).__name__}")
    if not -0x8000000000000000 <= handle <= 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"handle must fit in int64, got {handle}")
    if not -0x80000000 <= generation_id <= 0x7FFFFFFF:
        raise ValueError(f"{second} must fit in int32, got {generation_id}")

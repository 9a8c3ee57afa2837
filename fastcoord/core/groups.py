"""The classic group protocol's state machine (spec/group-protocol.md).

This module is the slow path of both twins: join, sync, leave, commit, describe,
expiry decisions. The pure twin runs it as it is; the native twin runs this same
source compiled by Cython, with Python's semantics (`fastcoord.core.groups`,
built by setup.py), so the two cannot disagree here. The compiled module's Member,
Group and GroupLogic are extension types (declared in `groups.pxd` beside it): their
attributes are the ones `__init__` sets, and a closure cannot live in a method the
.pxd makes cpdef (hence `_assignment_stored`). It runs over a twin's *member table* (heartbeat
deadlines, handles, per-group locks: `_native/members.pyx` or
`_pure/members.py`), that twin's timing wheel and that twin's purgatory. The hot
path, a heartbeat, never reaches this module: the member table answers it by itself
(a static member's instance id is checked there against `Group.static`, read under
the group's lock).

Locking: every group has one reentrant lock (its `GroupRecord`). Public entry
points take it once; user callbacks and store writes are never run under it:
they are queued on a per-thread outbox and run after the lock is released, in
the order they were produced (so both twins deliver callbacks in the same order).
The requests a replay makes most (join, sync, group_summary, member_ids) take it by
acquire() and release() in try/finally, the rest by `with`, which does the same: in
the native twin those two are C calls, where `with` looks up and binds __enter__ and
__exit__ on every request.
"""
from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
import types
import uuid
from typing import Callable, Deque, Dict, List, Optional, Tuple

from fastcoord.core.config import CoordinatorConfig, shard_for
from fastcoord.core.consumer import ConsumerLogic
from fastcoord.core.errors import CoordinatorError, Errors, GroupState
from fastcoord.core.states import (CR, DEAD, EMPTY, PR, SHARD_ACTIVE, SHARD_LOADING,
                                   SHARD_NOT_OWNED, STABLE)
from fastcoord.core.results import (
    GroupDescription, GroupListing, GroupSummary, JoinGroupMember, JoinGroupResult,
    LeaveGroupResult, MemberDescription, OffsetAndMetadata, SyncGroupResult,
)

log = logging.getLogger("fastcoord.coordinator")

# The Errors members, read from a plain namespace: on Python 3.11 every `Errors.X` takes
# the slow attribute path (EnumType defines __getattr__), and a request
# reads several (an offset commit about ten). The values are the very same members.
E = types.SimpleNamespace(**Errors.__members__)
# The answer of most checks, held alone: compiled (groups.pxd) a C global, one load where
# E.NONE is a namespace look-up, and nearly every request makes such a check
_NONE = Errors.NONE


_OM_DEFAULTS = OffsetAndMetadata._field_defaults    # what an offset given alone stands for
# ... its two defaults, read once (compiled, groups.pxd: C globals, one load each): every
# commit of an offset alone makes one OffsetAndMetadata, which looked both up in the dict
_OM_METADATA, _OM_LEADER_EPOCH = _OM_DEFAULTS["metadata"], _OM_DEFAULTS["leader_epoch"]
_JG_DEFAULTS = JoinGroupResult._field_defaults      # what a join's error answer leaves out
# ... those defaults, read once (C globals too, groups.pxd): _join_error's every answer
_JG_GENERATION, _JG_LEADER = _JG_DEFAULTS["generation_id"], _JG_DEFAULTS["leader_id"]
_JG_PROTOCOL_TYPE, _JG_PROTOCOL_NAME = _JG_DEFAULTS["protocol_type"], _JG_DEFAULTS["protocol_name"]
_JG_MEMBERS, _JG_SKIP = _JG_DEFAULTS["members"], _JG_DEFAULTS["skip_assignment"]
CONSUMER_PROTOCOL = "consumer"     # the protocol type whose subscriptions name topics
STATE_NAMES = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE,
               GroupState.COMPLETING_REBALANCE, GroupState.STABLE, GroupState.DEAD)
# Their values (Kafka's names, plain str), read without the enum's `.value` property
# (group_summary answers with one after every join, sync and leave of a replay).
STATE_VALUES = tuple(state.value for state in STATE_NAMES)
# What Java's String.trim strips (every char up to U+0020): Kafka trims each ListGroups
# state filter so.
_JAVA_TRIM = "".join(map(chr, range(0x21)))
_VALID_PREVIOUS = {
    PR: (STABLE, CR, EMPTY),
    CR: (PR,),
    STABLE: (CR,),
    EMPTY: (PR,),
    DEAD: (EMPTY, PR, CR, STABLE, DEAD),
}
# Membership epochs (Group.members_epoch) and versions (Group.version): one counter for
# every group of every coordinator of a twin in the process (each twin's module has its
# own), so neither repeats within a coordinator (not even for a group deleted and made
# again).
_EPOCHS = itertools.count()


class Member:
    """A member's slow-path state; its session deadline lives in the member table slot."""

    __slots__ = ("member_id", "instance_id", "client_id", "client_host",
                 "rebalance_timeout_ms", "session_timeout_ms", "protocol_type",
                 "protocols", "assignment", "join_callback", "sync_callback",
                 "is_new", "slot")

    def __init__(self, member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                 session_timeout_ms, protocol_type, protocols, slot):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols          # [(name, metadata bytes)] in preference order
        self.assignment = b""
        self.join_callback = None
        self.sync_callback = None
        self.is_new = False
        self.slot = slot

    @property
    def awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    def has_satisfied_heartbeat(self) -> bool:
        """At its session deadline: may the member live on without a heartbeat?
        A member parked in a join or sync may, unless it is new (its join is bounded)."""
        return (not self.is_new) and (self.awaiting_join or self.awaiting_sync)

    def metadata(self, protocol_name) -> bytes:
        for name, meta in self.protocols:
            if name == protocol_name:
                return meta
        raise CoordinatorError(f"member {self.member_id} does not support protocol {protocol_name}")

    def matches(self, protocols) -> bool:
        return self.protocols == protocols

    def vote(self, candidates) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise CoordinatorError(f"member {self.member_id} supports none of {sorted(candidates)}")


class Group:
    """One consumer group's slow-path state. `rec` is the twin's GroupRecord: the lock,
    and the state/generation mirror the heartbeat fast path reads."""

    def __init__(self, group_id: str, rec, now_ms: int):
        self.group_id = group_id
        self.rec = rec
        self.state = EMPTY
        self.generation = 0
        self.protocol_type: Optional[str] = None
        self.protocol_name: Optional[str] = None
        self.leader_id: Optional[str] = None
        self.members: Dict[str, Member] = {}       # insertion ordered
        self.pending: Dict[str, int] = {}          # pending member id -> table slot
        self.static: Dict[str, str] = {}           # instance id -> member id
        self.pending_sync: set = set()
        self.num_awaiting_join = 0
        self.new_member_added = False
        self.supported: Dict[str, int] = {}        # protocol name -> members supporting it
        self.offsets: Dict[Tuple[str, int], OffsetAndMetadata] = {}
        self.pending_offsets: Dict[Tuple[str, int], int] = {}
        # When the group last became Empty, on the commit clock (GroupLogic.commit_time_ms:
        # wall time, what a restart keeps): an Empty group's offsets expire retention
        # after it (Kafka's currentStateTimestamp, read only in Empty)
        self.empty_since_ms = now_ms
        # members_epoch: new whenever the member id set changes; version: new whenever
        # that or the state does (what group_version answers)
        self.version = self.members_epoch = next(_EPOCHS)
        # A consumer group (KIP-848) holds its protocol's state here (core/consumer.py);
        # None for a classic group. While set, the classic fields stay those of an
        # Empty group: no classic member, state EMPTY.
        self.consumer = None
        # A classic group made by a downgrade whose record the store has not confirmed:
        # what the downgrade's write answers and reverts (core/consumer_mixed.py); None
        # once it is confirmed, or once a later classic record of the group is given.
        self.downgrade = None
        # The topics a classic consumer group's generation subscribes to, as Kafka's
        # GroupMetadata.subscribedTopics (a _GenerationTopics): taken when a generation
        # starts (and when the group is loaded or converted), not as members change
        # their metadata within it; None when unknown (no generation yet, another
        # protocol type): every topic then counts as subscribed. OffsetDelete and the
        # retention check read it.
        self.generation_topics = None

    # -- state -------------------------------------------------------------
    def transition_to(self, target: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise CoordinatorError(
                f"group {self.group_id}: illegal transition {STATE_NAMES[self.state]} -> "
                f"{STATE_NAMES[target]}")
        self.state = target
        self.rec.state = target
        self.version = next(_EPOCHS)

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[PR]

    # -- membership --------------------------------------------------------
    def add(self, member: Member, callback) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.version = self.members_epoch = next(_EPOCHS)
        for name, _ in member.protocols:
            self.supported[name] = self.supported.get(name, 0) + 1
        member.join_callback = callback
        if callback is not None:
            self.num_awaiting_join += 1
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> Optional[Member]:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.version = self.members_epoch = next(_EPOCHS)
            for name, _ in member.protocols:
                self.supported[name] -= 1
            if member.awaiting_join:
                self.num_awaiting_join -= 1
            if member.instance_id is not None and self.static.get(member.instance_id) == member_id:
                del self.static[member.instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_sync.discard(member_id)
        return member

    def rename(self, member: Member, new_id: str) -> None:
        """The member's id becomes new_id (a static member's replacement or its undoing)."""
        old_id = member.member_id
        del self.members[old_id]
        member.member_id = new_id
        self.members[new_id] = member
        self.version = self.members_epoch = next(_EPOCHS)
        if self.leader_id == old_id:
            self.leader_id = new_id
        if member.instance_id is not None:
            self.static[member.instance_id] = new_id

    def update_member(self, member: Member, protocols, rebalance_timeout_ms, session_timeout_ms,
                      callback) -> None:
        for name, _ in member.protocols:
            self.supported[name] -= 1
        member.protocols = protocols
        for name, _ in protocols:
            self.supported[name] = self.supported.get(name, 0) + 1
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        awaiting_join = member.join_callback is not None
        if callback is not None and not awaiting_join:
            self.num_awaiting_join += 1
        elif callback is None and awaiting_join:
            self.num_awaiting_join -= 1
        member.join_callback = callback

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout among the members (0 with none)."""
        longest = 0
        for m in self.members.values():
            if m.rebalance_timeout_ms > longest:
                longest = m.rebalance_timeout_ms
        return longest

    def supports_protocols(self, protocol_type: str, protocols) -> bool:
        """May a member of protocol_type with these (name, metadata) pairs join? One of
        the names must be supported by every member (any, in an Empty group)."""
        if self.state == EMPTY:
            return bool(protocol_type) and bool(protocols)
        if self.protocol_type != protocol_type:
            return False
        n = len(self.members)
        supported = self.supported
        for name, _ in protocols:      # (a loop: no generator to make, as any() would)
            if supported.get(name, 0) == n:
                return True
        return False

    def candidate_protocols(self) -> set:
        n = len(self.members)
        return {name for name, count in self.supported.items() if count == n}

    def select_protocol(self) -> str:
        if not self.members:
            raise CoordinatorError(f"group {self.group_id}: cannot select a protocol without members")
        candidates = self.candidate_protocols()
        votes: Dict[str, int] = {}
        for member in self.members.values():
            name = member.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        # Most votes wins; a tie goes to the candidate voted for first (deterministic).
        return max(votes, key=votes.__getitem__)

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def current_member_metadata(self, table) -> List[JoinGroupMember]:
        protocol_name = self.protocol_name
        return [table.make_result(JoinGroupMember, (m.member_id, m.instance_id, m.metadata(protocol_name)))
                for m in self.members.values()]


class _Outbox:
    """One thread's outbox: what to run once the locks are released, in order."""

    __slots__ = ("items", "flushing")

    def __init__(self):
        self.items: Deque[Tuple[Callable, tuple]] = collections.deque()
        self.flushing = False


class _Outboxes(threading.local):
    # Each thread's _Outbox, read once per call: a thread-local attribute read costs
    # several times a plain one, and a request reads its outbox's fields a few times.
    def __init__(self):
        self.box = _Outbox()


class GroupLogic:
    """Kafka's classic group coordinator over a twin's member table, timer and purgatory."""

    def __init__(self, config: CoordinatorConfig, clock, store, member_id_factory,
                 members_mod, wheel_mod, purgatory_mod, assign):
        self.config = config
        # The limits the join path checks, read once (the config is frozen): compiled,
        # each sits in a slot, where the dataclass's attribute is a look-up through its
        # instance dict at every join
        self._min_session_ms = config.group_min_session_timeout_ms
        self._max_session_ms = config.group_max_session_timeout_ms
        self._max_size = config.group_max_size
        self._new_member_timeout_ms = config.new_member_join_timeout_ms
        self.clock = clock
        self._manual_clock = bool(getattr(clock, "is_manual", False))
        self.store = store
        self.member_id_factory = member_id_factory or _default_member_id
        # (the consumer protocol makes Kafka's own kind of member id unless one was given)
        self.consumers = ConsumerLogic(self, member_id_factory, assign)
        self.timer = wheel_mod.Timer(clock, tick_ms=config.tick_ms, wheel_size=config.wheel_size)
        self.purgatory = purgatory_mod.Purgatory("Rebalance", self.timer,
                                                 purge_interval=config.purge_interval)
        self._op_base = purgatory_mod.DelayedOperation
        self.table = members_mod.MemberTable(clock, self.timer, config.num_shards)
        self.table.on_deadline = self._on_session_deadline
        # The table answers no classic member of a consumer group (a mixed group): their
        # heartbeats come back here (core/consumer_mixed.py)
        self.table.mixed_heartbeat = self.consumers.mixed.heartbeat
        self.owners: Dict[int, Tuple[Group, str]] = {}   # table slot -> (group, member id)
        self._outboxes = _Outboxes()
        # The creating thread's outbox, held directly: most calls come from that thread
        # (a replay's, the server's event loop) and skip the thread-local look-up, which
        # every call would otherwise make. Another thread, or one that reuses a dead home
        # thread's ident (the box is empty between calls), is no different for it.
        self._home_thread = self.table.current_thread()
        self._home_box = self._outboxes.box
        self._join_ops, self._sync_ops = _delayed_op_classes(self._op_base)
        # the retention pass in slices under way (cleanup_group_metadata_step), or None;
        # the lock hands each caller its own slice
        self._retention_pass = None
        self._retention_lock = threading.Lock()
        owned = config.owned_shards
        for shard in range(config.num_shards):
            active = owned is None or shard in owned
            self.table.set_shard_state(shard, SHARD_ACTIVE if active else SHARD_NOT_OWNED)

    def commit_time_ms(self) -> int:
        """The commit timestamp stored with offsets: wall-clock time (what survives a
        restart and what offsets retention counts from), except on a ManualClock, whose
        time is the only one a deterministic replay may see."""
        if self._manual_clock:
            return self.clock.now_ms()
        return time.time_ns() // 1_000_000

    # ======================================================================
    # outbox: user callbacks and store writes run outside every group lock
    # ======================================================================
    def _outbox(self) -> _Outbox:
        """The calling thread's outbox."""
        return self._home_box if self.table.current_thread() == self._home_thread else self._outboxes.box

    def _emit(self, fn, *args) -> None:
        self._outbox().items.append((fn, args))

    def _emit_one(self, fn, arg) -> None:
        # _emit for a callback of one argument, every answer's (a C method in the native
        # twin, where _emit, taking *args, is a Python one)
        self._outbox().items.append((fn, (arg,)))

    def flush(self) -> None:
        box = self._outbox()
        items = box.items
        if box.flushing or not items:
            return
        box.flushing = True
        try:
            while items:
                fn, args = items.popleft()
                try:
                    fn(*args)
                except Exception:
                    log.exception("a coordinator callback raised; the group state is unaffected")
        finally:
            box.flushing = False

    def _invoke_join(self, member: Member, group: Group, result: JoinGroupResult) -> bool:
        callback = member.join_callback
        if callback is None:
            return False
        member.join_callback = None
        group.num_awaiting_join -= 1
        self._emit_one(callback, result)
        return True

    def _invoke_sync(self, member: Member, result: SyncGroupResult) -> bool:
        callback = member.sync_callback
        if callback is None:
            return False
        member.sync_callback = None
        self._emit_one(callback, result)
        return True

    # ======================================================================
    # validation shared by the requests
    # ======================================================================
    def group_status(self, group_id: str, allow_empty: bool,
                     shard: Optional[int] = None) -> Errors:
        """INVALID_GROUP_ID / COORDINATOR_NOT_AVAILABLE / LOAD_IN_PROGRESS / NOT_COORDINATOR / NONE.
        `shard`: the group's shard when the caller knows it (else its id is hashed)."""
        if group_id is None or (not group_id and not allow_empty):
            return E.INVALID_GROUP_ID
        table = self.table
        if not table.active:
            return E.COORDINATOR_NOT_AVAILABLE
        state = table.shard_state(shard_for(group_id, self.config.num_shards)
                                  if shard is None else shard)
        if state == SHARD_LOADING:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if state == SHARD_NOT_OWNED:
            return E.NOT_COORDINATOR
        return _NONE

    def _get_group(self, group_id: str) -> Optional[Group]:
        rec = self.table.groups.get(group_id)
        return None if rec is None else rec.group

    def _find_group(self, group_id: str, allow_empty: bool) -> Tuple[Errors, Optional[Group]]:
        """(group_status(group_id, allow_empty), _get_group(group_id)) with one look-up of
        the group: an existing group's record knows its shard, so its id is not hashed."""
        rec = self.table.groups.get(group_id)
        if rec is None:
            return self.group_status(group_id, allow_empty), None
        return self.group_status(group_id, allow_empty, rec.shard), rec.group

    def _create_group(self, group_id: str) -> Group:
        rec = self.table.groups.get(group_id)
        if rec is not None:
            return rec.group
        rec = self.table.new_group(group_id, shard_for(group_id, self.config.num_shards))
        group = Group(group_id, rec, self.clock.now_ms())
        group.empty_since_ms = self.commit_time_ms()
        rec.group = group
        return group

    def next_version(self) -> int:
        """A new Group.version (or members_epoch): never repeats within the process."""
        return next(_EPOCHS)

    def make_consumer_group(self, group: Group, state=None) -> None:
        """An empty classic group becomes a consumer group, of `state` (a
        ConsumerGroupState; default a new one, ConsumerLogic.new_state); its offsets
        stay (Kafka keeps them apart from the group). Caller holds the group's lock."""
        group.consumer = self.consumers.new_state() if state is None else state
        group.protocol_type = CONSUMER_PROTOCOL
        group.protocol_name = None
        group.generation_topics = None
        group.version = group.members_epoch = next(_EPOCHS)

    def _make_classic_group(self, group: Group) -> None:
        """An empty consumer group becomes a classic one (a JoinGroup to it, as Kafka's
        maybeDeleteEmptyConsumerGroup); its offsets stay. Caller holds the group's lock."""
        group.consumer = None
        group.protocol_type = None
        group.generation_topics = None
        group.version = group.members_epoch = next(_EPOCHS)

    # ======================================================================
    # JoinGroup
    # ======================================================================
    def join_group(self, group_id, member_id, protocol_type, protocols, session_timeout_ms,
                   rebalance_timeout_ms, instance_id, require_known_member_id, client_id,
                   client_host, callback) -> None:
        error, group = self._find_group(group_id, allow_empty=False)
        if error != _NONE:
            self._emit_one(callback, _join_error(self.table, error, member_id))
            return
        if not self._min_session_ms <= session_timeout_ms <= self._max_session_ms:
            self._emit_one(callback, _join_error(self.table, E.INVALID_SESSION_TIMEOUT, member_id))
            return
        is_unknown = member_id == ""
        if group is None:
            if not is_unknown:
                self._emit_one(callback, _join_error(self.table, E.UNKNOWN_MEMBER_ID, member_id))
                return
            group = self._create_group(group_id)
        rec = group.rec
        rec.acquire()                   # (not `with`: see "Locking" above)
        try:
            if group.consumer is not None:
                if group.consumer.members:
                    # A classic member joining a consumer group in use: it becomes (or
                    # is) a member of the mixed group (core/consumer_mixed.py)
                    self.consumers.mixed.join(group, member_id, protocol_type, protocols,
                                              session_timeout_ms, rebalance_timeout_ms,
                                              instance_id, require_known_member_id,
                                              client_id, client_host, callback)
                    return
                self._make_classic_group(group)
            if not self._accept_joining_member(group, member_id):
                # Kafka removes the member; a waiting join of its own gets answered (as a removal).
                member = group.members.get(member_id)
                if member is not None:
                    self._forget_member(group, member)
                elif member_id in group.pending:
                    self._release_slot(group.pending.pop(member_id))
                self._emit_one(callback, _join_error(self.table, E.GROUP_MAX_SIZE_REACHED, ""))
            elif is_unknown:
                self._join_new_member(group, instance_id, require_known_member_id, client_id,
                                      client_host, rebalance_timeout_ms, session_timeout_ms,
                                      protocol_type, protocols, callback)
            else:
                self._join_current_member(group, member_id, instance_id, client_id, client_host,
                                          rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                          protocols, callback)
            # The join key's operations complete on a try only when every member has
            # joined (DelayedJoin; InitialDelayedJoin waits for its timer): ask the
            # purgatory then, not on each of a round's joins. Kafka asks every time; the
            # answers are the same, only a completed operation stays listed until then.
            if group.state == PR and group.has_all_members_joined():
                self.purgatory.check_and_complete(("join", group_id))
        finally:
            rec.release()

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        max_size = self._max_size
        if group.state in (EMPTY, DEAD):
            return True
        if group.state == PR:
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join) or group.num_awaiting_join < max_size
        return member_id in group.members or len(group.members) < max_size

    def _join_new_member(self, group, instance_id, require_known, client_id, client_host,
                         rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                         callback) -> None:
        if group.state == DEAD:
            self._emit_one(callback, _join_error(self.table, E.COORDINATOR_NOT_AVAILABLE, ""))
            return
        if not group.supports_protocols(protocol_type, protocols):
            self._emit_one(callback, _join_error(self.table, E.INCONSISTENT_GROUP_PROTOCOL, ""))
            return
        new_id = self.member_id_factory(instance_id if instance_id is not None else client_id)
        if instance_id is not None:
            old_id = group.static.get(instance_id)
            if old_id is not None:
                self._replace_static_member(group, old_id, new_id, instance_id, protocols,
                                            rebalance_timeout_ms, session_timeout_ms, callback)
            else:
                self._add_member_and_rebalance(group, new_id, instance_id, client_id, client_host,
                                               rebalance_timeout_ms, session_timeout_ms,
                                               protocol_type, protocols, callback)
        elif require_known:
            slot = self.table.alloc(group.rec, new_id, session_timeout_ms,
                                    self.clock.now_ms() + session_timeout_ms, True)
            group.pending[new_id] = slot
            self.owners[slot] = (group, new_id)
            self._emit_one(callback, _join_error(self.table, E.MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_and_rebalance(group, new_id, None, client_id, client_host,
                                           rebalance_timeout_ms, session_timeout_ms,
                                           protocol_type, protocols, callback)

    def _join_current_member(self, group, member_id, instance_id, client_id, client_host,
                             rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                             callback) -> None:
        if group.state == DEAD:
            self._emit_one(callback, _join_error(self.table, E.COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not group.supports_protocols(protocol_type, protocols):
            self._emit_one(callback, _join_error(self.table, E.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if member_id in group.pending:
            if instance_id is not None:
                # Kafka raises here (a pending member is never static): answer it as unknown.
                self._emit_one(callback, _join_error(self.table, E.UNKNOWN_MEMBER_ID, member_id))
                return
            self._add_member_and_rebalance(group, member_id, None, client_id, client_host,
                                           rebalance_timeout_ms, session_timeout_ms,
                                           protocol_type, protocols, callback)
            return
        error = _validate_member(group, member_id, instance_id)
        if error != _NONE:
            self._emit_one(callback, _join_error(self.table, error, member_id))
            return
        member = group.members[member_id]
        state = group.state
        if state == PR:
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                              session_timeout_ms, callback)
        elif state == CR:
            if member.matches(protocols):
                self._emit_one(callback, self._current_generation_result(
                    group, member_id, with_members=group.leader_id == member_id))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, callback)
        elif state == STABLE:
            if group.leader_id == member_id or not member.matches(protocols):
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, callback)
            else:
                self._emit_one(callback, self._current_generation_result(group, member_id, False))
        else:  # Empty: a member cannot be known here
            self._emit_one(callback, _join_error(self.table, E.UNKNOWN_MEMBER_ID, member_id))

    def _record(self, group: Group, assignment: dict) -> Optional[dict]:
        """What store_group is given for the group: its record (_group_record), or None
        for a store that keeps no group records, to which a record and a tombstone are
        the same (a replay's: each leader's sync would build a record of every member
        that nothing reads). The store's flag is read here, where it is
        used: a store without one keeps records. (A record given after a downgrade's
        stands for the group whatever becomes of that one: the downgrade is no longer
        reverted.)"""
        group.downgrade = None
        if getattr(self.store, "keeps_group_records", True):
            return _group_record(group, assignment)
        return None

    def _current_generation_result(self, group, member_id, with_members) -> JoinGroupResult:
        return JoinGroupResult(
            _NONE, group.generation, group.protocol_type, group.protocol_name,
            group.leader_id or "", member_id,
            group.current_member_metadata(self.table) if with_members else [], False)

    def _add_member_and_rebalance(self, group, member_id, instance_id, client_id, client_host,
                                  rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                  protocols, callback) -> None:
        now = self.clock.now_ms()
        slot = group.pending.pop(member_id, None)
        deadline = now + self._new_member_timeout_ms
        if slot is None:
            slot = self.table.alloc(group.rec, member_id, session_timeout_ms, deadline, False)
        else:
            self.table.promote(slot, member_id, session_timeout_ms, deadline)
        member = Member(member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                        session_timeout_ms, protocol_type, protocols, slot)
        member.is_new = True
        self.owners[slot] = (group, member_id)
        if group.state == PR and group.generation == 0:
            group.new_member_added = True
        group.add(member, callback)
        self._maybe_prepare_rebalance(group)

    def _update_member_and_rebalance(self, group, member, protocols, rebalance_timeout_ms,
                                     session_timeout_ms, callback) -> None:
        # A join of the member still parked is superseded by this one (a client that
        # retried, or pipelined): it gets an answer, never dropped (Kafka drops it). (The
        # answer is made only then: a member's join finds none parked as a rule.)
        if member.join_callback is not None:
            self._invoke_join(member, group,
                              _join_error(self.table, E.REBALANCE_IN_PROGRESS, member.member_id))
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        self.table.set_session_timeout(member.slot, session_timeout_ms)
        self._maybe_prepare_rebalance(group)

    def _rename_member(self, group: Group, member: Member, new_id: str) -> None:
        old_id = member.member_id
        group.rename(member, new_id)
        self.table.rename(member.slot, old_id, new_id)
        self.owners[member.slot] = (group, new_id)

    def _replace_static_member(self, group, old_id, new_id, instance_id, protocols,
                               rebalance_timeout_ms, session_timeout_ms, callback) -> None:
        if group.state in (EMPTY, DEAD):
            raise CoordinatorError(
                f"group {group.group_id} in state {STATE_NAMES[group.state]} cannot have a "
                f"known static member {instance_id}")
        current_leader = group.leader_id
        member = group.members[old_id]
        # The old incarnation is fenced at once: its parked join and sync learn it.
        self._invoke_join(member, group, _join_error(self.table, E.FENCED_INSTANCE_ID, old_id))
        self._invoke_sync(member, SyncGroupResult(E.FENCED_INSTANCE_ID))
        self._rename_member(group, member, new_id)
        self.table.touch(member.slot)      # with the old session timeout, as Kafka does
        old_protocols = member.protocols
        old_rebalance, old_session = member.rebalance_timeout_ms, member.session_timeout_ms
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        self.table.set_session_timeout(member.slot, session_timeout_ms)
        if group.state == STABLE:
            if group.protocol_name == group.select_protocol():
                assignment = {m.member_id: m.assignment for m in group.members.values()}
                generation = group.generation

                def stored(error: Errors) -> None:
                    with group.rec:
                        if error != _NONE:
                            log.warning("group %s: persisting static member %s failed: %s",
                                        group.group_id, instance_id, error.name)
                        if member.join_callback is not callback \
                                or group.members.get(new_id) is not member:
                            # The join was answered meanwhile (its member left, expired,
                            # was fenced or unloaded): the write's outcome answers nothing
                            # and undoes nothing.
                            pass
                        elif error != _NONE:
                            group.update_member(member, old_protocols, old_rebalance, old_session,
                                                None)
                            self.table.set_session_timeout(member.slot, old_session)
                            self._rename_member(group, member, old_id)
                            self.table.touch(member.slot)
                            self._emit_one(callback, JoinGroupResult(
                                error, generation, group.protocol_type, group.protocol_name,
                                current_leader or "", "", [], False))
                        else:
                            self._invoke_join(member, group, JoinGroupResult(
                                _NONE, generation, group.protocol_type, group.protocol_name,
                                current_leader or "", new_id, [], False))
                    self.flush()

                self._emit(self.store.store_group, group.group_id,
                           self._record(group, assignment), stored)
            else:
                self._maybe_prepare_rebalance(group)
        elif group.state == CR:
            self._prepare_rebalance(group)
        # PR: the member simply waits in the join with its new id.

    def adopt_classic_members(self, group: Group, members, generation: int, assignment_of,
                              rebalance: bool, stored=None) -> None:
        """The classic side of a consumer group's downgrade (Kafka's convertToClassicGroup
        and ClassicGroup.fromConsumerGroup; core/consumer_mixed.py): `members`
        [(member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
        session_timeout_ms, protocols)], which share a protocol, become the group's
        members, Stable at `generation`, the first the leader, each assigned
        `assignment_of(member_id, its subscription for the protocol chosen)`; the
        group's record is written (`stored(error)` is its outcome), and a rebalance
        starts when `rebalance`. Caller holds the group's lock and has dropped the
        consumer state."""
        group.consumer = None
        now = self.clock.now_ms()
        for member_id, instance_id, client_id, client_host, rebalance_ms, session_ms, \
                protocols in members:
            slot = self.table.alloc(group.rec, member_id, session_ms, now + session_ms, False)
            member = Member(member_id, instance_id, client_id, client_host, rebalance_ms,
                            session_ms, CONSUMER_PROTOCOL, protocols, slot)
            self.owners[slot] = (group, member_id)
            group.add(member, None)
        group.protocol_type = CONSUMER_PROTOCOL
        group.generation = generation
        group.rec.generation = generation
        group.protocol_name = group.select_protocol()
        group.generation_topics = _generation_topics(group)
        assignment = {}
        for member in group.members.values():
            member.assignment = assignment_of(member.member_id,
                                              member.metadata(group.protocol_name))
            assignment[member.member_id] = member.assignment
        group.state = STABLE           # (no transition: the classic side starts here)
        group.rec.state = STABLE
        group.version = next(_EPOCHS)
        self._emit(self.store.store_group, group.group_id, self._record(group, assignment),
                   stored or _log_store_error(group.group_id))
        if rebalance:
            self._prepare_rebalance(group)

    # ======================================================================
    # rebalance: DelayedJoin / InitialDelayedJoin / DelayedSync
    # ======================================================================
    def _maybe_prepare_rebalance(self, group: Group) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state == CR:
            self._reset_and_propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        JoinOp, InitialJoinOp = self._join_ops
        if group.state == EMPTY:
            delay = self.config.group_initial_rebalance_delay_ms
            op = InitialJoinOp(self, group, delay, delay,
                               max(group.rebalance_timeout_ms() - delay, 0))
        else:
            op = JoinOp(self, group, group.rebalance_timeout_ms())
        group.transition_to(PR)
        log.debug("group %s preparing to rebalance (generation %d)", group.group_id, group.generation)
        self.purgatory.try_complete_else_watch(op, [("join", group.group_id)])

    # try_complete_join and try_complete_sync are the operations' try_complete, which the
    # purgatory calls with op.lock held: that is group.rec (every join and sync tries one).
    def try_complete_join(self, group: Group, op) -> bool:
        return op.force_complete() if group.has_all_members_joined() else False

    def on_complete_join(self, group: Group) -> None:
        with group.rec:
            if group.consumer is not None:
                return      # upgraded to a consumer group meanwhile: the round is over
            for member in [m for m in group.members.values()
                           if not m.awaiting_join and m.instance_id is None]:
                self._forget_member(group, member)
            if group.state == DEAD:
                return
            if not group.maybe_elect_new_joined_leader() and group.members:
                # Nobody re-joined but static members remain: wait another round.
                JoinOp, _ = self._join_ops
                self.purgatory.try_complete_else_watch(
                    JoinOp(self, group, group.rebalance_timeout_ms()), [("join", group.group_id)])
                return
            self._init_next_generation(group)
            if group.state == EMPTY:
                self._emit(self.store.store_group, group.group_id, self._record(group, {}),
                           _log_store_error(group.group_id))
                return
            leader = group.leader_id
            generation, protocol_type, protocol_name = \
                group.generation, group.protocol_type, group.protocol_name
            for member in list(group.members.values()):
                member_id = member.member_id
                result = self.table.make_result(JoinGroupResult, (
                    _NONE, generation, protocol_type, protocol_name, leader, member_id,
                    group.current_member_metadata(self.table) if member_id == leader else [], False))
                self._invoke_join(member, group, result)
                self.table.touch(member.slot)
                member.is_new = False
                group.pending_sync.add(member.member_id)
            _, SyncOp = self._sync_ops
            self.purgatory.try_complete_else_watch(
                SyncOp(self, group, group.generation, group.rebalance_timeout_ms()),
                [("sync", group.group_id)])

    def _init_next_generation(self, group: Group) -> None:
        group.generation += 1
        group.rec.generation = group.generation
        group.protocol_name = group.select_protocol() if group.members else None
        group.generation_topics = _generation_topics(group)
        if group.members:
            group.transition_to(CR)
        else:
            group.transition_to(EMPTY)
            group.empty_since_ms = self.commit_time_ms()
        group.pending_sync.clear()

    def initial_join_complete(self, op) -> None:
        group = op.group
        with group.rec:
            if group.new_member_added and op.remaining_ms != 0:
                group.new_member_added = False
                delay = min(op.configured_ms, op.remaining_ms)
                remaining = max(op.remaining_ms - op.this_delay_ms, 0)
                _, InitialJoinOp = self._join_ops
                self.purgatory.try_complete_else_watch(
                    InitialJoinOp(self, group, op.configured_ms, delay, remaining),
                    [("join", group.group_id)])
            else:
                self.on_complete_join(group)

    def _remove_sync_expiration(self, group: Group) -> None:
        group.pending_sync.clear()
        self.purgatory.check_and_complete(("sync", group.group_id))

    def try_complete_sync(self, group: Group, generation: int, op) -> bool:
        if generation != group.generation or group.state in (DEAD, EMPTY, PR):
            return op.force_complete()
        return op.force_complete() if not group.pending_sync else False

    def on_expire_sync(self, group: Group, generation: int) -> None:
        with group.rec:
            if generation != group.generation or group.state not in (CR, STABLE):
                return
            if group.pending_sync:
                for member_id in list(group.pending_sync):
                    member = group.members.get(member_id)
                    if member is not None:
                        self._forget_member(group, member)
                log.debug("group %s removed members that never synced", group.group_id)
                self._prepare_rebalance(group)

    # ======================================================================
    # SyncGroup
    # ======================================================================
    def sync_group(self, group_id, generation_id, member_id, assignments, instance_id,
                   protocol_type, protocol_name, callback) -> None:
        error, group = self._find_group(group_id, allow_empty=False)
        if error == E.COORDINATOR_LOAD_IN_PROGRESS:
            error = E.REBALANCE_IN_PROGRESS
        if error != _NONE:
            self._emit_one(callback, SyncGroupResult(error))
            return
        if group is None:
            self._emit_one(callback, SyncGroupResult(E.UNKNOWN_MEMBER_ID))
            return
        rec = group.rec
        rec.acquire()
        try:
            if group.consumer is not None:
                # a classic member of a mixed group (an empty consumer group has none)
                if group.consumer.members:
                    self.consumers.mixed.sync(group, generation_id, member_id, instance_id,
                                              protocol_type, protocol_name, callback)
                else:
                    self._emit_one(callback, SyncGroupResult(E.UNKNOWN_MEMBER_ID))
                return
            if group.state == DEAD:
                error = E.COORDINATOR_NOT_AVAILABLE
            else:
                error = _validate_member(group, member_id, instance_id)
                if error == _NONE:
                    if generation_id != group.generation:
                        error = E.ILLEGAL_GENERATION
                    elif protocol_type is not None and protocol_type != group.protocol_type:
                        error = E.INCONSISTENT_GROUP_PROTOCOL
                    elif protocol_name is not None and protocol_name != group.protocol_name:
                        error = E.INCONSISTENT_GROUP_PROTOCOL
            if error != _NONE:
                self._emit_one(callback, SyncGroupResult(error))
            elif group.state == EMPTY:
                self._emit_one(callback, SyncGroupResult(E.UNKNOWN_MEMBER_ID))
            elif group.state == PR:
                self._emit_one(callback, SyncGroupResult(E.REBALANCE_IN_PROGRESS))
            elif group.state == CR:
                member = group.members[member_id]
                # (a sync of the member still parked is superseded, as a join is)
                self._invoke_sync(member, SyncGroupResult(E.REBALANCE_IN_PROGRESS))
                member.sync_callback = callback
                self._remove_pending_sync_member(group, member_id)
                if group.leader_id == member_id:
                    # every member's assignment: the leader's for it, else empty (what
                    # it gives any other id is dropped); one pass over what it gives
                    full = dict.fromkeys(group.members, b"")
                    if assignments:
                        for mid, data in assignments.items():
                            if mid in full:
                                full[mid] = data
                    self._emit(self.store.store_group, group_id,
                               self._record(group, full),
                               self._assignment_stored(group, full))
            else:  # Stable
                self._remove_pending_sync_member(group, member_id)
                member = group.members[member_id]
                self._emit_one(callback, self.table.make_result(SyncGroupResult, (
                    _NONE, group.protocol_type, group.protocol_name, member.assignment)))
                self.table.touch(member.slot)
        finally:
            rec.release()

    def _assignment_stored(self, group: Group, full: dict) -> Callable[[Errors], None]:
        """What runs once the leader's assignment `full` is stored (or failed to be):
        unless the group has moved on from this generation's CompletingRebalance, every
        member gets its assignment and the group goes Stable, or, on a store error, the
        members get the error and the group rebalances again."""
        generation = group.generation

        def stored(error: Errors) -> None:
            with group.rec:
                if group.state == CR and group.generation == generation:
                    if error != _NONE:
                        self._reset_and_propagate_assignment_error(group, error)
                        self._maybe_prepare_rebalance(group)
                    else:
                        for mid, m in group.members.items():
                            m.assignment = full[mid]
                        self._propagate_assignment(group, _NONE)
                        group.transition_to(STABLE)
            self.flush()
        return stored

    def _remove_pending_sync_member(self, group: Group, member_id: str) -> None:
        # (Called in CompletingRebalance and Stable, where the one DelayedSync not yet
        # completed is of the current generation (entering PreparingRebalance completes
        # the others), so a try completes it only once nobody is left to sync: the
        # purgatory is asked then, not on each sync of a round (Kafka asks every time).)
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self.purgatory.check_and_complete(("sync", group.group_id))

    def _reset_and_propagate_assignment_error(self, group: Group, error: Errors) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: Errors) -> None:
        ok = error == _NONE
        protocol_type = group.protocol_type if ok else None
        protocol_name = group.protocol_name if ok else None
        for member in group.members.values():
            result = self.table.make_result(SyncGroupResult,
                                (error, protocol_type, protocol_name, member.assignment))
            if self._invoke_sync(member, result):
                self.table.touch(member.slot)

    # ======================================================================
    # session expiry: the member table calls this when a slot's deadline passed
    # ======================================================================
    def _on_session_deadline(self, slot: int) -> None:
        """The slot's deadline passed without moving; the table has already disarmed it
        (a later refresh re-arms it). Decide, as Kafka's heartbeat expiry does."""
        owner = self.owners.get(slot)
        if owner is None:
            return
        group = owner[0]
        with group.rec:
            owner = self.owners.get(slot)
            if owner is None or owner[0] is not group:
                return
            member_id = owner[1]
            if group.state == DEAD:
                pass
            elif group.consumer is not None:
                self.consumers.on_session_deadline(group, member_id)
            elif member_id in group.pending:
                log.debug("pending member %s of %s expired", member_id, group.group_id)
                del group.pending[member_id]
                self._release_slot(slot)
                if group.state == PR:
                    self.purgatory.check_and_complete(("join", group.group_id))
            else:
                member = group.members.get(member_id)
                if member is None:
                    self._release_slot(slot)
                elif not member.has_satisfied_heartbeat():
                    log.debug("member %s of %s failed its session", member_id, group.group_id)
                    self._remove_member_and_update_group(group, member)
        self.flush()     # answers go out while the clock reads this deadline

    # ======================================================================
    # LeaveGroup and member removal
    # ======================================================================
    def leave_group(self, group_id, members) -> LeaveGroupResult:
        error, group = self._find_group(group_id, allow_empty=False)
        if error != _NONE:
            return LeaveGroupResult(error, [])
        if group is None:
            return LeaveGroupResult(_NONE, [E.UNKNOWN_MEMBER_ID] * len(members))
        errors = []
        with group.rec:
            if group.state == DEAD:
                return LeaveGroupResult(E.COORDINATOR_NOT_AVAILABLE, [])
            if group.consumer is not None:
                return self.consumers.mixed.leave(group, members)
            for member_id, instance_id in members:
                if member_id == "":
                    current = group.static.get(instance_id) if instance_id is not None else None
                    if current is None:
                        errors.append(E.UNKNOWN_MEMBER_ID)
                    else:
                        self._remove_member_and_update_group(group, group.members[current])
                        errors.append(_NONE)
                elif member_id in group.pending:
                    self._release_slot(group.pending.pop(member_id))
                    if group.state == PR:
                        self.purgatory.check_and_complete(("join", group_id))
                    errors.append(_NONE)
                else:
                    error = _validate_member(group, member_id, instance_id)
                    if error == _NONE:
                        self._remove_member_and_update_group(group, group.members[member_id])
                    errors.append(error)
        return LeaveGroupResult(_NONE, errors)

    def _release_slot(self, slot: int) -> None:
        owner = self.owners.pop(slot, None)
        self.table.free(slot, None if owner is None else owner[1])

    def _forget_member(self, group: Group, member: Member) -> None:
        """Drop a member without a state change. Every path that removes a member comes
        here, so no request of it is left unanswered (a connection answers in order: one
        request never answered holds every later answer on it): a join or sync it still
        has parked, which the caller did not answer as its path prescribes (fencing,
        unload), is answered UNKNOWN_MEMBER_ID, what the same request would get once
        the member is gone (Kafka answers the join so; it drops the sync, and a client
        answered REBALANCE_IN_PROGRESS would rejoin with the id it no longer has)."""
        self._invoke_join(member, group, _join_error(self.table, E.UNKNOWN_MEMBER_ID, ""))
        self._invoke_sync(member, SyncGroupResult(E.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        self._release_slot(member.slot)

    def _remove_member_and_update_group(self, group: Group, member: Member) -> None:
        self._forget_member(group, member)
        if group.state in (STABLE, CR):
            self._maybe_prepare_rebalance(group)
        elif group.state == PR:
            self.purgatory.check_and_complete(("join", group.group_id))

    # ======================================================================
    # offsets
    # ======================================================================
    def commit_offsets(self, group_id, member_id, generation_id, offsets, instance_id,
                       done, api_version=None) -> None:
        """Validate and store; `done({tp: Errors})` runs once the store answered. `offsets`
        holds an OffsetAndMetadata per partition, or an int: the offset alone."""
        error = self.group_status(group_id, allow_empty=True)
        if error != _NONE:
            self._emit_one(done, {tp: error for tp in offsets})
            return
        group = self._get_group(group_id)
        if group is None:
            if generation_id >= 0:
                # (Kafka's validateOffsetCommit: from v9, which both protocols' clients
                # use, the group's absence itself; before it, ILLEGAL_GENERATION)
                error = E.GROUP_ID_NOT_FOUND if api_version is not None and api_version >= 9 \
                    else E.ILLEGAL_GENERATION
                self._emit_one(done, {tp: error for tp in offsets})
                return
            group = self._create_group(group_id)
        with group.rec:
            if group.consumer is not None:
                # (generation_id carries the member epoch: OffsetCommit v9's field)
                error = self.consumers.validate_offset_commit(group, member_id, generation_id,
                                                              api_version, offsets)
                if error != _NONE:
                    self._emit_one(done, {tp: error for tp in offsets})
                else:
                    self._store_offsets(group, offsets, done)
                return
            error = self._validate_offset_commit(group, member_id, generation_id, instance_id)
            if error != _NONE:
                self._emit_one(done, {tp: error for tp in offsets})
                return
            if group.state == CR:
                self._emit_one(done, {tp: E.REBALANCE_IN_PROGRESS for tp in offsets})
                return
            if group.state in (STABLE, PR):
                self.table.touch(group.members[member_id].slot)
            self._store_offsets(group, offsets, done)

    def commit_accepted(self, slot: int, tp: Tuple[str, int], offset: int) -> Errors:
        """The rest of commit_offsets for a commit of one int offset that the member table
        accepted (MemberTable.commit_handle: the member validated and touched): store it,
        on a store that writes at once (InMemoryStore.store_offset_now: a replay's;
        HeartbeatRun plays commits on no other). The answer for tp.

        _store_offsets' steps for this one case, called directly: its caller holds no
        lock and nothing is queued, so the outbox and the callback have nothing to add (and
        would be most of a commit's work). No write is left in flight, so none is
        counted pending; the commit takes effect where the group's offset changes, and a
        fetch before that sees the previous offset. The native HeartbeatRun takes these
        same steps in C (runs.pyx, c_commit_accepted): each twin's leaves the answer,
        store, group offsets and pending writes commit_offsets of the offset alone leaves
        (tests/pipeline/test_runs.py, test_a_runs_commit_leaves_what_commit_offsets_leaves)."""
        group = self.owners[slot][0]
        om = _offset_alone(self.table, offset, self.commit_time_ms())
        error = self.store.store_offset_now(group.group_id, tp, om)
        if error == _NONE:
            with group.rec:
                if group.state != DEAD:
                    group.offsets[tp] = om
        return error

    def _validate_offset_commit(self, group, member_id, generation_id, instance_id) -> Errors:
        if group.state == DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.state == EMPTY:
            return _NONE
        if generation_id >= 0 or member_id != "" or instance_id is not None:
            error = _validate_member(group, member_id, instance_id)
            if error != _NONE:
                return error
            return E.ILLEGAL_GENERATION if generation_id != group.generation else _NONE
        if group.state != EMPTY:
            return E.UNKNOWN_MEMBER_ID
        return _NONE

    def _store_offsets(self, group: Group, offsets: dict, done) -> None:
        limit = self.config.offset_metadata_max_bytes
        now = self.commit_time_ms()
        results: Dict[Tuple[str, int], Errors] = {}
        accepted: Dict[Tuple[str, int], OffsetAndMetadata] = {}
        for tp, om in offsets.items():
            if type(om) is int:
                # The offset alone (a consumer's usual commit); its default metadata is
                # never too large (the limit is >= 0).
                accepted[tp] = _offset_alone(self.table, om, now)
                results[tp] = _NONE
                continue
            metadata = om.metadata
            if metadata is not None and _metadata_too_large(metadata, limit):
                results[tp] = E.OFFSET_METADATA_TOO_LARGE
            else:
                # om._replace(commit_timestamp_ms=now), without its generic cost (and
                # without the call through OffsetAndMetadata's Python __new__)
                accepted[tp] = (self.table.make_result(OffsetAndMetadata,
                                           (om.offset, metadata, om.leader_epoch, now))
                                if type(om) is OffsetAndMetadata
                                else om._replace(commit_timestamp_ms=now))
                results[tp] = _NONE
        if not accepted:
            self._emit_one(done, results)
            return
        _count_pending(group, accepted)

        def stored(error: Errors) -> None:
            _offsets_written(group, accepted, results, error)
            self._emit_one(done, results)
            self.flush()

        self._emit(self.store.store_offsets, group.group_id, accepted, stored)

    def fetch_offsets(self, group_id, partitions, require_stable, member_id=None,
                      member_epoch=-1):
        """(group error, {tp: OffsetAndMetadata}, the partitions whose commit is still
        being written, answered offset -1 when `require_stable`: Kafka's per-partition
        UNSTABLE_OFFSET_COMMIT)."""
        error = self.group_status(group_id, allow_empty=True)
        if error != _NONE:
            return error, {}, []
        group = self._get_group(group_id)
        if group is None:
            if partitions is None:
                return _NONE, {}, []
            return _NONE, {tp: OffsetAndMetadata(-1) for tp in partitions}, []
        with group.rec:
            if group.consumer is not None:
                error = self.consumers.validate_offset_fetch(group, member_id, member_epoch)
                if error != _NONE:
                    return error, {}, []
            unstable = []
            wanted = list(group.offsets) if partitions is None else partitions
            result = {}
            for tp in wanted:
                if require_stable and tp in group.pending_offsets:
                    unstable.append(tp)
                    result[tp] = OffsetAndMetadata(-1)
                else:
                    result[tp] = group.offsets.get(tp, OffsetAndMetadata(-1))
            return _NONE, result, unstable

    # ======================================================================
    # admin: describe / list / delete
    # ======================================================================
    def describe_group(self, group_id) -> GroupDescription:
        error, group = self._find_group(group_id, allow_empty=True)
        if error != _NONE:
            return GroupDescription(error, group_id, "", "", "", [])
        if group is None:
            return GroupDescription(_NONE, group_id, STATE_VALUES[DEAD], "", "", [])
        with group.rec:
            if group.consumer is not None:
                return self.consumers.describe_as_classic(group)
            stable = group.state == STABLE
            members = [
                self.table.make_result(MemberDescription, (
                    m.member_id, m.instance_id, m.client_id, m.client_host,
                    m.metadata(group.protocol_name) if stable else b"",
                    m.assignment if stable else b""))
                for m in group.members.values()]
            return GroupDescription(_NONE, group_id, STATE_VALUES[group.state],
                                    group.protocol_type or "",
                                    (group.protocol_name or "") if stable else "", members)

    def group_summary(self, group_id) -> GroupSummary:
        """describe_group's state and member count without building member descriptions."""
        error, group = self._find_group(group_id, allow_empty=True)
        if error != _NONE:
            return GroupSummary(error, "", 0, 0, -2)
        if group is None:
            return GroupSummary(_NONE, STATE_VALUES[DEAD], 0, 0, -1)
        rec = group.rec
        rec.acquire()
        try:
            if group.consumer is not None:
                cg = group.consumer
                return GroupSummary(_NONE, cg.state_name(), cg.group_epoch, len(cg.members),
                                    group.version)
            return self.table.make_result(GroupSummary, (_NONE, STATE_VALUES[group.state], group.generation,
                                             len(group.members), group.members_epoch))
        finally:
            rec.release()

    def group_version(self, group_id) -> int:
        """A number that changes whenever group_summary's state or members epoch does
        (-1: no such group; -2: group_summary would answer an error). Read under no
        lock: the number is replaced whole, after the change it marks. (The member
        table answers the usual case, a group it holds in an active shard, itself:
        MemberTable.group_version, which the coordinator binds.)"""
        error, group = self._find_group(group_id, allow_empty=True)
        if error != _NONE:
            return -2
        return -1 if group is None else group.version

    def member_ids(self, group_id) -> List[str]:
        """describe_group's member ids alone, in its order."""
        error, group = self._find_group(group_id, allow_empty=True)
        if error != _NONE or group is None:
            return []
        rec = group.rec
        rec.acquire()
        try:
            if group.consumer is not None:
                return list(group.consumer.members)
            return list(group.members)
        finally:
            rec.release()

    def list_groups(self, states, types=None) -> List[GroupListing]:
        """Kafka's ListGroups: the groups in one of `states` (names, any case, blanks
        around them ignored) and of one of `types` ("classic", "consumer", any case);
        None or empty: any. None at all while the coordinator is not active (Kafka
        answers COORDINATOR_NOT_AVAILABLE alone)."""
        if not self.table.active:
            return []
        wanted = None if not states else {str(s).lower().strip(_JAVA_TRIM) for s in states}
        kinds = None if not types else {str(t).lower() for t in types}
        listings = []
        for rec in list(self.table.groups.values()):
            group = rec.group
            with rec:
                if group.consumer is not None:
                    kind, name = "consumer", group.consumer.state_name()
                else:
                    kind, name = "classic", STATE_NAMES[group.state].value
                if (wanted is None or name.lower() in wanted) \
                        and (kinds is None or kind in kinds):
                    listings.append(GroupListing(group.group_id, group.protocol_type or "",
                                                 name, kind))
        return listings

    def group_type(self, group_id):
        """"consumer" for a KIP-848 group (one mid-migration with classic members too),
        "classic" for any other group the coordinator holds, None for none."""
        group = self._get_group(group_id)
        if group is None:
            return None
        return "consumer" if group.consumer is not None else "classic"

    def delete_groups(self, group_ids) -> Dict[str, Errors]:
        results: Dict[str, Errors] = {}
        for group_id in group_ids:
            error = self.group_status(group_id, allow_empty=True)
            if error != _NONE:
                results[group_id] = error
                continue
            group = self._get_group(group_id)
            if group is None:
                results[group_id] = E.GROUP_ID_NOT_FOUND
                continue
            with group.rec:
                if group.state == DEAD:
                    results[group_id] = E.GROUP_ID_NOT_FOUND
                elif group.consumer is not None and group.consumer.members:
                    results[group_id] = E.NON_EMPTY_GROUP
                elif group.state == EMPTY:
                    group.transition_to(DEAD)
                    group.offsets.clear()
                    self.table.drop_group(group_id)
                    self._emit(self.store.store_group, group_id, None,
                               _log_store_error(group_id))
                    results[group_id] = _NONE
                else:
                    results[group_id] = E.NON_EMPTY_GROUP
        return results

    # ======================================================================
    # offsets retention and OffsetDelete (Kafka's cleanupGroupMetadata)
    # ======================================================================
    def cleanup_group_metadata(self) -> Tuple[int, int]:
        """One whole retention pass at once: expire the offsets past retention
        (_expired_offsets) of every group of an active shard, and remove the groups
        that are left Empty with no offsets, members or pending joins; the store gets
        offset tombstones, or the group's tombstone (which drops its offsets too).
        Returns (offsets expired, groups removed). A pass in slices
        (cleanup_group_metadata_step) in progress is left where it is."""
        expired, removed = self._cleanup_groups(list(self.table.groups))
        _log_retention_pass(expired, removed)
        return expired, removed

    def cleanup_group_metadata_step(self, max_groups: int) -> Tuple[int, int, bool]:
        """The next slice of a retention pass: at most `max_groups` groups examined as
        cleanup_group_metadata examines them, at the time of this call. A pass takes
        the table's group ids as it starts and examines each once: a group created
        since is left to the next pass, one removed since is skipped. Returns (offsets
        expired, groups removed, whether this slice ended the pass); the call after
        the pass's end starts the next one."""
        with self._retention_lock:
            rpass = self._retention_pass
            if rpass is None:
                rpass = self._retention_pass = _RetentionPass(list(self.table.groups))
            ids = rpass.take(max_groups)
            done = rpass.exhausted()
            if done:
                self._retention_pass = None
        expired, removed = self._cleanup_groups(ids)
        with self._retention_lock:
            rpass.expired += expired
            rpass.removed += removed
        if done:
            _log_retention_pass(rpass.expired, rpass.removed)
        return expired, removed, done

    def _cleanup_groups(self, group_ids: list) -> Tuple[int, int]:
        """The retention check of the groups named (those of the table, of an active
        shard), at the time of this call: (offsets expired, groups removed)."""
        now = self.commit_time_ms()
        retention = self.config.offsets_retention_minutes * 60_000
        table = self.table
        groups = table.groups
        expired_count = removed = 0
        for group_id in group_ids:
            rec = groups.get(group_id)
            if rec is None or table.shard_state(rec.shard) != SHARD_ACTIVE:
                continue                # removed since the ids were taken, or not ours
            group = rec.group
            with rec:
                if groups.get(group_id) is not rec:
                    continue            # removed since the look-up
                expired = _expired_offsets(group, now, retention)
                for tp in expired:
                    del group.offsets[tp]
                expired_count += len(expired)
                if self._remove_if_unused(group):
                    removed += 1
                elif expired:
                    self._emit_offset_tombstones(group.group_id, expired)
        return expired_count, removed

    def delete_offsets(self, group_id, partitions) -> Tuple[Errors, Dict[Tuple[str, int], Errors]]:
        """Kafka's OffsetDelete: (group error, {tp: error}). Any offset of an Empty group;
        of a consumer group with members, those of topics it is not subscribed to (the
        rest: GROUP_SUBSCRIBED_TO_TOPIC); NON_EMPTY_GROUP for another group with members.
        The store gets the tombstones; a classic group left without offsets is removed,
        as the retention check removes it (a consumer group is left to that check)."""
        error, group = self._find_group(group_id, allow_empty=False)
        if error != _NONE:
            return error, {}
        if group is None:
            return E.GROUP_ID_NOT_FOUND, {}
        results: Dict[Tuple[str, int], Errors] = {}
        with group.rec:
            if group.state == DEAD:
                return E.GROUP_ID_NOT_FOUND, {}
            if group.consumer is not None and group.consumer.members:
                topics = group.consumer.all_subscribed_topics()
            elif group.state == EMPTY:
                topics = ()
            elif group.protocol_type == CONSUMER_PROTOCOL:
                # its generation's topics (Kafka's isSubscribedToTopic): unknown ones
                # (None) count as every topic
                topics = _subscribed_topics(group)
            else:
                return E.NON_EMPTY_GROUP, {}
            # a group in use keeps the offsets of the topics it subscribes to
            eligible = []
            for tp in partitions:
                if topics is None or tp[0] in topics:
                    results[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
            removed = []
            for tp in eligible:
                results[tp] = _NONE
                if group.offsets.pop(tp, None) is not None:
                    removed.append(tp)
            # a classic group left without offsets goes at once (Kafka 3.x's
            # handleDeleteOffsets); a consumer group stays Empty until the retention
            # pass removes it (Kafka 4 writes only the offsets' tombstones)
            if (group.consumer is not None or not self._remove_if_unused(group)) and removed:
                self._emit_offset_tombstones(group_id, removed)
        return _NONE, results

    def _remove_if_unused(self, group: Group, tombstone: bool = True) -> bool:
        """An Empty group with no offsets (none on their way to the store either), no
        members and no pending joins is removed: Dead, out of the table, and a tombstone
        to the store (unless not `tombstone`: the store holds nothing of the group).
        Caller holds the group's lock."""
        if (group.state != EMPTY or group.offsets or group.pending_offsets or group.pending
                or group.members or (group.consumer is not None and group.consumer.members)):
            return False
        group.transition_to(DEAD)
        self.table.drop_group(group.group_id)
        if tombstone:
            self._emit(self.store.store_group, group.group_id, None,
                       _log_store_error(group.group_id))
        return True

    def classic_record(self, group: Group) -> dict:
        """The classic group's record as it is in memory (`_group_record` with each
        member's current assignment). Caller holds the group's lock."""
        return _group_record(group, {m.member_id: m.assignment for m in group.members.values()})

    def _emit_offset_tombstones(self, group_id: str, partitions: list) -> None:
        # (a store without delete_offsets keeps no offsets that could come back)
        delete = getattr(self.store, "delete_offsets", None)
        if delete is not None:
            self._emit(delete, group_id, partitions, _log_store_error(group_id))

    # ======================================================================
    # shards
    # ======================================================================
    def begin_loading(self, shard: int) -> None:
        self.table.set_shard_state(shard, SHARD_LOADING)

    def finish_loading(self, shard: int) -> None:
        self.table.set_shard_state(shard, SHARD_ACTIVE)
        for rec in list(self.table.groups.values()):
            if rec.shard == shard:
                self.on_group_loaded(rec.group)

    def install_loaded_group(self, group_id: str, record: Optional[dict], offsets: dict) -> None:
        """Put a group read back from the store into the coordinator (its shard is loading).
        `record` is what `_group_record` wrote (None: offsets only, an Empty group); members
        come back Stable with their assignments; `finish_loading` then gives them fresh
        session deadlines and rebalances a group over group.max.size, as Kafka does."""
        if group_id in self.table.groups:
            raise CoordinatorError(f"group {group_id} is already loaded")
        group = self._create_group(group_id)
        with group.rec:
            group.offsets.update(offsets)
            if record and record.get("consumer"):
                self.consumers.load(group, record)
                return
            if record:
                self.install_classic_record(group, record)

    def install_classic_record(self, group: Group, record: dict) -> None:
        """The classic group of `record` (what `_group_record` wrote) into `group`, which
        has no members: members Stable with their assignments, each session ending a
        session from now; without members, an Empty group at the record's generation.
        Caller holds the group's lock."""
        group.generation = record["generation"]
        group.rec.generation = group.generation
        group.protocol_type = record.get("protocol_type")
        if not record.get("members"):
            # An Empty group's record is written as it becomes Empty: the store
            # gives its write time (else the group counts as Empty since now)
            written = record.get("written_ms")
            if type(written) is int:
                group.empty_since_ms = written
            group.generation_topics = _generation_topics(group)
            return
        group.protocol_name = record["protocol"]
        now = self.clock.now_ms()
        for m in record["members"]:
            session = m["session_timeout_ms"]
            slot = self.table.alloc(group.rec, m["member_id"], session, now + session, False)
            member = Member(m["member_id"], m["instance_id"], m["client_id"], m["client_host"],
                            m["rebalance_timeout_ms"], session, group.protocol_type,
                            [(group.protocol_name, m["subscription"])], slot)
            member.assignment = m["assignment"]
            self.owners[slot] = (group, member.member_id)
            group.add(member, None)
        group.leader_id = record["leader"] if record["leader"] in group.members \
            else next(iter(group.members))
        group.state = STABLE          # a loaded group with members is Stable (Kafka)
        group.rec.state = STABLE
        group.generation_topics = _generation_topics(group)
        group.version = next(_EPOCHS)

    def on_group_loaded(self, group: Group) -> None:
        with group.rec:
            if group.consumer is not None:
                self.consumers.on_loaded(group)
                return
            if len(group.members) > self.config.group_max_size:
                self._maybe_prepare_rebalance(group)
            for member in group.members.values():
                self.table.touch(member.slot)

    def unload_shard(self, shard: int) -> None:
        self.table.set_shard_state(shard, SHARD_NOT_OWNED)
        for rec in [r for r in self.table.groups.values() if r.shard == shard]:
            group = rec.group
            with rec:
                previous = group.state
                group.transition_to(DEAD)
                # Every parked join and sync learns the group moved away (a join parks
                # in PreparingRebalance, or in Stable on a static rejoin's write)
                for member in list(group.members.values()):
                    self._invoke_join(member, group, JoinGroupResult(
                        E.NOT_COORDINATOR, member_id=member.member_id))
                    self._invoke_sync(member, SyncGroupResult(E.NOT_COORDINATOR))
                if previous == PR:
                    self.purgatory.check_and_complete(("join", group.group_id))
                self._remove_sync_expiration(group)
                for member in list(group.members.values()):
                    self._forget_member(group, member)
                for slot in group.pending.values():
                    self._release_slot(slot)
                group.pending.clear()
                if group.consumer is not None:
                    self.consumers.forget_all(group)
                self.table.drop_group(group.group_id)


def _validate_member(group: Group, member_id: str, instance_id) -> Errors:
    """Is member_id (with instance_id, for a static member) a member of the group?
    UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID (the instance id is another member's) or NONE."""
    if instance_id is not None:
        current = group.static.get(instance_id)
        if current is None:
            return E.UNKNOWN_MEMBER_ID
        if current != member_id:
            return E.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return E.UNKNOWN_MEMBER_ID
    return _NONE


class _RetentionPass:
    """A retention pass in slices: the group ids of the table as it started, a cursor
    into them, and what the slices taken so far expired and removed."""

    def __init__(self, group_ids: list):
        self.group_ids = group_ids
        self.pos = 0
        self.expired = self.removed = 0

    def take(self, count: int) -> list:
        """The next `count` ids (fewer at the end); each id is taken once."""
        start = self.pos
        self.pos = min(start + count, len(self.group_ids))
        return self.group_ids[start:self.pos]

    def exhausted(self) -> bool:
        return self.pos >= len(self.group_ids)


def _log_retention_pass(expired: int, removed: int) -> None:
    if expired or removed:
        log.info("offsets retention: %d offset(s) expired, %d group(s) removed",
                 expired, removed)


def _expired_offsets(group: Group, now: int, retention: int) -> list:
    """The group's offsets past retention at `now`: of a consumer-protocol (KIP-848)
    group, those of topics no member subscribes to (all, once it is Empty), each
    `retention` after its commit (Kafka 4); of a classic group (Kafka 2.1+), all of an
    Empty group that had members once it has been Empty for `retention`, a simple
    consumer's (no protocol type) each `retention` after its commit, and of a Stable
    consumer group those of topics no member subscribes to, `retention` after their
    commit. Never one whose commit is still on its way to the store."""
    offsets = group.offsets
    if not offsets:
        return []
    pending = group.pending_offsets
    if group.consumer is not None:
        # A consumer group, Empty or not: the offsets of topics no member subscribes to,
        # each retention after its commit (Kafka 4's ConsumerGroup: its expiration
        # condition is the commit time in every state, isSubscribedToTopic)
        topics = group.consumer.all_subscribed_topics() if group.consumer.members else ()
        return [tp for tp, om in offsets.items()
                if tp[0] not in topics and tp not in pending
                and now - om.commit_timestamp_ms >= retention]
    if group.protocol_type is None:
        return [tp for tp, om in offsets.items()
                if tp not in pending and now - om.commit_timestamp_ms >= retention]
    if group.state == EMPTY:
        if now - group.empty_since_ms < retention:
            return []
        return [tp for tp in offsets if tp not in pending]
    if group.state == STABLE and group.protocol_type == CONSUMER_PROTOCOL:
        topics = _subscribed_topics(group)
        if topics is None:
            return []
        return [tp for tp, om in offsets.items()
                if tp[0] not in topics and tp not in pending
                and now - om.commit_timestamp_ms >= retention]
    return []


def _generation_topics(group: Group) -> "Optional[_GenerationTopics]":
    """Kafka's GroupMetadata.computeSubscribedTopics, as its generation starts: for a
    group of the consumer protocol type, its members' subscriptions for the group's
    protocol (no members: no topics); None for another protocol type."""
    if group.protocol_type != CONSUMER_PROTOCOL:
        return None
    if not group.members:
        return _NO_MEMBERS_TOPICS
    if group.protocol_name is None:
        return None
    # (a member's protocols list is replaced, never changed in place: a later join
    # with other metadata does not reach this generation's)
    return _GenerationTopics(group.protocol_name,
                             tuple([m.protocols for m in group.members.values()]))


def _subscribed_topics(group: Group) -> Optional[frozenset]:
    """The topics of the group's generation; None when unknown (every topic counts)."""
    taken = group.generation_topics
    return None if taken is None else taken.topics()


class _GenerationTopics:
    """A generation's subscriptions, as its members' protocols were when it started,
    parsed when first read: only OffsetDelete and the retention check read them, so a
    rebalance does not parse every member's subscription."""
    __slots__ = ("_protocol", "_protocols", "_topics")

    def __init__(self, protocol, protocols) -> None:
        self._protocol = protocol
        self._protocols = protocols     # None once parsed
        self._topics = None

    def topics(self) -> Optional[frozenset]:
        """The topics the subscriptions name; None when one does not parse as a consumer
        protocol subscription (nothing is known then)."""
        if self._protocols is not None:
            self._topics = self._parse()
            self._protocols = None
        return self._topics

    def _parse(self) -> Optional[frozenset]:
        topics: set = set()
        for protocols in self._protocols:
            names = None
            for name, meta in protocols:
                if name == self._protocol:
                    names = _consumer_topics(meta)
                    break
            if names is None:
                return None
            topics.update(names)
        return frozenset(topics)


_NO_MEMBERS_TOPICS = _GenerationTopics(None, ())
_NO_MEMBERS_TOPICS.topics()     # parsed here, once: shared, it is never written again


def _consumer_topics(data) -> Optional[list]:
    """The topics of a ConsumerProtocol Subscription: every version starts with an i16
    version >= 0, then the topics as an i32 count of i16-length UTF-8 strings (big-endian).
    None for bytes that are not one (client bytes: every length is checked first)."""
    if not isinstance(data, (bytes, bytearray)):
        return None
    n = len(data)
    if n < 6 or int.from_bytes(data[0:2], "big", signed=True) < 0:
        return None
    count = int.from_bytes(data[2:6], "big", signed=True)
    if count < 0 or count > (n - 6) // 2:
        return None
    pos = 6
    topics = []
    for _ in range(count):
        if pos + 2 > n:
            return None
        size = int.from_bytes(data[pos:pos + 2], "big", signed=True)
        pos += 2
        if size < 0 or pos + size > n:
            return None
        try:
            topics.append(bytes(data[pos:pos + size]).decode("utf-8"))
        except UnicodeDecodeError:
            return None
        pos += size
    return topics


def _group_record(group: Group, assignment: dict) -> dict:
    """What the store writes for a group: its generation and every member's metadata,
    subscription (its metadata for the group's protocol) and `assignment`."""
    protocol = group.protocol_name
    members = []
    for m in group.members.values():
        members.append({
            "member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id,
            "client_host": m.client_host, "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "session_timeout_ms": m.session_timeout_ms,
            "subscription": m.metadata(protocol) if protocol else b"",
            "assignment": assignment.get(m.member_id, b"")})
    return {"protocol_type": group.protocol_type, "generation": group.generation,
            "protocol": protocol, "leader": group.leader_id, "members": members}


def _join_error(table, error: Errors, member_id: str) -> JoinGroupResult:
    """JoinGroupResult(error, member_id=member_id), made directly: the class's defaults
    for the rest, without the call through its Python __new__ (a join answered without
    a generation: MEMBER_ID_REQUIRED, for every new dynamic member, and the errors)."""
    return table.make_result(JoinGroupResult, (error, _JG_GENERATION, _JG_PROTOCOL_TYPE,
                                                _JG_PROTOCOL_NAME, _JG_LEADER, member_id,
                                                _JG_MEMBERS, _JG_SKIP))


def _offset_alone(table, offset: int, now: int) -> OffsetAndMetadata:
    """OffsetAndMetadata(offset, commit_timestamp_ms=now), made directly: the class's
    defaults for the rest, without the call through its Python __new__."""
    return table.make_result(OffsetAndMetadata, (offset, _OM_METADATA, _OM_LEADER_EPOCH, now))


def _count_pending(group: Group, accepted: dict) -> None:
    """Offsets on their way to the store: a fetch that requires stable offsets waits."""
    pending = group.pending_offsets
    for tp in accepted:
        pending[tp] = pending.get(tp, 0) + 1


def _offsets_written(group: Group, accepted: dict, results: dict, error: Errors) -> None:
    """The store answered a write of `accepted`: no longer pending; on success the
    group's offsets (unless the group died meanwhile), else the error in `results`."""
    ok = error == _NONE
    pending = group.pending_offsets
    with group.rec:
        for tp, om in accepted.items():
            left = pending.get(tp, 0) - 1
            if left <= 0:
                pending.pop(tp, None)
            else:
                pending[tp] = left
            if ok and group.state != DEAD:
                group.offsets[tp] = om
            elif not ok:
                results[tp] = error


def _metadata_too_large(metadata: str, limit: int) -> bool:
    """Is the metadata longer than `limit` as Kafka counts it: Java's String.length(),
    UTF-16 code units (a character outside the BMP counts two)? Encoded only when
    that could differ from len(): between limit / 2 and limit characters. (A lone
    surrogate, which Java's strings may hold too, counts one.)"""
    n = len(metadata)
    if n > limit:
        return True
    if 2 * n <= limit:
        return False
    return len(metadata.encode("utf-16-le", "surrogatepass")) > 2 * limit


def _log_store_error(group_id: str):
    def done(error: Errors) -> None:
        if error != _NONE:
            log.warning("group %s: writing group metadata failed: %s", group_id, error.name)
    return done


def _default_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


# The twin's DelayedOperation -> its operation classes (_delayed_op_classes)
_OP_CLASSES: Dict[type, tuple] = {}


def _delayed_op_classes(base):
    """DelayedJoin, InitialDelayedJoin and DelayedSync on the twin's DelayedOperation:
    made once per twin and shared by its GroupLogics (an operation's state is its own,
    the class holds none). Made per GroupLogic, every coordinator built (one per
    replayed shard) cost three class creations, and left three classes behind for the
    cyclic collector: a class and its dict and mro refer to one another."""
    classes = _OP_CLASSES.get(base)
    if classes is None:
        # (two threads may both make them: the first stored is the one every logic uses)
        classes = _OP_CLASSES.setdefault(base, _new_delayed_op_classes(base))
    return classes


def _new_delayed_op_classes(base):

    class DelayedJoin(base):
        def __init__(self, logic, group, rebalance_timeout_ms):
            base.__init__(self, rebalance_timeout_ms, group.rec)
            self.logic = logic
            self.group = group

        def try_complete(self):
            return self.logic.try_complete_join(self.group, self)

        def on_complete(self):
            self.logic.on_complete_join(self.group)

        def on_expiration(self):
            # Expiry runs outside every group lock: deliver answers at this deadline.
            self.logic.flush()

    class InitialDelayedJoin(DelayedJoin):
        def __init__(self, logic, group, configured_delay_ms, delay_ms, remaining_ms):
            DelayedJoin.__init__(self, logic, group, delay_ms)
            self.configured_ms = configured_delay_ms
            self.this_delay_ms = delay_ms
            self.remaining_ms = remaining_ms

        def try_complete(self):
            return False

        def on_complete(self):
            self.logic.initial_join_complete(self)

    class DelayedSync(base):
        def __init__(self, logic, group, generation, rebalance_timeout_ms):
            base.__init__(self, rebalance_timeout_ms, group.rec)
            self.logic = logic
            self.group = group
            self.generation = generation

        def try_complete(self):
            return self.logic.try_complete_sync(self.group, self.generation, self)

        def on_complete(self):
            pass

        def on_expiration(self):
            self.logic.on_expire_sync(self.group, self.generation)
            self.logic.flush()

    return (DelayedJoin, InitialDelayedJoin), (None, DelayedSync)

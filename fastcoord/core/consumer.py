"""Kafka 4's consumer group protocol (KIP-848): the slow path of both twins.

A consumer group is a `Group` (core/groups.py) whose `consumer` attribute holds a
`ConsumerGroupState`: offsets, retention, deletion and the shard lifecycle stay the
group's; what this module adds is the protocol itself. Its rules are Kafka's
`GroupMetadataManager` consumer-group paths, `ConsumerGroupMember`, and
`CurrentAssignmentBuilder` (docs/consumer-protocol.md):

- the group epoch is bumped when membership, a subscription or the metadata of the
  subscribed topics changes; the target assignment is recomputed by the server-side
  assignor when the group epoch is ahead of it (the assignment epoch);
- each member is reconciled towards its target one step per heartbeat: partitions it
  must give up are revoked first (UNREVOKED_PARTITIONS, the member keeps its epoch),
  partitions still owned by another member wait (UNRELEASED_PARTITIONS); a partition is
  never owned by two members (`ConsumerGroupState.owners`);
- a member that does not revoke within its rebalance timeout, or stays silent for the
  session timeout, is fenced: removed, and the group epoch bumped.

Every entry point runs under the group's lock (its GroupRecord); callbacks go through
the group logic's outbox, as the classic paths do, so they never run under a lock.
"""
from __future__ import annotations

import base64
import logging
import operator
import uuid
from typing import Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Tuple

import re2

from fastcoord._ratelog import RateLimitedLog
from fastcoord.core.consumer_embedded import (ClassicMetadata, encode_assignment,
                                              encode_subscription)
from fastcoord.core.consumer_records import (commit_consumer_record, committed_state,
                                              consumer_record, fill_member, fold_consumer_record,
                                              unpack_member)
from fastcoord.core.errors import Errors
from fastcoord.core.group_configs import HEARTBEAT_INTERVAL, SESSION_TIMEOUT
from fastcoord.core.results import (
    ConsumerGroupDescription, ConsumerGroupHeartbeatResult, ConsumerGroupMemberDescription,
    GroupDescription, MemberDescription,
)

log = logging.getLogger("fastcoord.coordinator")
_log_once = RateLimitedLog(log)

__all__ = ["ClassicMetadata", "ConsumerGroupState", "ConsumerLogic", "ConsumerMember",
           "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH"]

# Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS: the least time between two resolutions
# of a group's regular expressions
REGEX_BATCH_MIN_INTERVAL_MS = 10_000

LEAVE_EPOCH = -1            # a member leaves the group
STATIC_LEAVE_EPOCH = -2     # a static member leaves for now, its partitions kept

# A member's reconciliation state (Kafka's MemberState)
STABLE = 0                  # owns its target of the epoch it is at
UNREVOKED_PARTITIONS = 1    # must first give up `revoking`; keeps its epoch meanwhile
UNRELEASED_PARTITIONS = 2   # at the target epoch, waiting for partitions others still own
MEMBER_STATE_NAMES = ("STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS")

# A consumer group's state, as Kafka prints it
EMPTY, ASSIGNING, RECONCILING, STABLE_GROUP, DEAD = (
    "Empty", "Assigning", "Reconciling", "Stable", "Dead")

_NO_TOPICS: FrozenSet[str] = frozenset()


def kafka_uuid() -> str:
    """A member id as Kafka's Uuid.randomUuid().toString(): 16 random bytes, URL-safe
    base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


_new_object = object.__new__


class ConsumerMember:
    """One member of a consumer group (Kafka's ConsumerGroupMember). `assigned` and
    `revoking` map a topic name to a frozenset of partitions, never empty sets. A member
    that uses the classic protocol (core/consumer_mixed.py) has `classic` set."""

    __slots__ = ("member_id", "instance_id", "rack_id", "client_id", "client_host",
                 "rebalance_timeout_ms", "server_assignor", "topic_names", "topic_regex",
                 "state", "member_epoch", "previous_epoch", "assigned", "revoking",
                 "assignment_epochs", "slot", "rebalance_timer", "classic", "join_timer",
                 "sync_timer")

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.instance_id: Optional[str] = None
        self.rack_id: Optional[str] = None
        self.client_id = ""
        self.client_host = ""
        self.rebalance_timeout_ms = -1
        self.server_assignor: Optional[str] = None
        self.topic_names: FrozenSet[str] = _NO_TOPICS
        self.topic_regex: Optional[str] = None
        self.state = STABLE
        self.member_epoch = 0
        self.previous_epoch = 0
        self.assigned: Dict[str, FrozenSet[int]] = {}
        self.revoking: Dict[str, FrozenSet[int]] = {}
        # KIP-1251: the member epoch at which each partition of `assigned` and `revoking`
        # came to the member ({topic: {partition: epoch}}), for commits at an older
        # epoch. A held partition without an entry counts as assigned at the member's
        # epoch: the strict check, never a more lenient one.
        self.assignment_epochs: Dict[str, Dict[int, int]] = {}
        self.slot = -1                  # the member table slot holding its session deadline
        self.rebalance_timer = None     # the timer handle of its revocation deadline
        self.classic: Optional[ClassicMetadata] = None      # None: the consumer protocol
        # A classic member's deadlines to rejoin (after it was told to) and to sync
        # (after its join was answered): timer handles, or None
        self.join_timer = None
        self.sync_timer = None

    def copy(self, member_id: Optional[str] = None) -> "ConsumerMember":
        # Every slot, one by one (every slow-path heartbeat copies its member, and a
        # loop of getattr and setattr costs several times this); a test checks that
        # each slot is copied
        other = _new_object(ConsumerMember)
        other.member_id = self.member_id if member_id is None else member_id
        other.instance_id = self.instance_id
        other.rack_id = self.rack_id
        other.client_id = self.client_id
        other.client_host = self.client_host
        other.rebalance_timeout_ms = self.rebalance_timeout_ms
        other.server_assignor = self.server_assignor
        other.topic_names = self.topic_names
        other.topic_regex = self.topic_regex
        other.state = self.state
        other.member_epoch = self.member_epoch
        other.previous_epoch = self.previous_epoch
        other.assigned = self.assigned
        other.revoking = self.revoking
        other.assignment_epochs = self.assignment_epochs
        other.slot = self.slot
        other.rebalance_timer = self.rebalance_timer
        other.classic = self.classic
        other.join_timer = self.join_timer
        other.sync_timer = self.sync_timer
        return other

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == STABLE and self.member_epoch == epoch


class ConsumerGroupState:
    """The consumer-protocol part of a group (Kafka's ConsumerGroup)."""

    __slots__ = ("group_epoch", "assignment_epoch", "members", "static", "target",
                 "owners", "resolved", "regex_refresh", "regex_timer", "regex_resolved_ms",
                 "regex_topics_version", "topics_version", "metadata", "dirty", "dirty_all",
                 "write_seq", "stored_seq", "committed", "live", "came_from",
                 "written_epochs")

    def __init__(self) -> None:
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: Dict[str, ConsumerMember] = {}        # insertion ordered
        self.static: Dict[str, str] = {}                    # instance id -> member id
        # member id -> its target: {topic: sorted partition tuple}, as the assignors
        # return it (so a recomputed target equal to the old one compares equal)
        self.target: Dict[str, Dict[str, Tuple[int, ...]]] = {}
        # (topic, partition) -> epoch of the member that owns it (assigned or revoking):
        # Kafka's currentPartitionEpoch; absent means free
        self.owners: Dict[tuple, int] = {}
        # regular expression -> the topic names it resolved to; a regex some member
        # subscribes to and not here is unresolved (matches nothing yet)
        self.resolved: Dict[str, FrozenSet[str]] = {}
        self.regex_refresh = False      # resolve at the group's next heartbeat
        self.regex_timer = None         # sets regex_refresh once the refresh interval passed
        self.regex_resolved_ms = None   # when the regexes were last resolved (None: never)
        self.regex_topics_version = -1  # the topics map they were last resolved against
        self.topics_version = -1        # the topics map `metadata` was computed from
        self.metadata: Dict[str, int] = {}   # subscribed existing topic -> partitions
        # What the store has not been given yet: the ids of members changed or removed
        # since the last write, or everything (a new group, or after a failed write)
        self.dirty: set = set()
        self.dirty_all = True
        # The epochs of the last record given to the store: epochs that moved since
        # (a regex resolution or a topics change, with a target that no member's
        # record changed for) need a record too. (A change of the topics' metadata or
        # of what a regex resolved to always bumps the group epoch.)
        self.written_epochs = (0, 0)
        # Records are numbered: write_seq is the last one given to the store, stored_seq
        # the last one of the unbroken chain the store confirmed (a whole record, then
        # each partial record that follows it). A partial record is made on top of the
        # one before it, so it counts as stored only if that one was (see _persist).
        self.write_seq = 0
        self.stored_seq = 0
        # What a failed write reverts the group to (_persist, restore): `committed` is
        # the fold of the records the store confirmed (commit_consumer_record's copy, its
        # members packed; None before the first), `live` the records given to the store
        # since, by number, whose outcome is not known and that do not follow a failed
        # one. The group in memory is always committed with every live record applied.
        self.committed: Optional[dict] = None
        self.live: Dict[int, dict] = {}
        # A group made from a classic group (one with members it converted, or an empty
        # one it took over) goes back to that group while the store holds nothing of
        # this one: `came_from` (a ClassicOrigin) until the store confirms a record.
        # Otherwise, with nothing committed, the group's first heartbeat created it: a
        # revert removes it.
        self.came_from: Optional[ClassicOrigin] = None

    def unwritten(self) -> bool:
        """Whether the group changed since the last record given to the store."""
        return self.dirty_all or bool(self.dirty) \
            or self.written_epochs != (self.group_epoch, self.assignment_epoch)

    def state_name(self) -> str:
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        epoch = self.assignment_epoch
        for m in self.members.values():
            if not m.is_reconciled_to(epoch):
                return RECONCILING
        return STABLE_GROUP

    def subscribed_topics(self, member: ConsumerMember) -> FrozenSet[str]:
        """The topics `member` subscribes to: its names, and what its regex resolved to."""
        regex = member.topic_regex
        if not regex:
            return member.topic_names
        return member.topic_names | self.resolved.get(regex, _NO_TOPICS)

    def all_subscribed_topics(self) -> set:
        topics: set = set()
        for m in self.members.values():
            topics |= self.subscribed_topics(m)
        return topics

    def regexes(self) -> set:
        return {m.topic_regex for m in self.members.values() if m.topic_regex}

    def forget_unused_regexes(self, candidates: Optional[Iterable[str]] = None) -> None:
        """Drop the resolutions of regexes no member subscribes to any more (Kafka
        deletes a regex's resolution when its last member leaves, is fenced or moves to
        another regex): one subscribed to again is resolved anew, and that resolution,
        new to the group, bumps its epoch. `candidates`: the regexes that may have lost
        their last member (None: every resolved one); a regex many members share is
        found in use at its first."""
        resolved = self.resolved
        if not resolved:
            return
        members = self.members.values()
        gone = [r for r in (resolved if candidates is None else candidates)
                if r in resolved and not any(m.topic_regex == r for m in members)]
        if gone:
            # (a new dict: a copy kept for a revert may hold the old one)
            self.resolved = {r: ts for r, ts in resolved.items() if r not in gone}

    # -- partition ownership (Kafka's currentPartitionEpoch bookkeeping) --------
    def release(self, member: ConsumerMember) -> None:
        owners = self.owners
        for parts in (member.assigned, member.revoking):
            for topic, ps in parts.items():
                for p in ps:
                    owners.pop((topic, p), None)

    def own(self, member: ConsumerMember) -> None:
        owners = self.owners
        epoch = member.member_epoch
        for parts in (member.assigned, member.revoking):
            for topic, ps in parts.items():
                for p in ps:
                    owners[(topic, p)] = epoch


# A client's pattern that does not parse is its heartbeat's answer, not a line on the
# server's stderr (RE2 logs the pattern whole, and a DFA out of memory on each match).
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


def _compile_regex(regex: str):
    """RE2 compile of a subscribed regex, left out of google-re2's module cache: that
    cache keeps the last 128 compiled patterns alive, each up to RE2's memory budget,
    whichever client sent them. Every caller holds what it needs only while it runs."""
    try:
        return re2.compile(regex, _RE2_OPTIONS)
    finally:
        re2.purge()


def _check_regex(regex: str) -> None:
    """INVALID_REGULAR_EXPRESSION (Kafka's answer and message) unless `regex` is valid
    RE2 syntax, as Kafka's RE2/J parses it: RE2/J has no `\\C` (any byte), which RE2
    accepts outside a character class."""
    try:
        _compile_regex(regex)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else ""
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise _Refused(Errors.INVALID_REGULAR_EXPRESSION,
                       f"SubscribedTopicRegex `{regex}` is not a valid regular "
                       f"expression: {detail}.") from None
    if _any_byte_escape(regex):
        raise _Refused(Errors.INVALID_REGULAR_EXPRESSION,
                       f"SubscribedTopicRegex `{regex}` is not a valid regular "
                       "expression: invalid escape sequence: \\C.")


def _new_to_group(cg, member, regex: str) -> bool:
    """Whether no member of the group but `member` subscribes to `regex` (one new to
    the group is checked, and resolved at its next heartbeat)."""
    return not any(m.topic_regex == regex for m in cg.members.values()
                   if m.member_id != member.member_id)


def _any_byte_escape(regex: str) -> bool:
    """Whether a pattern RE2 compiled has a `\\C` escape. Outside \\Q...\\E quoting
    every backslash starts a two-character escape; RE2 refuses `\\C` inside a character
    class, so one that compiled has it outside any."""
    at = regex.find("\\")
    while at >= 0:
        escaped = regex[at + 1:at + 2]
        if escaped == "C":
            return True
        if escaped == "Q":
            end = regex.find("\\E", at + 2)
            if end < 0:
                return False
            at = regex.find("\\", end + 2)
        else:
            at = regex.find("\\", at + 2)
    return False


def _describable(topics, topic_filter, group_id) -> list:
    """The topic names a regex may match, sorted: those `topic_filter` passes (all
    without one). A filter that raises denies them all: a caller's broken rights check
    must not widen what a subscription reaches, nor cost the heartbeat its answer."""
    if topic_filter is None:
        return sorted(topics)
    try:
        return sorted(t for t in topics if topic_filter(t))
    except Exception as exc:
        log.error("consumer group %s: the topic filter raised %s: %s; its regexes match "
                  "no topic at this resolution", group_id, type(exc).__name__, exc)
        return []


class ClassicOrigin(NamedTuple):
    """The classic group a consumer group was made from, as a failed conversion gives
    it back: its record as it was in memory, whether it was rebalancing, and per member
    id the session deadline and every protocol offered (the record keeps the chosen
    one only)."""
    record: dict
    rebalancing: bool
    sessions: Dict[str, int]
    protocols: Dict[str, list]


def _deadline(handle) -> Optional[int]:
    """A timer handle's deadline, or None for no handle."""
    return None if handle is None else handle.deadline_ms


def _commit(cg: ConsumerGroupState, seq: int, record: dict) -> None:
    """Record `seq` of the group is stored, in the unbroken chain: the group's copy of
    what the store holds takes it (a record older than that copy's, confirmed out of
    order by a store that does so, changes nothing there)."""
    cg.live.pop(seq, None)
    committed = cg.committed
    if committed is None or seq > committed.get("seq", 0):
        cg.committed = commit_consumer_record(committed, record)
    cg.came_from = None     # (the store holds this group now, not the one it came from)


class _Refused(Exception):
    """A heartbeat answered with an error (Kafka's ApiException)."""

    def __init__(self, error: Errors, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


class _TargetFailed(_Refused):
    """The assignor raised: the heartbeat's changes so far are undone (Kafka fails the
    request, whose records go with it)."""


def shared_topic_names(cg: ConsumerGroupState, names) -> FrozenSet[str]:
    """The subscription `names` as a set: the group's first member's when equal, so that
    members subscribed alike (most groups' members) hold one set between them, not one
    each that every full garbage collection visits. Sets are immutable: sharing is safe."""
    subscribed = frozenset(names)
    first = next(iter(cg.members.values()), None)
    if first is not None and first.topic_names == subscribed:
        return first.topic_names
    return subscribed


def _as_sets(parts) -> Dict[str, FrozenSet[int]]:
    return {t: frozenset(ps) for t, ps in parts.items() if ps}


def _sorted_lists(parts) -> Dict[str, List[int]]:
    return {t: sorted(ps) for t, ps in parts.items() if ps}


def _sorted_tuples(parts) -> Dict[str, Tuple[int, ...]]:
    """A target as the assignors give it: each topic's partitions a sorted tuple."""
    return {t: tuple(sorted(ps)) for t, ps in parts.items() if ps}


def settled_state_name(group_epoch: int, assignment_epoch: int, settled: list) -> str:
    """ConsumerGroupState.state_name from the group's epochs and its members' (state,
    member epoch) pairs."""
    if not settled:
        return EMPTY
    if group_epoch > assignment_epoch:
        return ASSIGNING
    for state, epoch in settled:
        if state != STABLE or epoch != assignment_epoch:
            return RECONCILING
    return STABLE_GROUP


def _live_member(m, target) -> ConsumerGroupMemberDescription:
    """A member in memory as ConsumerGroupDescribe describes it (`target`: the group's)."""
    return ConsumerGroupMemberDescription(
        m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
        sorted(m.topic_names), m.topic_regex, _sorted_lists(m.assigned),
        {t: sorted(ps) for t, ps in target.get(m.member_id, {}).items() if ps},
        m.classic is not None)


def _recorded_member(member_id: str, m: dict) -> ConsumerGroupMemberDescription:
    """A member's record (consumer_records.member_record's) as ConsumerGroupDescribe
    describes it."""
    return ConsumerGroupMemberDescription(
        member_id, m["instance_id"], m["rack_id"], m["member_epoch"], m["client_id"],
        m["client_host"], m["topic_names"], m["topic_regex"], m["assigned"], m["target"],
        m.get("classic") is not None)


def _not_found(group_id: str, message: str) -> ConsumerGroupDescription:
    return ConsumerGroupDescription(Errors.GROUP_ID_NOT_FOUND, group_id, DEAD, -1, -1, "",
                                    [], message)


def _is_subset(owned, assigned) -> bool:
    """Every owned topic is assigned and each of its partitions too (Kafka's isSubset:
    an owned topic the member is not assigned fails even with no partition listed;
    None owns nothing known)."""
    if owned is None:
        return False
    for topic, ps in owned.items():
        mine = assigned.get(topic)
        if not mine:
            return False
        for p in ps:
            if p not in mine:
                return False
    return True


def _owns_any(owned, revoking) -> bool:
    """Whether the member still reports owning a partition it must revoke (Kafka's
    ownsRevokedPartitions: not reporting what it owns counts as owning)."""
    if owned is None:
        return True
    for topic, ps in owned.items():
        pending = revoking.get(topic)
        if pending:
            for p in ps:
                if p in pending:
                    return True
    return False


class ConsumerLogic:
    """The consumer-protocol requests of one coordinator, over its GroupLogic (tables,
    timer, outbox, shards) and the twin's assignors."""

    def __init__(self, logic, member_id_factory, assign) -> None:
        self.logic = logic
        self.member_id_factory = member_id_factory   # None: Kafka's own (kafka_uuid)
        self.config = logic.config
        self.assign = assign            # compute_assignment(name, members, topics, current)
        self.assignors = tuple(self.config.group_consumer_assignors)
        self.topics: Dict[str, int] = {}
        self.topics_version = 0
        # Dynamic group configs ({group id: {name: value}}, group_configs.py): set ones only
        self.group_configs: Dict[str, Dict[str, int]] = {}
        # Members of the classic protocol inside consumer groups, and the conversions
        # between the two kinds of group (Kafka 4's mixed groups)
        from fastcoord.core.consumer_mixed import MixedGroups
        self.mixed = MixedGroups(self)
        # The highest record number given to the store or read back from it, over every
        # group. A new consumer group (a group's first, or one made after its group went
        # classic or away) numbers its records on from it: a partial record of it can
        # then never pass for the successor of an older incarnation's record the store
        # still holds, when its own first (whole) record was lost.
        self.last_seq = 0

    def new_state(self) -> ConsumerGroupState:
        """A new group's consumer state, its records numbered on from `last_seq`."""
        cg = ConsumerGroupState()
        cg.write_seq = cg.stored_seq = self.last_seq
        return cg

    # ======================================================================
    # topics (what the assignors see)
    # ======================================================================
    def set_topics(self, topics: Dict[str, int]) -> None:
        """Replace the topics map. Groups re-target lazily: each recomputes its
        subscription metadata (and re-resolves its regexes) at its next heartbeat."""
        self.topics = dict(topics)
        self.topics_version += 1
        self.logic.table.consumer_topics(self.topics_version)   # no group is quiet now

    # ======================================================================
    # dynamic group configs
    # ======================================================================
    def session_ms(self, group_id: str) -> int:
        """The session timeout of the group's consumer-protocol members."""
        own = self.group_configs.get(group_id)
        if own is not None and SESSION_TIMEOUT in own:
            return own[SESSION_TIMEOUT]
        return self.config.group_consumer_session_timeout_ms

    def interval_ms(self, group_id: str) -> int:
        """The heartbeat interval the group's members are given."""
        own = self.group_configs.get(group_id)
        if own is not None and HEARTBEAT_INTERVAL in own:
            return own[HEARTBEAT_INTERVAL]
        return self.config.group_consumer_heartbeat_interval_ms

    def set_group_config(self, group_id: str, values: Dict[str, int]) -> None:
        """The group's whole set of dynamic configs, checked ({}: none). A group that
        exists takes them at once for what the member table answers alone: each
        consumer-protocol member's session timeout (in force from its next heartbeat, as
        in Kafka) and its cached steady answer (the new interval)."""
        if values:
            self.group_configs[group_id] = dict(values)
        else:
            self.group_configs.pop(group_id, None)
        group = self.logic._get_group(group_id)
        if group is None or group.consumer is None:
            return
        with group.rec:
            cg = group.consumer
            if cg is None:
                return
            session = self.session_ms(group_id)
            for member in cg.members.values():
                if member.classic is None and member.slot >= 0:
                    self.logic.table.set_session_timeout(member.slot, session)
                    self._settle(group, member)

    # ======================================================================
    # ConsumerGroupHeartbeat
    # ======================================================================
    def heartbeat(self, group_id, member_id, member_epoch, instance_id, rack_id,
                  rebalance_timeout_ms, topic_names, topic_regex, server_assignor, owned,
                  client_id, client_host, callback, topic_filter=None) -> None:
        logic = self.logic
        try:
            # (Kafka 4: a coordinator that is not active answers before any validation)
            if not logic.table.active:
                raise _Refused(Errors.COORDINATOR_NOT_AVAILABLE, "")
            self._check_request(group_id, member_id, member_epoch, instance_id, rack_id,
                                rebalance_timeout_ms, topic_names, topic_regex,
                                server_assignor, owned)
            # (_find_group: an existing group's record knows its shard, so its id is
            # not hashed again)
            error, _ = logic._find_group(group_id, False)
            if error != Errors.NONE:
                raise _Refused(error, "")
            if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                group = self._consumer_group(group_id)
                with group.rec:
                    result = None
                    try:
                        result = self._leave(group, member_id, member_epoch, instance_id)
                        self._persist(group, result, callback)
                    finally:
                        self._publish(group, result)
                    return
            else:
                group, made = self._group_for_heartbeat(group_id, member_epoch, topic_regex)
                with group.rec:
                    if group.consumer is None or logic._get_group(group_id) is not group:
                        raise _Refused(Errors.COORDINATOR_NOT_AVAILABLE, "")   # raced away
                    result = None
                    try:
                        result = self._heartbeat(
                            group, member_id, member_epoch, instance_id, rack_id,
                            rebalance_timeout_ms, topic_names, topic_regex, server_assignor,
                            owned, client_id, client_host, topic_filter)
                        self._persist(group, result, callback)
                    except _TargetFailed:
                        self._go_back(group)
                        raise
                    except _Refused:
                        if made:
                            self._unmake(group)
                        raise
                    finally:
                        self._publish(group, result)
                    return
        except _Refused as refused:
            result = ConsumerGroupHeartbeatResult(refused.error, refused.message or None)
        logic._emit_one(callback, result)

    def _check_request(self, group_id, member_id, member_epoch, instance_id, rack_id,
                       rebalance_timeout_ms, topic_names, topic_regex, server_assignor,
                       owned) -> None:
        """Kafka's request validation: INVALID_REQUEST with its message, or
        UNSUPPORTED_ASSIGNOR. A blank string counts as empty, as Kafka trims."""
        invalid = Errors.INVALID_REQUEST
        if member_epoch > 0 or member_epoch == LEAVE_EPOCH:
            if not member_id.strip():
                raise _Refused(invalid, "MemberId can't be empty.")
        if not group_id.strip():
            raise _Refused(invalid, "GroupId can't be empty.")
        if instance_id is not None and not instance_id.strip():
            raise _Refused(invalid, "InstanceId can't be empty.")
        if rack_id is not None and not rack_id.strip():
            raise _Refused(invalid, "RackId can't be empty.")
        if member_epoch == 0:
            if rebalance_timeout_ms == -1:
                raise _Refused(invalid, "RebalanceTimeoutMs must be provided in first request.")
            # (any topic entry counts, even one listing no partition: Kafka refuses a
            # non-empty TopicPartitions array whatever its entries hold)
            if owned is None or len(owned):
                raise _Refused(invalid, "TopicPartitions must be empty when (re-)joining.")
            if topic_names is None and topic_regex is None:
                raise _Refused(invalid, "Either SubscribedTopicNames or SubscribedTopicRegex "
                                        "must be non-null when (re-)joining.")
        elif member_epoch == STATIC_LEAVE_EPOCH:
            if instance_id is None:
                raise _Refused(invalid, "InstanceId can't be null.")
        elif member_epoch < STATIC_LEAVE_EPOCH:
            raise _Refused(invalid, "MemberEpoch is invalid.")
        if server_assignor is not None and server_assignor not in self.assignors:
            raise _Refused(Errors.UNSUPPORTED_ASSIGNOR,
                           f"ServerAssignor {server_assignor} is not supported. Supported "
                           f"assignors: {', '.join(self.assignors)}.")

    def _consumer_group(self, group_id):
        group = self.logic._get_group(group_id)
        if group is None:
            raise _Refused(Errors.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        if group.consumer is None:
            raise _Refused(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        return group

    def _group_for_heartbeat(self, group_id, member_epoch, topic_regex=None):
        """Kafka's getOrMaybeCreateConsumerGroup: a join (epoch 0) creates the group,
        takes over an empty classic group (its offsets stay), or converts a classic group
        with members when the migration policy allows (MixedGroups.upgrade); anything
        else needs a consumer group. A conversion is checked before it is made against
        what would refuse the join after it (an invalid `topic_regex`): Kafka's
        conversion goes with the refused request's records, the group left classic.
        Returns (group, made): made when this call created the group or took over an
        empty classic group, which a refused join undoes (_unmake)."""
        logic = self.logic
        if member_epoch != 0:
            return self._consumer_group(group_id), False
        group = logic._get_group(group_id)
        created = group is None
        made = created
        if created:
            group = logic._create_group(group_id)
        with group.rec:
            if group.consumer is None:
                if group.members:
                    self.mixed.upgrade(group, None if not topic_regex
                                       else lambda: _check_regex(topic_regex))
                else:
                    # (Kafka's classic group is empty without members: the members
                    # pending a second join are dropped with it)
                    came_from = None if created else ClassicOrigin(
                        logic.classic_record(group), False, {}, {})
                    for slot in group.pending.values():
                        logic._release_slot(slot)
                    group.pending.clear()
                    logic.make_consumer_group(group)
                    group.consumer.came_from = came_from
                    made = True
        return group, made

    def _unmake(self, group) -> None:
        """Undo what a refused join's _group_for_heartbeat made, as Kafka adds a group
        only when the join's records are replayed: a group it created is removed, an
        empty classic group it took over is that classic group again (its offsets
        with it). Nothing was stored of either. Caller holds the group's lock."""
        cg = group.consumer
        if cg is None or cg.members:
            return
        if cg.came_from is not None:
            self._back_to_classic(group, cg.came_from)
        else:
            self.logic._remove_if_unused(group, tombstone=False)

    def _heartbeat(self, group, member_id, member_epoch, instance_id, rack_id,
                   rebalance_timeout_ms, topic_names, topic_regex, server_assignor, owned,
                   client_id, client_host, topic_filter=None) -> ConsumerGroupHeartbeatResult:
        cg = group.consumer
        if is_full(cg, self.config.group_consumer_max_size, member_id, instance_id):
            raise _Refused(Errors.GROUP_MAX_SIZE_REACHED,
                           "The consumer group has reached its maximum capacity of "
                           f"{self.config.group_consumer_max_size} members.")
        if not member_id:
            member_id = self._new_member_id(client_id)
        joining = member_epoch == 0
        replaced = None         # the static member this one replaces
        if instance_id is None:
            member = cg.members.get(member_id)
            if member is None:
                if not joining:
                    raise _Refused(Errors.UNKNOWN_MEMBER_ID,
                                   f"Member {member_id} is not a member of group {group.group_id}.")
                member = ConsumerMember(member_id)
            elif not joining:
                _check_member_epoch(member, member_epoch, owned)
        else:
            member, replaced = static_member(cg, member_id, instance_id, joining)
            if not joining:
                _check_member_epoch(member, member_epoch, owned)
        # A regex no other member subscribes to is checked (RE2 syntax) before anything
        # changes, the group's regexes then resolved: a refused heartbeat changes
        # nothing (Kafka validates the member and its regex first and resolves apart),
        # and a resolution that bumps the epoch is written with this heartbeat's record
        if topic_regex and topic_regex != member.topic_regex \
                and _new_to_group(cg, member, topic_regex):
            _check_regex(topic_regex)
        self._maybe_resolve_regexes(group, topic_filter)

        # 1. the member, updated with what the request says (None: unchanged)
        updated = member.copy()
        if instance_id is not None:
            updated.instance_id = instance_id
        if rack_id is not None:
            updated.rack_id = rack_id
        if rebalance_timeout_ms != -1:
            updated.rebalance_timeout_ms = rebalance_timeout_ms
        if server_assignor is not None:
            updated.server_assignor = server_assignor
        if topic_names is not None:
            updated.topic_names = shared_topic_names(cg, topic_names)
        if topic_regex is not None:
            updated.topic_regex = topic_regex or None
        updated.client_id = client_id
        updated.client_host = client_host
        if updated.classic is not None:
            # it now speaks the consumer protocol (a classic static member's successor):
            # no classic metadata, join or sync deadline
            updated.classic = None
            self._cancel_timers(updated)

        self.update_member(group, member, updated, replaced, owned)
        # (the group's session timeout, which a config may have changed, and which a
        # classic member's slot, taken over by this one, did not have)
        self.logic.table.set_session_timeout(updated.slot, self.session_ms(group.group_id))
        self.logic.table.touch(updated.slot)
        full = joining or (rebalance_timeout_ms != -1 and owned is not None
                           and (topic_names is not None or topic_regex is not None))
        # The assignment goes out on a full request (a join, or one after an error: every
        # field set, the subscription by names or by regex) or when it changed since the
        # member's last answer
        assignment = _sorted_lists(updated.assigned) \
            if full or updated.assigned != member.assigned else None
        return ConsumerGroupHeartbeatResult(
            Errors.NONE, None, updated.member_id, updated.member_epoch,
            self.interval_ms(group.group_id), assignment)

    def update_member(self, group, member, updated, replaced, owned) -> None:
        """Put `updated` in place of `member` (or of `replaced`, the static member it takes
        over), bump the group epoch when the subscriptions or the subscribed topics
        changed, recompute the target assignment when the epoch moved past it, and
        move the member one reconciliation step towards its target, `owned` being what
        it says it owns (Kafka's steps 1 to 3 of a heartbeat, and of a classic member's
        JoinGroup). Caller holds the group's lock."""
        cg = group.consumer
        # 1. the member; the group epoch bumped when the subscriptions changed
        bump = cg.group_epoch == 0
        subscription_changed = updated.topic_names != member.topic_names \
            or updated.topic_regex != member.topic_regex
        if updated.topic_names != member.topic_names:
            bump = True
        bump |= self._regex_changed(cg, member, updated)
        # The assignor the group uses may change with this member's preference (the
        # one most members ask for): a new choice makes a new target (KAFKA-20434)
        preferred = None
        if not bump and updated.server_assignor != member.server_assignor:
            preferred = self._preferred_assignor(cg)
        self._install(group, member, updated, replaced)
        # (a regex the member, or the static member it took over, no longer subscribes
        # to may have had no other subscriber)
        if cg.resolved:
            left = {m.topic_regex for m in (member, replaced) if m is not None} \
                - {None, updated.topic_regex}
            if left:
                cg.forget_unused_regexes(left)
        if preferred is not None and self._preferred_assignor(cg) != preferred:
            bump = True
        if bump or cg.topics_version != self.topics_version:
            if self._refresh_metadata(cg):
                bump = True
        if bump:
            cg.group_epoch += 1
            log.info("consumer group %s: group epoch bumped to %d", group.group_id,
                     cg.group_epoch)

        # 2. the target assignment, when the group epoch moved past it
        if cg.group_epoch > cg.assignment_epoch:
            self._update_target(group)

        # 3. one reconciliation step towards the member's target
        self._reconcile(group, updated, owned, subscription_changed)

    def _new_member_id(self, client_id: str) -> str:
        factory = self.member_id_factory
        return kafka_uuid() if factory is None else factory(client_id)

    def _install(self, group, member, updated, replaced) -> None:
        """Put `updated` in the group in place of `member` (or of `replaced`, the static
        member it takes over: its target, partitions and session move to the new id)."""
        cg = group.consumer
        logic = self.logic
        changed = replaced is not None or updated.slot < 0 or not _same_metadata(member, updated)
        unmoved = False
        if replaced is not None:
            overwritten = cg.members.get(updated.member_id)
            if overwritten is not None and overwritten is not replaced:
                # Kafka's replaceMember writes the new member's records under its id:
                # another member holding that id is overwritten, with no epoch bump of
                # its own, and nothing of it (its session above all) outlives it to
                # fence the member that now has the id
                self._drop(cg, overwritten)
                log.info("consumer group %s: member %s overwritten by a static member's "
                         "takeover under its id", group.group_id, overwritten.member_id)
            self._cancel_timers(replaced)
            updated.join_timer = updated.sync_timer = None
            del cg.members[replaced.member_id]
            target = cg.target.pop(replaced.member_id, None)
            if target is not None:
                cg.target[updated.member_id] = target
            logic.owners[replaced.slot] = (group, updated.member_id)
            updated.slot = replaced.slot
            logic.table.consumer_bind(updated.slot, updated.member_id)
            updated.rebalance_timer = None
            cg.release(replaced)
            log.info("consumer group %s: static member %s (instance %s) replaced by %s",
                     group.group_id, replaced.member_id, replaced.instance_id,
                     updated.member_id)
        elif updated.slot < 0:
            session = self.session_ms(group.group_id)
            updated.slot = logic.table.alloc(group.rec, updated.member_id, session,
                                             logic.clock.now_ms() + session, True)
            logic.table.consumer_bind(updated.slot, updated.member_id)
            logic.owners[updated.slot] = (group, updated.member_id)
            log.info("consumer group %s: member %s joins", group.group_id, updated.member_id)
        elif member is not updated:
            # (a heartbeat that leaves the member's partitions and epoch as they were:
            # releasing and owning them again would change nothing, `owners` being
            # keyed by partition; the steady heartbeat's case)
            unmoved = updated.assigned is member.assigned \
                and updated.revoking is member.revoking \
                and updated.member_epoch == member.member_epoch
            if not unmoved:
                cg.release(member)
        cg.members[updated.member_id] = updated
        old_instance = member.instance_id
        if old_instance is not None and old_instance != updated.instance_id \
                and cg.static.get(old_instance) == member.member_id:
            del cg.static[old_instance]     # (a member that joined again as another instance)
        if updated.instance_id is not None:
            cg.static[updated.instance_id] = updated.member_id
        if not unmoved:
            cg.own(updated)
        if replaced is not None:
            cg.dirty.add(replaced.member_id)
        if changed:
            cg.dirty.add(updated.member_id)
        group.version = logic.next_version()

    def _regex_changed(self, cg, member, updated) -> bool:
        """Kafka's maybeUpdateRegularExpressions: a regex new to the group (checked by
        _heartbeat) is resolved at the group's next heartbeat (Kafka resolves
        asynchronously); one that other members already resolved, or clearing the regex
        (what the member subscribes to is then known), bumps the epoch at once."""
        old, new = member.topic_regex, updated.topic_regex
        if old == new:
            return False
        if not new:
            return True
        if not _new_to_group(cg, member, new):
            return new in cg.resolved
        cg.regex_refresh = True     # (_heartbeat checked it)
        return False

    def _maybe_resolve_regexes(self, group, topic_filter=None) -> None:
        """Resolve the group's regexes against the topics when one is new or the topics
        changed since, at most once per REGEX_BATCH_MIN_INTERVAL_MS (until then the
        group waits, off the fast path); a change of what they match bumps the group
        epoch. With `topic_filter`, the heartbeat's sender's Describe rights, only the
        topics it passes are matched: Kafka resolves a group's regexes with the rights
        of the request that triggers the resolution (KAFKA-18813), so a regex never
        reaches a topic its subscriber could not name."""
        cg = group.consumer
        regexes = cg.regexes()
        stale = any(r not in cg.resolved for r in regexes)
        if not regexes or not (cg.regex_refresh or stale
                               or cg.regex_topics_version != self.topics_version):
            if not regexes:
                cg.resolved.clear()
            return
        now = self.logic.clock.now_ms()
        # (Kafka's last resolution time is that of the resolutions it keeps, which are
        # of regexes still subscribed: a group whose regexes are all new does not wait)
        if cg.regex_resolved_ms is not None and any(r in cg.resolved for r in regexes) \
                and now <= cg.regex_resolved_ms + REGEX_BATCH_MIN_INTERVAL_MS:
            # Kafka resolves a group's regexes at most once per this interval, whatever
            # asks: the group stays off the fast path, and a heartbeat after it resolves
            cg.regex_refresh = True
            return
        cg.regex_refresh = False
        cg.regex_resolved_ms = now
        cg.regex_topics_version = self.topics_version
        resolved = {}
        names = _describable(self.topics, topic_filter, group.group_id)
        for regex in regexes:
            try:
                pattern = _compile_regex(regex)
            except re2.error:
                log.error("consumer group %s: regex %r no longer compiles; ignored",
                          group.group_id, regex)
                resolved[regex] = _NO_TOPICS
                continue
            resolved[regex] = frozenset(t for t in names if pattern.fullmatch(t))
        # (Kafka's handleRegularExpressionsResult: a regex whose topics differ from its
        # last resolution, none for a new one, bumps the epoch even when other members
        # subscribe to those topics by name; so does a change of the subscribed topics'
        # metadata)
        changed = any(topics != cg.resolved.get(regex, _NO_TOPICS)
                      for regex, topics in resolved.items())
        cg.resolved = resolved
        self._schedule_regex_refresh(group)
        if self._refresh_metadata(cg) or changed:
            cg.group_epoch += 1
            log.info("consumer group %s: regexes resolved, group epoch bumped to %d",
                     group.group_id, cg.group_epoch)

    def _schedule_regex_refresh(self, group) -> None:
        """Kafka's periodic regex refresh (group.consumer.regex.refresh.interval.ms): once
        the interval has passed since this resolution the group's next heartbeat resolves
        its regexes again, so rights granted or revoked since take effect without a topics
        change. The timer only marks the group; the heartbeat (taken off the table's fast
        path: the group is no longer quiet) does the work. Caller holds the group's lock."""
        cg = group.consumer
        handle = cg.regex_timer
        if handle is not None:
            cg.regex_timer = None
            handle.cancel()
        logic = self.logic

        def due() -> None:
            with group.rec:
                if group.consumer is cg and cg.regex_timer is timer:
                    cg.regex_timer = None
                    if cg.regexes():
                        cg.regex_refresh = True
                        self._publish_quiet(group)
            logic.flush()

        timer = logic.timer.schedule(self.config.group_consumer_regex_refresh_interval_ms, due)
        cg.regex_timer = timer

    def _refresh_metadata(self, cg) -> bool:
        """Recompute the subscribed topics' partition counts; True when they changed."""
        topics = self.topics
        metadata = {t: topics[t] for t in cg.all_subscribed_topics() if t in topics}
        cg.topics_version = self.topics_version
        if metadata == cg.metadata:
            return False
        cg.metadata = metadata
        return True

    def _preferred_assignor(self, cg) -> str:
        """The assignor most members ask for (ties: the first by name), else the default."""
        return self._preferred_of(m.server_assignor for m in cg.members.values())

    def _preferred_of(self, asked) -> str:
        """_preferred_assignor over the members' asked assignors (None: none asked)."""
        counts: Dict[str, int] = {}
        for name in asked:
            if name is not None:
                counts[name] = counts.get(name, 0) + 1
        if not counts:
            return self.assignors[0]
        return min(counts, key=lambda name: (-counts[name], name))

    def _update_target(self, group) -> None:
        cg = group.consumer
        members = [(m.member_id, m.rack_id, cg.subscribed_topics(m))
                   for m in cg.members.values()]
        name = self._preferred_assignor(cg)
        old = cg.target
        try:
            target = self.assign(name, members, cg.metadata, old)
        except Exception as exc:
            # (Kafka fails the heartbeat with UNKNOWN_SERVER_ERROR; the group keeps its
            # old target and the next heartbeat tries again, the epoch still ahead)
            # (every heartbeat of the group fails the same way until it changes: one
            # line, with its traceback, per interval and assignor)
            _log_once.error(("assignor failed", name), "consumer group %s: assignor %s failed "
                            "for epoch %d", group.group_id, name, cg.group_epoch, exc_info=True)
            raise _TargetFailed(Errors.UNKNOWN_SERVER_ERROR,
                                f"Failed to compute a new target assignment for epoch "
                                f"{cg.group_epoch}: {exc}.") from None
        cg.target = target
        for member_id, target in cg.target.items():
            if old.get(member_id) != target:
                cg.dirty.add(member_id)
        cg.assignment_epoch = cg.group_epoch
        log.info("consumer group %s: target assignment for epoch %d computed by %s",
                 group.group_id, cg.group_epoch, name)

    # ======================================================================
    # reconciliation (Kafka's CurrentAssignmentBuilder)
    # ======================================================================
    def _reconcile(self, group, member, owned, subscription_changed=False) -> None:
        cg = group.consumer
        epoch = cg.assignment_epoch
        if member.is_reconciled_to(epoch) or (member.state == UNREVOKED_PARTITIONS
                                               and _owns_any(owned, member.revoking)):
            # Nothing moves (it is at its target, or has not revoked yet), but a
            # subscription that changed without a new target (a new regex, resolved
            # later) takes the topics no longer subscribed from it at once
            if subscription_changed:
                self._drop_unsubscribed(group, member, owned)
            return
        target = _as_sets(cg.target.get(member.member_id, {}))
        subscribed = cg.subscribed_topics(member)
        owners = cg.owners
        assigned: Dict[str, FrozenSet[int]] = {}
        revoking: Dict[str, FrozenSet[int]] = {}
        pending: Dict[str, FrozenSet[int]] = {}
        unreleased = False
        for topic in set(target) | set(member.assigned):
            wanted = target.get(topic, frozenset()) if topic in subscribed else frozenset()
            current = member.assigned.get(topic, frozenset())
            kept = current & wanted
            if kept:
                assigned[topic] = kept
            if current - kept:
                revoking[topic] = current - kept
            mine = member.revoking.get(topic, frozenset())
            free = set()
            for p in wanted - kept:
                if (topic, p) in owners and p not in mine:
                    unreleased = True
                else:
                    free.add(p)
            if free:
                pending[topic] = frozenset(free)
        previous = (member.state, member.member_epoch, member.previous_epoch, member.assigned,
                    member.revoking, member.assignment_epochs)
        cg.release(member)
        # (Kafka's updateMemberEpoch: each step's previous epoch is the epoch the member
        # had before it, moved or not, so a lost answer is tolerated until the next step)
        member.previous_epoch = member.member_epoch
        if revoking and _owns_any(owned, revoking):
            member.state = UNREVOKED_PARTITIONS
            member.assignment_epochs = _kept_epochs(member, (assigned, revoking))
            member.assigned, member.revoking = assigned, revoking
            # (the member keeps its epoch until it has revoked)
        else:
            epochs = _kept_epochs(member, (assigned,))
            for topic, ps in pending.items():
                assigned[topic] = assigned.get(topic, frozenset()) | ps
                # (newly assigned partitions come at the epoch the member moves to)
                epochs.setdefault(topic, {}).update(dict.fromkeys(ps, epoch))
            member.state = UNRELEASED_PARTITIONS if unreleased else STABLE
            member.member_epoch = epoch
            member.assignment_epochs = epochs
            member.assigned, member.revoking = assigned, {}
        cg.own(member)
        if (member.state, member.member_epoch, member.previous_epoch, member.assigned,
                member.revoking, member.assignment_epochs) != previous:
            cg.dirty.add(member.member_id)
            group.version = self.logic.next_version()
            # (a member of the classic protocol has its join and sync deadlines instead)
            if member.state == UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(group, member)
            else:
                self._cancel_rebalance_timeout(member)

    def _drop_unsubscribed(self, group, member, owned) -> None:
        """Kafka's CurrentAssignmentBuilder.updateCurrentAssignment: the member's
        partitions of topics it no longer subscribes to are revoked, at its epoch; it
        must confirm (UNREVOKED_PARTITIONS) unless `owned` shows they are gone already."""
        cg = group.consumer
        subscribed = cg.subscribed_topics(member)
        dropped = [t for t in member.assigned if t not in subscribed]
        if not dropped:
            # (the member is rebuilt all the same: its previous epoch is its epoch now)
            if member.previous_epoch != member.member_epoch:
                member.previous_epoch = member.member_epoch
                cg.dirty.add(member.member_id)
            return
        assigned = {t: ps for t, ps in member.assigned.items() if t in subscribed}
        revoking = dict(member.revoking)
        for topic in dropped:
            revoking[topic] = revoking.get(topic, frozenset()) | member.assigned[topic]
        cg.release(member)
        if _owns_any(owned, revoking):
            member.state = UNREVOKED_PARTITIONS
            member.revoking = revoking
        member.assignment_epochs = _kept_epochs(member, (assigned, member.revoking))
        member.assigned = assigned
        member.previous_epoch = member.member_epoch
        cg.own(member)
        cg.dirty.add(member.member_id)
        group.version = self.logic.next_version()
        if member.state == UNREVOKED_PARTITIONS and member.classic is None:
            self._schedule_rebalance_timeout(group, member)

    # ======================================================================
    # leaving, fencing, timeouts
    # ======================================================================
    def _leave(self, group, member_id, member_epoch, instance_id) -> ConsumerGroupHeartbeatResult:
        cg = group.consumer
        if instance_id is None:
            member = cg.members.get(member_id)
            if member is None:
                raise _Refused(Errors.UNKNOWN_MEMBER_ID,
                               f"Member {member_id} is not a member of group {group.group_id}.")
            log.info("consumer group %s: member %s left", group.group_id, member_id)
            self.fence(group, member)
            return ConsumerGroupHeartbeatResult(Errors.NONE, None, member_id, member_epoch)
        current = cg.static.get(instance_id)
        if current is None:
            raise _Refused(Errors.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        member = cg.members[current]
        if current != member_id:
            raise _Refused(Errors.FENCED_INSTANCE_ID,
                           f"Static member {member_id} with instance id {instance_id} was "
                           f"fenced by member {current}.")
        if member_epoch == STATIC_LEAVE_EPOCH:
            # Leaves for now: it keeps its partitions (owned at epoch -2) for a
            # replacement with its instance id until its session times out
            log.info("consumer group %s: static member %s (instance %s) left for now",
                     group.group_id, member_id, instance_id)
            cg.release(member)
            member.member_epoch = STATIC_LEAVE_EPOCH
            member.revoking = {}
            cg.own(member)
            cg.dirty.add(member_id)
            self._cancel_rebalance_timeout(member)
            group.version = self.logic.next_version()
            return ConsumerGroupHeartbeatResult(Errors.NONE, None, member_id, STATIC_LEAVE_EPOCH)
        log.info("consumer group %s: static member %s (instance %s) left", group.group_id,
                 member_id, instance_id)
        self.fence(group, member)
        return ConsumerGroupHeartbeatResult(Errors.NONE, None, member_id, member_epoch)

    def fence(self, group, member) -> None:
        """Remove a member and bump the group epoch (Kafka's consumerGroupFenceMember);
        or, when every other member uses the classic protocol and the migration policy
        allows, make the group a classic one without it (MixedGroups.maybe_downgrade:
        `group.consumer` is None after). Caller holds the group's lock."""
        if self.mixed.maybe_downgrade(group, (member.member_id,)):
            return
        self.remove(group, member)

    def remove(self, group, member, bump: bool = True) -> None:
        """Remove a member and bump the group epoch (unless not `bump`: the caller bumps
        it once for several). Caller holds the group's lock."""
        cg = group.consumer
        self._drop(cg, member)
        cg.dirty.add(member.member_id)
        self._refresh_metadata(cg)
        if bump:
            bump_after_removal(cg)
        group.version = self.logic.next_version()
        if not cg.members:
            group.empty_since_ms = self.logic.commit_time_ms()

    def _drop(self, cg, member) -> None:
        """`member` out of `cg` with what it holds: timers, partitions, target, instance
        id and member-table slot. Caller holds the group's lock."""
        self._cancel_timers(member)
        cg.release(member)
        del cg.members[member.member_id]
        cg.target.pop(member.member_id, None)
        if member.instance_id is not None and cg.static.get(member.instance_id) == member.member_id:
            del cg.static[member.instance_id]
        if member.slot >= 0:
            self.logic._release_slot(member.slot)
            member.slot = -1
        if member.topic_regex:
            cg.forget_unused_regexes((member.topic_regex,))

    def on_session_deadline(self, group, member_id: str) -> None:
        """The member's session deadline passed without a heartbeat. Caller holds the
        group's lock."""
        member = group.consumer.members.get(member_id)
        if member is not None:
            log.info("consumer group %s: member %s failed its session; fenced",
                     group.group_id, member_id)
            self.fence(group, member)
            self._persist(group, None, None)

    def _schedule_rebalance_timeout(self, group, member, delay_ms=None) -> None:
        """Fence the member if it still revokes at this epoch once its rebalance timeout
        (or `delay_ms`) passed. Caller holds the group's lock."""
        self._cancel_rebalance_timeout(member)
        epoch = member.member_epoch
        member_id = member.member_id
        logic = self.logic

        def expire() -> None:
            with group.rec:
                current = group.consumer.members.get(member_id) \
                    if group.consumer is not None else None
                if current is not None and current.state == UNREVOKED_PARTITIONS \
                        and current.member_epoch == epoch:
                    log.info("consumer group %s: member %s did not revoke within its "
                             "rebalance timeout; fenced", group.group_id, member_id)
                    current.rebalance_timer = None
                    self.fence(group, current)
                    self._persist(group, None, None)
            logic.flush()

        delay = member.rebalance_timeout_ms if delay_ms is None else delay_ms
        member.rebalance_timer = logic.timer.schedule(max(delay, 0), expire)

    @staticmethod
    def _cancel_rebalance_timeout(member) -> None:
        handle = member.rebalance_timer
        if handle is not None:
            member.rebalance_timer = None
            handle.cancel()

    def _cancel_timers(self, member) -> None:
        """Every deadline of the member: revocation, and a classic member's join and sync."""
        self._cancel_rebalance_timeout(member)
        for handle in (member.join_timer, member.sync_timer):
            if handle is not None:
                handle.cancel()
        member.join_timer = member.sync_timer = None

    # ======================================================================
    # durability: the group's changes go to the store before the answer
    # ======================================================================
    def _persist(self, group, result, callback, on_error=None) -> None:
        """Give the store what changed in the group (a record of the changed members
        and the group's epochs; everything after a failed write), then answer
        `callback` once the store confirms, as Kafka answers once its records are
        committed; a failed write answers `on_error(error)` (default: a heartbeat's
        error). A group that this request downgraded answers once the store answers
        the downgrade's classic record (MixedGroups._downgrade_stored). A store without
        `store_consumer_group` keeps no consumer group state: the answer goes at once.
        Caller holds the group's lock."""
        cg = group.consumer
        logic = self.logic
        self._publish_quiet(group)
        if cg is None and group.downgrade is not None and callback is not None:
            group.downgrade.waiting.append((callback, result, on_error))   # downgraded
            return
        write = getattr(logic.store, "store_consumer_group", None)
        if write is None or cg is None or not cg.unwritten():
            if callback is not None:
                logic._emit_one(callback, result)
            return
        cg.write_seq += 1
        seq = cg.write_seq
        if seq > self.last_seq:
            self.last_seq = seq
        whole = cg.dirty_all
        record = consumer_record(cg, None if whole else cg.dirty)
        cg.dirty = set()
        cg.dirty_all = False
        cg.written_epochs = (cg.group_epoch, cg.assignment_epoch)
        cg.live[seq] = record
        group_id = group.group_id

        def stored(error) -> None:
            why = "the store refused a write"
            with group.rec:
                if error == Errors.NONE:
                    if whole or cg.stored_seq == seq - 1:
                        cg.stored_seq = max(cg.stored_seq, seq)
                        _commit(cg, seq, record)
                    else:
                        # made on top of a record the store lost (or has not confirmed
                        # yet): as Kafka never answers a write after a failed one, this
                        # one fails too; the store's fold refuses it (consumer_records)
                        error = Errors.NOT_COORDINATOR
                        why = "a write followed one the store did not take"
                # (a group that left the coordinator meanwhile, its shard unloaded or
                # the group deleted, is not brought back: its members would hold slots
                # of a group no longer in the table)
                if error != Errors.NONE and group.consumer is cg \
                        and logic.table.groups.get(group_id) is group.rec:
                    cg.dirty_all = True
                    logic.table.consumer_quiet(group.rec, 0, -1)        # the next writes all
                    self._revert(group, seq)
            if error != Errors.NONE:
                _log_once.warning(("store refused", group_id), "consumer group %s: %s (%s); "
                                  "the next write carries the whole group", group_id, why,
                                  error.name)
            if callback is not None:
                self._answer_stored(callback, result, on_error, error)

        logic._emit(write, group_id, record, stored)

    @staticmethod
    def _answer_stored(callback, result, on_error, error) -> None:
        """Answer a request whose write the store answered `error`: its result, or
        `on_error(error)` (default: a heartbeat's error)."""
        if error == Errors.NONE:
            callback(result)
        elif on_error is not None:
            callback(on_error(error))
        else:
            callback(ConsumerGroupHeartbeatResult(error, "the write of the group's state failed"))

    def _revert(self, group, seq: int) -> None:
        """Record `seq` of the group failed: as Kafka reverts a failed append, the group
        goes back to what the store holds with the records before it (should they be
        confirmed), unless a whole record written since stands for it (the group in
        memory is then that record's, with what followed it). The records after it up
        to such a whole one are no longer live: each fails as it comes back. Caller
        holds the group's lock; the group is still `group.consumer`."""
        cg = group.consumer
        live = cg.live
        if live.pop(seq, None) is None:
            return              # reverted already, with the record it followed
        for later in sorted(s for s in live if s > seq):
            if live[later]["full"]:
                return
            del live[later]
        self._go_back(group)

    def _go_back(self, group) -> None:
        """The group back to what the store holds with every live record applied (a
        failed write's, or a refused heartbeat's, changes undone); with nothing stored
        of it, the classic group it was made from or no group at all. (A mixed group's
        classic members come back as a load brings them: their joins and syncs are
        answered at once, never parked on the group's state.) Caller holds the group's
        lock."""
        cg = group.consumer
        if cg is None or getattr(self.logic.store, "store_consumer_group", None) is None:
            return
        state = committed_state(cg.committed)
        for earlier in sorted(cg.live):
            state = fold_consumer_record(state, cg.live[earlier])
        if state is None and cg.came_from is not None:
            _log_once.info(("reverted", group.group_id), "consumer group %s: back to the "
                           "classic group it was made from", group.group_id)
            self._back_to_classic(group, cg.came_from)
            return
        _log_once.info(("reverted", group.group_id), "consumer group %s: back to its stored "
                       "state (epoch %s)", group.group_id,
                       0 if state is None else state["group_epoch"])
        self.restore(group, state)
        if state is None:
            # As Kafka's group that never was: gone, unless offsets were committed to it
            # meanwhile (they are the group's to keep). The store holds nothing of it.
            self.logic._remove_if_unused(group, tombstone=False)

    def _back_to_classic(self, group, origin: ClassicOrigin) -> None:
        """The group made from a classic group with nothing of its own stored is that
        classic group again, as Kafka's conversion goes with a failed append: its record
        installed as a load installs it (members Stable), then each member given back
        every protocol it offered and the end its session had before the conversion, as
        Kafka's classic group and its session timers outlive a conversion that fails. A
        group that was rebalancing rebalances again: its members' parked joins and
        syncs were answered REBALANCE_IN_PROGRESS at the conversion. Caller holds the
        lock."""
        logic = self.logic
        table = logic.table
        self.forget_all(group)
        logic._make_classic_group(group)
        logic.install_classic_record(group, origin.record)
        for member_id, member in group.members.items():
            protocols = origin.protocols.get(member_id)
            if protocols is not None:
                group.update_member(member, protocols, member.rebalance_timeout_ms,
                                    member.session_timeout_ms, None)
            ends = origin.sessions.get(member_id)
            if ends is not None:
                table.set_deadline(member.slot, ends)
        if origin.rebalancing and group.members:
            logic._maybe_prepare_rebalance(group)

    def restore(self, group, state: Optional[dict]) -> None:
        """The group becomes `state` (a full record; None: empty at epoch 0), as a
        restart would load it: its members as recorded, each with a new slot, the
        topics' metadata and the regexes to recompute. A member that was in the group,
        of either protocol, keeps the end of its session and its deadlines to revoke,
        rejoin or sync (Kafka's timers are not part of what it reverts); any other
        member's session starts now, and its rebalance timeout if it revokes. Its store
        bookkeeping (numbers, committed, live) stays; its next record is whole. Caller
        holds the lock."""
        cg = group.consumer
        table = self.logic.table
        now = self.logic.clock.now_ms()
        sessions = {m.member_id: table.deadline(m.slot) for m in cg.members.values()
                    if m.slot >= 0}
        timers = {m.member_id: (_deadline(m.rebalance_timer), _deadline(m.join_timer),
                                _deadline(m.sync_timer)) for m in cg.members.values()}
        self.forget_all(group)
        cg.target.clear()
        cg.regex_refresh = False
        cg.regex_resolved_ms = None
        cg.regex_topics_version = -1
        if state is None:
            cg.group_epoch = cg.assignment_epoch = 0
            cg.metadata = {}
            cg.resolved = {}
            group.empty_since_ms = self.logic.commit_time_ms()
            group.version = self.logic.next_version()
        else:
            self._install_record(group, cg, state)
        cg.dirty = set()
        cg.dirty_all = True
        table.consumer_quiet(group.rec, 0, -1)
        for member in cg.members.values():
            ends = sessions.get(member.member_id)
            if ends is not None:
                table.set_deadline(member.slot, ends)
            revoke_at, join_at, sync_at = timers.get(member.member_id, (None, None, None))
            if member.classic is not None:
                self.mixed.keep_deadlines(group, member, join_at, sync_at)
            elif member.state == UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(
                    group, member, None if revoke_at is None else revoke_at - now)

    # ======================================================================
    # the member table's fast path (MemberTable.consumer_heartbeat)
    # ======================================================================
    def _publish(self, group, result) -> None:
        """After a heartbeat (answered or refused), tell the member table what it may
        answer alone: the group's quiet point, and whether the member of `result` is
        settled. Caller holds the group's lock."""
        if group.consumer is None:
            return
        self._publish_quiet(group)
        member = None if result is None else group.consumer.members.get(result.member_id)
        if member is not None and member.slot >= 0:
            self._settle(group, member)

    def _publish_quiet(self, group) -> None:
        """The group is quiet at its epoch when its target is that epoch's and no regex
        waits to be resolved: a settled member's steady heartbeat then changes nothing
        but its session (a topics change is the table's topics version; a failed write
        unquiets the group where it is seen). Caller holds the group's lock."""
        cg = group.consumer
        if cg is None:          # (classic again, a downgrade: no consumer member is settled)
            self.logic.table.consumer_quiet(group.rec, 0, -1)
            return
        quiet = cg.members and cg.group_epoch == cg.assignment_epoch and not cg.regex_refresh
        self.logic.table.consumer_quiet(group.rec, cg.group_epoch if quiet else 0,
                                        cg.topics_version)

    def _settle(self, group, member) -> None:
        """A consumer-protocol member STABLE at its group's epoch (== the assignment
        epoch) is settled: its steady heartbeat's answer is cached in the table; any
        other is not."""
        cg = group.consumer
        epoch = member.member_epoch
        table = self.logic.table
        # (a member on the classic protocol is never settled: a ConsumerGroupHeartbeat
        # naming it moves it to the consumer protocol, the slow path's work)
        if member.state == STABLE and epoch > 0 and member.classic is None \
                and epoch == cg.group_epoch == cg.assignment_epoch:
            table.consumer_settle(member.slot, epoch, ConsumerGroupHeartbeatResult(
                Errors.NONE, None, member.member_id, epoch,
                self.interval_ms(group.group_id), None),
                member.client_id, member.client_host)
        else:
            table.consumer_unsettle(member.slot)

    def load(self, group, record: dict) -> None:
        """Install a consumer group read back from the store (consumer_record's fold).
        Sessions start when the shard finishes loading (on_loaded). Caller holds the
        group's lock; the group is new and empty."""
        cg = ConsumerGroupState()
        group.consumer = cg
        group.protocol_type = "consumer"
        seq = record.get("seq", 0)
        if type(seq) is not int or seq < 0:
            raise ValueError(f"consumer group {group.group_id!r}: seq is not a count: {seq!r}")
        cg.write_seq = cg.stored_seq = seq
        if seq > self.last_seq:
            self.last_seq = seq
        self._install_record(group, cg, record)
        cg.committed = commit_consumer_record(None, record)
        cg.dirty_all = False

    def _install_record(self, group, cg, record: dict) -> None:
        """The epochs, topics and members of the full record `record` into `cg`, which
        has no members: each member gets a slot with its session ending a session from
        now. Caller holds the group's lock."""
        logic = self.logic
        now = logic.clock.now_ms()
        cg.group_epoch = record["group_epoch"]
        cg.assignment_epoch = record["assignment_epoch"]
        cg.written_epochs = (cg.group_epoch, cg.assignment_epoch)
        cg.metadata = dict(record.get("metadata", {}))
        cg.resolved = {r: frozenset(ts) for r, ts in record.get("resolved", {}).items()}
        session = self.session_ms(group.group_id)
        for member_id, m in record["members"].items():
            member = ConsumerMember(member_id)
            fill_member(member, m)
            member.topic_names = shared_topic_names(cg, member.topic_names)
            if member.classic is not None:
                member_session = member.classic.session_timeout_ms
            else:
                member_session = session
            member.slot = logic.table.alloc(group.rec, member_id, member_session,
                                            now + member_session, True)
            logic.table.consumer_bind(member.slot, member_id)
            logic.owners[member.slot] = (group, member_id)
            cg.members[member_id] = member
            if member.instance_id is not None:
                cg.static[member.instance_id] = member_id
            target = m.get("target")
            if target:
                cg.target[member_id] = _sorted_tuples(target)
            cg.own(member)
        # (a record written before unused resolutions were dropped may still hold some)
        cg.forget_unused_regexes()
        # (the topics may have changed while the group was away: its next heartbeat
        # recomputes the subscribed topics' metadata, bumping the epoch only if it moved)
        cg.topics_version = -1
        group.version = logic.next_version()
        if not cg.members:
            written = record.get("written_ms")
            group.empty_since_ms = written if type(written) is int else logic.commit_time_ms()

    def on_loaded(self, group) -> None:
        """The shard finished loading: every member's session starts now, and a member
        still revoking, of either protocol, gets its rebalance timeout again (as Kafka's
        onLoaded). Caller holds the group's lock."""
        for member in group.consumer.members.values():
            self.logic.table.touch(member.slot)
            if member.state == UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(group, member)

    # ======================================================================
    # reads
    # ======================================================================
    def describe(self, group_ids) -> List[ConsumerGroupDescription]:
        logic = self.logic
        out = []
        for group_id in group_ids:
            # (an empty id is INVALID_GROUP_ID here, as Kafka's ConsumerGroupDescribe,
            # unless the coordinator is not active: every id is answered that first)
            if not logic.table.active:
                error, group = Errors.COORDINATOR_NOT_AVAILABLE, None
            else:
                error, group = logic._find_group(group_id, allow_empty=False)
            if error != Errors.NONE:
                out.append(ConsumerGroupDescription(error, group_id, "", -1, -1, "", []))
            elif group is None:
                out.append(_not_found(group_id, f"Group {group_id} not found."))
            else:
                with group.rec:
                    out.append(self._describe_group(group))
        return out

    def _describe_group(self, group) -> ConsumerGroupDescription:
        """ConsumerGroupDescribe's entry for a group the coordinator holds: as Kafka
        describes a group at the last committed offset, what the store confirmed (the
        group's `committed` copy), not the changes whose records are on their way. A
        group whose downgrade to classic is on its way is still the consumer group the
        store holds; one made from a classic group with nothing of its own confirmed is
        still that classic group. With a store that keeps no consumer group state the
        group in memory is described. Caller holds the group's lock."""
        group_id = group.group_id
        cg = group.consumer
        keeps_state = getattr(self.logic.store, "store_consumer_group", None) is not None
        if cg is None and group.downgrade is not None and keeps_state:
            cg = group.downgrade.cg
        if cg is None:
            # Kafka's message: its group lookup's, by whether a group of another type
            # holds the id
            return _not_found(group_id, f"Group {group_id} is not a consumer group.")
        if not keeps_state:
            return self.describe_live(group_id, cg)
        if group.consumer is cg and cg.committed is not None and not cg.live \
                and not cg.unwritten():
            # nothing on its way to the store, nothing left unwritten: the group in
            # memory is the committed copy (ConsumerGroupState's invariant), read
            # without unpacking the copy's members
            return self.describe_live(group_id, cg)
        return self.describe_stored(group, cg)

    def describe_stored(self, group, cg) -> ConsumerGroupDescription:
        """describe_committed's answer, with each member that no record on its way
        names and no change since left unwritten read from memory (it is the same
        there: memory is the copy with the live records and the unwritten changes
        applied), so that only the members changed since are unpacked. Caller holds
        the lock."""
        committed = cg.committed
        if committed is None or cg.dirty_all or group.consumer is not cg:
            return self.describe_committed(group, cg)
        touched = set(cg.dirty)
        for record in cg.live.values():
            if record["full"]:
                return self.describe_committed(group, cg)
            touched.update(record["members"])
        members = []
        settled = []            # (state, member epoch) of every member
        asked = []              # every member's server assignor
        in_memory = cg.members
        target = cg.target
        for member_id, packed in committed["members"].items():
            if member_id in touched:
                m = unpack_member(packed)
                members.append(_recorded_member(member_id, m))
                settled.append((m["state"], m["member_epoch"]))
                asked.append(m["server_assignor"])
                continue
            live = in_memory.get(member_id)
            if live is None:                    # (unmarked: never, but the copy is sure)
                return self.describe_committed(group, cg)
            members.append(_live_member(live, target))
            settled.append((live.state, live.member_epoch))
            asked.append(live.server_assignor)
        group_epoch, assignment_epoch = committed["group_epoch"], committed["assignment_epoch"]
        return ConsumerGroupDescription(
            Errors.NONE, group.group_id,
            settled_state_name(group_epoch, assignment_epoch, settled), group_epoch,
            assignment_epoch, self._preferred_of(asked), members)

    def describe_committed(self, group, cg) -> ConsumerGroupDescription:
        """ConsumerGroupDescribe's entry for the consumer group `cg` (the group's, or the
        one its downgrade came from) as the store holds it: its `committed` copy.
        Caller holds the lock."""
        group_id = group.group_id
        state = committed_state(cg.committed)
        if state is None:
            # nothing of the consumer group confirmed: the store holds the classic group
            # it came from, or (offsets alone) the classic group Kafka keeps offsets in
            classic = cg.came_from is not None or bool(group.offsets)
            return _not_found(group_id, f"Group {group_id} is not a consumer group."
                              if classic else f"Group {group_id} not found.")
        records = state["members"]
        settled = [(m["state"], m["member_epoch"]) for m in records.values()]
        return ConsumerGroupDescription(
            Errors.NONE, group_id,
            settled_state_name(state["group_epoch"], state["assignment_epoch"], settled),
            state["group_epoch"], state["assignment_epoch"],
            self._preferred_of(m["server_assignor"] for m in records.values()),
            [_recorded_member(member_id, m) for member_id, m in records.items()])

    def describe_live(self, group_id, cg) -> ConsumerGroupDescription:
        """ConsumerGroupDescribe's entry for the consumer group `cg` as it is in memory,
        its changes on their way to the store included. Caller holds the lock."""
        target = cg.target
        members = [_live_member(m, target) for m in cg.members.values()]
        return ConsumerGroupDescription(Errors.NONE, group_id, cg.state_name(),
                                        cg.group_epoch, cg.assignment_epoch,
                                        self._preferred_assignor(cg), members)

    def describe_as_classic(self, group):
        """Kafka 4's DescribeGroups answer for a consumer group: protocol type "consumer",
        the default assignor as the protocol, each member's subscription and target
        assignment in the classic consumer protocol's encoding. Caller holds the lock."""
        cg = group.consumer
        members = [MemberDescription(
            m.member_id, m.instance_id, m.client_id, m.client_host,
            encode_subscription(sorted(m.topic_names), m.rack_id),
            encode_assignment(cg.target.get(m.member_id, {})))
            for m in cg.members.values()]
        return GroupDescription(Errors.NONE, group.group_id, cg.state_name(), "consumer",
                                self.assignors[0], members)

    def forget_all(self, group) -> None:
        """Drop every member without answering anything (the group moves away: unload;
        or it is reverted: restore). Caller holds the group's lock."""
        cg = group.consumer
        if cg.regex_timer is not None:
            cg.regex_timer.cancel()
            cg.regex_timer = None
        for member in cg.members.values():
            self._cancel_timers(member)
            if member.slot >= 0:
                self.logic._release_slot(member.slot)
                member.slot = -1
        cg.members.clear()
        cg.static.clear()
        cg.owners.clear()

    def validate_offset_commit(self, group, member_id, member_epoch, api_version,
                               partitions=()) -> Errors:
        """Kafka's ConsumerGroup.validateOffsetCommit: an admin's commit (epoch < 0) needs
        an empty group; a member must exist, commit with OffsetCommit v9 or later, at its
        current epoch. A consumer-protocol member may also commit at an older epoch
        (KIP-1251, Kafka 4.3), but only partitions (`partitions`: (topic, partition)
        pairs) it holds, assigned or revoking, and came to hold at that epoch or before;
        otherwise the whole commit is STALE_MEMBER_EPOCH."""
        cg = group.consumer
        if member_epoch < 0 and not cg.members:
            return Errors.NONE
        member = cg.members.get(member_id)
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        if member.classic is None and api_version is not None and api_version < 9:
            return Errors.UNSUPPORTED_VERSION
        if member.classic is None and member_epoch < member.member_epoch:
            return _check_assignment_epochs(member, member_epoch, partitions)
        return _check_offsets_epoch(member, member_epoch)

    def validate_offset_fetch(self, group, member_id, member_epoch) -> Errors:
        """Kafka's ConsumerGroup.validateOffsetFetch: an admin's fetch (no member id,
        epoch < 0) passes; a member must exist at its current epoch."""
        if member_epoch < 0 and member_id is None:
            return Errors.NONE
        member = group.consumer.members.get(member_id)
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        return _check_offsets_epoch(member, member_epoch)


def is_full(cg, max_size, member_id, instance_id) -> bool:
    """Whether the group has no room for this member: it is at its maximum size and the
    member is neither in it nor a new incarnation of one of its static members (which
    takes its place, KAFKA-20601; whether it may is the static checks' answer)."""
    return len(cg.members) >= max_size and (not member_id or member_id not in cg.members) \
        and (instance_id is None or instance_id not in cg.static)


def bump_after_removal(cg) -> None:
    """Bump the group epoch after members were removed. A group left empty has no
    target to compute: its assignment epoch follows the group epoch, so an empty group's
    epochs are equal (Kafka writes the assignment epoch with the fencing, KAFKA-20442)."""
    cg.group_epoch += 1
    if not cg.members:
        cg.assignment_epoch = cg.group_epoch


def _kept_epochs(member, held) -> Dict[str, Dict[int, int]]:
    """The assignment epochs of the partitions in the dicts of `held` ({topic:
    partitions}), which the member held before: each keeps its epoch, and one without an
    entry (never given one) counts as assigned at the member's epoch so far. New dicts
    throughout: a member's copies share its map, so it is replaced, never changed."""
    old = member.assignment_epochs
    default = max(member.member_epoch, 0)
    out: Dict[str, Dict[int, int]] = {}
    for parts in held:
        for topic, ps in parts.items():
            known = old.get(topic)
            into = out.setdefault(topic, {})
            if known is None:
                into.update(dict.fromkeys(ps, default))
            else:
                for p in ps:
                    into[p] = known.get(p, default)
    return out


def _check_assignment_epochs(member, epoch, partitions) -> Errors:
    """KIP-1251's check of a commit at `epoch`, older than the member's: every partition
    is held by the member (assigned, else revoking) since `epoch` or before."""
    default = max(member.member_epoch, 0)
    for topic, partition in partitions:
        held = member.assigned.get(topic)
        if held is None or partition not in held:
            held = member.revoking.get(topic)
            if held is None or partition not in held:
                return Errors.STALE_MEMBER_EPOCH
        if member.assignment_epochs.get(topic, {}).get(partition, default) > epoch:
            return Errors.STALE_MEMBER_EPOCH
    return Errors.NONE


def _check_offsets_epoch(member, epoch) -> Errors:
    """Kafka's validateMemberEpoch: an epoch not the member's is stale; for a member
    of the classic protocol (whose epoch is its generation) an illegal generation."""
    if epoch == member.member_epoch:
        return Errors.NONE
    return Errors.ILLEGAL_GENERATION if member.classic is not None \
        else Errors.STALE_MEMBER_EPOCH


def static_member(cg, member_id, instance_id, joining, classic=False):
    """Kafka's getOrMaybeSubscribeStaticConsumerGroupMember: (the member with
    `instance_id`, the member it replaces or None). A join takes over the instance id
    from its current member (a new incarnation, its partitions kept), which must have
    left for now (epoch -2) when both use the consumer protocol (the joiner unless
    `classic`); anything else must be that current member."""
    current_id = cg.static.get(instance_id)
    existing = None if current_id is None else cg.members[current_id]
    if joining:
        if existing is None:
            return cg.members.get(member_id) or ConsumerMember(member_id), None
        if not classic and existing.classic is None \
                and existing.member_epoch != STATIC_LEAVE_EPOCH:
            raise _Refused(Errors.UNRELEASED_INSTANCE_ID,
                           f"Static member {member_id} with instance id {instance_id} "
                           "cannot join the group because the instance id is owned "
                           f"by {existing.member_id} member.")
        member = existing.copy(member_id)
        member.member_epoch = member.previous_epoch = 0
        return member, existing
    if existing is None:
        raise _Refused(Errors.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if existing.member_id != member_id:
        raise _Refused(Errors.FENCED_INSTANCE_ID,
                       f"Static member {member_id} with instance id {instance_id} "
                       f"was fenced by member {existing.member_id}.")
    return existing, None


def _check_member_epoch(member, epoch, owned) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: ahead is fenced; behind is
    fenced unless it is the previous epoch with a subset of the assignment (the answer
    that bumped it may have been lost)."""
    if epoch > member.member_epoch:
        raise _Refused(Errors.FENCED_MEMBER_EPOCH,
                       f"The consumer group member has a greater member epoch ({epoch}) than "
                       f"the one known by the group coordinator ({member.member_epoch}). The "
                       "member must abandon all its partitions and rejoin.")
    if epoch < member.member_epoch:
        if epoch != member.previous_epoch or not _is_subset(owned, member.assigned):
            raise _Refused(Errors.FENCED_MEMBER_EPOCH,
                           f"The consumer group member has a smaller member epoch ({epoch}) "
                           f"than the one known by the group coordinator ({member.member_epoch}). "
                           "The member must abandon all its partitions and rejoin.")


_METADATA_FIELDS = ("instance_id", "rack_id", "client_id", "client_host", "rebalance_timeout_ms",
                    "server_assignor", "topic_names", "topic_regex", "classic")


_metadata_of = operator.attrgetter(*_METADATA_FIELDS)


def _same_metadata(a: ConsumerMember, b: ConsumerMember) -> bool:
    """Whether two versions of a member agree on what a heartbeat may change (Kafka
    writes a member's subscription record only when they differ)."""
    return _metadata_of(a) == _metadata_of(b)

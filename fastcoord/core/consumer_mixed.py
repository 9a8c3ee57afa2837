"""Mixed consumer groups (Kafka 4's online migration between the group protocols): the
slow path of both twins, one source (docs/consumer-protocol.md, "Mixed groups").

Under `group_consumer_migration_policy` ("bidirectional", "upgrade", "downgrade",
"disabled"), as Kafka's `GroupMetadataManager` does:

- **upgrade**: a consumer-protocol join (epoch 0) to a classic group of the "consumer"
  protocol type converts it (`upgrade`, Kafka's convertToConsumerGroup and
  ConsumerGroup.fromClassicGroup): each classic member becomes a member of the consumer
  group that still uses the classic protocol (`ConsumerMember.classic` set), at the
  classic generation, owning what its classic assignment gave it;
- **classic members inside a consumer group**: their JoinGroup, SyncGroup, Heartbeat
  and LeaveGroup come here (Kafka's classicGroup*ToConsumerGroup): a JoinGroup updates
  the member's subscription and reconciles it as a heartbeat does, answering its
  member epoch as the generation; the SyncGroup gives its assignment; a heartbeat
  answers REBALANCE_IN_PROGRESS while the member must rejoin to move on;
- **downgrade**: when the last consumer-protocol member leaves (or is fenced, or is
  replaced by a classic static member) and every member left uses the classic
  protocol, the group becomes classic again (`maybe_downgrade`, Kafka's
  convertToClassicGroup and ClassicGroup.fromConsumerGroup).

Every entry point runs under the group's lock, except `heartbeat` (the member table's
fallback), which takes it. Answers go through the group logic's outbox.
"""
from __future__ import annotations

import logging
from typing import Iterable, List

from fastcoord.core.consumer import (
    UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS, ClassicOrigin, ConsumerMember, _log_once,
    _Refused, _sorted_lists, _sorted_tuples, bump_after_removal, is_full, shared_topic_names,
    static_member,
)
from fastcoord.core.consumer_embedded import (
    ClassicMetadata, decode_assignment_and_user_data, decode_subscription, encode_assignment,
)
from fastcoord.core.errors import Errors
from fastcoord.core.results import JoinGroupResult, LeaveGroupResult, SyncGroupResult
from fastcoord.core.states import CR, EMPTY, PR

log = logging.getLogger("fastcoord.coordinator")

__all__ = ["MixedGroups"]

CONSUMER_PROTOCOL = "consumer"      # the classic protocol type of Kafka's consumers
_NO_REJOIN = "did not rejoin within its rebalance timeout"     # (why a timer fences)
_NO_SYNC = "did not sync within its rebalance timeout"
UPGRADE_POLICIES = ("upgrade", "bidirectional")
DOWNGRADE_POLICIES = ("downgrade", "bidirectional")


class MixedGroups:
    """The mixed-group requests of one coordinator, over its ConsumerLogic."""

    def __init__(self, consumers) -> None:
        self.consumers = consumers
        self.logic = consumers.logic
        self.config = consumers.config

    # ======================================================================
    # upgrade: a classic group becomes a consumer group
    # ======================================================================
    def upgrade(self, group, check=None) -> None:
        """Convert the classic group `group` (it has members) to a consumer group, or
        raise GROUP_ID_NOT_FOUND when Kafka's validateOnlineUpgrade refuses (the
        policy, the protocol type, the size) or a member's embedded protocol bytes do
        not parse; then `check()`, what refuses the join after the conversion, raises
        before anything is changed. Caller holds the group's lock."""
        group_id = group.group_id
        refused = _Refused(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if self.config.group_consumer_migration_policy not in UPGRADE_POLICIES:
            log.info("cannot upgrade classic group %s to a consumer group: the online "
                     "upgrade is disabled", group_id)
            raise refused
        if group.protocol_type != CONSUMER_PROTOCOL:
            log.info("cannot upgrade classic group %s to a consumer group: it does not use "
                     "the consumer embedded protocol", group_id)
            raise refused
        if len(group.members) > self.config.group_consumer_max_size:
            log.info("cannot upgrade classic group %s to a consumer group: %d members is "
                     "over group_consumer_max_size", group_id, len(group.members))
            raise refused
        if len(group.members) == self.config.group_consumer_max_size:
            # The joining member would not fit: Kafka converts, refuses the join, and
            # the conversion is rolled back with the request's records; the group stays
            raise _Refused(Errors.GROUP_MAX_SIZE_REACHED,
                           "The consumer group has reached its maximum capacity of "
                           f"{self.config.group_consumer_max_size} members.")
        converted = []
        for m in group.members.values():
            name = group.protocol_name or m.protocols[0][0]
            metadata = next((meta for n, meta in m.protocols if n == name), None)
            try:
                if metadata is None:
                    raise ValueError(f"no subscription for protocol {name}")
                parts, user_data = decode_assignment_and_user_data(m.assignment)
                converted.append((m, decode_subscription(metadata), parts))
            except ValueError as exc:
                log.info("cannot upgrade classic group %s to a consumer group: member %s's "
                         "embedded consumer protocol is malformed (%s)", group_id, m.member_id, exc)
                raise _Refused(Errors.GROUP_ID_NOT_FOUND,
                               f"Cannot upgrade classic group {group_id} to consumer group "
                               "because the embedded consumer protocol is malformed.") from None
            if user_data:
                # (a client-side assignor of its own, with state in its assignments, has
                # no server-side counterpart: KAFKA-18134)
                log.info("cannot upgrade classic group %s to a consumer group: member %s's "
                         "assignment carries user data (a custom assignor)", group_id,
                         m.member_id)
                raise _Refused(Errors.GROUP_ID_NOT_FOUND,
                               f"Cannot upgrade classic group {group_id} to consumer group "
                               "because an unsupported custom assignor is in use. Please "
                               "refer to the documentation or switch to a default assignor "
                               "before re-attempting the upgrade.")
        if check is not None:
            check()             # (what refuses the join after the conversion: raises first)
        generation = group.generation
        logic = self.logic
        came_from = ClassicOrigin(
            logic.classic_record(group), group.state in (PR, CR),
            {m.member_id: logic.table.deadline(m.slot) for m in group.members.values()},
            {m.member_id: list(m.protocols) for m in group.members.values()})
        self._drop_classic_side(group)
        consumers = self.consumers
        logic.make_consumer_group(group)
        self.end_classic_operations(group)
        cg = group.consumer
        cg.came_from = came_from
        cg.group_epoch = cg.assignment_epoch = generation
        topics = consumers.topics
        now = logic.clock.now_ms()
        for m, subscription, parts in converted:
            member = ConsumerMember(m.member_id)
            member.instance_id = m.instance_id
            member.rack_id = subscription.rack_id
            member.client_id = m.client_id
            member.client_host = m.client_host
            member.rebalance_timeout_ms = m.rebalance_timeout_ms
            member.topic_names = shared_topic_names(cg, subscription.topics)
            member.member_epoch = member.previous_epoch = generation
            # (as Kafka maps names to topic ids: partitions of unknown topics are dropped)
            member.assigned = {t: frozenset(p for p in ps if 0 <= p < topics[t])
                               for t, ps in parts.items() if t in topics}
            member.assigned = {t: ps for t, ps in member.assigned.items() if ps}
            member.classic = ClassicMetadata(m.session_timeout_ms, tuple(m.protocols))
            session = m.session_timeout_ms
            member.slot = logic.table.alloc(group.rec, m.member_id, session, now + session, True)
            logic.owners[member.slot] = (group, m.member_id)
            cg.members[m.member_id] = member
            if member.instance_id is not None:
                cg.static[member.instance_id] = m.member_id
            cg.target[m.member_id] = _sorted_tuples(member.assigned)
            cg.own(member)
        consumers._refresh_metadata(cg)
        cg.dirty_all = True
        group.version = logic.next_version()
        log.info("classic group %s upgraded to a consumer group with %d members at epoch %d",
                 group_id, len(cg.members), generation)

    def _drop_classic_side(self, group) -> None:
        """Empty the classic side of an upgrading group: parked joins and syncs are
        answered REBALANCE_IN_PROGRESS (Kafka completes them so), members and pending
        members leave the member table, the state is Empty again (the join and sync
        operations are dropped next: end_classic_operations). Caller holds the group's
        lock."""
        logic = self.logic
        for member in list(group.members.values()):
            logic._invoke_join(member, group, JoinGroupResult(
                Errors.REBALANCE_IN_PROGRESS, member_id=member.member_id))
            logic._invoke_sync(member, SyncGroupResult(Errors.REBALANCE_IN_PROGRESS))
            group.remove(member.member_id)
            logic._release_slot(member.slot)
        for slot in group.pending.values():
            logic._release_slot(slot)
        group.pending.clear()
        group.pending_sync.clear()
        group.num_awaiting_join = 0
        group.new_member_added = False
        group.leader_id = None
        group.protocol_name = None
        group.generation_topics = None
        group.state = EMPTY             # (no transition: the classic side just ends)
        group.rec.state = EMPTY

    def end_classic_operations(self, group) -> None:
        """The upgraded group's join and sync operations are dropped with their timers,
        uncompleted: the rounds they timed are over (an initial join's delay must not
        end a later round, after a downgrade). Caller holds the group's lock."""
        purgatory = self.logic.purgatory
        purgatory.cancel_for_key(("join", group.group_id))
        purgatory.cancel_for_key(("sync", group.group_id))

    # ======================================================================
    # downgrade: a consumer group becomes a classic group
    # ======================================================================
    def maybe_downgrade(self, group, leaving: Iterable[str], rebalance: bool = True) -> bool:
        """When every member but `leaving` uses the classic protocol, one at least
        remains, the policy allows a downgrade and the rest fit in a classic group, make
        the group classic without `leaving` (Kafka's validateOnlineDowngradeWith*
        and convertToClassicGroup) and return True; a rebalance follows when
        `rebalance` (a member left). Otherwise change nothing and return False. Caller
        holds the group's lock."""
        cg = group.consumer
        leaving = set(leaving)
        remaining = [m for member_id, m in cg.members.items() if member_id not in leaving]
        if not remaining or any(m.classic is None for m in remaining):
            return False
        group_id = group.group_id
        if self.config.group_consumer_migration_policy not in DOWNGRADE_POLICIES:
            log.info("cannot downgrade consumer group %s to a classic group: the online "
                     "downgrade is disabled", group_id)
            return False
        if len(remaining) > self.config.group_max_size:
            log.info("cannot downgrade consumer group %s to a classic group: %d members is "
                     "over group_max_size", group_id, len(remaining))
            return False
        common = set(name for name, _ in remaining[0].classic.protocols)
        for m in remaining[1:]:
            common &= set(name for name, _ in m.classic.protocols)
        if not common:
            log.warning("cannot downgrade consumer group %s to a classic group: its classic "
                        "members share no protocol", group_id)
            return False
        self._downgrade(group, remaining, rebalance)
        return True

    def _downgrade(self, group, remaining: List[ConsumerMember], rebalance: bool) -> None:
        cg = group.consumer
        consumers = self.consumers
        logic = self.logic
        epoch = cg.group_epoch
        targets = {m.member_id: cg.target.get(m.member_id, {}) for m in remaining}
        specs = [(m.member_id, m.instance_id, m.client_id, m.client_host,
                  m.rebalance_timeout_ms, m.classic.session_timeout_ms,
                  list(m.classic.protocols)) for m in remaining]
        for member in cg.members.values():
            consumers._cancel_timers(member)
            if member.slot >= 0:
                logic._release_slot(member.slot)
                member.slot = -1
        cg.members.clear()
        cg.static.clear()
        cg.owners.clear()

        def assignment_of(member_id: str, metadata: bytes) -> bytes:
            # Each member's target, in the version of the subscription it gave for the
            # protocol chosen (Kafka answers each member in its own version)
            version = int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0
            return encode_assignment(targets.get(member_id, {}), version)

        write = _DowngradeWrite(cg)
        logic.adopt_classic_members(group, specs, epoch, assignment_of, rebalance,
                                    lambda error: self._downgrade_stored(group, write, error))
        group.downgrade = write
        log.info("consumer group %s downgraded to a classic group with %d members at "
                 "generation %d", group.group_id, len(specs), epoch)

    def _downgrade_stored(self, group, write, error) -> None:
        """The store's answer to a downgrade's record. Confirmed: the requests that
        waited for it are answered. Failed: as Kafka reverts a failed append, the group
        goes back to the consumer group the store holds (ConsumerLogic._go_back; the
        member that left is in it again), unless a later classic record of the group was
        given meanwhile (it stands for the group), the group left the coordinator, or
        the store keeps no consumer groups; the waiting requests get the error."""
        logic = self.logic
        reverted = False
        with group.rec:
            if group.downgrade is write:
                group.downgrade = None
                reverted = error != Errors.NONE and group.consumer is None \
                    and logic.table.groups.get(group.group_id) is group.rec \
                    and getattr(logic.store, "store_consumer_group", None) is not None
                if reverted:
                    self._upgrade_back(group, write.cg)
            waiting, write.waiting = write.waiting, []
        if error != Errors.NONE:
            _log_once.warning(("downgrade refused", group.group_id), "consumer group %s: the "
                              "store refused its downgrade's record (%s)%s", group.group_id,
                              error.name, "; it is a consumer group again" if reverted else "")
        for callback, result, on_error in waiting:
            self.consumers._answer_stored(callback, result, on_error, error)
        logic.flush()

    def _upgrade_back(self, group, cg) -> None:
        """The classic group made by a downgrade is the consumer group `cg` again: the
        classic side ends as an upgrade ends it (parked joins and syncs answered
        REBALANCE_IN_PROGRESS), and the group becomes what the store holds of `cg`.
        Caller holds the group's lock."""
        self._drop_classic_side(group)
        self.end_classic_operations(group)
        self.logic.make_consumer_group(group, cg)
        self.consumers._go_back(group)

    # ======================================================================
    # JoinGroup of a classic member (Kafka's classicGroupJoinToConsumerGroup)
    # ======================================================================
    def join(self, group, member_id, protocol_type, protocols, session_timeout_ms,
             rebalance_timeout_ms, instance_id, require_known, client_id, client_host,
             callback) -> None:
        """A JoinGroup to a consumer group with members. Caller holds the group's lock."""
        try:
            result = self._join(group, member_id, protocol_type, protocols, session_timeout_ms,
                                rebalance_timeout_ms, instance_id, require_known, client_id,
                                client_host)
        except _Refused as refused:
            log.debug("consumer group %s: classic join of %r refused: %s", group.group_id,
                      member_id, refused.error.name)
            self.logic._emit_one(callback, JoinGroupResult(refused.error, member_id=member_id))
            return
        if result.error != Errors.NONE:         # MEMBER_ID_REQUIRED
            self.logic._emit_one(callback, result)
            return
        self.consumers._persist(group, result, callback,
                                lambda error: JoinGroupResult(error, member_id=member_id))

    def _join(self, group, member_id, protocol_type, protocols, session_timeout_ms,
              rebalance_timeout_ms, instance_id, require_known, client_id,
              client_host) -> JoinGroupResult:
        consumers = self.consumers
        cg = group.consumer
        is_unknown = member_id == ""
        if is_unknown:
            member_id = consumers._new_member_id(client_id)
        if self.config.group_consumer_migration_policy == "disabled":
            # (no migration either way: a classic member would keep the group mixed for
            # good, KAFKA-20640)
            raise _Refused(Errors.INCONSISTENT_GROUP_PROTOCOL,
                           f"Cannot join the consumer group {group.group_id} with the classic "
                           "protocol because the group migration is disabled.")
        if is_full(cg, self.config.group_consumer_max_size, member_id, instance_id):
            raise _Refused(Errors.GROUP_MAX_SIZE_REACHED,
                           "The consumer group has reached its maximum capacity of "
                           f"{self.config.group_consumer_max_size} members.")
        if not _supports(cg, protocol_type, protocols):
            raise _Refused(Errors.INCONSISTENT_GROUP_PROTOCOL,
                           f"Member {member_id}'s protocols are not supported.")
        if is_unknown and instance_id is None and require_known:
            # a new dynamic member is given its id first, to join again with it
            return JoinGroupResult(Errors.MEMBER_ID_REQUIRED, member_id=member_id)
        replaced = None
        # (Kafka's step 4: the member that held the instance id before this join, the
        # joiner itself included, when it used the consumer protocol: replacing the last
        # such member downgrades the group)
        holder = None if instance_id is None else cg.static.get(instance_id)
        holder_was_consumer = holder is not None and cg.members[holder].classic is None
        if instance_id is None:
            # (as Kafka: any id joins, and a consumer-protocol member's id turns it into
            # a member of the classic protocol)
            member = cg.members.get(member_id) or ConsumerMember(member_id)
        else:
            # (a new incarnation of a static member takes its place and partitions)
            member, replaced = static_member(cg, member_id, instance_id, is_unknown,
                                             classic=True)
        try:
            subscription = decode_subscription(protocols[0][1])
        except ValueError as exc:
            raise _Refused(Errors.INCONSISTENT_GROUP_PROTOCOL,
                           f"Malformed embedded consumer protocol: {exc}.") from None

        updated = member.copy()
        if instance_id is not None:
            updated.instance_id = instance_id
        if subscription.rack_id is not None:
            updated.rack_id = subscription.rack_id
        if rebalance_timeout_ms != -1:
            updated.rebalance_timeout_ms = rebalance_timeout_ms
        updated.topic_names = shared_topic_names(cg, subscription.topics)
        updated.topic_regex = None      # (the classic protocol subscribes by names alone)
        updated.client_id = client_id
        updated.client_host = client_host
        updated.classic = ClassicMetadata(session_timeout_ms, tuple(protocols))
        consumers.update_member(group, member, updated, replaced, subscription.owned)

        table = self.logic.table
        result = JoinGroupResult(Errors.NONE, updated.member_epoch, CONSUMER_PROTOCOL,
                                 protocols[0][0], "", updated.member_id, [], False)
        # (a new subscription rebalances the classic group it becomes, KAFKA-19546)
        if holder_was_consumer and self.maybe_downgrade(
                group, (), rebalance=updated.topic_names != member.topic_names
                or updated.topic_regex != member.topic_regex):
            return result      # the last consumer-protocol member was replaced: classic now
        # it joined: its session runs on its own timeout, and it must sync in time
        _cancel(updated, "join_timer")
        table.set_session_timeout(updated.slot, session_timeout_ms)
        table.touch(updated.slot)
        self._schedule(group, updated, "sync_timer", updated.rebalance_timeout_ms, _NO_SYNC)
        return result

    # ======================================================================
    # SyncGroup, Heartbeat, LeaveGroup of classic members
    # ======================================================================
    def sync(self, group, generation_id, member_id, instance_id, protocol_type,
             protocol_name, callback) -> None:
        """Kafka's classicGroupSyncToConsumerGroup: the member's current assignment.
        Caller holds the group's lock."""
        logic = self.logic
        try:
            member = self._classic_member(group, member_id, instance_id)
            if generation_id != member.member_epoch:
                raise _Refused(Errors.ILLEGAL_GENERATION, "")
            name = member.classic.protocols[0][0]
            if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL) \
                    or (protocol_name is not None and protocol_name != name):
                raise _Refused(Errors.INCONSISTENT_GROUP_PROTOCOL, "")
            self._check_no_rebalance(group, member)
        except _Refused as refused:
            logic._emit_one(callback, SyncGroupResult(refused.error))
            return
        _cancel(member, "sync_timer")
        logic.table.touch(member.slot)
        metadata = member.classic.protocols[0][1]
        version = int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0
        logic._emit_one(callback, SyncGroupResult(
            Errors.NONE, protocol_type, protocol_name,
            encode_assignment(_sorted_lists(member.assigned), version)))

    def heartbeat(self, group_id, member_id, generation_id, instance_id=None) -> Errors:
        """A classic Heartbeat to a consumer group (the member table hands these over:
        it holds no classic member of a consumer group). Kafka's
        classicGroupHeartbeatToConsumerGroup: REBALANCE_IN_PROGRESS while the member
        must rejoin (the group epoch moved past it, it has partitions to revoke, or the
        partitions it waits for are free)."""
        logic = self.logic
        group = logic._get_group(group_id)
        if group is None:
            return Errors.UNKNOWN_MEMBER_ID
        with group.rec:
            if group.consumer is not None:
                return self._heartbeat(group, member_id, generation_id, instance_id)
        # (it became classic meanwhile: the table answers as for any classic group)
        return logic.table.heartbeat(group_id, member_id, generation_id, instance_id)

    def _heartbeat(self, group, member_id, generation_id, instance_id) -> Errors:
        try:
            member = self._classic_member(group, member_id, instance_id)
        except _Refused as refused:
            return refused.error
        if generation_id != member.member_epoch:
            return Errors.ILLEGAL_GENERATION
        self.logic.table.touch(member.slot)
        cg = group.consumer
        if member.member_epoch < cg.group_epoch or member.state == UNREVOKED_PARTITIONS \
                or (member.state == UNRELEASED_PARTITIONS and not _waiting_on_others(cg, member)):
            self._schedule_join_timeout(group, member)
            return Errors.REBALANCE_IN_PROGRESS
        return Errors.NONE

    def leave(self, group, members) -> LeaveGroupResult:
        """Kafka's classicGroupLeaveToConsumerGroup: each (member id, instance id) leaves
        (an instance id with an empty member id: an admin's removal); then the group
        may downgrade. Caller holds the group's lock."""
        cg = group.consumer
        errors = []
        leaving = {}
        for member_id, instance_id in members:
            try:
                member = self._classic_member(group, member_id, instance_id, admin=True)
            except _Refused as refused:
                errors.append(refused.error)
                continue
            leaving[member.member_id] = member
            errors.append(Errors.NONE)
        if leaving:
            log.info("consumer group %s: classic members %s left", group.group_id,
                     sorted(leaving))
            if not self.maybe_downgrade(group, leaving):
                for member in leaving.values():
                    self.consumers.remove(group, member, bump=False)
                bump_after_removal(cg)      # (once for the request, as Kafka)
                self.consumers._persist(group, None, None)
        return LeaveGroupResult(Errors.NONE, errors)

    # ======================================================================
    # helpers
    # ======================================================================
    @staticmethod
    def _classic_member(group, member_id, instance_id, admin=False) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember and throwIfMemberDoesNotUseClassicProtocol.
        `admin`, a LeaveGroup (the admin client's removal of members): a static member
        may be named by its instance id alone, and a member of either protocol leaves
        (KAFKA-18188)."""
        cg = group.consumer
        if instance_id is None:
            member = cg.members.get(member_id)
            if member is None:
                raise _Refused(Errors.UNKNOWN_MEMBER_ID, "")
        else:
            current = cg.static.get(instance_id)
            if current is None:
                raise _Refused(Errors.UNKNOWN_MEMBER_ID, "")
            if current != member_id and not (admin and member_id == ""):
                raise _Refused(Errors.FENCED_INSTANCE_ID, "")
            member = cg.members[current]
        if member.classic is None and not admin:
            raise _Refused(Errors.UNKNOWN_MEMBER_ID, "")
        return member

    def _check_no_rebalance(self, group, member) -> None:
        """Kafka's throwIfRebalanceInProgress: a member behind the group epoch must rejoin
        (unless it is revoking: it finishes that first)."""
        if group.consumer.group_epoch > member.member_epoch \
                and member.state != UNREVOKED_PARTITIONS:
            self._schedule_join_timeout(group, member)
            raise _Refused(Errors.REBALANCE_IN_PROGRESS, "")

    def _schedule_join_timeout(self, group, member) -> None:
        """Kafka's scheduleConsumerGroupJoinTimeoutIfAbsent: told to rejoin, the member
        must within its rebalance timeout, or it is fenced."""
        if member.join_timer is None:
            self._schedule(group, member, "join_timer", member.rebalance_timeout_ms, _NO_REJOIN)

    def keep_deadlines(self, group, member, join_at, sync_at) -> None:
        """A classic member restored by a revert keeps its deadlines to rejoin and to
        sync (absolute times; None: it had none), as Kafka's timers are not part of
        what a failed append reverts. Caller holds the group's lock."""
        now = self.logic.clock.now_ms()
        if join_at is not None:
            self._schedule(group, member, "join_timer", join_at - now, _NO_REJOIN)
        if sync_at is not None:
            self._schedule(group, member, "sync_timer", sync_at - now, _NO_SYNC)

    def _schedule(self, group, member, attr: str, timeout_ms: int, reason: str) -> None:
        """Fence the member in `timeout_ms` unless its `attr` timer is cancelled first."""
        _cancel(member, attr)
        consumers = self.consumers
        logic = self.logic
        member_id = member.member_id
        handle_cell = []

        def expire() -> None:
            with group.rec:
                cg = group.consumer
                current = None if cg is None else cg.members.get(member_id)
                if current is not None and handle_cell \
                        and getattr(current, attr) is handle_cell[0]:
                    setattr(current, attr, None)
                    log.info("consumer group %s: classic member %s %s; fenced",
                             group.group_id, member_id, reason)
                    consumers.fence(group, current)
                    consumers._persist(group, None, None)
            logic.flush()

        handle = logic.timer.schedule(max(timeout_ms, 0), expire)
        handle_cell.append(handle)
        setattr(member, attr, handle)


class _DowngradeWrite:
    """A downgrade's record on its way to the store: the consumer group it came from
    (`cg`, with its store bookkeeping: what a failure reverts to) and the requests
    whose answers wait for it, as (callback, result, on_error)."""

    __slots__ = ("cg", "waiting")

    def __init__(self, cg) -> None:
        self.cg = cg
        self.waiting: list = []


def _cancel(member, attr: str) -> None:
    handle = getattr(member, attr)
    if handle is not None:
        setattr(member, attr, None)
        handle.cancel()


def _supports(cg, protocol_type, protocols) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols (the group has members): the
    consumer protocol type, and a protocol every classic member supports."""
    if protocol_type != CONSUMER_PROTOCOL or not protocols:
        return False
    classic = [m.classic.protocols for m in cg.members.values() if m.classic is not None]
    for name, _ in protocols:
        if all(any(n == name for n, _ in ps) for ps in classic):
            return True
    return False


def _waiting_on_others(cg, member) -> bool:
    """Kafka's waitingOnUnreleasedPartition: a partition of the member's target that it
    does not have yet is still owned by another member."""
    assigned = member.assigned
    owners = cg.owners
    for topic, ps in cg.target.get(member.member_id, {}).items():
        mine = assigned.get(topic, ())
        for p in ps:
            if p not in mine and (topic, p) in owners:
                return True
    return False

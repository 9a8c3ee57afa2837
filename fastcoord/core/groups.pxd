# cython: language_level=3
# The augmenting declarations of fastcoord/core/groups.py, which setup.py compiles as
# this module (fastcoord.core.groups); the pure twin never reads this file.
#
# Member, Group and GroupLogic become extension types: every attribute an object of
# theirs has (exactly those its __init__ sets: one missing here is an AttributeError
# at the first object made, so every test fails) sits in a slot, typed object, so no
# value changes: reading one is a load, not a look-up through the type and an instance
# dict (the group logic reads many per request). The methods below are cpdef: one
# method's call of another is a C call, and their `group` and `member` arguments (typed
# in the signature) and locals (typed by @cython.locals) are typed, so their attributes
# are loads too; None passes
# where a Group or Member is typed, as in Python. A cpdef method cannot hold a closure or a generator, and
# takes no *args: those methods stay def.
cimport cython

from fastcoord.core._native.engines cimport GroupRecord, MemberTable

cdef object _NONE       # Errors.NONE (a C global: not an attribute of the compiled module)
cdef object _OM_METADATA, _OM_LEADER_EPOCH   # (the same: _offset_alone's defaults,
cdef object _JG_GENERATION, _JG_PROTOCOL_TYPE, _JG_PROTOCOL_NAME, _JG_LEADER  # _join_error's)
cdef object _JG_MEMBERS, _JG_SKIP




cdef class Member:
    cdef public object member_id, instance_id, client_id, client_host
    cdef public object rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols
    cdef public object assignment, join_callback, sync_callback, is_new, slot

    cpdef has_satisfied_heartbeat(self)
    cpdef metadata(self, protocol_name)
    cpdef matches(self, protocols)
    cpdef vote(self, candidates)


cdef class Group:
    cdef public object group_id, rec, state, generation, protocol_type, protocol_name
    cdef public object leader_id, num_awaiting_join, new_member_added
    cdef public object version, members_epoch, empty_since_ms, consumer, downgrade
    cdef public object generation_topics
    # Containers made once (in __init__) and never replaced: typed, their methods and
    # look-ups are the C API's, not calls through the type
    cdef public dict members, pending, static, supported, offsets, pending_offsets
    cdef public set pending_sync

    cpdef transition_to(self, target)
    cpdef can_rebalance(self)
    cpdef add(self, Member member, callback)
    @cython.locals(member=Member)
    cpdef remove(self, member_id)
    cpdef rename(self, Member member, new_id)
    cpdef update_member(self, Member member, protocols, rebalance_timeout_ms,
                        session_timeout_ms, callback)
    cpdef has_all_members_joined(self)
    @cython.locals(m=Member)
    cpdef rebalance_timeout_ms(self)
    cpdef supports_protocols(self, protocol_type, protocols)
    cpdef candidate_protocols(self)
    @cython.locals(member=Member)
    cpdef select_protocol(self)
    @cython.locals(member=Member)
    cpdef maybe_elect_new_joined_leader(self)
    @cython.locals(m=Member)
    cpdef current_member_metadata(self, MemberTable table)


cdef class _Outbox:
    cdef public object items, flushing


cdef class GroupLogic:
    cdef public object config, clock, _manual_clock, store, member_id_factory, timer
    cdef public object purgatory, _op_base, owners, _outboxes, _join_ops, _sync_ops
    cdef public object _home_box, consumers
    cdef public object _retention_pass, _retention_lock   # (cleanup_group_metadata_step)
    cdef public object _min_session_ms, _max_session_ms, _max_size, _new_member_timeout_ms
    cdef public unsigned long _home_thread    # (the thread id the table.current_thread() compares)
    # The native member table, typed: its groups dict, active flag and shard states are
    # C reads (a request's group look-up, _find_group, reads all three)
    cdef public MemberTable table

    cpdef _Outbox _outbox(self)
    @cython.locals(box=_Outbox)
    cpdef flush(self)
    cpdef _emit_one(self, fn, arg)
    cpdef _invoke_join(self, Member member, Group group, result)
    cpdef _invoke_sync(self, Member member, result)
    @cython.locals(table=MemberTable)
    cpdef group_status(self, group_id, allow_empty, shard=*)
    @cython.locals(rec=GroupRecord)
    cpdef _get_group(self, group_id)
    @cython.locals(rec=GroupRecord)
    cpdef _find_group(self, group_id, allow_empty)
    @cython.locals(group=Group, rec=GroupRecord)
    cpdef _create_group(self, group_id)

    # JoinGroup
    @cython.locals(group=Group, member=Member, rec=GroupRecord)
    cpdef join_group(self, group_id, member_id, protocol_type, protocols, session_timeout_ms,
                     rebalance_timeout_ms, instance_id, require_known_member_id, client_id,
                     client_host, callback)
    @cython.locals(member=Member)
    cpdef _accept_joining_member(self, Group group, member_id)
    cpdef _join_new_member(self, Group group, instance_id, require_known, client_id,
                           client_host, rebalance_timeout_ms, session_timeout_ms,
                           protocol_type, protocols, callback)
    @cython.locals(member=Member)
    cpdef _join_current_member(self, Group group, member_id, instance_id, client_id,
                               client_host, rebalance_timeout_ms, session_timeout_ms,
                               protocol_type, protocols, callback)
    cpdef _record(self, Group group, assignment)
    cpdef _current_generation_result(self, Group group, member_id, with_members)
    @cython.locals(member=Member)
    cpdef _add_member_and_rebalance(self, Group group, member_id, instance_id, client_id,
                                    client_host, rebalance_timeout_ms, session_timeout_ms,
                                    protocol_type, protocols, callback)
    cpdef _update_member_and_rebalance(self, Group group, Member member, protocols,
                                       rebalance_timeout_ms, session_timeout_ms, callback)
    cpdef _maybe_prepare_rebalance(self, Group group)
    cpdef _prepare_rebalance(self, Group group)
    cpdef try_complete_join(self, Group group, op)
    @cython.locals(member=Member)
    cpdef on_complete_join(self, Group group)
    cpdef _init_next_generation(self, Group group)
    @cython.locals(group=Group)
    cpdef initial_join_complete(self, op)

    # SyncGroup
    cpdef _remove_sync_expiration(self, Group group)
    cpdef try_complete_sync(self, Group group, generation, op)
    @cython.locals(group=Group, member=Member, rec=GroupRecord)
    cpdef sync_group(self, group_id, generation_id, member_id, assignments, instance_id,
                     protocol_type, protocol_name, callback)
    cpdef _remove_pending_sync_member(self, Group group, member_id)
    @cython.locals(member=Member)
    cpdef _propagate_assignment(self, Group group, error)

    # offsets and reads
    @cython.locals(group=Group)
    cpdef commit_accepted(self, slot, tp, offset)
    @cython.locals(group=Group, rec=GroupRecord)
    cpdef group_summary(self, group_id)
    @cython.locals(group=Group)
    cpdef group_version(self, group_id)
    @cython.locals(group=Group, rec=GroupRecord)
    cpdef member_ids(self, group_id)


# Module-level helpers of the join and sync paths, C functions here
cpdef _validate_member(Group group, member_id, instance_id)
cpdef _join_error(MemberTable table, error, member_id)
cpdef _offset_alone(MemberTable table, offset, now)      # (HeartbeatRun's commits too: runs.pyx)
@cython.locals(m=Member)
cpdef _group_record(Group group, assignment)

# cython: language_level=3
# The augmenting declarations of replay.py, which setup.py compiles in place; the .py
# alone (a build without extensions, FASTCOORD_NO_EXTENSIONS) never reads this file.
#
# As in fastcoord/core/groups.pxd: _Member, _GroupView and ShardReplay become
# extension types whose attributes (exactly those their __init__ and _start/_index set)
# sit in slots, so reading one is a load, not a look-up through the type and an
# instance dict; the per-request methods are cpdef, so the driver's calls of them are C
# calls and their member and group arguments are typed. Every value stays a Python
# object except a member's and a group's ix, fixed at creation: no value changes.
# (A cpdef method holds no closure: the coordinator's callbacks are _Answer objects,
# which call _join_answered or _sync_answered.)
cimport cython

from fastcoord.core._native.engines cimport MemberTable
from fastcoord.pipeline._native.runs cimport HeartbeatRun

# The event codes and the error codes the driver compares with (plain ints in the .py)
cdef int _HEARTBEAT, _JOIN, _SYNC, _LEAVE, _COMMIT, _OTHER, _UNKNOWN, _MIDREQ, _IN_REBALANCE
# The answers' field positions: int objects, so that an item is read through the
# answer's mapping slot (tuple's own, inherited as C); a C index would go through its
# sequence slot, which a subclass of tuple defined in Python reaches by a Python call
# of __getitem__
cdef object _J_ERROR, _J_GENERATION, _J_LEADER, _J_MEMBER_ID, _J_MEMBERS, _M_MEMBER_ID
cdef object _S_ERROR, _G_STATE, _G_EPOCH
cdef inline object _field(object answer, object at)
# The replay's clock: a ManualClock, whose time ShardReplay._clock_now reads as a field
# (under another name: the .py imports ManualClock itself)
from fastcoord.core.clock cimport ManualClock as _ManualClockType
from libc.stdint cimport int64_t


# The per-member and per-group arrays in slots too, as typed views of the array.array
# buffers the .py makes (HeartbeatRun's view the same memory): the driver reads and
# writes one of them several times per request, a C load or store where indexing the
# array object takes a Python call and an int object. From Python, an attribute reads
# as a memoryview of the array, indexed as the array is.
cdef class _Arrays:
    cdef public long long[::1] handles, sessions, last_touch, check_at
    cdef public int[::1] generations
    cdef public unsigned char[::1] replaced
    cdef public long long[::1] group_events, group_check_at
    cdef public object instances


cdef class _Member:
    cdef public object tid, group, rid, joining, pending_sync, leader_members, leaving
    cdef public object view
    cdef public _Arrays arrays
    cdef public Py_ssize_t ix


cdef class _GroupView:
    cdef public object gid, state, members, generation, open, rebalances, expirations
    cdef public object rebalancing_ms, rebalance_timeout, epoch, version
    cdef public _Arrays arrays
    cdef public Py_ssize_t ix


cdef class ShardReplay:
    cdef public object shard, impl, num_shards, heartbeat_runs, coord, now
    cdef public _ManualClockType clock    # (_start's; None before)
    cdef public object members, by_ix, by_rid, static, groups, by_group_ix, checks
    cdef public object group_version, runs, _sorted, rebalances
    cdef public object expirations
    cdef public int[::1] errors               # (array.array buffers, as _Arrays')
    cdef public long long[::1] answered
    cdef public _Arrays arrays
    cdef MemberTable native_table     # the native twin's (group_version in C), else None
    cdef HeartbeatRun native_runs     # the native twin's run (played in C), else None

    @cython.locals(arrays=_Arrays, ix=Py_ssize_t, last="long long", d="long long")
    cpdef _arm(self, _Member m)
    cpdef _step(self, t)
    @cython.locals(gv=_GroupView, m=_Member)
    cpdef advance_to(self, t)
    @cython.locals(m=_Member)
    cpdef _observe(self, _GroupView gv, cause)
    @cython.locals(check_at="long long[::1]", d="long long")
    cpdef _arm_group(self, _GroupView gv, now)
    cdef inline int64_t _clock_now(self) except? -1
    cpdef _touch(self, _Member m)
    cpdef _respond(self, idx, error)
    @cython.locals(gv=_GroupView, old=_Member, arrays=_Arrays)
    cpdef _join(self, _Member m, idx, row)
    @cython.locals(gv=_GroupView)
    cpdef _join_answered(self, _Member m, idx, result)
    cpdef _adopt(self, _Member m, rid)
    cpdef _drop(self, _Member m)
    @cython.locals(arrays=_Arrays)
    cpdef _sync(self, _Member m, idx)
    cpdef _sync_answered(self, _Member m, idx, result)
    cpdef _leave(self, _Member m, idx)
    cpdef _heartbeat(self, _Member m, idx)
    cpdef _commit(self, _Member m, idx, seq)
    cpdef _run(self, table, end_ms)
    # The event arrays (HeartbeatRun's too) as typed views of their buffers, and the
    # per-event state the same way: an event's kind, time and indexes are C loads
    @cython.locals(m=_Member, n=Py_ssize_t, idx=Py_ssize_t, nxt=Py_ssize_t, ix=Py_ssize_t,
                   kind=int, t="long long", long_runs=bint, handles="long long[:]",
                   group_events="long long[:]")
    cpdef _loop(self, runs, const unsigned char[:] kinds, const long long[:] times,
                const long long[:] seqs, const int[:] member_ix, const int[:] group_ix,
                join_rows)
    cpdef _play(self, runs, idx, stop)
    cdef inline bint _left_commit(self, runs) except -1


cpdef read_members(coord, gid, view, version=*)
@cython.locals(top="long long", n=Py_ssize_t, i=Py_ssize_t, c="long long")
cpdef Py_ssize_t _first_uses_into(const long long[::1] codes, long long[::1] out) except -2


cdef class _Answer:
    cdef ShardReplay replay
    cdef _Member m
    cdef object idx
    cdef bint sync

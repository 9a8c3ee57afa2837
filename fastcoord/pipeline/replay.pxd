# cython: language_level=3
# The augmenting declarations of replay.py, which setup.py compiles in place; the .py
# alone (a build without extensions, FASTCOORD_NO_EXTENSIONS) never reads this file.
#
# As in fastcoord/_native/groups.pxd: _Member, _GroupView and ShardReplay become
# extension types whose attributes (exactly those their __init__ and _start/_index set)
# sit in slots, so reading one is a load, not a look-up through the type and an
# instance dict; the per-request methods are cpdef, so the driver's calls of them are C
# calls and their member and group arguments are typed. Every value stays a Python
# object except a member's and a group's ix, fixed at creation: no value changes.
# (A cpdef method holds no closure: the coordinator's callbacks are _Answer objects,
# which call _join_answered or _sync_answered.)
cimport cython

# The event codes and the error codes the driver compares with (plain ints in the .py)
cdef int _HEARTBEAT, _JOIN, _SYNC, _LEAVE, _COMMIT, _OTHER, _UNKNOWN, _MIDREQ


# The per-member and per-group arrays in slots too, as typed views of the array.array
# buffers the .py makes (HeartbeatRun's view the same memory): the driver reads and
# writes one of them several times per request, a C load or store where indexing the
# array object took a Python call and an int object (with the fixed-arity
# GroupRecord.__exit__: callgrind, shard 7 of the 10M-event trace, 1,345.1M -> 1,278.7M
# instructions). From Python, an attribute reads as a memoryview of the array, indexed
# as the array is.
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
    cdef public object shard, impl, num_shards, heartbeat_runs, coord, clock, now
    cdef public object members, by_ix, by_rid, static, groups, by_group_ix, checks
    cdef public object group_version, runs, _sorted, rebalances
    cdef public object expirations
    cdef public int[::1] errors               # (array.array buffers, as _Arrays')
    cdef public long long[::1] answered
    cdef public _Arrays arrays

    @cython.locals(arrays=_Arrays, ix=Py_ssize_t, last="long long", d="long long")
    cpdef _arm(self, _Member m)
    cpdef _step(self, t)
    @cython.locals(gv=_GroupView, m=_Member)
    cpdef advance_to(self, t)
    @cython.locals(m=_Member)
    cpdef _observe(self, _GroupView gv, cause)
    cpdef _arm_group(self, _GroupView gv, now)
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
    cpdef _commit(self, _Member m, idx, seq)
    cpdef _run(self, table, end_ms)
    # The event arrays (HeartbeatRun's too) as typed views of their buffers, and the
    # per-event state the same way: an event's kind, time and indexes are C loads
    @cython.locals(m=_Member, n=Py_ssize_t, idx=Py_ssize_t, nxt=Py_ssize_t, ix=Py_ssize_t,
                   kind=int, t="long long", long_runs=bint, handles="long long[:]",
                   group_events="long long[:]", errors="int[:]", answered="long long[:]")
    cpdef _loop(self, runs, const unsigned char[:] kinds, const long long[:] times,
                const long long[:] seqs, const int[:] member_ix, const int[:] group_ix,
                join_rows)
    cpdef _play(self, runs, idx, stop)


cpdef read_members(coord, gid, view, version=*)


cdef class _Answer:
    cdef ShardReplay replay
    cdef _Member m
    cdef object idx
    cdef bint sync

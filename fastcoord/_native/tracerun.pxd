from libc.stdint cimport int32_t, int64_t, uint8_t

from fastcoord._native.members cimport MemberTable
from fastcoord._native.wheel cimport Timer


cdef class HeartbeatRun:
    cdef object clock               # the coordinator's ManualClock (its time is set here)
    cdef MemberTable table
    cdef Timer timer
    cdef int64_t min_delay          # group_min_session_timeout_ms: what idle_through needs
    cdef Py_ssize_t n
    # per event
    cdef const uint8_t[::1] kinds
    cdef const int64_t[::1] times
    cdef const int32_t[::1] members
    cdef const int32_t[::1] groups
    cdef int32_t[::1] errors
    cdef int64_t[::1] answered
    # per member
    cdef const int64_t[::1] handles
    cdef const int32_t[::1] generations
    cdef const int64_t[::1] check_at
    cdef int64_t[::1] last_touch
    # per group
    cdef int64_t[::1] group_events
    # commits (commits: given)
    cdef bint commits
    cdef const int64_t[::1] offsets
    cdef list instances
    cdef object partition
    cdef object commit_accepted     # the group logic's store step
    cdef public Py_ssize_t arm

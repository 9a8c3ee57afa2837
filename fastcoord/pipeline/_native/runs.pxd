from libc.stdint cimport int32_t, int64_t, uint8_t

from fastcoord.core._native.engines cimport MemberTable
from fastcoord.core.clock cimport ManualClock
from fastcoord.core.store cimport InMemoryStore
from fastcoord.core._native.engines cimport ManualStepper, Timer


ctypedef struct check_entry:
    int64_t deadline
    int64_t seq            # push order: ties go first in, first out
    int64_t code           # a member's index (>= 0), or ~ a group's index


cdef class CheckHeap:
    cdef check_entry* items
    cdef Py_ssize_t n
    cdef Py_ssize_t cap
    cdef int64_t seq

    cdef int c_push(self, int64_t deadline, int64_t code) except -1
    cdef void c_pop(self) noexcept

    cdef inline int64_t c_next_due(self) noexcept:
        return self.items[0].deadline if self.n else 0x7FFFFFFFFFFFFFFF

    cdef inline int64_t c_next_code(self) noexcept:
        return self.items[0].code       # (n > 0)


cdef class HeartbeatRun:
    cdef ManualClock clock          # the coordinator's (exactly one: check_run_args; its
                                    # time is set here)
    cdef object advance_time        # the coordinator's: where the timer must move
    cdef ManualStepper stepper      # the native stepper advance_time is bound to, or None
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
    cdef const int64_t[::1] sessions
    cdef const uint8_t[::1] replaced
    cdef int64_t[::1] check_at
    cdef int64_t[::1] last_touch
    # per group
    cdef int64_t[::1] group_events
    cdef const int64_t[::1] group_check_at
    # the replay's pending checks
    cdef CheckHeap checks
    # commits (commits: given)
    cdef bint commits
    cdef const int64_t[::1] offsets
    cdef list instances
    cdef object partition
    cdef InMemoryStore store        # the coordinator's (exactly one: check_run_args)
    cdef readonly bint left_commit  # run() stopped at a commit for commit_offsets

    cdef bint c_settle_checks(self, int64_t t) except -1
    cpdef Py_ssize_t run(self, Py_ssize_t i, object stop=*) except -1
    cdef int c_commit_accepted(self, Py_ssize_t slot, int64_t offset, int64_t now) except -1

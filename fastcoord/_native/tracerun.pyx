# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A trace replay's runs of heartbeats and commits, in C (twin and documentation:
fastcoord/_pure/tracerun.py). Per heartbeat: no Python object and no Python call but
the clock's new time. Per commit: the member table's checks in C, then the group
logic's store step (GroupLogic.commit_accepted) in Python."""
from libc.stdint cimport int32_t, int64_t, uint8_t

from fastcoord._native.members cimport MemberTable
from fastcoord._native.wheel cimport Timer

from fastcoord.errors import Errors
from fastcoord._pure.tracerun import check_run_args

cdef enum:
    C_HEARTBEAT = 0
    C_COMMIT = 4
    C_NO_HANDLE = -1
    C_LOOK_UP = -2
    C_NOT_ARMED = -1
    C_NONE = 0

# The pure twin's values (tests/test_tracerun.py checks they agree)
HEARTBEAT = C_HEARTBEAT
COMMIT = C_COMMIT
NO_HANDLE = C_NO_HANDLE
LOOK_UP = C_LOOK_UP
NOT_ARMED = C_NOT_ARMED

cdef int C_UNKNOWN = int(Errors.UNKNOWN_MEMBER_ID)
cdef int C_REBALANCING = int(Errors.REBALANCE_IN_PROGRESS)


cdef class HeartbeatRun:
    """Plays runs of heartbeats and commits for one replay (see
    fastcoord/_pure/tracerun.py)."""

    def __init__(self, coordinator, kinds, times, members, groups, errors, answered,
                 handles, generations, check_at, last_touch, group_events, *,
                 offsets=None, instances=None, partition=None):
        self.commits = check_run_args(coordinator, kinds, times, members, groups, errors,
                                      answered, handles, offsets, instances, partition)
        self.clock = coordinator.clock
        self.table = coordinator._logic.table
        self.timer = coordinator._logic.timer
        self.min_delay = coordinator.config.group_min_session_timeout_ms
        self.kinds, self.times = kinds, times
        self.members, self.groups = members, groups
        self.errors, self.answered = errors, answered
        self.handles, self.generations = handles, generations
        self.check_at, self.last_touch = check_at, last_touch
        self.group_events = group_events
        self.n = self.kinds.shape[0]
        if self.commits:
            self.offsets = offsets
            self.instances = instances
            self.partition = partition
            self.commit_accepted = coordinator._logic.commit_accepted
        self.arm = -1

    @property
    def now(self):
        return self.clock.now_ms()

    def run(self, Py_ssize_t i, int64_t check_due, stop=None):
        """Play the heartbeats (and commits) from event i on (before event `stop`, if
        given); the index of the first one not played."""
        cdef int64_t now = self.clock.now_ms(), t, handle
        cdef int32_t m
        cdef int error
        cdef uint8_t kind
        cdef Py_ssize_t slot
        cdef bint touched
        cdef Py_ssize_t end = self.n if stop is None or stop > self.n else stop
        self.arm = -1
        if i < 0:
            raise ValueError(f"i must be >= 0, got {i}")
        while i < end:
            kind = self.kinds[i]
            if kind != C_HEARTBEAT and not (kind == C_COMMIT and self.commits):
                break
            t = self.times[i]
            if t >= check_due:
                break
            m = self.members[i]
            handle = self.handles[m]
            if handle == C_LOOK_UP or (kind == C_COMMIT and handle == C_NO_HANDLE):
                break
            if t > now:
                if not self.timer.c_idle_through(t, self.min_delay):
                    break
                self.clock._now = t          # ManualClock.set_ms(t), t > now
                now = t
            if kind == C_COMMIT:
                slot = self.table.c_commit_handle(handle, self.generations[m],
                                                  <object>self.instances[m], now)
                if slot < 0:
                    break                   # an answer commit_offsets gives
                error = self.commit_accepted(slot, self.partition, self.offsets[i])
                touched = error == C_NONE
            else:
                if handle == C_NO_HANDLE:
                    error = C_UNKNOWN
                else:
                    error = self.table.c_heartbeat_handle(handle, self.generations[m], now)
                touched = error == C_NONE or error == C_REBALANCING
            self.errors[i] = error
            self.answered[i] = t
            self.group_events[self.groups[i]] += 1
            i += 1
            if touched:
                self.last_touch[m] = t
                if self.check_at[m] == C_NOT_ARMED:
                    self.arm = m
                    break
        return i

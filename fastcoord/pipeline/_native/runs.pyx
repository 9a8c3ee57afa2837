# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A trace replay's runs of heartbeats and commits, and its pending checks, in C (twin
and documentation: fastcoord/pipeline/_pure/runs.py). Per heartbeat: no Python object and
no Python call but the clock's new time. Per commit: the member table's checks and then
GroupLogic.commit_accepted's steps in C, the store's write included (an InMemoryStore's
dict writes; its store_offset_now is called only to answer its failure). A session
check that only moves to the member's new deadline, or is dropped, is settled here."""
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint8_t

from fastcoord.core.groups cimport Group, _offset_alone
from fastcoord.core._native.engines cimport GroupRecord, MemberTable, lock_with_gil
from fastcoord.core._native.constants cimport DEAD
from fastcoord.core._native.mutex cimport pthread_mutex_unlock
from fastcoord.core._native.engines cimport ManualStepper, Timer
from fastcoord.core.clock cimport ManualClock

from fastcoord.core.errors import Errors
from fastcoord.pipeline._pure.runs import check_run_args

cdef enum:
    C_HEARTBEAT = 0
    C_COMMIT = 4
    C_NO_HANDLE = -1
    C_LOOK_UP = -2
    C_NOT_ARMED = -1
    C_NONE = 0

cdef int64_t C_NEVER = 0x7FFFFFFFFFFFFFFF

# The pure twin's values (tests/pipeline/test_runs.py checks they agree)
HEARTBEAT = C_HEARTBEAT
COMMIT = C_COMMIT
NO_HANDLE = C_NO_HANDLE
LOOK_UP = C_LOOK_UP
NOT_ARMED = C_NOT_ARMED
NEVER = C_NEVER

cdef object ERRORS_NONE = Errors.NONE
cdef int C_UNKNOWN = int(Errors.UNKNOWN_MEMBER_ID)
cdef int C_REBALANCING = int(Errors.REBALANCE_IN_PROGRESS)


cdef inline bint _before(check_entry* a, check_entry* b) noexcept:
    return a.deadline < b.deadline or (a.deadline == b.deadline and a.seq < b.seq)


cdef class CheckHeap:
    """The replay's pending checks, earliest deadline first, ties in push order (see
    fastcoord/pipeline/_pure/runs.py): a binary heap in one C array."""

    def __dealloc__(self):
        PyMem_Free(self.items)

    def __len__(self):
        return self.n

    def push(self, deadline, code):
        """Add a check at `deadline` for `code` (a member's index, or ~ a group's)."""
        if type(deadline) is not int or type(code) is not int:
            raise TypeError("deadline and code must be ints")
        self.c_push(deadline, code)

    def next_due(self):
        """The earliest deadline, or NEVER when there is no check."""
        return self.c_next_due()

    def pop(self):
        """(deadline, code) of the earliest check, removed."""
        if not self.n:
            raise IndexError("pop from an empty CheckHeap")
        cdef int64_t deadline = self.items[0].deadline, code = self.items[0].code
        self.c_pop()
        return deadline, code

    cdef int c_push(self, int64_t deadline, int64_t code) except -1:
        cdef Py_ssize_t i, parent
        cdef check_entry* grown
        cdef check_entry e
        if self.n == self.cap:
            grown = <check_entry*>PyMem_Realloc(self.items,
                                                 (self.cap * 2 + 64) * sizeof(check_entry))
            if grown is NULL:
                raise MemoryError()
            self.items = grown
            self.cap = self.cap * 2 + 64
        self.seq += 1
        e.deadline, e.seq, e.code = deadline, self.seq, code
        i = self.n
        self.n += 1
        while i > 0:
            parent = (i - 1) >> 1
            if not _before(&e, &self.items[parent]):
                break
            self.items[i] = self.items[parent]
            i = parent
        self.items[i] = e
        return 0

    cdef void c_pop(self) noexcept:
        cdef Py_ssize_t i = 0, child
        cdef check_entry last
        self.n -= 1
        if self.n == 0:
            return
        last = self.items[self.n]
        while True:
            child = 2 * i + 1
            if child >= self.n:
                break
            if child + 1 < self.n and _before(&self.items[child + 1], &self.items[child]):
                child += 1
            if not _before(&self.items[child], &last):
                break
            self.items[i] = self.items[child]
            i = child
        self.items[i] = last


cdef class HeartbeatRun:
    """Plays runs of heartbeats and commits for one replay (see
    fastcoord/pipeline/_pure/runs.py)."""

    def __init__(self, coordinator, kinds, times, members, groups, errors, answered,
                 handles, generations, check_at, last_touch, group_events, *,
                 checks, sessions, replaced, group_check_at,
                 offsets=None, instances=None, partition=None):
        self.commits = check_run_args(
            coordinator, kinds, times, members, groups, errors, answered,
            handles=handles, generations=generations, sessions=sessions, replaced=replaced,
            check_at=check_at, last_touch=last_touch, group_events=group_events,
            group_check_at=group_check_at, checks=checks, heap_type=CheckHeap,
            offsets=offsets, instances=instances, partition=partition)
        self.clock = coordinator.clock
        self.advance_time = coordinator.advance_time
        # ... called in C when it is a native stepper's advance (its step, a Python call)
        stepper = getattr(self.advance_time, "__self__", None)
        if type(stepper) is ManualStepper:
            self.stepper = stepper
        self.table = coordinator.member_table
        self.timer = coordinator.timer
        self.min_delay = coordinator.config.group_min_session_timeout_ms
        self.kinds, self.times = kinds, times
        self.members, self.groups = members, groups
        self.errors, self.answered = errors, answered
        self.handles, self.generations = handles, generations
        self.sessions, self.replaced = sessions, replaced
        self.check_at, self.last_touch = check_at, last_touch
        self.group_events, self.group_check_at = group_events, group_check_at
        self.checks = checks
        self.n = self.kinds.shape[0]
        if self.commits:
            self.offsets = offsets
            self.instances = instances
            self.partition = partition
            self.store = coordinator.store            # an InMemoryStore (check_run_args)

    @property
    def now(self):
        return self.clock._now

    def settle_checks(self, int64_t t):
        """Settle the checks due by t that need no more than moving or dropping; True
        if one due by t is left, the earliest, for the replay to take (a session that
        may have run out, a group's current check)."""
        return self.c_settle_checks(t)

    cdef bint c_settle_checks(self, int64_t t) except -1:
        """settle_checks, for C callers."""
        cdef CheckHeap checks = self.checks
        cdef int64_t d, code, due
        while checks.c_next_due() <= t:
            d = checks.c_next_due()
            code = checks.c_next_code()
            if code < 0:
                if self.group_check_at[~code] == d:
                    return True
                checks.c_pop()                          # superseded by a later one
                continue
            if self.handles[code] == C_NO_HANDLE or self.replaced[code]:
                checks.c_pop()                          # not a member to watch now
                self.check_at[code] = C_NOT_ARMED
                continue
            due = self.last_touch[code] + self.sessions[code]
            if due <= d:
                return True
            checks.c_pop()                              # contact since: a later check
            self.check_at[code] = due
            checks.c_push(due, code)
        return False

    cdef int c_commit_accepted(self, Py_ssize_t slot, int64_t offset, int64_t now) except -1:
        """GroupLogic.commit_accepted(slot, partition, offset) (the pure twin calls it):
        the offset alone, stamped with the commit time (on a ManualClock, its time: now),
        written by the store, then set on the group's offsets unless the group is Dead
; the store's answer."""
        cdef GroupRecord rec = <GroupRecord>self.table.slot_recs[slot]
        cdef object om = None                   # (the group logic's _offset_alone)
        cdef object stamp = now, at = offset
        cdef int error
        cdef InMemoryStore store = self.store
        cdef dict offsets, by_group
        cdef Group group = rec.group             # (a native table's: the native Group)
        if store.fail_with is ERRORS_NONE:
            # InMemoryStore.store_offset_now's write without the Python call (a replay's
            # every commit): the same dicts, the same offset, as commit_offsets stores
            # (tests/pipeline/test_runs.py, test_a_runs_commit_leaves_what_commit_offsets_leaves)
            if store.keeps_offsets:
                om = _offset_alone(self.table, at, stamp)
                offsets = store.offsets
                by_group = offsets.get(rec.group_id)
                if by_group is None:
                    by_group = offsets.setdefault(rec.group_id, {})
                by_group[self.partition] = om
        else:                               # the store's answer, by the store
            om = _offset_alone(self.table, at, stamp)
            error = store.store_offset_now(rec.group_id, self.partition, om)
            if error != C_NONE:
                return error
        lock_with_gil(rec.core)
        try:
            if rec.core.state != DEAD:
                if group is None:                   # (a record whose group is not set)
                    raise AttributeError("the group record holds no group")
                offsets = <dict>group.offsets       # (made a dict, never replaced)
                if om is None:                      # (a store that keeps none: a replay's)
                    om = _offset_alone(self.table, at, stamp)
                offsets[self.partition] = om
        finally:
            pthread_mutex_unlock(&rec.core.mu)
        return C_NONE

    cpdef Py_ssize_t run(self, Py_ssize_t i, object stop=None) except -1:
        """Play the heartbeats (and commits) from event i on (before event `stop`, if
        given); the index of the first one not played (a C call for a compiled
        replay's every run)."""
        cdef int64_t now = self.clock._now, t, handle
        cdef int32_t m
        cdef int error
        cdef uint8_t kind
        cdef Py_ssize_t slot
        cdef bint touched
        cdef Py_ssize_t end = self.n if stop is None or stop > self.n else stop
        self.left_commit = False
        if i < 0:
            raise ValueError(f"i must be >= 0, got {i}")
        while i < end:
            kind = self.kinds[i]
            if kind != C_HEARTBEAT and not (kind == C_COMMIT and self.commits):
                break
            t = self.times[i]
            if self.c_settle_checks(t):
                break
            if t > now:
                if self.timer.c_idle_through(t, self.min_delay):
                    self.clock._now = t                 # ManualClock.set_ms(t)
                    now = t
                else:
                    # What fires may answer requests (the replay's callbacks run) and arm
                    # checks: settle again before this event.
                    if self.stepper is not None:
                        self.stepper.c_advance(t - now)
                    else:
                        self.advance_time(t - now)
                    now = self.clock._now
                    continue
            m = self.members[i]
            handle = self.handles[m]
            if handle == C_LOOK_UP:
                break
            if kind == C_COMMIT:
                slot = -1 if handle == C_NO_HANDLE else self.table.c_commit_handle(
                    handle, self.generations[m], <object>self.instances[m], now)
                if slot < 0:
                    self.left_commit = True     # an answer commit_offsets gives
                    break
                error = self.c_commit_accepted(slot, self.offsets[i], now)
                touched = error == C_NONE
            else:
                if handle == C_NO_HANDLE:
                    if self.replaced[m]:
                        break                   # the replay's: by id (see the pure twin)
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
                    self.check_at[m] = t + self.sessions[m]
                    self.checks.c_push(t + self.sessions[m], m)
        return i

"""A trace replay's runs of heartbeats and commits, and its pending checks (twin:
fastcoord/pipeline/_native/runs.pyx).

`fastcoord.pipeline.replay` plays one coordinator shard's requests in time order.
Heartbeats are most of them, and each needs the same few steps: move the clock to its
time, heartbeat the member by its handle, record the answer, note the member's contact.
`HeartbeatRun.run(i)` takes those steps for the heartbeats from event `i` on, and stops
at the first event that needs the replay's general path:

- an event that is not a heartbeat (or a commit, below);
- a heartbeat with a check due by its time that the replay must take itself (below);
- a member whose handle the replay has yet to look up (`LOOK_UP`);
- a heartbeat of a member without a handle (`NO_HANDLE`) that a newer incarnation of
  its instance id `replaced`: whether it is UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID
  depends on the instance id the request names, which the replay reads and answers by.

Where the coordinator's timer has something due before a heartbeat's time, or its wheel
would have to move (`Timer.idle_through`), the run moves time with the coordinator's
`advance_time`, as the general path does; what fires may answer parked requests, whose
callbacks (the replay's) run there. Otherwise it only sets the clock.

The checks (`CheckHeap`: deadline, then push order) are the replay's: a session check
for a member (code: its index) at its last accepted contact plus its session timeout,
and a group's check (code: ~ the group's index) at the end of a rebalance timeout. A run
settles those due by an event's time that need nothing but bookkeeping, in heap order:

- a member's check when it is not a member to watch (no member id at the coordinator,
  `NO_HANDLE`, or `replaced` by a newer member with its instance id): dropped;
- a member's check when the member has had contact since: moved to the new deadline;
- a group's check that a later one superseded (`group_check_at` is not its deadline):
  dropped.

It stops at any other due check (a session that may have run out, a group's check),
which the replay takes: it steps time to the check's deadline and reads the group.
After an accepted heartbeat of a member without a pending check (`NOT_ARMED`), the run
arms one.

Commits (`COMMIT`) come between a member's heartbeats; given `offsets`, `instances` and
`partition`, a run plays them too, when the coordinator accepts them as they are
(`MemberTable.commit_handle`: the member joined, its generation current, the group
Stable or PreparingRebalance) and stores the offset (`GroupLogic.commit_accepted`; the
native twin takes its steps in C, the InMemoryStore's dict writes included). Any
other commit (a member without a handle, an error to answer) stops the run, for the
general path's `commit_offsets`, with `left_commit` set: the run has settled the checks
due by the commit's time and set the clock to it, and changed nothing else for it.

The state is the replay's, shared as arrays (array.array, or anything indexable the
same way; the native twin wants the array.array typecodes below):

    per event:  kinds (B), times (q), members (i), groups (i)       read
                errors (i), answered (q)                            written
    per member: handles (q), generations (i), sessions (q),
                replaced (B)                                        read
                check_at (q), last_touch (q)                        written
    per group:  group_check_at (q)                                  read
                group_events (q)                                    counted
    checks:     a CheckHeap of this twin                            settled, armed
    commits:    offsets (q, per event), instances (a list, per member: the instance
                id the member's commits name, or None), partition (what they commit)

Only a coordinator that no other thread uses may be driven this way (a replay's): the
clock is set without the coordinator's time lock.
"""
from __future__ import annotations

import heapq
from typing import Optional, Tuple

import numpy as np

from fastcoord.core.clock import ManualClock
from fastcoord.core.errors import Errors
from fastcoord.core.store import InMemoryStore

HEARTBEAT = 0       # kinds[i] of a heartbeat
COMMIT = 4          # kinds[i] of an offset commit
NO_HANDLE = -1      # handles[m]: no member id at the coordinator (UNKNOWN_MEMBER_ID)
LOOK_UP = -2        # handles[m]: a member id, its handle not looked up yet
NOT_ARMED = -1      # check_at[m], group_check_at[g]: no check pending
NEVER = 2 ** 63 - 1 # CheckHeap.next_due() with no check

_UNKNOWN = int(Errors.UNKNOWN_MEMBER_ID)
_REBALANCING = int(Errors.REBALANCE_IN_PROGRESS)


class CheckHeap:
    """The replay's pending checks: (deadline, code), earliest deadline first, checks
    with the same deadline in the order they were pushed."""

    def __init__(self) -> None:
        self._heap: list = []
        self._pushed = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, deadline: int, code: int) -> None:
        """Add a check at `deadline` for `code` (a member's index, or ~ a group's)."""
        if type(deadline) is not int or type(code) is not int:
            raise TypeError("deadline and code must be ints")
        self._pushed += 1
        heapq.heappush(self._heap, (deadline, self._pushed, code))

    def next_due(self) -> int:
        """The earliest deadline, or NEVER when there is no check."""
        return self._heap[0][0] if self._heap else NEVER

    def pop(self) -> Tuple[int, int]:
        """(deadline, code) of the earliest check, removed."""
        if not self._heap:
            raise IndexError("pop from an empty CheckHeap")
        deadline, _, code = heapq.heappop(self._heap)
        return deadline, code

    def _next_code(self) -> int:
        return self._heap[0][2]


class HeartbeatRun:
    """Plays runs of heartbeats and commits for one replay (see the module docstring)."""

    def __init__(self, coordinator, kinds, times, members, groups, errors, answered,
                 handles, generations, check_at, last_touch, group_events, *,
                 checks, sessions, replaced, group_check_at,
                 offsets=None, instances=None, partition=None) -> None:
        self._commits = check_run_args(
            coordinator, kinds, times, members, groups, errors, answered,
            handles=handles, generations=generations, sessions=sessions, replaced=replaced,
            check_at=check_at, last_touch=last_touch, group_events=group_events,
            group_check_at=group_check_at, checks=checks, heap_type=CheckHeap,
            offsets=offsets, instances=instances, partition=partition)
        self._clock = coordinator.clock
        self._advance_time = coordinator.advance_time
        self._table = coordinator.member_table
        self._timer = coordinator.timer
        self._min_delay = coordinator.config.group_min_session_timeout_ms
        self._kinds, self._times = kinds, times
        self._members, self._groups = members, groups
        self._errors, self._answered = errors, answered
        self._handles, self._generations = handles, generations
        self._sessions, self._replaced = sessions, replaced
        self._check_at, self._last_touch = check_at, last_touch
        self._group_events, self._group_check_at = group_events, group_check_at
        self._checks = checks
        self._commit_accepted = coordinator.commit_accepted
        self._offsets, self._instances, self._partition = offsets, instances, partition
        self.left_commit = False    # run() stopped at a commit for commit_offsets

    @property
    def now(self) -> int:
        return self._clock.now_ms()

    def settle_checks(self, t: int) -> bool:
        """Settle the checks due by t that need no more than moving or dropping; True if
        one due by t is left, the earliest, for the replay to take (a session that may
        have run out, a group's current check)."""
        checks = self._checks
        while checks.next_due() <= t:
            d, code = checks.next_due(), checks._next_code()
            if code < 0:
                if self._group_check_at[~code] == d:
                    return True
                checks.pop()                            # superseded by a later one
                continue
            if self._handles[code] == NO_HANDLE or self._replaced[code]:
                checks.pop()                            # not a member to watch now
                self._check_at[code] = NOT_ARMED
                continue
            due = self._last_touch[code] + self._sessions[code]
            if due <= d:
                return True
            checks.pop()                                # contact since: a later check
            self._check_at[code] = due
            checks.push(due, code)
        return False

    def run(self, i: int, stop: Optional[int] = None) -> int:
        """Play the heartbeats (and commits) from event i on (before event `stop`, if
        given); the index of the first one not played."""
        kinds, times, members = self._kinds, self._times, self._members
        clock = self._clock
        now = clock.now_ms()
        end = len(kinds) if stop is None else min(stop, len(kinds))
        self.left_commit = False
        if i < 0:
            raise ValueError(f"i must be >= 0, got {i}")
        while i < end:
            kind = kinds[i]
            if kind != HEARTBEAT and not (kind == COMMIT and self._commits):
                break
            t = times[i]
            if self.settle_checks(t):
                break
            if t > now:
                if self._timer.idle_through(t, self._min_delay):
                    clock.set_ms(t)
                    now = t
                else:
                    # What fires may answer requests (the replay's callbacks run) and
                    # arm checks: settle again before this event.
                    self._advance_time(t - now)
                    now = clock.now_ms()
                    continue
            m = members[i]
            handle = self._handles[m]
            if handle == LOOK_UP:
                break
            if kind == COMMIT:
                slot = -1 if handle == NO_HANDLE else self._table.commit_handle(
                    handle, self._generations[m], self._instances[m])
                if slot < 0:
                    self.left_commit = True     # an answer commit_offsets gives
                    break
                error = int(self._commit_accepted(slot, self._partition, self._offsets[i]))
                touched = error == 0
            else:
                if handle == NO_HANDLE:
                    if self._replaced[m]:
                        break                   # the replay's: by id with its instance id
                    error = _UNKNOWN
                else:
                    error = self._table.heartbeat_handle(handle, self._generations[m])
                touched = error == 0 or error == _REBALANCING
            self._errors[i] = error
            self._answered[i] = t
            self._group_events[self._groups[i]] += 1
            i += 1
            if touched:
                self._last_touch[m] = t
                if self._check_at[m] == NOT_ARMED:
                    self._check_at[m] = t + self._sessions[m]
                    self._checks.push(t + self._sessions[m], m)
        return i


def check_run_args(coordinator, kinds, times, members, groups, errors, answered, *,
                   handles, generations, sessions, replaced, check_at, last_touch,
                   group_events, group_check_at, checks, heap_type, offsets, instances,
                   partition) -> bool:
    """HeartbeatRun's arguments (both twins): a coordinator on a ManualClock, the
    per-event arrays as long as `kinds`, the per-member ones as long as `handles`, the
    per-group ones as long as each other, `checks` a `heap_type` (the twin's CheckHeap),
    and the commit arguments all three or none (True if given). Commits are played only
    on a store that answers at once (GroupLogic.commit_accepted)."""
    if type(coordinator.clock) is not ManualClock:
        raise TypeError("HeartbeatRun needs a coordinator on a ManualClock")
    if type(checks) is not heap_type:
        raise TypeError(f"checks must be this twin's CheckHeap, got {type(checks).__name__}")
    n = len(kinds)
    for name, arr in (("times", times), ("members", members), ("groups", groups),
                      ("errors", errors), ("answered", answered)):
        if len(arr) != n:
            raise ValueError(f"{name} has {len(arr)} entries, kinds has {n}")
    for name, arr, of, size in (
            ("generations", generations, "handles", len(handles)),
            ("sessions", sessions, "handles", len(handles)),
            ("replaced", replaced, "handles", len(handles)),
            ("check_at", check_at, "handles", len(handles)),
            ("last_touch", last_touch, "handles", len(handles)),
            ("group_check_at", group_check_at, "group_events", len(group_events))):
        if len(arr) != size:
            raise ValueError(f"{name} has {len(arr)} entries, {of} has {size}")
    for name, arr, size in (("members", members, len(handles)),
                            ("groups", groups, len(group_events))):
        # (the native twin indexes without bounds checks)
        if n and not 0 <= int(np.min(arr)) <= int(np.max(arr)) < size:
            raise ValueError(f"{name} must index 0..{size - 1}")
    given = [a is not None for a in (offsets, instances, partition)]
    if not any(given):
        return False
    if not all(given):
        raise ValueError("offsets, instances and partition go together")
    if len(offsets) != n:
        raise ValueError(f"offsets has {len(offsets)} entries, kinds has {n}")
    if type(instances) is not list:
        raise TypeError(f"instances must be a list, got {type(instances).__name__}")
    if len(instances) != len(handles):
        raise ValueError(f"instances has {len(instances)} entries, handles has {len(handles)}")
    if not (type(partition) is tuple and len(partition) == 2 and type(partition[0]) is str
            and type(partition[1]) is int):
        raise TypeError(f"partition must be a (topic, partition) tuple, got {partition!r}")
    if type(coordinator.store) is not InMemoryStore:
        raise TypeError("HeartbeatRun plays commits only on an InMemoryStore")
    return True

"""A trace replay's runs of heartbeats and commits (twin: fastcoord/_native/tracerun.pyx).

`fastcoord.pipeline.replay` plays one coordinator shard's requests in time order.
Heartbeats are most of them, and each needs the same few steps: move the clock to its
time, heartbeat the member by its handle, record the answer, note the member's contact.
`HeartbeatRun.run(i, check_due)` takes those steps for the heartbeats from event `i`
on, and stops at the first event that needs the replay's general path:

- an event that is not a heartbeat (or a commit, below);
- a heartbeat at or after `check_due`, the replay's earliest pending session or group
  check (the replay steps time to each check itself);
- a heartbeat whose time the coordinator cannot simply be set to: a timer falls due
  before it, or the wheel would have to move (`Timer.idle_through`; the general path
  uses advance_time there);
- a member whose handle the replay has yet to look up (`LOOK_UP`).

After an accepted heartbeat of a member with no session check pending (`NOT_ARMED`) it
stops as well, with the member in `arm`: arming a check is the replay's business.

Commits (`COMMIT`) come between a member's heartbeats; given `offsets`, `instances` and
`partition`, a run plays them too, when the coordinator accepts them as they are
(`MemberTable.commit_handle`: the member joined, its generation current, the group
Stable or PreparingRebalance) and stores the offset (`GroupLogic.commit_accepted`). Any
other commit (a member without a handle, an error to answer) stops the run, for the
general path's `commit_offsets`. Such a stop may leave the clock at the commit's time.

The state is the replay's, shared as arrays (array.array, or anything indexable the
same way; the native twin wants the array.array typecodes below):

    per event:  kinds (B), times (q), members (i), groups (i)   read
                errors (i), answered (q)                        written
    per member: handles (q), generations (i), check_at (q)      read
                last_touch (q)                                  written
    per group:  group_events (q)                                counted
    commits:    offsets (q, per event), instances (a list, per member: the instance
                id the member's commits name, or None), partition (what they commit)

Only a coordinator that no other thread uses may be driven this way (a replay's): the
clock is set without the coordinator's time lock.
"""
from __future__ import annotations

from typing import Optional

from ..clock import ManualClock
from ..errors import Errors
from ..store import InMemoryStore

HEARTBEAT = 0       # kinds[i] of a heartbeat
COMMIT = 4          # kinds[i] of an offset commit
NO_HANDLE = -1      # handles[m]: no member id at the coordinator (UNKNOWN_MEMBER_ID)
LOOK_UP = -2        # handles[m]: a member id, its handle not looked up yet
NOT_ARMED = -1      # check_at[m]: no session check pending

_UNKNOWN = int(Errors.UNKNOWN_MEMBER_ID)
_REBALANCING = int(Errors.REBALANCE_IN_PROGRESS)


class HeartbeatRun:
    """Plays runs of heartbeats and commits for one replay (see the module docstring)."""

    def __init__(self, coordinator, kinds, times, members, groups, errors, answered,
                 handles, generations, check_at, last_touch, group_events, *,
                 offsets=None, instances=None, partition=None) -> None:
        self._commits = check_run_args(coordinator, kinds, times, members, groups, errors,
                                       answered, handles, offsets, instances, partition)
        self._clock = coordinator.clock
        self._table = coordinator._logic.table
        self._timer = coordinator._logic.timer
        self._min_delay = coordinator.config.group_min_session_timeout_ms
        self._kinds, self._times = kinds, times
        self._members, self._groups = members, groups
        self._errors, self._answered = errors, answered
        self._handles, self._generations = handles, generations
        self._check_at, self._last_touch = check_at, last_touch
        self._group_events = group_events
        self._logic = coordinator._logic
        self._offsets, self._instances, self._partition = offsets, instances, partition
        self.arm = -1           # after run(): the member to arm a check for, or -1

    @property
    def now(self) -> int:
        return self._clock.now_ms()

    def run(self, i: int, check_due: int, stop: Optional[int] = None) -> int:
        """Play the heartbeats (and commits) from event i on (before event `stop`, if
        given); the index of the first one not played."""
        kinds, times, members = self._kinds, self._times, self._members
        clock = self._clock
        now = clock.now_ms()
        end = len(kinds) if stop is None else min(stop, len(kinds))
        self.arm = -1
        if i < 0:
            raise ValueError(f"i must be >= 0, got {i}")
        while i < end:
            kind = kinds[i]
            if kind != HEARTBEAT and not (kind == COMMIT and self._commits):
                break
            t = times[i]
            if t >= check_due:
                break
            m = members[i]
            handle = self._handles[m]
            if handle == LOOK_UP or (kind == COMMIT and handle == NO_HANDLE):
                break
            if t > now:
                if not self._timer.idle_through(t, self._min_delay):
                    break
                clock.set_ms(t)
                now = t
            if kind == COMMIT:
                slot = self._table.commit_handle(handle, self._generations[m],
                                                 self._instances[m])
                if slot < 0:
                    break                   # an answer commit_offsets gives
                error = int(self._logic.commit_accepted(slot, self._partition, self._offsets[i]))
                touched = error == 0
            else:
                if handle == NO_HANDLE:
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
                    self.arm = m
                    break
        return i


def check_run_args(coordinator, kinds, times, members, groups, errors, answered, handles,
                   offsets, instances, partition) -> bool:
    """HeartbeatRun's arguments (both twins): a coordinator on a ManualClock, the
    per-event arrays as long as `kinds`, and the commit arguments all three or none
    (True if given). Commits are played only on a store that answers at once
    (GroupLogic.commit_accepted)."""
    if type(coordinator.clock) is not ManualClock:
        raise TypeError("HeartbeatRun needs a coordinator on a ManualClock")
    n = len(kinds)
    for name, arr in (("times", times), ("members", members), ("groups", groups),
                      ("errors", errors), ("answered", answered)):
        if len(arr) != n:
            raise ValueError(f"{name} has {len(arr)} entries, kinds has {n}")
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
    if type(coordinator._logic.store) is not InMemoryStore:
        raise TypeError("HeartbeatRun plays commits only on an InMemoryStore")
    return True

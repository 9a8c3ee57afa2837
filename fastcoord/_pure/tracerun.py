"""A trace replay's runs of heartbeats (twin: fastcoord/_native/tracerun.pyx).

`fastcoord.pipeline.replay` plays one coordinator shard's requests in time order.
Heartbeats are most of them, and each needs the same few steps: move the clock to its
time, heartbeat the member by its handle, record the answer, note the member's contact.
`HeartbeatRun.run(i, check_due)` takes those steps for the heartbeats from event `i`
on, and stops at the first event that needs the replay's general path:

- an event that is not a heartbeat;
- a heartbeat at or after `check_due`, the replay's earliest pending session or group
  check (the replay steps time to each check itself);
- a heartbeat whose time the coordinator cannot simply be set to: a timer falls due
  before it, or the wheel would have to move (`Timer.idle_through`; the general path
  uses advance_time there);
- a member whose handle the replay has yet to look up (`LOOK_UP`).

After an accepted heartbeat of a member with no session check pending (`NOT_ARMED`) it
stops as well, with the member in `arm`: arming a check is the replay's business.

The state is the replay's, shared as arrays (array.array, or anything indexable the
same way; the native twin wants the array.array typecodes below):

    per event:  kinds (B), times (q), members (i), groups (i)   read
                errors (i), answered (q)                        written
    per member: handles (q), generations (i), check_at (q)      read
                last_touch (q)                                  written
    per group:  group_events (q)                                counted

Only a coordinator that no other thread uses may be driven this way (a replay's): the
clock is set without the coordinator's time lock.
"""
from __future__ import annotations

from typing import Optional

from ..clock import ManualClock
from ..errors import Errors

HEARTBEAT = 0       # kinds[i] of a heartbeat
NO_HANDLE = -1      # handles[m]: no member id at the coordinator (UNKNOWN_MEMBER_ID)
LOOK_UP = -2        # handles[m]: a member id, its handle not looked up yet
NOT_ARMED = -1      # check_at[m]: no session check pending

_UNKNOWN = int(Errors.UNKNOWN_MEMBER_ID)
_REBALANCING = int(Errors.REBALANCE_IN_PROGRESS)


class HeartbeatRun:
    """Plays runs of heartbeats for one replay (see the module docstring)."""

    def __init__(self, coordinator, kinds, times, members, groups, errors, answered,
                 handles, generations, check_at, last_touch, group_events) -> None:
        if type(coordinator.clock) is not ManualClock:
            raise TypeError("HeartbeatRun needs a coordinator on a ManualClock")
        n = len(kinds)
        for name, arr in (("times", times), ("members", members), ("groups", groups),
                          ("errors", errors), ("answered", answered)):
            if len(arr) != n:
                raise ValueError(f"{name} has {len(arr)} entries, kinds has {n}")
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
        self.arm = -1           # after run(): the member to arm a check for, or -1

    @property
    def now(self) -> int:
        return self._clock.now_ms()

    def run(self, i: int, check_due: int, stop: Optional[int] = None) -> int:
        """Play the heartbeats from event i on (before event `stop`, if given); the index
        of the first one not played."""
        kinds, times, members = self._kinds, self._times, self._members
        clock = self._clock
        now = clock.now_ms()
        end = len(kinds) if stop is None else min(stop, len(kinds))
        self.arm = -1
        if i < 0:
            raise ValueError(f"i must be >= 0, got {i}")
        while i < end and kinds[i] == HEARTBEAT:
            t = times[i]
            if t >= check_due:
                break
            m = members[i]
            handle = self._handles[m]
            if handle == LOOK_UP:
                break
            if t > now:
                if not self._timer.idle_through(t, self._min_delay):
                    break
                clock.set_ms(t)
                now = t
            if handle == NO_HANDLE:
                error = _UNKNOWN
            else:
                error = self._table.heartbeat_handle(handle, self._generations[m])
            self._errors[i] = error
            self._answered[i] = t
            self._group_events[self._groups[i]] += 1
            i += 1
            if error == 0 or error == _REBALANCING:
                self._last_touch[m] = t
                if self._check_at[m] == NOT_ARMED:
                    self.arm = m
                    break
        return i

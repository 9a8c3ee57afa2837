"""The scalar heartbeat's lookup by (group id, member id) when the ids are equal to the
stored ones but other objects (as decoded from the wire), of every string kind, and the
time it reads from a ManualClock (or a subclass of it)."""
from __future__ import annotations

import pytest

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock

# One id per PEP 393 kind (1, 2 and 4 bytes a character), and one-character ASCII ids
# (a group's and a member's: which CPython shares, see _copy).
GROUPS = ["orders", "commandes-é", "注文-グループ", "group-\U0001F600", "g"]
MEMBERS = ["m", "membre-é", "メンバー", "member-\U0001F680", "consumer-1"]


def _shared(s: str) -> bool:
    """Whether CPython may hand out one shared object for every str equal to `s`: the
    empty str and the one-character ones below U+0100, however made (a slice, a join,
    a decode from the wire), on most versions. No other object equal to it may exist."""
    return len(s) == 0 or (len(s) == 1 and ord(s) < 0x100)


def _copy(s: str) -> str:
    """An equal str that is another object, unless CPython shares `s` (`_shared`)."""
    c = (s + "x")[:-1]       # a new str: built, then sliced (never an interned constant)
    assert c == s and (c is not s or _shared(s))
    return c


class SlowManualClock(ManualClock):
    """A subclass: the coordinator must not assume ManualClock's own slot layout."""
    __slots__ = ()


def _stable(impl, clock, group, member):
    coord = GroupCoordinator(CoordinatorConfig(group_initial_rebalance_delay_ms=0,
                                               group_min_session_timeout_ms=10),
                             clock=clock, impl=impl, member_id_factory=lambda p: member)
    joined = []
    coord.join_group(group, "", "consumer", [("range", b"")], session_timeout_ms=1000,
                     require_known_member_id=False, callback=joined.append)
    coord.advance_time(0)
    gen = joined[-1].generation_id
    synced = []
    coord.sync_group(group, gen, member, {member: b""}, callback=synced.append)
    assert synced[-1].error == Errors.NONE
    return coord, gen


@pytest.mark.parametrize("clock_cls", [ManualClock, SlowManualClock])
@pytest.mark.parametrize("group, member", list(zip(GROUPS, MEMBERS)))
def test_equal_ids_that_are_other_objects_find_the_member(impl, clock_cls, group, member):
    coord, gen = _stable(impl, clock_cls(), group, member)
    assert coord.heartbeat(_copy(group), _copy(member), gen) == Errors.NONE
    # The heartbeat moved the session deadline from the clock's current time: at 900 ms
    # and again at 1800 ms (past the first deadline), the member is still there.
    coord.advance_time(900)
    assert coord.heartbeat(_copy(group), _copy(member), gen) == Errors.NONE
    coord.advance_time(900)
    assert coord.heartbeat(_copy(group), _copy(member), gen) == Errors.NONE
    coord.advance_time(1001)            # no heartbeat for a whole session: expired
    assert coord.heartbeat(group, member, gen) == Errors.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("group, member", list(zip(GROUPS, MEMBERS)))
def test_ids_that_differ_only_in_content_or_kind_are_other_ids(impl, group, member):
    coord, gen = _stable(impl, ManualClock(), group, member)
    near = member[:-1] + chr(ord(member[-1]) + 1)            # same length and kind
    assert coord.heartbeat(group, near, gen) == Errors.UNKNOWN_MEMBER_ID
    wider = member[:-1] + "\U0001F600"                        # a wider kind
    assert coord.heartbeat(group, wider, gen) == Errors.UNKNOWN_MEMBER_ID
    assert coord.heartbeat(group + "\0", member, gen) == Errors.UNKNOWN_MEMBER_ID
    assert coord.heartbeat(group, member + "\0", gen) == Errors.UNKNOWN_MEMBER_ID
    assert coord.heartbeat(_copy(group), _copy(member), gen) == Errors.NONE

"""Bad input: wrong types raise TypeError / ValueError naming the argument and change
nothing; an empty group id answers INVALID_GROUP_ID; session timeout bounds;
oversize commit metadata; a raising callback is logged and leaves the group
consistent."""
from __future__ import annotations

import logging

import pytest

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock

from helpers.protocol import (
    COMPLETING, DELAY, GROUP, MAX_SESSION, MIN_SESSION, NONE, PROTOCOLS, PTYPE,
    SESSION, STABLE, SUPERSET, Proto, Reply,
)

TP = ("topic", 0)


def _join_kwargs(**over):
    kw = dict(session_timeout_ms=SESSION, callback=Reply())
    kw.update(over)
    return kw


# ---------------------------------------------------------------------------
# wrong types name the argument and have no effect
# ---------------------------------------------------------------------------

def test_join_wrong_types_raise_naming_the_argument(impl):
    h = Proto(impl)
    c = h.coord
    cases = [
        ("group_id", lambda: c.join_group(42, "", PTYPE, PROTOCOLS, **_join_kwargs())),
        ("member_id", lambda: c.join_group(GROUP, None, PTYPE, PROTOCOLS, **_join_kwargs())),
        ("protocol_type", lambda: c.join_group(GROUP, "", 7, PROTOCOLS, **_join_kwargs())),
        ("protocols", lambda: c.join_group(GROUP, "", PTYPE, "range", **_join_kwargs())),
        ("protocols", lambda: c.join_group(GROUP, "", PTYPE, [("range", "not-bytes")],
                                           **_join_kwargs())),
        ("session_timeout_ms", lambda: c.join_group(GROUP, "", PTYPE, PROTOCOLS,
                                                    **_join_kwargs(session_timeout_ms="500"))),
        ("rebalance_timeout_ms", lambda: c.join_group(GROUP, "", PTYPE, PROTOCOLS,
                                                      **_join_kwargs(rebalance_timeout_ms=1.5))),
        ("group_instance_id", lambda: c.join_group(GROUP, "", PTYPE, PROTOCOLS,
                                                   **_join_kwargs(group_instance_id=3))),
        ("callback", lambda: c.join_group(GROUP, "", PTYPE, PROTOCOLS,
                                          **_join_kwargs(callback="nope"))),
    ]
    for name, call in cases:
        with pytest.raises(TypeError, match=name):
            call()
    assert h.describe().state == "Dead"  # nothing was created
    assert h.coord.list_groups() == []


def test_sync_wrong_types_raise_naming_the_argument(impl):
    h = Proto(impl)
    f = h.form_group(1, sync=False)
    c = h.coord
    with pytest.raises(TypeError, match="generation_id"):
        c.sync_group(GROUP, "1", f.leader, callback=Reply())
    with pytest.raises(TypeError, match="member_id"):
        c.sync_group(GROUP, f.generation, 5, callback=Reply())
    with pytest.raises(TypeError, match="assignments"):
        c.sync_group(GROUP, f.generation, f.leader, [(f.leader, b"")], callback=Reply())
    with pytest.raises(TypeError, match="assignments"):
        c.sync_group(GROUP, f.generation, f.leader, {f.leader: "text"}, callback=Reply())
    with pytest.raises(TypeError, match="callback"):
        c.sync_group(GROUP, f.generation, f.leader, {}, callback=None)
    # the rejected leader syncs did not complete the rebalance
    assert h.state() == COMPLETING
    s = h.send_sync(f.leader, f.generation, {f.leader: b"ok"})
    assert s.error == NONE and s.result.assignment == b"ok"


def test_heartbeat_and_leave_wrong_types(impl):
    h = Proto(impl)
    f = h.form_group(1)
    with pytest.raises(TypeError, match="generation_id"):
        h.coord.heartbeat(GROUP, f.leader, "1")
    with pytest.raises(TypeError, match="group_id"):
        h.coord.heartbeat(b"groupId", f.leader, f.generation)
    with pytest.raises(TypeError, match="members"):
        h.coord.leave_group(GROUP, f.leader)
    with pytest.raises(TypeError, match="members"):
        h.coord.leave_group(GROUP, [f.leader])
    assert h.member_ids() == {f.leader}
    assert h.state() == STABLE


def test_out_of_range_generation_is_a_value_error(impl):
    h = Proto(impl)
    f = h.form_group(1)
    # the heartbeat hot path may either reject a generation outside int32 or answer the
    # protocol's ILLEGAL_GENERATION (it can never match); both leave the member untouched
    try:
        answer = h.coord.heartbeat(GROUP, f.leader, 2**31)
    except ValueError as exc:
        assert "generation_id" in str(exc)
    else:
        assert answer == Errors.ILLEGAL_GENERATION
    with pytest.raises(ValueError, match="generation_id"):
        h.coord.sync_group(GROUP, 2**31, f.leader, callback=Reply())
    with pytest.raises(ValueError, match="session_timeout_ms"):
        h.coord.join_group(GROUP, "", PTYPE, PROTOCOLS, **_join_kwargs(session_timeout_ms=2**40))
    assert h.heartbeat(f.leader, f.generation) == NONE


def test_commit_and_fetch_wrong_types(impl):
    h = Proto(impl)
    with pytest.raises(TypeError, match="offsets"):
        h.coord.commit_offsets(GROUP, "", -1, [(TP, 1)])
    with pytest.raises(TypeError):
        h.coord.commit_offsets(GROUP, "", -1, {"topic-0": 1})
    with pytest.raises(TypeError, match="offsets"):
        h.coord.commit_offsets(GROUP, "", -1, {TP: "1"})
    with pytest.raises(TypeError, match="generation_id"):
        h.coord.commit_offsets(GROUP, "", None, {TP: 1})
    with pytest.raises(TypeError, match="group_id"):
        h.coord.fetch_offsets(1)
    # nothing was stored and no group was created
    assert h.describe().state == "Dead"
    assert h.fetch([TP])[1][TP].offset == -1


def test_admin_wrong_types(impl):
    h = Proto(impl)
    with pytest.raises(TypeError, match="group_id"):
        h.coord.describe_group(3)
    with pytest.raises(TypeError, match="group_ids"):
        h.coord.delete_groups(GROUP)  # a str, not an iterable of str
    with pytest.raises(TypeError, match="states"):
        h.coord.list_groups([1])
    with pytest.raises((TypeError, ValueError), match="shard"):
        h.coord.owns_shard(-1)
    with pytest.raises((TypeError, ValueError), match="shard"):
        h.coord.begin_loading(10_000)


def test_bad_constructor_arguments(impl):
    with pytest.raises(ValueError, match="group_min_session_timeout_ms"):
        CoordinatorConfig(group_min_session_timeout_ms=-1)
    with pytest.raises(ValueError, match="num_shards"):
        CoordinatorConfig(num_shards=0)
    with pytest.raises(ValueError):
        GroupCoordinator(CoordinatorConfig(), clock=ManualClock(), impl="bogus")
    with pytest.raises(TypeError):
        GroupCoordinator(CoordinatorConfig(), clock=ManualClock(), impl=3)


# ---------------------------------------------------------------------------
# protocol-level bad input
# ---------------------------------------------------------------------------

def test_empty_group_id_is_invalid_group_id(impl):
    h = Proto(impl)
    r = h.send_join("", group="")
    assert r.error == Errors.INVALID_GROUP_ID
    assert r.result.generation_id == -1
    assert h.join_old("", group="", instance="i").error == Errors.INVALID_GROUP_ID
    assert h.send_sync("m", 1, group="").error == Errors.INVALID_GROUP_ID
    assert h.heartbeat("m", 1, group="") == Errors.INVALID_GROUP_ID
    assert h.leave("m", group="").error == Errors.INVALID_GROUP_ID
    assert h.describe("").state == "Dead"  # no group was created


def test_session_timeout_below_minimum(impl):
    h = Proto(impl)
    r = h.send_join("", session=MIN_SESSION - 1)
    assert r.error == Errors.INVALID_SESSION_TIMEOUT
    assert r.result.generation_id == -1
    assert h.describe().state == "Dead"


def test_session_timeout_above_maximum(impl):
    h = Proto(impl)
    r = h.join_old("", session=MAX_SESSION + 1)
    assert r.error == Errors.INVALID_SESSION_TIMEOUT
    assert h.describe().state == "Dead"


def test_session_timeout_bounds_are_inclusive(impl):
    h = Proto(impl)
    assert h.send_join("", session=MIN_SESSION).error == Errors.MEMBER_ID_REQUIRED
    assert h.send_join("", session=MAX_SESSION).error == Errors.MEMBER_ID_REQUIRED


def test_session_timeout_checked_for_known_members_too(impl):
    h = Proto(impl)
    f = h.form_group(1)
    r = h.send_join(f.leader, session=MIN_SESSION - 1, protocols=SUPERSET)
    assert r.error == Errors.INVALID_SESSION_TIMEOUT
    assert h.state() == STABLE  # no rebalance


def test_oversize_commit_metadata_only_fails_that_partition(impl):
    from fastcoord import OffsetAndMetadata
    h = Proto(impl)
    f = h.form_group(1)
    big = OffsetAndMetadata(5, "m" * 4097)
    ok = OffsetAndMetadata(6, "m" * 100)
    res = h.commit(f.leader, f.generation, {TP: big, ("topic", 1): ok})
    assert res == {TP: Errors.OFFSET_METADATA_TOO_LARGE, ("topic", 1): NONE}
    fetched = h.fetch(None)[1]
    assert {tp: om.offset for tp, om in fetched.items()} == {("topic", 1): 6}


# ---------------------------------------------------------------------------
# callbacks that raise
# ---------------------------------------------------------------------------

def test_raising_join_callback_is_logged_and_group_stays_consistent(impl, caplog):
    h = Proto(impl)
    calls = []

    def boom(result):
        calls.append(result)
        raise RuntimeError("callback failure")

    caplog.set_level(logging.WARNING)
    h.coord.join_group(GROUP, "", PTYPE, PROTOCOLS, session_timeout_ms=SESSION,
                       rebalance_timeout_ms=500, require_known_member_id=False, callback=boom)
    other = h.join_old("")
    h.advance(2 * DELAY)  # the raising callback fires inside advance_time
    assert len(calls) == 1 and calls[0].error == NONE
    assert other.error == NONE
    assert any(r.levelno >= logging.WARNING for r in caplog.records)
    assert h.state() == COMPLETING
    gen, leader = other.result.generation_id, other.result.leader_id
    assert leader == calls[0].member_id
    s = h.send_sync(leader, gen, {leader: b"L", other.result.member_id: b"O"})
    fs = h.send_sync(other.result.member_id, gen)
    assert s.error == NONE and fs.error == NONE and fs.result.assignment == b"O"
    assert h.state() == STABLE


def test_raising_sync_callback_is_logged_and_others_still_answered(impl, caplog):
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    calls = []

    def boom(result):
        calls.append(result)
        raise ValueError("sync callback failure")

    caplog.set_level(logging.WARNING)
    h.coord.sync_group(GROUP, f.generation, f.follower, None, callback=boom)
    ls = h.send_sync(f.leader, f.generation, {f.leader: b"L", f.follower: b"F"})
    assert ls.error == NONE
    assert len(calls) == 1 and calls[0].assignment == b"F"
    assert any(r.levelno >= logging.WARNING for r in caplog.records)
    assert h.state() == STABLE
    assert h.heartbeat(f.follower, f.generation) == NONE


def test_raising_callback_answered_immediately_does_not_propagate(impl, caplog):
    h = Proto(impl)

    def boom(result):
        raise RuntimeError("immediate failure")

    caplog.set_level(logging.WARNING)
    h.coord.join_group(GROUP, "", PTYPE, PROTOCOLS, session_timeout_ms=SESSION, callback=boom)
    assert any(r.levelno >= logging.WARNING for r in caplog.records)
    assert h.describe().state == "Empty"
    assert h.send_join("").error == Errors.MEMBER_ID_REQUIRED

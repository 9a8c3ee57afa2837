"""OffsetCommit / OffsetFetch: the commit validation order, the OffsetCommit row of
the request x state table, simple (admin / no group management) groups, fetch of
all offsets, metadata size, store failures. Transactional offsets are out of scope."""
from __future__ import annotations

import pytest

from fastcoord import Errors, OffsetAndMetadata
from fastcoord.core.store import DeferredStore, InMemoryStore

from helpers.protocol import (
    COMPLETING, EMPTY, GROUP, NONE, OTHER_GROUP, PREPARING, PTYPE, SESSION, STABLE,
    SUPERSET, Proto, offsets_of,
)

TP = ("topic", 0)


def _om(offset, metadata="", epoch=-1):
    return OffsetAndMetadata(offset, metadata, epoch)


def _assert_fetched(fetched, tp, offset, metadata="", epoch=-1):
    om = fetched[tp]
    assert (om.offset, om.metadata, om.leader_epoch) == (offset, metadata, epoch)


def test_commit_unknown_group_with_generation_is_illegal_generation(impl):
    h = Proto(impl)
    res = h.commit("memberId", 1, {TP: _om(0)})
    assert res == {TP: Errors.ILLEGAL_GENERATION}
    assert h.describe().state == "Dead"  # no group was created
    err, fetched = h.fetch([TP])
    assert err == NONE and fetched[TP].offset == -1


def test_commit_with_default_generation_creates_simple_empty_group(impl):
    h = Proto(impl)
    res = h.commit("", -1, {TP: _om(0)})
    assert res == {TP: NONE}
    d = h.describe()
    assert d.state == EMPTY and d.members == []
    assert d.protocol_type == ""
    assert [(g.group_id, g.state) for g in h.coord.list_groups()] == [(GROUP, "Empty")]
    err, fetched = h.fetch([TP])
    assert err == NONE
    _assert_fetched(fetched, TP, 0)


def test_fetch_returns_offset_metadata_and_leader_epoch(impl):
    h = Proto(impl)
    res = h.commit("", -1, {TP: _om(97, "some metadata", 15)})
    assert res == {TP: NONE}
    err, fetched = h.fetch([TP])
    assert err == NONE
    _assert_fetched(fetched, TP, 97, "some metadata", 15)


def test_commit_plain_int_offset(impl):
    h = Proto(impl)
    assert h.commit("", -1, {TP: 42}) == {TP: NONE}
    err, fetched = h.fetch([TP])
    _assert_fetched(fetched, TP, 42, "", -1)


def test_commit_int_offset_is_stored_as_its_offset_and_metadata(impl):
    # A plain int offset is kept as the int through the argument checks and turned into
    # its OffsetAndMetadata at commit time: the same value as committing OffsetAndMetadata.
    h = Proto(impl)
    other = ("topic", 1)
    assert h.commit("", -1, {TP: 42, other: OffsetAndMetadata(42)}) == {TP: NONE, other: NONE}
    err, fetched = h.fetch([TP, other])
    assert err == NONE and type(fetched[TP]) is OffsetAndMetadata
    assert fetched[TP] == fetched[other]


def test_later_commit_overwrites(impl):
    h = Proto(impl)
    h.commit("", -1, {TP: _om(1, "a")})
    h.commit("", -1, {TP: _om(2, "b", 3)})
    _, fetched = h.fetch([TP])
    _assert_fetched(fetched, TP, 2, "b", 3)


def test_fetch_unknown_partition_and_unknown_group(impl):
    h = Proto(impl)
    err, fetched = h.fetch([TP, ("other", 3)])
    assert err == NONE
    assert offsets_of(fetched) == {TP: -1, ("other", 3): -1}
    h.commit("", -1, {TP: 5})
    err, fetched = h.fetch([TP, ("non-exist-topic", 0)])
    assert offsets_of(fetched) == {TP: 5, ("non-exist-topic", 0): -1}


def test_fetch_all_offsets(impl):
    h = Proto(impl)
    assert h.fetch(None) == (NONE, {})
    tp1, tp2, tp3 = ("topic", 0), ("topic", 1), ("other-topic", 0)
    res = h.commit("", -1, {tp1: _om(15), tp2: _om(16), tp3: _om(17)})
    assert res == {tp1: NONE, tp2: NONE, tp3: NONE}
    err, fetched = h.fetch(None)
    assert err == NONE
    assert offsets_of(fetched) == {tp1: 15, tp2: 16, tp3: 17}


def test_fetch_require_stable_without_transactions_is_the_same(impl):
    h = Proto(impl)
    h.commit("", -1, {TP: 7})
    err, fetched = h.fetch([TP], require_stable=True)
    assert err == NONE and fetched[TP].offset == 7


def test_fetch_not_coordinator(impl):
    h = Proto(impl, owned_shards={18})
    err, fetched = h.fetch([TP], group=OTHER_GROUP)
    assert err == Errors.NOT_COORDINATOR
    assert fetched == {}


def test_commit_not_coordinator(impl):
    h = Proto(impl, owned_shards={18})
    assert h.commit("", -1, {TP: 1}, group=OTHER_GROUP) == {TP: Errors.NOT_COORDINATOR}


def test_commit_after_group_became_empty_by_admin(impl):
    h = Proto(impl)
    f = h.form_group(1, sync=False)
    assert h.leave(f.leader).member_errors == [NONE]
    assert h.state() == EMPTY
    assert h.commit("", -1, {TP: _om(0)}) == {TP: NONE}
    err, fetched = h.fetch([TP])
    assert err == NONE and fetched[TP].offset == 0


def test_commit_generation_minus_one_on_empty_group_ignores_member_and_instance(impl):
    # spec: "generation < 0 and group Empty -> accepted ... whatever member id or instance id"
    h = Proto(impl)
    f = h.form_group(1)
    h.leave(f.leader)
    assert h.commit("someone", -1, {TP: 3}) == {TP: NONE}
    assert h.commit("", -1, {TP: 4}, instance="inst") == {TP: NONE}
    _, fetched = h.fetch([TP])
    assert fetched[TP].offset == 4


def test_commit_generation_minus_one_without_member_on_non_empty_group(impl):
    h = Proto(impl)
    h.form_group(1)
    assert h.commit("", -1, {TP: 1}) == {TP: Errors.UNKNOWN_MEMBER_ID}
    assert h.fetch([TP])[1][TP].offset == -1


def test_commit_generation_minus_one_with_member_id_on_non_empty_group_validates_member(impl):
    h = Proto(impl)
    f = h.form_group(1)
    assert h.commit("nobody", -1, {TP: 1}) == {TP: Errors.UNKNOWN_MEMBER_ID}
    assert h.commit(f.leader, -1, {TP: 1}) == {TP: Errors.ILLEGAL_GENERATION}


def test_commit_in_stable_by_member(impl):
    h = Proto(impl)
    f = h.form_group(2)
    res = h.commit(f.follower, f.generation, {TP: _om(10), ("topic", 1): _om(11)})
    assert res == {TP: NONE, ("topic", 1): NONE}
    assert offsets_of(h.fetch(None)[1]) == {TP: 10, ("topic", 1): 11}


def test_commit_in_stable_unknown_member_and_illegal_generation(impl):
    h = Proto(impl)
    f = h.form_group(1)
    assert h.commit("invalid", f.generation, {TP: 1}) == {TP: Errors.UNKNOWN_MEMBER_ID}
    assert h.commit(f.leader, f.generation + 1, {TP: 1}) == {TP: Errors.ILLEGAL_GENERATION}
    assert h.commit(f.leader, f.generation - 1, {TP: 1}) == {TP: Errors.ILLEGAL_GENERATION}


def test_commit_in_completing_rebalance_is_rebalance_in_progress(impl):
    h = Proto(impl)
    f = h.form_group(1, sync=False)
    assert h.state() == COMPLETING
    assert h.commit(f.leader, f.generation, {TP: _om(0)}) == {TP: Errors.REBALANCE_IN_PROGRESS}
    assert h.fetch([TP])[1][TP].offset == -1


def test_commit_in_completing_rebalance_from_unknown_member(impl):
    h = Proto(impl)
    f = h.form_group(1, sync=False)
    assert h.commit("", f.generation, {TP: _om(0)}) == {TP: Errors.UNKNOWN_MEMBER_ID}


def test_commit_in_completing_rebalance_with_illegal_generation(impl):
    h = Proto(impl)
    f = h.form_group(1, sync=False)
    assert h.commit(f.leader, f.generation + 1, {TP: _om(0)}) == {TP: Errors.ILLEGAL_GENERATION}


def test_commit_in_preparing_rebalance_is_stored_and_refreshes_session(impl):
    h = Proto(impl)
    f = h.form_group(2, rebalance=1000)
    t = h.now
    # PR until t + 1000 (the rebalance timeout); the follower has not re-joined
    h.send_join(f.leader, protocols=SUPERSET, rebalance=1000)
    assert h.state() == PREPARING
    h.advance(SESSION - 1)
    assert h.commit(f.follower, f.generation, {TP: 9}) == {TP: NONE}
    assert h.fetch([TP])[1][TP].offset == 9
    h.advance(1)  # t + SESSION: the follower's old deadline
    assert h.has_member(f.follower)
    assert h.now == t + SESSION


def test_commit_maintains_session(impl):
    h = Proto(impl)
    f = h.form_group(1, session=1000, rebalance=1000)
    h.advance(500)
    assert h.commit(f.leader, f.generation, {TP: _om(0)}) == {TP: NONE}
    h.advance(600)
    assert h.heartbeat(f.leader, f.generation) == NONE


def test_commit_metadata_too_large(impl):
    h = Proto(impl)
    tp2 = ("topic", 1)
    res = h.commit("", -1, {TP: _om(1, "x" * 4096), tp2: _om(2, "x" * 4097)})
    assert res == {TP: NONE, tp2: Errors.OFFSET_METADATA_TOO_LARGE}
    _, fetched = h.fetch([TP, tp2])
    assert offsets_of(fetched) == {TP: 1, tp2: -1}


def test_commit_metadata_limit_follows_config(impl):
    h = Proto(impl, offset_metadata_max_bytes=10)
    res = h.commit("", -1, {TP: _om(1, "0123456789"), ("t", 1): _om(1, "0123456789a")})
    assert res == {TP: NONE, ("t", 1): Errors.OFFSET_METADATA_TOO_LARGE}


def test_commit_metadata_length_counts_utf16_code_units_as_kafka(impl):
    """Kafka measures metadata with Java's String.length(): a character outside the BMP
    (an emoji) is two UTF-16 code units. 2,048 emoji are 4,096 units (accepted); 2,049
    are 4,098 (too large), though Python's len() is 2,049; a lone surrogate counts one."""
    h = Proto(impl)
    tp2, tp3, tp4 = ("topic", 1), ("topic", 2), ("topic", 3)
    emoji = "\U0001F600"
    res = h.commit("", -1, {TP: _om(1, emoji * 2048), tp2: _om(2, emoji * 2049),
                            tp3: _om(3, "x" + emoji * 2048),
                            tp4: _om(4, "\ud800" + "é" * 4095)})
    assert res == {TP: NONE, tp2: Errors.OFFSET_METADATA_TOO_LARGE,
                   tp3: Errors.OFFSET_METADATA_TOO_LARGE, tp4: NONE}
    _, fetched = h.fetch([TP, tp2, tp3, tp4])
    assert offsets_of(fetched) == {TP: 1, tp2: -1, tp3: -1, tp4: 4}


def test_commit_with_failing_store_returns_error_per_partition(impl):
    store = InMemoryStore()
    h = Proto(impl, store=store)
    f = h.form_group(1)
    store.fail_with = Errors.NOT_COORDINATOR
    tp2 = ("topic", 1)
    res = h.commit(f.leader, f.generation, {TP: 1, tp2: 2})
    assert res == {TP: Errors.NOT_COORDINATOR, tp2: Errors.NOT_COORDINATOR}
    store.fail_with = Errors.NONE
    assert offsets_of(h.fetch([TP, tp2])[1]) == {TP: -1, tp2: -1}
    assert h.commit(f.leader, f.generation, {TP: 1}) == {TP: NONE}
    assert h.fetch([TP])[1][TP].offset == 1
    assert store.offsets[GROUP][TP].offset == 1


def test_store_offset_now_writes_at_once_or_returns_the_error():
    """The replay's commits (GroupLogic.commit_accepted) write through store_offset_now:
    what store_offsets would store, the error returned instead of called back."""
    store = InMemoryStore()
    assert store.store_offset_now("g", TP, _om(3)) == NONE
    assert store.store_offset_now("g", ("topic", 1), _om(4)) == NONE
    assert store.store_offset_now("g", TP, _om(5)) == NONE
    assert store.offsets == {"g": {TP: _om(5), ("topic", 1): _om(4)}}
    store.fail_with = Errors.NOT_COORDINATOR
    assert store.store_offset_now("g", TP, _om(6)) == Errors.NOT_COORDINATOR
    assert store.offsets == {"g": {TP: _om(5), ("topic", 1): _om(4)}}
    assert DeferredStore().store_offset_now is None      # it parks every write


def test_a_store_that_keeps_no_offsets_accepts_commits_the_group_holds(impl):
    """InMemoryStore(offsets=False) (a trace replay's): commits by commit_offsets and by
    store_offset_now succeed and the group answers fetches from its own offsets, as
    with a store that keeps them; the store keeps none. A flag must be a bool."""
    fetched = []
    for keep in (True, False):
        store = InMemoryStore(offsets=keep)
        h = Proto(impl, store=store)
        f = h.form_group(1)
        assert h.commit(f.leader, f.generation, {TP: 4, ("topic", 1): 2}) == {
            TP: NONE, ("topic", 1): NONE}
        assert store.store_offset_now(GROUP, TP, _om(9)) == NONE
        fetched.append(offsets_of(h.fetch([TP, ("topic", 1)])[1]))
        assert bool(store.offsets) is keep
        if keep:
            assert store.offsets[GROUP][TP] == _om(9)
            assert store.offsets[GROUP][("topic", 1)].offset == 2
    assert fetched[0] == fetched[1] == {TP: 4, ("topic", 1): 2}
    with pytest.raises(TypeError, match="offsets"):
        InMemoryStore(offsets=1)


def test_static_member_commit_with_invalid_member_id_is_fenced(impl):
    h = Proto(impl)
    f = h.form_group(2, static=True)
    assert h.commit(f.leader, f.generation, {TP: 0}) == {TP: NONE}
    assert h.commit("invalidMember", f.generation, {TP: 0}, instance="leader") == {
        TP: Errors.FENCED_INSTANCE_ID}
    assert h.commit("", -1, {TP: 0}, instance="leader") == {TP: Errors.FENCED_INSTANCE_ID}
    assert h.commit(f.leader, f.generation, {TP: 5}, instance="leader") == {TP: NONE}
    assert h.fetch([TP])[1][TP].offset == 5


def test_simple_group_later_used_with_group_management(impl):
    h = Proto(impl)
    assert h.commit("", -1, {TP: 1}) == {TP: NONE}
    assert h.commit("", -1, {TP: 2}) == {TP: NONE}
    r = h.join_old("")
    h.run_until_done([r])
    assert r.error == NONE and r.result.generation_id == 1
    assert h.describe().protocol_type == PTYPE
    # the group is no longer empty: a commit without a member is refused
    assert h.commit("", -1, {TP: 3}) == {TP: Errors.UNKNOWN_MEMBER_ID}
    assert h.fetch([TP])[1][TP].offset == 2


def test_commit_and_fetch_with_empty_group_id(impl):
    # only a *missing* id is rejected for commit/fetch/describe/delete; "" is a valid group
    h = Proto(impl)
    assert h.commit("", -1, {TP: _om(0)}, group="") == {TP: NONE}
    err, fetched = h.fetch([TP], group="")
    assert err == NONE and fetched[TP].offset == 0
    d = h.describe("")
    assert d.error == NONE and d.state == EMPTY
    assert h.coord.delete_groups([""]) == {"": NONE}
    err, fetched = h.fetch([TP], group="")
    assert err == NONE and fetched[TP].offset == -1


def test_fetch_in_every_state(impl):
    h = Proto(impl)
    f = h.form_group(2)
    h.commit(f.leader, f.generation, {TP: 4})
    for expected_state in (STABLE,):
        assert h.state() == expected_state
        assert h.fetch([TP])[1][TP].offset == 4
    h.send_join(f.leader, protocols=SUPERSET)
    assert h.state() == PREPARING and h.fetch([TP])[1][TP].offset == 4
    h.send_join(f.follower, protocols=SUPERSET)
    assert h.state() == COMPLETING and h.fetch([TP])[1][TP].offset == 4
    h.leave(f.leader, f.follower)
    assert h.state() == EMPTY and h.fetch([TP])[1][TP].offset == 4

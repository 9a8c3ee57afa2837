"""ListGroups, DescribeGroup, DeleteGroups, shard ownership, loading and unloading,
and the checks that come before any state logic (INVALID_GROUP_ID,
COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR)."""
from __future__ import annotations

from fastcoord import Errors, GroupListing, shard_for

from helpers.protocol import (
    CLIENT_HOST, CLIENT_ID, COMPLETING, DELAY, EMPTY, GROUP, NONE, NUM_SHARDS, OTHER_GROUP,
    PREPARING, PTYPE, RANGE, STABLE, SUPERSET, Proto, other_shard_group,
)

TP = ("topic", 0)
GROUP_SHARD = shard_for(GROUP, NUM_SHARDS)
OTHER_SHARD = shard_for(OTHER_GROUP, NUM_SHARDS)


def _listing(h, states=None):
    return sorted((g.group_id, g.protocol_type, g.state) for g in h.coord.list_groups(states))


# ---------------------------------------------------------------------------
# ListGroups
# ---------------------------------------------------------------------------

def test_list_groups_includes_stable_groups(impl):
    h = Proto(impl)
    h.form_group(1)
    groups = h.coord.list_groups()
    assert groups == [GroupListing(GROUP, PTYPE, "Stable")]


def test_list_groups_includes_rebalancing_groups(impl):
    h = Proto(impl)
    h.form_group(1, sync=False)
    assert _listing(h) == [(GROUP, PTYPE, "CompletingRebalance")]
    h.join_old("", group="g2")
    assert _listing(h) == sorted([(GROUP, PTYPE, "CompletingRebalance"),
                                  ("g2", PTYPE, "PreparingRebalance")])


def test_list_groups_with_state_filters_through_the_lifecycle(impl):
    h = Proto(impl)
    all_states = {"PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty"}
    f = h.form_group(1, sync=False)
    assert len(h.coord.list_groups({"CompletingRebalance"})) == 1
    assert h.coord.list_groups(all_states - {"CompletingRebalance"}) == []
    assert h.send_sync(f.leader, f.generation, {f.leader: b""}).error == NONE
    assert len(h.coord.list_groups({"Stable"})) == 1
    assert h.coord.list_groups(all_states - {"Stable"}) == []
    h.leave(f.leader)
    assert _listing(h, {"Empty"}) == [(GROUP, PTYPE, "Empty")]
    assert h.coord.list_groups(all_states - {"Empty"}) == []


def test_list_groups_state_filters_ignore_case_and_surrounding_blanks(impl):
    # Kafka lower-cases and trims each state filter (Java's trim: every char <= U+0020)
    h = Proto(impl)
    h.form_group(1)
    for state in ("stable", "STABLE", " Stable ", "\tstable\n", "stable\x00"):
        assert _listing(h, {state}) == [(GROUP, PTYPE, "Stable")], repr(state)
    assert _listing(h, {"sta ble"}) == []


def test_list_groups_without_filter_lists_every_group(impl):
    h = Proto(impl)
    h.form_group(1)
    h.commit("", -1, {TP: 1}, group="simple")
    assert _listing(h) == [(GROUP, PTYPE, "Stable"), ("simple", "", "Empty")]
    assert _listing(h, []) == _listing(h)


def test_list_groups_omits_deleted_groups(impl):
    h = Proto(impl)
    h.commit("", -1, {TP: 1}, group="simple")
    assert h.coord.delete_groups(["simple"]) == {"simple": NONE}
    assert h.coord.list_groups() == []


# ---------------------------------------------------------------------------
# DescribeGroup
# ---------------------------------------------------------------------------

def test_describe_unknown_group_is_dead_without_error(impl):
    h = Proto(impl)
    d = h.describe()
    assert d.error == NONE
    assert d.group_id == GROUP
    assert d.state == "Dead"
    assert d.members == []
    assert d.protocol_type == "" and d.protocol_name == ""


def test_describe_stable_group_with_dynamic_member(impl):
    h = Proto(impl)
    f = h.form_group(1)
    d = h.describe()
    assert d.error == NONE
    assert d.state == STABLE
    assert d.protocol_type == PTYPE
    assert d.protocol_name == RANGE
    assert [m.member_id for m in d.members] == [f.leader]
    m = d.members[0]
    assert m.group_instance_id is None
    assert m.client_id == CLIENT_ID and m.client_host == CLIENT_HOST
    assert m.metadata == b""
    assert m.assignment == f.assignments[f.leader]


def test_describe_stable_group_with_static_member(impl):
    h = Proto(impl)
    f = h.form_group(1, static=True, protocols=[(RANGE, b"meta")])
    d = h.describe()
    assert d.protocol_name == RANGE
    assert [(m.member_id, m.group_instance_id) for m in d.members] == [(f.leader, "leader")]
    assert d.members[0].metadata == b"meta"


def test_describe_rebalancing_group_hides_protocol_metadata_and_assignment(impl):
    h = Proto(impl)
    f = h.form_group(1, sync=False, protocols=[(RANGE, b"meta")])
    d = h.describe()
    assert d.error == NONE
    assert d.state == COMPLETING
    assert d.protocol_type == PTYPE
    assert d.protocol_name == ""  # Kafka's NoProtocol outside Stable
    assert [m.member_id for m in d.members] == [f.leader]
    assert all(m.metadata == b"" and m.assignment == b"" for m in d.members)


def test_describe_preparing_rebalance(impl):
    h = Proto(impl)
    h.form_group(2)
    h.join_old("")
    d = h.describe()
    assert d.state == PREPARING
    assert len(d.members) == 3
    assert d.protocol_name == ""


# ---------------------------------------------------------------------------
# DeleteGroups
# ---------------------------------------------------------------------------

def test_delete_non_empty_group(impl):
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    assert h.coord.delete_groups([GROUP]) == {GROUP: Errors.NON_EMPTY_GROUP}
    h.send_join(f.leader, protocols=[("roundrobin", b"")])  # changed metadata -> PR
    assert h.state() == PREPARING
    assert h.coord.delete_groups([GROUP]) == {GROUP: Errors.NON_EMPTY_GROUP}


def test_delete_stable_group_is_non_empty(impl):
    h = Proto(impl)
    h.form_group(2)
    assert h.coord.delete_groups([GROUP]) == {GROUP: Errors.NON_EMPTY_GROUP}
    assert h.state() == STABLE


def test_delete_unknown_group_is_group_id_not_found(impl):
    h = Proto(impl)
    assert h.coord.delete_groups(["nope"]) == {"nope": Errors.GROUP_ID_NOT_FOUND}


def test_delete_missing_group_id_is_invalid(impl):
    # group-protocol.md: delete rejects "only a missing id" with INVALID_GROUP_ID, as Kafka's
    # handleDeleteGroups does for a null id (GroupCoordinatorTest.testDeleteGroupWithInvalidGroupId).
    h = Proto(impl)
    assert h.coord.delete_groups([None]) == {None: Errors.INVALID_GROUP_ID}


def test_delete_group_wrong_coordinator(impl):
    h = Proto(impl, owned_shards={GROUP_SHARD})
    assert h.coord.delete_groups([OTHER_GROUP]) == {OTHER_GROUP: Errors.NOT_COORDINATOR}


def test_delete_empty_group(impl):
    h = Proto(impl)
    f = h.form_group(1, sync=False)
    h.leave(f.leader)
    assert h.state() == EMPTY
    assert h.coord.delete_groups([GROUP]) == {GROUP: NONE}
    assert h.describe().state == "Dead"
    assert h.coord.delete_groups([GROUP]) == {GROUP: Errors.GROUP_ID_NOT_FOUND}


def test_delete_empty_group_with_stored_offsets(impl):
    h = Proto(impl)
    f = h.form_group(1)
    assert h.commit(f.leader, f.generation, {TP: 0}) == {TP: NONE}
    d = h.describe()
    assert d.state == STABLE and d.members[0].member_id == f.leader
    h.leave(f.leader)
    assert h.coord.delete_groups([GROUP]) == {GROUP: NONE}
    assert h.describe().state == "Dead"
    err, fetched = h.fetch([TP])
    assert err == NONE and fetched[TP].offset == -1
    assert h.fetch(None) == (NONE, {})


def test_delete_several_groups_reports_each(impl):
    h = Proto(impl)
    h.form_group(1)
    h.commit("", -1, {TP: 1}, group="simple")
    res = h.coord.delete_groups([GROUP, "simple", "unknown"])
    assert res == {GROUP: Errors.NON_EMPTY_GROUP, "simple": NONE,
                   "unknown": Errors.GROUP_ID_NOT_FOUND}


def test_deleted_group_id_can_be_reused_from_scratch(impl):
    h = Proto(impl)
    f = h.form_group(1)
    h.leave(f.leader)
    h.coord.delete_groups([GROUP])
    assert h.send_sync(f.leader, f.generation + 1).error == Errors.UNKNOWN_MEMBER_ID
    assert h.heartbeat(f.leader, f.generation + 1) == Errors.UNKNOWN_MEMBER_ID
    r = h.join_old("")
    h.advance(DELAY)
    assert r.error == NONE and r.result.generation_id == 1  # a new group starts at 0


# ---------------------------------------------------------------------------
# shard ownership: NOT_COORDINATOR
# ---------------------------------------------------------------------------

def test_owns_shard_follows_config(impl):
    h = Proto(impl, owned_shards={GROUP_SHARD})
    assert h.coord.owns_shard(GROUP_SHARD)
    assert not h.coord.owns_shard(OTHER_SHARD)
    h2 = Proto(impl)
    assert all(h2.coord.owns_shard(s) for s in range(NUM_SHARDS))


def test_requests_for_group_on_unowned_shard_get_not_coordinator(impl):
    h = Proto(impl, owned_shards={GROUP_SHARD})
    g = other_shard_group()
    assert h.send_join("", group=g).error == Errors.NOT_COORDINATOR
    assert h.send_join("", group=g, instance="groupInstanceId").error == Errors.NOT_COORDINATOR
    assert h.join_old("", group=g).error == Errors.NOT_COORDINATOR
    assert h.send_sync("memberId", 1, group=g).error == Errors.NOT_COORDINATOR
    assert h.heartbeat("memberId", -1, group=g) == Errors.NOT_COORDINATOR
    assert h.leave("", group=g).error == Errors.NOT_COORDINATOR
    assert h.leave(("", "leader"), ("", "follower"), group=g).error == Errors.NOT_COORDINATOR
    assert h.commit("", -1, {TP: 1}, group=g) == {TP: Errors.NOT_COORDINATOR}
    assert h.fetch([TP], group=g)[0] == Errors.NOT_COORDINATOR
    assert h.describe(g).error == Errors.NOT_COORDINATOR
    assert h.coord.list_groups() == []
    # the owned group works
    assert h.send_join("").error == Errors.MEMBER_ID_REQUIRED


def test_shard_for_is_kafkas_partition_for(impl):
    # Kafka: Utils.abs(groupId.hashCode) % numPartitions
    assert shard_for("groupId", 2) != shard_for("otherGroup", 2)
    assert shard_for("", 50) == 0
    h = Proto(impl, owned_shards={shard_for("groupId", NUM_SHARDS)})
    assert h.describe("groupId").error == NONE


# ---------------------------------------------------------------------------
# loading: COORDINATOR_LOAD_IN_PROGRESS
# ---------------------------------------------------------------------------

def test_requests_while_shard_is_loading(impl):
    h = Proto(impl)
    g = other_shard_group()
    h.coord.begin_loading(OTHER_SHARD)
    assert h.send_join("memberId", group=g).error == Errors.COORDINATOR_LOAD_IN_PROGRESS
    assert h.send_join("memberId", group=g, instance="groupInstanceId",
                       require_known=False).error == Errors.COORDINATOR_LOAD_IN_PROGRESS
    # SyncGroup answers REBALANCE_IN_PROGRESS and Heartbeat answers NONE while loading
    assert h.send_sync("memberId", 1, group=g, ptype=PTYPE, pname=RANGE).error == \
        Errors.REBALANCE_IN_PROGRESS
    assert h.heartbeat("memberId", 1, group=g) == NONE
    assert h.commit("memberId", 1, {("foo", 0): 15}, group=g) == {
        ("foo", 0): Errors.COORDINATOR_LOAD_IN_PROGRESS}
    assert h.fetch([TP], group=g)[0] == Errors.COORDINATOR_LOAD_IN_PROGRESS
    assert h.describe(g).error == Errors.COORDINATOR_LOAD_IN_PROGRESS
    assert h.coord.delete_groups([g]) == {g: Errors.COORDINATOR_LOAD_IN_PROGRESS}
    assert h.leave("memberId", group=g).error == Errors.COORDINATOR_LOAD_IN_PROGRESS
    # other shards are not affected
    assert h.describe(GROUP).error == NONE
    # after loading the group is reachable
    h.coord.finish_loading(OTHER_SHARD)
    assert h.coord.owns_shard(OTHER_SHARD)
    d = h.describe(g)
    assert d.error == NONE and d.state == "Dead"
    assert h.send_join("", group=g).error == Errors.MEMBER_ID_REQUIRED


def test_loading_an_unowned_shard_makes_it_owned(impl):
    h = Proto(impl, owned_shards={GROUP_SHARD})
    h.coord.begin_loading(OTHER_SHARD)
    assert h.describe(OTHER_GROUP).error == Errors.COORDINATOR_LOAD_IN_PROGRESS
    h.coord.finish_loading(OTHER_SHARD)
    assert h.coord.owns_shard(OTHER_SHARD)
    assert h.describe(OTHER_GROUP).error == NONE


def test_invalid_group_id_precedes_loading_check(impl):
    h = Proto(impl)
    h.coord.begin_loading(shard_for("", NUM_SHARDS))
    assert h.send_join("", group="").error == Errors.INVALID_GROUP_ID
    assert h.heartbeat("m", 1, group="") == Errors.INVALID_GROUP_ID


# ---------------------------------------------------------------------------
# unloading
# ---------------------------------------------------------------------------

def test_unload_answers_parked_joins_not_coordinator(impl):
    h = Proto(impl)
    f = h.form_group(2)
    lj = h.send_join(f.leader, protocols=SUPERSET)
    new = h.join_old("", protocols=SUPERSET)
    assert lj.result is None and new.result is None
    h.coord.unload_shard(GROUP_SHARD)
    assert lj.error == Errors.NOT_COORDINATOR
    assert new.error == Errors.NOT_COORDINATOR
    assert not h.coord.owns_shard(GROUP_SHARD)
    assert h.send_join(f.follower, protocols=SUPERSET).error == Errors.NOT_COORDINATOR
    assert h.heartbeat(f.follower, f.generation) == Errors.NOT_COORDINATOR


def test_unload_answers_parked_syncs_not_coordinator(impl):
    h = Proto(impl)
    f = h.form_group(2, sync=False)
    fs = h.send_sync(f.follower, f.generation)
    assert fs.result is None
    h.coord.unload_shard(GROUP_SHARD)
    assert fs.error == Errors.NOT_COORDINATOR
    assert h.describe().error == Errors.NOT_COORDINATOR
    # nothing fires later for the unloaded group's members
    h.advance(10_000)
    assert len(fs.results) == 1


def test_unload_leaves_other_shards_alone(impl):
    h = Proto(impl)
    f = h.form_group(1)
    h.form_group(1, group=OTHER_GROUP)
    h.coord.unload_shard(OTHER_SHARD)
    assert h.describe(OTHER_GROUP).error == Errors.NOT_COORDINATOR
    assert h.state() == STABLE
    assert h.heartbeat(f.leader, f.generation) == NONE


def test_inactive_coordinator_answers_coordinator_not_available(impl):
    h = Proto(impl)
    f = h.form_group(1)
    h.coord.active = False
    assert h.send_join("").error == Errors.COORDINATOR_NOT_AVAILABLE
    assert h.heartbeat(f.leader, f.generation) == Errors.COORDINATOR_NOT_AVAILABLE
    assert h.send_sync(f.leader, f.generation).error == Errors.COORDINATOR_NOT_AVAILABLE
    assert h.leave(f.leader).error == Errors.COORDINATOR_NOT_AVAILABLE
    assert h.send_join("", group="").error == Errors.INVALID_GROUP_ID  # check 1 comes first

"""The consumer-group member lifecycle (KIP-848) checked against Apache Kafka 4's
GroupMetadataManagerTest: session timeouts, rebalance timeouts, static membership,
reconciliation and the heartbeat interval, through fastcoord's Python API, both twins.

Each test asserts what Kafka answers, with a comment naming the Kafka test it comes
from; the decision it pins down is Kafka's GroupMetadataManager (consumerGroupHeartbeat,
maybeReconcile, consumerGroupLeave, consumerGroupFenceMember, the session and rebalance
timeout timers) unless said. Kafka's tests start from replayed records; here the same
situations are reached through heartbeats, with a fixed assignor where the outcome
depends on the assignor's choice (as Kafka's MockPartitionAssignor).
"""
from tests.core.test_consumer_protocol import E, INTERVAL, SESSION, fixed, hb, join, make
from tests.core.test_consumer_protocol_more import described, members

FOO3 = {"foo": [0, 1, 2]}


def _ids(coord):
    return sorted(members(coord))


def _beat(coord, member_id):
    """A heartbeat of `member_id` at its epoch, saying it owns what it was given."""
    m = members(coord)[member_id]
    return hb(coord, "g", member_id, m.member_epoch, instance_id=m.instance_id,
              owned_partitions=m.assignment)


def _settle(coord):
    """Heartbeat every member until the group is Stable (no time passes)."""
    for _ in range(3):
        for member_id in _ids(coord):
            _beat(coord, member_id)
    assert described(coord).state == "Stable"


def _m1_revoking(coord, rebalance_timeout_ms=10_000, instance_id=None):
    """m1 owns foo 0-2 at epoch 1; m2 joins (epoch 2) with a target taking foo 2 from
    m1, and m1's heartbeat starts the revocation. Returns the fixed assignor."""
    coord.set_topics({"foo": 3})
    assignor = fixed(coord)
    assignor.next = {"m1": FOO3}
    join(coord, "g", "m1", ["foo"], rebalance_timeout_ms=rebalance_timeout_ms,
         instance_id=instance_id)
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2]}}
    assert join(coord, "g", "m2", ["foo"]).member_epoch == 2
    r = hb(coord, "g", "m1", 1, instance_id=instance_id, owned_partitions=FOO3)
    assert (r.member_epoch, r.assignment) == (1, {"foo": [0, 1]})
    return assignor


# ---------------------------------------------------------------------------------------
# session timeouts
# ---------------------------------------------------------------------------------------
def _settled_pair(impl):
    """m1 and m2 joined g on foo (2 partitions), each at its target: the coordinator."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    join(coord, "g", "m2", ["foo"])
    _settle(coord)
    return coord


def _two_members(impl, a="m1", b="m2", a_instance=None, b_instance=None):
    """a then b join g on foo (3 partitions), with the instance ids given, through a
    fixed assignor whose targets are a {foo: 0, 1} and b {foo: 2}: (the coordinator,
    the assignor)."""
    coord, _ = make(impl)
    coord.set_topics({"foo": 3})
    assignor = fixed(coord)
    assignor.next = {a: {"foo": [0, 1]}}
    join(coord, "g", a, ["foo"], instance_id=a_instance)
    assignor.next = {a: {"foo": [0, 1]}, b: {"foo": [2]}}
    join(coord, "g", b, ["foo"], instance_id=b_instance)
    return coord, assignor


def test_each_heartbeat_pushes_the_session_deadline(impl):
    # testSessionTimeoutLifecycle
    coord = _settled_pair(impl)
    coord.advance_time(40_000)
    assert _beat(coord, "m1").error == E.NONE          # m1's session now ends at 85 s
    coord.advance_time(SESSION - 40_000)                # 45 s: m2 (silent) goes
    assert _ids(coord) == ["m1"] and described(coord).group_epoch == 3
    coord.advance_time(39_999)
    assert _ids(coord) == ["m1"]
    coord.advance_time(1)
    assert _ids(coord) == [] and described(coord).group_epoch == 4


def test_the_configured_session_timeout_is_the_members(impl):
    # testSessionTimeoutLifecycle (the timer is scheduled with consumerGroupSessionTimeoutMs)
    coord, _ = make(impl, group_consumer_session_timeout_ms=50_000,
                    group_consumer_max_session_timeout_ms=60_000)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    coord.advance_time(49_999)
    assert _ids(coord) == ["m1"]
    coord.advance_time(1)
    assert _ids(coord) == []


def test_a_leave_cancels_the_session_of_its_member_id(impl):
    # testSessionTimeoutLifecycle (consumerGroupFenceMember cancels the member's timers):
    # the same id rejoining later gets a session from its rejoin only
    coord = _settled_pair(impl)
    coord.advance_time(30_000)
    _beat(coord, "m1")
    assert hb(coord, "g", "m2", -1).member_epoch == -1
    coord.advance_time(1_000)
    r = join(coord, "g", "m2", ["foo"])
    assert (r.error, r.member_epoch) == (E.NONE, 4)
    coord.advance_time(SESSION - 31_000)            # m2's first session would end here
    assert _ids(coord) == ["m1", "m2"] and described(coord).group_epoch == 4
    coord.advance_time(30_000)                      # 75 s: m1 (beat at 30 s) goes
    assert _ids(coord) == ["m2"]
    coord.advance_time(1_000)                       # 76 s: m2 (rejoined at 31 s) goes
    assert _ids(coord) == []


def test_a_refused_heartbeat_does_not_refresh_the_session(impl):
    # testSessionTimeoutLifecycle: consumerGroupHeartbeat schedules the session timeout
    # only once the request passed its checks (a FENCED_MEMBER_EPOCH throws before it)
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    for _ in range(8):
        coord.advance_time(INTERVAL)
        assert hb(coord, "g", "m1", 7).error == E.FENCED_MEMBER_EPOCH
    coord.advance_time(INTERVAL)
    assert _ids(coord) == []


def test_session_expiration_fences_and_the_survivor_gets_the_partitions(impl):
    # testSessionTimeoutExpiration
    coord, assignor = _two_members(impl)
    for _ in range(8):
        coord.advance_time(INTERVAL)
        assert _beat(coord, "m1").error == E.NONE
    coord.advance_time(INTERVAL)                    # 45 s: m2 is fenced
    d = described(coord)
    assert (_ids(coord), d.group_epoch, d.assignment_epoch, d.state) == \
        (["m1"], 3, 2, "Assigning")
    assert hb(coord, "g", "m2", 2).error == E.UNKNOWN_MEMBER_ID
    assignor.next = {"m1": FOO3}
    r = _beat(coord, "m1")
    assert (r.member_epoch, r.assignment) == (3, FOO3)
    assert described(coord).state == "Stable"


def test_a_static_member_away_expires_and_its_partitions_are_reassigned(impl):
    # testSessionTimeoutExpirationStaticMember
    coord, assignor = _two_members(impl, "a", "b", a_instance="i-a")
    assert hb(coord, "g", "a", -2, instance_id="i-a").member_epoch == -2
    for _ in range(8):
        coord.advance_time(INTERVAL)
        _beat(coord, "b")
    coord.advance_time(INTERVAL)                    # 45 s after a's last heartbeat
    d = described(coord)
    assert (_ids(coord), d.group_epoch) == (["b"], 3)
    assignor.next = {"b": FOO3}
    r = _beat(coord, "b")
    assert (r.member_epoch, r.assignment) == (3, FOO3)
    # the instance id is free: a new member with it is a new member (epoch bump)
    assignor.next = {"b": {"foo": [2]}, "a2": {"foo": [0, 1]}}
    r = join(coord, "g", "a2", ["foo"], instance_id="i-a")
    assert (r.error, r.member_epoch) == (E.NONE, 4)


def test_a_static_replacements_session_starts_at_its_join(impl):
    # testSessionTimeoutExpirationStaticMember; replaceMember leaves the old member's
    # timers, which then find no member, and the new member's session starts at its join
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "a", ["foo"], instance_id="i")
    coord.advance_time(30_000)
    hb(coord, "g", "a", -2, instance_id="i")
    coord.advance_time(10_000)
    r = join(coord, "g", "a2", ["foo"], instance_id="i")
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 1, {"foo": [0, 1]})
    coord.advance_time(SESSION - 40_000)            # a's session (from 0 s) ends
    assert _ids(coord) == ["a2"] and described(coord).group_epoch == 1
    coord.advance_time(39_999)
    assert _ids(coord) == ["a2"]
    coord.advance_time(1)                           # 45 s after a2's join
    assert _ids(coord) == [] and described(coord).group_epoch == 2


# ---------------------------------------------------------------------------------------
# rebalance timeouts
# ---------------------------------------------------------------------------------------
def test_rebalance_expiration_releases_what_the_member_was_revoking(impl):
    # testRebalanceTimeoutExpiration
    coord, _ = make(impl)
    assignor = _m1_revoking(coord)
    coord.advance_time(5_000)
    assert hb(coord, "g", "m1", 1, owned_partitions=FOO3).member_epoch == 1   # no revoke
    coord.advance_time(4_999)
    assert _ids(coord) == ["m1", "m2"]
    coord.advance_time(1)
    d = described(coord)
    assert (_ids(coord), d.group_epoch) == (["m2"], 3)
    assert hb(coord, "g", "m1", 1, owned_partitions=FOO3).error == E.UNKNOWN_MEMBER_ID
    assignor.next = {"m2": FOO3}
    r = hb(coord, "g", "m2", 2, owned_partitions={})
    assert (r.member_epoch, r.assignment) == (3, FOO3)
    # the fenced member id may join again: a new member, a new epoch
    assignor.next = {"m2": {"foo": [0, 1]}, "m1": {"foo": [2]}}
    r = join(coord, "g", "m1", ["foo"])
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 4, {})


def test_a_second_revocation_restarts_the_rebalance_timeout(impl):
    # testRebalanceTimeoutLifecycle: maybeReconcile schedules the timeout again whenever
    # the member changes and is (still) UNREVOKED_PARTITIONS
    coord, _ = make(impl)
    coord.set_topics({"foo": 4})
    assignor = fixed(coord)
    assignor.next = {"m1": {"foo": [0, 1, 2, 3]}}
    join(coord, "g", "m1", ["foo"], rebalance_timeout_ms=10_000)
    assignor.next = {"m1": {"foo": [1, 2, 3]}, "m2": {"foo": [0]}}
    join(coord, "g", "m2", ["foo"])
    assert hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1, 2, 3]}).assignment == \
        {"foo": [1, 2, 3]}
    coord.advance_time(6_000)
    assignor.next = {"m1": {"foo": [3]}, "m2": {"foo": [0]}, "m3": {"foo": [1, 2]}}
    join(coord, "g", "m3", ["foo"])
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [1, 2, 3]})
    assert (r.member_epoch, r.assignment) == (1, {"foo": [3]})
    coord.advance_time(4_000)                       # the first deadline
    assert _ids(coord) == ["m1", "m2", "m3"]
    coord.advance_time(5_999)
    assert "m1" in members(coord)
    coord.advance_time(1)                           # 10 s after the second revocation
    assert _ids(coord) == ["m2", "m3"]


def test_session_fencing_of_a_revoking_member_cancels_its_rebalance_timeout(impl):
    # testRebalanceTimeoutLifecycle / testSessionTimeoutExpiration: consumerGroupFenceMember
    # cancels both timers, so the member goes once and the epoch moves once
    coord, _ = make(impl)
    _m1_revoking(coord, rebalance_timeout_ms=60_000)
    for _ in range(12):
        coord.advance_time(INTERVAL)
        _beat(coord, "m2")
    assert _ids(coord) == ["m2"] and described(coord).group_epoch == 3
    join(coord, "g", "m1", ["foo"], rebalance_timeout_ms=60_000)    # the id again
    assert described(coord).group_epoch == 4
    coord.advance_time(10_000)                      # past the old rebalance deadline
    assert _ids(coord) == ["m1", "m2"] and described(coord).group_epoch == 4


def test_a_static_member_away_is_not_fenced_by_its_rebalance_timeout(impl):
    # testRebalanceTimeoutExpiration: the timeout fences only a member still at the epoch
    # it was scheduled for; a static member away is at -2 and waits for its session
    coord, _ = make(impl)
    _m1_revoking(coord, instance_id="i-1")
    assert hb(coord, "g", "m1", -2, instance_id="i-1").member_epoch == -2
    # what it was revoking is released at once (consumerGroupStaticMemberGroupLeave)
    r = hb(coord, "g", "m2", 2, owned_partitions={})
    assert r.assignment == {"foo": [2]}
    coord.advance_time(10_000)
    assert _ids(coord) == ["m1", "m2"] and described(coord).group_epoch == 2
    assert members(coord)["m1"].assignment == {"foo": [0, 1]}


def test_a_static_replacement_is_not_fenced_by_its_predecessors_rebalance_timeout(impl):
    # testRebalanceTimeoutExpiration + testStaticMemberGetsBackAssignmentUponRejoin: the
    # predecessor's timer finds no member under its id
    coord, _ = make(impl)
    _m1_revoking(coord, instance_id="i-1")
    hb(coord, "g", "m1", -2, instance_id="i-1")
    coord.advance_time(2_000)
    r = join(coord, "g", "m1b", ["foo"], instance_id="i-1")
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 2, {"foo": [0, 1]})
    coord.advance_time(8_000)
    assert _ids(coord) == ["m1b", "m2"] and described(coord).group_epoch == 2


# ---------------------------------------------------------------------------------------
# static membership
# ---------------------------------------------------------------------------------------
def test_static_member_identity_errors(impl):
    # testShouldThrownUnreleasedInstanceIdExceptionWhenNewMemberJoinsWithInUseInstanceId,
    # testShouldThrowFencedInstanceIdExceptionWhenStaticMemberWithDifferentMemberIdJoins,
    # testShouldThrowFencedInstanceIdExceptionWhenStaticMemberWithDifferentMemberIdLeaves,
    # testShouldThrownUnknownMemberIdExceptionWhenUnknownStaticMemberJoins,
    # testShouldThrowUnknownMemberIdExceptionWhenUnknownStaticMemberLeaves
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "a", ["foo"], instance_id="i")
    unreleased = ("Static member b with instance id i cannot join the group because the "
                  "instance id is owned by a member.")
    fenced = "Static member b with instance id i was fenced by member a."
    unknown = "Instance id j is unknown."
    cases = [
        (join(coord, "g", "b", ["foo"], instance_id="i"), E.UNRELEASED_INSTANCE_ID, unreleased),
        (hb(coord, "g", "b", 1, instance_id="i"), E.FENCED_INSTANCE_ID, fenced),
        (hb(coord, "g", "b", -1, instance_id="i"), E.FENCED_INSTANCE_ID, fenced),
        (hb(coord, "g", "b", -2, instance_id="i"), E.FENCED_INSTANCE_ID, fenced),
        (hb(coord, "g", "a", 1, instance_id="j"), E.UNKNOWN_MEMBER_ID, unknown),
        (hb(coord, "g", "a", -2, instance_id="j"), E.UNKNOWN_MEMBER_ID, unknown),
    ]
    for result, error, message in cases:
        assert (result.error, result.error_message, result.heartbeat_interval_ms) == \
            (error, message, 0)
    d = described(coord)
    assert (_ids(coord), d.group_epoch, members(coord)["a"].member_epoch) == (["a"], 1, 1)


def test_a_static_replacement_takes_the_target_without_a_new_assignment(impl):
    # testStaticMemberGetsBackAssignmentUponRejoin
    coord, assignor = _two_members(impl, "a", "b", a_instance="i-a", b_instance="i-b")
    calls = assignor.calls
    assert hb(coord, "g", "b", -2, instance_id="i-b").member_epoch == -2
    r = join(coord, "g", "b2", ["foo"], instance_id="i-b")
    assert (r.error, r.member_id, r.member_epoch, r.heartbeat_interval_ms, r.assignment) == \
        (E.NONE, "b2", 2, INTERVAL, {"foo": [2]})
    assert assignor.calls == calls
    b2 = members(coord)["b2"]
    assert (b2.instance_id, b2.target_assignment) == ("i-b", {"foo": [2]})
    d = described(coord)
    assert (_ids(coord), d.group_epoch, d.assignment_epoch) == (["a", "b2"], 2, 2)
    # the old member id is gone: by itself, it is unknown
    assert hb(coord, "g", "b", 2).error == E.UNKNOWN_MEMBER_ID


def test_a_static_member_rejoining_with_new_topics_reconciles_to_a_new_target(impl):
    # testStaticMemberRejoinsWithNewSubscribedTopics: the replacement's new subscription
    # bumps the group epoch; the target is computed in the same heartbeat
    coord, _ = make(impl)
    coord.set_topics({"foo": 2, "bar": 2})
    assignor = fixed(coord)
    assignor.next = {"a": {"foo": [0, 1]}}
    join(coord, "g", "a", ["foo"], instance_id="i-a")
    hb(coord, "g", "a", -2, instance_id="i-a")
    assignor.next = {"a2": {"foo": [0], "bar": [0, 1]}}
    r = join(coord, "g", "a2", ["foo", "bar"], instance_id="i-a")
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 2, {"foo": [0], "bar": [0, 1]})
    d = described(coord)
    assert (d.group_epoch, d.assignment_epoch, d.state) == (2, 2, "Stable")


# ---------------------------------------------------------------------------------------
# reconciliation
# ---------------------------------------------------------------------------------------
def test_a_new_member_gets_a_target_for_every_member(impl):
    # testNewJoiningMemberTriggersNewTargetAssignment
    coord, _ = make(impl)
    coord.set_topics({"foo": 3})
    assignor = fixed(coord)
    assignor.next = {"m1": FOO3}
    join(coord, "g", "m1", ["foo"])
    targets = {"m1": {"foo": [0]}, "m2": {"foo": [1]}, "m3": {"foo": [2]}}
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2]}}
    join(coord, "g", "m2", ["foo"])
    assignor.next = targets
    r = join(coord, "g", "m3", ["foo"])
    assert (r.error, r.member_epoch, r.heartbeat_interval_ms, r.assignment) == \
        (E.NONE, 3, INTERVAL, {})
    d = described(coord)
    assert (d.group_epoch, d.assignment_epoch, d.state) == (3, 3, "Reconciling")
    assert {m.member_id: m.target_assignment for m in d.members} == targets
    assert {m.member_id: m.member_epoch for m in d.members} == {"m1": 1, "m2": 2, "m3": 3}


def test_a_leaving_member_frees_its_partitions_for_the_next_target(impl):
    # testLeavingMemberBumpsGroupEpoch
    coord, assignor = _two_members(impl)
    r = hb(coord, "g", "m2", -1)
    assert (r.error, r.member_id, r.member_epoch, r.heartbeat_interval_ms, r.assignment) == \
        (E.NONE, "m2", -1, 0, None)
    assignor.next = {"m1": FOO3}
    r = _beat(coord, "m1")
    assert (r.member_epoch, r.assignment) == (3, FOO3)


def test_the_heartbeat_interval_of_each_answer(impl):
    # testConsumerGroupHeartbeatFullResponse / testMemberJoinsEmptyConsumerGroup: every
    # answer of consumerGroupHeartbeat carries the group's heartbeat interval; a leave's
    # answer (consumerGroupLeave) and an error carry none
    coord, _ = make(impl, group_consumer_heartbeat_interval_ms=7_000)
    assignor = _m1_revoking(coord)
    answers = [
        join(coord, "g", "m3", ["foo"]),                              # a join
        hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]}),    # a revocation done
        hb(coord, "g", "m2", 2),                                      # a steady heartbeat
    ]
    assert [r.heartbeat_interval_ms for r in answers] == [7_000] * 3
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2]}}
    assert hb(coord, "g", "m3", -1).heartbeat_interval_ms == 0
    assert hb(coord, "g", "m1", 9).heartbeat_interval_ms == 0
    # a static member: its join, its leave for now (-2), its replacement's join
    assignor.next = {"m1": {"foo": [0, 1]}, "m2": {"foo": [2]}, "s": {}}
    assert join(coord, "g", "s", ["foo"], instance_id="i-s").heartbeat_interval_ms == 7_000
    assert hb(coord, "g", "s", -2, instance_id="i-s").heartbeat_interval_ms == 0
    assert join(coord, "g", "s2", ["foo"], instance_id="i-s").heartbeat_interval_ms == 7_000

"""Subscriptions in the consumer group protocol (KIP-848), both twins, checked against
Apache Kafka 4's GroupMetadataManagerTest cases the other consumer-protocol files do
not cover: regular-expression subscriptions (static rejoin with a new expression,
changes under denied topics, invalid expressions), subscription changes (topics
removed, names switched to a regex and back), topic metadata changes (topics deleted,
changes to topics the group does not subscribe to), server assignor selection and the
group size limit.

Kafka's tests start from groups replayed from records; here the same situations are
reached through heartbeats (so epochs are smaller) and the regex resolution, an
executor task in Kafka, happens at the group's next heartbeat (docs/consumer-protocol.md).
Each test's first comment names the Kafka test, or the Kafka method that decides the
outcome where no test pins it down.
"""
from hypothesis import given, settings, strategies as st

from helpers.consumer_views import in_memory
from helpers.tier import examples
from tests.core.test_consumer_protocol import E, fixed, hb, join, make
from tests.core.test_consumer_protocol_more import described, members

BATCH_MS = 10_001      # past Kafka's 10 s minimum between two resolutions of a group


def _full(coord, member_id, **kw):
    """A full heartbeat (as a client sends after an error) at the member's epoch, owning
    what it was given."""
    m = members(coord)[member_id]
    kw.setdefault("owned_partitions", m.assignment)
    kw.setdefault("rebalance_timeout_ms", 30_000)
    return hb(coord, "g", member_id, m.member_epoch, instance_id=m.instance_id, **kw)


def _settle(coord, rounds=4):
    """Heartbeat rounds of every active member, each owning what it was given."""
    for _ in range(rounds):
        for m in described(coord).members:
            if m.member_epoch > 0:
                hb(coord, "g", m.member_id, m.member_epoch, instance_id=m.instance_id,
                   owned_partitions=m.assignment)
    assert described(coord).state == "Stable"


# ---------------------------------------------------------------------------------------
# regular expressions
# ---------------------------------------------------------------------------------------
def test_a_new_regex_matching_topics_already_subscribed_bumps_once_resolved(impl):
    # testConsumerGroupMemberJoinsWithNewRegex (m1 subscribes to foo by name; the
    # resolution of m2's regex to foo bumps the epoch though the group's topics stay)
    coord, _ = make(impl)
    coord.set_topics({"foo": 6})
    join(coord, "g", "m1", ["foo"])
    r = join(coord, "g", "m2", regex="foo.*")
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, 1, {})
    assert described(coord).group_epoch == 1
    r = hb(coord, "g", "m2", 1, owned_partitions={})
    d = described(coord)
    assert (d.group_epoch, d.assignment_epoch) == (2, 2)
    assert len(members(coord)["m2"].target_assignment.get("foo", [])) == 3


def test_static_member_rejoining_with_a_narrower_regex(impl):
    # testStaticConsumerGroupMemberJoinsWithUpdatedRegex
    coord, clock = make(impl)
    coord.set_topics({"foo": 6, "bar": 3})
    r = join(coord, "g", "m1", regex="foo.*|bar.*", instance_id="i")
    _settle(coord)
    m1 = members(coord)["m1"]
    epoch = m1.member_epoch
    assert m1.assignment == {"foo": [0, 1, 2, 3, 4, 5], "bar": [0, 1, 2]}
    clock.advance(BATCH_MS)
    assert hb(coord, "g", "m1", -2, instance_id="i").member_epoch == -2
    # the new incarnation takes the old one's place at its epoch; its regex is new, so
    # it subscribes to nothing until resolved and every partition is taken from it
    r = join(coord, "g", "m2", regex="foo.*", instance_id="i")
    assert (r.error, r.member_epoch, r.assignment) == (E.NONE, epoch, {})
    assert described(coord).group_epoch == epoch
    assert members(coord)["m2"].assignment == {}
    # resolved: a new epoch and target
    r = _full(coord, "m2", subscribed_topic_regex="foo.*")
    assert (r.member_epoch, r.assignment) == (epoch + 1, {"foo": [0, 1, 2, 3, 4, 5]})


def test_a_regex_change_resolved_with_a_denied_topic_then_after_it_is_granted(impl):
    # testConsumerGroupMemberJoinsWithRegexWithTopicAuthorizationFailure
    coord, clock = make(impl)
    coord.set_topics({"foo": 6, "bar": 3})
    allowed = {"foo"}

    def rights(topic):
        return topic in allowed

    join(coord, "g", "m1", ["foo"])
    join(coord, "g", "m2", regex="foo.*", topic_filter=rights)
    clock.advance(BATCH_MS)
    _settle(coord)
    epoch = described(coord).group_epoch
    clock.advance(BATCH_MS)
    r = _full(coord, "m2", subscribed_topic_regex="foo.*|bar.*", owned_partitions={},
              topic_filter=rights)
    assert (r.member_epoch, r.assignment) == (members(coord)["m2"].member_epoch, {})
    # resolved to foo alone (bar denied): a new epoch, nothing of bar
    _full(coord, "m2", topic_filter=rights)
    d = described(coord)
    assert d.group_epoch == epoch + 1
    assert "bar" not in members(coord)["m2"].target_assignment
    # bar is granted and m2 moves to another regex: resolved with bar this time
    clock.advance(BATCH_MS)
    allowed.add("bar")
    _full(coord, "m2", subscribed_topic_regex="foo|bar.*", owned_partitions={},
          topic_filter=rights)
    _full(coord, "m2", topic_filter=rights)
    assert described(coord).group_epoch == epoch + 2
    assert members(coord)["m2"].target_assignment.get("bar") == [0, 1, 2]


def test_an_invalid_new_regex_leaves_the_member_as_it_was(impl):
    # GroupMetadataManager.maybeUpdateRegularExpressions (throwIfRegularExpressionIsInvalid)
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", regex="fo.*")
    _settle(coord)
    before = members(coord)["m1"]
    r = _full(coord, "m1", subscribed_topic_regex="fo(")
    assert r.error == E.INVALID_REGULAR_EXPRESSION
    assert "is not a valid regular expression" in r.error_message
    after = members(coord)["m1"]
    assert (after.subscribed_topic_regex, after.member_epoch, after.assignment) == \
        ("fo.*", before.member_epoch, {"foo": [0, 1]})


def test_a_join_refused_for_its_regex_makes_no_group(impl):
    # GroupMetadataManager.getOrMaybeCreateConsumerGroup makes the group without adding
    # it: the join's records add it when replayed, and a refused join has none
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    r = join(coord, "g", "m1", regex="fo(")
    assert r.error == E.INVALID_REGULAR_EXPRESSION
    assert coord.consumer_group_describe(["g"])[0].error == E.GROUP_ID_NOT_FOUND
    assert coord.group_type("g") is None
    assert [g.group_id for g in coord.list_groups()] == []
    # the same id joins with a valid regex afterwards: a group at epoch 1
    assert join(coord, "g", "m1", regex="fo.*").error == E.NONE
    assert described(coord).group_epoch == 1


def test_a_join_refused_for_its_regex_leaves_an_empty_classic_group_classic(impl):
    # the same: the empty classic group is replaced only by the join's records
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    assert coord.commit_offsets("g", "", -1, {("foo", 0): 7}) == {("foo", 0): E.NONE}
    assert coord.group_type("g") == "classic"
    r = join(coord, "g", "m1", regex="fo(")
    assert r.error == E.INVALID_REGULAR_EXPRESSION
    assert coord.group_type("g") == "classic"
    assert [(g.group_id, g.group_type) for g in coord.list_groups()] == [("g", "classic")]
    error, offsets = coord.fetch_offsets("g", [("foo", 0)])
    assert (error, offsets[("foo", 0)].offset) == (E.NONE, 7)


def test_a_full_group_is_checked_before_a_new_members_regex(impl):
    # GroupMetadataManager.consumerGroupHeartbeat: throwIfConsumerGroupIsFull runs before
    # maybeUpdateRegularExpressions compiles a new regex
    coord, _ = make(impl, group_consumer_max_size=1)
    coord.set_topics({"foo": 1})
    join(coord, "g", "m1", ["foo"])
    assert join(coord, "g", "m2", regex="fo(").error == E.GROUP_MAX_SIZE_REACHED


def _in_memory_and_stored(coord):
    """(the group's epochs in memory, the epochs its store holds)."""
    d = in_memory(coord, "g")
    stored = coord.store.groups["g"]
    return (d.group_epoch, d.assignment_epoch), (stored["group_epoch"],
                                                 stored["assignment_epoch"])


def test_a_refused_heartbeat_does_not_resolve_the_groups_regexes(impl):
    # GroupMetadataManager.consumerGroupHeartbeat validates the member (its epoch, its
    # instance id) before maybeUpdateRegularExpressions, and a resolution is written by
    # its own operation: a refused heartbeat changes nothing. m2's regex waits for the
    # group's next heartbeat; the first one comes from a fenced epoch, then from a
    # static member whose instance id is taken.
    coord, _ = make(impl)
    coord.set_topics({"foo": 2, "bar": 2})
    join(coord, "g", "m1", ["foo"], instance_id="i-1")
    join(coord, "g", "m2", regex="ba.*")
    before = _in_memory_and_stored(coord)
    assert before[0] == before[1] == (1, 1)
    assert hb(coord, "g", "m2", 7, owned_partitions={}).error == E.FENCED_MEMBER_EPOCH
    assert join(coord, "g", "m3", ["foo"], instance_id="i-1").error == \
        E.UNRELEASED_INSTANCE_ID
    assert _in_memory_and_stored(coord) == before
    # the next accepted heartbeat resolves it, and its record holds the bump
    assert hb(coord, "g", "m2", 1, owned_partitions={}).error == E.NONE
    after = _in_memory_and_stored(coord)
    assert after[0] == after[1] == (2, 2)


def test_a_heartbeat_refused_for_its_regex_does_not_resolve_the_others(impl):
    # the same with a new regex that does not parse: it is checked before the group's
    # pending resolution runs
    coord, _ = make(impl)
    coord.set_topics({"foo": 2, "bar": 2})
    join(coord, "g", "m1", regex="ba.*")
    before = _in_memory_and_stored(coord)
    assert join(coord, "g", "m1", ["foo"], regex="ba(").error == E.INVALID_REGULAR_EXPRESSION
    assert _in_memory_and_stored(coord) == before


def test_a_resolution_that_changes_no_members_record_is_written(impl):
    # GroupMetadataManager writes a resolution's bump (the group epoch record) and the
    # new target's epoch whether or not any member's record changes. Here m2 is still
    # revoking (foo shrank to 4 partitions while it held all 6) when m1's regex
    # resolves to bar: the sticky target leaves bar with m2 and m2 stays as it was,
    # so only the group's epochs change, and the store must hold them.
    coord, _ = make(impl)
    coord.set_topics({"foo": 6, "bar": 2})
    join(coord, "g", "m2", ["foo", "bar"])
    coord.set_topics({"foo": 4, "bar": 2})
    assert hb(coord, "g", "m2", 1).error == E.NONE
    join(coord, "g", "m1", ["foo"], regex="ba.*")
    before = in_memory(coord, "g")
    assert hb(coord, "g", "m2", 1).error == E.NONE       # resolves ba.* to bar
    after = in_memory(coord, "g")
    assert (after.group_epoch, after.assignment_epoch) == \
        (before.group_epoch + 1, before.assignment_epoch + 1)
    assert {m.member_id: m for m in after.members} == {m.member_id: m for m in before.members}
    memory, stored = _in_memory_and_stored(coord)
    assert stored == memory
    assert described(coord) == after


def test_a_deleted_topic_leaves_a_regex_subscription(impl):
    # GroupMetadataManager.onMetadataUpdate (groups subscribed to a deleted topic refresh
    # their metadata) / testSubscriptionMetadataRefreshedAfterGroupIsLoaded
    coord, clock = make(impl)
    coord.set_topics({"foo": 2, "foox": 1})
    join(coord, "g", "m1", regex="foo.*")
    _settle(coord)
    m1 = members(coord)["m1"]
    assert m1.assignment == {"foo": [0, 1], "foox": [0]}
    clock.advance(BATCH_MS)
    coord.set_topics({"foo": 2})
    r = hb(coord, "g", "m1", m1.member_epoch, owned_partitions=m1.assignment)
    # the target drops foox: revoked first, at the same epoch
    assert (r.member_epoch, r.assignment) == (m1.member_epoch, {"foo": [0, 1]})
    assert described(coord).group_epoch == m1.member_epoch + 1
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={"foo": [0, 1]})
    assert r.member_epoch == m1.member_epoch + 1


# ---------------------------------------------------------------------------------------
# subscription changes
# ---------------------------------------------------------------------------------------
def test_removing_a_topic_revokes_it_first(impl):
    # testUpdatingSubscriptionTriggersNewTargetAssignment (a topic removed)
    coord, _ = make(impl)
    coord.set_topics({"foo": 2, "bar": 2})
    join(coord, "g", "m1", ["foo", "bar"])
    owned = {"foo": [0, 1], "bar": [0, 1]}
    r = hb(coord, "g", "m1", 1, subscribed_topic_names=["foo"], owned_partitions=owned)
    assert (r.member_epoch, r.assignment) == (1, {"foo": [0, 1]})
    d = described(coord)
    assert (d.state, d.group_epoch, d.assignment_epoch) == ("Reconciling", 2, 2)
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]})
    assert (r.member_epoch, r.assignment) == (2, None)
    assert described(coord).state == "Stable"


def test_a_subscription_unchanged_but_reordered_does_not_bump(impl):
    # GroupMetadataManager.hasMemberSubscriptionChanged (ConsumerGroupMember keeps the
    # names sorted, so the same set in another order is no change)
    coord, _ = make(impl)
    coord.set_topics({"foo": 1, "bar": 1})
    join(coord, "g", "m1", ["foo", "bar"])
    r = hb(coord, "g", "m1", 1, subscribed_topic_names=["bar", "foo"],
           owned_partitions={"foo": [0], "bar": [0]})
    assert r.member_epoch == 1
    assert described(coord).group_epoch == 1


def test_switching_from_names_to_a_regex(impl):
    # testConsumerGroupMemberJoinsWithUpdatedRegex (from names: the names change bumps at
    # once, the regex adds its topics once resolved)
    coord, _ = make(impl)
    coord.set_topics({"foo": 2, "bar": 1})
    join(coord, "g", "m1", ["foo"])
    r = hb(coord, "g", "m1", 1, subscribed_topic_names=[], subscribed_topic_regex="ba.*",
           owned_partitions={"foo": [0, 1]})
    assert (r.member_epoch, r.assignment) == (1, {})
    assert described(coord).group_epoch == 2
    r = hb(coord, "g", "m1", 1, owned_partitions={})
    assert described(coord).group_epoch == 3
    r = hb(coord, "g", "m1", r.member_epoch, owned_partitions={})
    assert (r.member_epoch, members(coord)["m1"].assignment) == (3, {"bar": [0]})


def test_switching_from_a_regex_to_names(impl):
    # testConsumerGroupMemberClearsRegex (the regex cleared for names: one bump, the
    # regex's topics revoked before the names' are given)
    coord, clock = make(impl)
    coord.set_topics({"foo": 2, "bar": 1})
    join(coord, "g", "m1", regex="fo.*")
    _settle(coord)
    epoch = members(coord)["m1"].member_epoch
    r = hb(coord, "g", "m1", epoch, rebalance_timeout_ms=30_000, subscribed_topic_regex="",
           subscribed_topic_names=["bar"], owned_partitions={"foo": [0, 1]})
    assert (r.member_epoch, r.assignment) == (epoch, {})
    assert described(coord).group_epoch == epoch + 1
    r = hb(coord, "g", "m1", epoch, owned_partitions={})
    assert (r.member_epoch, r.assignment) == (epoch + 1, {"bar": [0]})
    assert members(coord)["m1"].subscribed_topic_regex is None


# ---------------------------------------------------------------------------------------
# topic metadata changes
# ---------------------------------------------------------------------------------------
def test_a_deleted_subscribed_topic_bumps_and_is_revoked(impl):
    # testSubscriptionMetadataRefreshedAfterGroupIsLoaded (the group's subscribed topics
    # differ from what it last saw: new epoch and target at the next heartbeat)
    coord, _ = make(impl)
    coord.set_topics({"foo": 2, "bar": 2})
    join(coord, "g", "m1", ["foo", "bar"])
    coord.set_topics({"foo": 2})
    assert described(coord).group_epoch == 1
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1], "bar": [0, 1]})
    assert (r.member_epoch, r.assignment) == (1, {"foo": [0, 1]})
    assert members(coord)["m1"].target_assignment == {"foo": [0, 1]}
    assert described(coord).group_epoch == 2


def test_a_change_to_an_unsubscribed_topic_does_not_bump(impl):
    # GroupMetadataManager.onMetadataUpdate / ConsumerGroup.computeMetadataHash (only the
    # subscribed topics count)
    coord, _ = make(impl)
    coord.set_topics({"foo": 2, "bar": 1})
    join(coord, "g", "m1", ["foo"])
    coord.set_topics({"foo": 2, "bar": 4, "zar": 1})
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]})
    assert r.member_epoch == 1
    assert described(coord).group_epoch == 1


def test_partitions_added_reach_every_member(impl):
    # GroupMetadataManager.onMetadataUpdate (requestMetadataRefresh of the subscribed
    # groups): partitions added, both members retargeted at their next heartbeat
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    assignor = fixed(coord)
    assignor.next = {"m1": {"foo": [0]}, "m2": {"foo": [1]}}
    join(coord, "g", "m1", ["foo"])
    join(coord, "g", "m2", ["foo"])
    _settle(coord)
    epoch = described(coord).group_epoch
    coord.set_topics({"foo": 4})
    assignor.next = {"m1": {"foo": [0, 2]}, "m2": {"foo": [1, 3]}}
    r1 = hb(coord, "g", "m1", epoch, owned_partitions={"foo": [0]})
    assert (r1.member_epoch, r1.assignment) == (epoch + 1, {"foo": [0, 2]})
    r2 = hb(coord, "g", "m2", epoch, owned_partitions={"foo": [1]})
    assert (r2.member_epoch, r2.assignment) == (epoch + 1, {"foo": [1, 3]})
    assert assignor.calls == 3


def test_a_topic_recreated_with_fewer_partitions(impl):
    # GroupMetadataManager.onMetadataUpdate (a topic's partition count changed)
    coord, _ = make(impl)
    coord.set_topics({"foo": 4})
    join(coord, "g", "m1", ["foo"])
    coord.set_topics({"foo": 2})
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1, 2, 3]})
    assert (r.member_epoch, r.assignment) == (1, {"foo": [0, 1]})
    r = hb(coord, "g", "m1", 1, owned_partitions={"foo": [0, 1]})
    assert r.member_epoch == 2


# ---------------------------------------------------------------------------------------
# server assignors
# ---------------------------------------------------------------------------------------
def test_unsupported_assignor_from_a_member_changes_nothing(impl):
    # testConsumerGroupHeartbeatRequestValidation (UnsupportedAssignorException)
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    r = _full(coord, "m1", subscribed_topic_names=["foo"], server_assignor="sticky")
    assert (r.error, r.error_message) == (
        E.UNSUPPORTED_ASSIGNOR,
        "ServerAssignor sticky is not supported. Supported assignors: uniform, range.")
    m = members(coord)["m1"]
    assert (m.member_epoch, m.assignment) == (1, {"foo": [0, 1]})
    assert described(coord).group_epoch == 1


def test_a_members_preferred_assignor_change_retargets_with_it(impl):
    # KAFKA-20434 (ConsumerGroup.computePreferredServerAssignor)
    coord, _ = make(impl)
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    assert described(coord).assignor_name == "uniform"
    r = hb(coord, "g", "m1", 1, server_assignor="range", owned_partitions={"foo": [0, 1]})
    assert r.member_epoch == 2
    d = described(coord)
    assert (d.group_epoch, d.assignment_epoch, d.assignor_name) == (2, 2, "range")


def test_the_default_assignor_is_the_first_configured(impl):
    # GroupMetadataManager's defaultConsumerGroupAssignor (the first of
    # group.consumer.assignors) when no member asks for one
    coord, _ = make(impl, group_consumer_assignors=("range", "uniform"))
    coord.set_topics({"foo": 2})
    join(coord, "g", "m1", ["foo"])
    assert described(coord).assignor_name == "range"
    r = join(coord, "g", "m2", ["foo"], server_assignor="sticky")
    assert "Supported assignors: range, uniform." in r.error_message


# ---------------------------------------------------------------------------------------
# group size (group.consumer.max.size)
# ---------------------------------------------------------------------------------------
def test_a_static_member_away_still_counts_towards_the_size(impl):
    # testNewMemberIsRejectedWithMaximumMembersIsReached (a member that left for now,
    # epoch -2, is still a member)
    coord, _ = make(impl, group_consumer_max_size=2)
    coord.set_topics({"foo": 2})
    join(coord, "g", "a", ["foo"], instance_id="i-a")
    join(coord, "g", "b", ["foo"])
    hb(coord, "g", "a", -2, instance_id="i-a")
    r = join(coord, "g", "c", ["foo"])
    assert r.error == E.GROUP_MAX_SIZE_REACHED
    assert r.error_message == "The consumer group has reached its maximum capacity of 2 members."
    # a member leaving for good makes room
    hb(coord, "g", "b", -1)
    assert join(coord, "g", "c", ["foo"]).error == E.NONE


# ---------------------------------------------------------------------------------------
# property: names and regexes naming the same topics make one homogeneous group
# ---------------------------------------------------------------------------------------
SAME_TOPICS = [None, "orders-.*", "orders-[ab]", "(orders-a|orders-b)", "orders.*"]


@settings(max_examples=examples(40), deadline=None)
@given(counts=st.tuples(st.integers(1, 8), st.integers(1, 8)),
       ways=st.lists(st.sampled_from(SAME_TOPICS), min_size=2, max_size=5))
def test_names_and_regexes_of_the_same_topics_settle_balanced(impl, counts, ways):
    # handleRegularExpressionsResult / the uniform assignor: whatever mix of topic names
    # and regexes the members use for orders-a and orders-b, once every regex is
    # resolved the group settles with those partitions split within one of each other
    coord, clock = make(impl)
    coord.set_topics({"orders-a": counts[0], "orders-b": counts[1], "other": 3})
    for i, regex in enumerate(ways):
        topics = ["orders-a", "orders-b"] if regex is None else None
        assert join(coord, "g", f"m{i}", topics, regex=regex).error == E.NONE
    clock.advance(BATCH_MS)         # past the 10 s between two resolutions of a group
    for _ in range(6):
        for m in described(coord).members:
            assert hb(coord, "g", m.member_id, m.member_epoch,
                      owned_partitions=m.assignment).error == E.NONE
    d = described(coord)
    assert d.state == "Stable", d
    owned = sorted((t, p) for m in d.members for t, ps in m.assignment.items() for p in ps)
    assert owned == [("orders-a", p) for p in range(counts[0])] + \
        [("orders-b", p) for p in range(counts[1])]
    share, extra = divmod(sum(counts), len(ways))
    sizes = sorted(sum(map(len, m.assignment.values())) for m in d.members)
    assert sizes == [share] * (len(ways) - extra) + [share + 1] * extra

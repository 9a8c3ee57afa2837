"""Dynamic group configs (Kafka 4's group configs: consumer.session.timeout.ms and
consumer.heartbeat.interval.ms per group) through the Python API, both twins: Kafka's
checks, and a group's members taking the values from their next heartbeat, the fast
paths' cached answers included."""
import pytest

from fastcoord import CoordinatorConfig, Errors, GroupConfigError, GroupCoordinator, ManualClock
from tests.core.test_consumer_protocol import hb

E = Errors
SESSION = "consumer.session.timeout.ms"
INTERVAL = "consumer.heartbeat.interval.ms"


def make(impl, **config):
    coord = GroupCoordinator(CoordinatorConfig(**config), clock=ManualClock(0), impl=impl)
    coord.set_topics({"foo": 2})
    return coord


def settled(coord, group_id="g", member_id="m"):
    """A member alone in its group, joined and reconciled: (its epoch)."""
    r = hb(coord, group_id, member_id, 0, rebalance_timeout_ms=30_000,
           subscribed_topic_names=["foo"], owned_partitions={})
    r = hb(coord, group_id, member_id, r.member_epoch, owned_partitions=r.assignment)
    assert r.error == E.NONE
    return r.member_epoch


@pytest.mark.parametrize("configs, says", [
    ({"consumer.session.timeout": 50_000}, "Unknown group config name"),
    ({"share.session.timeout.ms": 50_000}, "Unknown group config name"),
    ({SESSION: "abc"}, "Not a number of type INT"),
    ({SESSION: "+-5"}, "Not a number of type INT"),
    ({SESSION: 4.5}, "Not a number of type INT"),
    ({SESSION: 0}, "Value must be at least 1"),
    ({SESSION: 2**31}, "Not a number of type INT"),
    ({SESSION: 30_000}, "greater than or equal to group.consumer.min.session.timeout.ms"),
    ({SESSION: 61_000}, "less than or equal to group.consumer.max.session.timeout.ms"),
    ({INTERVAL: 4_000}, "greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ({INTERVAL: 16_000}, "less than or equal to group.consumer.max.heartbeat.interval.ms"),
])
def test_a_config_kafka_refuses_is_refused_and_changes_nothing(impl, configs, says):
    coord = make(impl)
    coord.set_group_config("g", {INTERVAL: 6_000})
    with pytest.raises(GroupConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        coord.set_group_config("g", configs)
    assert coord.group_config("g") == {INTERVAL: 6_000}


def test_the_session_must_exceed_the_interval_with_kafkas_defaults_for_unset_ones(impl):
    """Kafka checks a group's set against its own defaults (45 s, 5 s) for the configs
    the group does not set, not against the broker's values."""
    coord = make(impl, group_consumer_min_session_timeout_ms=1_000,
                 group_consumer_session_timeout_ms=10_000,
                 group_consumer_max_heartbeat_interval_ms=60_000)
    with pytest.raises(GroupConfigError, match="must be greater than"):
        coord.set_group_config("g", {SESSION: 8_000, INTERVAL: 8_000})
    # 50 s over Kafka's 45 s default session, which counts for the unset one
    with pytest.raises(GroupConfigError, match="must be greater than"):
        coord.set_group_config("g", {INTERVAL: 50_000})
    # 40 s over the broker's 10 s session: allowed, Kafka's 45 s default is what counts
    coord.set_group_config("g", {INTERVAL: 40_000})
    assert coord.group_config("g") == {INTERVAL: 40_000}


def test_values_as_text_are_read_as_kafka_reads_an_int(impl):
    coord = make(impl)
    coord.set_group_config("g", {SESSION: " 50000 ", INTERVAL: "+7000"})
    assert coord.group_config("g") == {SESSION: 50_000, INTERVAL: 7_000}
    assert coord.group_configs() == {"g": {SESSION: 50_000, INTERVAL: 7_000}}


@pytest.mark.parametrize("bad, error", [(None, TypeError), (["x"], TypeError),
                                        ({1: 5}, TypeError), ({INTERVAL: True}, ValueError)])
def test_bad_arguments(impl, bad, error):
    coord = make(impl)
    with pytest.raises(error):
        coord.set_group_config("g", bad)
    with pytest.raises(ValueError):
        coord.set_group_config("", {INTERVAL: 6_000})
    with pytest.raises(TypeError):
        coord.group_config(None)


def test_the_interval_reaches_every_answer_the_fast_paths_included(impl):
    """A settled member's steady heartbeat is answered from the member table's cache:
    after a change of the group's interval, that answer, by ids and by handle, carries
    the new one; cleared, the coordinator's default again."""
    coord = make(impl)
    epoch = settled(coord)
    assert hb(coord, "g", "m", epoch).heartbeat_interval_ms == 5_000
    handle = coord.consumer_member_handle("g", "m")
    assert coord.consumer_heartbeat_handle(handle, epoch).heartbeat_interval_ms == 5_000
    coord.set_group_config("g", {INTERVAL: 7_000})
    assert hb(coord, "g", "m", epoch).heartbeat_interval_ms == 7_000
    assert coord.consumer_heartbeat_handle(handle, epoch).heartbeat_interval_ms == 7_000
    coord.set_group_config("g", {})
    assert coord.group_config("g") == {}
    assert hb(coord, "g", "m", epoch).heartbeat_interval_ms == 5_000
    assert coord.consumer_heartbeat_handle(handle, epoch).heartbeat_interval_ms == 5_000


def test_a_config_set_before_the_group_exists_applies_from_its_first_answer(impl):
    coord = make(impl)
    coord.set_group_config("g", {INTERVAL: 9_000, SESSION: 60_000})
    r = hb(coord, "g", "m", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=["foo"],
           owned_partitions={})
    assert r.error == E.NONE and r.heartbeat_interval_ms == 9_000
    coord.advance_time(59_999)
    assert [m.member_id for m in coord.consumer_group_describe(["g"])[0].members] == ["m"]
    coord.advance_time(1)
    assert coord.consumer_group_describe(["g"])[0].members == []


@pytest.mark.parametrize("how", ["ids", "handle", "batch"])
def test_a_new_session_timeout_counts_from_the_next_heartbeat(impl, how):
    """As in Kafka, the session running when the config changes keeps its deadline; the
    member's next heartbeat (a steady one, answered by the member table alone) starts
    a session of the group's new length."""
    import numpy as np
    coord = make(impl)
    epoch = settled(coord)
    coord.set_group_config("g", {SESSION: 60_000})
    coord.advance_time(10_000)
    if how == "ids":
        assert hb(coord, "g", "m", epoch).error == E.NONE
    elif how == "handle":
        handle = coord.consumer_member_handle("g", "m")
        assert coord.consumer_heartbeat_handle(handle, epoch) is not None
    else:
        handle = coord.consumer_member_handle("g", "m")
        assert coord.consumer_heartbeat_batch(np.array([handle], dtype=np.int64),
                                              np.array([epoch], dtype=np.int32)).all()
    coord.advance_time(59_999)              # 45 s (the default) passed long ago
    assert [m.member_id for m in coord.consumer_group_describe(["g"])[0].members] == ["m"]
    coord.advance_time(1)
    assert coord.consumer_group_describe(["g"])[0].members == []
    assert hb(coord, "g", "m", epoch).error == E.UNKNOWN_MEMBER_ID


def test_a_shorter_session_leaves_the_running_one_as_it_was(impl):
    coord = make(impl, group_consumer_min_session_timeout_ms=10_000)
    settled(coord)                          # its session: 45 s from t=0
    coord.set_group_config("g", {SESSION: 10_000})
    coord.advance_time(44_999)
    assert [m.member_id for m in coord.consumer_group_describe(["g"])[0].members] == ["m"]
    coord.advance_time(1)
    assert coord.consumer_group_describe(["g"])[0].members == []


def test_other_groups_keep_the_defaults(impl):
    coord = make(impl)
    coord.set_group_config("g", {INTERVAL: 7_000})
    epoch = settled(coord, "other")
    assert hb(coord, "other", "m", epoch).heartbeat_interval_ms == 5_000

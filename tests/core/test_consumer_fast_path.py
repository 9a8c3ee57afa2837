"""The steady ConsumerGroupHeartbeat answered by the member table (both twins).

`GroupCoordinator.consumer_group_heartbeat` is bound on an instance to its member
table's `consumer_heartbeat`, which answers a settled member's steady heartbeat itself
(every optional field None) and hands every other case to the class's method, the
checked slow path (core/consumer.py). These tests hold the two to the same answers.
"""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock
from fastcoord.core.store import InMemoryStore

E = Errors
SESSION = 45_000


def make(impl, store=None, **config):
    clock = ManualClock(0)
    coord = GroupCoordinator(CoordinatorConfig(**config), clock=clock, impl=impl, store=store)
    return coord, clock


def counting(coord):
    """Count the consumer heartbeats the table hands to the slow path."""
    calls = []
    slow = coord.member_table.consumer_fallback

    def fallback(*args, **kwargs):
        calls.append(args)
        return slow(*args, **kwargs)

    coord.member_table.consumer_fallback = fallback
    return calls


def hb(coord, group_id, member_id, epoch, **kw):
    out = []
    coord.consumer_group_heartbeat(group_id, member_id, epoch, callback=out.append, **kw)
    assert len(out) == 1, out
    return out[0]


def slow_hb(coord, group_id, member_id, epoch, **kw):
    out = []
    GroupCoordinator.consumer_group_heartbeat(coord, group_id, member_id, epoch,
                                              callback=out.append, **kw)
    assert len(out) == 1, out
    return out[0]


def join(coord, group_id, member_id, topics, **kw):
    return hb(coord, group_id, member_id, 0, rebalance_timeout_ms=30_000,
              subscribed_topic_names=topics, owned_partitions={}, **kw)


def settled_group(coord, members=("a", "b")):
    """A group whose members are all STABLE at the group epoch: {member id: epoch}."""
    coord.set_topics({"t": 6})
    epochs = {m: join(coord, "g", m, ["t"]).member_epoch for m in members}
    for _ in range(4):
        for m in members:
            r = hb(coord, "g", m, epochs[m], owned_partitions=_assigned(coord, m))
            assert r.error == E.NONE, r
            epochs[m] = r.member_epoch
    d = coord.consumer_group_describe(["g"])[0]
    assert d.state == "Stable", d
    assert epochs == {m.member_id: d.group_epoch for m in d.members}
    return epochs


def _assigned(coord, member_id):
    d = coord.consumer_group_describe(["g"])[0]
    return next(m.assignment for m in d.members if m.member_id == member_id)


def test_a_settled_members_steady_heartbeat_is_answered_by_the_table(impl):
    coord, _ = make(impl)
    epochs = settled_group(coord)
    calls = counting(coord)
    before = coord.consumer_group_describe(["g"])
    for m, epoch in epochs.items():
        r = hb(coord, "g", m, epoch)
        assert r == slow_hb(coord, "g", m, epoch)
        assert (r.error, r.error_message, r.member_id, r.member_epoch,
                r.heartbeat_interval_ms, r.assignment) == (E.NONE, None, m, epoch, 5000, None)
    assert calls == []          # none went to the slow path
    assert coord.consumer_group_describe(["g"]) == before


def test_the_fast_path_refreshes_the_session(impl):
    coord, clock = make(impl)
    epochs = settled_group(coord)
    calls = counting(coord)
    for _ in range(6):          # 6 x 10 s: beyond the 45 s session timeout
        clock.advance(10_000)
        coord.advance_time(0)
        for m, epoch in epochs.items():
            assert hb(coord, "g", m, epoch).error == E.NONE
    assert calls == []
    assert sorted(m.member_id for m in coord.consumer_group_describe(["g"])[0].members) \
        == sorted(epochs)
    clock.advance(SESSION + 1)  # silent now: both are fenced, as the slow path's would be
    coord.advance_time(0)
    assert coord.consumer_group_describe(["g"])[0].members == []


def test_a_classic_heartbeat_naming_a_consumer_member_is_unknown(impl):
    coord, _ = make(impl)
    epochs = settled_group(coord)
    for m, epoch in epochs.items():
        assert coord.heartbeat("g", m, epoch) == E.UNKNOWN_MEMBER_ID
        assert coord.heartbeat("g", m, 0) == E.UNKNOWN_MEMBER_ID
        assert coord.member_handle("g", m) == -1


@pytest.mark.parametrize("change", ["set_topics", "join", "leave", "client", "epoch",
                                    "fields", "store_failure"])
def test_the_fast_path_hands_over_when_the_group_moves(impl, change):
    store = FlakyStore()
    coord, clock = make(impl, store=store)
    epochs = settled_group(coord, members=("a", "b", "c"))
    calls = counting(coord)
    assert hb(coord, "g", "a", epochs["a"]).error == E.NONE
    assert calls == []
    if change == "set_topics":
        coord.set_topics({"t": 6})              # the same map: the slow path re-checks it
    elif change == "join":
        join(coord, "g", "d", ["t"])
    elif change == "leave":
        assert hb(coord, "g", "c", -1).error == E.NONE
    elif change == "client":
        pass
    elif change == "epoch":
        epochs["a"] -= 1                        # a stale epoch: the slow path fences it
    elif change == "fields":
        pass
    elif change == "store_failure":
        store.fail = True                       # a client id change writes, and fails
        assert hb(coord, "g", "b", epochs["b"], client_id="new").error != E.NONE
        store.fail = False
    calls.clear()
    kw = {"client_id": "other"} if change == "client" else {}
    if change == "fields":
        kw = {"rebalance_timeout_ms": 30_000}
    r = hb(coord, "g", "a", epochs["a"], **kw)
    assert len(calls) == 1, change              # the slow path answered it
    if change == "epoch":
        assert r.error == E.FENCED_MEMBER_EPOCH
        return
    assert r.error == E.NONE
    if change in ("join", "leave"):
        assert r.member_epoch > epochs["a"]     # the group epoch moved
        return
    # nothing moved: the slow path settled it again, the next one is the table's
    calls.clear()
    kw.pop("rebalance_timeout_ms", None)        # (a steady heartbeat leaves it out)
    assert hb(coord, "g", "a", epochs["a"], **kw) == r
    assert calls == []


def test_a_member_fenced_by_its_timeout_unsettles_the_group(impl):
    """A fence that no heartbeat causes (a session deadline) bumps the group epoch: the
    members still settled at the old one go to the slow path, which moves them on."""
    coord, clock = make(impl)
    epochs = settled_group(coord, members=("a", "b", "c"))
    calls = counting(coord)
    for _ in range(4):                  # c is silent
        clock.advance(10_000)
        coord.advance_time(0)
        for m in ("a", "b"):
            assert hb(coord, "g", m, epochs[m]).error == E.NONE
    assert calls == []
    clock.advance(6_000)                # c's session timeout passes: fenced
    coord.advance_time(0)
    assert [m.member_id for m in coord.consumer_group_describe(["g"])[0].members] == ["a", "b"]
    r = hb(coord, "g", "a", epochs["a"])
    assert len(calls) == 1              # the slow path answered it
    assert r == slow_answer_after_fence(impl)
    assert r.member_epoch > epochs["a"]


def slow_answer_after_fence(impl):
    """The same story on a coordinator whose every heartbeat takes the slow path."""
    coord, clock = make(impl)
    epochs = settled_group(coord, members=("a", "b", "c"))
    for _ in range(4):
        clock.advance(10_000)
        coord.advance_time(0)
        for m in ("a", "b"):
            assert slow_hb(coord, "g", m, epochs[m]).error == E.NONE
    clock.advance(6_000)
    coord.advance_time(0)
    return slow_hb(coord, "g", "a", epochs["a"])


class FlakyStore(InMemoryStore):
    """An in-memory store whose consumer group writes fail while `fail` is set."""

    def __init__(self):
        super().__init__()
        self.fail = False

    def store_consumer_group(self, group_id, record, done):
        if self.fail:
            done(E.UNKNOWN_SERVER_ERROR)
            return
        super().store_consumer_group(group_id, record, done)


def test_bad_arguments_raise_as_the_checked_path_does(impl):
    coord, _ = make(impl)
    epochs = settled_group(coord, members=("a",))
    epoch = epochs["a"]
    with pytest.raises(TypeError, match="callback"):
        coord.consumer_group_heartbeat("g", "a", epoch, callback=None)
    with pytest.raises(TypeError, match="member_epoch"):
        coord.consumer_group_heartbeat("g", "a", True, callback=print)
    with pytest.raises(TypeError, match="client_id"):
        coord.consumer_group_heartbeat("g", "a", epoch, client_id=None, callback=print)
    with pytest.raises(TypeError, match="group_id"):
        coord.consumer_group_heartbeat(b"g", "a", epoch, callback=print)
    with pytest.raises(ValueError, match="member_epoch"):
        coord.consumer_group_heartbeat("g", "a", 1 << 40, callback=print)
    with pytest.raises(TypeError):
        coord.consumer_group_heartbeat("g", "a", epoch, print)     # callback is keyword-only


def test_a_raising_callback_is_logged_not_raised(impl, caplog):
    coord, _ = make(impl)
    epochs = settled_group(coord, members=("a",))
    calls = counting(coord)

    def boom(result):
        raise RuntimeError("boom")

    coord.consumer_group_heartbeat("g", "a", epochs["a"], callback=boom)
    assert calls == []
    assert "a coordinator callback raised" in caplog.text


def test_the_class_method_is_the_checked_path(impl):
    coord, _ = make(impl)
    assert coord.consumer_group_heartbeat.__self__ is coord.member_table
    assert GroupCoordinator.consumer_group_heartbeat.__doc__
    epochs = settled_group(coord, members=("a",))
    calls = counting(coord)
    slow_hb(coord, "g", "a", epochs["a"])
    assert calls == []          # (the class's method never goes through the table)


# ---------------------------------------------------------------------------------------
# the fast path answers what the slow path answers, in every state
# ---------------------------------------------------------------------------------------
MEMBERS = ["m0", "m1", "m2", "m3"]
TOPICS = ["t0", "t1", "t2"]

_member = st.sampled_from(MEMBERS)
_op = st.one_of(
    st.tuples(st.just("join"), _member,
              st.lists(st.sampled_from(TOPICS), min_size=1, max_size=3, unique=True)),
    st.tuples(st.just("steady"), _member, st.sampled_from([0, 0, 0, -1, 1])),
    st.tuples(st.just("steady_all"), st.none(), st.none()),
    st.tuples(st.just("ack"), _member, st.none()),
    st.tuples(st.just("ack_all"), st.none(), st.none()),
    st.tuples(st.just("leave"), _member, st.none()),
    st.tuples(st.just("topics"), st.sampled_from(TOPICS), st.integers(0, 4)),
    st.tuples(st.just("time"), st.sampled_from([1_000, 10_000, 30_000, 46_000]), st.none()),
    st.tuples(st.just("client"), _member, st.sampled_from(["", "x"])),
    # static members: a join with an instance id (a new member id taking over a place
    # left for now), and leaving for now (-2)
    st.tuples(st.just("join_static"), _member, st.sampled_from(["i0", "i1"])),
    st.tuples(st.just("leave_static"), _member, st.none()),
)


def test_fast_and_slow_paths_agree_on_random_streams(impl):
    """Random consumer-protocol streams sent to two coordinators: each steady heartbeat
    through the instance's method (the member table's fast path) of one and the
    class's method (the slow path) of the other; every answer and every group
    description agree."""
    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(_member, min_size=1, max_size=4, unique=True),
           st.lists(_op, min_size=10, max_size=60))
    def run(first, ops):
        fast, fast_clock = make(impl)
        slow, slow_clock = make(impl)
        topics = {"t0": 3, "t1": 2, "t2": 4}
        for c in (fast, slow):
            c.set_topics(topics)
        epochs, owned, clients, instances = {}, {}, {}, {}

        def both(member, epoch, **kw):
            a = hb(fast, "g", member, epoch, **kw)
            b = slow_hb(slow, "g", member, epoch, **kw)
            assert a == b, (member, epoch, kw)
            if a.error == E.NONE and a.member_epoch >= 0:
                epochs[member] = a.member_epoch
                if a.assignment is not None:
                    owned[member] = a.assignment
            return a

        def steady(member, delta=0):
            both(member, epochs[member] + delta, client_id=clients.get(member, ""))

        def ack(member):
            both(member, epochs[member], owned_partitions=owned.get(member, {}),
                 client_id=clients.get(member, ""))

        ops = [("join", m, ["t0", "t1"]) for m in first] + ops
        for op, x, y in ops:
            if op == "join":
                both(x, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=y,
                     owned_partitions={}, client_id=clients.get(x, ""))
            elif op == "steady" and x in epochs:
                steady(x, y)
            elif op == "steady_all":
                for m in list(epochs):
                    steady(m)
            elif op == "ack" and x in epochs:
                ack(x)
            elif op == "ack_all":
                for m in list(epochs):
                    ack(m)
            elif op == "leave" and x in epochs:
                both(x, -1)
                epochs.pop(x)
                owned.pop(x, None)
            elif op == "topics":
                topics = dict(topics, **{x: y})
                for c in (fast, slow):
                    c.set_topics(topics)
            elif op == "time":
                for clock, c in ((fast_clock, fast), (slow_clock, slow)):
                    clock.advance(x)
                    c.advance_time(0)
            elif op == "client" and x in epochs:
                clients[x] = y
            elif op == "join_static" and instances.get(x, y) == y:
                # (a member keeps its instance id: consumer.py does not yet drop the old
                # id's place when a member changes it, a slow-path matter of its own)
                if both(x, 0, instance_id=y, rebalance_timeout_ms=30_000,
                        subscribed_topic_names=["t0", "t2"], owned_partitions={},
                        client_id=clients.get(x, "")).error == E.NONE:
                    instances[x] = y
            elif op == "leave_static" and x in instances:
                both(x, -2, instance_id=instances[x])
            described = fast.consumer_group_describe(["g"])
            assert described == slow.consumer_group_describe(["g"])
            present = {d.member_id for d in described[0].members}
            for m in list(epochs):          # fenced by a timeout: rejoins from scratch
                if m not in present:
                    epochs.pop(m)
                    owned.pop(m, None)
            for m in list(instances):
                if m not in present:
                    instances.pop(m)

    run()


def test_random_streams_do_take_the_fast_path(impl):
    """(the property above is not vacuous: a plain steady stream is answered by the table)"""
    coord, clock = make(impl)
    epochs = settled_group(coord, members=("a", "b", "c"))
    calls = counting(coord)
    n = 0
    for i in range(30):
        clock.advance(1000)
        coord.advance_time(0)
        for m, e in epochs.items():
            hb(coord, "g", m, e)
            n += 1
    assert calls == [] and n == 90

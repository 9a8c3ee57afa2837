"""The steady ConsumerGroupHeartbeat answered by the member table (both twins).

`GroupCoordinator.consumer_group_heartbeat` is bound on an instance to its member
table's `consumer_heartbeat`, which answers a settled member's steady heartbeat itself
(every optional field None) and hands every other case to the class's method, the
checked slow path (core/consumer.py). These tests hold the two to the same answers.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import fastcoord
from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock
from fastcoord.core.store import InMemoryStore
from helpers.tier import examples

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


def test_every_call_shape_of_a_steady_heartbeat_is_answered_alike(impl):
    """The native table's entry reads the plain call (three positional arguments and
    `callback=`) itself and hands every other shape to its general path: each shape
    of the same steady heartbeat gets the same cached answer, none the slow path's."""
    coord, _ = make(impl)
    epoch = settled_group(coord, members=("a",))["a"]
    expected = hb(coord, "g", "a", epoch)
    calls = counting(coord)
    name = "".join(["call", "back"])     # equal to the keyword, not its interned object
    out = []
    heartbeat = coord.consumer_group_heartbeat
    heartbeat("g", "a", epoch, **{name: out.append})
    heartbeat("g", "a", epoch, client_id="", callback=out.append)
    heartbeat("g", "a", epoch, rebalance_timeout_ms=-1, client_host="", callback=out.append)
    heartbeat(group_id="g", member_id="a", member_epoch=epoch, callback=out.append)
    heartbeat("g", "a", member_epoch=epoch, callback=out.append)
    heartbeat("g", "a", epoch, callback=out.append)
    assert out == [expected] * 6
    assert calls == []
    with pytest.raises(TypeError):
        heartbeat("g", "a", epoch, callback=out.append, bogus=1)
    with pytest.raises(TypeError):
        heartbeat("g", "a", epoch)
    with pytest.raises(TypeError):
        heartbeat("g", "a", epoch, None, callback=out.append)
    assert len(out) == 6 and calls == []


@pytest.mark.parametrize("shape", [{}, {"client_id": ""}])
def test_a_callback_raising_a_base_exception_propagates(impl, shape):
    """Only an Exception from a callback is logged and swallowed: KeyboardInterrupt
    reaches the caller, from the plain steady call and from the general one."""
    coord, _ = make(impl)
    epoch = settled_group(coord, members=("a",))["a"]
    calls = counting(coord)

    def interrupted(result):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        coord.consumer_group_heartbeat("g", "a", epoch, callback=interrupted, **shape)
    assert calls == []
    assert hb(coord, "g", "a", epoch).error == E.NONE


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


def by_handle(coord, handles, member, epoch):
    """A steady heartbeat by handle: the handle kept from before (which may name a
    member gone since: it must then miss), else a fresh one; None when the table left
    it to consumer_group_heartbeat."""
    for fresh in (False, True):
        if fresh or member not in handles:
            handles[member] = coord.consumer_member_handle("g", member)
        if handles[member] >= 0:
            r = coord.consumer_heartbeat_handle(handles[member], epoch)
            if r is not None:
                assert r.member_id == member, (r, member)
                return r
    return None


@pytest.mark.parametrize("via", ["call", "handle"])
def test_fast_and_slow_paths_agree_on_random_streams(impl, via):
    """Random consumer-protocol streams sent to two coordinators: each steady heartbeat
    through the instance's method (the member table's fast path; or by handle, falling
    back to the method when the table leaves it) of one and the class's method (the
    slow path) of the other; every answer and every group description agree."""
    @settings(max_examples=examples(150), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(_member, min_size=1, max_size=4, unique=True),
           st.lists(_op, min_size=10, max_size=60))
    # a fenced heartbeat (a stale epoch) from a new client id, then a steady one from it
    @example(first=["m0"], ops=[("join", "m0", ["t0"])] * 4 + [
        ("join", "m2", ["t0"]), ("join", "m0", ["t0"]), ("join", "m2", ["t0"]),
        ("client", "m2", "x"), ("steady", "m2", -1), ("steady_all", None, None)])
    def run(first, ops):
        fast, fast_clock = make(impl)
        slow, slow_clock = make(impl)
        topics = {"t0": 3, "t1": 2, "t2": 4}
        for c in (fast, slow):
            c.set_topics(topics)
        epochs, owned, clients, instances = {}, {}, {}, {}
        handles, sent_client = {}, {}

        def both(member, epoch, **kw):
            a = None
            if via == "handle" and set(kw) <= {"client_id"} \
                    and kw.get("client_id", "") == sent_client.get(member):
                a = by_handle(fast, handles, member, epoch)
            if a is None:
                a = hb(fast, "g", member, epoch, **kw)
            if a.error == E.NONE:
                # (the member's client id is what its last accepted heartbeat carried:
                # a fenced one changes nothing, as in Kafka)
                sent_client[member] = kw.get("client_id", "")
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


# -- steady heartbeats by handle (consumer_member_handle, consumer_heartbeat_batch/handle)

def handles_of(coord, members):
    return np.array([coord.consumer_member_handle("g", m) for m in members], dtype=np.int64)


def test_handles_answer_a_settled_members_steady_heartbeats(impl):
    coord, clock = make(impl)
    epochs = settled_group(coord, members=("a", "b", "c"))
    calls = counting(coord)
    members = list(epochs)
    hs = handles_of(coord, members)
    assert (hs >= 0).all()
    eps = np.array([epochs[m] for m in members], dtype=np.int32)
    for _ in range(6):          # 6 x 10 s: beyond the 45 s session timeout
        clock.advance(10_000)
        coord.advance_time(0)
        assert coord.consumer_heartbeat_batch(hs, eps).tolist() == [True] * 3
    for m, h in zip(members, hs.tolist()):
        assert coord.consumer_heartbeat_handle(h, epochs[m]) == slow_hb(coord, "g", m, epochs[m])
    assert calls == []
    assert sorted(d.member_id for d in coord.consumer_group_describe(["g"])[0].members) \
        == members
    clock.advance(SESSION + 1)  # silent now: all fenced
    coord.advance_time(0)
    assert coord.consumer_group_describe(["g"])[0].members == []
    assert coord.consumer_heartbeat_batch(hs, eps).tolist() == [False] * 3


def test_handles_miss_what_is_not_a_steady_heartbeat(impl):
    coord, clock = make(impl)
    epochs = settled_group(coord, members=("a", "b"))
    ha, hb_ = handles_of(coord, ["a", "b"]).tolist()
    ea, eb = epochs["a"], epochs["b"]
    assert coord.consumer_member_handle("g", "x") == -1
    assert coord.consumer_member_handle("other", "a") == -1
    bad = np.array([-1, 0x7FFF_FFFF, ha ^ (1 << 32), ha, ha, hb_], dtype=np.int64)
    eps = np.array([ea, ea, ea, ea + 1, 0, eb], dtype=np.int32)
    assert coord.consumer_heartbeat_batch(bad, eps).tolist() == [False] * 5 + [True]
    # a stale epoch refreshes nothing: a, heartbeating only so, is fenced in time
    for _ in range(4):
        clock.advance(10_000)
        coord.advance_time(0)
        assert coord.consumer_heartbeat_batch(bad[3:], eps[3:]).tolist() == [False, False, True]
    clock.advance(6_000)
    coord.advance_time(0)
    assert [d.member_id for d in coord.consumer_group_describe(["g"])[0].members] == ["b"]
    assert coord.consumer_heartbeat_handle(ha, ea) is None
    # the group moved (a's fence bumped its epoch): b's steady heartbeat is the slow
    # path's to answer, and the table's again once b has moved on
    assert coord.consumer_heartbeat_handle(hb_, eb) is None
    r = hb(coord, "g", "b", eb)
    assert r.member_epoch > eb
    hb(coord, "g", "b", r.member_epoch, owned_partitions=_assigned(coord, "b"))
    assert coord.consumer_heartbeat_handle(hb_, r.member_epoch) is not None
    join(coord, "g", "d", ["t"])            # a join moves it again
    assert coord.consumer_heartbeat_handle(hb_, r.member_epoch) is None


def test_classic_and_consumer_handles_do_not_cross(impl):
    coord, _ = make(impl, group_initial_rebalance_delay_ms=0)
    epochs = settled_group(coord, members=("a",))
    out = []
    coord.join_group("classic", "", "consumer", [("range", b"")], session_timeout_ms=10_000,
                     require_known_member_id=False, callback=out.append)
    coord.advance_time(0)
    coord.sync_group("classic", out[0].generation_id, out[0].member_id,
                     {out[0].member_id: b""}, callback=out.append)
    assert out[-1].error == E.NONE
    classic = coord.member_handle("classic", out[0].member_id)
    consumer = coord.consumer_member_handle("g", "a")
    assert classic >= 0 and consumer >= 0
    assert coord.consumer_member_handle("classic", out[0].member_id) == -1
    assert coord.consumer_heartbeat_handle(classic, out[0].generation_id) is None
    assert coord.heartbeat_handle(consumer, epochs["a"]) == E.UNKNOWN_MEMBER_ID


def test_a_replaced_static_members_handle_misses(impl):
    """A static member left for now (-2) and taken over by a new member id: the slot is
    the same, the incarnation is not; the old id's handle never answers for the new."""
    coord, _ = make(impl)
    coord.set_topics({"t": 4})
    join(coord, "g", "a", ["t"], instance_id="i-a")
    join(coord, "g", "b", ["t"], instance_id="i-b")
    for mid in ("a", "b", "a", "b"):
        m = {m.member_id: m for m in coord.consumer_group_describe(["g"])[0].members}[mid]
        hb(coord, "g", mid, m.member_epoch, instance_id=m.instance_id,
           owned_partitions=m.assignment)
    m = {m.member_id: m for m in coord.consumer_group_describe(["g"])[0].members}["b"]
    old = coord.consumer_member_handle("g", "b")
    hb(coord, "g", "b", m.member_epoch)             # settles b at its epoch
    assert coord.consumer_heartbeat_handle(old, m.member_epoch) is not None
    assert hb(coord, "g", "b", -2, instance_id="i-b").error == E.NONE
    r = join(coord, "g", "b2", ["t"], instance_id="i-b")
    assert (r.error, r.member_epoch) == (E.NONE, m.member_epoch)
    assert hb(coord, "g", "b2", r.member_epoch).error == E.NONE     # b2 settles there
    new = coord.consumer_member_handle("g", "b2")
    assert coord.consumer_heartbeat_handle(new, r.member_epoch).member_id == "b2"
    assert coord.consumer_heartbeat_handle(old, r.member_epoch) is None
    assert coord.consumer_heartbeat_batch(np.array([old, new], dtype=np.int64),
                                          np.array([r.member_epoch] * 2, dtype=np.int32)
                                          ).tolist() == [False, True]


def test_handle_calls_check_their_arguments(impl):
    coord, _ = make(impl)
    settled_group(coord, members=("a",))
    h = np.array([coord.consumer_member_handle("g", "a")], dtype=np.int64)
    with pytest.raises(TypeError, match="member_epochs"):
        coord.consumer_heartbeat_batch(h, np.array([1], dtype=np.int64))
    with pytest.raises(TypeError, match="handles"):
        coord.consumer_heartbeat_batch([1], np.array([1], dtype=np.int32))
    with pytest.raises(ValueError, match="member_epochs differ in length"):
        coord.consumer_heartbeat_batch(h, np.array([1, 2], dtype=np.int32))
    with pytest.raises(TypeError, match="member_epoch must be an int"):
        coord.consumer_heartbeat_handle(int(h[0]), "1")
    with pytest.raises(ValueError, match="member_epoch must fit in int32"):
        coord.consumer_heartbeat_handle(int(h[0]), 1 << 31)
    with pytest.raises(TypeError, match="member_id must be a str"):
        coord.consumer_member_handle("g", 1)


def test_handle_calls_of_every_shape_answer_alike(impl):
    # (native: two ints in range are read by the C entry; keywords, bools and ints out
    # of range go to its general path, which checks as the pure twin does)
    coord, _ = make(impl)
    epochs = settled_group(coord, members=("a",))
    h = int(handles_of(coord, ["a"])[0])
    expected = slow_hb(coord, "g", "a", epochs["a"])
    hh = coord.consumer_heartbeat_handle
    assert hh(h, epochs["a"]) == expected
    assert hh(handle=h, member_epoch=epochs["a"]) == expected
    assert hh(h, member_epoch=epochs["a"]) == expected
    assert hh(h, epochs["a"] + 1) is None
    assert hh(-1, epochs["a"]) is None
    assert hh(h, -(1 << 31)) is None
    with pytest.raises(TypeError, match="handle must be an int"):
        hh(True, epochs["a"])
    with pytest.raises(ValueError, match="handle must fit in int64"):
        hh(1 << 63, epochs["a"])
    with pytest.raises(ValueError, match="member_epoch must fit in int32"):
        hh(h, -(1 << 31) - 1)
    with pytest.raises(TypeError):
        hh(h)


def _traced_peak(loop):
    """What `loop()` allocates at its peak, beyond what it started with (bytes), its
    second run (the first warms the interpreter's caches)."""
    import tracemalloc
    loop()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        loop()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE, reason="the native twin is not built")
def test_steady_heartbeats_allocate_nothing():
    # The steady heartbeat's answer is the member's cached one: by handle and by ids,
    # the native twin's calls allocate nothing, not even for a moment. Each loop's
    # traced peak is held to a loop of the same shape around a call that allocates
    # nothing (the loop's own iterator is all either allocates). Native only: the pure
    # twin's arithmetic allocates ints.
    import collections
    coord, _ = make("native")
    epochs = settled_group(coord, members=("a", "b", "c"))
    members = list(epochs)
    by_handle = [(int(h), epochs[m]) for h, m in zip(handles_of(coord, members), members)]
    by_ids = [("g", m, epochs[m]) for m in members]
    by_handle, by_ids = by_handle * 100, by_ids * 100
    hh, hb_ = coord.consumer_heartbeat_handle, coord.consumer_group_heartbeat
    last = collections.deque(maxlen=1)
    cb = last.append

    def handles(call=hh):
        for h, e in by_handle:
            cb(call(h, e))

    def ids():
        for g, m, e in by_ids:
            hb_(g, m, e, callback=cb)

    def ids_floor():
        for g, m, e in by_ids:
            cb(max(g, m))

    floor_handles, floor_ids = _traced_peak(lambda: handles(max)), _traced_peak(ids_floor)
    assert _traced_peak(handles) <= floor_handles
    assert last[0] is not None and last[0].error == E.NONE
    assert _traced_peak(ids) <= floor_ids
    assert last[0] is not None and last[0].error == E.NONE

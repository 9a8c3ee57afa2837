"""What-if's model of a consumer, on hand-made traces (issue 38, "a what-if that agrees
with reality"): a consumer that lost its member id in a pause and rejoined is one
consumer that paused, not a crash and a restart; max.poll.interval.ms is the rebalance
timeout its joins carried (its group's, for one whose join the trace does not hold),
never the session timeout; heartbeats keep the phase they had in the trace."""
import pyarrow.compute as pc
import pytest

pytest.importorskip("pyarrow")
from fastcoord.pipeline.trace import from_rows  # noqa: E402
from fastcoord.pipeline.whatif import WhatIfConfig, derive_behaviour, simulate_shard  # noqa: E402

J = dict(session_timeout_ms=6000, rebalance_timeout_ms=30_000, protocol_type="consumer",
         protocols=["range"])
H1, H2 = "127.0.0.1:9092-127.0.0.1:40001-1", "127.0.0.1:9092-127.0.0.1:40002-2"


def _row(t, member, event, client, conn=None, **kw):
    row = dict(time_ms=t, group_id="g", member_id=member, event=event, client_id=client, **kw)
    if conn is not None:
        row["connection"] = conn
    return row


def _consumer(rows, member, client, conn, joined, beats, synced=None):
    """A join at `joined` (its id from the answer), a sync, heartbeats at `beats`."""
    rows.append(_row(joined, member, "join", client, conn, **J))
    rows.append(_row(joined + 1 if synced is None else synced, member, "sync", client, conn))
    rows += [_row(t, member, "heartbeat", client, conn) for t in beats]


def _sim(trace, cfg, impl):
    return simulate_shard(trace, cfg, end_ms=pc.max(trace.column("time_ms")).as_py(), impl=impl)


def _removals(out):
    return [(r["slot"], r["time_ms"], r["kind"], r["latency_ms"])
            for r in out["removals"].to_pylist()]


def resumed_trace(connections: bool):
    """x (1 s heartbeats, 6 s session) is stopped from 10000 to 22000 and comes back
    with no member id: on its own connection, or (a trace without connections, as
    fastcoord's request log converts) with a heartbeat with no id first, the way
    librdkafka does after forgetting its id; then it joins again as x2. y heartbeats
    throughout."""
    h1, h2 = (H1, H2) if connections else (None, None)
    rows = []
    _consumer(rows, "x", "cx", h1, 0, range(4000, 10001, 1000))
    if not connections:
        rows.append(_row(22000, "", "heartbeat", "cx", h1))
    _consumer(rows, "x2", "cx", h1, 22000, range(23000, 40001, 1000))
    _consumer(rows, "y", "cy", h2, 0, range(4000, 40001, 1000))
    rows.sort(key=lambda r: r["time_ms"])
    return from_rows(rows)


@pytest.mark.parametrize("connections", [True, False])
def test_a_consumer_back_from_a_pause_with_no_id_is_one_consumer(connections):
    """Before, x was a crash at 10000 and x2 its restart at 22000."""
    x, y = derive_behaviour(resumed_trace(connections))["g"]
    assert (x.member, x.slot, x.end, x.pauses) == ("x", "x", "end", ((10000, 22000),))
    assert (y.member, y.end) == ("y", "end")


def test_a_restart_is_still_a_crash_and_a_restart():
    """A new process (another connection; or, without connections, a first join with
    no heartbeat without an id before it) is a crash and a restart, as before."""
    rows = []
    _consumer(rows, "x", "cx", H1, 0, range(4000, 10001, 1000))
    _consumer(rows, "x2", "cx", "127.0.0.1:9092-127.0.0.1:40009-9", 22000,
              range(23000, 40001, 1000))
    _consumer(rows, "y", "cy", H2, 0, range(4000, 40001, 1000))
    got = [(i.member, i.slot, i.end) for i in derive_behaviour(from_rows(rows))["g"]]
    assert got == [("x", "x", "crash"), ("y", "y", "end"), ("x2", "x", "end")]
    for r in rows:
        r.pop("connection")
    got = [(i.member, i.slot, i.end) for i in derive_behaviour(from_rows(rows))["g"]]
    assert got == [("x", "x", "crash"), ("y", "y", "end"), ("x2", "x", "end")]


def test_the_paused_consumer_is_falsely_expired_or_rides_it_out(impl):
    """Under its 6 s session the coordinator expires x while it is paused (a false
    expiration, not a crash detected), and x rejoins when it wakes; under 20 s it rides
    the 12 s pause out: nothing happens. Before: a crash detected, and at 20 s the
    simulated x never came back (its restart a new member, the crash a late expiry)."""
    trace = resumed_trace(connections=True)
    out = _sim(trace, WhatIfConfig(None), impl)
    g = out["groups"].to_pylist()[0]
    assert (g["false_expirations"], g["crashes"], g["crashes_detected"]) == (1, 0, 0)
    assert _removals(out) == [("x", 16000, "false", -1)]
    out = _sim(trace, WhatIfConfig(20_000), impl)
    g = out["groups"].to_pylist()[0]
    assert (g["false_expirations"], g["crashes"], g["incarnations"]) == (0, 0, 2)
    assert _removals(out) == []
    assert [r["cause"] for r in out["rebalances"].to_pylist()] == ["initial"]


def test_max_poll_interval_is_the_groups_rebalance_timeout(impl):
    """x joined before the trace began (no join of its own: its first row is a
    heartbeat); its group's joins carry 30 s rebalance timeouts. Its 12 s pause is past
    its 10 s session (a false expiration) but not past max.poll.interval.ms: no poll
    timeout, no LeaveGroup. Before, the session stood in for max.poll.interval.ms: a
    poll timeout and a leave were invented."""
    rows = [_row(t, "x", "heartbeat", "cx") for t in
            list(range(1000, 10001, 1000)) + list(range(22000, 40001, 1000))]
    _consumer(rows, "y", "cy", None, 0, range(4000, 40001, 1000))
    rows.sort(key=lambda r: r["time_ms"])
    trace = from_rows(rows)
    g = _sim(trace, WhatIfConfig(10_000), impl)["groups"].to_pylist()[0]
    assert (g["poll_timeouts"], g["leaves"], g["false_expirations"]) == (0, 0, 1)
    x = [i for i in derive_behaviour(trace)["g"] if i.member == "x"][0]
    assert (x.rebalance_timeout_ms, x.pauses) == (30_000, ((10000, 22000),))


def test_heartbeats_keep_the_trace_phase(impl):
    """The group forms at 6000 in the simulation; the trace's heartbeats run at
    3500 + 1000k. x pauses after its 9500 heartbeat, z dies after its own: the
    coordinator expires them one session (6 s) after 9500, and z's crash is detected
    6 s after its last contact. Before, the simulated heartbeats ran at 7000, 8000, 9000
    (one interval from the sync), half an interval early: 15000, 5.5 s."""
    rows = []
    _consumer(rows, "x", "cx", None, 0, list(range(3500, 9501, 1000))
              + list(range(30000, 40001, 1000)), synced=3000)
    _consumer(rows, "y", "cy", None, 0, range(3500, 40001, 1000), synced=3000)
    _consumer(rows, "z", "cz", None, 0, range(3500, 9501, 1000), synced=3000)
    rows.sort(key=lambda r: r["time_ms"])
    trace = from_rows(rows)
    out = _sim(trace, WhatIfConfig(None), impl)
    assert sorted(_removals(out)) == [("x", 15500, "false", -1), ("z", 15500, "crash", 6000)]
    assert {i.member: i.heartbeats[:2] for i in derive_behaviour(trace)["g"]} == \
        {"x": (3500, 4500), "y": (3500, 4500), "z": (3500, 4500)}


def test_heartbeats_follow_the_trace_through_jitter(impl):
    """z's heartbeats (median interval 1 s) come 10 ms early twice before it dies after
    the one at 8480: the simulated z heartbeats when the real one did, its crash is
    detected one session (6 s) after its last contact. On a grid of whole intervals
    from its first heartbeat, its last simulated heartbeat was at 7500 (8500 came after
    the crash): detected 5020 ms after it."""
    rows = []
    _consumer(rows, "y", "cy", None, 0, range(3500, 20001, 1000), synced=3000)
    _consumer(rows, "z", "cz", None, 0, [3500, 4500, 5500, 6500, 7490, 8480], synced=3000)
    rows.sort(key=lambda r: r["time_ms"])
    out = _sim(from_rows(rows), WhatIfConfig(None), impl)
    assert _removals(out) == [("z", 14480, "crash", 6000)]

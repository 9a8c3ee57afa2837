"""Hand-made traces with known answers (the golden replays: tests/pipeline/
test_pipeline_replay.py, test_pipeline_spark.py). Import after
`pytest.importorskip("pyarrow")`: a trace is an Arrow table."""
from fastcoord.pipeline.trace import from_rows

J = dict(session_timeout_ms=10_000, protocol_type="consumer", protocols=["range"])


def _start(rows, group, members, static=()):
    """Members join at 0 (dynamic ones twice: "" then their id) and sync at 3001."""
    for m in members:
        inst = f"i-{m}" if m in static else None
        rows.append(dict(time_ms=0, group_id=group, member_id=m, instance_id=inst, event="join", **J))
        if m not in static:
            rows.append(dict(time_ms=0, group_id=group, member_id=m, event="join", **J))
    for m in members:
        rows.append(dict(time_ms=3001, group_id=group, member_id=m,
                         instance_id=f"i-{m}" if m in static else None, event="sync"))


def _hb(rows, group, member, times, inst=None):
    rows += [dict(time_ms=t, group_id=group, member_id=member, instance_id=inst,
                  event="heartbeat") for t in times]


def crash_trace():
    rows = []
    _start(rows, "g", "ab")
    _hb(rows, "g", "a", range(6000, 21001, 3000))
    _hb(rows, "g", "b", range(6000, 12001, 3000))       # b crashes after 12000
    for m in "a":                                          # a rejoins on REBALANCE_IN_PROGRESS
        rows.append(dict(time_ms=24000, group_id="g", member_id=m, event="join", **J))
        rows.append(dict(time_ms=24001, group_id="g", member_id=m, event="sync"))
    _hb(rows, "g", "a", range(27000, 45001, 3000))
    return from_rows(rows)


def leave_trace():
    rows = []
    _start(rows, "g", "ab")
    _hb(rows, "g", "a", range(6000, 30001, 3000))
    _hb(rows, "g", "b", range(6000, 9001, 3000))
    rows.append(dict(time_ms=10000, group_id="g", member_id="b", event="leave"))
    rows.append(dict(time_ms=12000, group_id="g", member_id="a", event="join", **J))
    rows.append(dict(time_ms=12001, group_id="g", member_id="a", event="sync"))
    return from_rows(rows)


def _static_restart_rows():
    rows = []
    _start(rows, "g", "ab", static="b")
    _hb(rows, "g", "a", range(6000, 45001, 3000))
    _hb(rows, "g", "b", range(6000, 15001, 3000), inst="i-b")
    # b restarts as a new incarnation b2 with the same instance id, 5 s later: no rebalance
    rows.append(dict(time_ms=20000, group_id="g", member_id="b2", instance_id="i-b", event="join", **J))
    rows.append(dict(time_ms=20001, group_id="g", member_id="b2", instance_id="i-b", event="sync"))
    _hb(rows, "g", "b2", range(23000, 45001, 3000), inst="i-b")
    return rows


def static_restart_trace():
    return from_rows(_static_restart_rows())


def static_rejoin_while_parked_trace():
    """b (static) joins at 0 and again at 1000 while its first join still waits out the
    initial delay (a trace can hold what no client sends: two joins in flight), then
    syncs and heartbeats; a is dynamic and steady."""
    rows = []
    _start(rows, "g", "ab", static="b")
    rows.append(dict(time_ms=1000, group_id="g", member_id="b", instance_id="i-b",
                     event="join", **J))
    _hb(rows, "g", "a", range(6000, 45001, 3000))
    _hb(rows, "g", "b", range(6000, 45001, 3000), inst="i-b")
    return from_rows(rows)


def static_replaced_heartbeats_trace(old_instance="i-b"):
    """static_restart_trace, but the old incarnation b goes on heartbeating after b2 took
    its instance id (a process that was not stopped), with `old_instance` on those
    heartbeats (None: a request that names no instance id)."""
    rows = _static_restart_rows()
    _hb(rows, "g", "b", range(21000, 27001, 3000), inst=old_instance)
    return from_rows(rows)

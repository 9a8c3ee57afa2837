"""fastcoord's own request log carries what a replay needs (issue 38): a real run's log,
converted (`from_fastcoord_log`) and replayed (`replay_local`), gets from the replay
every answer the server gave.

The run: confluent-kafka (librdkafka) or kafka-python consumers (whose LeaveGroup is
v4: members named in a list) in their own processes against
`fastcoord serve` with its request log on: static members (`group.instance.id`) with a
6 s session (not the converter's old 10 s default), one replaced by a new process under
the same instance id while the old one still runs (its heartbeats fenced,
FENCED_INSTANCE_ID, until it is stopped), a dynamic member joining and leaving, a
static one killed and
expired by its session timeout; beside them a dynamic group with 20 s sessions, one of
whose members is killed and expires. Every wait is bounded.

Where an answer could honestly go either way (a request racing an expiry within the
server's timer tick or store write), the run keeps the clients clear of it: see
FREEZE_BEFORE_S.
"""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from fastcoord.pipeline.adapters import from_fastcoord_log
from fastcoord.pipeline.replay import replay_local
from helpers.server import ClientProc, ServerProc, assert_covered, stop_all

pytestmark = pytest.mark.clients

TOPIC = "orders"
PARTITIONS = [(TOPIC, p) for p in range(4)]
SESSION_MS = 6000
LONG_SESSION_MS = 20_000
KAFKA_DEFAULTS = ("--group-min-session-timeout-ms", "6000",
                  "--group-initial-rebalance-delay-ms", "3000")
BOUND = 20.0            # seconds for a rebalance on a loaded 2-core machine


def _differences(trace, responses) -> tuple:
    """(the replay's answers that differ from the server's (the trace's `error`), the
    events of the requests not compared): every request the replay answered and whose
    answer the log kept is compared."""
    source = {r["seq"]: r for r in trace.to_pylist()}
    wrong = []
    skipped = []
    for r in responses.to_pylist():
        row = source[r["seq"]]
        if r["answered_ms"] < 0 or row["error"] is None:
            skipped.append(row["event"])
            continue
        if r["error"] != row["error"]:
            wrong.append((row["event"], row["member_id"], row["instance_id"], row["error"],
                          r["error"], row["time_ms"]))
    return wrong, skipped


# Around a killed member's session deadline its group's other members are frozen
# (SIGSTOP, then SIGCONT): the server fires expirations on its tick and starts a
# deadline once its store has written the sync before it, the replay at the exact
# millisecond, so a heartbeat landing within those few milliseconds of an expiry could
# be answered either way. From this long before the deadline (the kill time plus the
# session: the last contact was at most a heartbeat interval earlier) to this long
# after it, none does.
FREEZE_BEFORE_S, FREEZE_AFTER_S = 1.0, 0.5


def _freezes(clients, deadline: float) -> list:
    """The (monotonic time, action) steps freezing `clients` around `deadline`."""
    def signal_all(sig):
        return lambda: [os.kill(c.proc.pid, sig) for c in clients if c.proc.poll() is None]
    return [(deadline - FREEZE_BEFORE_S, signal_all(signal.SIGSTOP)),
            (deadline + FREEZE_AFTER_S, signal_all(signal.SIGCONT))]


def _wait_fenced(server, timeout: float) -> int:
    """How many heartbeats the server has answered FENCED_INSTANCE_ID (82), once it has
    answered one (its request log is written out every second); failing after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        fenced = 0
        if server.request_log_path.exists():
            for line in server.request_log_path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:          # a line still being written
                    continue
                fenced += rec["api"] == "Heartbeat" and rec["error"] == 82
        if fenced:
            return fenced
        assert time.monotonic() < deadline, "no heartbeat of the replaced member was fenced"
        time.sleep(0.2)


def _run(steps) -> None:
    """Each step at its time, in order; failing if one comes too late to keep its
    frozen members clear of the deadline it guards (the machine was stalled)."""
    for at, action in sorted(steps, key=lambda step: step[0]):
        late = time.monotonic() - at
        assert late < FREEZE_BEFORE_S / 2, f"a freeze step ran {late:.2f}s late"
        if late < 0:
            time.sleep(-late)
        action()


@pytest.mark.parametrize("lib", ["confluent", "kafka-python"])
def test_a_real_static_run_replays_with_the_answers_the_server_gave(tmp_path, lib):
    # the coordinator settings a replay runs with (Kafka's defaults), where the harness
    # would shorten them
    server = ServerProc(tmp_path / "server.log", *KAFKA_DEFAULTS, topics=[f"{TOPIC}:4"])
    clients = []

    def spawn(name: str, instance=None, group="g", session_ms=SESSION_MS) -> ClientProc:
        options = dict(session_ms=session_ms, heartbeat_ms=300)
        if instance is not None:
            options["instance_id"] = instance
        client = ClientProc(lib, server.bootstrap, group, TOPIC, name, tmp_path, **options)
        clients.append(client)
        return client

    try:
        # beside it, a dynamic group with 20 s sessions, one of whose members dies
        x, y = spawn("x", group="g20", session_ms=LONG_SESSION_MS), \
            spawn("y", group="g20", session_ms=LONG_SESSION_MS)
        a, b, c = spawn("a", "inst-a"), spawn("b", "inst-b"), spawn("c", "inst-c")
        assert_covered([x, y], PARTITIONS, BOUND, server=server)
        assert_covered([a, b, c], PARTITIONS, BOUND, all_busy=False, server=server)
        a.commit({tp: 7 for tp in a.assignment})
        # a static member's new process takes its instance id while the old one still
        # runs: the old one's heartbeats are fenced until it is stopped
        b2 = spawn("b2", "inst-b")
        assert_covered([a, b2, c], PARTITIONS, BOUND, all_busy=False, server=server)
        _wait_fenced(server, BOUND)
        b.kill()
        # a dynamic member joins, then leaves
        d = spawn("d")
        assert_covered([a, b2, c, d], PARTITIONS, BOUND, server=server)
        d.close()
        assert_covered([a, b2, c], PARTITIONS, BOUND, all_busy=False, server=server)
        # a static member and a dynamic one die: only their sessions (6 s, 20 s) tell
        c.kill()
        x.kill()
        killed = time.monotonic()
        try:
            _run(_freezes([a, b2], killed + SESSION_MS / 1000)
                 + _freezes([y], killed + LONG_SESSION_MS / 1000))
        finally:
            for client in (a, b2, y):
                if client.proc.poll() is None:
                    os.kill(client.proc.pid, signal.SIGCONT)
        assert_covered([a, b2], PARTITIONS, BOUND, server=server)
        assert_covered([y], PARTITIONS, BOUND, server=server)
        time.sleep(1.0)
    finally:
        stop_all(clients, server)

    trace, stats = from_fastcoord_log(str(server.request_log_path))
    assert stats.malformed == 0, stats.examples
    events = trace.column("event").to_pylist()
    assert {"join", "sync", "heartbeat", "leave", "commit"} <= set(events)
    # the old incarnation's fenced heartbeats are in the trace, with the instance id they
    # named, and compared below like every other answer
    fenced = [r for r in trace.to_pylist() if r["event"] == "heartbeat" and r["error"] == 82]
    assert fenced and {r["instance_id"] for r in fenced} == {"inst-b"}
    for impl in ("native", "pure"):
        out = replay_local(trace, impl=impl)
        wrong, skipped = _differences(trace, out["responses"])
        assert not wrong, f"{impl}: {len(wrong)} of {trace.num_rows} answers differ: {wrong[:20]}"
        # none but a join or sync still parked when the log ends
        assert set(skipped) <= {"join", "sync"} and len(skipped) <= 4, skipped
    # (what made them so: static members and their sessions, from the log)
    joins = [r for r in trace.to_pylist() if r["event"] == "join"]
    assert {r["instance_id"] for r in joins} == {"inst-a", "inst-b", "inst-c", None}
    assert {r["session_timeout_ms"] for r in joins} == {SESSION_MS, LONG_SESSION_MS}
    # every commit's answer compared: the log keeps it
    assert None not in {r["error"] for r in trace.to_pylist() if r["event"] == "commit"}
    # c's and x's sessions ran out in the replay too, once each
    expired = out["expirations"].to_pylist()
    assert sorted((e["group_id"], e["instance_id"], e["reason"]) for e in expired) == [
        ("g", "inst-c", "session"), ("g20", None, "session")]

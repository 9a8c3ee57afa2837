"""whatif --protocol: the trace's consumers under classic eager, classic cooperative
(KIP-429) and consumer-protocol (KIP-848) rebalancing, owning partitions. Small cases
computed by hand, the order of the protocols on a generated trace with a rolling
restart and crashes derived from how each protocol moves partitions, native == pure,
the command and the report."""
import json
import os

import pytest

pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from fastcoord.cli import main  # noqa: E402
from fastcoord.pipeline.gen import generate  # noqa: E402
from fastcoord.pipeline.protocols import (  # noqa: E402
    PROTOCOLS, assignment, cooperative_assignment, formation_end, idle_intervals,
    parse_protocols, protocol_whatif)
from fastcoord.pipeline.trace import from_rows, write_trace  # noqa: E402
from fastcoord.pipeline.whatif import WhatIfConfig, derive_behaviour  # noqa: E402

J = dict(session_timeout_ms=10_000, rebalance_timeout_ms=300_000, protocol_type="consumer",
         protocols=["range"])
HB3 = WhatIfConfig(10_000, "off", heartbeat_interval_ms=3000)


def _member(rows, m, joined, heartbeats, leave=None):
    rows.append(dict(time_ms=joined, group_id="g", member_id=m, event="join",
                     client_id=f"client-{m}", **J))
    rows += [dict(time_ms=t, group_id="g", member_id=m, event="heartbeat",
                  client_id=f"client-{m}") for t in heartbeats]
    if leave is not None:
        rows.append(dict(time_ms=leave, group_id="g", member_id=m, event="leave",
                         client_id=f"client-{m}"))


def leave_trace():
    """a and b from 0 (heartbeats every 3 s); a leaves at 30000; b stays to 60000."""
    rows = []
    _member(rows, "a", 0, range(6000, 30001, 3000), leave=30000)
    _member(rows, "b", 0, range(6000, 60001, 3000))
    return from_rows(rows)


def scale_out_trace():
    """a and b from 0; c joins at 31000 (a new member: partitions must move to it)."""
    rows = []
    _member(rows, "a", 0, range(6000, 60001, 3000))
    _member(rows, "b", 0, range(6000, 60001, 3000))
    _member(rows, "c", 31000, range(34000, 60001, 3000))
    return from_rows(rows)


def _by_protocol(tables):
    return {r["protocol"]: (r["window_start_ms"], r["window_end_ms"], r["unavailable_ms"],
                            r["rebalances"], r["members_paused"], r["partitions_revoked"])
            for r in tables["protocol_groups"].to_pylist()}


def test_one_member_leaves(impl):
    """2 members, 4 partitions (2 each), a leaves at 30000. The classic group formed at
    6000 (two initial delays of 3 s) and its members heartbeat at 9000, 12000, ...
    (every 3 s from their sync): b learns of the rebalance at 33000. Eager: b revokes
    its 2 at its rejoin and gets all 4 back at once (the round has one member): a's 2
    were unowned 30000..33000 (2 x 3 s), 4 revoked, b paused. Cooperative: b keeps its
    2 and takes a's 2 at 33000: the same 6 s, 2 revoked (a's), nobody paused. Consumer:
    a's 2 go to b at b's next heartbeat, 5 s (Kafka 4's default interval) after a's
    last at 30000: 10 s; with a 3 s interval, 6 s. The window: 6000 (the latest first
    full ownership) to 60000 + 10 s."""
    out = _by_protocol(protocol_whatif(leave_trace(), [WhatIfConfig(10_000, "off")],
                                       partitions=4, impl=impl))
    assert out == {"classic-eager": (6000, 70000, 6000, 1, 1, 4),
                   "classic-cooperative": (6000, 70000, 6000, 1, 0, 2),
                   "consumer": (6000, 70000, 10000, 1, 0, 2)}
    out = _by_protocol(protocol_whatif(leave_trace(), [HB3], ["consumer"], partitions=4,
                                       impl=impl))
    # (the window is the consumer run's own: a had all 4 from 0, b took 2 at 3000, the
    # group's first steady assignment)
    assert out == {"consumer": (3000, 70000, 6000, 1, 0, 2)}


def test_a_group_with_no_running_process_is_not_unavailable(impl):
    """Once every process of a group has stopped, its partitions have nobody to hold
    them under any protocol: that time is not partition-unavailable time. It was: the
    Kafka sample (both consumers stop at its end) read 71% unavailable for every
    protocol, the tail up to the trace's end plus the session timeout. Here a leaves at
    30000 and b at 45000, the trace's end: the figures are the one-member-leaves ones
    (test_one_member_leaves), without 4 partitions x 10 s after b's leave."""
    rows = []
    _member(rows, "a", 0, range(6000, 30001, 3000), leave=30000)
    _member(rows, "b", 0, range(6000, 45000, 3000), leave=45000)
    out = _by_protocol(protocol_whatif(from_rows(rows), [WhatIfConfig(10_000, "off")],
                                       partitions=4, impl=impl))
    assert {p: (v[0], v[1], v[2]) for p, v in out.items()} == {
        "classic-eager": (6000, 55000, 6000), "classic-cooperative": (6000, 55000, 6000),
        "consumer": (6000, 55000, 10000)}


def test_the_window_leaves_out_every_protocols_formation(impl):
    """a starts at 0 and b at 2500, within the initial rebalance delay: the group's
    formation. Classic: one generation of both, steady at 6000. Consumer (5 s
    heartbeats): a gets all 4 at 0, revokes 2 at its heartbeat at 5000, and b takes them
    at its own at 7500. The consumer run's first steady assignment was a alone at 0, so
    the window opened at classic's 6000 and counted 2 x 1.5 s of the consumer's
    formation as unavailable. A steady assignment now ends a formation only once its
    processes have all started: the window opens at 7500, nothing unavailable."""
    rows = []
    _member(rows, "a", 0, range(6000, 60001, 3000))
    _member(rows, "b", 2500, range(8500, 60001, 3000))
    out = _by_protocol(protocol_whatif(from_rows(rows), [WhatIfConfig(10_000, "off")],
                                       partitions=4, impl=impl))
    assert out == {p: (7500, 70000, 0, 0, 0, 0) for p in PROTOCOLS}


def test_formation_end():
    from types import SimpleNamespace as NS
    assert formation_end([NS(start_ms=t) for t in (2500, 0, 5400, 9000)]) == 5400
    assert formation_end([NS(start_ms=0)]) == 0 and formation_end([]) == 0


def test_idle_intervals():
    from types import SimpleNamespace as NS
    incs = [NS(start_ms=0, stop_ms=100), NS(start_ms=50, stop_ms=200),
            NS(start_ms=300, stop_ms=400), NS(start_ms=350, stop_ms=-1)]
    assert idle_intervals(incs, 1000) == [(200, 300)]
    assert idle_intervals(incs[:3], 1000) == [(200, 300), (400, 1000)]
    assert idle_intervals([NS(start_ms=0, stop_ms=2000)], 1000) == []
    assert idle_intervals([], 1000) == []


def test_a_member_joins(impl):
    """a and b own 3 of 6 partitions each; c joins at 31000. Eager: a and b learn at
    33000, revoke all 6, the round completes at once and they take 2 each at once: no
    gap (zero latency), 6 revoked, both paused. Cooperative: the first round keeps 2
    with each of a and b and withholds the 2 that move to c; a and b revoke one each at
    33000 and rejoin; c, synced at 33000, learns of the follow-up at its heartbeat at
    34000 (its heartbeats keep the trace's phase: 34000, 37000, ...), and takes them
    then: 2 x 1 s, two rebalances. Consumer (3 s heartbeats, the
    grid from each one's join): a and b revoke one each at their heartbeat at 33000 and
    c, whose grid runs 31000, 34000, takes them at 34000: 2 x 1 s."""
    out = _by_protocol(protocol_whatif(scale_out_trace(), [HB3], partitions=6, impl=impl))
    assert out == {"classic-eager": (6000, 70000, 0, 1, 2, 6),
                   "classic-cooperative": (6000, 70000, 2000, 2, 2, 2),
                   "consumer": (6000, 70000, 2000, 1, 2, 2)}
    # Each consumer acting on an answer 100 ms after it: eager's 6 partitions wait for
    # the join answer's and the sync answer's reaction (6 x 200 ms); cooperative's 2 wait
    # from the revocation (33200, its sync answer handled) to c's sync answer of the
    # follow-up (c's heartbeat at 34000, in its trace phase, then two reactions: 34200).
    out = _by_protocol(protocol_whatif(scale_out_trace(), [HB3],
                                       ["classic-eager", "classic-cooperative"], partitions=6,
                                       impl=impl, reaction_ms=100))
    assert (out["classic-eager"][2:], out["classic-cooperative"][2:]) == \
        ((1200, 1, 2, 6), (2000, 2, 2, 2))


def test_a_revocation_belongs_to_the_rebalance_of_its_sync(impl):
    """test_a_member_joins's cooperative run: a and b revoke one partition each at their
    SyncGroup answers of the rebalance c's join started (at 33000, or 33200 with a
    100 ms reaction). a's rejoin opens the follow-up first, and b's revocation was filed
    under the follow-up: "members paused" per rebalance counted a in one and b in the
    other. Both belong to the rebalance whose assignment they carried out."""
    from fastcoord.pipeline.protocols import simulate
    behaviour = derive_behaviour(scale_out_trace())
    for reaction in (0, 100):
        ledger = simulate("classic-cooperative", behaviour, HB3, partitions=6, end_ms=60000,
                          horizon=70000, impl=impl, reaction_ms=reaction)["g"]
        first = [k for k, start in ledger.rebalances.items() if start == 31000 + reaction]
        assert [(t, m, n, key) for t, m, n, _, key in ledger.revocations] == [
            (33000 + 2 * reaction, m, 1, first[0]) for m in ("a", "b")]


def test_a_follower_revokes_for_a_new_member(impl):
    """As test_a_member_joins with 4 partitions: a (the leader) and b own 2 each; c
    joins at 31000. Cooperative: the first round (a and b rejoin at their heartbeats at
    33000) keeps a's 2 and one of b's and withholds b's other one for c. b revokes it
    at 33000 and rejoins at once; its JoinGroup reports one partition fewer, so the
    coordinator starts the follow-up rebalance (a follower rejoining with unchanged
    metadata would only get the current generation back). c learns of it at its
    heartbeat at 34000, a at 36000, when the round completes and c takes the partition:
    1 x 3 s, two rebalances, b paused. It was 1 x 37 s and one rebalance: the
    simulated JoinGroup carried no owned partitions, so b's rejoin changed nothing and
    the partition stayed unowned to the end."""
    out = _by_protocol(protocol_whatif(scale_out_trace(), [HB3], ["classic-cooperative"],
                                       partitions=4, impl=impl))
    assert out == {"classic-cooperative": (6000, 70000, 3000, 2, 1, 1)}


def test_assignments():
    assert assignment("range", ["b", "a", "c"], 7) == {"b": [3, 4], "a": [0, 1, 2], "c": [5, 6]}
    # b owns 3..5 and a 0..2; c is new: one partition of each moves to c, withheld now
    got = cooperative_assignment({"a": [0, 1, 2], "b": [3, 4, 5], "c": []}, 6)
    assert got["c"] == [] and len(got["a"]) == len(got["b"]) == 2
    assert set(got["a"]) < {0, 1, 2} and set(got["b"]) < {3, 4, 5}
    # a partition claimed twice is the first member id's; nothing owned moves at once
    got = cooperative_assignment({"a": [0, 1], "b": [1, 2, 3]}, 4)
    assert 1 not in got["b"] and sorted(got["a"] + got["b"]) == [0, 1, 2, 3]


@pytest.fixture(scope="module")
def rolling():
    """Four groups of 4-5 dynamic consumers, 5 minutes: a rolling deploy in every group
    (each member leaves and a new one joins 5-20 s later), two crashes, each consumer's
    heartbeat interval its own (3 s +-20%, so their phases drift apart)."""
    trace = generate(groups=4, members=8, duration_s=300, seed=1, static_fraction=0.0,
                     deploy_prob=1.0, crash_per_hour=2, leave_per_hour=0, gc_prob=0.0)
    ends = [i.end for incs in derive_behaviour(trace).values() for i in incs]
    assert ends.count("crash") == 2 and ends.count("leave") >= 16
    return trace


def _summary(tables):
    return {r["protocol"]: r for r in tables["protocol_summary"].to_pylist()}


def test_order_on_a_rolling_restart_with_crashes(rolling):
    """Each consumer with its own heartbeat interval, zero latency. Eager revokes every
    partition of every member at every rebalance, and its members learn of a rebalance
    at different instants: all but the last wait, revoked, for the last; a leaving or
    crashed member's partitions wait in every protocol. So eager loses the most
    partition-time, revokes the most and pauses the most members; cooperative pays
    follow-up rebalances (more of them than eager) to move partitions to a new member."""
    s = _summary(protocol_whatif(rolling, [WhatIfConfig(10_000, "off")], partitions=24))
    eager, coop, consumer = (s[p] for p in PROTOCOLS)
    assert eager["partition_unavailable_s"] > max(coop["partition_unavailable_s"],
                                                  consumer["partition_unavailable_s"])
    assert eager["partitions_revoked"] > 3 * max(coop["partitions_revoked"],
                                                 consumer["partitions_revoked"])
    assert eager["members_paused_per_rebalance"] > 2 * max(
        coop["members_paused_per_rebalance"], consumer["members_paused_per_rebalance"])
    assert coop["rebalances"] > eager["rebalances"]
    assert len({(r["window_s"], r["partitions"]) for r in s.values()}) == 1


def test_order_with_one_heartbeat_interval_and_a_reaction(rolling):
    """Every consumer heartbeating every 3 s and acting on an answer 500 ms after it.
    Eager: each rebalance stops every staying member's partitions for at least a join
    and a sync reaction (2 x 500 ms x about 21 of 24 partitions). Cooperative: only
    moved partitions stop, but those moving to a new member wait for the follow-up
    rebalance, which waits for every member's next heartbeat (up to 3 s). Consumer:
    moved partitions wait for their new owner's next heartbeat alone (on average half an
    interval) plus a reaction. Eager > cooperative > consumer."""
    s = _summary(protocol_whatif(rolling, [HB3], partitions=24, reaction_ms=500))
    eager, coop, consumer = (s[p]["partition_unavailable_s"] for p in PROTOCOLS)
    assert eager > coop > consumer


def test_native_equals_pure(rolling):
    import fastcoord
    if not fastcoord.NATIVE_AVAILABLE:
        pytest.skip("native core not built")
    configs = [WhatIfConfig(10_000, "off"), WhatIfConfig(30_000, "on")]
    native = protocol_whatif(rolling, configs, partitions=12, impl="native", reaction_ms=100)
    pure = protocol_whatif(rolling, configs, partitions=12, impl="pure", reaction_ms=100)
    for name in native:
        assert native[name].equals(pure[name]), name
    assert native["protocol_summary"].num_rows == 6


def test_parse_protocols():
    assert parse_protocols("consumer, classic-eager") == ["consumer", "classic-eager"]
    for bad in ("eager", "consumer,consumer", ""):
        with pytest.raises(ValueError, match="expected a comma list of classic-eager"):
            parse_protocols(bad)


# -- the command and the report -------------------------------------------------------------------

@pytest.fixture
def trace_path(tmp_path):
    path = str(tmp_path / "t.parquet")
    write_trace(leave_trace(), path)
    return path


def test_cli_protocol(tmp_path, trace_path, capsys):
    """The grid times the protocols. With static on, a's clean stop sends no LeaveGroup
    (classic) or leaves its place with epoch -2 (consumer): its 2 partitions wait for
    its session to expire at 40000, then for b's next heartbeat (42000 classic, 40000
    consumer): 2 x 12 s and 2 x 10 s."""
    out = str(tmp_path / "w")
    assert main(["whatif", trace_path, "--out", out, "--master", "none", "--impl", "pure",
                 "--session-timeout", "10s", "--static", "off,on", "--protocol",
                 "classic-eager,consumer", "--partitions", "4", "--no-baseline"]) == 0
    cap = capsys.readouterr()
    assert "whatif (configuration x protocol x shard)" in cap.err
    lines = [ln for ln in cap.out.splitlines() if "partition-unavailable" in ln]
    assert len(lines) == 4 and lines[0].split()[0] == "classic-eager"
    with open(os.path.join(out, "summary.json")) as f:
        doc = json.load(f)["protocols"]
    assert (doc["names"], doc["partitions"], doc["reaction_ms"]) == \
        (["classic-eager", "consumer"], 4, 0)
    assert [(r["protocol"], r["label"], r["partition_unavailable_s"]) for r in doc["summary"]] \
        == [("classic-eager", "session=10s static=off", 6.0),
            ("consumer", "session=10s static=off", 10.0),
            ("classic-eager", "session=10s static=on", 24.0),
            ("consumer", "session=10s static=on", 20.0)]
    assert pq.read_table(os.path.join(out, "protocol_groups.parquet")).num_rows == 4
    # the report shows them; a later run without --protocol drops them
    assert main(["report", out]) == 0
    with open(os.path.join(out, "report.html")) as f:
        page = f.read()
    assert "Rebalance protocols" in page and "classic-eager" in page
    assert "with 4 partitions a group and a reaction of 0 ms" in page
    assert main(["whatif", trace_path, "--out", out, "--master", "none", "--impl", "pure",
                 "--session-timeout", "10s", "--static", "off"]) == 0
    assert not os.path.exists(os.path.join(out, "protocol_summary.parquet"))
    assert main(["report", out]) == 0
    with open(os.path.join(out, "report.html")) as f:
        assert "Rebalance protocols" not in f.read()


@pytest.mark.parametrize("argv, message", [
    (["--protocol", "eager"], "--protocol: expected a comma list of classic-eager, "
                              "classic-cooperative, consumer (each once), got 'eager'"),
    (["--protocol", "consumer,consumer"], "(each once), got 'consumer,consumer'"),
    (["--protocol", "consumer", "--partitions", "0"], "--partitions must be at least 1"),
    (["--partitions", "8"], "--partitions and --reaction go with --protocol"),
])
def test_cli_protocol_errors(tmp_path, trace_path, capsys, argv, message):
    out = tmp_path / "w"
    assert main(["whatif", trace_path, "--out", str(out), "--master", "none"] + argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fastcoord whatif: ")
    assert message in err
    assert not (out / "summary.json").exists()


def test_cli_protocol_with_spark(spark, tmp_path, trace_path):
    """On Spark the grid runs as tasks and the protocol comparison in this process (it
    reads the trace itself): the same rows as with --master none."""
    docs = []
    for master in ("local[2]", "none"):
        out = str(tmp_path / master)
        assert main(["whatif", trace_path, "--out", out, "--master", master, "--impl", "pure",
                     "--session-timeout", "10s", "--static", "off", "--protocol",
                     "classic-cooperative,consumer", "--partitions", "4"]) == 0
        with open(os.path.join(out, "summary.json")) as f:
            docs.append(json.load(f)["protocols"])
    assert docs[0] == docs[1]
    # (the baseline, the trace's own 10 s dynamic members, is the grid's second row)
    assert [r["partition_unavailable_s"] for r in docs[0]["summary"]] == [6.0, 10.0] * 2
    # the shared session was running before: the command must not have stopped it
    assert spark.range(3).count() == 3


def test_cli_reaction_of_zero_is_the_default_said_out_loud(tmp_path, trace_path, capsys):
    """--reaction's help gives 0 as its default, but '--reaction 0ms' was refused (a
    duration must be positive): comparing 0 with 100ms took two runs. 0 now reads as
    the default; a negative or unitless one is still refused."""
    out = str(tmp_path / "w")
    assert main(["whatif", trace_path, "--out", out, "--master", "none", "--impl", "pure",
                 "--session-timeout", "10s", "--static", "off", "--protocol", "consumer",
                 "--reaction", "0ms", "--no-baseline"]) == 0
    with open(os.path.join(out, "summary.json")) as f:
        assert json.load(f)["protocols"]["reaction_ms"] == 0
    for bad in ("0", "-1ms"):
        with pytest.raises(SystemExit):
            main(["whatif", trace_path, "--out", out, "--master", "none", "--protocol",
                  "consumer", f"--reaction={bad}"])

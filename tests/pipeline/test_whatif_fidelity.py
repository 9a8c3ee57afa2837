"""What-if against reality (issue 38, "a what-if that agrees with reality").

Real confluent-kafka (librdkafka) consumers, two groups of three (1 s heartbeats,
max.poll.interval.ms 30 s), go through the same scheduled faults at two session
timeouts, 6 s and 10 s: SIGSTOP pauses of 4, 8 and 12 s, a SIGKILL and a restart of
that consumer 2 s later, a clean close. The what-if runs on the 6 s run's trace (its
request log, converted) and predicts both settings (and so does it on the 10 s run's:
a simulation costs nothing beside the runs); reality is each run's own server
side: the replay of that run's trace (its rebalances, and its expirations: of the killed
member a crash detected, of any other a false expiration). Per setting and group the
prediction is within one of reality in rebalances (the forming one not counted) and in
false expirations, and the crash is detected within one heartbeat interval of when it
really was (from the kill).

The scenario is data (helpers.fidelity.TEST, beside the issue's own, larger one that
benchmarks/whatif_fidelity.py runs); the machinery is helpers/fidelity.py.
"""
from __future__ import annotations

import pytest

from helpers.fidelity import TEST, compare, describe, interval, judge, real_run


@pytest.mark.clients
@pytest.mark.slow
def test_the_whatif_predicts_real_runs_at_two_session_timeouts(tmp_path):
    sc = TEST
    runs = {s: real_run(sc, s, tmp_path / f"session-{s}") for s in sc.sessions}
    figures = compare(sc, runs)
    report = describe(figures)
    print(report)
    for (_, session_ms), (real, predicted) in figures.items():
        for gid in sc.groups:
            # rebalances and false expirations within one of reality; the killed
            # consumer detected once, in both, within a heartbeat interval (the what-if
            # times it from its last contact: the kill fell somewhere in the interval
            # after it)
            met = judge(sc, gid, real[gid], predicted[gid], interval(sc, runs[session_ms], gid))
            assert all(met.values()), (session_ms, gid, met, report)


@pytest.mark.parametrize("real, predicted, met", [
    ((3, 1, [5400]), (3, 1, [6000]), True),
    ((3, 1, [5400]), (4, 2, [6400]), True),         # each at its bound
    ((3, 1, [5400]), (5, 1, [6000]), False),        # rebalances two off
    ((3, 1, [5400]), (3, 3, [6000]), False),        # false expirations two off
    ((3, 1, [5400]), (3, 1, [6401]), False),        # detected more than an interval late
    ((3, 1, [5400]), (3, 1, []), False),            # the crash not detected
])
def test_the_bounds_the_comparison_holds_the_whatif_to(real, predicted, met):
    # (no clients: the judgement the real-run test above asserts, on figures made up)
    got = judge(TEST, "g1", real, predicted, 1000)
    assert all(got.values()) is met, got

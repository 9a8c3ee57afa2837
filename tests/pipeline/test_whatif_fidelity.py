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

from helpers.fidelity import TEST, compare, describe, interval, real_run

pytestmark = [pytest.mark.clients, pytest.mark.slow]


def test_the_whatif_predicts_real_runs_at_two_session_timeouts(tmp_path):
    sc = TEST
    runs = {s: real_run(sc, s, tmp_path / f"session-{s}") for s in sc.sessions}
    figures = compare(sc, runs)
    report = describe(figures)
    print(report)
    for (_, session_ms), (real, predicted) in figures.items():
        for gid in sc.groups:
            (r_reb, r_false, r_detect), (p_reb, p_false, p_detect) = real[gid], predicted[gid]
            assert abs(p_reb - r_reb) <= 1, (session_ms, gid, report)
            assert abs(p_false - r_false) <= 1, (session_ms, gid, report)
            # the killed consumer is detected once, in both, within a heartbeat interval
            # (the what-if times it from its last contact: the kill fell somewhere in
            # the interval after it)
            assert len(p_detect) == len(r_detect) == sc.kills_in(gid), report
            for p, r in zip(p_detect, r_detect):
                assert abs(p - r) <= interval(sc, runs[session_ms], gid), (session_ms, gid, report)

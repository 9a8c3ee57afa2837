"""What-if against reality (issue 38): real consumers through scheduled faults at a few
session timeouts, against the what-if's prediction of each from one run's trace.

    .venv/bin/python benchmarks/whatif_fidelity.py [--scenario issue|test]
                                                   [--out bench_results/whatif-fidelity.md]
                                                   [--work DIR]

--scenario issue (the default): the issue's check: 3 groups of 4 confluent-kafka
consumers (heartbeat 1 s, max.poll.interval.ms 30 s), SIGSTOP pauses of 4, 7, 12 and
15 s, a SIGKILL and a restart of that consumer, a clean close, at session timeouts of
6, 10 and 20 s, the what-if reading the 10 s run's trace (about 3 minutes).
--scenario test: the reduced one tests/pipeline/test_whatif_fidelity.py runs (2 groups
of 3, sessions 6 and 10 s, the what-if on the 6 s run's trace). The scenarios, and what
the machinery does, are in tests/helpers/fidelity.py.

Prints, and writes to --out if given, a Markdown table per trace the what-if reads (the
scenario's first, then each other run's): per setting and group, real against predicted
rebalances after the group formed, false expirations and crash detection latency (from
the kill; the what-if times it from the consumer's last contact), each with whether it
is within its bound (rebalances and false expirations within one of reality, detection
within one heartbeat interval, the killed consumer's median gap in its run's trace).
The runs' directories (server and client logs, each run's trace.parquet) stay in --work
(default: a new temporary directory) for a post-mortem.

Exit status: 0 when every bound holds in every table, 1 when one fails, 2 when a run
could not be made (a group did not form, a step ran late: the machine stalled).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))      # the helpers package, as the tests import it
sys.path.insert(0, str(HERE))

from conftest import python_loop_ns  # noqa: E402
from helpers.fidelity import SCENARIOS, compare, describe, interval, judge, real_run  # noqa: E402


def _s(ms) -> str:
    return f"{ms / 1000:.2f} s"


def _mark(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _schedule(sc) -> str:
    parts = []
    for at, what, name, length in sorted(sc.schedule, key=lambda s: s[0]):
        what = f"pause {length:g} s" if what == "pause" else what
        parts.append(f"{at:g} s {what} {name} ({sc.group_of(name)})")
    return "; ".join(parts)


def table(sc, runs, figures, source) -> tuple:
    """Markdown lines of the table for the what-if from `source`'s trace, and whether
    every bound holds in it."""
    lines = [f"### The what-if from the {source // 1000} s run's trace", "",
             "| setting | group | rebalances real / predicted | within 1 "
             "| false expirations real / predicted | within 1 "
             "| crash detected after real / predicted (heartbeat interval) | within the interval |",
             "|---|---|---:|---|---:|---|---:|---|"]
    ok = True
    for session_ms in sc.sessions:
        real, predicted = figures[source, session_ms]
        for gid in sc.groups:
            hb = interval(sc, runs[session_ms], gid)
            verdict = judge(sc, gid, real[gid], predicted[gid], hb)
            ok &= all(verdict.values())
            (r_reb, r_false, r_det), (p_reb, p_false, p_det) = real[gid], predicted[gid]
            if sc.kills_in(gid) or r_det or p_det:
                detect = (f"{', '.join(map(_s, r_det)) or 'none'} / "
                          f"{', '.join(map(_s, p_det)) or 'none'}"
                          + (f" ({hb} ms)" if hb is not None else ""))
                detect_ok = _mark(verdict["detection"])
            else:
                detect, detect_ok = "no crash", "-"
            lines.append(f"| {session_ms // 1000} s | {gid} | {r_reb} / {p_reb} "
                         f"| {_mark(verdict['rebalances'])} | {r_false} / {p_false} "
                         f"| {_mark(verdict['false'])} | {detect} | {detect_ok} |")
    return lines + [""], ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), default="issue")
    ap.add_argument("--out", type=Path, help="write the Markdown here (e.g. "
                    "bench_results/whatif-fidelity.md)")
    ap.add_argument("--work", type=Path, help="the runs' directories go here (default: a "
                    "new temporary directory)")
    args = ap.parse_args(argv)
    sc = SCENARIOS[args.scenario]
    work = args.work or Path(tempfile.mkdtemp(prefix=f"whatif-fidelity-{sc.name}-"))
    work.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/whatif_fidelity.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    started = datetime.datetime.now(datetime.timezone.utc)
    load = os.getloadavg()
    loop_start = python_loop_ns()
    print(f"scenario {sc.name}: runs in {work}", flush=True)
    t0 = time.monotonic()
    runs = {}
    try:
        for s in sc.sessions:
            print(f"  run at session {s} ms ...", flush=True)
            runs[s] = real_run(sc, s, work / f"session-{s}")
    except (AssertionError, RuntimeError) as exc:
        print(f"a run failed, no comparison: {str(exc)[:3000]}", file=sys.stderr)
        return 2
    runs_s = time.monotonic() - t0
    figures = compare(sc, runs)
    loop_end = python_loop_ns()
    print(describe(figures), flush=True)

    import confluent_kafka
    lines = [f"# What-if against reality: scenario `{sc.name}` (issue 38)", "",
             f"- command: `{command}`",
             f"- date: {started.strftime('%Y-%m-%d %H:%M UTC')}; the real runs took "
             f"{runs_s:.0f} s",
             f"- machine: {platform.node()}, nproc {os.cpu_count()}, load average "
             f"{load[0]:.2f} at the start; python {platform.python_version()}; "
             f"confluent-kafka {confluent_kafka.__version__} (librdkafka "
             f"{confluent_kafka.libversion()[0]})",
             f"- machine speed: a plain Python loop (`s += i`) took {loop_start} ns per "
             f"iteration at the start of the run and {loop_end} ns at its end (best of 5; "
             f"benchmarks/conftest.py)",
             "- groups: " + ", ".join(f"{g} ({', '.join(n)})" for g, n in sc.groups.items())
             + f"; topic {sc.topic}, {sc.partitions} partitions; confluent-kafka consumers, "
             f"heartbeat {sc.heartbeat_ms} ms, max.poll.interval.ms {sc.max_poll_ms}",
             f"- schedule (seconds after every group is stable): {_schedule(sc)}; the trace "
             f"ends at {sc.end_s:g} s",
             "- session timeouts of the real runs: "
             + ", ".join(f"{s // 1000} s" for s in sc.sessions)
             + f"; server `fastcoord serve {' '.join(sc.server_args)}`",
             "- reality: the replay of each run's own trace (rebalances after the one that "
             "formed the group; expirations: a killed member's a crash detected, any other a "
             "false expiration; detection from the kill). Predicted: the what-if on one run's "
             "trace, under each setting (its own: the baseline), timing a crash from the "
             "consumer's last contact",
             "- bounds: rebalances and false expirations within one of reality; crash "
             "detection within one heartbeat interval (the killed consumer's median gap in "
             "its run's trace)", ""]
    all_ok = True
    for source in [sc.whatif_from] + [s for s in sc.sessions if s != sc.whatif_from]:
        body, ok = table(sc, runs, figures, source)
        all_ok &= ok
        lines += body
    lines.append("Every bound holds in every table." if all_ok else
                 "A bound fails (marked **no**).")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"wrote {args.out}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())

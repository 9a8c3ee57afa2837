"""What bounds test_bench_coordinator.py::test_heartbeat_scalar[random]: the same loop
over the same calls (100k members in 10k groups, random order) with the heartbeat
replaced by less and less work, each round of each loop in turn in one process, so a
shared machine's drift moves them together (docs/performance.md has the figures).

    python benchmarks/floors/heartbeat_floors.py [ROUNDS] [MEMBERS_PER_GROUP]
    valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 --LL=33554432,16,64 \
        --dump-before=getppid python benchmarks/floors/heartbeat_floors.py child LOOP
        (LOOP: heartbeat or call_floor) the loop once to warm up, then once between two
        getppid() markers: the second dump file holds the 100k calls' instructions and
        simulated cache misses (callgrind_annotate --inclusive=no --show=Ir,D1mr,DLmr)

Loops, each over the benchmark's `calls` list of (group id, member id, generation):
- heartbeat: `coord.heartbeat(g, m, gen)`, the benchmark's row (native twin);
- lookup floor: `d.get(m)` on a dict of the member ids (one probe with the id's cached
  hash and one string comparison: the least a lookup by id touches);
- call floor: `slice(g, m, gen)`: a builtin called with the three arguments (the loop,
  the unpacking and the call, touching no id's hash or bytes);
- pure twin: the same calls on the pure twin (the ratio's other side).
And the heartbeat and the call floor again in creation order (`sequential`): ids, probes
and slots adjacent, so the difference to random order is what the cache misses cost.
Prints a Markdown table: each loop's median round in ns per call, calls per second,
and the ratio to the call floor.
"""
import gc
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))   # benchmarks/


def _random_calls(per: int):
    from builders import build_stable
    native, members, _, _ = build_stable("native", 100_000 // per, per)
    order = np.random.default_rng(1).permutation(len(members))
    return native, members, order, [members[i] for i in order]


def _calling(fn, calls):
    """A loop calling fn(group id, member id, generation) for each of `calls`."""
    def run():
        for g, m, gen in calls:
            fn(g, m, gen)
    return run


def _getting(get, calls):
    """A loop looking each call's member id up with `get`."""
    def run():
        for _g, m, _gen in calls:
            get(m)
    return run


def child(loop: str) -> None:
    native, _members, _order, calls = _random_calls(10)
    run = _calling({"heartbeat": native.heartbeat, "call_floor": slice}[loop], calls)
    gc.disable()
    run()
    os.getppid()
    run()
    os.getppid()


def main(rounds: int = 7, per: int = 10) -> None:
    from builders import build_stable
    groups = 100_000 // per
    native, members, order, calls = _random_calls(per)
    pure, pure_members, _, _ = build_stable("pure", groups, per)
    pure_calls = [pure_members[i] for i in order]
    ids = {m: i for i, (_g, m, _gen) in enumerate(members)}
    loops = {"heartbeat": _calling(native.heartbeat, calls),
             "sequential": _calling(native.heartbeat, members),
             "lookup floor": _getting(ids.get, calls),
             "call floor": _calling(slice, calls),
             "call floor seq": _calling(slice, members),
             "pure twin": _calling(pure.heartbeat, pure_calls)}
    times = {name: [] for name in loops}
    gc.collect()
    gc.disable()
    for _ in range(rounds):
        for name, run in loops.items():
            t0 = time.perf_counter_ns()
            run()
            times[name].append((time.perf_counter_ns() - t0) / len(calls))
    gc.enable()
    floor = statistics.median(times["call floor"])
    print(f"100k members in {groups:,} groups, {rounds} rounds of each loop in turn, "
          "medians (ns per call)\n")
    print("| loop | ns/call | calls/s | min ns | x call floor |")
    print("|---|---:|---:|---:|---:|")
    for name, ns in times.items():
        median = statistics.median(ns)
        print(f"| {name} | {median:.1f} | {1e3 / median:.2f} M | {min(ns):.1f} | "
              f"{median / floor:.2f} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2])
    else:
        main(*(int(a) for a in sys.argv[1:3]))

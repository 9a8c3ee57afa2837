"""What bounds test_bench_purgatory.py::test_purgatory_kafka_heartbeat: its loop alone,
and two floors of the same design (docs/purgatory-heartbeat.md has the figures).

    python benchmarks/floors/purgatory_floors.py design MEMBERS ROUNDS [native|pure]
        the benchmark's own heartbeat loop (for perf and callgrind: no pytest around it)
    python benchmarks/floors/purgatory_floors.py python MEMBERS ROUNDS
        the Python-level floor: the same user code (a Python operation class built per
        heartbeat, try_complete called three times and on_complete once, each
        try_complete under the group's RLock) with no purgatory at all
    python benchmarks/floors/purgatory_floors.py c MEMBERS ROUNDS [rlock|oplock]
        the purgatory's floor: the same purgatory calls from Cython, the operation a
        Cython subclass (purgatory_cfloor.pyx, built first: see its docstring)

Prints the median round's time; for instructions per heartbeat run it under
`valgrind --tool=callgrind` with ROUNDS 1 and 3 and divide the difference by
2 * MEMBERS.
"""
import gc
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))   # benchmarks/
sys.path.insert(0, HERE)


def design_loop(members, impl):
    from test_bench_purgatory import heartbeat_design
    _purg, order, heartbeat = heartbeat_design(impl, members)

    def run():
        for m in order:
            heartbeat(m)
    return run


class _Operation:
    # the least a base class does: two fields, a completion flag, on_complete
    __slots__ = ("delay_ms", "lock", "completed")

    def __init__(self, delay_ms, lock):
        self.delay_ms = delay_ms
        self.lock = lock
        self.completed = False

    def on_complete(self):
        pass

    def force_complete(self):
        if self.completed:
            return False
        self.completed = True
        self.on_complete()
        return True


def python_loop(members):
    from test_bench_purgatory import heartbeat_class, make_members
    Heartbeat = heartbeat_class(_Operation)
    ms = make_members(members)

    def heartbeat(member):
        # what the purgatory would call: try_complete on the old op (under its lock),
        # then twice on the new one
        member.satisfied = True
        op = member.op
        if op is not None:
            with op.lock:
                op.try_complete()
        member.satisfied = False
        op = Heartbeat(member)
        with op.lock:
            op.try_complete()
        with op.lock:
            op.try_complete()
        member.op = op

    for m in ms:
        heartbeat(m)
    order = ms[:]
    random.Random(3).shuffle(order)

    def run():
        for m in order:
            heartbeat(m)
    return run


def c_loop(members, lock):
    import purgatory_cfloor
    from fastcoord.core._native.engines import Purgatory, Timer
    from fastcoord.core.clock import ManualClock
    purg = Purgatory("Heartbeat", Timer(ManualClock(0)))
    ms = purgatory_cfloor.make_members(members, lock == "oplock")
    purgatory_cfloor.run(purg, ms)
    order = ms[:]
    random.Random(3).shuffle(order)
    return lambda: purgatory_cfloor.run(purg, order)


def main(argv):
    what, members, rounds = argv[0], int(argv[1]), int(argv[2])
    extra = argv[3] if len(argv) > 3 else None
    if what == "design":
        run = design_loop(members, extra or "native")
    elif what == "python":
        run = python_loop(members)
    else:
        run = c_loop(members, extra or "rlock")
    gc.collect()
    gc.disable()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    med = sorted(times)[len(times) // 2]
    print(f"{what} {extra or ''} {members}: median {med * 1e3:.2f} ms, "
          f"{members / med / 1e3:.0f} k/s, {med / members * 1e9:.0f} ns/heartbeat")


if __name__ == "__main__":
    main(sys.argv[1:])

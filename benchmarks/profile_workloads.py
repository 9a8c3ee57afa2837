"""Small fixed workloads, one per hot path, counted with callgrind (instructions per op).

Instruction counts are what a noisy shared machine cannot disturb: the regression gate
(tests/package/test_instruction_gate.py), `make bench-baseline` and `make profile` use them.

How one path is counted
-----------------------
A child process (this file, run under ``valgrind --tool=callgrind --dump-before=getppid``)
builds the path's state, then runs it twice: with N operations and with 2N. Around each
measured stretch it calls ``os.getppid()``, whose libc function is the dump trigger, so
callgrind writes one counter file per stretch. The unmeasured stretches (setup, cleanup)
land in their own files and are ignored. instructions/op = (Ir(2N) - Ir(N)) / N: the
constant part of a stretch (the call into the path, the loop set-up, the marker itself)
cancels out, and what is left is the per-operation cost as seen from Python: the loop
iteration, the call and the work. PYTHONHASHSEED is fixed and the cyclic GC is off, so
the count is the same from run to run.

    python benchmarks/profile_workloads.py measure [--impl native|pure|both] [--paths a,b]
          [--json OUT] [--keep DIR]        # runs callgrind itself, prints a table
    python benchmarks/profile_workloads.py baseline    # rewrites bench_results/instructions.json
    python benchmarks/profile_workloads.py child IMPL PATHS   # what callgrind runs
"""
from __future__ import annotations

import argparse
import collections
import gc
import itertools
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent

# path name -> N per twin (the 2N stretch is also run). Small: callgrind runs ~50x slower.
PATHS: Dict[str, Dict[str, int]] = {
    "heartbeat": {"native": 2_000, "pure": 1_000},
    "heartbeat_batch": {"native": 20_000, "pure": 1_000},
    "timer_schedule": {"native": 2_000, "pure": 1_000},
    "timer_cancel": {"native": 2_000, "pure": 1_000},
    "timer_expire": {"native": 2_000, "pure": 1_000},
    "timer_tag_schedule": {"native": 2_000, "pure": 1_000},
    "timer_tag_cancel": {"native": 2_000, "pure": 1_000},
    "timer_schedule_tags": {"native": 20_000, "pure": 1_000},
    "timer_cancel_ids": {"native": 20_000, "pure": 1_000},
    "purgatory_heartbeat": {"native": 2_000, "pure": 1_000},
    "consumer_heartbeat": {"native": 2_000, "pure": 1_000},
    "consumer_heartbeat_handle": {"native": 2_000, "pure": 1_000},
    "consumer_heartbeat_checked": {"native": 500, "pure": 500},
    "rebalance_10": {"native": 10, "pure": 10},
}
DESCRIPTIONS = {
    "heartbeat": "one scalar `coord.heartbeat(group, member, gen)` (1,000 members, random order)",
    "heartbeat_batch": "one member of `coord.heartbeat_batch(handles, gens)` (1,000 members, random order)",
    "timer_schedule": "one `timer.schedule_at(deadline, fn)` (deadlines spread over 30 s)",
    "timer_cancel": "one `handle.cancel()` of a pending timer",
    "timer_expire": "one timer fired by `timer.advance_to(end)` (callback a no-op)",
    "timer_tag_schedule": "one `timer.schedule_tag_at(deadline, sink, tag)` (deadlines spread over 30 s)",
    "timer_tag_cancel": "one `timer.cancel_id(id)` of a pending tag entry",
    "timer_schedule_tags": "one entry of `timer.schedule_tags(deadlines, tags, sink)`",
    "timer_cancel_ids": "one entry of `timer.cancel_ids(ids)`",
    "purgatory_heartbeat": "one heartbeat of Kafka's design on the purgatory: check_and_complete, a new DelayedOperation, try_complete_else_watch (1,000 members)",
    "consumer_heartbeat": "one steady `coord.consumer_group_heartbeat(group, member, epoch, callback=cb)` of a settled member (1,000 members, random order)",
    "consumer_heartbeat_handle": "one `coord.consumer_heartbeat_handle(handle, epoch)` of a settled member (1,000 members, random order)",
    "consumer_heartbeat_checked": "the same steady heartbeat through the checked slow path, `GroupCoordinator.consumer_group_heartbeat(coord, group, member, epoch, callback=cb)` (1,000 members, random order)",
    "rebalance_10": "a whole rebalance of a new 10-member group: 10 joins, completion, 10 syncs",
}
MARKER = "getppid"          # libc function used as the dump trigger
BASELINE = ROOT / "bench_results" / "instructions.json"
TOLERANCE = 0.10            # the gate fails above baseline * (1 + TOLERANCE)


def _noop() -> None:
    pass


# ---------------------------------------------------------------- workloads
class Workload:
    """prepare(n) is not counted, measure(n) is, cleanup() is not."""

    def prepare(self, n: int) -> None:
        pass

    def measure(self, n: int) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        pass


_COORD: dict = {}


def _coordinator(impl: str):
    """1,000 members in 100 stable groups, shuffled (shared by the heartbeat paths)."""
    if impl in _COORD:
        return _COORD[impl]
    import numpy as np
    sys.path.insert(0, str(HERE))
    from builders import build_stable
    coord, members, handles, gens = build_stable(impl, 100, 10, num_shards=10)
    order = np.random.default_rng(7).permutation(len(members))
    _COORD[impl] = coord, [members[i] for i in order], handles[order], gens[order]
    return _COORD[impl]


class Heartbeat(Workload):
    def __init__(self, impl):
        self.coord, self.members, _, _ = _coordinator(impl)

    def prepare(self, n):
        self.calls = list(itertools.islice(itertools.cycle(self.members), n))

    def measure(self, n):
        hb = self.coord.heartbeat
        for g, m, gen in self.calls:
            hb(g, m, gen)

    def cleanup(self):
        from fastcoord import Errors
        assert self.coord.heartbeat(*self.calls[-1]) == Errors.NONE


class HeartbeatBatch(Workload):
    def __init__(self, impl):
        self.coord, _, self.handles, self.gens = _coordinator(impl)

    def prepare(self, n):
        import numpy as np
        reps = -(-n // len(self.handles))
        self.h = np.ascontiguousarray(np.tile(self.handles, reps)[:n])
        self.g = np.ascontiguousarray(np.tile(self.gens, reps)[:n])

    def measure(self, n):
        self.out = self.coord.heartbeat_batch(self.h, self.g)

    def cleanup(self):
        assert (self.out == 0).all()


class _TimerBase(Workload):
    def __init__(self, impl):
        from fastcoord import _twins
        from fastcoord.core.clock import ManualClock
        self.timer = _twins.module(impl, "core.timer").Timer(ManualClock(0))
        self.now = 0
        self.handles: List = []

    def deadlines(self, n):
        base = self.now + 1
        return [base + (i * 7919) % 30_000 for i in range(n)]

    def schedule(self, n):
        at = self.timer.schedule_at
        self.handles = [at(d, _noop) for d in self.deadlines(n)]

    def drain(self):
        self.now += 40_000
        self.timer.advance_to(self.now)
        self.handles = []
        assert len(self.timer) == 0


class TimerSchedule(_TimerBase):
    def prepare(self, n):
        self.ds = self.deadlines(n)

    def measure(self, n):
        at = self.timer.schedule_at
        self.handles = [at(d, _noop) for d in self.ds]

    def cleanup(self):
        self.drain()


class TimerCancel(_TimerBase):
    def prepare(self, n):
        self.schedule(n)

    def measure(self, n):
        for h in self.handles:
            h.cancel()

    def cleanup(self):
        self.drain()


class TimerExpire(_TimerBase):
    def prepare(self, n):
        self.schedule(n)

    def measure(self, n):
        self.now += 40_000
        self.fired = self.timer.advance_to(self.now)

    def cleanup(self):
        self.handles = []
        assert len(self.timer) == 0


class _TagSink:
    def on_timer(self, tag, deadline_ms):
        pass


class _TagBase(_TimerBase):
    """Tag entries (schedule_tag_at / cancel_id and their batch forms) of one sink."""

    def arrays(self, n):
        import numpy as np
        return (np.array(self.deadlines(n), dtype=np.int64),
                np.arange(n, dtype=np.int64))

    def cleanup(self):
        self.drain()


class TimerScheduleTag(_TagBase):
    def prepare(self, n):
        self.sink = _TagSink()
        self.ds = self.deadlines(n)

    def measure(self, n):
        at, sink = self.timer.schedule_tag_at, self.sink
        for tag, d in enumerate(self.ds):
            at(d, sink, tag)


class TimerCancelId(_TagBase):
    def prepare(self, n):
        d, tags = self.arrays(n)
        self.ids = self.timer.schedule_tags(d, tags, _TagSink()).tolist()

    def measure(self, n):
        cancel = self.timer.cancel_id
        for i in self.ids:
            cancel(i)


class TimerScheduleTags(_TagBase):
    def prepare(self, n):
        self.sink = _TagSink()
        self.d, self.tags = self.arrays(n)

    def measure(self, n):
        self.timer.schedule_tags(self.d, self.tags, self.sink)


class TimerCancelIds(_TagBase):
    def prepare(self, n):
        d, tags = self.arrays(n)
        self.ids = self.timer.schedule_tags(d, tags, _TagSink())

    def measure(self, n):
        assert self.timer.cancel_ids(self.ids) == n


class PurgatoryHeartbeat(Workload):
    """Kafka's heartbeat design on the purgatory (test_bench_purgatory.py's)."""

    def __init__(self, impl):
        sys.path.insert(0, str(HERE))
        from test_bench_purgatory import heartbeat_design
        self.purg, self.order, self.heartbeat = heartbeat_design(impl, 1_000)

    def prepare(self, n):
        self.calls = list(itertools.islice(itertools.cycle(self.order), n))

    def measure(self, n):
        heartbeat = self.heartbeat
        for m in self.calls:
            heartbeat(m)

    def cleanup(self):
        assert self.purg.watched == len(self.order)


class ConsumerHeartbeat(Workload):
    """Settled KIP-848 members (test_bench_consumer_heartbeat.py's), each at its epoch."""

    def __init__(self, impl):
        import numpy as np
        sys.path.insert(0, str(HERE))
        from test_bench_consumer_heartbeat import settled
        self.coord, members = settled(impl, 100, 10)
        order = np.random.default_rng(7).permutation(len(members))
        self.members = [members[i] for i in order]
        self.last: collections.deque = collections.deque(maxlen=1)   # the benchmark's callback

    def prepare(self, n):
        self.calls = list(itertools.islice(itertools.cycle(self.members), n))
        self.last.clear()

    def measure(self, n):
        hb, cb = self.coord.consumer_group_heartbeat, self.last.append
        for g, m, epoch in self.calls:
            hb(g, m, epoch, callback=cb)

    def cleanup(self):
        from fastcoord import Errors
        _, m, epoch = self.calls[-1]
        assert self.last[0] == (Errors.NONE, None, m, epoch, 5000, None)


class ConsumerHeartbeatHandle(ConsumerHeartbeat):
    """The same members by handle, one call each."""

    def prepare(self, n):
        super().prepare(n)
        handle = self.coord.consumer_member_handle
        self.hcalls = [(handle(g, m), epoch) for g, m, epoch in self.calls]

    def measure(self, n):
        hb, cb = self.coord.consumer_heartbeat_handle, self.last.append
        for h, epoch in self.hcalls:
            cb(hb(h, epoch))


class ConsumerHeartbeatChecked(ConsumerHeartbeat):
    """The same steady heartbeats through the class's method: the checked slow path."""

    def measure(self, n):
        from fastcoord import GroupCoordinator
        hb, coord, cb = GroupCoordinator.consumer_group_heartbeat, self.coord, self.last.append
        for g, m, epoch in self.calls:
            hb(coord, g, m, epoch, callback=cb)


class Rebalance(Workload):
    SIZE = 10

    def __init__(self, impl):
        from fastcoord import CoordinatorConfig, GroupCoordinator, ManualClock
        ids = itertools.count()
        self.coord = GroupCoordinator(
            CoordinatorConfig(group_initial_rebalance_delay_ms=0, num_shards=10),
            clock=ManualClock(), impl=impl,
            member_id_factory=lambda prefix: f"{prefix}-{next(ids)}")
        self.groups = itertools.count()

    def prepare(self, n):
        self.gids = [f"group-{next(self.groups)}" for _ in range(n)]

    def measure(self, n):
        coord = self.coord
        protocols = [("range", b"x")]
        for gid in self.gids:
            joined = []
            for _ in range(self.SIZE):
                coord.join_group(gid, "", "consumer", protocols, session_timeout_ms=30_000,
                                 require_known_member_id=False, callback=joined.append)
            coord.advance_time(0)
            leader = joined[0].leader_id
            gen = joined[0].generation_id
            plan = {r.member_id: b"a" for r in joined}
            for r in joined:
                coord.sync_group(gid, gen, r.member_id, plan if r.member_id == leader else None,
                                 callback=_noop1)

    def cleanup(self):
        assert self.coord.describe_group(self.gids[-1]).state == "Stable"


def _noop1(_r) -> None:
    pass


WORKLOADS: Dict[str, Callable[[str], Workload]] = {
    "heartbeat": Heartbeat,
    "heartbeat_batch": HeartbeatBatch,
    "timer_schedule": TimerSchedule,
    "timer_cancel": TimerCancel,
    "timer_expire": TimerExpire,
    "timer_tag_schedule": TimerScheduleTag,
    "timer_tag_cancel": TimerCancelId,
    "timer_schedule_tags": TimerScheduleTags,
    "timer_cancel_ids": TimerCancelIds,
    "purgatory_heartbeat": PurgatoryHeartbeat,
    "consumer_heartbeat": ConsumerHeartbeat,
    "consumer_heartbeat_handle": ConsumerHeartbeatHandle,
    "consumer_heartbeat_checked": ConsumerHeartbeatChecked,
    "rebalance_10": Rebalance,
}


def child(impl: str, paths: List[str]) -> None:
    """Run each path's N and 2N stretches between markers; print the stretch labels."""
    gc.disable()
    labels = []                     # label of each dump file, in order ("" = not counted)
    mark = os.getppid

    def stretch(label):
        mark()                      # dumps what came before
        labels.append(label)

    labels.append("")               # part 1: start-up
    for path in paths:
        n = PATHS[path][impl]
        w = WORKLOADS[path](impl)
        w.prepare(max(1, n // 2))   # warm-up: the adaptive interpreter specialises here
        w.measure(max(1, n // 2))
        w.cleanup()
        for k in (1, 2):
            w.prepare(k * n)
            stretch(f"{path}:{k}")
            w.measure(k * n)
            stretch("")
            w.cleanup()
    print("LABELS " + json.dumps(labels), flush=True)


def spin(impl: str, path: str, seconds: float) -> None:
    """Run a path over and over for `seconds` (no callgrind: for a sampling profiler)."""
    import time
    n = PATHS[path][impl]
    w = WORKLOADS[path](impl)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        w.prepare(n)
        w.measure(n)
        w.cleanup()


# ---------------------------------------------------------------- parent side
def valgrind() -> Optional[str]:
    return shutil.which("valgrind")


def _read_total(path: pathlib.Path) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def count(impl: str, paths: Optional[List[str]] = None, keep: Optional[pathlib.Path] = None,
          python: str = sys.executable) -> Dict[str, dict]:
    """Run the child under callgrind; return {path: {"per_op", "n", "ir_n", "ir_2n"}}.
    With `keep`, the 2N stretch's callgrind file of each path is copied there
    (<impl>-<path>.callgrind) for callgrind_annotate."""
    vg = valgrind()
    if vg is None:
        raise RuntimeError("valgrind is not installed (apt-get install -y valgrind)")
    paths = list(paths or PATHS)
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
    if impl == "pure":
        env["FASTCOORD_NO_EXTENSIONS"] = "1"
    else:
        env.pop("FASTCOORD_NO_EXTENSIONS", None)
    with tempfile.TemporaryDirectory(prefix="fastcoord-cg-") as tmp:
        out = pathlib.Path(tmp) / "cg.out"
        cmd = [vg, "--tool=callgrind", f"--callgrind-out-file={out}", f"--dump-before={MARKER}", "--compress-strings=no",
               python, str(HERE / "profile_workloads.py"), "child", impl,
               ",".join(paths)]
        proc = subprocess.run(cmd, env=env, cwd=str(ROOT), capture_output=True, text=True)
        line = next((l for l in proc.stdout.splitlines() if l.startswith("LABELS ")), None)
        if proc.returncode != 0 or line is None:
            raise RuntimeError(f"callgrind run failed ({proc.returncode}):\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        labels = json.loads(line[len("LABELS "):])
        totals: Dict[str, int] = {}
        files: Dict[str, pathlib.Path] = {}
        for part, label in enumerate(labels, start=1):
            if label:
                f = pathlib.Path(f"{out}.{part}")
                totals[label] = _read_total(f)
                files[label] = f
        result = {}
        for path in paths:
            n = PATHS[path][impl]
            ir1, ir2 = totals[f"{path}:1"], totals[f"{path}:2"]
            result[path] = {"per_op": round((ir2 - ir1) / n, 1), "n": n, "ir_n": ir1, "ir_2n": ir2}
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(files[f"{path}:2"], keep / f"{impl}-{path}.callgrind")
        return result


def count_all(impls: List[str], paths=None, keep=None) -> Dict[str, Dict[str, dict]]:
    """Both twins in parallel (one callgrind process each)."""
    with ThreadPoolExecutor(max_workers=len(impls)) as ex:
        futs = {impl: ex.submit(count, impl, paths, keep) for impl in impls}
        return {impl: f.result() for impl, f in futs.items()}


def impls_available() -> List[str]:
    sys.path.insert(0, str(ROOT))
    import fastcoord
    return (["native"] if fastcoord.NATIVE_AVAILABLE else []) + ["pure"]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "child":
        child(argv[1], argv[2].split(","))
        return 0
    if argv and argv[0] == "spin":          # spin IMPL PATH SECONDS: for py-spy
        spin(argv[1], argv[2], float(argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=["measure", "baseline"])
    ap.add_argument("--impl", default="both")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", default=None)
    a = ap.parse_args(argv)
    impls = impls_available() if a.impl == "both" else [a.impl]
    res = count_all(impls, a.paths.split(","), pathlib.Path(a.keep) if a.keep else None)
    for path in a.paths.split(","):
        cells = [f"{impl} {res[impl][path]['per_op']:>12,.1f}" for impl in impls]
        print(f"{path:18s} " + "   ".join(cells))
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    if a.cmd == "baseline":
        write_baseline(res)
        print(f"wrote {BASELINE.relative_to(ROOT)}")
    return 0


def environment() -> dict:
    import platform
    try:
        import Cython
        cython = Cython.__version__
    except ImportError:
        cython = None
    vg = valgrind()
    vg_version = subprocess.run([vg, "--version"], capture_output=True, text=True).stdout.strip() \
        if vg else None
    return {"python": platform.python_version(), "cython": cython, "valgrind": vg_version,
            "machine": platform.machine()}


def write_baseline(res: Dict[str, Dict[str, dict]]) -> None:
    data = {
        "about": "Instructions per operation of each hot path (callgrind, benchmarks/"
                 "profile_workloads.py). tests/package/test_instruction_gate.py fails when a path "
                 "exceeds its baseline by more than `tolerance`; `make bench-baseline` "
                 "rewrites this file.",
        "tolerance": TOLERANCE,
        "environment": environment(),
        "descriptions": DESCRIPTIONS,
        "instructions_per_op": {impl: {p: v["per_op"] for p, v in d.items()}
                                for impl, d in res.items()},
        "n": {impl: {p: v["n"] for p, v in d.items()} for impl, d in res.items()},
    }
    BASELINE.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())

"""Scaling plots (matplotlib PNG) into bench_results/, with the numbers beside them.

    python benchmarks/profile_scaling.py bench_results [--quick]

  scaling-heartbeats.png   heartbeats/s against member count (1k..1M; pure up to 100k):
                           scalar heartbeat and heartbeat_batch, native and pure, with
                           the C floors (benchmarks/floors.py) for reference
  scaling-threads.png      heartbeat_batch heartbeats/s with 1 and 2 threads (disjoint
                           halves of the groups), against member count
  scaling-rebalance.png    rebalance time (all joins, the rebalance, all syncs, on a
                           ManualClock) against group size, 10..10,000 members
  scaling.json             the numbers plotted
  scaling-assignors.png    the uniform assignor's full computation against member count,
                           per partition count (benchmarks/assignor_scaling.py; its
                           numbers in scaling-assignors.json)

Times are medians of a few runs on whatever machine this is (a shared 2-core VM for
the committed ones): informational, compare shapes and ratios, not absolute values.
"""
from __future__ import annotations

import gc
import json
import pathlib
import statistics
import sys
import threading
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fastcoord  # noqa: E402
from builders import build_stable  # noqa: E402

IMPLS = (["native"] if fastcoord.NATIVE_AVAILABLE else []) + ["pure"]


def median_time(fn, rounds, inner=1):
    """Median seconds of one fn() call over `rounds` rounds of `inner` calls each."""
    times = []
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        try:
            t = time.perf_counter()
            for _ in range(inner):
                fn()
            times.append((time.perf_counter() - t) / inner)
        finally:
            gc.enable()
    return statistics.median(times)


def inner_for(size):
    return max(1, 200_000 // size)     # C-speed calls: at least ~200k ops per timing


def heartbeats(sizes, pure_max):
    import floors
    out = {"members": sizes, "series": {}}
    for size in sizes:
        for impl in IMPLS:
            if impl == "pure" and size > pure_max:
                continue
            for name, rate in heartbeat_rates(impl, size).items():
                out["series"].setdefault(name, {})[size] = rate
            gc.collect()        # the coordinator went with heartbeat_rates' frame
        for name, cls in (("C floor: hash lookup + store", floors.HashFloor),
                          ("C floor: batch store", floors.BatchFloor)):
            f = cls(size)
            t = median_time(f.run, 7, inner_for(size))
            out["series"].setdefault(name, {})[size] = size / t
    return out


def heartbeat_rates(impl, size):
    """{series name: heartbeats/s} of one twin on `size` members: scalar, batch and (native)
    threaded."""
    coord, members, handles, gens = build_stable(impl, max(1, size // 10), 10)
    order = np.random.default_rng(1).permutation(len(members))
    calls = [members[i] for i in order]
    h, g = np.ascontiguousarray(handles[order]), np.ascontiguousarray(gens[order])
    hb = coord.heartbeat

    def scalar():
        for gid, mid, gen in calls:
            hb(gid, mid, gen)

    rounds = 5 if impl == "native" else 3
    rates = {f"{impl} heartbeat": len(calls) / median_time(scalar, rounds)}
    t = median_time(lambda: coord.heartbeat_batch(h, g), rounds,
                    inner_for(size) if impl == "native" else 1)
    rates[f"{impl} heartbeat_batch"] = len(calls) / t
    if impl == "native":
        rates["threads: 1 thread"], rates["threads: 2 threads"] = threaded(coord, handles, gens)
    return rates


def threaded(coord, handles, gens, repeat=5):
    """(1 thread, 2 threads) heartbeats/s: the same two halves of the members (disjoint
    groups, each half in random order), done one after the other or at once."""
    rng = np.random.default_rng(4)
    half = len(handles) // 2            # groups are contiguous in creation order
    order = np.concatenate([rng.permutation(half), half + rng.permutation(len(handles) - half)])
    handles, gens = handles[order], gens[order]
    parts = [(np.ascontiguousarray(handles[:half]), np.ascontiguousarray(gens[:half])),
             (np.ascontiguousarray(handles[half:]), np.ascontiguousarray(gens[half:]))]

    def work(part):
        for _ in range(repeat):
            coord.heartbeat_batch(*part)

    def run1():
        for p in parts:
            work(p)

    def run2():
        ts = [threading.Thread(target=work, args=(p,)) for p in parts]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    inner = max(1, 200_000 // (repeat * len(handles)))
    ops = repeat * len(handles)
    return ops / median_time(run1, 5, inner), ops / median_time(run2, 5, inner)


def rebalance(sizes):
    out = {"members": sizes, "series": {}}
    for impl in IMPLS:
        for size in sizes:
            rounds = 5 if size <= 1000 else 3
            t = median_time(lambda: build_stable(impl, 1, size), rounds)
            out["series"].setdefault(impl, {})[size] = t
    return out


def plot(data, folder: pathlib.Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def chart(name, title, xlabel, ylabel, lines, logy=True):
        """lines: [(label, {x: y}, style)] -> folder/name.png"""
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        for label, pts, style in lines:
            xs = sorted(pts, key=int)
            ax.plot([int(x) for x in xs], [pts[x] for x in xs], style, marker="o", label=label)
        ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(folder / f"{name}.png", dpi=100)
        plt.close(fig)

    series = data["heartbeats"]["series"]
    chart("scaling-heartbeats", "Heartbeat throughput vs member count (random order)",
          "members", "heartbeats / s",
          [(k, v, "--" if k.startswith("C floor") else "-") for k, v in series.items()
           if not k.startswith("threads:")])
    chart("scaling-threads", "heartbeat_batch (native, GIL released): 1 vs 2 threads",
          "members", "heartbeats / s",
          [(k.split(": ")[1], v, "-") for k, v in series.items() if k.startswith("threads:")],
          logy=False)
    chart("scaling-rebalance", "Full rebalance (joins + rebalance + syncs) vs group size",
          "group size (members)", "rebalance time (ms)",
          [(impl, {x: t * 1e3 for x, t in pts.items()}, "-")
           for impl, pts in data["rebalance"]["series"].items()])


def folder_and_quick(argv):
    """(the output folder, created; whether --quick) from a plot script's arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    quick = "--quick" in argv
    argv = [a for a in argv if a != "--quick"]
    folder = pathlib.Path(argv[0] if argv else "bench_results")
    folder.mkdir(parents=True, exist_ok=True)
    return folder, quick


def main(argv=None) -> int:
    folder, quick = folder_and_quick(argv)
    if quick:
        sizes, pure_max, rb_sizes = [100, 1_000], 1_000, [10, 100]
    else:
        sizes, pure_max, rb_sizes = [1_000, 10_000, 100_000, 1_000_000], 100_000, \
            [10, 100, 1_000, 10_000]
    data = {"heartbeats": heartbeats(sizes, pure_max), "rebalance": rebalance(rb_sizes)}
    plot(data, folder)
    import assignor_scaling
    assignor_scaling.run(folder, quick)
    (folder / "scaling.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    for name, pts in data["heartbeats"]["series"].items():
        print(f"{name:40s} " + "  ".join(f"{k}: {v / 1e6:.3f} M/s" for k, v in pts.items()))
    for impl, pts in data["rebalance"]["series"].items():
        print(f"rebalance {impl:10s} " + "  ".join(f"{k}: {v * 1e3:.1f} ms" for k, v in pts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

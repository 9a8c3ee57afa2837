"""Assignor scaling plot: the time of one full uniform computation (KIP-848's server-side
assignor, every member subscribed to the same 10 topics, no current assignment) against
member count, one line per partition count and twin.

    python benchmarks/assignor_scaling.py bench_results [--quick]

  scaling-assignors.png    log-log: members 10..10,000, partitions 1k, 10k, 100k (in 10
                           topics), native and pure
  scaling-assignors.json   the numbers plotted (median seconds)

Also run by benchmarks/profile_scaling.py beside the other scaling plots. Medians of a
few runs on whatever machine this is: compare shapes and the native/pure ratio, not
absolute values across runs.
"""
from __future__ import annotations

import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fastcoord  # noqa: E402
from fastcoord.core.assignors import compute_assignment  # noqa: E402
from conftest import python_loop_ns  # noqa: E402
from profile_scaling import folder_and_quick, median_time  # noqa: E402
from test_bench_assignors import homogeneous  # noqa: E402

IMPLS = (["native"] if fastcoord.NATIVE_AVAILABLE else []) + ["pure"]
TOPICS = 10


def measure(members_list, partitions_list) -> dict:
    """{"members": [...], "series": {"<impl>, <partitions> partitions": {members: median
    seconds}}, ...}, with the machine's speed (benchmarks/conftest.py) before and after."""
    out = {"members": members_list, "partitions": partitions_list, "topics": TOPICS,
           "python_loop_ns_start": python_loop_ns(), "series": {}}
    for impl in IMPLS:
        for partitions in partitions_list:
            name = f"{impl}, {partitions:,} partitions"
            for members in members_list:
                group, topics = homogeneous(members, TOPICS, partitions // TOPICS)

                def once(group=group, topics=topics, impl=impl):
                    compute_assignment("uniform", group, topics, {}, impl=impl)

                first = median_time(once, 1)        # (also a warm-up)
                rounds = 1 if first > 2.0 else 7 if first > 0.05 else 15
                t = first if rounds == 1 else median_time(once, rounds)
                out["series"].setdefault(name, {})[members] = t
                print(f"{name:32s} {members:>6,} members: {t * 1e3:9.2f} ms", flush=True)
    out["python_loop_ns_end"] = python_loop_ns()
    return out


def plot(data: dict, folder: pathlib.Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    colours = {}
    for name, pts in data["series"].items():
        impl, partitions = name.split(", ", 1)
        colour = colours.setdefault(partitions, f"C{len(colours)}")
        xs = sorted(pts, key=int)
        ax.plot([int(x) for x in xs], [pts[x] * 1e3 for x in xs],
                "-" if impl == "native" else "--", color=colour, marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel="members (all subscribed to the same 10 topics)",
           ylabel="one full computation (ms)",
           title="Uniform assignor (KIP-848), full computation: native (solid) vs pure (dashed)")
    ax.title.set_fontsize(10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "scaling-assignors.png", dpi=100)
    plt.close(fig)


def run(folder: pathlib.Path, quick: bool = False) -> dict:
    if quick:
        data = measure([10, 100], [1_000])
    else:
        data = measure([10, 100, 1_000, 10_000], [1_000, 10_000, 100_000])
    plot(data, folder)
    (folder / "scaling-assignors.json").write_text(json.dumps(data, indent=1) + "\n")
    return data


def main(argv=None) -> int:
    run(*folder_and_quick(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

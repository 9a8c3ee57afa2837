"""What settled consumer-protocol members cost the garbage collector and the heap.

Usage: python benchmarks/consumer_gc_cost.py [--impl native|pure] [--groups N]

A coordinator over InMemoryStore(group_records=False) (a store that keeps no record in
memory, as the durable store), N groups of 10 members (one topic of 10 partitions)
joined and reconciled (builders.build_consumer_groups). Prints, per member, the objects
the garbage collector tracks and the bytes tracemalloc counts, the time of that join
storm, and the time of a full collection afterwards (best of 5): a full collection
visits every tracked object, and CPython runs one each time the long-lived tracked
objects grow by a quarter, so it is the pause a growing coordinator takes.
"""
from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

from builders import build_consumer_groups  # (benchmarks/ is the script's directory)
from fastcoord.core.store import InMemoryStore

PER_GROUP = 10


def storm(impl: str, groups: int):
    """Every group's members join, then report what they own until reconciled."""
    coord, _ = build_consumer_groups(impl, groups, PER_GROUP,
                                     store=InMemoryStore(group_records=False))
    return coord


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--impl", default="native", choices=("native", "pure"))
    parser.add_argument("--groups", type=int, default=10_000)
    args = parser.parse_args()
    members = args.groups * PER_GROUP
    # bytes first, on a group count that keeps tracemalloc's own cost small
    small = min(args.groups, 2_000)
    tracemalloc.start()
    coord = storm(args.impl, small)
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del coord
    gc.collect()
    tracked_before = len(gc.get_objects())
    started = time.perf_counter()
    coord = storm(args.impl, args.groups)
    storm_s = time.perf_counter() - started
    gc.collect()
    gc.collect()
    tracked = (len(gc.get_objects()) - tracked_before) / members
    pauses = []
    for _ in range(5):
        t = time.perf_counter()
        gc.collect()
        pauses.append(time.perf_counter() - t)
    print(f"{args.impl}: {members:,} members; tracked objects per member {tracked:.2f}; "
          f"traced bytes per member {traced / (small * PER_GROUP):,.0f} (at {small * PER_GROUP:,}); "
          f"join storm {storm_s:.2f} s; full collection {min(pauses) * 1e3:.0f} ms")
    del coord


if __name__ == "__main__":
    main()

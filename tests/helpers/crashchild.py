"""A child process for crash tests: a coordinator on a DurableStore committing offsets at
full speed and reporting every acknowledged commit.

    python tests/helpers/crashchild.py DATA_DIR [--impl native|pure] [--threads 4]
        [--groups 8] [--partitions 4] [--num-shards 8] [--segment-bytes 65536]

On start it loads every shard and prints `L <group> <partition> <offset>` for each
committed offset the coordinator answers after loading, then `READY`. Then each thread
commits, for the groups and partitions it owns (so one commit in flight per partition),
offset = last + 1 through `GroupCoordinator.commit_offsets` (fsync "always") and, only
after the commit is acknowledged NONE, prints `A <group> <partition> <offset>`. A line is
one os.write to stdout (atomic on a pipe). Runs until killed.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading

from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, SystemClock
from fastcoord.storage import DurableStore, load_into

TOPIC = "t"


def _out(line: str) -> None:
    os.write(1, line.encode())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="crashchild.py")
    p.add_argument("data_dir")
    p.add_argument("--impl", default=None, choices=["native", "pure"])
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--num-shards", type=int, default=8)
    p.add_argument("--segment-bytes", type=int, default=64 * 1024)
    p.add_argument("--compact-after-segments", type=int, default=2)
    args = p.parse_args(argv)

    store = DurableStore(args.data_dir, num_shards=args.num_shards, fsync="always",
                         segment_bytes=args.segment_bytes,
                         compact_after_segments=args.compact_after_segments)
    coord = GroupCoordinator(CoordinatorConfig(num_shards=args.num_shards), clock=SystemClock(),
                             store=store, impl=args.impl)
    load_into(coord, store)
    groups = [f"group-{g}" for g in range(args.groups)]
    last = {}
    lines = []
    for gid in groups:
        error, offsets = coord.fetch_offsets(gid)
        if error != Errors.NONE:
            raise SystemExit(f"fetch_offsets({gid}) after loading answered {error.name}")
        for (topic, partition), om in sorted(offsets.items()):
            last[(gid, partition)] = om.offset
            lines.append(f"L {gid} {partition} {om.offset}\n")
    lines.append("READY\n")
    _out("".join(lines))

    keys = [(gid, part) for gid in groups for part in range(args.partitions)]

    def commit_loop(mine):
        while True:
            for key in mine:
                gid, part = key
                offset = last.get(key, -1) + 1
                result = coord.commit_offsets(gid, "", -1, {(TOPIC, part): offset})
                if result[(TOPIC, part)] == Errors.NONE:
                    last[key] = offset
                    _out(f"A {gid} {part} {offset}\n")

    threads = [threading.Thread(target=commit_loop, args=(keys[i::args.threads],), daemon=True)
               for i in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Cache misses of one `Timer.cancel_id` per call over 1M entries, in random order or in
schedule order (test_bench_timer.py's timer-tags-cancel rows), for callgrind's cache
simulation (docs/performance-bounds.md has the figures):

    valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 --LL=33554432,16,64 \\
        --dump-before=getppid python benchmarks/floors/timer_cancel_misses.py ORDER

ORDER: random or schedule. The 1M entries are scheduled by one batch, their ids put in
ORDER as a list of ints made before the measured stretch; the second dump file holds
the 1M cancels (callgrind_annotate --inclusive=no --show=Ir,D1mr,DLmr,D1mw,DLmw).
"""
import gc
import os
import sys

import numpy as np

from fastcoord import _twins
from fastcoord.core.clock import ManualClock

N = 1_000_000


class _Sink:
    def on_timer(self, tag):
        pass


def main(order: str) -> None:
    timer = _twins.module("native", "core.timer").Timer(ManualClock(0))
    deadlines = np.random.default_rng(1).integers(1, 30_000, N).astype(np.int64)
    ids = timer.schedule_tags(deadlines, np.arange(N, dtype=np.int64), _Sink())
    if order == "random":
        ids = ids[np.random.default_rng(20240601).permutation(N)]
    elif order != "schedule":
        raise SystemExit(f"ORDER is random or schedule, not {order!r}")
    calls = ids.tolist()
    cancel = timer.cancel_id
    gc.disable()
    os.getppid()
    for entry_id in calls:
        cancel(entry_id)
    os.getppid()


if __name__ == "__main__":
    main(sys.argv[1])

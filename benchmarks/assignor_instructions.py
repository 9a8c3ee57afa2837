"""Instructions of one assignment per row of benchmarks/test_bench_assignors.py, counted
by callgrind: exact from run to run on one interpreter, where the benchmark's times on a
shared machine are not.

    python benchmarks/assignor_instructions.py [--impl native|pure|both] [ROW ...]

Rows: full-1k, full-10k, join-1k, heterogeneous-1k, range-1k (the benchmark's groups,
built by its functions). The child builds a row's inputs, runs the assignment once to
warm up, drops that result, collects, then runs it once inside functools.reduce: the
count is that call's (callgrind counts only while reduce runs), the collection the
result makes due included.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
ROWS = ("full-1k", "full-10k", "join-1k", "heterogeneous-1k", "range-1k")


def inputs(row: str):
    """(name, members, topics, current) of a benchmark row."""
    sys.path.insert(0, str(HERE))
    from test_bench_assignors import heterogeneous, homogeneous

    from fastcoord.core.assignors import compute_assignment
    if row == "full-10k":
        return ("uniform", *homogeneous(10_000, 10, 10_000), {})
    if row == "heterogeneous-1k":
        return ("uniform", *heterogeneous(1_000), {})
    members, topics = homogeneous(1_000, 10, 1_000)
    if row == "join-1k":
        current = compute_assignment("uniform", members, topics, {})
        return "uniform", members + [("joiner", None, members[0][2])], topics, current
    return ("range" if row == "range-1k" else "uniform"), members, topics, {}


def child(row: str, impl: str) -> None:
    import functools
    import gc

    from fastcoord.core.assignors import compute_assignment
    args = inputs(row)
    compute_assignment(*args, impl=impl)
    gc.collect()
    kept = []
    functools.reduce(lambda _, call: kept.append(call()), [lambda: compute_assignment(*args, impl=impl)], None)


def count(row: str, impl: str) -> int:
    with tempfile.TemporaryDirectory(prefix="fastcoord-assignor-cg-") as tmp:
        env = dict(os.environ, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=functools_reduce",
             f"--callgrind-out-file={tmp}/cg.out", sys.executable, __file__, "--child", row, impl],
            env=env, cwd=str(ROOT), check=True, capture_output=True, text=True)
    return int(re.search(r"Collected : (\d+)", done.stderr).group(1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", nargs="*", help=f"rows among {', '.join(ROWS)} (default: all)")
    ap.add_argument("--impl", default="both", choices=("native", "pure", "both"))
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    unknown = sorted(set(args.rows) - set(ROWS))
    if unknown:
        ap.error(f"unknown rows {unknown}: expected some of {ROWS}")
    impls = ("native", "pure") if args.impl == "both" else (args.impl,)
    for row in args.rows or ROWS:
        counts = {impl: count(row, impl) for impl in impls}
        ratio = f"  pure/native {counts['pure'] / counts['native']:.1f}x" if len(counts) == 2 else ""
        print(f"{row:18}" + "".join(f"  {impl} {n:,}" for impl, n in counts.items()) + ratio, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

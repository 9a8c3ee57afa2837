"""Instructions of one replay, counted by callgrind: the measure the replay driver's
shape is chosen by (docs/performance.md), exact from run to run on one interpreter.

    python benchmarks/replay_instructions.py [--groups 100] [--impl native]

The trace is the golden test's generator at `--groups` (seed 1), generated outside
callgrind and written to a temporary Parquet file; the child replays it once to warm
up, then once between two markers (getppid: callgrind dumps before each call). The
count printed is the second replay's: every shard, replay_local's tables included.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def child(trace_path: str, impl: str) -> None:
    import gc

    import pyarrow.parquet as pq

    from fastcoord.pipeline.replay import replay_local
    table = pq.read_table(trace_path)
    replay_local(table, impl=impl)
    gc.collect()
    os.getppid()                    # dump: what came before
    replay_local(table, impl=impl)
    os.getppid()                    # dump: the measured replay


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--impl", default="native", choices=("native", "pure"))
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    import pyarrow.parquet as pq

    from fastcoord.pipeline import gen
    with tempfile.TemporaryDirectory(prefix="fastcoord-replay-cg-") as tmp:
        trace = os.path.join(tmp, "trace.parquet")
        pq.write_table(gen.generate(groups=args.groups, members=10.6, duration_s=205, seed=1),
                       trace)
        out = os.path.join(tmp, "cg.out")
        env = dict(os.environ, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
        if args.impl == "pure":
            env["FASTCOORD_NO_EXTENSIONS"] = "1"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        "--dump-before=getppid", sys.executable, __file__,
                        "--child", trace, args.impl], env=env, cwd=str(ROOT), check=True,
                       capture_output=True)
        with open(f"{out}.2") as f:
            total = next(int(line.split()[1]) for line in f
                         if line.startswith(("summary:", "totals:")))
    print(f"replay of the {args.groups}-group trace ({args.impl}): {total:,} instructions")
    return 0


if __name__ == "__main__":
    sys.exit(main())

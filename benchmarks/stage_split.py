"""Where the Spark replay stage's time goes: the stage's task seconds per round (Spark's
event log, as the pipeline benchmark reads them) and, summed over the Python workers'
tasks, the CPU seconds of each phase of a task: input (receiving the packed pieces),
decode (a shard's pieces into one table, its out-of-order count), replay
(ShardReplay.run) and encode (the result blobs), with the wall seconds spent receiving
the input beside them.

The task here is the replay task (spark._run_partition_fn, per_shard, _replay_shard)
with timers around its steps, written out again: keep the two in step.

usage: .venv/bin/python benchmarks/stage_split.py [--trace PATH] [--rounds N]
           [--master local[1]] [--batch-bytes B]

--trace: a Parquet trace (default: the pipeline benchmark's 10M-event trace, generated
into FASTCOORD_BENCH_CACHE or the temp dir when missing). --batch-bytes:
spark.sql.execution.arrow.maxBytesPerBatch for this session (default: session()'s).
Run it alternately with two settings to compare them on this noisy machine.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pipeline_traces import FULL, replay_stage_task_s, trace_path  # noqa: E402

PHASES = ("input", "input_wall", "decode", "replay", "encode")


def timed_task(out_dir: str):
    """The replay task with timers; each task writes its phase seconds to out_dir."""
    def run(batches):
        from fastcoord.pipeline import spark as S
        from fastcoord.pipeline.replay import ShardReplay

        cpu, wall = time.thread_time, time.perf_counter
        spent = dict.fromkeys(PHASES, 0.0)
        c0, w0 = cpu(), wall()
        got = S.ShardInput(batches)
        spent["input"], spent["input_wall"] = cpu() - c0, wall() - w0
        events = 0
        for shard in got.keys():
            c0 = cpu()
            rows = got.rows(shard)
            S.out_of_order_report(shard, rows)
            c1 = cpu()
            replay = ShardReplay(shard)
            tables = replay.run(rows, got.last.get(shard))
            c2 = cpu()
            blobs = [S.table_blobs(name, t) for name, t in tables.items()]
            blobs.append(S.table_blobs(S.RUNTIME_TABLE, S._runtime_row(shard, replay.coord.impl)))
            c3 = cpu()
            spent["decode"] += c1 - c0
            spent["replay"] += c2 - c1
            spent["encode"] += c3 - c2
            events += rows.num_rows
            yield from blobs
        spent["events"] = events
        name = os.path.join(out_dir, f"{os.getpid()}-{time.time_ns()}.json")
        with open(name, "w") as f:
            json.dump(spent, f)
    return run


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--master", default="local[1]")
    ap.add_argument("--batch-bytes", default=None)
    args = ap.parse_args(argv)
    from fastcoord.pipeline import spark as S

    path = args.trace or trace_path(FULL)
    log_dir, phases_dir = tempfile.mkdtemp(), tempfile.mkdtemp()
    conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": log_dir,
            "spark.eventLog.compress": "false"}
    if args.batch_bytes:
        conf["spark.sql.execution.arrow.maxBytesPerBatch"] = str(args.batch_bytes)
    spark = S.session(args.master, app="stage-split", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for r in range(args.rounds):
            t0 = time.perf_counter()
            (S.packed_trace(spark, path).repartition("shard")
             .mapInArrow(timed_task(phases_dir), schema=S.BLOB_DDL)
             .write.format("noop").mode("overwrite").save())
            print(f"round {r}: {time.perf_counter() - t0:.2f} s wall", flush=True)
    finally:
        spark.stop()
    stages = replay_stage_task_s(log_dir)
    total = dict.fromkeys(PHASES + ("events",), 0.0)
    for name in glob.glob(os.path.join(phases_dir, "*.json")):
        with open(name) as f:
            for k, v in json.load(f).items():
                total[k] += v
    print("replay stage task seconds per round:", [round(s, 3) for s, _, _ in stages])
    print("Python workers, per round (s):",
          {k: round(v / args.rounds, 2) for k, v in total.items() if k != "events"},
          f"({total['events'] / args.rounds:,.0f} events)")


if __name__ == "__main__":
    main()

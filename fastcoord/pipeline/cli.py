"""The pipeline's subcommands of `fastcoord`: trace gen / trace convert / replay."""
from __future__ import annotations

import json
import os
import sys

COMMANDS = ("trace", "replay")


def add_parsers(sub) -> None:
    trace = sub.add_parser("trace", help="make or convert coordinator traces (Parquet)")
    tsub = trace.add_subparsers(dest="trace_command", required=True)
    gen = tsub.add_parser("gen", help="a synthetic trace, deterministic from --seed")
    gen.add_argument("out", help="Parquet file to write")
    gen.add_argument("--groups", type=int, default=100)
    gen.add_argument("--members", type=int, default=10, help="mean members per group")
    gen.add_argument("--duration-s", type=int, default=600)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--static-fraction", type=float, default=0.3)
    conv = tsub.add_parser("convert", help="a request log -> trace (bad lines are counted)")
    conv.add_argument("log")
    conv.add_argument("out")
    conv.add_argument("--format", choices=["fastcoord", "kafka"], default="fastcoord")
    rep = sub.add_parser("replay", help="replay a trace through the coordinator, per shard")
    rep.add_argument("trace", help="Parquet trace")
    rep.add_argument("--out", required=True, help="directory for the result tables")
    rep.add_argument("--master", default="local[*]",
                     help="Spark master (local[*], spark://host:7077), or 'none' for one process")
    rep.add_argument("--impl", choices=["native", "pure"], default=None)


def run(args) -> int:
    try:
        from . import adapters, gen, replay, trace
    except ImportError as exc:
        print(f"fastcoord {args.command} needs the spark extra (pip install 'fastcoord[spark]'): "
              f"{exc}", file=sys.stderr)
        return 2
    if args.command == "trace":
        if args.trace_command == "gen":
            table = gen.generate(groups=args.groups, members=args.members,
                                 duration_s=args.duration_s, seed=args.seed,
                                 static_fraction=args.static_fraction)
            trace.write_trace(table, args.out)
            print(f"fastcoord trace gen: {table.num_rows} events -> {args.out}")
            return 0
        fn = adapters.from_kafka_log if args.format == "kafka" else adapters.from_fastcoord_log
        table, stats = fn(args.log)
        trace.write_trace(table, args.out)
        print(json.dumps(stats.as_dict(), indent=2))
        return 0
    os.makedirs(args.out, exist_ok=True)
    good, stats = trace.validate(trace.read_trace(args.trace))
    with open(os.path.join(args.out, "ingest.json"), "w") as f:
        json.dump(stats.as_dict(), f, indent=2)
    if args.master == "none":
        import pyarrow.parquet as pq
        tables = replay.replay_local(good, impl=args.impl)
        for name, t in tables.items():
            os.makedirs(os.path.join(args.out, name), exist_ok=True)
            pq.write_table(t, os.path.join(args.out, name, "part-0.parquet"))
    else:
        from . import spark as sp
        session = sp.session(args.master)
        clean = os.path.join(args.out, "_trace.parquet")
        trace.write_trace(good, clean)
        try:
            tables = sp.replay_spark(session, clean, args.out, impl=args.impl)
        finally:
            session.stop()
    print(f"fastcoord replay: {good.num_rows} events ({stats.malformed} malformed, "
          f"{stats.unknown_event} unknown, {stats.out_of_order} out of order); "
          + ", ".join(f"{n} {t.num_rows}" for n, t in tables.items()) + f" -> {args.out}")
    return 0

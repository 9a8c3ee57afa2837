"""The pipeline's subcommands of `fastcoord`: trace gen / trace convert / replay / whatif /
report.

Only the standard library at module level (and in what building the parsers calls):
every `fastcoord` command builds these parsers, with or without the spark extra; `run`
imports the extra's packages.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from typing import Dict, List, Optional

from .._argtypes import positive_int

COMMANDS = ("trace", "replay", "whatif", "report")


def _durations(text: str) -> list:
    """'10s,30s,45s' -> [10000, 30000, 45000] (ms, s or m: a unit is required)."""
    from .duration import parse_duration
    try:
        values = [parse_duration(v) for v in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"repeated value in {text!r}")
    return values


def _duration(text: str) -> int:
    (value,) = _durations(text)
    return value


def _reaction(text: str) -> int:
    """A duration that may be 0 (a reaction time's default, said out loud: '0ms')."""
    if re.match(r"^\s*0+(\.0*)?\s*(ms|s|m)\s*$", text):
        return 0
    return _duration(text)


def _optional_durations(text: str) -> list:
    """Like _durations; 'trace' (None) stands for each consumer's own value from the
    trace."""
    out = []
    for part in text.split(","):
        out.extend([None] if part.strip() == "trace" else _durations(part))
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"repeated value in {text!r}")
    return out


# The options that take durations (add_parsers fills it). argparse reads a word that
# starts with '-' and is not a negative number as an option, so "--session-timeout -5s"
# failed as "expected one argument" before the duration could say what is wrong.
DURATION_OPTIONS: set = set()
_NEGATIVE = re.compile(r"^-\s*[\d.]")


def join_negative_durations(words: List[str]) -> List[str]:
    """The command line with each negative-looking value of a duration option joined to
    it ('--session-timeout', '-5s' -> '--session-timeout=-5s'), as argparse takes a
    value that starts with '-'; its type then refuses it in words of its own."""
    out: List[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":                    # (what follows is not options)
            return out + words[i:]
        if word in DURATION_OPTIONS and i + 1 < len(words) and _NEGATIVE.match(words[i + 1]):
            out.append(f"{word}={words[i + 1]}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def _duration_option(parser, *names, **kw) -> None:
    """parser.add_argument for an option that takes durations (in DURATION_OPTIONS)."""
    DURATION_OPTIONS.update(parser.add_argument(*names, **kw).option_strings)


def _refused_by_kafka(args) -> str:
    """What a broker would refuse of the grid, said in one line ('' if nothing): a
    session timeout outside group.min/max.session.timeout.ms (Kafka's defaults, the
    simulated coordinator's), a heartbeat interval not below every session timeout."""
    from fastcoord.core.config import CoordinatorConfig
    config = CoordinatorConfig()
    lo, hi = config.group_min_session_timeout_ms, config.group_max_session_timeout_ms
    fixed = [s for s in args.session_timeout if s is not None]   # (trace: as recorded)
    for session in fixed:
        if not lo <= session <= hi:
            return (f"a session timeout of {session} ms is outside the broker's bounds "
                    f"[{lo} ms, {hi} ms] (group.min/max.session.timeout.ms): Kafka refuses "
                    "its joins with INVALID_SESSION_TIMEOUT")
    for interval in args.heartbeat_interval:
        if interval is not None and fixed and interval >= min(fixed):
            return (f"a heartbeat interval of {interval} ms is not below the session timeout "
                    f"of {min(fixed)} ms (Kafka's clients refuse that)")
    return ""


def _refused_by_trace_sessions(args) -> str:
    """With `trace` among the session timeouts, what _refused_by_kafka says of a
    heartbeat interval not below the shortest session timeout the trace's joins carried
    ('' if none is; a trace behind a URL is the executors' to read, not checked here):
    the simulation would otherwise run those consumers at a third of their session, a
    setting other than the one its label names."""
    fixed = [h for h in args.heartbeat_interval if h is not None]
    if not fixed or None not in args.session_timeout or "://" in args.trace:
        return ""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    data = ds.dataset(args.trace, format="parquet")
    if not {"event", "session_timeout_ms"} <= set(data.schema.names):
        return ""
    joins = data.to_table(columns=["session_timeout_ms"],
                          filter=(ds.field("event") == "join")
                          & (ds.field("session_timeout_ms") > 0))
    shortest = pc.min(joins.column(0)).as_py() if joins.num_rows else None
    if shortest is None or max(fixed) < shortest:
        return ""
    return (f"a heartbeat interval of {max(fixed)} ms is not below the session timeout of "
            f"{shortest} ms that some of the trace's consumers joined with (session=trace; "
            "Kafka's clients refuse that)")


_MASTER = re.compile(r"^(none|local|local\[(\*|[1-9]\d*)(,[1-9]\d*)?\]|yarn"
                     r"|(spark|sc|k8s|mesos)://[^\s/]+(/.*)?)$")


def _paths_absolute(args) -> None:
    """The trace and --out as absolute paths, made here on the driver: an executor
    resolves a relative one against its own work directory (on a cluster, another
    machine's), where it is not. A URL (hdfs://, s3a://, file://) is left as given."""
    for name in ("trace", "out"):
        value = getattr(args, name, None)
        if isinstance(value, str) and "://" not in value:
            setattr(args, name, os.path.abspath(value))


def _unwritable_dir(path: str, flag: str = "") -> str:
    """Why this process cannot write files in the directory `path` (made when missing),
    in a few words ('' if it can; a URL is the executors' business). Tried with a file
    made and removed: permission bits alone do not tell (root, ACLs, read-only mounts)."""
    if "://" in path:
        return ""
    name = f"{flag} {path}" if flag else path
    if os.path.exists(path) and not os.path.isdir(path):
        return f"{name} is a file, not a directory"
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".fastcoord-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"cannot write in {path}: {exc.strerror or exc}"
    return ""


def _out_inside_trace(args) -> str:
    """A trace directory is every Parquet file under it: an --out inside one would be
    read back as trace by the next run ('' when it is not inside)."""
    if "://" in args.trace or "://" in args.out or not os.path.isdir(args.trace):
        return ""
    trace, out = os.path.realpath(args.trace), os.path.realpath(args.out)
    if os.path.commonpath([trace, out]) != trace:
        return ""
    return (f"--out {args.out} is inside the trace directory {args.trace}: a later run "
            "would read its tables as trace")


def _unwritable_file(path: str) -> str:
    """Why the Parquet file `path` cannot be written, in a few words ('' if it can)."""
    if "://" in path:
        return ""
    if os.path.isdir(path):
        return (f"{path} is a directory, not a file (a trace is one Parquet file: "
                f"{os.path.join(path, 'trace.parquet')}?)")
    if path.endswith(("/", os.sep)):
        return f"{path} names a directory (it ends in /), not a file"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(parent):
        return f"no such directory: {parent}"
    if not os.path.isdir(parent):
        return f"{parent} is not a directory"
    return _unwritable_dir(parent)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}")
    return value


def _master(text: str) -> str:
    """A Spark master as Spark takes one, checked before Spark starts (a bad one made
    the JVM print pages of traceback)."""
    if not _MASTER.match(text):
        raise argparse.ArgumentTypeError(
            f"not a Spark master: {text!r} (none, local[*], local[4], spark://host:7077, "
            "sc://host:15002, yarn or k8s://https://host:port)")
    return text


def _statics(text: str) -> list:
    values = [v.strip() for v in text.split(",")]
    bad = [v for v in values if v not in ("on", "off", "trace")]
    if bad or not values or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(
            f"expected a comma list of on, off, trace (each once), got {text!r}")
    return values


def _stage(command: str, text: str) -> None:
    """A progress line on stderr (stdout keeps the final summary)."""
    print(f"fastcoord {command}: {text}", file=sys.stderr, flush=True)


# (magic bytes, compression, the command that undoes it)
_COMPRESSED = ((b"\x1f\x8b", "gzip", "gunzip -k"), (b"BZh", "bzip2", "bunzip2 -k"),
               (b"\xfd7zXZ\x00", "xz", "unxz -k"), (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"))


def _convert(args) -> int:
    """trace convert: a request log -> trace. A log that is not there, of which no
    line is a request of the format given, or without a coordinator request, is an
    error naming the file or its first line (not an empty trace); so is a --time-zone
    that names no zone."""
    from . import adapters, trace      # (run has checked the spark extra is there)
    try:
        zone = adapters.time_zone(args.time_zone)
    except ValueError as exc:
        print(f"fastcoord trace convert: --time-zone: {exc}", file=sys.stderr)
        return 2
    if not os.path.isfile(args.log):
        what = "a directory, not a log file" if os.path.isdir(args.log) else "no such file"
        print(f"fastcoord trace convert: {args.log}: {what}", file=sys.stderr)
        return 2
    try:
        with open(args.log, "rb") as f:
            head = f.read(6)
    except OSError as exc:
        print(f"fastcoord trace convert: {args.log}: cannot read it: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 2
    for magic, kind, tool in _COMPRESSED:
        if head.startswith(magic):      # a rotated log, most likely: read as text, garbage
            print(f"fastcoord trace convert: {args.log}: a {kind}-compressed file: "
                  f"decompress it first ({tool})", file=sys.stderr)
            return 2
    try:
        if args.format == "kafka":
            table, stats = adapters.from_kafka_log(args.log, tz=zone)
        else:
            table, stats = adapters.from_fastcoord_log(args.log)
    except adapters.LogFormatError as exc:
        print(f"fastcoord trace convert: {args.log}: {exc}", file=sys.stderr)
        return 2
    if stats.rows_in and not stats.rows_ok and stats.malformed:
        first = stats.examples[0].split(": ", 1)[-1] if stats.examples else ""
        print(f"fastcoord trace convert: {args.log}: no line is a {args.format} request-log "
              f"line (is --format right?); the first: {first[:120]!r}", file=sys.stderr)
        return 2
    if not stats.rows_ok:       # an empty trace: replay and whatif would refuse it
        why = ("no request-log line: the log is empty" if not stats.rows_in else
               f"no coordinator request (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, "
               f"OffsetCommit) among its {stats.rows_in} requests ({stats.unknown_event} of "
               f"other APIs, {stats.malformed} malformed): the trace would be empty")
        print(f"fastcoord trace convert: {args.log}: {why}", file=sys.stderr)
        return 2
    trace.write_trace(table, args.out)
    print(json.dumps(stats.as_dict(), indent=2))
    return 0


def add_parsers(sub) -> None:
    trace = sub.add_parser("trace", help="make or convert coordinator traces (Parquet)")
    tsub = trace.add_subparsers(dest="trace_command", required=True)
    # Each usage is one line: argparse prints it above every error, and the whole
    # synopsis of a command with many flags buried the line that says what is wrong
    gen = tsub.add_parser("gen", help="a synthetic trace, deterministic from --seed",
                          usage="%(prog)s OUT [option ...] (see --help)")
    gen.add_argument("out", help="Parquet file to write")
    gen.add_argument("--groups", type=positive_int, default=100,
                     help="consumer groups (default 100)")
    gen.add_argument("--members", type=positive_int, default=10,
                     help="mean members per group (sizes are skewed; default 10)")
    gen.add_argument("--duration-s", type=positive_int, default=600,
                     help="seconds the trace spans (default 600)")
    gen.add_argument("--seed", type=int, default=0,
                     help="random seed: the same seed and options give the same trace "
                          "(default 0)")
    gen.add_argument("--static-fraction", type=_fraction, default=0.3,
                     help="share of consumers with a group.instance.id (static "
                          "membership), 0 to 1 (default 0.3)")
    conv = tsub.add_parser("convert", help="a request log -> trace (bad lines are counted)",
                           usage="%(prog)s LOG OUT [--format kafka] [option ...] (see --help)")
    conv.add_argument("log", help="request log: fastcoord's requests.jsonl, or with "
                                  "--format kafka a broker's kafka.request.logger output")
    conv.add_argument("out", help="Parquet file to write")
    conv.add_argument("--format", choices=["fastcoord", "kafka"], default="fastcoord",
                      help="the log's format (default fastcoord; kafka: "
                           "docs/pipeline-kafka-log.md)")
    conv.add_argument("--time-zone", default="UTC", metavar="NAME",
                      help="--format kafka: the zone of the log's times that carry no offset (the "
                           "broker's local time): an IANA name such as Europe/Berlin; "
                           "default UTC")
    _job_parser(sub, "replay", "replay a trace through the coordinator, per shard")
    wi = _job_parser(sub, "whatif", "closed-loop simulation of the trace's consumers under a "
                                    "grid of group settings")
    _duration_option(wi, "--session-timeout", type=_optional_durations,
                     default=_durations("10s,30s,45s"), metavar="LIST",
                     help="session timeouts to try, e.g. trace,10s,30s,45s (suffix ms, s or "
                          "m; trace: each consumer's own, as its joins carried; default "
                          "10s,30s,45s)")
    wi.add_argument("--static", type=_statics, default=["on", "off"], metavar="LIST",
                    help="static membership: on (every consumer gets a group.instance.id), "
                         "off, trace (as recorded); default on,off")
    _duration_option(wi, "--rebalance-timeout", type=_optional_durations, default=[None],
                     metavar="LIST", help="max.poll.interval.ms to try (default: trace, each "
                                          "consumer's own)")
    _duration_option(wi, "--heartbeat-interval", type=_optional_durations, default=[None],
                     metavar="LIST", help="heartbeat.interval.ms to try (default: trace)")
    wi.add_argument("--no-baseline", dest="baseline", action="store_false",
                    help="do not add the baseline (session=trace static=trace: the settings "
                         "the trace ran with) when the grid lacks it; the report compares "
                         "every configuration with it")
    wi.add_argument("--protocol", default=None, metavar="LIST",
                    help="also compare rebalance protocols, each under every configuration: "
                         "classic-eager, classic-cooperative, consumer (comma list); the "
                         "simulated consumers own partitions (docs/pipeline-protocols.md)")
    wi.add_argument("--partitions", type=int, default=None, metavar="N",
                    help="with --protocol: partitions of each group's topic (default 12; a "
                         "trace does not record them)")
    _duration_option(wi, "--reaction", type=_reaction, default=None, metavar="DURATION",
                     help="with --protocol: how long a consumer takes to act on an answer "
                          "(e.g. 100ms; default 0, as the what-if's zero latency)")
    rp = sub.add_parser("report", help="a self-contained HTML report of a replay (and what-if) "
                                       "output directory")
    rp.add_argument("dir", help="replay output directory (report.html is written there)")
    which = rp.add_mutually_exclusive_group()
    which.add_argument("--whatif", default=None, metavar="DIR",
                       help="what-if output directory (default: DIR/whatif when it exists)")
    which.add_argument("--no-whatif", dest="with_whatif", action="store_false",
                       help="the replay alone, even where a what-if output lies")
    rp.add_argument("--top", type=positive_int, default=20,
                    help="groups in each top-groups table (rebalances, committed offsets)")


def _job_parser(sub, name: str, help: str):
    """A job over a trace: the trace, --out, --master, --impl."""
    p = sub.add_parser(name, help=help, usage="%(prog)s TRACE --out DIR [option ...] (see --help)")
    p.add_argument("trace", help="Parquet trace")
    p.add_argument("--out", required=True, help="directory for the result tables")
    p.add_argument("--master", default="local[*]", type=_master,
                   help="Spark master (local[*], local[4], spark://host:7077, "
                        "sc://host:15002), or 'none' for one process")
    p.add_argument("--impl", choices=["native", "pure"], default=None,
                   help="the coordinator's twin: native (compiled) or pure Python (default: "
                        "native when built)")
    p.add_argument("--driver-memory", default=None, metavar="SIZE", type=_size,
                   help="spark.driver.memory, e.g. 6g (in local mode it also runs the "
                        "tasks; a 10M-event replay runs in the 1g default)")
    p.add_argument("--executor-memory", default=None, metavar="SIZE", type=_size,
                   help="spark.executor.memory on a cluster, e.g. 4g")
    p.add_argument("--conf", action="append", default=[], type=_spark_conf,
                   metavar="KEY=VALUE", help="any other Spark setting (repeatable)")
    return p


_SIZE = re.compile(r"^\d+([kmgtp]b?)?$", re.IGNORECASE)


def _size(text: str) -> str:
    """A JVM memory size as Spark takes one (6g, 512m, 2gb; a bare number is bytes),
    checked here: the JVM refuses another at its start, under a PySpark traceback."""
    if not _SIZE.match(text):
        raise argparse.ArgumentTypeError(f"not a memory size: {text!r} (e.g. 6g, 512m)")
    return text


def _spark_conf(text: str):
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"--conf wants KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def spark_conf(args) -> Dict[str, str]:
    """The Spark settings a job's flags ask for (--conf, then the memory flags)."""
    conf = dict(getattr(args, "conf", None) or [])
    if getattr(args, "driver_memory", None):
        conf["spark.driver.memory"] = args.driver_memory
    if getattr(args, "executor_memory", None):
        conf["spark.executor.memory"] = args.executor_memory
    return conf


def _spark_session(master: str, conf: Optional[Dict[str, str]] = None):
    """A session, and whether this command started it (only then does it stop it: a
    session already running in this process belongs to its owner, and launch-time
    settings such as the driver's memory cannot change in a running JVM: they are
    reported as not applied; under Spark Connect `session` reports what the server
    would not take)."""
    from pyspark.sql import SparkSession

    from . import spark as sp
    existing = SparkSession.getActiveSession()
    session = sp.session(master, conf=conf, write_class_archive=existing is None)
    if existing is not None and conf and not sp.is_connect(master):
        ignored = sorted(k for k, v in conf.items()
                         if session.sparkContext.getConf().get(k, None) != v)
        if ignored:
            print(f"fastcoord: a Spark session was already running in this process; "
                  f"not applied: {', '.join(ignored)}", file=sys.stderr)
    return session, existing is None


class Refused(Exception):
    """A Spark job that cannot start (its master unreachable, its executors' Python
    unable to run it), said in one line; the command exits 2."""


def run(args) -> int:
    """The command; a job that cannot start says why in one line and exits 2, Ctrl-C
    cancels a running job, stops Spark and exits 130, without a traceback."""
    try:
        return _run(args)
    except Refused as exc:
        print(f"fastcoord {args.command}: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print(f"fastcoord {args.command}: interrupted; stopped", file=sys.stderr, flush=True)
        return 130


def _run(args) -> int:
    try:
        from . import adapters, gen, replay, trace  # noqa: F401  (adapters: the extra's check)
        if args.command == "whatif":
            from . import whatif  # noqa: F401
        if args.command == "report":
            from . import report
        if args.command in ("replay", "whatif") and args.master != "none":
            import pyspark  # noqa: F401  (checked before any work is done)
    except ImportError as exc:
        from ..cli import needs_extra
        command = args.command if args.command != "trace" else f"trace {args.trace_command}"
        return needs_extra(command, "spark", exc)
    if args.command in ("replay", "whatif") and not _readable_trace(args):
        return 2
    # where the output goes is checked before any work (and before Spark starts)
    if args.command in ("replay", "whatif"):
        refused = _out_inside_trace(args) or _unwritable_dir(args.out, "--out")
    elif args.command == "report":
        refused = _unwritable_dir(args.dir) if os.path.isdir(args.dir) else ""
    else:
        refused = _unwritable_file(args.out)
    if refused:
        command = args.command if args.command != "trace" else f"trace {args.trace_command}"
        print(f"fastcoord {command}: {refused}", file=sys.stderr)
        return 2
    if args.command == "whatif":
        return _run_whatif(args)
    if args.command == "report":
        try:
            path = report.write_report(args.dir, whatif_dir=args.whatif, top=args.top,
                                       with_whatif=args.with_whatif,
                                       progress=lambda text: _stage("report", text))
        except (FileNotFoundError, report.TraceMismatch) as exc:
            print(f"fastcoord report: {exc}", file=sys.stderr)
            return 2
        print(f"fastcoord report: {path}")
        return 0
    if args.command == "trace":
        if args.trace_command == "gen":
            table = gen.generate(groups=args.groups, members=args.members,
                                 duration_s=args.duration_s, seed=args.seed,
                                 static_fraction=args.static_fraction,
                                 progress=lambda text: _stage("trace gen", text))
            trace.write_trace(table, args.out)
            print(f"fastcoord trace gen: {table.num_rows} events -> {args.out}")
            return 0
        return _convert(args)
    _paths_absolute(args)
    os.makedirs(args.out, exist_ok=True)
    _forget_ingest(args.out)
    for name in (TIMINGS_FILE, SOURCE_FILE):   # an earlier replay's: this run writes its own
        try:
            os.unlink(os.path.join(args.out, name))
        except FileNotFoundError:
            pass
    if args.master == "none":
        good, stats = _ingest(args)
        if _no_valid_row(args, stats):
            return 2
        _stage("replay", "replaying every shard in this process")
        tables = replay.replay_local(good, impl=args.impl)
        replay.fresh_table_dirs(args.out)
        for name, t in tables.items():
            replay.write_table_file(os.path.join(args.out, name, "part-0.parquet"), t)
        rows = {name: t.num_rows for name, t in tables.items()}
    else:
        from . import spark as sp
        stats = trace.IngestStats()
        timings: Dict[str, float] = {}

        def job(session):
            with sp.StageClock(session) as clock:
                counts = sp.write_replay_spark(session, args.trace, args.out, impl=args.impl,
                                               stats=stats)
            timings.update(clock.split())
            return counts

        t0 = time.perf_counter()
        rows = _on_spark(args, "reading, validating and replaying the shards as Spark tasks",
                         job, timings)
        _ingested(args, stats)
        if _no_valid_row(args, stats):
            return 2
        _write_timings(args, timings, time.perf_counter() - t0)
    _write_source(args)
    print(f"fastcoord replay: {stats.rows_ok} events ({stats.malformed} malformed, "
          f"{stats.unknown_event} unknown, {stats.out_of_order} out of order); "
          + ", ".join(f"{n} {count}" for n, count in rows.items()) + f" -> {args.out}")
    return 0


def _on_spark(args, what: str, job, timings: Optional[Dict[str, float]] = None):
    """Run `job(session)` on a Spark session for args.master with its progress on
    stderr; the session is stopped only if this command started it. The trace is read
    by the tasks: on a cluster its path must be readable by the executors.

    Before Spark starts, a spark:// or sc:// master must accept a TCP connection
    (spark.unreachable), and on any master but a local one the executors' Python must
    import what the job needs (spark.check_executors): else Refused. Ctrl-C while the
    session runs cancels its jobs (CtrlC) and stops it, then raises KeyboardInterrupt.
    `timings` gets the seconds of the JVM's start, the executors' check and the stop."""
    from . import spark as sp
    from .whatif import SparkProgress
    timings = {} if timings is None else timings
    reason = sp.unreachable(args.master)
    if reason:
        raise Refused(f"cannot reach the Spark master {args.master} ({reason}): is it "
                      "running, and is the address right?")
    _stage(args.command, f"starting Spark ({args.master})")
    t0 = time.perf_counter()
    ctrl_c = CtrlC(None, args.command)
    session, owned = None, False
    try:
        with ctrl_c:
            # A Ctrl-C is held while the JVM starts: broken off inside PySpark's launch,
            # the JVM (which ignores SIGINT) loses its gateway and outlives the command
            try:
                with ctrl_c.launching():
                    session, owned = _spark_session(args.master, spark_conf(args))
            except Exception as exc:
                if "JAVA_GATEWAY_EXITED" not in str(exc):
                    _raise_refusal(exc)
                    raise
                # the JVM has said why on stderr, just above
                raise Refused("Spark's JVM did not start (its error is above: a "
                              "--driver-memory, --executor-memory or --conf it does not "
                              "take, or no java?)") from None
            ctrl_c.attach(session)
            timings["jvm_start"] = time.perf_counter() - t0
            if ctrl_c.pressed:
                raise KeyboardInterrupt
            if not sp.is_local(args.master):
                _check_executors(args, session, timings)
            _stage(args.command, what)
            with SparkProgress(session, args.command):
                try:
                    return job(session)
                except Exception as exc:
                    _raise_refusal(exc)
                    raise
    finally:
        if owned and session is not None:
            t0 = time.perf_counter()
            if sp.writing_class_archive() and not ctrl_c.pressed:
                _stage(args.command, "saving the JVM's classes for a faster start next time "
                                     "(once)")
            try:
                sp.end_session(session, keep_archive=not ctrl_c.pressed)
            except Exception:
                if not ctrl_c.pressed:   # (after Ctrl-C the gateway may be half gone)
                    raise
            timings["stop"] = time.perf_counter() - t0
        ctrl_c.close()


def _raise_refusal(exc: Exception) -> None:
    """Refused, when `exc` is Spark's own refusal of the job (spark.refusal): one line
    in place of pages of JVM and Python traceback."""
    from . import spark as sp
    line = sp.refusal(exc)
    if line is not None:
        raise Refused(f"Spark refused the job: {line}") from None


CANCEL_JOIN_S = 5.0


class CtrlC:
    """Within `with`: the first SIGINT cancels the session's running jobs from a thread
    of its own, so the call the main thread is blocked in returns (failed, as cancelled)
    rather than being broken off inside py4j's or gRPC's socket read (which logs a
    traceback and leaves the connection unusable for the cancel: what PySpark's own
    handler does); on leaving, a pressed Ctrl-C is a KeyboardInterrupt, whatever the
    job did meanwhile. A second SIGINT raises KeyboardInterrupt at once. Without a
    session yet (its JVM starting) the first SIGINT is only noted, and said, for the
    caller to act on once the session is there; a second one ends the processes the
    launch started (the JVM ignores SIGINT, and PySpark, broken off, forgets it) before
    it raises. Outside the main thread, nothing is installed."""

    def __init__(self, session, command: str = ""):
        self.session = session
        self.command = command
        self.pressed = False
        self._previous = None
        self._canceller = None
        self._children_before: frozenset = frozenset()

    def _on_sigint(self, signum, frame) -> None:
        if self.pressed:
            if self.session is None:
                _PY4J_QUIET.install()   # (py4j may be mid-call on the main thread)
                end_processes(descendants(os.getpid()) - self._children_before)
            raise KeyboardInterrupt
        self.pressed = True
        if self.session is None:
            _stage(self.command or "spark", "interrupted; stopping as soon as Spark has "
                                            "started")
            return
        _PY4J_QUIET.install()
        import threading
        self._canceller = threading.Thread(target=_cancel, args=(self.session,), daemon=True)
        self._canceller.start()

    @contextlib.contextmanager
    def launching(self):
        """Within: this handler stays SIGINT's. PySpark's context installs its own as it
        starts, which cancels all jobs through the gateway the main thread is calling
        and raises in the middle of that call (py4j's tracebacks, a half-made session);
        a Ctrl-C during the launch is this handler's to act on."""
        import signal
        if self._previous is None:          # not installed: not the main thread
            yield
            return
        install = signal.signal

        def keeping_ours(signum, handler):
            if signum == signal.SIGINT:
                return self._on_sigint
            return install(signum, handler)

        signal.signal = keeping_ours
        try:
            yield
        finally:
            signal.signal = install

    def attach(self, session) -> None:
        """The session, once started; its handler goes again over the one PySpark's
        SparkContext installs as it starts."""
        import signal
        self.session = session
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._on_sigint)

    def __enter__(self) -> "CtrlC":
        import signal
        import threading
        if threading.current_thread() is threading.main_thread():
            self._children_before = descendants(os.getpid())
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        import signal
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        if self.pressed and kind is not KeyboardInterrupt:
            raise KeyboardInterrupt from None
        return False

    def close(self) -> None:
        """py4j's logging back as it was, once the session is stopped and the cancelling
        thread done (one still stuck in py4j after some seconds keeps it quiet)."""
        if self._canceller is not None:
            self._canceller.join(CANCEL_JOIN_S)
            if self._canceller.is_alive():
                return
        _PY4J_QUIET.remove()


def descendants(pid: int) -> frozenset:
    """Every live descendant of `pid`, from /proc (empty where there is none)."""
    parents: Dict[int, list] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return frozenset()
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    # after the command name's closing parenthesis: state, parent
                    state, parent = f.read().rsplit(")", 1)[1].split()[:2]
            except (OSError, ValueError):
                continue
            if state != "Z":
                parents.setdefault(int(parent), []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return frozenset(found)


END_GRACE_S = 3.0


def end_processes(pids, grace_s: float = END_GRACE_S) -> None:
    """SIGTERM to each of `pids` (a JVM then runs its shutdown hooks, which remove its
    temporary files), SIGKILL to those still there after `grace_s`."""
    import signal
    left = set()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            left.add(pid)
        except OSError:
            pass
    deadline = time.monotonic() + grace_s
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {pid for pid in left if _running(pid)}
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _running(pid: int) -> bool:
    """Whether `pid` is there and not a zombie (a child is reaped by its parent:
    PySpark's, for the JVM, only once it looks)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


class _Py4jQuiet:
    """After Ctrl-C the JVM (same process group: it got the SIGINT too) goes away under
    py4j's open connections, and py4j logs each broken call with its traceback, some on
    the root logger through `logging.exception` (installing a stderr handler there as
    it does). Installed, this drops py4j's records: on the root logger by the file that
    made them, on py4j's own loggers by their level."""

    def __init__(self) -> None:
        self._installed = False
        self._level = 0

    @staticmethod
    def filter(record) -> bool:
        return os.path.basename(os.path.dirname(record.pathname)) != "py4j"

    def install(self) -> None:
        import logging
        if not self._installed:
            self._installed = True
            logging.getLogger().addFilter(self.filter)
            py4j = logging.getLogger("py4j")
            self._level = py4j.level
            py4j.setLevel(logging.CRITICAL + 1)

    def remove(self) -> None:
        import logging
        if self._installed:
            self._installed = False
            logging.getLogger().removeFilter(self.filter)
            logging.getLogger("py4j").setLevel(self._level)


_PY4J_QUIET = _Py4jQuiet()


def _check_executors(args, session, timings: Dict[str, float]) -> None:
    """spark.check_executors, its failure as Refused, its finding on stderr."""
    from . import spark as sp
    _stage(args.command, "checking the executors' Python")
    t0 = time.perf_counter()
    try:
        reports = sp.check_executors(session)
    except sp.ExecutorEnvError as exc:
        raise Refused(str(exc)) from None
    timings["executor_check"] = time.perf_counter() - t0
    for r in reports:
        _stage(args.command, f"executor Python {r['python']} ({r['version']} on {r['host']}): "
               + ", ".join(f"{m} {v}" for m, v in r["versions"].items()))


def _cancel(session) -> None:
    """Cancel the session's running jobs (after Ctrl-C; best effort: the session may be
    stopping)."""
    from . import spark as sp
    try:
        if sp.is_connect_session(session):
            session.interruptAll()
        else:
            session.sparkContext.cancelAllJobs()
    except Exception:
        pass


TIMINGS_FILE = "timings.json"
TIMING_NAMES = {"jvm_start": "JVM start", "executor_check": "executor check",
                "planning": "planning", "reading_packing": "reading/packing",
                "replay_writing": "replay+writing", "job": "job", "finishing": "finishing",
                "stop": "stop", "other": "other"}


def _write_timings(args, timings: Dict[str, float], wall: float) -> None:
    """Where the replay's time went, to OUT/timings.json and one stderr line: the
    driver's spans (TIMING_NAMES, in order; finishing: counting the rows written,
    runtime.json; other: what no span covers) and, from runtime.json, the tasks'
    seconds replaying and writing (summed over shards: core-seconds) and the replay's
    events per core-second."""
    with open(os.path.join(args.out, "runtime.json")) as f:
        shards = json.load(f)
    events = sum(r.get("events", 0) for r in shards)
    replay_s = sum(r.get("replay_s", 0.0) for r in shards)
    write_s = sum(r.get("write_s", 0.0) for r in shards)
    spans = {k: round(timings[k], 3) for k in TIMING_NAMES if k in timings}
    spans["other"] = round(max(0.0, wall - sum(spans.values())), 3)
    doc = {"master": args.master, "wall_s": round(wall, 3), "spans_s": spans,
           "tasks_core_s": {"replay": round(replay_s, 3), "write": round(write_s, 3)},
           "events": events,
           "replay_events_per_core_s": round(events / replay_s) if replay_s else None}
    with open(os.path.join(args.out, TIMINGS_FILE), "w") as f:
        json.dump(doc, f, indent=2)
    _stage(args.command, f"{wall:.1f}s: " + ", ".join(
        f"{TIMING_NAMES[k]} {v:.1f}s" for k, v in spans.items())
        + f" (tasks: replay {replay_s:.1f} core-s, writing {write_s:.1f} core-s) "
        f"-> {os.path.join(args.out, TIMINGS_FILE)}")


INGEST_FILE = "ingest.json"
SOURCE_FILE = "trace.json"


def _trace_source(args) -> dict:
    """Which trace a run read: its path and the fingerprint of its contents (the
    report checks that a replay and a what-if it shows together read the same one)."""
    from .ingest import trace_fingerprint
    return {"trace": args.trace if "://" in args.trace else os.path.abspath(args.trace),
            "trace_fingerprint": trace_fingerprint(args.trace)}


def _write_source(args) -> None:
    """A replay's OUT/trace.json (a what-if keeps the same in its summary.json)."""
    with open(os.path.join(args.out, SOURCE_FILE), "w") as f:
        json.dump(_trace_source(args), f, indent=2)


def _readable_trace(args) -> bool:
    """Whether the trace's Parquet footers read, count some rows and name the columns
    every row needs (no Spark is started for a trace that is missing, not Parquet,
    empty or without them); else the reason, said on stderr."""
    import pyarrow as pa

    from .ingest import trace_units
    from .trace import REQUIRED
    if "://" not in args.trace and not os.path.exists(args.trace):
        print(f"fastcoord {args.command}: cannot read the trace {args.trace}: no such file "
              "or directory", file=sys.stderr)
        return False
    if os.path.isfile(args.trace):
        try:            # (pyarrow's words for this ask whether the file is Parquet)
            with open(args.trace, "rb"):
                pass
        except OSError as exc:
            print(f"fastcoord {args.command}: cannot read the trace {args.trace}: "
                  f"{exc.strerror or exc}", file=sys.stderr)
            return False
    try:
        units = trace_units(args.trace)
    except (OSError, pa.ArrowInvalid) as exc:
        print(f"fastcoord {args.command}: cannot read the trace {args.trace}: {exc}",
              file=sys.stderr)
        return False
    if not units:     # (a wrong directory, most likely: nothing to replay or simulate)
        where = (" (a directory without Parquet files, or only empty ones)"
                 if os.path.isdir(args.trace) else "")
        print(f"fastcoord {args.command}: the trace {args.trace} has no rows{where}",
              file=sys.stderr)
        return False
    # A file without a column every row needs would replay as every row malformed
    missing = {}
    for unit in units:
        for name in REQUIRED:
            if name not in unit.columns:
                missing.setdefault(name, unit.path)
    if missing:
        print(f"fastcoord {args.command}: the trace {args.trace} has no "
              f"{', '.join(sorted(missing))} column (in {sorted(set(missing.values()))[0]}); "
              f"a trace needs {', '.join(REQUIRED)} (docs/pipeline.md)", file=sys.stderr)
        return False
    return True


def _forget_ingest(out: str) -> None:
    """An earlier run's counts go before this run starts: a failed run leaves none."""
    try:
        os.unlink(os.path.join(out, INGEST_FILE))
    except FileNotFoundError:
        pass


def _ingest(args):
    """Read and validate the trace in this process (ingest.read_validated: the pieces a
    Spark job's tasks read); the counts go to OUT/ingest.json."""
    from .ingest import read_validated
    _stage(args.command, f"reading {args.trace}")
    good, stats = read_validated(args.trace)
    _ingested(args, stats)
    return good, stats


def _ingested(args, stats) -> None:
    with open(os.path.join(args.out, INGEST_FILE), "w") as f:
        json.dump(stats.as_dict(), f, indent=2)
    _stage(args.command, f"{stats.rows_ok} valid events ({stats.malformed} malformed, "
                         f"{stats.unknown_event} unknown, {stats.out_of_order} out of order)")
    if stats.missing_columns:
        from .trace import missing_note
        _stage(args.command, missing_note(stats.missing_columns))


def _no_valid_row(args, stats) -> bool:
    """Whether the trace had rows but none valid (every one malformed or of an unknown
    event), said in one line on stderr: a replay or what-if of nothing is a failure,
    not a result. The counts and their examples are in OUT/ingest.json by then."""
    if stats.rows_ok or not stats.rows_in:
        return False
    kinds = [f"{n} {k}" for n, k in ((stats.malformed, "malformed"),
                                     (stats.unknown_event, "unknown")) if n]
    what = (f"all {kinds[0].split(' ', 1)[1]}" if len(kinds) == 1
            else " and ".join(kinds))
    print(f"fastcoord {args.command}: no valid row in the trace {args.trace}: "
          f"{stats.rows_in} rows, {what} (examples in "
          f"{os.path.join(args.out, INGEST_FILE)})", file=sys.stderr)
    return True


def _protocol_args_refused(args) -> str:
    """What is wrong with --protocol / --partitions / --reaction, in one line ('' if
    nothing): an unknown or repeated protocol name, a partition count below 1, the
    protocol options without --protocol. --protocol becomes the list of its names."""
    from .protocols import parse_protocols
    if args.protocol is None:
        if args.partitions is not None or args.reaction is not None:
            return "--partitions and --reaction go with --protocol"
        return ""
    try:
        args.protocol = parse_protocols(args.protocol)
    except ValueError as exc:
        return f"--protocol: {exc}"
    if args.partitions is not None and args.partitions < 1:
        return f"--partitions must be at least 1, got {args.partitions}"
    return ""


def _forget_protocols(out: str) -> None:
    """An earlier run's protocol tables go: a report must not show them beside this run's."""
    from .protocols import TABLES
    for name in TABLES:
        try:
            os.unlink(os.path.join(out, f"{name}.parquet"))
        except FileNotFoundError:
            pass


def _run_protocols(args, configs, good) -> dict:
    """The protocol comparison (every configuration under each protocol, in this
    process, on Spark runs too: it reads the trace here then); its tables to --out."""
    from . import protocols
    if good is None:
        from .ingest import read_validated
        _stage("whatif", f"reading {args.trace} for the protocol comparison")
        good, _ = read_validated(args.trace)
    partitions = args.partitions or protocols.DEFAULT_PARTITIONS
    reaction = args.reaction or 0
    _stage("whatif", f"protocols {', '.join(args.protocol)} x {len(configs)} configurations, "
                     f"{partitions} partitions a group")
    tables = _with_bar("whatif (configuration x protocol x shard)", lambda progress:
                       protocols.protocol_whatif(good, configs, args.protocol,
                                                 partitions=partitions, impl=args.impl,
                                                 reaction_ms=reaction, progress=progress))
    protocols.write_results(tables, args.out)
    return {"names": args.protocol, "partitions": partitions, "reaction_ms": reaction,
            "summary": tables["protocol_summary"].to_pylist()}


def _with_bar(label: str, job):
    """job(progress) with a progress bar on stderr from its first report (progress(done,
    total)), closed (drawn full) when it returns, its line ended where it stopped when it
    raises; job's result."""
    from .._progress import Progress
    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = Progress(total, label)
        bar.update(done)

    try:
        result = job(progress)
    except BaseException:
        if bar is not None:
            bar.stop()
        raise
    if bar is not None:
        bar.close()
    return result


def _run_whatif(args) -> int:
    from . import trace, whatif
    os.makedirs(args.out, exist_ok=True)
    refused = (_refused_by_kafka(args) or _refused_by_trace_sessions(args)
               or _protocol_args_refused(args))
    if refused:
        print(f"fastcoord whatif: {refused}", file=sys.stderr)
        return 2
    configs = whatif.make_grid(args.session_timeout, args.static, args.rebalance_timeout,
                               args.heartbeat_interval)
    if args.baseline and not any(c.is_baseline for c in configs):
        # the report's changes and recommendation are against the settings the trace ran with
        configs.append(whatif.BASELINE)
    _forget_ingest(args.out)
    _forget_protocols(args.out)
    _stage("whatif", f"{len(configs)} configurations: " + "; ".join(c.label for c in configs))
    t0 = time.perf_counter()
    good = None                       # the trace's rows, when read in this process
    if args.master == "none":
        good, stats = _ingest(args)
        if _no_valid_row(args, stats):
            return 2
        tables = _with_bar("whatif (configuration x shard)", lambda progress:
                           whatif.whatif_local(good, configs, impl=args.impl, progress=progress))
    else:
        stats = trace.IngestStats()
        tables = _on_spark(args, "reading the trace and simulating (configuration, shard) "
                                 "pairs as Spark tasks",
                           lambda session: whatif.whatif_spark(session, args.trace, configs,
                                                               impl=args.impl, stats=stats))
        _ingested(args, stats)
        if _no_valid_row(args, stats):
            return 2
    meta = dict(_trace_source(args), impl=args.impl, master=args.master,
                ingest=stats.as_dict())
    if args.protocol is not None:
        meta["protocols"] = _run_protocols(args, configs, good)
    whatif.write_results(tables, args.out, configs,
                         meta=dict(meta, seconds=round(time.perf_counter() - t0, 3)))
    print(f"fastcoord whatif: {len(configs)} configurations, {stats.rows_ok} events -> {args.out}")
    for row in tables["summary"].to_pylist():
        p50, p99 = row["crash_detect_p50_ms"], row["crash_detect_p99_ms"]
        detection = (f" p50/p99 {p50 / 1000:.1f}/{p99 / 1000:.1f}s" if p50 >= 0
                     else ": no crash detected")          # (-1: no detection to time)
        print(f"  {row['label']:<40} rebalances/h {row['rebalances_per_hour']:8.1f}  "
              f"rebalancing {row['rebalancing_ms'] / 1000:8.1f}s  false expirations "
              f"{row['false_expirations']:4d}  crash detection{detection}")
    for row in (meta.get("protocols") or {}).get("summary", []):
        print(f"  {row['protocol']:<20} {row['label']:<40} partition-unavailable "
              f"{row['partition_unavailable_s']:10.1f}s  members paused per rebalance "
              f"{row['members_paused_per_rebalance']:5.2f}  rebalances {row['rebalances']:5d}")
    return 0

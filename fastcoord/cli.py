"""The `fastcoord` command."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from ._argtypes import positive_int
from ._logclip import ClipFilter


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="fastcoord", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="simulate consumer groups on a ManualClock and report")
    demo.add_argument("--groups", type=int, default=2000)
    demo.add_argument("--members", type=int, default=10, help="members per group")
    demo.add_argument("--seconds", type=int, default=60, help="simulated seconds of heartbeats")
    demo.add_argument("--impl", choices=["native", "pure"], default=None)
    serve_parser = _add_serve_parser(sub)
    from .pipeline.cli import COMMANDS as _PIPELINE, add_parsers as _add_pipeline_parsers
    from .pipeline.cli import join_negative_durations
    _add_pipeline_parsers(sub)
    _add_loadgen_parser(sub)
    args = parser.parse_args(join_negative_durations(
        list(sys.argv[1:] if argv is None else argv)))
    if args.command == "serve" and args.config is not None:
        # The file's options go in as words before the user's, so argparse checks them
        # like flags and the command line wins.
        from .server.config_file import ConfigFileError, config_argv
        words = list(sys.argv[1:] if argv is None else argv)
        at = words.index("serve") + 1
        try:
            extra = config_argv(args.config, serve_parser._option_string_actions)
        except ConfigFileError as exc:
            serve_parser.error(str(exc))
        args = parser.parse_args(words[:at] + extra + words[at:])
    if args.command in _PIPELINE:
        from .pipeline.cli import run as _run_pipeline
        return _run_pipeline(args)
    if args.command == "serve":
        return _serve(args)
    if args.command == "loadgen":
        return _loadgen(args)
    if args.command == "demo":
        from .demo import run_demo
        return run_demo(groups=args.groups, members=args.members, seconds=args.seconds,
                        impl=args.impl)
    parser.error(f"unknown command {args.command}")
    return 2


def needs_extra(command: str, extra: str, exc: ImportError) -> int:
    """A subcommand run without its extra's packages: one line on stderr naming the
    extra to install (no traceback), exit status 2. Every subcommand imports its
    extra's packages only when it runs, so the others (and every --help) work without."""
    reason = (str(exc).splitlines() or [type(exc).__name__])[0]
    print(f"fastcoord {command} needs the {extra} extra: pip install 'fastcoord[{extra}]' "
          f"({reason})", file=sys.stderr)
    return 2


# -- fastcoord serve -----------------------------------------------------------------------

def _topic(spec: str):
    name, sep, count = spec.rpartition(":")
    if not sep or not name or not count.isdigit() or int(count) < 1:
        raise argparse.ArgumentTypeError(f"expected name:partitions (e.g. orders:12), got {spec!r}")
    return name, int(count)


def _add_serve_parser(sub) -> argparse.ArgumentParser:
    serve = sub.add_parser("serve", help="run the coordinator behind the Kafka wire protocol")
    serve.add_argument("--config", default=None, metavar="FILE",
                       help="serve options from a TOML/JSON file (flags named without dashes, "
                            "a [topics] table); the command line wins")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=9092,
                       help="port to listen on (0: any free port, printed when listening)")
    serve.add_argument("--advertised-host", default=None,
                       help="host name given to clients in Metadata/FindCoordinator")
    serve.add_argument("--topic", action="append", type=_topic, default=[], metavar="NAME:PARTITIONS",
                       help="declare a topic (repeatable), e.g. --topic orders:12")
    serve.add_argument("--group-min-session-timeout-ms", type=int, default=6000)
    serve.add_argument("--group-max-session-timeout-ms", type=int, default=1_800_000)
    serve.add_argument("--group-initial-rebalance-delay-ms", type=int, default=3000)
    _add_consumer_group_flags(serve)
    serve.add_argument("--offsets-retention-minutes", type=int, default=10080,
                       help="an Empty group's offsets (a simple consumer's: each offset) "
                            "expire this long after it became Empty (after the commit)")
    serve.add_argument("--offsets-retention-check-interval-ms", type=int, default=600_000,
                       help="how often expired offsets and unused Empty groups are removed")
    serve.add_argument("--max-frame-bytes", type=int, default=16 * 1024 * 1024)
    serve.add_argument("--max-connections", type=int, default=10_000)
    serve.add_argument("--idle-timeout-ms", type=int, default=600_000)
    serve.add_argument("--idle-grace-ms", type=positive_int, default=10_000,
                       help="at --max-connections, a connection idle this long is closed "
                            "to admit a new one (and a partial frame holding the request "
                            "budget this long while others wait is closed)")
    serve.add_argument("--max-inflight-requests", type=positive_int, default=1000,
                       help="stop reading a connection with this many requests unanswered "
                            "or held behind an unanswered one; resume at half")
    serve.add_argument("--max-inflight-bytes", type=positive_int, default=4 * 1024 * 1024,
                       help="likewise for the bytes of answers held on a connection")
    serve.add_argument("--queued-max-request-bytes", type=positive_int,
                       default=32 * 1024 * 1024,
                       help="memory all large partial frames may hold together (Kafka's "
                            "queued.max.request.bytes); past it their reading waits")
    serve.add_argument("--tick-ms", type=int, default=5, help="how often timers are advanced")
    serve.add_argument("--sasl-users", default=None, metavar="FILE",
                       help='JSON {"users": {name: password}}: require SASL/PLAIN')
    serve.add_argument("--acls", default=None, metavar="FILE",
                       help='JSON {"acls": [...]} on groups and topics (docs/security.md): '
                            'default deny what no ACL grants')
    serve.add_argument("--data-dir", default=None,
                       help="where group state (DIR/groups) and the request log "
                            "(requests.jsonl, rotated) are kept (default: ./data for the "
                            "request log, group state in memory)")
    serve.add_argument("--store", choices=["durable", "memory"], default=None,
                       help="where group metadata and committed offsets live (default: "
                            "durable when --data-dir is given, else memory)")
    serve.add_argument("--fsync", choices=["always", "interval"], default="always",
                       help="durable store: acknowledge after fsync (always) or after the "
                            "write, fsync'ing every --fsync-interval-ms (interval)")
    serve.add_argument("--fsync-interval-ms", type=int, default=1000)
    serve.add_argument("--num-shards", type=int, default=50,
                       help="offsets partitions (offsets.topic.num.partitions); fixed per data dir")
    serve.add_argument("--repair", action="store_true",
                       help="durable store: truncate a corrupt shard log at the bad record "
                            "instead of refusing to load that shard")
    serve.add_argument("--no-request-log", action="store_true", help="do not write the request log")
    serve.add_argument("--no-heartbeat-fast-path", action="store_true",
                       help="answer every Heartbeat through the general per-request path "
                            "(for comparisons; the fast path answers identically)")
    serve.add_argument("--no-heartbeat-lane", action="store_true",
                       help="serve heartbeat-only connections through the event loop too, "
                            "not from the C heartbeat lane (for comparisons; it answers "
                            "identically)")
    serve.add_argument("--status-interval-s", type=float, default=5.0,
                       help="print a status line this often (0: never)")
    serve.add_argument("--metrics-port", type=int, default=None,
                       help="serve the status counters in Prometheus' text format on "
                            "http://HOST:PORT/metrics (0: any free port, printed)")
    serve.add_argument("--event-loop", choices=["auto", "asyncio", "uvloop"], default="auto",
                       help="asyncio's own event loop or uvloop (auto: uvloop when installed)")
    serve.add_argument("--impl", choices=["native", "pure"], default=None)
    serve.add_argument("--log-level", default="INFO")
    return serve


# The consumer group protocol's (KIP-848) configs: Kafka's names, dots as dashes; each
# sets the CoordinatorConfig field of the same name with underscores (its default, and
# its bounds, are the coordinator's: a flag not given is not passed).
CONSUMER_GROUP_FLAGS = (
    "group-consumer-session-timeout-ms", "group-consumer-min-session-timeout-ms",
    "group-consumer-max-session-timeout-ms", "group-consumer-heartbeat-interval-ms",
    "group-consumer-min-heartbeat-interval-ms", "group-consumer-max-heartbeat-interval-ms",
    "group-consumer-max-size", "group-consumer-assignors", "group-consumer-migration-policy",
    "group-consumer-regex-refresh-interval-ms",
)


def _assignors(text: str):
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected a comma list of assignor names, got {text!r}")
    return names


def _add_consumer_group_flags(serve) -> None:
    for flag in CONSUMER_GROUP_FLAGS:
        if flag == "group-consumer-assignors":
            serve.add_argument("--" + flag, type=_assignors, default=None, metavar="NAMES",
                               help="server-side assignors, comma separated, the first the "
                                    "default (e.g. uniform,range)")
        elif flag == "group-consumer-migration-policy":
            serve.add_argument("--" + flag, default=None,
                               choices=["disabled", "upgrade", "downgrade", "bidirectional"],
                               help="online conversion between classic and consumer groups")
        else:
            serve.add_argument("--" + flag, type=int, default=None)


def consumer_group_config(args) -> dict:
    """The CoordinatorConfig keyword arguments of the consumer group flags given."""
    values = {flag.replace("-", "_"): getattr(args, flag.replace("-", "_"))
              for flag in CONSUMER_GROUP_FLAGS}
    return {name: value for name, value in values.items() if value is not None}


def _use_event_loop(choice: str) -> bool:
    """Install uvloop's event loop policy when asked (or, with "auto", when installed)."""
    if choice == "asyncio":
        return True
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            print("--event-loop uvloop: uvloop is not installed (pip install 'fastcoord[server]')",
                  file=sys.stderr)
            return False
        return True
    import asyncio
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def _serve(args) -> int:
    import asyncio
    import logging
    import os

    try:
        from .server import ServerConfig, serve
        from .server.requestlog import RequestLog
        from .server.security import load_security
    except ImportError as exc:  # kio missing
        return needs_extra("serve", "server", exc)
    from .core.config import CoordinatorConfig

    try:
        security = load_security(args.sasl_users, args.acls)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"fastcoord serve: bad --sasl-users/--acls file: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # (clients choose the ids and names the lines carry: each line stays short)
    for handler in logging.getLogger().handlers:
        handler.addFilter(ClipFilter())
    if security is not None and security.acls is not None and \
            not any(acl.topic is not None for acl in security.acls):
        # A file written before topic ACLs existed: it now denies every topic.
        logging.getLogger("fastcoord.server").warning(
            "%s has no topic ACL: every topic is denied (Metadata, OffsetCommit, "
            "OffsetFetch); see docs/security.md", args.acls)
    try:
        coordinator = CoordinatorConfig(
            group_min_session_timeout_ms=args.group_min_session_timeout_ms,
            group_max_session_timeout_ms=args.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
            num_shards=args.num_shards,
            offsets_retention_minutes=args.offsets_retention_minutes,
            offsets_retention_check_interval_ms=args.offsets_retention_check_interval_ms,
            **consumer_group_config(args))
    except (TypeError, ValueError) as exc:
        print(f"fastcoord serve: {exc}", file=sys.stderr)
        return 2
    store = args.store or ("durable" if args.data_dir is not None else "memory")
    if store == "durable" and args.data_dir is None:
        print("fastcoord serve: --store durable needs --data-dir", file=sys.stderr)
        return 2
    data_dir = args.data_dir if args.data_dir is not None else "data"
    config = ServerConfig(
        host=args.host, port=args.port, advertised_host=args.advertised_host,
        topics=dict(args.topic), coordinator=coordinator, impl=args.impl,
        max_frame_bytes=args.max_frame_bytes, max_connections=args.max_connections,
        idle_timeout_ms=args.idle_timeout_ms, tick_ms=args.tick_ms, security=security,
        idle_grace_ms=args.idle_grace_ms, max_inflight_requests=args.max_inflight_requests,
        max_inflight_bytes=args.max_inflight_bytes,
        queued_max_request_bytes=args.queued_max_request_bytes,
        status_interval_s=args.status_interval_s, data_dir=data_dir, store=store,
        fsync=args.fsync, fsync_interval_ms=args.fsync_interval_ms, repair=args.repair,
        metrics_port=args.metrics_port, heartbeat_fast_path=not args.no_heartbeat_fast_path,
        heartbeat_lane=not args.no_heartbeat_lane)

    def ready(server) -> None:
        topics = ", ".join(f"{t}:{n}" for t, n in sorted(config.topics.items())) or "none"
        print(f"fastcoord serve: listening on {config.host}:{server.port} "
              f"(coordinator {server.coord.impl}; topics {topics}; store {config.store}"
              + f"; event loop {type(server.loop).__module__.split('.')[0]}"
              + (f" in {os.path.join(data_dir, 'groups')}, fsync {config.fsync}"
                 if config.store == "durable" else "")
              + (f"; metrics on http://{config.host}:{server.metrics_port}/metrics"
                 if server.metrics_port is not None else "") + ")", flush=True)
        bootstrap = f"{server.apis.host}:{server.port}"
        topic = min(config.topics) if config.topics else "TOPIC"
        print(f"  point a consumer at it: bootstrap.servers={bootstrap}\n"
              f"    e.g. python -c \"from kafka import KafkaConsumer; "
              f"c = KafkaConsumer('{topic}', bootstrap_servers='{bootstrap}', "
              f"group_id='demo'); c.poll(5000); print(c.assignment())\"\n"
              f"    or, with the consumer group protocol (KIP-848): python -c \"from "
              f"confluent_kafka import Consumer; c = Consumer({{'bootstrap.servers': "
              f"'{bootstrap}', 'group.id': 'demo848', 'group.protocol': 'consumer'}}); "
              f"c.subscribe(['{topic}']); c.poll(5); print(c.assignment())\"\n"
              f"  Ctrl-C (SIGINT) or SIGTERM stops it cleanly", flush=True)

    request_log = None
    if not args.no_request_log:
        request_log = RequestLog(os.path.join(data_dir, "requests.jsonl"))
    if not _use_event_loop(args.event_loop):
        return 2
    try:
        return asyncio.run(serve(config, ready=ready, request_log=request_log))
    except ValueError as exc:    # e.g. a data dir written with another --num-shards
        print(f"fastcoord serve: {exc}", file=sys.stderr)
        return 2


# -- fastcoord loadgen ---------------------------------------------------------------------

def _add_loadgen_parser(sub) -> None:
    lg = sub.add_parser("loadgen", help="heartbeat load against a fastcoord serve; prints JSON")
    lg.add_argument("--host", default="127.0.0.1")
    lg.add_argument("--port", type=int, default=9092)
    lg.add_argument("--connections", type=int, default=None,
                    help="sockets, each beating for its share of the members (default: "
                         "100, or --members when fewer)")
    lg.add_argument("--members", type=int, default=1000, help="group members in all")
    lg.add_argument("--groups", type=int, default=100)
    lg.add_argument("--duration-s", type=float, default=10.0, help="measured seconds")
    lg.add_argument("--warmup-s", type=float, default=1.0, help="unmeasured seconds first")
    lg.add_argument("--pipeline", type=int, default=4,
                    help="heartbeat requests in flight per connection (closed loop), or at "
                         "most in flight per connection (with --rate)")
    lg.add_argument("--rate", type=float, default=0.0,
                    help="open loop: this many heartbeats/s in all (0: closed loop, as fast "
                         "as the server answers)")
    lg.add_argument("--protocol", choices=["classic", "consumer"], default="classic",
                    help="the members' group protocol: classic (JoinGroup/SyncGroup, then "
                         "Heartbeats) or consumer (KIP-848: ConsumerGroupHeartbeats until "
                         "the groups are Stable, then steady ConsumerGroupHeartbeats)")
    lg.add_argument("--topic", default="loadgen",
                    help="the topic the members subscribe to (declare it to the server, "
                         "--topic NAME:PARTITIONS, for members to get partitions)")
    lg.add_argument("--heartbeat-version", type=int, default=4, choices=range(5),
                    help="the classic Heartbeat's version (consumer: always v1)")
    lg.add_argument("--session-timeout-ms", type=int, default=300_000,
                    help="classic: the session and rebalance timeouts; consumer: the "
                         "rebalance timeout (the session timeout is the server's)")
    lg.add_argument("--setup-timeout-s", type=float, default=600.0)
    lg.add_argument("--event-loop", choices=["auto", "asyncio", "uvloop"], default="auto",
                    help="asyncio's own event loop or uvloop (auto: uvloop when installed)")
    lg.add_argument("--engine", choices=["auto", "c", "python"], default="auto",
                    help="what runs the measurement after the asyncio setup: the C engine "
                         "(little cost per heartbeat, fine pacing) or the asyncio one "
                         "(auto: C where it is built)")


def _loadgen(args) -> int:
    try:
        from .loadgen import main as loadgen_main
    except ImportError as exc:  # kio missing
        return needs_extra("loadgen", "server", exc)
    if not _use_event_loop(args.event_loop):
        return 2
    if args.connections is None:
        args.connections = max(1, min(100, args.members))
    return loadgen_main(args)


if __name__ == "__main__":
    sys.exit(main())

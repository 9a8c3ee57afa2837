"""The `fastcoord` command."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="fastcoord", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="simulate consumer groups on a ManualClock and report")
    demo.add_argument("--groups", type=int, default=2000)
    demo.add_argument("--members", type=int, default=10, help="members per group")
    demo.add_argument("--seconds", type=int, default=60, help="simulated seconds of heartbeats")
    demo.add_argument("--impl", choices=["native", "pure"], default=None)
    _add_serve_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "demo":
        from .demo import run_demo
        return run_demo(groups=args.groups, members=args.members, seconds=args.seconds,
                        impl=args.impl)
    parser.error(f"unknown command {args.command}")
    return 2


# -- fastcoord serve -----------------------------------------------------------------------

def _topic(spec: str):
    name, sep, count = spec.rpartition(":")
    if not sep or not name or not count.isdigit() or int(count) < 1:
        raise argparse.ArgumentTypeError(f"expected name:partitions (e.g. orders:12), got {spec!r}")
    return name, int(count)


def _add_serve_parser(sub) -> None:
    serve = sub.add_parser("serve", help="run the coordinator behind the Kafka wire protocol")
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
    serve.add_argument("--max-frame-bytes", type=int, default=16 * 1024 * 1024)
    serve.add_argument("--max-connections", type=int, default=10_000)
    serve.add_argument("--idle-timeout-ms", type=int, default=600_000)
    serve.add_argument("--tick-ms", type=int, default=5, help="how often timers are advanced")
    serve.add_argument("--sasl-users", default=None, metavar="FILE",
                       help='JSON {"users": {name: password}}: require SASL/PLAIN')
    serve.add_argument("--acls", default=None, metavar="FILE",
                       help='JSON {"acls": [...]}: default deny what no ACL grants')
    serve.add_argument("--data-dir", default="data",
                       help="where the request log (requests.jsonl, rotated) is written")
    serve.add_argument("--no-request-log", action="store_true", help="do not write the request log")
    serve.add_argument("--status-interval-s", type=float, default=5.0,
                       help="print a status line this often (0: never)")
    serve.add_argument("--impl", choices=["native", "pure"], default=None)
    serve.add_argument("--log-level", default="INFO")


def _serve(args) -> int:
    import asyncio
    import logging

    try:
        from .server import ServerConfig, serve
        from .server.requestlog import RequestLog
        from .server.security import load_security
    except ImportError as exc:  # kio missing
        print(f"fastcoord serve needs the server extra (pip install 'fastcoord[server]'): {exc}",
              file=sys.stderr)
        return 2
    from .config import CoordinatorConfig

    try:
        security = load_security(args.sasl_users, args.acls)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"fastcoord serve: bad --sasl-users/--acls file: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    coordinator = CoordinatorConfig(
        group_min_session_timeout_ms=args.group_min_session_timeout_ms,
        group_max_session_timeout_ms=args.group_max_session_timeout_ms,
        group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms)
    config = ServerConfig(
        host=args.host, port=args.port, advertised_host=args.advertised_host,
        topics=dict(args.topic), coordinator=coordinator, impl=args.impl,
        max_frame_bytes=args.max_frame_bytes, max_connections=args.max_connections,
        idle_timeout_ms=args.idle_timeout_ms, tick_ms=args.tick_ms, security=security,
        status_interval_s=args.status_interval_s)

    def ready(server) -> None:
        topics = ", ".join(f"{t}:{n}" for t, n in sorted(config.topics.items())) or "none"
        print(f"fastcoord serve: listening on {config.host}:{server.port} "
              f"(coordinator {server.coord.impl}; topics {topics})", flush=True)
        print(f"  point a consumer at it: bootstrap.servers={server.apis.host}:{server.port}",
              flush=True)

    request_log = None
    if not args.no_request_log:
        import os
        request_log = RequestLog(os.path.join(args.data_dir, "requests.jsonl"))
    return asyncio.run(serve(config, ready=ready, request_log=request_log))


if __name__ == "__main__":
    sys.exit(main())

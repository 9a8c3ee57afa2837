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
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo
        return run_demo(groups=args.groups, members=args.members, seconds=args.seconds,
                        impl=args.impl)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())

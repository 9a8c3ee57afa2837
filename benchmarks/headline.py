"""Rewrite the headline performance table in the top-level README.md from bench_results/.

    python benchmarks/headline.py bench_results README.md

The table sits between two marker comments in README.md and is made only from the
committed pytest-benchmark JSON files, so it is as current as the last `make bench`.
Every ratio compares two rows of the same JSON file (the same run): the machine is a
shared 2-core VM, and only same-run ratios mean anything there.
"""
from __future__ import annotations

import json
import pathlib
import sys
from typing import Dict, List, Optional, Tuple

BEGIN = "<!-- headline:begin (benchmarks/headline.py writes this block) -->"
END = "<!-- headline:end -->"

# (label, module, benchmark group, peers shown beside native, floors group or None)
ROWS: List[Tuple[str, str, str, List[str], Optional[str]]] = [
    ("heartbeat, scalar `coord.heartbeat` (100k members, random order)", "coordinator",
     "heartbeat-scalar-100k-random", ["kafka-design-native"], "floor-heartbeat-100k"),
    ("heartbeat, scalar (100k members, sequential order)", "coordinator",
     "heartbeat-scalar-100k-sequential", [], None),
    ("heartbeat, scalar, static members (100k, random order)", "coordinator",
     "heartbeat-scalar-100k-static-random", [], None),
    ("`heartbeat_batch` (100k members, random order)", "coordinator", "heartbeat-batch-100k",
     [], "floor-heartbeat_batch-100k"),
    ("`heartbeat_batch` (1M members, random order)", "coordinator", "heartbeat-batch-1000k",
     [], "floor-heartbeat_batch-1000k"),
    ("timer schedule (1M timers over 30 s)", "timer", "timer-schedule", ["heapq", "asyncio"], None),
    ("timer cancel", "timer", "timer-cancel", ["heapq", "asyncio"], None),
    ("timer re-schedule (what a heartbeat does in Kafka's design)", "timer", "timer-reschedule",
     ["heapq", "asyncio"], "floor-timer_reschedule-100k"),
    ("timer expire", "timer", "timer-expire", ["heapq", "asyncio"], None),
]


def _rate(b: dict) -> float:
    return b["extra_info"]["ops"] / b["stats"]["median"]


def _fmt(rate: float) -> str:
    if rate >= 1e6:
        return f"{rate / 1e6:.2f} M/s"
    if rate >= 1e3:
        return f"{rate / 1e3:.1f} k/s"
    return f"{rate:.1f} /s"


def _load(folder: pathlib.Path) -> Dict[str, Dict[Tuple[str, str], dict]]:
    modules: Dict[str, Dict[Tuple[str, str], dict]] = {}
    for path in folder.glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        if not isinstance(data, dict) or "benchmarks" not in data:
            continue
        modules[path.stem] = {(b["group"], b["extra_info"].get("peer")): b
                              for b in data["benchmarks"]}
    return modules


def table(folder: pathlib.Path) -> List[str]:
    modules = _load(folder)
    out = ["| workload | native | pure (native ÷ pure) | peers (native ÷ peer) "
           "| C floor: native as % of it |", "|---|---|---|---|---|"]
    for label, module, group, peers, floor_group in ROWS:
        rows = modules.get(module, {})
        native = rows.get((group, "native"))
        if native is None:
            continue
        n = _rate(native)
        pure = rows.get((group, "pure"))
        pure_cell = f"{_fmt(_rate(pure))} ({n / _rate(pure):.1f}x)" if pure else "-"
        peer_cells = [f"{p}: {_fmt(_rate(rows[(group, p)]))} ({n / _rate(rows[(group, p)]):.1f}x)"
                      for p in peers if (group, p) in rows]
        floor_cell = "-"
        floors = modules.get("floors", {})
        if floor_group and (floor_group, "floor") in floors and (floor_group, "native") in floors:
            f_rate = _rate(floors[(floor_group, "floor")])
            f_native = _rate(floors[(floor_group, "native")])
            floor_cell = f"{_fmt(f_rate)}: {100 * f_native / f_rate:.1f}%"
        out.append(f"| {label} | {_fmt(n)} | {pure_cell} | {'; '.join(peer_cells) or '-'} "
                   f"| {floor_cell} |")
    server = folder / "server.json"
    if server.exists():
        # One row per case of the server as it runs by default ("native"); the variants
        # of the same case measured in the same run ("native, no lane", "native, request
        # log") go in the peers column.
        cases: dict = {}
        for b in json.loads(server.read_text())["benchmarks"]:
            if b.get("group") != "server-heartbeat":     # e.g. the reader alone
                continue
            x = b["extra_info"]
            cases.setdefault(x.get("case"), {})[x.get("peer")] = x
        for variants in cases.values():
            x = variants.get("native")
            if x is None:
                continue
            loop = (f"open loop at {x['offered_per_s'] / 1e3:.0f} k/s offered"
                    if x.get("offered_per_s") else f"closed loop, {x['pipeline']} in flight")
            peers = "; ".join(
                f"{peer.split(', ', 1)[1]}: {v['heartbeats_per_s'] / 1e3:.1f} k/s, "
                f"p99 {v['p99_ms']:.1f} ms"
                for peer, v in variants.items() if peer != "native" and ", " in peer)
            out.append(f"| `fastcoord serve` heartbeats over loopback ({x['connections']:,} "
                       f"connections, {x['members']:,} members, {loop}) "
                       f"| {x['heartbeats_per_s'] / 1e3:.1f} k/s, p99 {x['p99_ms']:.1f} ms "
                       f"| - | {peers or '-'} | - |")
    out += ["", "The floor column comes from `test_bench_floors.py`'s own run (its native and "
            "floor rows measured side by side); the other ratios compare rows of one run of "
            "their module. Full tables, plots and profiles: "
            "[bench_results/README.md](bench_results/README.md)."]
    return out


def main(argv: Optional[List[str]] = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    folder = pathlib.Path(args[0] if args else "bench_results")
    readme = pathlib.Path(args[1] if len(args) > 1 else "README.md")
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        print(f"{readme}: no headline markers; nothing written", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + BEGIN + "\n" + "\n".join(table(folder)) + "\n" + END + tail)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

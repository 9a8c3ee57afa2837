"""Summarize a pytest-benchmark JSON file as Markdown.

    python benchmarks/summarize.py IN.json OUT.md [--command "how IN.json was made"]

One table per benchmark group: peer, median, ops/s, and "native speed-up"
(native ops/s divided by this row's ops/s: how many times faster native is;
1.00 for native itself), plus every other number found in extra_info.

Conventions (shared by every benchmark module of fastcoord):
  benchmark.group               the table the row goes to
  extra_info["peer"]            the implementation ("native", "pure", "heapq", ...)
  extra_info["ops"]             operations done by one call of the benchmarked function
  any other extra_info number   an extra column (e.g. bytes_per_entry)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
from collections import OrderedDict


def fmt_time(s):
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.2f} µs"
    return f"{s * 1e9:.1f} ns"


def fmt_rate(r):
    if r is None:
        return "-"
    if r >= 1e6:
        return f"{r / 1e6:.2f} M/s"
    if r >= 1e3:
        return f"{r / 1e3:.1f} k/s"
    return f"{r:.1f} /s"


def fmt_num(v):
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def summarize(data, command=None):
    machine = data.get("machine_info", {})
    lines = ["# Benchmark summary", ""]
    lines.append(f"- date: {data.get('datetime', '?')}")
    cpu = machine.get("cpu", {})
    # (family and model tell the VM's host processors apart where the brand does not:
    # AMD EPYC family 26 is Zen 5, family 25 Zen 3 or 4)
    generation = (f" (family {cpu['family']}, model {cpu['model']})"
                  if "family" in cpu and "model" in cpu else "")
    lines.append(f"- machine: {machine.get('node', '?')}, nproc {os.cpu_count()}, "
                 f"{cpu.get('brand_raw', platform.processor() or '?')}{generation}")
    lines.append(f"- python: {machine.get('python_implementation', '')} "
                 f"{machine.get('python_version', platform.python_version())}")
    if "python_loop_ns_end" in machine:
        start = machine.get("python_loop_ns_start")
        when = (f"{start} ns per iteration at the start of the run and " if start else "")
        lines.append(f"- machine speed: a plain Python loop (`s += i`) took {when}"
                     f"{machine['python_loop_ns_end']} ns at its end (best of 5; "
                     "benchmarks/conftest.py): compare absolute figures only with runs "
                     "where these are about the same")
    if machine.get("memory_gather_ns_end") is not None:
        start = machine.get("memory_gather_ns_start")
        when = (f"{start} ns per element at the start of the run and " if start else "")
        lines.append(f"- memory speed: a random gather (numpy `take` of 16M int64 from 128 MiB) "
                     f"took {when}{machine['memory_gather_ns_end']} ns at its end (best of 3; "
                     "benchmarks/conftest.py): the VM's memory phase, apart from the loop's")
    if command:
        lines.append(f"- command: `{command}`")
    lines.append("- ops/s = extra_info ops / median; native speed-up = native ops/s ÷ row ops/s "
                 "(how many times faster native is than that row)")
    lines.append("")

    groups = OrderedDict()
    for b in data.get("benchmarks", []):
        groups.setdefault(b.get("group") or "(no group)", []).append(b)

    for group, benches in groups.items():
        rows = []
        extra_keys = []
        for b in benches:
            info = b.get("extra_info", {}) or {}
            stats = b.get("stats", {}) or {}
            median = stats.get("median")
            ops = info.get("ops")
            rate = ops / median if ops and median else None
            peer = info.get("peer") or b.get("param") or b.get("name")
            label = peer
            for k, v in info.items():
                if k in ("peer", "ops"):
                    continue
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    if k not in extra_keys:
                        extra_keys.append(k)
                elif isinstance(v, str):
                    label = f"{label} ({v})"
            rows.append((label, peer, median, ops, rate, info))
        native_rate = {}
        for label, peer, median, ops, rate, info in rows:
            if peer == "native" and rate:
                key = label.replace("native", "", 1)
                native_rate[key] = rate
        lines.append(f"## {group}")
        lines.append("")
        head = ["peer", "median", "ops", "ops/s", "native speed-up"] + extra_keys
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for label, peer, median, ops, rate, info in rows:
            nr = native_rate.get(label.replace(peer, "", 1) if isinstance(peer, str) else "")
            if nr is None and native_rate:
                nr = next(iter(native_rate.values())) if len(native_rate) == 1 else None
            ratio = f"{nr / rate:.2f}x" if nr and rate else "-"
            cells = [str(label), fmt_time(median), fmt_num(ops) if ops else "-", fmt_rate(rate), ratio]
            cells += [fmt_num(info.get(k, "")) for k in extra_keys]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--command", default=None)
    a = ap.parse_args(argv)
    with open(a.inp) as f:
        data = json.load(f)
    command = a.command or (f"python -m pytest <benchmarks> --benchmark-only "
                            f"--benchmark-json={a.inp}; python benchmarks/summarize.py {a.inp} {a.out}")
    text = summarize(data, command)
    with open(a.out, "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

"""`fastcoord report DIR`: one self-contained HTML page from a replay output directory
and, when there is one, a what-if output directory.

Reads DIR/{responses,rebalances,expirations,groups}/ (Parquet, as `fastcoord replay`
writes them, by Spark or in one process) and DIR/ingest.json; the what-if tables from
`--whatif DIR2` or DIR/whatif/ (as `fastcoord whatif` writes them). Any of them may be
missing: the report shows what there is. The plots are matplotlib PNGs (Agg, no display
needed, no pyplot global state) embedded as base64 data URIs, so report.html can be
mailed or archived alone.
"""
from __future__ import annotations

import base64
import html
import io
import json
import os
from typing import Callable, Dict, List, Optional, Sequence

import pyarrow as pa
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

REPLAY_TABLES = ("responses", "rebalances", "expirations", "groups")

_CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2em;
       color: #222; max-width: 1100px; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f2f2f2; } td.t { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.note { color: #666; font-size: 0.9em; }
"""


def _read_dir_table(path: str) -> Optional[pa.Table]:
    import pyarrow.parquet as pq
    if os.path.isdir(path) or os.path.isfile(path):
        return pq.read_table(path)      # a directory of parts: Spark's _SUCCESS/.crc are skipped
    return None


def read_replay(directory: str) -> Dict[str, pa.Table]:
    out = {}
    for name in REPLAY_TABLES:
        t = _read_dir_table(os.path.join(directory, name))
        if t is not None:
            out[name] = t
    return out


def find_whatif(directory: str, whatif_dir: Optional[str]) -> Optional[str]:
    for d in ([whatif_dir] if whatif_dir else [os.path.join(directory, "whatif"), directory]):
        if os.path.isfile(os.path.join(d, "summary.parquet")):
            return d
    if whatif_dir:
        raise FileNotFoundError(f"no what-if output (summary.parquet) in {whatif_dir}")
    return None


# -- plots ------------------------------------------------------------------------------------

def _png(fig: Figure) -> str:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def plot_rebalances_over_time(rebalances: pa.Table, t0: int, t1: int) -> str:
    """Rebalances started per time bin (about 60 bins over the trace)."""
    import numpy as np
    starts = np.array(rebalances.column("start_ms").to_pylist(), dtype=np.float64)
    span_min = max((t1 - t0) / 60_000.0, 1e-3)
    fig = Figure(figsize=(9, 3.2))
    ax = fig.add_subplot(1, 1, 1)
    bins = np.linspace(0, span_min, 61)
    causes = sorted(set(rebalances.column("cause").to_pylist())) if "cause" in \
        rebalances.column_names else []
    cause_col = rebalances.column("cause").to_pylist() if causes else []
    bottom = np.zeros(len(bins) - 1)
    width = bins[1] - bins[0]
    for cause in causes or [None]:
        sel = starts if cause is None else starts[[c == cause for c in cause_col]]
        counts, _ = np.histogram((sel - t0) / 60_000.0, bins=bins)
        ax.bar(bins[:-1], counts, width=width, align="edge", bottom=bottom, label=cause)
        bottom += counts
    ax.set_xlabel("minutes since the trace start")
    ax.set_ylabel("rebalances started")
    ax.set_title("Rebalances over time")
    if causes:
        ax.legend(fontsize=8, ncol=min(len(causes), 5))
    return _png(fig)


def plot_rebalance_durations(rebalances: pa.Table) -> str:
    import numpy as np
    ends = rebalances.column("end_ms").to_pylist()
    d = np.array([x for x, e in zip(rebalances.column("duration_ms").to_pylist(), ends)
                  if e is not None and e >= 0], dtype=np.float64) / 1000.0
    fig = Figure(figsize=(9, 3.2))
    ax = fig.add_subplot(1, 1, 1)
    if len(d):
        ax.hist(d, bins=min(50, max(5, len(d) // 2)), color="#4c72b0")
        ax.axvline(float(np.median(d)), color="k", linestyle="--",
                   label=f"median {np.median(d):.2f}s")
        ax.legend(fontsize=8)
    ax.set_xlabel("rebalance duration (s)")
    ax.set_ylabel("rebalances")
    ax.set_yscale("log" if len(d) > 50 else "linear")
    ax.set_title("Rebalance duration distribution (finished rebalances)")
    return _png(fig)


def plot_whatif(summary: pa.Table) -> str:
    """Four panels, one bar per configuration."""
    import numpy as np
    rows = summary.to_pylist()
    labels = [r["label"].replace(" ", "\n") for r in rows]
    x = np.arange(len(rows))
    fig = Figure(figsize=(11, 6.5))
    panels = [("rebalances_per_hour", "rebalances per hour", 1.0),
              ("rebalancing_ms", "time spent rebalancing (s)", 1000.0),
              ("false_expirations", "false expirations (live members expired)", 1.0)]
    for i, (col, title, scale) in enumerate(panels):
        ax = fig.add_subplot(2, 2, i + 1)
        ax.bar(x, [r[col] / scale for r in rows], color="#4c72b0")
        ax.set_title(title, fontsize=10)
        ax.set_xticks(x)
        ax.set_xticklabels(labels, fontsize=7)
    ax = fig.add_subplot(2, 2, 4)
    p50 = [max(r["crash_detect_p50_ms"], 0) / 1000.0 for r in rows]
    p99 = [max(r["crash_detect_p99_ms"], 0) / 1000.0 for r in rows]
    ax.bar(x - 0.2, p50, width=0.4, label="p50", color="#55a868")
    ax.bar(x + 0.2, p99, width=0.4, label="p99", color="#c44e52")
    ax.set_title("crash detection latency (s)", fontsize=10)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=7)
    ax.legend(fontsize=8)
    fig.suptitle("What-if comparison")
    fig.tight_layout()
    return _png(fig)


# -- tables -------------------------------------------------------------------------------------

def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return html.escape("" if v is None else str(v))


def html_table(header: Sequence[str], rows: Sequence[Sequence], text_cols: int = 1) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(f'<td class="t">{_cell(v)}</td>' if i < text_cols else f"<td>{_cell(v)}</td>"
                        for i, v in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _ingest_section(directory: str) -> List[str]:
    path = os.path.join(directory, "ingest.json")
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        ing = json.load(f)
    keys = ("rows_in", "rows_ok", "malformed", "unknown_event", "out_of_order")
    parts = ["<h2>Ingest</h2>",
             html_table(["rows in", "valid", "malformed", "unknown event", "out of order"],
                        [[ing.get(k, 0) for k in keys]], text_cols=0)]
    if ing.get("missing_columns"):
        from .trace import missing_note
        parts.append(f"<p>{html.escape(missing_note(ing['missing_columns']))}</p>")
    if ing.get("examples"):
        parts.append("<p class='note'>Examples of rows set aside:</p><ul>" + "".join(
            f"<li><code>{html.escape(e)}</code></li>" for e in ing["examples"][:5]) + "</ul>")
    return parts


def _replay_section(tables: Dict[str, pa.Table], top: int) -> List[str]:
    parts = ["<h2>Replay</h2>"]
    reb = tables.get("rebalances")
    exp = tables.get("expirations")
    grp = tables.get("groups")
    resp = tables.get("responses")
    unfinished, started = None, reb
    if reb is not None:
        # a rebalance still open at the trace's end (end_ms -1) has no duration
        import pyarrow.compute as pc
        done = pc.greater_equal(reb.column("end_ms"), 0)
        unfinished = reb.num_rows - pc.sum(done).as_py() if reb.num_rows else 0
        reb = reb.filter(done)
    overview = [("events replayed", resp.num_rows if resp is not None else "-"),
                ("groups", grp.num_rows if grp is not None else "-"),
                ("rebalances", reb.num_rows if reb is not None else "-"),
                ("unfinished when the trace ends", "-" if unfinished is None else unfinished),
                ("time spent rebalancing (s)",
                 sum(reb.column("duration_ms").to_pylist()) / 1000.0 if reb is not None else "-"),
                ("expirations", exp.num_rows if exp is not None else "-")]
    parts.append(html_table(["", "value"], overview))
    if resp is not None and resp.num_rows and started is not None and started.num_rows:
        times = resp.column("time_ms").to_pylist()
        parts.append(f'<img alt="rebalances over time" src="'
                     f'{plot_rebalances_over_time(started, min(times), max(times))}">')
    if reb is not None and reb.num_rows:
        parts.append(f'<img alt="rebalance durations" src="{plot_rebalance_durations(reb)}">')
        causes: Dict[str, List[int]] = {}
        for c, d in zip(reb.column("cause").to_pylist(), reb.column("duration_ms").to_pylist()):
            causes.setdefault(c, []).append(d)
        parts.append("<h3>Rebalances by cause</h3>" + html_table(
            ["cause", "rebalances", "total (s)", "mean (s)"],
            [[c, len(v), sum(v) / 1000.0, sum(v) / 1000.0 / len(v)]
             for c, v in sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0]))]))
    if exp is not None and exp.num_rows:
        reasons: Dict[str, int] = {}
        for r in exp.column("reason").to_pylist():
            reasons[r] = reasons.get(r, 0) + 1
        parts.append("<h3>Expirations by reason</h3>" + html_table(
            ["reason", "members expired"], sorted(reasons.items())))
    if grp is not None and grp.num_rows:
        rows = sorted(grp.to_pylist(), key=lambda r: (-r["rebalances"], -r["rebalancing_ms"],
                                                       r["group_id"]))[:top]
        parts.append(f"<h3>Top {len(rows)} groups by rebalances</h3>" + html_table(
            ["group", "rebalances", "rebalancing (s)", "expirations", "events", "final state",
             "final members", "generation"],
            [[r["group_id"], r["rebalances"], r["rebalancing_ms"] / 1000.0, r["expirations"],
              r["events"], r["final_state"], r["final_members"], r["final_generation"]]
             for r in rows], text_cols=1))
    return parts


WHATIF_COLUMNS = [("label", "configuration"), ("rebalances", "rebalances"),
                  ("rebalances_per_hour", "per hour"), ("rebalancing_ms", "rebalancing (ms)"),
                  ("rebalance_mean_ms", "mean (ms)"), ("rebalance_p99_ms", "p99 (ms)"),
                  ("rebalancing_fraction", "fraction of group time"),
                  ("false_expirations", "false expirations"), ("crashes", "crashes"),
                  ("crashes_detected", "detected"), ("crash_detect_p50_ms", "detection p50 (ms)"),
                  ("crash_detect_p99_ms", "detection p99 (ms)"),
                  ("poll_timeouts", "poll timeouts"), ("leaves", "leaves")]


def _whatif_section(wdir: str) -> List[str]:
    from .whatif import read_results
    tables = read_results(wdir)
    summary = tables["summary"]
    parts = ["<h2>What-if</h2>",
             "<p class='note'>Closed-loop simulation of the trace's consumers under each "
             "configuration. Rebalances exclude the one that first forms each group. "
             "False expirations: members the coordinator expired while their consumer was "
             "alive. Crash detection: from the crash to the coordinator dropping the "
             "member (-1: no crash detected).</p>"]
    if summary.num_rows:
        parts.append(f'<img alt="what-if comparison" src="{plot_whatif(summary)}">')
    parts.append(html_table([h for _, h in WHATIF_COLUMNS],
                            [[r[c] for c, _ in WHATIF_COLUMNS] for r in summary.to_pylist()]))
    return parts


def write_report(directory: str, *, whatif_dir: Optional[str] = None, top: int = 20,
                 progress: Optional[Callable[[str], None]] = None) -> str:
    """Write DIR/report.html; returns its path."""
    say = progress or (lambda text: None)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"no such directory: {directory}")
    say("reading the replay tables")
    tables = read_replay(directory)
    wdir = find_whatif(directory, whatif_dir)
    if not tables and wdir is None:
        raise FileNotFoundError(f"{directory} holds neither replay tables "
                                f"({', '.join(REPLAY_TABLES)}) nor a what-if output")
    parts = [f"<h1>fastcoord report</h1><p class='note'>{html.escape(os.path.abspath(directory))}"
             "</p>"]
    parts += _ingest_section(directory)
    if tables:
        say("plotting the replay")
        parts += _replay_section(tables, top)
    if wdir is not None:
        say(f"plotting the what-if ({wdir})")
        parts += _whatif_section(wdir)
    doc = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>fastcoord report</title>"
           f"<style>{_CSS}</style></head><body>{''.join(parts)}</body></html>")
    path = os.path.join(directory, "report.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc)
    say(f"wrote {path} ({len(doc) // 1024} KiB)")
    return path

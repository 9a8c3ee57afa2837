"""`fastcoord report DIR`: one self-contained HTML page from a replay output directory
and, when there is one, a what-if output directory.

Reads DIR/{responses,rebalances,expirations,groups,offsets}/ (Parquet, as `fastcoord
replay` writes them, by Spark or in one process) and DIR/ingest.json; the what-if tables from
`--whatif DIR2` or DIR/whatif/ (as `fastcoord whatif` writes them). Any of them may be
missing: the report shows what there is. The plots are matplotlib PNGs (Agg, no display
needed, no pyplot global state) embedded as base64 data URIs, so report.html can be
mailed or archived alone.

With a what-if, the page opens with the recommendation (advice.py): what to change
against the settings the trace ran with (the baseline) and what it costs, the
configurations on the trade-off frontier and a trade-off chart. Then one section per
source, each a function returning its HTML parts (`write_report` lists them: a new
section is one more call there). Each group's first formation (its first rebalance) is
counted apart in both the replay and the what-if sections.
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
from matplotlib.text import Text

REPLAY_TABLES = ("responses", "rebalances", "expirations", "groups", "offsets")

_CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2em;
       color: #222; max-width: 1100px; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f2f2f2; } td.t { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.note { color: #666; font-size: 0.9em; }
.advice { border: 2px solid #2e7d4f; background: #f4faf6; padding: 0.4em 1.2em 0.8em;
          border-radius: 6px; }
.advice h2 { margin-top: 0.4em; border: none; }
.advice .headline { font-size: 1.2em; font-weight: 600; margin: 0.3em 0; }
.advice .cost { font-size: 1.1em; margin: 0.3em 0 0.8em; }
td.better { background: #e3f4e8; } td.worse { background: #fbe5e5; }
tr.baseline td { font-weight: 600; }
.wide { overflow-x: auto; }
.warning { border: 2px solid #b26a00; background: #fff6e5; padding: 0.5em 1em; }
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


class TraceMismatch(ValueError):
    """The replay and the what-if a report would show together read different traces."""


def _read_json(path: str) -> dict:
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def same_trace_note(directory: str, wdir: str) -> str:
    """Whether the replay in `directory` and the what-if in `wdir` read one trace: ''
    when they did; TraceMismatch (one line) when they did not, by the fingerprints both
    record (trace.json, summary.json) or else by their ingest counts; a note for the
    page when outputs of an older fastcoord record too little to tell."""
    replay = _read_json(os.path.join(directory, "trace.json"))
    whatif = _read_json(os.path.join(wdir, "summary.json"))
    rfp, wfp = replay.get("trace_fingerprint"), whatif.get("trace_fingerprint")
    if rfp and wfp:
        if rfp == wfp:
            return ""
        rpath, wpath = replay.get("trace", "?"), whatif.get("trace", "?")
        what = (f"{rpath} was rewritten between the two runs" if rpath == wpath
                else f"replay of {rpath}, what-if of {wpath}")
        raise TraceMismatch(
            f"the what-if in {wdir} is of another trace than the replay in {directory} "
            f"({what}): run the what-if on the replay's trace, or report them apart "
            "(--no-whatif for the replay)")
    counts = ("rows_in", "rows_ok", "malformed", "unknown_event")
    ringest = _read_json(os.path.join(directory, "ingest.json"))
    wingest = whatif.get("ingest") if isinstance(whatif.get("ingest"), dict) else {}
    if all(k in ringest and k in wingest for k in counts):
        rgot, wgot = ([d[k] for k in counts] for d in (ringest, wingest))
        if rgot != wgot:
            raise TraceMismatch(
                f"the what-if in {wdir} is of another trace than the replay in {directory} "
                f"(rows in/valid: what-if {wgot[0]}/{wgot[1]}, replay {rgot[0]}/{rgot[1]}): "
                "run the what-if on the replay's trace, or report them apart (--no-whatif "
                "for the replay)")
    return ("The replay and the what-if do not both record which trace they read (written "
            "by an older fastcoord): this page cannot check that they are of the same one.")


# -- plots ------------------------------------------------------------------------------------

def _counts_axis(ax, top: float) -> None:
    """A y axis of counts: integer ticks, and room above the highest bar for a legend."""
    from matplotlib.ticker import MaxNLocator
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, max(top, 1) * 1.35)


def _png(fig: Figure) -> str:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def first_formations(rebalances: pa.Table) -> List[bool]:
    """Per rebalance row, whether it is its group's first formation: the group's first
    rebalance episode (earliest start). The what-if counts the same episode apart (cause
    "initial", `initial_rebalances`); the replay marks it here, so both sections count
    rebalances the same way."""
    groups = rebalances.column("group_id").to_pylist()
    starts = rebalances.column("start_ms").to_pylist()
    first: Dict[str, int] = {}
    for i, (g, t) in enumerate(zip(groups, starts)):
        if g not in first or (t, i) < (starts[first[g]], first[g]):
            first[g] = i
    chosen = set(first.values())
    return [i in chosen for i in range(len(groups))]


def fig_rebalances_over_time(rebalances: pa.Table, t0: int, t1: int,
                              first: Optional[Sequence[bool]] = None) -> Figure:
    """Rebalances started per time bin (60 bins over the trace), stacked by cause. The
    groups' first formations (`first`), all near the start, are left out of the bars
    (their count is in the title) so they do not flatten the rest of the timeline."""
    import numpy as np
    first = list(first) if first is not None else [False] * rebalances.num_rows
    keep = [i for i, f in enumerate(first) if not f]
    starts = np.array(rebalances.column("start_ms").to_pylist(), dtype=np.float64)[keep]
    span_min = max((t1 - t0) / 60_000.0, 1e-3)
    fig = Figure(figsize=(9, 3.2))
    ax = fig.add_subplot(1, 1, 1)
    bins = np.linspace(0, span_min, 61)
    cause_col = [rebalances.column("cause").to_pylist()[i] for i in keep] \
        if "cause" in rebalances.column_names else []
    causes = sorted(set(cause_col))
    bottom = np.zeros(len(bins) - 1)
    width = bins[1] - bins[0]
    for cause in causes or [None]:
        sel = starts if cause is None else starts[[c == cause for c in cause_col]]
        counts, _ = np.histogram((sel - t0) / 60_000.0, bins=bins)
        ax.bar(bins[:-1], counts, width=width, align="edge", bottom=bottom, label=cause)
        bottom += counts
    _counts_axis(ax, float(bottom.max()) if len(bottom) else 0.0)
    ax.set_xlabel("minutes since the trace start")
    ax.set_ylabel(f"rebalances started\n(per {width * 60:.3g} s bin)")
    ax.set_title(f"Rebalances over time (the {sum(first)} first formations of groups "
                 "left out)", fontsize=10)
    if causes:
        ax.legend(fontsize=8, ncol=min(len(causes), 5))
    return fig


def fig_rebalance_durations(rebalances: pa.Table,
                             first: Optional[Sequence[bool]] = None) -> Figure:
    import numpy as np
    first = list(first) if first is not None else [False] * rebalances.num_rows
    ends = rebalances.column("end_ms").to_pylist()
    d = np.array([x for x, e, f in zip(rebalances.column("duration_ms").to_pylist(), ends, first)
                  if e is not None and e >= 0 and not f], dtype=np.float64) / 1000.0
    fig = Figure(figsize=(9, 3.2))
    ax = fig.add_subplot(1, 1, 1)
    if len(d):
        ax.hist(d, bins=min(50, max(5, len(d) // 2)), color="#4c72b0")
        ax.axvline(float(np.median(d)), color="k", linestyle="--",
                   label=f"median {np.median(d):.2f}s")
        ax.legend(fontsize=8)
    ax.set_xlabel("rebalance duration (s)")
    log = len(d) > 50
    ax.set_ylabel("rebalances (count" + (", log scale)" if log else ")"))
    ax.set_yscale("log" if log else "linear")
    if not log:
        from matplotlib.ticker import MaxNLocator
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Rebalance durations (finished rebalances, first formations left out)",
                 fontsize=10)
    return fig


def _config_labels(rows: Sequence[dict], base: Optional[int]) -> List[str]:
    return [r["label"].replace(" ", "\n") + ("\n(baseline)" if i == base else "")
            for i, r in enumerate(rows)]


def _bar_colors(n: int, base: Optional[int], color: str) -> List[str]:
    return ["#555555" if i == base else color for i in range(n)]


def fig_whatif(summary: pa.Table, base: Optional[int] = None) -> Figure:
    """Four panels, one bar (group) per configuration, the baseline's in grey: the
    rebalance rate over the trace's span, total time rebalancing, false expirations and
    undetected crashes (totals), crash-detection latency (mean, p50, p99)."""
    import numpy as np
    rows = summary.to_pylist()
    labels = _config_labels(rows, base)
    x = np.arange(len(rows))
    fig = Figure(figsize=(11, 7))
    hours = rows[0]["hours"] if rows else 0.0
    panels = [("rebalances_per_hour", "Rebalance rate", "rebalances per hour\n"
               f"(over the trace's {hours * 60:.3g} min)", 1.0, "#4c72b0"),
              ("rebalancing_ms", "Time spent rebalancing (total, all groups)",
               "group-seconds rebalancing", 1000.0, "#8172b2")]
    for i, (col, title, ylabel, scale, color) in enumerate(panels):
        ax = fig.add_subplot(2, 2, i + 1)
        ax.bar(x, [r[col] / scale for r in rows], color=_bar_colors(len(rows), base, color))
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.set_xticks(x)
        ax.set_xticklabels(labels, fontsize=7)
    ax = fig.add_subplot(2, 2, 3)
    fe = [r["false_expirations"] for r in rows]
    un = [r["crashes_undetected"] for r in rows]
    ax.bar(x - 0.2, fe, width=0.4, label="false expirations (live members expired)",
           color="#dd8452")
    ax.bar(x + 0.2, un, width=0.4, label="undetected crashes", color="#c44e52")
    ax.set_title("False expirations and undetected crashes (totals)", fontsize=10)
    ax.set_ylabel("members (count)", fontsize=9)
    _counts_axis(ax, max(fe + un + [1]))
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=7)
    ax.legend(fontsize=7)
    ax = fig.add_subplot(2, 2, 4)
    mean = [max(r["crash_detect_mean_ms"], 0) / 1000.0 for r in rows]
    p50 = [max(r["crash_detect_p50_ms"], 0) / 1000.0 for r in rows]
    p99 = [max(r["crash_detect_p99_ms"], 0) / 1000.0 for r in rows]
    ax.bar(x - 0.27, p50, width=0.27, label="p50", color="#55a868")
    ax.bar(x, mean, width=0.27, label="mean", color="#4c72b0")
    ax.bar(x + 0.27, p99, width=0.27, label="p99", color="#c44e52")
    top = max(p99 + [1.0])
    for i, r in enumerate(rows):
        if r["crashes_undetected"]:
            ax.text(i, top * 1.02, f"{r['crashes_undetected']} undetected", ha="center",
                    fontsize=7, color="#c44e52")
    ax.set_ylim(0, top * 1.15)
    ax.set_title("Crash detection latency (crash -> member dropped)", fontsize=10)
    ax.set_ylabel("seconds", fontsize=9)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=7)
    ax.legend(fontsize=8)
    fig.suptitle("What-if comparison (grey: the baseline, the settings the trace ran with)")
    fig.tight_layout()
    return fig


def fig_tradeoff(rows: Sequence[dict], adv) -> Figure:
    """The trade-off: mean crash detection (x) against false expirations (y), the area
    of each point its total time rebalancing; the frontier in colour, the pick ringed,
    the baseline a square."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator
    fig = Figure(figsize=(6.2, 3.6))
    ax = fig.add_subplot(1, 1, 1)
    xs = [max(r["crash_detect_mean_ms"], 0) / 1000.0 for r in rows]
    ys = [r["false_expirations"] for r in rows]
    reb = np.array([r["rebalancing_ms"] / 1000.0 for r in rows])
    sizes = 40 + 360 * reb / reb.max() if len(reb) and reb.max() > 0 else [80] * len(rows)
    front = set(adv.frontier)
    # configurations at the same point share one label (one line each)
    names: Dict[tuple, List[str]] = {}
    for i, r in enumerate(rows):
        short = r["label"].replace("session=", "").replace("static=", "static ")
        names.setdefault((round(xs[i], 1), ys[i]), []).append(
            short + (" (baseline)" if i == adv.baseline else ""))
    for i, r in enumerate(rows):
        ax.scatter([xs[i]], [ys[i]], s=sizes[i], marker="s" if i == adv.baseline else "o",
                   color="#2e7d4f" if i in front else "#bbbbbb", alpha=0.8,
                   edgecolors="k" if i == adv.pick else "none", linewidths=2)
    ax.set_ylim(-0.6, max(ys + [1]) * 1.3 + 0.4)
    ax.margins(x=0.25)
    ax.autoscale_view()
    firsts = {}
    for i in range(len(rows)):
        firsts.setdefault((round(xs[i], 1), ys[i]), i)
    place_labels(fig, ax, [(xs[i], ys[i], float(np.sqrt(sizes[i])) / 2)
                           for i in firsts.values()],
                 ["\n".join(names[key]) for key in firsts])
    ax.set_xlabel("mean crash detection (s)")
    ax.set_ylabel("false expirations (total)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Trade-off: green on the frontier, ringed: recommended;\n"
                 "point area: total time rebalancing", fontsize=9)
    return fig


# Where a point's label may go, in turn (offset direction, alignment): beside it first,
# then above or below, then at the diagonals.
_LABEL_SPOTS = [((1, 0), "left", "center"), ((-1, 0), "right", "center"),
                ((0, 1), "center", "bottom"), ((0, -1), "center", "top"),
                ((1, 1), "left", "bottom"), ((1, -1), "left", "top"),
                ((-1, 1), "right", "bottom"), ((-1, -1), "right", "top")]


def place_labels(fig: Figure, ax, points: Sequence[tuple], labels: Sequence[str]) -> list:
    """Annotate each point (x, y, marker radius in points) with its label at the first
    spot (_LABEL_SPOTS, nearest first) where the text stays inside the axes and overlaps
    no label placed before it and no other point's marker; failing that, no label; where
    none is free, beside it. The axes' limits must be final. Returns the annotations."""
    FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    px = fig.dpi / 72.0                        # pixels per point
    centres = [ax.transData.transform((x, y)) for x, y, _ in points]
    markers = [(cx - r * px, cy - r * px, cx + r * px, cy + r * px)
               for (cx, cy), (_, _, r) in zip(centres, points)]
    frame = ax.get_window_extent(renderer)
    taken: List[tuple] = []
    out = []
    for i, ((x, y, r), text) in enumerate(zip(points, labels)):
        chosen = None
        # first clear of other markers too, then of labels only; nearer spots first
        for avoid_markers in (True, False):
            for reach in (1.0, 2.2, 3.6):
                gap = (r + 3.0) * reach
                # a label away from its point is tied to it by a thin line
                leader = dict(arrowstyle="-", lw=0.5, color="0.4", shrinkA=1,
                              shrinkB=r) if reach > 1.0 else None
                for (dx, dy), ha, va in _LABEL_SPOTS:
                    ann = ax.annotate(text, (x, y), textcoords="offset points",
                                      xytext=(dx * gap, dy * gap), ha=ha, va=va, fontsize=7,
                                      arrowprops=leader)
                    ann.update_positions(renderer)
                    bb = Text.get_window_extent(ann, renderer)     # the text alone
                    box = (bb.x0 - 1, bb.y0 - 1, bb.x1 + 1, bb.y1 + 1)
                    if (box[0] >= frame.x0 and box[2] <= frame.x1 and box[1] >= frame.y0
                            and box[3] <= frame.y1
                            and not any(_overlap(box, t) for t in taken)
                            and not (avoid_markers and any(
                                _overlap(box, m) for j, m in enumerate(markers) if j != i))):
                        chosen = (ann, box)
                        break
                    ann.remove()
                if chosen:
                    break
            if chosen:
                break
        if chosen is None:
            (dx, dy), ha, va = _LABEL_SPOTS[0]
            ann = ax.annotate(text, (x, y), textcoords="offset points",
                              xytext=(dx * (r + 3.0), dy * (r + 3.0)), ha=ha, va=va,
                              fontsize=7)
            ann.update_positions(renderer)
            bb = Text.get_window_extent(ann, renderer)
            chosen = (ann, (bb.x0, bb.y0, bb.x1, bb.y1))
        taken.append(chosen[1])
        out.append(chosen[0])
    return out


def _overlap(a: tuple, b: tuple) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


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
    unfinished = None
    if reb is not None:
        # a rebalance still open at the trace's end (end_ms -1) has no duration
        import pyarrow.compute as pc
        done = pc.greater_equal(reb.column("end_ms"), 0)
        unfinished = reb.num_rows - pc.sum(done).as_py() if reb.num_rows else 0
        reb = reb.filter(done)
    first = first_formations(reb) if reb is not None else []
    later = [d for d, f in zip(reb.column("duration_ms").to_pylist(), first) if not f] \
        if reb is not None else []
    overview = [("events replayed", resp.num_rows if resp is not None else "-"),
                ("groups", grp.num_rows if grp is not None else "-"),
                ("first formations (each group's first rebalance, counted apart)",
                 sum(first) if reb is not None else "-"),
                ("rebalances after the first formations (total)",
                 len(later) if reb is not None else "-"),
                ("unfinished when the trace ends", "-" if unfinished is None else unfinished),
                ("time spent rebalancing after them (s, total)",
                 sum(later) / 1000.0 if reb is not None else "-"),
                ("expirations (total)", exp.num_rows if exp is not None else "-")]
    parts.append(html_table(["", "value"], overview))
    if resp is not None and resp.num_rows and reb is not None and reb.num_rows:
        times = resp.column("time_ms").to_pylist()
        parts.append(f'<img alt="rebalances over time" src="'
                     f'{_png(fig_rebalances_over_time(reb, min(times), max(times), first))}">')
    if reb is not None and reb.num_rows:
        parts.append(f'<img alt="rebalance durations" '
                     f'src="{_png(fig_rebalance_durations(reb, first))}">')
        causes: Dict[str, List[int]] = {}
        for c, d, f in zip(reb.column("cause").to_pylist(), reb.column("duration_ms").to_pylist(),
                           first):
            causes.setdefault("first formation" if f else c, []).append(d)
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
        # per group, its rebalances after its first formation (as everywhere in the report)
        count: Dict[str, int] = {}
        spent: Dict[str, int] = {}
        if reb is not None:
            for g, d, f in zip(reb.column("group_id").to_pylist(),
                               reb.column("duration_ms").to_pylist(), first):
                if not f:
                    count[g] = count.get(g, 0) + 1
                    spent[g] = spent.get(g, 0) + d
        rows = sorted(grp.to_pylist(), key=lambda r: (-count.get(r["group_id"], 0),
                                                       -spent.get(r["group_id"], 0),
                                                       r["group_id"]))[:top]
        parts.append(f"<h3>Top {len(rows)} groups by rebalances</h3>" + html_table(
            ["group", "rebalances (total, after the first formation)", "rebalancing (s, total)",
             "expirations (total)", "events", "final state", "final members", "generation"],
            [[r["group_id"], count.get(r["group_id"], 0), spent.get(r["group_id"], 0) / 1000.0,
              r["expirations"], r["events"], r["final_state"], r["final_members"],
              r["final_generation"]] for r in rows], text_cols=1))
    return parts


def _offsets_section(tables: Dict[str, pa.Table], top: int) -> List[str]:
    """The committed offsets at the trace's end (the replay's offsets table): how many
    partitions each group committed, and the `top` groups with the most in a table, the
    rest counted in a line, so the page's size does not grow with the trace's groups.
    Nothing without the table (an older replay's output); a line saying so when it is
    empty."""
    import pyarrow.compute as pc
    off = tables.get("offsets")
    if off is None:
        return []
    parts = ["<h2>Committed offsets</h2>",
             "<p class='note'>Per group, topic and partition, the last offset a commit the "
             "replay's coordinator accepted named, at the trace's end (refused commits "
             "change nothing, as in Kafka).</p>"]
    if not off.num_rows:
        parts.append("<p>None: no commit the coordinator accepted named a partition (a "
                     "trace whose commits name no partitions, such as one made before "
                     "traces carried them, has none).</p>")
        return parts
    per = off.group_by("group_id").aggregate(
        [("partition", "count"), ("topic", "count_distinct"), ("time_ms", "max")])
    per = per.sort_by([("partition_count", "descending"), ("group_id", "ascending")])
    shown = per.slice(0, top).to_pylist()
    parts.append(html_table(["", "value"], [
        ("groups with committed offsets", per.num_rows),
        ("partitions committed (total, all groups)", off.num_rows),
        ("topics", pc.count_distinct(off.column("topic")).as_py())]))
    resp = tables.get("responses")
    start = pc.min(resp.column("time_ms")).as_py() \
        if resp is not None and resp.num_rows else None
    if start is None:
        when, at = "last accepted commit (trace time, ms)", (lambda t: t)
    else:
        when, at = "last accepted commit (s after the trace's start)", \
            (lambda t: (t - start) / 1000.0)
    parts.append(f"<h3>Top {len(shown)} groups by partitions committed</h3>" + html_table(
        ["group", "partitions committed", "topics", when],
        [[r["group_id"], r["partition_count"], r["topic_count_distinct"],
          at(r["time_ms_max"])] for r in shown]))
    left = per.num_rows - len(shown)
    if left:
        rest = pc.sum(per.column("partition_count").slice(len(shown))).as_py()
        parts.append(f"<p class='note'>{left:,} more groups ({rest:,} partitions) left out: "
                     "the offsets table has every row.</p>")
    return parts


WHATIF_COLUMNS = [("label", "configuration"), ("rebalances", "rebalances (total)"),
                  ("initial_rebalances", "first formations (apart)"),
                  ("rebalances_per_hour", "rebalances per hour"),
                  ("rebalancing_ms", "rebalancing (ms, total)"),
                  ("rebalance_mean_ms", "mean (ms)"), ("rebalance_p99_ms", "p99 (ms)"),
                  ("rebalancing_fraction", "fraction of group time"),
                  ("false_expirations", "false expirations (total)"),
                  ("crashes", "crashes (total)"), ("crashes_detected", "detected"),
                  ("crashes_undetected", "undetected"),
                  ("crash_detect_mean_ms", "detection mean (ms)"),
                  ("crash_detect_p50_ms", "detection p50 (ms)"),
                  ("crash_detect_p99_ms", "detection p99 (ms)"),
                  ("poll_timeouts", "poll timeouts"), ("leaves", "leaves")]


def load_whatif(wdir: str) -> dict:
    """The what-if's summary rows, its advice and the baseline's groups rows."""
    from .advice import advise, baseline_index
    from .whatif import read_results
    tables = read_results(wdir)
    rows = [_complete(r) for r in tables["summary"].to_pylist()]
    base = baseline_index(rows)
    groups = tables.get("groups")
    base_groups = []        # (an older output's groups table has no session column)
    if base is not None and groups is not None and "session_timeout_ms" in groups.column_names:
        base_groups = [g for g in groups.to_pylist() if g["config"] == rows[base]["config"]]
    span = _span_words(rows[0]["hours"]) if rows else "the trace"
    summary = pa.Table.from_pylist(rows) if rows else tables["summary"]
    return {"summary": summary, "rows": rows, "base_groups": base_groups, "span": span,
            "advice": advise(rows, base_groups, span)}


def _complete(row: dict) -> dict:
    """A summary row of an older what-if output, with the measures it lacks derived
    (undetected crashes) or marked unknown (mean detection -1); its rates were over the
    simulated span."""
    row = dict(row)
    row.setdefault("hours", row["sim_hours"])
    row.setdefault("crashes_undetected", row["crashes"] - row["crashes_detected"])
    row.setdefault("crash_detect_mean_ms", -1.0)
    return row


def _span_words(hours: float) -> str:
    if hours >= 2:
        return f"the trace's {hours:.1f} hours"
    return f"the trace's {hours * 60:.1f} minutes"


def _recommendation_section(w: dict) -> List[str]:
    """The first screen: what to change, what it costs, the frontier."""
    from .advice import describe_baseline
    adv, rows = w["advice"], w["rows"]
    if adv is None:
        return []
    parts = ["<div class='advice' id='recommendation'><h2>Recommendation</h2>",
             f"<p class='headline'>{html.escape(adv.headline)}</p>"]
    if adv.cost:
        parts.append(f"<p class='cost'>{html.escape(adv.cost)}</p>")
    parts.append(f'<img alt="trade-off" style="float:right; max-width:48%; margin-left:1em" '
                 f'src="{_png(fig_tradeoff(rows, adv))}">')
    base = "" if adv.baseline is None else (
        f" Baseline: {html.escape(rows[adv.baseline]['label'])}, the settings the trace ran "
        f"with ({html.escape(describe_baseline(w['base_groups']))}).")
    if adv.others:
        against = "" if adv.baseline is None else " (against the baseline)"
        parts.append(f"<p>Also on the frontier{against}:</p><ul class='others'>"
                     + "".join(f"<li>{html.escape(o)}</li>" for o in adv.others) + "</ul>")
    else:
        parts.append("<p>No other configuration is on the frontier.</p>")
    if adv.beaten:
        parts.append(f"<p>{html.escape(adv.beaten)}</p>")
    parts.append(f"<p class='note'>Totals are over "
                 f"{html.escape(w['span'])} (the same span for every configuration).{base} "
                 "Frontier: the configurations no other one beats on all of false "
                 "expirations, undetected crashes, mean crash detection and total time "
                 "rebalancing; recommended: the one of them with the lowest sum of the four, "
                 "each scaled to its range over the grid.</p>")
    parts.append("<h3>On the frontier</h3>" + _delta_table(rows, adv.baseline, adv.frontier,
                                                          adv))
    parts.append("<div style='clear:both'></div></div>")
    return parts


# (header, its value in a summary row, format): lower is better on each
DELTA_COLUMNS = [
    ("rebalances (total)", lambda r: r["rebalances"], "{:,.0f}"),
    ("time rebalancing (s, total)", lambda r: r["rebalancing_ms"] / 1000.0, "{:,.1f}"),
    ("false expirations (total)", lambda r: r["false_expirations"], "{:,.0f}"),
    ("mean crash detection (s)",
     lambda r: r["crash_detect_mean_ms"] / 1000.0 if r["crash_detect_mean_ms"] >= 0 else None,
     "{:,.1f}"),
    ("undetected crashes", lambda r: r["crashes_undetected"], "{:,.0f}"),
]


def _delta_cell(v, b, fmt: str) -> str:
    if v is None:
        return "<td>-</td>"
    text = fmt.format(v)
    if b is None or v == b:
        return f"<td>{text}</td>"
    cls = "better" if v < b else "worse"
    sign = "+" if v > b else "-"
    return f"<td class='{cls}'>{text} ({sign}{fmt.format(abs(v - b))})</td>"


def _delta_table(rows: Sequence[dict], base: Optional[int], which: Sequence[int],
                 adv=None) -> str:
    """The configurations `which`, each value with its change against the baseline."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in
                   ["configuration", "frontier"] + [c for c, _, _ in DELTA_COLUMNS])
    body = []
    front = set(adv.frontier) if adv is not None else set()
    for i in which:
        r = rows[i]
        tag = " (baseline)" if i == base else ""
        tag += " (recommended)" if adv is not None and i == adv.pick and i != base else ""
        cells = [f"<td class='t'>{html.escape(r['label'] + tag)}</td>",
                 f"<td class='t'>{'yes' if i in front else ''}</td>"]
        for _, value, fmt in DELTA_COLUMNS:
            cells.append(_delta_cell(value(r), None if base is None else value(rows[base]), fmt))
        cls = " class='baseline'" if i == base else ""
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _whatif_section(w: dict) -> List[str]:
    summary, rows, adv = w["summary"], w["rows"], w["advice"]
    base = adv.baseline if adv is not None else None
    parts = ["<h2>What-if</h2>",
             "<p class='note'>Closed-loop simulation of the trace's consumers under each "
             "configuration. Rebalances exclude each group's first formation (its first "
             "rebalance), counted apart, as in the replay section. Rates are over "
             f"{html.escape(w['span'])}, the same for every configuration. "
             "False expirations: members the coordinator expired while their consumer was "
             "alive. Crash detection: from the crash to the coordinator dropping the "
             "member (-1: no crash detected); undetected crashes: not dropped by the end of "
             "the simulation, a session timeout past the trace's end.</p>"]
    if summary.num_rows:
        parts.append(f'<img alt="what-if comparison" src="{_png(fig_whatif(summary, base))}">')
    if base is not None:
        parts.append("<h3>Every configuration against the baseline</h3>"
                     + _delta_table(rows, base, range(len(rows)), adv))
    parts.append("<h3>All measures</h3><div class='wide'>" + html_table(
        [h for _, h in WHATIF_COLUMNS],
        [[r.get(c, "-") for c, _ in WHATIF_COLUMNS] for r in rows]) + "</div>")
    return parts


PROTOCOL_COLUMNS = [("label", "configuration"), ("protocol", "protocol"),
                    ("partitions", "partitions"),
                    ("partition_unavailable_s", "partition-unavailable (s)"),
                    ("unavailable_fraction", "fraction of partition-time"),
                    ("rebalances", "rebalances"), ("members_paused", "members paused"),
                    ("members_paused_per_rebalance", "paused per rebalance"),
                    ("partitions_revoked", "partitions revoked")]


def plot_protocols(summary: pa.Table) -> str:
    """Partition-unavailable seconds: a group of bars per configuration, one per protocol."""
    import numpy as np
    rows = summary.to_pylist()
    labels = list(dict.fromkeys(r["label"] for r in rows))
    protocols = list(dict.fromkeys(r["protocol"] for r in rows))
    x = np.arange(len(labels))
    width = 0.8 / max(1, len(protocols))
    fig = Figure(figsize=(9, 3.4))
    ax = fig.add_subplot(1, 1, 1)
    for i, proto in enumerate(protocols):
        value = {r["label"]: r["partition_unavailable_s"] for r in rows if r["protocol"] == proto}
        ax.bar(x + (i - (len(protocols) - 1) / 2) * width, [value.get(lb, 0.0) for lb in labels],
               width=width, label=proto)
    ax.set_xticks(x)
    ax.set_xticklabels([lb.replace(" ", "\n") for lb in labels], fontsize=7)
    ax.set_ylabel("partition-unavailable (s)")
    ax.set_title("Partition-unavailable time by rebalance protocol")
    ax.legend(fontsize=8)
    return _png(fig)


def protocol_section(wdir: str) -> List[str]:
    """The protocol comparison of a what-if run with --protocol (nothing without one)."""
    from .protocols import read_results
    summary = read_results(wdir).get("protocol_summary")
    if summary is None:
        return []
    settings = ""
    try:
        with open(os.path.join(wdir, "summary.json")) as f:
            run = json.load(f).get("protocols") or {}
        settings = (f" Simulated with {run['partitions']} partitions a group and a reaction "
                    f"of {run['reaction_ms']} ms to each answer.")
    except (OSError, ValueError, KeyError, TypeError):
        pass                              # (tables without their run's settings: none said)
    parts = ["<h2>Rebalance protocols</h2>",
             "<p class='note'>The same consumers under classic eager rebalancing, classic "
             "cooperative rebalancing (KIP-429) and the consumer group protocol (KIP-848), "
             "each owning partitions (docs/pipeline-protocols.md). Partition-unavailable: "
             "time a partition had no live owner (released, revoked or its owner crashed, "
             "until its next owner took it), over the same window for every row. Members "
             "paused: per rebalance, the staying members that had to stop consuming a "
             "partition. Partitions revoked: a leaving member's included."
             + html.escape(settings) + "</p>"]
    if summary.num_rows:
        parts.append(f'<img alt="protocol comparison" src="{plot_protocols(summary)}">')
    parts.append(html_table([h for _, h in PROTOCOL_COLUMNS],
                            [[r[c] for c, _ in PROTOCOL_COLUMNS] for r in summary.to_pylist()],
                            text_cols=2))
    return parts


def write_report(directory: str, *, whatif_dir: Optional[str] = None, top: int = 20,
                 progress: Optional[Callable[[str], None]] = None,
                 with_whatif: bool = True) -> str:
    """Write DIR/report.html; returns its path. `with_whatif` False: the replay alone,
    whatever what-if output lies in or under DIR. TraceMismatch when the replay and the
    what-if were of different traces."""
    say = progress or (lambda text: None)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"no such directory: {directory}")
    wdir = find_whatif(directory, whatif_dir) if with_whatif else None
    # (before any work: a refusal is the command's only line)
    replayed = any(os.path.exists(os.path.join(directory, name)) for name in REPLAY_TABLES)
    note = same_trace_note(directory, wdir) if replayed and wdir is not None else ""
    say("reading the replay tables")
    tables = read_replay(directory)
    if not tables and wdir is None:
        raise FileNotFoundError(f"{directory} holds neither replay tables "
                                f"({', '.join(REPLAY_TABLES)}) nor a what-if output")
    parts = [f"<h1>fastcoord report</h1><p class='note'>{html.escape(os.path.abspath(directory))}"
             "</p>"]
    if note:
        parts.append(f"<p class='warning'>{html.escape(note)}</p>")
    w = load_whatif(wdir) if wdir is not None else None
    if w is not None:
        say("computing the recommendation")
        parts += _recommendation_section(w)
    parts += _ingest_section(directory)
    if tables:
        say("plotting the replay")
        parts += _replay_section(tables, top)
        parts += _offsets_section(tables, top)
    if w is not None:
        say(f"plotting the what-if ({wdir})")
        parts += _whatif_section(w)
        parts += protocol_section(wdir)
    doc = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>fastcoord report</title>"
           f"<style>{_CSS}</style></head><body>{''.join(parts)}</body></html>")
    path = os.path.join(directory, "report.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc)
    say(f"wrote {path} ({len(doc) // 1024} KiB)")
    return path

"""`fastcoord report`: a self-contained HTML page with embedded PNG plots and the key
tables, from replay and what-if outputs written by the CLI."""
import base64
import json
import os
import re

import pyarrow.compute as pc
import pytest

pytest.importorskip("matplotlib")
from fastcoord.cli import main
from fastcoord.pipeline.gen import generate
from fastcoord.pipeline.report import TraceMismatch, write_report
from fastcoord.pipeline.trace import write_trace

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """A replay and a what-if of the same small synthetic trace, in one process."""
    d = tmp_path_factory.mktemp("report")
    trace = str(d / "t.parquet")
    write_trace(generate(groups=8, members=5, duration_s=180, seed=4, crash_per_hour=20), trace)
    out = str(d / "out")
    assert main(["replay", trace, "--out", out, "--master", "none", "--impl", "pure"]) == 0
    assert main(["whatif", trace, "--out", os.path.join(out, "whatif"), "--master", "none",
                 "--session-timeout", "10s,45s", "--static", "on,off", "--impl", "pure"]) == 0
    return out


def _images(doc):
    return [base64.b64decode(b) for b in re.findall(r'src="data:image/png;base64,([^"]+)"', doc)]


def test_report_with_whatif(outputs, capsys):
    assert main(["report", outputs]) == 0
    cap = capsys.readouterr()
    path = os.path.join(outputs, "report.html")
    assert cap.out.strip() == f"fastcoord report: {path}"
    assert "fastcoord report: plotting the what-if" in cap.err      # progress lines
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    images = _images(doc)
    # the trade-off, rebalances over time, duration distribution, what-if comparison
    assert len(images) == 4 and all(img.startswith(PNG_MAGIC) for img in images)
    assert "src=\"http" not in doc and "<script" not in doc        # nothing to fetch
    for heading in ("Recommendation", "Ingest", "Replay", "Top 8 groups by rebalances",
                    "Rebalances by cause", "What-if"):
        assert heading in doc, heading
    # the recommendation comes first: what to change and what it costs
    assert doc.index("Recommendation") < doc.index("<h2>Ingest")
    # the tables carry the numbers of the outputs they come from
    import pyarrow.parquet as pq
    groups = pq.read_table(os.path.join(outputs, "groups")).to_pylist()
    busiest = max(groups, key=lambda r: (r["rebalances"], r["rebalancing_ms"]))
    # (its rebalances after its first formation, counted apart as everywhere)
    assert f'<td class="t">{busiest["group_id"]}</td><td>{busiest["rebalances"] - 1:,}</td>' \
        in doc
    with open(os.path.join(outputs, "whatif", "summary.json")) as f:
        summary = json.load(f)["summary"]
    for row in summary:
        assert f'<td class="t">{row["label"]}</td><td>{row["rebalances"]:,}</td>' in doc
    with open(os.path.join(outputs, "ingest.json")) as f:
        ingest = json.load(f)
    assert f"<td>{ingest['rows_in']:,}</td>" in doc


def test_report_without_whatif(tmp_path, outputs):
    # a replay directory alone: two plots, no what-if section
    import shutil
    d = str(tmp_path / "replay-only")
    shutil.copytree(outputs, d, ignore=shutil.ignore_patterns("whatif", "report.html"))
    path = write_report(d)
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    assert len(_images(doc)) == 2 and "What-if" not in doc and "Recommendation" not in doc
    # ... and a what-if directory alone
    path = write_report(os.path.join(outputs, "whatif"))
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    assert len(_images(doc)) == 2 and "What-if" in doc and "Top " not in doc
    assert "Recommendation" in doc


def test_report_of_nothing(tmp_path, capsys):
    with pytest.raises(FileNotFoundError):
        write_report(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        write_report(str(tmp_path / "missing"))
    assert main(["report", str(tmp_path)]) == 2
    assert "neither replay tables" in capsys.readouterr().err


# -- the baseline and the recommendation ------------------------------------------------------

def _row(config, label, *, session=-1, static="trace", fe=0, crashes=4, undetected=0,
         mean_ms=8000.0, rebalancing_ms=60_000, rebalances=10):
    return dict(config=config, label=label, session_timeout_ms=session, static=static,
                rebalance_timeout_ms=-1, heartbeat_interval_ms=-1, false_expirations=fe,
                crashes=crashes, crashes_detected=crashes - undetected,
                crashes_undetected=undetected,
                crash_detect_mean_ms=mean_ms if crashes > undetected else -1.0,
                rebalancing_ms=rebalancing_ms, rebalances=rebalances, hours=0.05)


BASE_GROUPS = [dict(session_timeout_ms=10_000, static_incarnations=0)] * 3


def test_advice_follows_the_data():
    from fastcoord.pipeline.advice import advise
    base = _row(0, "session=trace static=trace", fe=4, mean_ms=8000.0, rebalancing_ms=90_000)
    longer = _row(1, "session=20s static=trace", session=20_000, fe=1, mean_ms=17_800.0,
                  rebalancing_ms=50_000, rebalances=7)
    worse = _row(2, "session=10s static=off", session=10_000, static="off", fe=5,
                 mean_ms=9000.0, rebalancing_ms=95_000, rebalances=12)
    adv = advise([base, longer, worse], BASE_GROUPS, "the trace's 3.0 minutes")
    assert (adv.baseline, adv.frontier, adv.pick) == (0, [0, 1], 1)
    assert adv.headline.startswith("Set session.timeout.ms from 10 s to 20 s "
                                   "(session=20s static=trace): in the trace's 3.0 minutes it "
                                   "removes 3 of 4 false expirations")
    assert ("cuts total time rebalancing by 40.0 s (90.0 s → 50.0 s) and saves 3 rebalances "
            "(10 → 7).") in adv.headline
    assert adv.cost == "It costs +9.8 s mean crash detection (8.0 s → 17.8 s)."
    # other numbers, other words: a 20 s session that expires as many live members keeps
    # the trace's settings (each is better on one count, the baseline on the balance)
    same = dict(longer, false_expirations=4, rebalancing_ms=88_000)
    adv = advise([base, same, worse], BASE_GROUPS)
    assert adv.pick == 0 and adv.headline.startswith("Keep the settings the trace ran with")
    assert adv.others == ["session=20s static=trace: cuts total time rebalancing by 2.0 s "
                          "(90.0 s → 88.0 s) and saves 3 rebalances (10 → 7); costs +9.8 s "
                          "mean crash detection (8.0 s → 17.8 s)"]
    # a configuration better on three counts, the same on the fourth (no crash left
    # undetected either way): it costs nothing, but it does not beat the baseline "on
    # every count", as the panel said beside a table showing the tie
    better = _row(1, "session=10s static=on", session=10_000, static="on", fe=0,
                  mean_ms=7000.0, rebalancing_ms=30_000, rebalances=3)
    adv = advise([base, better, worse], BASE_GROUPS)
    assert adv.frontier == [1] and adv.pick == 1
    assert "group.instance.id on every consumer" in adv.headline
    assert adv.cost == ("It costs nothing on these measures: it is better than the settings "
                        "the trace ran with on 3 of the 4 and no worse on the other.")
    assert adv.beaten == ("The settings the trace ran with are beaten on 3 of the 4 counts, "
                          "and matched on the other, by session=10s static=on.")
    # better on all four: beaten on every count
    leaky = dict(base, crashes_undetected=1, crashes_detected=3)
    adv = advise([leaky, better, worse], BASE_GROUPS)
    assert adv.cost == ("It costs nothing on these measures: it beats the settings the "
                        "trace ran with on every count.")
    assert adv.beaten == ("The settings the trace ran with are beaten on every count by "
                          "session=10s static=on.")
    # undetected crashes count: a long session that leaves crashes undetected is no
    # improvement in detection
    blind = _row(1, "session=45s static=trace", session=45_000, fe=0, undetected=4,
                 rebalancing_ms=40_000)
    adv = advise([base, blind], BASE_GROUPS)
    assert adv.frontier == [0, 1]
    assert "4 crashes left undetected" in " ".join([adv.cost] + adv.others)


def test_advice_without_a_baseline():
    from fastcoord.pipeline.advice import advise
    a = _row(0, "session=10s static=on", session=10_000, static="on", fe=2)
    b = _row(1, "session=30s static=on", session=30_000, static="on", fe=0, mean_ms=20_000.0)
    adv = advise([a, b])
    assert adv.baseline is None and adv.frontier == [0, 1]
    assert "has no baseline" in adv.headline and adv.cost == ""


def test_baseline_described_per_group():
    from fastcoord.pipeline.advice import describe_baseline
    groups = [dict(session_timeout_ms=10_000, static_incarnations=2),
              dict(session_timeout_ms=45_000, static_incarnations=0),
              dict(session_timeout_ms=10_000, static_incarnations=0)]
    assert describe_baseline(groups) == (
        "session.timeout.ms as each consumer's joins carried (10 s in 2 groups, 45 s in 1 "
        "group), static membership in 1 of 3 groups")
    assert describe_baseline(groups[:1]) == ("session.timeout.ms 10 s (as recorded), static "
                                             "membership in 1 of 1 groups")


def _recommendation(doc):
    m = re.search(r"<div class='advice' id='recommendation'>(.*?)<h3>On the frontier", doc, re.S)
    assert m, "no recommendation panel"
    return m.group(1)


def test_report_recommendation_from_the_data(outputs, tmp_path):
    """The panel says what the advice computed from this what-if; other numbers in the
    same output give another conclusion."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq
    from fastcoord.pipeline.advice import advise
    from fastcoord.pipeline.report import load_whatif
    w = load_whatif(os.path.join(outputs, "whatif"))
    rows = w["rows"]
    assert rows[w["advice"].baseline]["label"] == "session=trace static=trace"
    with open(write_report(outputs), encoding="utf-8") as f:
        doc = f.read()
    panel = _recommendation(doc)
    import html as h
    assert h.escape(w["advice"].headline) in panel
    # every configuration against the baseline, the baseline marked
    table = doc[doc.index("Every configuration against the baseline"):]
    for r in rows:
        assert r["label"] in table
    assert "session=trace static=trace (baseline)" in table
    # the same output with the baseline's false expirations raised: another conclusion
    d = str(tmp_path / "w")
    shutil.copytree(os.path.join(outputs, "whatif"), d)
    changed = [dict(r, false_expirations=r["false_expirations"] + (50 if i == w["advice"].baseline
                                                                      else 0))
               for i, r in enumerate(pq.read_table(os.path.join(d, "summary.parquet")).to_pylist())]
    from fastcoord.pipeline.whatif import SUMMARY_SCHEMA
    pq.write_table(pa.Table.from_pylist(changed, schema=SUMMARY_SCHEMA),
                   os.path.join(d, "summary.parquet"))
    with open(write_report(d), encoding="utf-8") as f:
        other = _recommendation(f.read())
    assert other != panel
    adv = advise(load_whatif(d)["rows"], w["base_groups"], w["span"])
    assert adv.pick != adv.baseline and h.escape(adv.headline) in other
    assert "removes 50 of " in other


def test_report_counts_first_formations_apart(outputs):
    import pyarrow.parquet as pq
    from fastcoord.pipeline.report import first_formations
    reb = pq.read_table(os.path.join(outputs, "rebalances"))
    reb = reb.filter(pc.greater_equal(reb.column("end_ms"), 0))    # (unfinished: apart)
    first = first_formations(reb)
    groups = set(reb.column("group_id").to_pylist())
    assert sum(first) == len(groups)          # one per group: its earliest rebalance
    for g in groups:
        rows = [(t, f) for t, f, gg in zip(reb.column("start_ms").to_pylist(), first,
                                            reb.column("group_id").to_pylist()) if gg == g]
        assert min(rows)[1] and sum(f for _, f in rows) == 1
    with open(write_report(outputs), encoding="utf-8") as f:
        doc = f.read()
    later = reb.num_rows - len(groups)
    assert (f"<td class=\"t\">first formations (each group&#x27;s first rebalance, counted "
            f"apart)</td><td>{len(groups)}</td>") in doc
    assert (f"<td class=\"t\">rebalances after the first formations (total)</td>"
            f"<td>{later}</td>") in doc
    assert f'<td class="t">first formation</td><td>{len(groups)}</td>' in doc
    # the what-if says it counts them the same way, and shows its count
    assert "counted apart, as in the replay section" in doc
    assert "first formations (apart)" in doc


def test_charts_have_units_and_show_undetected_crashes(outputs):
    import pyarrow.parquet as pq
    from fastcoord.pipeline.report import (fig_rebalance_durations, fig_rebalances_over_time,
                                           fig_tradeoff, fig_whatif, first_formations,
                                           load_whatif)
    reb = pq.read_table(os.path.join(outputs, "rebalances"))
    reb = reb.filter(pc.greater_equal(reb.column("end_ms"), 0))    # (unfinished: apart)
    first = first_formations(reb)
    t1 = max(reb.column("start_ms").to_pylist())
    w = load_whatif(os.path.join(outputs, "whatif"))
    figs = [fig_rebalances_over_time(reb, 0, t1, first), fig_rebalance_durations(reb, first),
            fig_whatif(w["summary"], w["advice"].baseline), fig_tradeoff(w["rows"], w["advice"])]
    for fig in figs:
        for ax in fig.axes:
            assert ax.get_ylabel() and ax.get_xlabel() or ax.get_xticklabels(), ax.get_title()
            assert ax.get_ylabel(), ax.get_title()
    # the timeline's bars leave the first formations out: they sum to the later ones
    ax = figs[0].axes[0]
    assert sum(p.get_height() for p in ax.patches) == reb.num_rows - sum(first)
    assert f"the {sum(first)} first formations" in ax.get_title()
    # the what-if chart has an undetected-crash series, one bar per configuration
    ax = [a for a in figs[2].axes if "undetected" in a.get_title()][0]
    got = {c.get_label(): [p.get_height() for p in c] for c in ax.containers}
    assert got["undetected crashes"] == [r["crashes_undetected"] for r in w["rows"]]
    assert "totals" in ax.get_title()
    # a configuration with undetected crashes is named on the latency panel
    stub = pa_summary([dict(r, crashes_undetected=3) if i == 0 else r
                       for i, r in enumerate(w["rows"])])
    ax = [a for a in fig_whatif(stub, None).axes if "latency" in a.get_title()][0]
    assert "3 undetected" in [t.get_text() for t in ax.texts]


def pa_summary(rows):
    import pyarrow as pa
    return pa.Table.from_pylist(rows)


# -- in a real browser ----------------------------------------------------------------------

WINDOW = (1280, 800)      # a laptop's first screen

# appended to a copy of the report (the report itself has no script): after the page has
# loaded, the rendered size of every image and where the recommendation's lines end
PROBE = """<script>
window.addEventListener('load', function () {
  function box(el) { var r = el.getBoundingClientRect();
                     return {w: r.width, h: r.height, top: r.top, bottom: r.bottom}; }
  var panel = document.getElementById('recommendation');
  var out = {viewport: window.innerHeight, images: [], panel: null};
  for (var i = 0; i < document.images.length; i++) {
    var img = document.images[i];
    out.images.push({alt: img.alt, natural: img.naturalWidth, box: box(img)});
  }
  if (panel) {
    out.panel = {headline: panel.querySelector('.headline').innerText,
                 headline_box: box(panel.querySelector('.headline')),
                 cost: panel.querySelector('.cost').innerText,
                 cost_box: box(panel.querySelector('.cost'))};
  }
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _chromium():
    """Debian's chromium (make test installs it when missing, as root). Under CI or
    `make test` a missing browser fails the test: it never skips there."""
    import shutil
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI") or os.environ.get("FASTCOORD_BROWSER_TESTS") == "required":
        pytest.fail("no headless Chromium (the Makefile's chromium target installs it)")
    pytest.skip("no Chromium on this machine (make test installs it; CI fails without it)")


def _browse(browser, profile, args, timeout=90):
    """One headless Chromium run, bounded in time; its process group is killed if it
    overruns. Returns its stdout."""
    import signal
    import subprocess
    proc = subprocess.Popen(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--run-all-compositor-stages-before-draw",      # (else a screenshot has blank tiles)
         "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
         f"--window-size={WINDOW[0]},{WINDOW[1]}"] + args,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    return out.decode()


def test_report_in_a_browser(outputs, tmp_path):
    """Chromium renders the report: its four charts have a size on the page, and the
    first screen says what to change and what it costs."""
    import html as h

    from fastcoord.pipeline.report import load_whatif
    browser = _chromium()
    path = write_report(outputs)
    advice = load_whatif(os.path.join(outputs, "whatif"))["advice"]
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    probe = tmp_path / "probe.html"
    probe.write_text(doc.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = _browse(browser, tmp_path / "profile", ["--virtual-time-budget=10000",
                                                  "--dump-dom", probe.as_uri()])
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert m, dom[-2000:]
    got = json.loads(h.unescape(m.group(1)))
    alts = [img["alt"] for img in got["images"]]
    assert alts == ["trade-off", "rebalances over time", "rebalance durations",
                    "what-if comparison"]
    for img in got["images"]:
        assert img["natural"] > 100 and img["box"]["w"] > 200 and img["box"]["h"] > 150, img
    panel = got["panel"]
    assert panel["headline"] == advice.headline and panel["cost"] == advice.cost
    # both lines within the first screen (the window less what headless keeps of its frame)
    assert got["viewport"] > 600 and panel["cost_box"]["bottom"] <= got["viewport"]
    assert panel["headline_box"]["top"] < panel["cost_box"]["top"]
    # the screenshot of the first screen: the panel's frame and a chart are on it
    shot = tmp_path / "first-screen.png"
    _browse(browser, tmp_path / "profile", ["--virtual-time-budget=10000",
                                            f"--screenshot={shot}", path_uri(path)])
    import numpy as np
    from PIL import Image
    img = Image.open(shot).convert("RGB")
    assert img.size == WINDOW
    px = np.asarray(img).reshape(-1, 3).astype(int)
    frame = int((px == (0x2e, 0x7d, 0x4f)).all(axis=1).sum())      # the panel's border
    assert frame > 2 * WINDOW[0], frame
    ink = int((px.sum(axis=1) < 600).sum())
    assert ink > 0.02 * len(px), ink                               # text and a chart


def path_uri(path):
    import pathlib
    return pathlib.Path(path).absolute().as_uri()


def test_a_rebalance_unfinished_at_the_end_is_counted_as_such(tmp_path):
    """`fastcoord replay` writes a rebalance the trace ends inside (end -1) and the
    committed offsets; the report counts the open rebalance as unfinished, apart from
    the finished ones and their time (not as a rebalance of -1 ms)."""
    import pyarrow.parquet as pq

    from fastcoord.pipeline.trace import from_rows
    from helpers.traces import J, crash_trace
    finished = crash_trace().to_pylist()           # two finished rebalances, 8001 ms
    for r in finished:
        if r["event"] == "heartbeat" and r["member_id"] == "a" and r["time_ms"] == 30000:
            r["event"] = "commit"
            r["offsets"] = [{"topic": "t", "partition": 0, "offset": 5}]
    opened = [dict(time_ms=44000, group_id="late", member_id=m, event="join", **J)
              for m in ("x", "x")]
    trace = str(tmp_path / "t.parquet")
    write_trace(from_rows(finished + opened), trace)
    out = str(tmp_path / "out")
    assert main(["replay", trace, "--out", out, "--master", "none"]) == 0
    reb = pq.read_table(os.path.join(out, "rebalances")).to_pylist()
    assert sorted((r["group_id"], r["end_ms"]) for r in reb) == [
        ("g", 6000), ("g", 24001), ("late", -1)]
    offsets = pq.read_table(os.path.join(out, "offsets")).to_pylist()
    assert [(r["group_id"], r["topic"], r["partition"], r["offset"], r["time_ms"])
            for r in offsets] == [("g", "t", 0, 5, 30000)]
    with open(write_report(out), encoding="utf-8") as f:
        doc = f.read()
    # g's first formation is counted apart, its second rebalance is the one after it
    second = [r for r in reb if r["group_id"] == "g" and r["end_ms"] == 24001][0]
    assert "first formations (each group&#x27;s first rebalance, counted apart)</td><td>1<" \
        in doc
    assert '<td class="t">rebalances after the first formations (total)</td><td>1</td>' in doc
    assert '<td class="t">unfinished when the trace ends</td><td>1</td>' in doc
    assert ('<td class="t">time spent rebalancing after them (s, total)</td>'
            f'<td>{second["duration_ms"] / 1000.0}</td>') in doc


def _write_table(directory, name, table):
    import pyarrow.parquet as pq
    os.makedirs(os.path.join(directory, name), exist_ok=True)
    pq.write_table(table, os.path.join(directory, name, "part-0.parquet"))


def test_the_committed_offsets_section_counts_each_groups_partitions(tmp_path):
    """The replay's offsets table in the report: per group its partitions committed, the
    top groups (by that count) in a table of at most `top` rows, the rest counted in a
    line; a table with no rows says so; no table (an older output), no section."""
    from fastcoord.pipeline.replay import OFFSETS_SCHEMA, RESPONSES_SCHEMA
    import pyarrow as pa
    rows = []
    for g in range(25):                  # g-00 commits 1 partition ... g-24 commits 25
        for p in range(g + 1):
            rows.append(dict(shard=0, group_id=f"g-{g:02d}", topic=f"t{p % 2}", partition=p,
                             offset=100 + p, time_ms=1_000_000 + 1000 * g + p))
    d = str(tmp_path / "out")
    _write_table(d, "offsets", pa.Table.from_pylist(rows, OFFSETS_SCHEMA))
    _write_table(d, "responses", pa.Table.from_pylist(
        [dict(shard=0, seq=0, time_ms=1_000_000, group_id="g-00", member_id="m",
              event="commit", error=0, answered_ms=1_000_000)], RESPONSES_SCHEMA))
    with open(write_report(d, top=20), encoding="utf-8") as f:
        doc = f.read()
    section = doc[doc.index("<h2>Committed offsets</h2>"):]
    assert '<td class="t">groups with committed offsets</td><td>25</td>' in section
    assert '<td class="t">partitions committed (total, all groups)</td><td>325</td>' in section
    assert '<td class="t">topics</td><td>2</td>' in section
    assert "<h3>Top 20 groups by partitions committed</h3>" in section
    # the busiest first: 25 partitions in 2 topics, its last commit 24.024 s in
    assert '<td class="t">g-24</td><td>25</td><td>2</td><td>24.024</td>' in section
    listed = re.findall(r'<td class="t">(g-\d\d)</td>', section)
    assert listed == [f"g-{g:02d}" for g in range(24, 4, -1)]
    # g-00..g-04 left out: 5 groups, 1+2+3+4+5 partitions
    assert "5 more groups (15 partitions) left out" in section

    _write_table(d, "offsets", OFFSETS_SCHEMA.empty_table())
    with open(write_report(d), encoding="utf-8") as f:
        doc = f.read()
    assert "<h2>Committed offsets</h2>" in doc and "<p>None: no commit" in doc
    assert "groups by partitions committed" not in doc

    import shutil
    shutil.rmtree(os.path.join(d, "offsets"))
    with open(write_report(d), encoding="utf-8") as f:
        assert "Committed offsets" not in f.read()


def test_a_grid_without_a_baseline_is_not_compared_with_one(tmp_path):
    """whatif --no-baseline: the panel said the grid has no baseline and then listed the
    other frontier configurations "(against the baseline)"."""
    trace = str(tmp_path / "t.parquet")
    write_trace(generate(groups=10, members=10, duration_s=120, seed=1), trace)
    out = str(tmp_path / "out")
    assert main(["replay", trace, "--out", out, "--master", "none"]) == 0
    assert main(["whatif", trace, "--out", os.path.join(out, "whatif"), "--master", "none",
                 "--session-timeout", "10s,30s", "--static", "off", "--no-baseline"]) == 0
    with open(write_report(out), encoding="utf-8") as f:
        doc = f.read()
    panel = _recommendation(doc)
    assert "has no baseline" in panel and "Also on the frontier" in panel  # (both are)
    assert "against the baseline" not in doc


@pytest.mark.parametrize("top", ["0", "-1"])
def test_report_top_must_be_at_least_one(outputs, capsys, top):
    """--top -1 titled the replay's table "Top 9 groups" (a slice to the last but one)
    and the offsets' "Top 0 groups"; --top 0 gave empty tables. Now argparse refuses
    both (exit 2)."""
    with pytest.raises(SystemExit) as exc:
        main(["report", outputs, "--top", top])
    assert exc.value.code == 2
    assert "argument --top: expected a whole number of at least 1" in capsys.readouterr().err


def test_baseline_says_how_many_consumers_are_static():
    """'static membership in 94 of 100 groups' was said of a trace where 3 consumers
    in 10 had a group.instance.id (a group counted with one static member among many),
    beside a headline advising static membership on every consumer. The consumers
    (each restart counted) are now said too when the groups mix."""
    from fastcoord.pipeline.advice import describe_baseline
    groups = [dict(session_timeout_ms=10_000, incarnations=10, static_incarnations=3),
              dict(session_timeout_ms=10_000, incarnations=5, static_incarnations=0)]
    assert describe_baseline(groups) == (
        "session.timeout.ms 10 s (as recorded), static membership in 1 of 2 groups "
        "for 3 of their 10 consumers counting restarts")
    every = [dict(groups[0], static_incarnations=10), groups[1]]
    assert describe_baseline(every).endswith("static membership in 1 of 2 groups")


def _grid_rows(sessions, crowded):
    """What-if rows of a session x static grid: detection near the session, false
    expirations falling with it; `crowded`: the short sessions' points almost on one
    another."""
    rows = []
    for s in sessions:
        for static in ("off", "on"):
            rows.append(dict(label=f"session={s}s static={static}",
                             crash_detect_mean_ms=s * 900 + (300 if static == "on" else 0),
                             false_expirations=(int(s <= 10) if crowded
                                                else {10: 3, 30: 1, 45: 0}[s]
                                                + (static == "off")),
                             rebalancing_ms=(60 - s) * 1000 * (0.5 if static == "on" else 1)))
    return rows


@pytest.mark.parametrize("sessions, crowded", [((10, 30, 45), False),
                                               ((6, 8, 10, 12, 20, 30, 45), True)])
def test_tradeoff_chart_labels_do_not_overlap(sessions, crowded):
    """The trade-off chart's point labels went above and below their points in turn:
    on a default grid the label of the point above ran into the label of the point
    below it, and close points' labels were drawn over one another. No two labels'
    text boxes overlap now, and every label is inside the axes."""
    from types import SimpleNamespace

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    from fastcoord.pipeline.report import fig_tradeoff
    rows = _grid_rows(sessions, crowded)
    fig = fig_tradeoff(rows, SimpleNamespace(frontier=[0, 1, 3], baseline=1, pick=3))
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    boxes = []
    for ann in ax.texts:
        ann.update_positions(renderer)
        boxes.append(Text.get_window_extent(ann, renderer))
    assert len(boxes) == len(rows)            # every configuration at a point of its own
    frame = ax.get_window_extent(renderer)
    for i, a in enumerate(boxes):
        assert frame.x0 <= a.x0 and a.x1 <= frame.x1 and frame.y0 <= a.y0 and a.y1 <= frame.y1
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (ax.texts[i].get_text(), a, b)


# -- a replay and a what-if of different traces --------------------------------------------------

def _replay_and_whatif(tmp_path, replay_trace, whatif_trace):
    out = str(tmp_path / "out")
    assert main(["replay", replay_trace, "--out", out, "--master", "none"]) == 0
    assert main(["whatif", whatif_trace, "--out", os.path.join(out, "whatif"), "--master",
                 "none", "--session-timeout", "10s", "--static", "off", "--no-baseline"]) == 0
    return out


def test_a_whatif_of_another_trace_is_refused(tmp_path, capsys):
    """The report showed the replay of one trace beside the what-if (and the
    recommendation) of another, silently: a stale DIR/whatif, a wrong --whatif. It now
    refuses in one line, exit 2, and writes no page. A copy of the replay's trace
    elsewhere is the same trace."""
    a, b, copy = (str(tmp_path / n) for n in ("a.parquet", "b.parquet", "copy.parquet"))
    write_trace(generate(groups=3, members=3, duration_s=60, seed=1), a)
    write_trace(generate(groups=3, members=3, duration_s=60, seed=2), b)
    import shutil
    shutil.copy(a, copy)
    out = _replay_and_whatif(tmp_path, a, b)
    capsys.readouterr()
    assert main(["report", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fastcoord report: the what-if in ")
    assert f"(replay of {a}, what-if of {b})" in err
    assert not os.path.exists(os.path.join(out, "report.html"))
    with pytest.raises(TraceMismatch):
        write_report(out, whatif_dir=os.path.join(out, "whatif"))
    assert err.endswith("(--no-whatif for the replay)")
    # each is still reported on its own
    assert main(["report", os.path.join(out, "whatif")]) == 0
    assert main(["report", out, "--no-whatif"]) == 0
    with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
        doc = f.read()
    assert "<h2>Replay" in doc and "What-if" not in doc
    os.unlink(os.path.join(out, "report.html"))
    # the same trace at another path: accepted, no warning
    assert main(["whatif", copy, "--out", os.path.join(out, "whatif"), "--master", "none",
                 "--session-timeout", "10s", "--static", "off", "--no-baseline"]) == 0
    assert main(["report", out]) == 0
    with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
        assert "class='warning'" not in f.read()
    # a trace rewritten at the replay's path after it: another trace
    write_trace(generate(groups=3, members=3, duration_s=60, seed=3), a)
    assert main(["whatif", a, "--out", os.path.join(out, "whatif"), "--master", "none",
                 "--session-timeout", "10s", "--static", "off", "--no-baseline"]) == 0
    capsys.readouterr()
    assert main(["report", out]) == 2
    assert f"({a} was rewritten between the two runs)" in capsys.readouterr().err


def test_outputs_that_do_not_record_their_trace(tmp_path, capsys):
    """Outputs of an older fastcoord record no fingerprint: different ingest counts
    still tell two traces apart; equal ones cannot, which the page says."""
    a, b = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    write_trace(generate(groups=3, members=3, duration_s=60, seed=1), a)
    write_trace(generate(groups=5, members=3, duration_s=60, seed=2), b)
    out = _replay_and_whatif(tmp_path, a, b)
    os.unlink(os.path.join(out, "trace.json"))
    capsys.readouterr()
    assert main(["report", out]) == 2
    assert "(rows in/valid: what-if " in capsys.readouterr().err
    out = _replay_and_whatif(tmp_path / "same", a, a)
    os.unlink(os.path.join(out, "trace.json"))
    assert main(["report", out]) == 0
    with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
        assert "this page cannot check that they are of the same one" in f.read()

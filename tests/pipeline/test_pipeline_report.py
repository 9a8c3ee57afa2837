"""`fastcoord report`: a self-contained HTML page with embedded PNG plots and the key
tables, from replay and what-if outputs written by the CLI."""
import base64
import json
import os
import re

import pytest

pytest.importorskip("matplotlib")
from fastcoord.cli import main
from fastcoord.pipeline.gen import generate
from fastcoord.pipeline.report import write_report
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
    # rebalances over time, duration distribution, what-if comparison
    assert len(images) == 3 and all(img.startswith(PNG_MAGIC) for img in images)
    assert "src=\"http" not in doc and "<script" not in doc        # nothing to fetch
    for heading in ("Ingest", "Replay", "Top 8 groups by rebalances", "Rebalances by cause",
                    "What-if"):
        assert heading in doc, heading
    # the tables carry the numbers of the outputs they come from
    import pyarrow.parquet as pq
    groups = pq.read_table(os.path.join(outputs, "groups")).to_pylist()
    busiest = max(groups, key=lambda r: (r["rebalances"], r["rebalancing_ms"]))
    assert f'<td class="t">{busiest["group_id"]}</td><td>{busiest["rebalances"]:,}</td>' in doc
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
    assert len(_images(doc)) == 2 and "What-if" not in doc
    # ... and a what-if directory alone
    path = write_report(os.path.join(outputs, "whatif"))
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    assert len(_images(doc)) == 1 and "What-if" in doc and "Top " not in doc


def test_report_of_nothing(tmp_path, capsys):
    with pytest.raises(FileNotFoundError):
        write_report(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        write_report(str(tmp_path / "missing"))
    assert main(["report", str(tmp_path)]) == 2
    assert "neither replay tables" in capsys.readouterr().err


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
    assert '<td class="t">rebalances</td><td>2</td>' in doc
    assert '<td class="t">unfinished when the trace ends</td><td>1</td>' in doc
    assert '<td class="t">time spent rebalancing (s)</td><td>8.001</td>' in doc

"""The README's headline performance table is the one the committed results give.

`make bench` rewrites both bench_results/ and the README's table (benchmarks/headline.py);
this fails when one was committed without the other.
"""
from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import headline  # noqa: E402


def test_readme_table_matches_committed_results():
    text = (ROOT / "README.md").read_text()
    block = text.split(headline.BEGIN, 1)[1].split(headline.END, 1)[0].strip("\n")
    expected = headline.table(ROOT / "bench_results")
    assert block.splitlines() == expected
    # Every row names native's figure and at least the scalar and batch heartbeat rows are there.
    assert any(line.startswith("| heartbeat, scalar") for line in expected)
    assert any(line.startswith("| `heartbeat_batch` (1M") for line in expected)


def test_rewrite_is_idempotent(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{headline.BEGIN}\nstale\n{headline.END}\noutro\n")
    assert headline.main([str(ROOT / "bench_results"), str(readme)]) == 0
    once = readme.read_text()
    assert "stale" not in once and once.startswith("intro\n") and once.endswith("outro\n")
    assert headline.main([str(ROOT / "bench_results"), str(readme)]) == 0
    assert readme.read_text() == once


def test_missing_markers_write_nothing(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("no markers\n")
    assert headline.main([str(ROOT / "bench_results"), str(readme)]) == 1
    assert readme.read_text() == "no markers\n"

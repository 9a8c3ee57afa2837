"""Each subcommand needs only its own extra: `fastcoord serve` (and every --help) and
`fastcoord demo` run without the spark extra's packages; a pipeline command run
without them says in one line which extra to install.

The packages are blocked in the subprocess by a sitecustomize on its PYTHONPATH that
puts a meta-path finder first, raising ModuleNotFoundError for the names in
FASTCOORD_TEST_BLOCK (as if they were not installed).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers.server import ROOT, ServerProc

SPARK_EXTRA = ("pyspark", "pyarrow", "pandas", "matplotlib", "grpc", "zstandard")
SERVER_EXTRA = ("kio", "uvloop")

BLOCKER = '''\
import importlib.abc
import os
import sys

_BLOCKED = frozenset(filter(None, os.environ.get("FASTCOORD_TEST_BLOCK", "").split(",")))


class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Blocked())
'''


@pytest.fixture
def block(tmp_path, monkeypatch):
    """block(*names): this test's subprocesses see those top-level packages as missing."""
    site = tmp_path / "blocker"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = [str(site), str(ROOT)] + inherited
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))

    def names(*blocked: str) -> None:
        monkeypatch.setenv("FASTCOORD_TEST_BLOCK", ",".join(blocked))
    return names


def fastcoord(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fastcoord", *args], cwd=str(ROOT),
                          capture_output=True, text=True, timeout=timeout)


def test_the_blocker_blocks(block):
    block(*SPARK_EXTRA, *SERVER_EXTRA)
    for name in ("pyarrow", "pyspark.sql", "kio"):
        proc = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=str(ROOT),
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 1 and "ModuleNotFoundError" in proc.stderr, name
    proc = subprocess.run([sys.executable, "-c", "import fastcoord; print(fastcoord.__file__)"],
                          cwd=str(ROOT), capture_output=True, text=True, timeout=30)
    assert proc.stdout.startswith(str(ROOT)), proc.stdout + proc.stderr


@pytest.mark.parametrize("args", [["--help"], ["serve", "--help"], ["demo", "--help"],
                                  ["replay", "--help"], ["whatif", "--help"]],
                         ids=" ".join)
def test_help_needs_only_the_base_packages(block, args):
    block(*SPARK_EXTRA, *SERVER_EXTRA)
    proc = fastcoord(*args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: fastcoord") and proc.stderr == ""


def test_demo_needs_only_the_base_packages(block):
    block(*SPARK_EXTRA, *SERVER_EXTRA)
    proc = fastcoord("demo", "--groups", "20", "--members", "3", "--seconds", "30")
    assert proc.returncode == 0, proc.stderr
    assert "groups by state: {'Stable': 20}" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_serve_runs_without_the_spark_extra(block, tmp_path):
    block(*SPARK_EXTRA)
    server = ServerProc(tmp_path / "server.log")    # durable store in tmp_path
    try:
        assert "store durable" in server.first_line
        assert server.loaded_line is not None
    finally:
        code = server.stop()
    assert code == 0, server.log()
    assert "Traceback" not in server.log()


def test_serve_without_the_server_extra_names_it(block):
    block(*SERVER_EXTRA)
    proc = fastcoord("serve", "--port", "0", "--no-request-log")
    assert proc.returncode == 2
    assert proc.stderr == ("fastcoord serve needs the server extra: "
                           "pip install 'fastcoord[server]' (No module named 'kio')\n")


@pytest.mark.parametrize("args", [
    ["replay", "t.parquet", "--out", "out", "--master", "none"],
    ["replay", "t.parquet", "--out", "out"],
    ["whatif", "t.parquet", "--out", "out", "--master", "none"],
    ["report", "out"],
    ["trace", "gen", "t.parquet"],
    ["trace", "convert", "requests.jsonl", "t.parquet"],
], ids=" ".join)
def test_pipeline_commands_without_the_spark_extra_name_it(block, tmp_path, args):
    block(*SPARK_EXTRA)
    command = " ".join(args[:2] if args[0] == "trace" else args[:1])
    proc = fastcoord(*[str(tmp_path / a) if "." in a or a == "out" else a for a in args])
    assert proc.returncode == 2
    assert proc.stderr == (f"fastcoord {command} needs the spark extra: "
                           f"pip install 'fastcoord[spark]' (No module named 'pyarrow')\n")
    assert not (tmp_path / "out").exists()


def test_spark_replay_without_pyspark_names_the_extra(block, tmp_path):
    """With pyarrow but not pyspark, a replay on a Spark master says so before it
    starts (the single-process replay needs no pyspark)."""
    block("pyspark")
    trace = str(tmp_path / "t.parquet")
    made = fastcoord("trace", "gen", trace, "--groups", "2", "--members", "2",
                     "--duration-s", "30")
    assert made.returncode == 0, made.stderr
    proc = fastcoord("replay", trace, "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr == ("fastcoord replay needs the spark extra: "
                           "pip install 'fastcoord[spark]' (No module named 'pyspark')\n")
    local = fastcoord("replay", trace, "--out", str(tmp_path / "out"), "--master", "none")
    assert local.returncode == 0, local.stderr

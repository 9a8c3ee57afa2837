"""`fastcoord replay` / `whatif --master sc://...` through a Spark Connect server started
here.

The server (pyspark's bin/spark-submit running SparkConnectServer, local[2] master) runs
on 127.0.0.1 on a free port as a process group of its own, started from a scratch
directory without PYTHONPATH, with PYSPARK_PYTHON a fresh venv that sees the main venv's
third-party packages but not fastcoord; it is stopped by PID (its group) at teardown,
also on failure. So the job can only succeed with the fastcoord the client ships with
addArtifacts: runtime.json must show every shard importing it from the `fastcoord/`
directory the server unpacked in its spark.local.dir, and the tables must equal the
single-process replay row for row. The Connect client packages are dev dependencies: if
they are missing the tests fail, they do not skip.

Deselect with `-m "not cluster"`; `make test` runs it.
"""
import os
import shutil

import pytest

pytest.importorskip("pyspark")
import fastcoord
from fastcoord.pipeline.gen import generate
from fastcoord.pipeline.spark import connect_client_missing
from fastcoord.pipeline.trace import write_trace
from fastcoord.pipeline.whatif import BASELINE, make_grid, read_results, whatif_local

from helpers.spark import (SPARK_SUBMIT, check_replay_output, free_port,
                         python_without_fastcoord, run_job, spark_env, start, stop, wait_for)

pytestmark = [pytest.mark.cluster, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH")]

# the directory that holds the fastcoord under test (the worktree or site-packages)
HERE = os.path.dirname(os.path.dirname(os.path.abspath(fastcoord.__file__)))


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    """sc://127.0.0.1:PORT, a Connect server on local[2] whose Python workers run a venv
    without fastcoord; yields (url, its spark.local.dir, that python)."""
    missing = connect_client_missing()
    if missing:
        pytest.fail(f"the Spark Connect client packages are missing: {', '.join(missing)} "
                    f"(dev dependencies: pip install -e '.[dev]')")
    d = tmp_path_factory.mktemp("connect")
    python = python_without_fastcoord(d / "execenv")
    local_dir = d / "local"
    local_dir.mkdir()
    port = free_port()
    proc, log = start([SPARK_SUBMIT, "--class",
                       "org.apache.spark.sql.connect.service.SparkConnectServer",
                       "--master", "local[2]", "--name", "fastcoord-connect-test",
                       "--conf", f"spark.connect.grpc.binding.port={port}",
                       "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                       "--conf", "spark.ui.enabled=false",
                       "--conf", f"spark.local.dir={local_dir}",
                       "--driver-memory", "1g", "spark-internal"],
                      d / "server.log", spark_env(PYSPARK_PYTHON=python), cwd=str(d))
    try:
        wait_for(d / "server.log", "Spark Connect server started at", proc,
                 "the Spark Connect server")
        yield f"sc://127.0.0.1:{port}", local_dir, python
    finally:
        stop(proc)
        log.close()


def _client_env(tmp_path) -> dict:
    # the client imports the fastcoord under test (and ships that one)
    return spark_env(PYTHONPATH=HERE, FASTCOORD_SHIP_CACHE=str(tmp_path / "ship"))


@pytest.fixture(scope="module")
def trace():
    return generate(groups=6, members=4, duration_s=120, seed=3)


def test_replay_through_spark_connect(connect_server, trace, tmp_path):
    url, local_dir, python = connect_server
    path = tmp_path / "trace.parquet"
    write_trace(trace, str(path))
    out = tmp_path / "out"
    log = run_job(url, path, out, _client_env(tmp_path), ["--executor-memory", "2g"])
    # a launch-time setting the server keeps is reported, not fatal
    assert "not applied: spark.executor.memory" in log, log[-3000:]

    # every shard ran on the server's Python, with the fastcoord unpacked from the
    # shipped archive in the session's artifact directory (below the server's
    # spark.local.dir, never the client's copy); the tables are the single-process ones
    check_replay_output(out, trace, python, local_dir)


def test_whatif_through_spark_connect(connect_server, trace, tmp_path):
    url = connect_server[0]
    path = tmp_path / "trace.parquet"
    write_trace(trace, str(path))
    out = tmp_path / "w"
    run_job(url, path, out, _client_env(tmp_path),
            ["--session-timeout", "10s,30s", "--static", "on"], command="whatif")
    got = read_results(str(out))
    # (the command adds the baseline, the trace's own settings, last)
    want = whatif_local(trace, make_grid([10_000, 30_000], ["on"]) + [BASELINE])
    assert set(got) == set(want)
    for name in want:
        assert got[name].to_pylist() == want[name].to_pylist(), name

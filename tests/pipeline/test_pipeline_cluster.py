"""`fastcoord replay --master spark://...` on a real standalone cluster started here.

A master and a worker (pyspark's bin/spark-class) run on 127.0.0.1 as process groups
of their own, stopped by PID (their group: the worker's executors and Python workers
are its children) at teardown. The executors run a *different* Python: a fresh venv
that sees the main venv's third-party packages (numpy, pandas, pyarrow, pyspark) but
not fastcoord (an editable install is hooked in by a .pth file, and .pth files are only
run in site directories, not in a directory a .pth line adds), so the job can only
succeed with the fastcoord that `session()` ships. runtime.json says where each shard's
fastcoord came from and which twin ran; the tables must equal the single-process
replay row for row, with either twin.

Deselect with `-m "not cluster"`; `make test` runs it.
"""
import shutil

import pytest

pytest.importorskip("pyspark")
from fastcoord.pipeline.gen import generate
from fastcoord.pipeline.trace import write_trace

from helpers.spark import (SPARK_CLASS, check_replay_output, free_port,
                         python_without_fastcoord, run_job, spark_env, start, stop, wait_for)

pytestmark = [pytest.mark.cluster, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT with one worker (2 cores, 1 GiB)."""
    d = tmp_path_factory.mktemp("cluster")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    procs, logs = [], []
    try:
        master, mlog = start([SPARK_CLASS, "org.apache.spark.deploy.master.Master",
                              "--host", "127.0.0.1", "--port", str(port),
                              "--webui-port", str(free_port())], d / "master.log", spark_env())
        procs.append(master)
        logs.append(mlog)
        wait_for(d / "master.log", "I have been elected leader", master, "the master")
        worker, wlog = start([SPARK_CLASS, "org.apache.spark.deploy.worker.Worker",
                              "--host", "127.0.0.1", "--webui-port", str(free_port()),
                              "--cores", "2", "--memory", "1g", "--work-dir", str(d / "work"),
                              url], d / "worker.log", spark_env())
        procs.append(worker)
        logs.append(wlog)
        wait_for(d / "worker.log", "Successfully registered with master", worker, "the worker")
        yield url, d / "work"
    finally:
        for p in reversed(procs):
            stop(p)
        for log in logs:
            log.close()


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory):
    """A venv's python that has the third-party packages but cannot import fastcoord."""
    return python_without_fastcoord(tmp_path_factory.mktemp("execenv"))


def test_replay_on_standalone_cluster(cluster, executor_python, tmp_path):
    url, work_dir = cluster
    trace = generate(groups=14, members=5, duration_s=150, seed=21)
    path = tmp_path / "trace.parquet"
    write_trace(trace, str(path))
    out = tmp_path / "out"
    run_job(url, path, out, spark_env(PYSPARK_PYTHON=executor_python,
                                      FASTCOORD_SHIP_CACHE=str(tmp_path / "ship")))

    # every shard ran on the executor venv, with the fastcoord unpacked from the shipped
    # archive in the executor's work directory; the tables are the single-process ones
    check_replay_output(out, trace, executor_python, work_dir)

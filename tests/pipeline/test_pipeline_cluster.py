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

from helpers.spark import (check_replay_output, python_without_fastcoord, run_job, spark_env,
                           standalone_cluster)

pytestmark = [pytest.mark.cluster, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT with one worker (2 cores, 1 GiB)."""
    with standalone_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


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

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
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time

import pytest

pytest.importorskip("pyspark")
import pyarrow.parquet as pq

import fastcoord
from fastcoord.pipeline.gen import generate
from fastcoord.pipeline.replay import TABLES, canonical, replay_local
from fastcoord.pipeline.trace import write_trace

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH")]

import pyspark

# pip's pyspark is a Spark distribution: its bin/spark-class finds the jars beside it
SPARK_HOME = os.path.dirname(os.path.abspath(pyspark.__file__))
SPARK_CLASS = os.path.join(SPARK_HOME, "bin", "spark-class")
START_TIMEOUT_S = 45
JOB_TIMEOUT_S = 150


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
    env.update(SPARK_HOME=SPARK_HOME, SPARK_LOCAL_IP="127.0.0.1", **extra)
    return env


def _start(args, log_path, env):
    log = open(log_path, "wb")
    # a session of its own: the PID is also the process-group id, so teardown reaches
    # the JVM's children (executors, Python daemons) through it and nothing else
    return subprocess.Popen([SPARK_CLASS, *args], stdout=log, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True), log


def _stop(proc) -> None:
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_for(log_path, needle: str, proc, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with open(log_path, "rb") as f:
            if needle.encode() in f.read():
                return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    with open(log_path, "rb") as f:
        tail = f.read()[-3000:].decode(errors="replace")
    pytest.fail(f"{what} did not come up ({needle!r} not logged):\n{tail}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT with one worker (2 cores, 1 GiB)."""
    d = tmp_path_factory.mktemp("cluster")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs, logs = [], []
    try:
        master, mlog = _start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(_free_port())],
                              d / "master.log", _env())
        procs.append(master)
        logs.append(mlog)
        _wait_for(d / "master.log", "I have been elected leader", master, "the master")
        worker, wlog = _start(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                               "--webui-port", str(_free_port()), "--cores", "2",
                               "--memory", "1g", "--work-dir", str(d / "work"), url],
                              d / "worker.log", _env())
        procs.append(worker)
        logs.append(wlog)
        _wait_for(d / "worker.log", "Successfully registered with master", worker, "the worker")
        yield url, d / "work"
    finally:
        for p in reversed(procs):
            _stop(p)
        for log in logs:
            log.close()


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory):
    """A venv's python that has the third-party packages but cannot import fastcoord."""
    d = tmp_path_factory.mktemp("execenv")
    base = getattr(sys, "_base_executable", None) or shutil.which("python3")
    subprocess.run([base, "-m", "venv", "--without-pip", str(d)], check=True, timeout=60)
    py = str(d / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True, timeout=30).stdout.strip()
    with open(os.path.join(site, "main_venv_packages.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    probe = "import numpy, pandas, pyarrow, pyspark\ntry:\n import fastcoord\nexcept ImportError:\n print('absent')"
    out = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=60,
                         cwd=str(d), env=_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "absent", "the executor venv must not see fastcoord"
    return py


def _replay_on(url, trace_path, out, env, impl=None):
    cmd = [sys.executable, "-m", "fastcoord", "replay", str(trace_path), "--out", str(out),
           "--master", url] + (["--impl", impl] if impl else [])
    with open(str(out) + ".log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            _stop(proc)             # also the driver's JVM (spark-submit), its child
    with open(str(out) + ".log", "rb") as f:
        tail = f.read()[-4000:].decode(errors="replace")
    assert rc == 0, f"replay on {url} exited {rc}:\n{tail}"


def test_replay_on_standalone_cluster(cluster, executor_python, tmp_path):
    url, work_dir = cluster
    trace = generate(groups=14, members=5, duration_s=150, seed=21)
    path = tmp_path / "trace.parquet"
    write_trace(trace, str(path))
    out = tmp_path / "out"
    _replay_on(url, path, out, _env(PYSPARK_PYTHON=executor_python,
                                    FASTCOORD_SHIP_CACHE=str(tmp_path / "ship")))

    got = {name: canonical(pq.read_table(str(out / name)), name) for name in TABLES}
    assert got["responses"].num_rows == trace.num_rows
    shards = set(got["responses"].column("shard").to_pylist())
    assert len(shards) > 2

    # every shard ran on the executor venv, with the fastcoord unpacked from the shipped
    # archive in the executor's work directory, on the twin this build provides
    runtime = json.loads((out / "runtime.json").read_text())
    assert {r["shard"] for r in runtime} == shards
    work = os.path.realpath(work_dir)
    for r in runtime:
        assert r["python"] == executor_python, r
        assert os.path.realpath(r["fastcoord"]).startswith(work + os.sep), r
        assert os.path.basename(r["fastcoord"]) == "fastcoord", r
        assert r["impl"] == fastcoord.IMPLEMENTATION, r

    # row for row the single-process replay, with either twin
    for impl in sorted({fastcoord.IMPLEMENTATION, "pure"}):
        want = replay_local(trace, impl=impl)
        for name in TABLES:
            assert got[name].to_pylist() == want[name].to_pylist(), (impl, name)

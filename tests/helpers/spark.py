"""Spark processes for the cluster tests (test_pipeline_cluster, test_pipeline_connect):
each started as a process group of its own on 127.0.0.1 and stopped by PID (its group:
a JVM's executors and Python workers are its children), a Python for the executors that
cannot import fastcoord, and `fastcoord replay` run as a bounded subprocess."""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time

import pytest
import pyspark

# pip's pyspark is a Spark distribution: bin/spark-class and bin/spark-submit find the
# jars beside them
SPARK_HOME = os.path.dirname(os.path.abspath(pyspark.__file__))
SPARK_CLASS = os.path.join(SPARK_HOME, "bin", "spark-class")
SPARK_SUBMIT = os.path.join(SPARK_HOME, "bin", "spark-submit")
START_TIMEOUT_S = 45
JOB_TIMEOUT_S = 150


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
    env.update(SPARK_HOME=SPARK_HOME, SPARK_LOCAL_IP="127.0.0.1", **extra)
    return env


def start(argv, log_path, env, cwd=None):
    log = open(log_path, "wb")
    # a session of its own: the PID is also the process-group id, so teardown reaches
    # the JVM's children (executors, Python daemons) through it and nothing else
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                            start_new_session=True), log


def stop(proc) -> None:
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


def wait_for(log_path, needle: str, proc, what: str) -> None:
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


def python_without_fastcoord(d) -> str:
    """A venv's python in `d` that has the third-party packages but cannot import
    fastcoord (an editable install is hooked in by a .pth file, and .pth files are only
    run in site directories, not in a directory a .pth line adds)."""
    base = getattr(sys, "_base_executable", None) or shutil.which("python3")
    subprocess.run([base, "-m", "venv", "--without-pip", str(d)], check=True, timeout=60)
    py = str(d / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True, timeout=30).stdout.strip()
    with open(os.path.join(site, "main_venv_packages.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    probe = "import numpy, pandas, pyarrow, pyspark\ntry:\n import fastcoord\nexcept ImportError:\n print('absent')"
    out = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=60,
                         cwd=str(d), env=spark_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "absent", "the executor venv must not see fastcoord"
    return py


def run_job(url, trace_path, out, env, args=(), command="replay") -> str:
    """`fastcoord COMMAND TRACE --out OUT --master URL ARGS` within JOB_TIMEOUT_S; fails
    the test unless it exits 0; returns its output (stdout and stderr)."""
    cmd = [sys.executable, "-m", "fastcoord", command, str(trace_path), "--out", str(out),
           "--master", url, *args]
    with open(str(out) + ".log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            stop(proc)             # also the driver's JVM (spark-submit), its child
    with open(str(out) + ".log", "rb") as f:
        text = f.read().decode(errors="replace")
    assert rc == 0, f"{command} on {url} exited {rc}:\n{text[-4000:]}"
    return text


def check_replay_output(out, trace, python: str, shipped_under) -> None:
    """The replay's tables in `out` equal the single-process replay row for row (with
    either twin), over more than two shards, and runtime.json shows every shard run by
    `python` on this build's twin, with fastcoord imported from a `fastcoord/` directory
    below `shipped_under` (where the shipped archive was unpacked)."""
    import json

    import pyarrow.parquet as pq

    import fastcoord
    from fastcoord.pipeline.replay import TABLES, canonical, replay_local
    got = {name: canonical(pq.read_table(str(out / name)), name) for name in TABLES}
    assert got["responses"].num_rows == trace.num_rows
    shards = set(got["responses"].column("shard").to_pylist())
    assert len(shards) > 2

    runtime = json.loads((out / "runtime.json").read_text())
    assert {r["shard"] for r in runtime} == shards
    under = os.path.realpath(shipped_under)
    for r in runtime:
        assert r["python"] == python, r
        assert os.path.realpath(r["fastcoord"]).startswith(under + os.sep), r
        assert os.path.basename(r["fastcoord"]) == "fastcoord", r
        assert r["impl"] == fastcoord.IMPLEMENTATION, r

    for impl in sorted({fastcoord.IMPLEMENTATION, "pure"}):
        want = replay_local(trace, impl=impl)
        for name in TABLES:
            assert got[name].to_pylist() == want[name].to_pylist(), (impl, name)


@contextlib.contextmanager
def standalone_cluster(d):
    """spark://127.0.0.1:PORT with one worker (2 cores, 1 GiB), its logs and work
    directory under `d`: yields (url, the worker's work directory); both stopped by PID
    after."""
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

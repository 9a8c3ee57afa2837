"""Running the Spark jobs as an operator does: a master that is not there fails at once in
one line (exit 2), Ctrl-C stops a running job and its JVM (exit 130, no traceback), an
executor Python that cannot run the job is named in one line with how to ship one (exit
2), and `fastcoord replay` says where its time went (OUT/timings.json).

Every command runs as a subprocess in a session of its own, bounded in time and stopped
by PID (its group: the driver's JVM and Python workers are its children).
"""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("pyspark")
from fastcoord.pipeline.gen import generate
from fastcoord.pipeline.trace import write_trace

from helpers.spark import free_port, spark_env, standalone_cluster, stop

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH")]

# Spark's own retries against a master that is not there take minutes; the check before
# Spark starts takes the interpreter's start and one refused connection
UNREACHABLE_BOUND_S = 20


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "trace.parquet"
    write_trace(generate(groups=14, members=5, duration_s=150, seed=21), str(path))
    return path


def _command(trace, out, master, *args, command="replay"):
    return [sys.executable, "-m", "fastcoord", command, str(trace), "--out", str(out),
            "--master", master, *args]


def _run(cmd, env, timeout):
    """(exit code or None on timeout, stdout, stderr, seconds); the process group is
    stopped by PID whatever happens."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        stop(proc)
        out, err = proc.communicate()
        rc = None
    return rc, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - t0


@pytest.mark.parametrize("scheme", ["spark", "sc"])
def test_unreachable_master_fails_fast(trace_file, tmp_path, scheme):
    port = free_port()                     # bound and closed again: nothing listens there
    master = f"{scheme}://127.0.0.1:{port}"
    rc, out, err, took = _run(_command(trace_file, tmp_path / "out", master), spark_env(),
                              UNREACHABLE_BOUND_S)
    assert rc == 2, (rc, err[-3000:])
    assert took < UNREACHABLE_BOUND_S
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == [f"fastcoord replay: cannot reach the Spark master {master} "
                     f"(127.0.0.1:{port}: Connection refused): is it running, and is the "
                     "address right?"], err


def _children(pid: int) -> set:
    """Every descendant PID of `pid` (from /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), ()):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


CTRL_C_BOUND_S = 20           # from Ctrl-C to the command and its JVM gone
RUNNING_BOUND_S = 90          # for the JVM to start and the job's tasks to run


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory):
    """A trace whose replay runs for some seconds on local[1]."""
    path = tmp_path_factory.mktemp("big") / "trace.parquet"
    write_trace(generate(groups=300, members=8, duration_s=300, seed=5), str(path))
    return path


def _interrupt(proc, children):
    """Ctrl-C to the command's process group: (its exit code, within CTRL_C_BOUND_S, and
    the children still alive CTRL_C_BOUND_S later)."""
    os.killpg(proc.pid, signal.SIGINT)
    rc = proc.wait(CTRL_C_BOUND_S)
    deadline = time.monotonic() + CTRL_C_BOUND_S
    while any(_alive(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    return rc, [c for c in children if _alive(c)]


@pytest.mark.parametrize("command", ["replay", "whatif"])
def test_ctrl_c_stops_the_job_and_the_jvm(big_trace, tmp_path, command):
    """SIGINT to the command's process group (what a terminal's Ctrl-C sends) while its
    Spark tasks run: one line, exit 130, no traceback, and the JVM and every other
    child gone within CTRL_C_BOUND_S."""
    err_path = tmp_path / "stderr"
    with open(err_path, "wb") as err_file:
        # a JVM cache of its own: this run's JVM would write the class archive, and
        # after Ctrl-C it must not (it is killed, not waited for)
        proc = subprocess.Popen(_command(big_trace, tmp_path / "out", "local[1]",
                                         command=command),
                                stdout=subprocess.DEVNULL, stderr=err_file,
                                env=spark_env(FASTCOORD_JVM_CACHE=str(tmp_path / "jvm")),
                                start_new_session=True)
        try:
            deadline = time.monotonic() + RUNNING_BOUND_S
            while b"tasks of the running stages" not in err_path.read_bytes():
                assert proc.poll() is None and time.monotonic() < deadline, \
                    err_path.read_text(errors="replace")[-3000:]
                time.sleep(0.1)
            children = _children(proc.pid)
            assert any("java" in pathlib.Path(f"/proc/{c}/cmdline").read_bytes().decode(errors="replace")
                       for c in children if _alive(c)), "no JVM child"
            rc, left = _interrupt(proc, children)
        finally:
            stop(proc)
    err = err_path.read_text(errors="replace")
    assert rc == 130, err[-3000:]
    assert not left, f"still running after Ctrl-C: {left}"
    assert "Traceback" not in err, err[-3000:]
    assert err.rstrip().splitlines()[-1] == f"fastcoord {command}: interrupted; stopped", \
        err[-3000:]
    assert os.listdir(tmp_path / "jvm") == []           # no archive, whole or partial


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_while_the_jvm_starts_leaves_no_jvm(trace_file, tmp_path, presses):
    """SIGINT as soon as the driver's JVM is launched, before PySpark has its gateway:
    broken off there, PySpark dropped the JVM's connection file and the JVM, which
    ignores SIGINT, outlived the command for good. Now the command says it stops once
    Spark is up, then stops it: exit 130, one line, and no child left.

    presses=2, an operator who presses again because the first seems ignored: the
    second broke the launch off as before (the JVM lived on, and printed a Java
    traceback when it could not write its connection file). Now it ends what the
    launch started. (The exit is 130, or death by the second SIGINT when it lands as
    the interpreter exits.)"""
    err_path = tmp_path / "stderr"
    with open(err_path, "wb") as err_file:
        proc = subprocess.Popen(_command(trace_file, tmp_path / "out", "local[1]"),
                                stdout=subprocess.DEVNULL, stderr=err_file,
                                env=spark_env(FASTCOORD_JVM_CACHE="off"),
                                start_new_session=True)
        children = set()
        try:
            deadline = time.monotonic() + RUNNING_BOUND_S
            while not any("java" in pathlib.Path(f"/proc/{c}/cmdline").read_bytes()
                          .decode(errors="replace") for c in _children(proc.pid) if _alive(c)):
                assert proc.poll() is None and time.monotonic() < deadline, \
                    err_path.read_text(errors="replace")[-3000:]
                time.sleep(0.02)
            children = _children(proc.pid)
            if presses == 2:
                os.killpg(proc.pid, signal.SIGINT)
                time.sleep(0.2)
            rc, left = _interrupt(proc, children)
        finally:
            stop(proc)
            for c in children:
                if _alive(c):                 # an orphan is no longer in reach of stop()
                    os.kill(c, signal.SIGKILL)
    err = err_path.read_text(errors="replace")
    assert rc == 130 or (presses == 2 and rc == -signal.SIGINT), err[-3000:]
    assert not left, f"still running after Ctrl-C: {left}\n{err[-3000:]}"
    assert "Traceback" not in err and "Exception in thread" not in err, err[-3000:]
    assert err.rstrip().splitlines()[-1] == "fastcoord replay: interrupted; stopped", \
        err[-3000:]
    assert not (tmp_path / "out" / "responses").exists()


@pytest.mark.parametrize("command", ["replay", "whatif"])
def test_a_setting_spark_refuses_when_the_job_runs_is_one_line(trace_file, tmp_path, command):
    """A --conf value Spark checks only when the job runs (here the shuffle's partition
    count, not a number) went out as Spark's 50-line Java and Python traceback, exit 1.
    Now one line with what Spark said of the setting; exit 2."""
    rc, out, err, took = _run(_command(trace_file, tmp_path / "out", "local[1]",
                                       "--conf", "spark.sql.shuffle.partitions=abc",
                                       command=command),
                              spark_env(FASTCOORD_JVM_CACHE="off"), RUNNING_BOUND_S)
    assert rc == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    last = err.rstrip().splitlines()[-1]
    assert last.startswith(f"fastcoord {command}: Spark refused the job: "), err[-3000:]
    assert "'abc'" in last and "spark.sql.shuffle.partitions" in last, last


def test_a_jvm_that_does_not_start_is_one_line(trace_file, tmp_path):
    """A setting the JVM refuses (here a heap size through --conf, which no flag
    checks) made PySpark raise JAVA_GATEWAY_EXITED through a 30-line traceback, exit 1.
    Now the JVM's own lines, then one of fastcoord's saying what to look at; exit 2."""
    rc, out, err, took = _run(_command(trace_file, tmp_path / "out", "local[1]",
                                       "--conf", "spark.driver.memory=abc"),
                              spark_env(FASTCOORD_JVM_CACHE="off"), RUNNING_BOUND_S)
    assert rc == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert "Invalid maximum heap size" in err                       # the JVM's own word
    assert err.rstrip().splitlines()[-1].startswith(
        "fastcoord replay: Spark's JVM did not start"), err[-3000:]


def test_replay_timings_and_the_jvms_class_archive(trace_file, tmp_path):
    """OUT/timings.json: the spans of the command's wall time (JVM start, planning,
    reading/packing, replay+writing, finishing, stop) cover it, and the tasks' replay
    seconds and events come from runtime.json. The first local run in an empty JVM
    cache leaves the JVM's class archive there, whole under its final name (nothing
    else); the next run maps it and leaves it as it is."""
    cache = tmp_path / "jvm"
    env = spark_env(FASTCOORD_JVM_CACHE=str(cache))
    rc, _, err, _ = _run(_command(trace_file, tmp_path / "first", "local[2]"), env, 150)
    assert rc == 0, err[-3000:]
    assert "saving the JVM's classes" in err
    (archive,) = os.listdir(cache)
    assert archive.endswith(".jsa")
    written = os.stat(cache / archive)

    out = tmp_path / "out"
    rc, stdout, err, took = _run(_command(trace_file, out, "local[2]"), env, 150)
    assert rc == 0, err[-3000:]
    assert "saving the JVM's classes" not in err and "[cds]" not in err + stdout
    assert os.listdir(cache) == [archive]
    assert os.stat(cache / archive).st_mtime_ns == written.st_mtime_ns
    doc = json.loads((out / "timings.json").read_text())
    spans = doc["spans_s"]
    assert list(spans) == ["jvm_start", "planning", "reading_packing", "replay_writing",
                           "finishing", "stop", "other"]
    assert all(v >= 0 for v in spans.values())
    assert abs(sum(spans.values()) - doc["wall_s"]) < 0.01
    assert doc["wall_s"] < took
    assert spans["other"] < 0.5                   # the spans account for the run
    runtime = json.loads((out / "runtime.json").read_text())
    import pyarrow.parquet as pq
    assert doc["events"] == sum(r["events"] for r in runtime) == pq.read_metadata(
        str(trace_file)).num_rows
    assert doc["tasks_core_s"]["replay"] > 0
    assert f"-> {out / 'timings.json'}" in err


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with standalone_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


def python_without_pyarrow(d) -> str:
    """A venv's python in `d` that imports pyspark (its worker runs) but not numpy,
    pandas or pyarrow: the main venv's pyspark and py4j alone, through a .pth file."""
    import py4j
    import pyspark
    base = getattr(sys, "_base_executable", None) or shutil.which("python3")
    subprocess.run([base, "-m", "venv", "--without-pip", str(d)], check=True, timeout=60)
    py = str(d / "bin" / "python")
    lib = d / "only-pyspark"
    lib.mkdir()
    for module in (pyspark, py4j):
        src = os.path.dirname(module.__file__)
        os.symlink(src, lib / os.path.basename(src))
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True, timeout=30).stdout.strip()
    with open(os.path.join(site, "only_pyspark.pth"), "w") as f:
        f.write(f"{lib}\n")
    probe = subprocess.run([py, "-c", "import pyspark\ntry:\n import pyarrow\nexcept ImportError:"
                                      "\n print('absent')"],
                           capture_output=True, text=True, timeout=60, env=spark_env())
    assert probe.stdout.strip() == "absent", probe.stderr
    return py


def _replay_with_executor_python(url, trace_file, tmp_path, python) -> str:
    """`fastcoord replay` on the cluster with the executors' Python `python`: it must
    fail with exit 2 and no traceback; its last line (the one naming the problem)."""
    rc, out, err, took = _run(_command(trace_file, tmp_path / "out", url),
                              spark_env(PYSPARK_PYTHON=python,
                                        FASTCOORD_SHIP_CACHE=str(tmp_path / "ship")), 150)
    assert rc == 2, (rc, err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    last = err.rstrip().splitlines()[-1]
    assert "spark.archives=env.tar.gz#env" in last, last
    return last


def test_executor_without_pyarrow_is_named(cluster, trace_file, tmp_path):
    url, _ = cluster
    python = python_without_pyarrow(tmp_path / "bare")
    last = _replay_with_executor_python(url, trace_file, tmp_path, python)
    assert last.startswith(f"fastcoord replay: the executors' Python {python} "), last
    assert "cannot import numpy, pandas, pyarrow;" in last, last
    assert "spark.pyspark.python" in last, last


def test_an_abandoned_archive_is_dropped(tmp_path):
    """A class archive left half-written by a command that is gone (its pid no longer
    runs) goes once it is old; one whose command still runs, or a recent one, stays."""
    from fastcoord.pipeline.spark import _drop_abandoned
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    old, mine, recent = (tmp_path / f"spark-x.jsa.{gone.pid}.tmp",
                         tmp_path / f"spark-x.jsa.{os.getpid()}.tmp",
                         tmp_path / f"spark-y.jsa.{gone.pid}.tmp")
    for path in (old, mine, recent):
        path.write_bytes(b"partial")
    for path in (old, mine):
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    _drop_abandoned(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == sorted([mine.name, recent.name])


def test_a_shipped_environment_goes_beside_fastcoord(monkeypatch, tmp_path):
    """--conf spark.archives=env.tar.gz#env keeps fastcoord's own archive in the list
    (it replaced it), and --conf spark.pyspark.python becomes the executors'
    PYSPARK_PYTHON (which PySpark reads, not the setting)."""
    from pyspark.sql import SparkSession

    from fastcoord.pipeline import spark as sp
    monkeypatch.setenv("FASTCOORD_SHIP_CACHE", str(tmp_path / "ship"))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", lambda self: dict(self._options))
    options = sp.session("spark://127.0.0.1:7077", conf={
        "spark.archives": "hdfs:///envs/env.tar.gz#env",
        "spark.pyspark.python": "./env/bin/python"})
    archives = options["spark.archives"].split(",")
    assert archives[0] == "hdfs:///envs/env.tar.gz#env"
    assert archives[1] == f"{sp.package_archive()}#{sp.SHIP_NAME}"
    assert os.environ["PYSPARK_PYTHON"] == "./env/bin/python"


def _another_python() -> str:
    """A CPython of another minor version than this one that runs (pyenv's shims name
    versions that may not be active: the interpreters themselves are tried too)."""
    import glob
    mine = "%d.%d" % sys.version_info[:2]
    candidates = [shutil.which(f"python3.{m}") for m in (12, 13, 10)]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1*/bin/python3.1*")))
    for path in filter(None, candidates):
        probe = subprocess.run([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=30)
        if probe.returncode == 0 and probe.stdout.strip() not in ("", mine):
            return path
    pytest.fail("no runnable Python of another minor version (the machine's pyenv has them)")


@pytest.mark.parametrize("executor_python", ["other-version", "missing"])
def test_an_executor_python_that_cannot_serve_is_named(cluster, trace_file, tmp_path,
                                                         executor_python):
    """The executors' Python of another minor version than the driver's (PySpark's worker
    refuses it), or one that does not exist: one line naming it and how to ship an
    environment, exit 2, no traceback."""
    url, _ = cluster
    python = _another_python() if executor_python == "other-version" \
        else str(tmp_path / "no-such" / "python3")
    last = _replay_with_executor_python(url, trace_file, tmp_path, python)
    assert last.startswith("fastcoord replay: the executors"), last
    assert python in last if executor_python == "missing" else "is not the driver's" in last, last

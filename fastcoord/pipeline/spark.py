"""The Spark replay: partition the trace by coordinator shard, run each shard's
ShardReplay inside a Python worker (`repartition("shard").mapInArrow`), write the same
tables as the single-process replay.

The trace reaches the shuffle packed: the Python workers read its Parquet row groups
themselves (pyarrow), set its bad rows aside and count them (ingest.py), map each
row's group to its shard, and hand Spark one row per (shard, piece of the trace)
holding that shard's rows as an Arrow IPC stream. The JVM moves a few hundred binary
values instead of converting 10M rows from Parquet to its rows, shuffling them, and
converting them again to Arrow for the replay; the driver reads only the files'
footers and never holds the trace.

`session(master)` makes a SparkSession.

- local masters (`local`, `local[N]`, `local[*]`): the Python workers run this very
  interpreter (PYSPARK_PYTHON = sys.executable), so they import the same fastcoord.
- any other master (`spark://host:7077`, `yarn`, `k8s://...`, `local-cluster[...]`): the
  executors have their own Python, which need not have fastcoord. The installed
  fastcoord package (compiled extension included) is zipped, cached by content hash
  (`package_archive`), and shipped with `spark.archives` as `<zip>#fastcoord`: every
  executor unpacks it into its SparkFiles directory as `fastcoord/`, and PySpark's
  worker puts that directory at the front of sys.path before it unpickles a UDF, so
  `import fastcoord` finds the shipped copy. (`--py-files` cannot do this: a .so inside
  a zip on sys.path does not import; an unpacked archive is a plain directory.) The
  executors' Python is PYSPARK_PYTHON (or `executor_python=`), else Spark's default
  `python3`; it needs the pandas-UDF baseline (numpy, pandas < 3, pyarrow) and the
  driver's Python version and platform, since the extension is built for it.
- `sc://host:port` (Spark Connect; `connect_session`): a client session of a running
  Connect server, which owns the SparkContext and its launch settings. The same archive
  goes up with `addArtifacts(<zip>#fastcoord, archive=True)`; the server unpacks it as
  `fastcoord/` in that session's artifact directory (under its spark.local.dir, in
  `userFiles-*/<session id>/`), which is the working directory and first on sys.path
  of the Python workers running the session's UDFs. The executors' Python is the
  *server's* choice (spark.pyspark.python, else its PYSPARK_PYTHON when it started,
  else `python3`): a client cannot change it, so `executor_python=` is reported as not
  applied, like every launch-time setting (memory, cores, spark.archives); runtime SQL
  settings (shuffle partitions, Arrow) are set with `session.conf.set`. The jobs use
  only DataFrame APIs Connect has (no SparkContext, no RDDs: `default_parallelism`).
  The client needs grpcio, grpcio-status, googleapis-common-protos and zstandard (in
  the spark extra); the trace path and --out must be readable and writable by the
  server and its executors, as on any cluster.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile
import zipfile
from typing import Dict, List, Optional, Tuple

import pyarrow as pa

from .replay import (NUM_SHARDS, TABLES, canonical, fresh_table_dirs,
                     replay_shard, shard_array, split_on, write_table_file)
from .delta import from_steps, to_steps

_SPARK_TYPES = {pa.int32(): "int", pa.int64(): "bigint", pa.string(): "string",
                pa.binary(): "binary"}


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark DDL of an Arrow schema of int32, int64, string and binary columns."""
    return ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in schema)


# Each worker call also sends a "_runtime" table of one row per shard: where fastcoord
# came from and which twin ran, so a cluster run can be checked (runtime.json) without a
# second job; and the shard's events and the seconds its task spent replaying them and
# writing its tables (the command's timings.json sums them).
RUNTIME_TABLE = "_runtime"
RUNTIME_SCHEMA = pa.schema([("shard", pa.int32()), ("fastcoord", pa.string()),
                            ("python", pa.string()), ("impl", pa.string()),
                            ("host", pa.string()), ("events", pa.int64()),
                            ("replay_s", pa.float64()), ("write_s", pa.float64())])

# Results the driver collects (replay_spark without an output directory, and the
# runtime rows) leave the workers as Arrow IPC streams (LZ4-compressed), one row per
# (table, chunk of at most RESULT_ROWS_PER_BLOB rows): a few binary values instead of
# wide rows, whose conversion checks every cell of every other table's columns for
# null. Their int64 columns of small steps (a responses table's seq, time_ms and
# answered_ms) travel as int32 steps (steps.py: fewer bytes once compressed). Tables
# for an output directory are written by the replay tasks themselves (write_shard_tables).
BLOB_SCHEMA = pa.schema([("table", pa.string()), ("ipc", pa.binary())])
BLOB_DDL = spark_ddl(BLOB_SCHEMA)
RESULT_ROWS_PER_BLOB = 100_000      # a blob of a few MB at most
# One thread for a blob's compression and decompression: a Spark task has one core
# (its executor runs a task per core), and Arrow's own pool on top would only contend
# with the other tasks for the same cores
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=False)
_IPC_READ = pa.ipc.IpcReadOptions(use_threads=False)

SHIP_NAME = "fastcoord"           # the directory the archive unpacks to on executors
# What an executor needs of the package: sources, the compiled modules, type stubs.
# Cython sources and generated C are build inputs, not runtime files.
_SHIP_SUFFIXES = (".py", ".so", ".pyd", ".pyi", "py.typed")

# what the Spark Connect client (pyspark.sql.connect) imports beyond pyspark, pandas and
# pyarrow: distribution name -> module
CONNECT_CLIENT_MODULES = {"grpcio": "grpc", "grpcio-status": "grpc_status",
                          "googleapis-common-protos": "google.rpc", "zstandard": "zstandard"}


def is_connect(master: str) -> bool:
    """A Spark Connect URL (sc://host:port): a client session of a running server."""
    return master.startswith("sc://")


def is_connect_session(spark) -> bool:
    """A Spark Connect client session (no SparkContext, no RDDs on this side)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def connect_client_missing() -> List[str]:
    """The Connect client packages this interpreter lacks (empty: sc:// can work)."""
    import importlib.util
    missing = []
    for dist, module in CONNECT_CLIENT_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:          # a parent package (e.g. google) is absent
            found = False
        if not found:
            missing.append(dist)
    return missing


def is_local(master: str) -> bool:
    """A master whose Python workers are children of this machine's JVM, started with
    this interpreter (so they see this interpreter's fastcoord)."""
    return master == "local" or master.startswith("local[")


# -- before a job: the master reachable, the executors' Python able to run it ----------------

DEFAULT_PORTS = {"spark": 7077, "sc": 15002}
PROBE_TIMEOUT_S = 3.0


def master_endpoints(master: str) -> List[Tuple[str, int]]:
    """The (host, port)s a spark:// or sc:// master names (a standalone master may list
    several, comma-separated; a missing port is the scheme's default); [] for the others,
    which have no one address to try (local, yarn, k8s://)."""
    scheme, sep, rest = master.partition("://")
    if not sep or scheme not in DEFAULT_PORTS:
        return []
    out = []
    for hostport in rest.split("/", 1)[0].split(","):
        host, colon, port = hostport.rpartition(":")
        if not colon or host.endswith(":") or not port.isdigit():
            host, port = hostport, ""                       # (no port, or bare IPv6)
        out.append((host.strip("[]"), int(port) if port else DEFAULT_PORTS[scheme]))
    return out


_JAVA_CLASS_PREFIX = re.compile(r"^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)+: ")


def refusal(exc: BaseException) -> Optional[str]:
    """Spark's own refusal of a job, in a line: for an error Spark raised itself (a
    setting it does not take, a plan it cannot make), the message of its innermost
    cause, which is the one that names what to change; None for anything else (an
    error of a task's Python keeps its traceback: it is a bug to report)."""
    try:
        from pyspark.errors import PySparkException, PythonException
    except ImportError:
        return None
    if not isinstance(exc, PySparkException) or isinstance(exc, PythonException):
        return None
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    causes = [line[len("Caused by: "):] for line in lines if line.startswith("Caused by: ")]
    line = causes[-1] if causes else lines[0] if lines else type(exc).__name__
    return _JAVA_CLASS_PREFIX.sub("", line)


def unreachable(master: str, timeout: float = PROBE_TIMEOUT_S) -> str:
    """Why no endpoint of `master` accepts a TCP connection within `timeout` seconds each,
    in a few words ('' when one does, or when there is nothing to try). Tried before
    Spark starts: a standalone master or Connect server that is not there would have
    Spark retry for minutes before it gives up."""
    import socket
    reasons = []
    for host, port in master_endpoints(master):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return ""
        except socket.timeout:
            reasons.append(f"{host}:{port}: no answer within {timeout:g}s")
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc.strerror or exc}")
    return "; ".join(reasons)


# What an executor's Python must import for the jobs (the pandas-UDF baseline and what
# the tasks use), then fastcoord itself (shipped, see the module doc)
EXECUTOR_MODULES = ("numpy", "pandas", "pyarrow")
SHIP_ADVICE = ("ship a Python environment that has them: pack a venv (venv-pack) or conda "
               "env (conda-pack) of the driver's Python version, then --conf "
               "spark.archives=env.tar.gz#env --conf spark.pyspark.python=./env/bin/python "
               "(docs/pipeline.md, Running on a cluster)")

# How a probe's failure names what is wrong with the executors' Python (PySpark's and the
# JVM's error texts), first match wins: (pattern, message over the pattern's groups,
# each stripped and at most 200 characters)
_EXECUTOR_FAILURES = (
    (r"No module named '([^']+)'",
     "the executors' Python cannot import {0} (PySpark's worker needs it)"),
    (r'Cannot run program "([^"]+)"', "the executors cannot start their Python {0}"),
    (r"Python in worker has different version:? ([\w.]+) than that in driver:? ([\w.]+?),",
     "the executors' Python {0} is not the driver's Python {1} (PySpark needs the same "
     "minor version)"),
    (r"Error from python worker:\s*\n\s*(\S[^\n]*)",
     "the executors' Python fails to start PySpark's worker ({0})"),
)


MAX_PROBE_TASKS = 256      # a sample of the task slots of a large cluster


class ExecutorEnvError(RuntimeError):
    """The executors' Python cannot run the jobs; the message is one line."""


def _executor_probe_fn(modules):
    """A function for a plain (pickled, not Arrow) Python UDF: what the executor's
    Python imports of `modules` and fastcoord, as JSON. It refers to nothing of this
    module, so it unpickles on an executor that cannot import fastcoord or pyarrow and
    says so (a nested function is pickled by value)."""
    def probe(_):
        import importlib
        import json as js
        import socket
        import sys as system
        got = {"python": system.executable, "version": "%d.%d.%d" % system.version_info[:3],
               "host": socket.gethostname(), "versions": {}, "missing": {}}
        for name in list(modules) + ["fastcoord"]:
            try:
                module = importlib.import_module(name)
                got["versions"][name] = getattr(module, "__version__", "?")
            except Exception as exc:            # ImportError, or a broken install
                got["missing"][name] = f"{type(exc).__name__}: {exc}"
        return js.dumps(got)
    return probe


@contextlib.contextmanager
def _task_failures_quiet(spark):
    """Spark's log at ERROR while the probe runs: a failing probe's tasks would each log
    a WARN with the worker's traceback, where the probe's one line says what is wrong.
    Back at WARN, Spark's default, once the probe passed; after a failure it stays at
    ERROR (the command ends with the probe's line), since the tasks the failed job
    kills report after it, and would log the traceback then. (Spark Connect: the
    server's log.)"""
    try:
        context = spark.sparkContext
    except Exception:                   # (Spark Connect has no SparkContext here)
        yield
        return
    context.setLogLevel("ERROR")
    yield
    context.setLogLevel("WARN")


def check_executors(spark, tasks: Optional[int] = None) -> List[dict]:
    """Run one small task per task slot (`tasks`, default the parallelism, at most
    MAX_PROBE_TASKS: a sample on a large cluster) that imports numpy, pandas, pyarrow
    and the shipped fastcoord on the executor and reports its Python, host and the
    versions: the distinct reports. An executor that lacks one, or
    whose Python cannot start or cannot run PySpark's worker, raises ExecutorEnvError
    naming the module and the Python, with how to ship an environment (SHIP_ADVICE),
    instead of the job failing later with a bare ModuleNotFoundError in a page of JVM
    stack."""
    import re

    from pyspark.sql import functions as F
    n = tasks or min(default_parallelism(spark), MAX_PROBE_TASKS)
    probe = F.udf(_executor_probe_fn(EXECUTOR_MODULES), "string", useArrow=False)
    try:
        with _task_failures_quiet(spark):
            rows = spark.range(0, n, 1, numPartitions=n).select(probe("id").alias("r")).collect()
    except Exception as exc:       # the worker itself failed: a missing module, no Python
        text = str(exc)
        for pattern, what in _EXECUTOR_FAILURES:
            found = re.search(pattern, text)
            if found:
                raise ExecutorEnvError(
                    what.format(*(g.strip()[:200] for g in found.groups())) +
                    f"; {SHIP_ADVICE}") from None
        raise
    reports = []
    for row in rows:
        report = json.loads(row["r"])
        if report not in reports:
            reports.append(report)
    driver = "%d.%d" % sys.version_info[:2]
    for r in reports:
        lacks = [m for m in EXECUTOR_MODULES if m in r["missing"]]
        where = f"{r['python']} (Python {r['version']} on {r['host']})"
        if lacks:
            raise ExecutorEnvError(f"the executors' Python {where} cannot import "
                                   f"{', '.join(lacks)}; {SHIP_ADVICE}")
        if not r["version"].startswith(driver + "."):
            raise ExecutorEnvError(f"the executors' Python {where} is not the driver's "
                                   f"Python {driver}, which the shipped compiled fastcoord "
                                   f"is built for; {SHIP_ADVICE}")
        if "fastcoord" in r["missing"]:
            raise ExecutorEnvError(f"the executors' Python {where} cannot import the "
                                   f"shipped fastcoord: {r['missing']['fastcoord']}")
    return reports


def _package_files(root: str) -> List[str]:
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith(_SHIP_SUFFIXES):
                out.append(os.path.relpath(os.path.join(d, f), root))
    return out


def package_archive(cache_dir: Optional[str] = None) -> str:
    """The installed fastcoord package (whatever `import fastcoord` loads here, compiled
    extension included) as a zip whose root is the package directory. Cached under
    `cache_dir` (default FASTCOORD_SHIP_CACHE or ~/.cache/fastcoord/ship) by a hash of
    the files' names and bytes, so an unchanged package is zipped once. Zipping the
    installed package rather than building a wheel needs no compiler or source tree on
    the driver and works the same for editable and wheel installs."""
    import fastcoord
    root = os.path.dirname(os.path.abspath(fastcoord.__file__))
    files = _package_files(root)
    digest = hashlib.sha256()
    for rel in files:
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        digest.update(rel.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    cache_dir = cache_dir or os.environ.get("FASTCOORD_SHIP_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "fastcoord", "ship")
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, f"fastcoord-{digest.hexdigest()[:20]}.zip")
    if not os.path.exists(path):
        # written aside and renamed: a concurrent driver never ships a half-written zip
        fd, tmp = tempfile.mkstemp(suffix=".zip.tmp", dir=cache_dir)
        os.close(fd)
        try:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
                for rel in files:
                    z.write(os.path.join(root, rel), rel)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return path


# The bytes of one Arrow batch Spark fills for a Python worker, at most. The jobs feed
# their workers packed trace pieces (a shard's rows of up to a million trace rows, a few
# MB each), and maxRecordsPerBatch (10,000 rows) alone would put every piece a task
# receives into one batch: a large trace's what-if tasks (each piece repeated once per
# configuration) would ask the JVM for a buffer larger than Spark's default driver
# memory (which local mode runs the tasks in) and fail. Spark measures the batch after
# every row it writes (ArrowWriter.sizeInBytes), once per packed piece here (a few
# hundred a task), not once per trace row. A piece larger than this still goes, alone
# in its batch. Small batches are also cheaper for the JVM to fill than one large one
# (whose buffers it grows by copying, well out of cache), so the workers wait less for
# their input.
ARROW_MAX_BYTES_PER_BATCH = str(4 << 20)

# The JVM of a local master (driver and executor in one process) on the same cores as
# the Python workers, which do nearly all of the work. Its default tiered JIT spends
# seconds of CPU in the C2 compiler warming up, taken from the workers; C1 alone and
# the serial collector cut that, and the stage's wall time with it. Not for cluster
# masters, whose executors are long-lived JVMs of their own. A user's
# spark.driver.extraJavaOptions (`conf`) replaces it.
LOCAL_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


# The local JVM's start (thousands of Spark classes loaded, verified and linked) and its
# first job are seconds of a command's fixed cost. A class-data-sharing archive of those
# classes (JDK 13+'s dynamic archive) maps them instead: the first command to find none
# has its JVM write one when it exits (`-XX:ArchiveClassesAtExit`, to a name of its own),
# waits for that JVM (end_session) and renames the file into place only if the JVM
# exited cleanly: a truncated archive crashes the JVM that maps it, so a file under the
# final name is always whole. The name is keyed by the java binary and Spark's jars (a
# JVM checks the classpath too, and runs without an archive that does not match).
# FASTCOORD_JVM_CACHE: the directory (default ~/.cache/fastcoord/jvm); "off": none.
_ARCHIVE_WRITING: Dict[str, str] = {}     # this process's archive being written -> final


def _java_binary() -> Optional[str]:
    import shutil
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def class_archive() -> Optional[str]:
    """Where the local JVM's class-data-sharing archive for this java and Spark is (it
    may not exist yet); None when turned off or there is no java to key it by."""
    import pyspark
    cache = os.environ.get("FASTCOORD_JVM_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "fastcoord", "jvm")
    java = _java_binary()
    if cache == "off" or java is None:
        return None
    jars = os.path.join(os.path.dirname(os.path.abspath(pyspark.__file__)), "jars")
    keyed = [java]
    if os.path.isdir(jars):
        keyed += sorted(os.path.join(jars, j) for j in os.listdir(jars) if j.endswith(".jar"))
    digest = hashlib.sha256()
    for path in keyed:
        st = os.stat(path)
        digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return os.path.join(cache, f"spark-{pyspark.__version__}-{digest.hexdigest()[:16]}.jsa")


def _class_archive_options(write: bool) -> str:
    """The java options that map the archive when it is there, or (`write`) have the
    JVM write it at exit under a name of this process's."""
    archive = class_archive()
    if archive is None:
        return ""
    if os.path.exists(archive):
        return f" -XX:SharedArchiveFile={archive}"
    if not write:
        return ""
    os.makedirs(os.path.dirname(archive), exist_ok=True)
    _drop_abandoned(os.path.dirname(archive))
    writing = f"{archive}.{os.getpid()}.tmp"
    _ARCHIVE_WRITING[writing] = archive
    # (the JVM lists every class it leaves out of the archive: hundreds of lines)
    return f" -XX:ArchiveClassesAtExit={writing} -Xlog:cds*=off"


def _drop_abandoned(cache: str, age_s: float = 600.0) -> None:
    """Remove archives being written (`<name>.<pid>.tmp`) whose command is gone and
    which have not changed for `age_s`: a command killed before it could rename its
    archive leaves one (its JVM writes it when it notices)."""
    import time
    for name in os.listdir(cache):
        parts = name.split(".")
        if name.endswith(".tmp") and len(parts) >= 3 and parts[-2].isdigit():
            path = os.path.join(cache, name)
            try:
                if (not os.path.exists(f"/proc/{parts[-2]}")
                        and time.time() - os.path.getmtime(path) > age_s):
                    os.unlink(path)
            except OSError:
                pass


def writing_class_archive() -> bool:
    """Whether this process's JVM writes the class archive when it ends (end_session)."""
    return bool(_ARCHIVE_WRITING)


def end_session(spark, timeout: float = 60.0, keep_archive: bool = True) -> None:
    """Stop `spark`; if its JVM is writing the class archive (session's
    `write_class_archive=True`), end that JVM (its gateway exits when its stdin closes),
    wait for it, and put the archive in place if it exited cleanly (else drop it).
    Not `keep_archive` (Ctrl-C): the JVM is killed at once instead, and writes none."""
    try:
        spark.stop()
    finally:
        if _ARCHIVE_WRITING:
            _end_archive_writer(timeout, keep_archive)


def _end_archive_writer(timeout: float, keep: bool) -> None:
    from pyspark import SparkContext
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    try:
        if proc is not None and not keep:
            proc.kill()
            proc.wait(timeout)
        elif proc is not None:
            gateway.shutdown()
            proc.stdin.close()
            proc.wait(timeout)
        for writing, archive in list(_ARCHIVE_WRITING.items()):
            if proc is not None and proc.returncode == 0 and os.path.exists(writing):
                os.replace(writing, archive)
    except Exception:               # (the archive is an optimisation: never fail for it)
        pass
    finally:
        for writing in list(_ARCHIVE_WRITING):
            _ARCHIVE_WRITING.pop(writing)
            if os.path.exists(writing):
                os.unlink(writing)
        SparkContext._gateway = SparkContext._jvm = None


def session(master: str = "local[2]", app: str = "fastcoord-replay", *, ui: bool = False,
            shuffle_partitions: Optional[int] = None, executor_python: Optional[str] = None,
            conf: Optional[Dict[str, str]] = None, write_class_archive: bool = False):
    """A SparkSession for the replay on `master` (see the module doc for shipping).
    `conf`: extra Spark settings (e.g. spark.executor.memory). A local JVM maps the
    class-data-sharing archive when there is one; `write_class_archive`: else its JVM
    writes it (stop such a session with end_session, which puts it in place)."""
    if is_connect(master):
        settings = {"spark.sql.execution.arrow.pyspark.enabled": "true",
                    "spark.sql.execution.arrow.maxBytesPerBatch": ARROW_MAX_BYTES_PER_BATCH,
                    "spark.sql.shuffle.partitions": str(shuffle_partitions or NUM_SHARDS)}
        if executor_python:
            settings["spark.pyspark.python"] = executor_python
        settings.update(conf or {})
        return connect_session(master, settings)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    b = (SparkSession.builder.master(master).appName(app)
         .config("spark.ui.enabled", "true" if ui else "false")
         # one progress display at a time: the commands show their own on stderr
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.sql.execution.arrow.maxBytesPerBatch", ARROW_MAX_BYTES_PER_BATCH))
    if is_local(master):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        b = b.config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        if "spark.driver.extraJavaOptions" not in (conf or {}):
            b = b.config("spark.driver.extraJavaOptions", LOCAL_DRIVER_JAVA_OPTIONS
                         + _class_archive_options(write_class_archive))
        # In local mode nothing outside this machine talks to the driver: it listens on
        # loopback, not on the address Spark would pick (the machine's external one).
        # SPARK_LOCAL_IP is the JVM's own local address (read as it starts): without it
        # Spark looks for an external one, and warns when the host name is loopback's.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        b = b.config("spark.driver.bindAddress", "127.0.0.1")
        b = b.config("spark.driver.host", "127.0.0.1")
    else:
        conf = dict(conf or {})
        # PySpark reads the executors' interpreter from PYSPARK_PYTHON when the context
        # starts (not from spark.pyspark.python); unset, the executors run Spark's
        # default `python3`, never our venv.
        executor_python = executor_python or conf.get("spark.pyspark.python")
        if executor_python:
            os.environ["PYSPARK_PYTHON"] = executor_python
        # a user's archives (a packed Python environment) go beside fastcoord's
        archives = [a for a in conf.pop("spark.archives", "").split(",") if a.strip()]
        b = b.config("spark.archives", ",".join(archives + [f"{package_archive()}#{SHIP_NAME}"]))
    # the replay's shuffle has one key per coordinator shard: Spark's default of 200
    # partitions leaves most of them empty and costs every later job (the per-table
    # writes and collects) 200 tasks each
    b = b.config("spark.sql.shuffle.partitions", str(shuffle_partitions or NUM_SHARDS))
    # What the jobs shuffle is the packed trace, whose pieces are LZ4-compressed Arrow
    # already (pack_by_shard): Spark's shuffle compression would only compress them
    # again, spending the JVM's CPU (shared with the workers) for nothing. (A
    # launch-time setting: a Spark Connect
    # server keeps its own.)
    b = b.config("spark.shuffle.compress", "false")
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    return b.getOrCreate()


# the shipped archives, by Connect session id: a session reused by getOrCreate has it
_SHIPPED: Dict[str, str] = {}


def connect_session(url: str, settings: Optional[Dict[str, str]] = None, *, stream=None):
    """A Spark Connect session on `url` (sc://host:port) with fastcoord shipped to it.

    The package archive goes up with `addArtifacts(<zip>#fastcoord, archive=True)`: the
    server unpacks it as `fastcoord/` in the session's own artifact directory, which is
    the Python workers' working directory and first on their sys.path for this session's
    UDFs, so `import fastcoord` there finds the shipped copy. `settings` are set one by
    one with `session.conf.set`: runtime SQL settings take; launch-time ones (memory,
    cores, spark.pyspark.python, ...) belong to the server, which keeps its own, and are
    listed on `stream` (stderr) as not applied rather than failing the job."""
    missing = connect_client_missing()
    if missing:
        raise RuntimeError(
            f"{url}: Spark Connect needs the Connect client packages, missing here: "
            f"{', '.join(missing)} (pip install 'fastcoord[spark]', which has them)")
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.remote(url).getOrCreate()
    not_applied = []
    for key, value in (settings or {}).items():
        try:
            spark.conf.set(key, value)
        except Exception:            # CANNOT_MODIFY_CONFIG: a static or core setting
            not_applied.append(key)
    if not_applied:
        print(f"fastcoord: the Spark Connect server at {url} keeps its launch settings; "
              f"not applied: {', '.join(sorted(not_applied))}", file=stream or sys.stderr)
    archive = package_archive()
    if _SHIPPED.get(spark.session_id) != archive:
        spark.addArtifacts(f"{archive}#{SHIP_NAME}", archive=True)
        _SHIPPED[spark.session_id] = archive
    return spark


def default_parallelism(spark) -> int:
    """The SparkContext's default parallelism (the task slots, on local and standalone
    masters). A Connect client has no SparkContext: there it is the partition count of a
    `range` without one, which Spark sets to the same number (unless the server sets
    spark.sql.leafNodeDefaultParallelism), at the cost of one tiny job."""
    if not is_connect_session(spark):
        return spark.sparkContext.defaultParallelism
    from pyspark.sql import functions as F
    ids = spark.range(1 << 16).select(F.spark_partition_id().alias("p"))
    return ids.agg(F.max("p")).collect()[0][0] + 1


def table_to_ipc(table: pa.Table, *, compress: bool = True) -> bytes:
    """`table` as one Arrow IPC stream (LZ4 unless not `compress`): how results travel
    from a Python worker as a Spark binary value, with their exact types (the replay's
    and what-if's)."""
    sink = pa.BufferOutputStream()
    options = _IPC_OPTIONS if compress else None
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def tables_digest(tables: Dict[str, pa.Table]) -> str:
    """The first 16 hex digits of the sha256 of the tables' uncompressed IPC streams
    (table_to_ipc), one after another in the order of their names, each table's
    chunks combined into one batch: two sets of tables with the same schemas and rows
    in the same order get the same digest. Given replay_local's tables (each in its
    canonical order), this is the replay's golden figure (tests/pipeline/test_replay_golden.py)."""
    digest = hashlib.sha256()
    for name in sorted(tables):
        digest.update(table_to_ipc(tables[name].combine_chunks(), compress=False))
    return digest.hexdigest()[:16]


def table_from_ipc(blob) -> pa.Table:
    """table_to_ipc's table back, from its bytes (or a bytearray, as collect() gives,
    or an Arrow buffer, as ShardInput keeps)."""
    return pa.ipc.open_stream(pa.py_buffer(blob), options=_IPC_READ).read_all()


def table_blobs(name: str, table: pa.Table) -> pa.RecordBatch:
    """`table` as blob rows: at least one (an empty table still says its schema). Each
    chunk's int64 columns of small steps go as steps (steps.to_steps; blob_tables
    decodes them)."""
    chunks = [table.slice(i, RESULT_ROWS_PER_BLOB)
              for i in range(0, table.num_rows, RESULT_ROWS_PER_BLOB)] or [table]
    return pa.RecordBatch.from_arrays(
        [pa.array([name] * len(chunks)),
         pa.array([table_to_ipc(to_steps(c)) for c in chunks])],
        schema=BLOB_SCHEMA)


def _runtime_row(shard: int, impl: str, events: int = 0, replay_s: float = 0.0,
                 write_s: float = 0.0) -> pa.Table:
    import socket

    import fastcoord
    values = {"shard": shard, "fastcoord": os.path.dirname(os.path.abspath(fastcoord.__file__)),
              "python": sys.executable, "impl": impl, "host": socket.gethostname(),
              "events": events, "replay_s": round(replay_s, 4), "write_s": round(write_s, 4)}
    return pa.Table.from_pylist([values], schema=RUNTIME_SCHEMA)


def _replay_shard(table: pa.Table, shard: int, impl, end_ms, num_shards,
                  out_dir: Optional[str] = None):
    """One shard's valid trace rows (pack_by_shard's) -> its result blobs: the replay
    tables (replay.TABLES, unless written to `out_dir` here, see write_shard_tables),
    the runtime row and the shard's count of rows out of order."""
    import time
    t0 = time.perf_counter()
    out, used = replay_shard(table, shard, impl=impl, end_ms=end_ms, num_shards=num_shards)
    t1 = time.perf_counter()
    if out_dir is not None:
        write_shard_tables(out_dir, shard, out)
    else:
        for name, t in out.items():
            yield table_blobs(name, t)
    yield table_blobs(RUNTIME_TABLE, _runtime_row(shard, used, table.num_rows, t1 - t0,
                                                  time.perf_counter() - t1))


def shard_file(out_dir: str, name: str, shard: int) -> str:
    return os.path.join(out_dir, name, f"shard-{shard:05d}.parquet")


def write_shard_tables(out_dir: str, shard: int, tables: Dict[str, pa.Table]) -> None:
    """A shard's result tables, each as out_dir/<table>/shard-<shard>.parquet, written by
    the task that replayed it. The name is the shard's alone and the file appears only
    whole (write_table_file): a retried or speculative task writes the same rows to the
    same name, so the directory never holds a part or a duplicate. A shard's file is
    written even without rows: it carries the table's schema."""
    for name, table in tables.items():
        write_table_file(shard_file(out_dir, name, shard), table)


# -- the packed trace ---------------------------------------------------------------------------
#
# What the shuffle carries, one row per (shard, piece of the trace):
# - a data row: the shard's valid rows of that piece as an LZ4-compressed Arrow IPC
#   stream, `report` null. Compressed by the worker, not by Spark's shuffle (which
#   session() turns off): the values also cross the Arrow socket between JVM and Python
#   twice, and the JVM handles the compressed bytes, a fraction of the values';
# - a report row, `ipc` null: a piece's ingest counts and the time range of its valid
#   rows (ingest.piece_report). Every piece's report goes to shard 0, and every reading
#   task sends its pieces' time range to every shard: a shard's task learns the whole
#   trace's end (where the replay stops) from what it receives, and the driver gets the
#   counts with the results, in one pass over the trace. A retried reading task's rows
#   replace its failed attempt's in the shuffle, so nothing is counted twice.
# `piece` (ingest.ordinal) puts a shard's pieces back in trace order, whatever order
# the shuffle delivers them in: rows with equal (time, seq), as a directory of files
# each numbering its rows from 0 has, replay in the order the trace has them.
SHARD_PIECE_SCHEMA = pa.schema([("shard", pa.int32()), ("piece", pa.int64()),
                                ("ipc", pa.binary()), ("report", pa.string())])
SHARD_PIECE_DDL = spark_ddl(SHARD_PIECE_SCHEMA)
MAX_READ_TASKS = 256        # tasks reading a trace's row groups at most
INGEST_TABLE = "_ingest"    # the piece reports and shards' out-of-order counts, as blobs
INGEST_SCHEMA = pa.schema([("piece", pa.int64()), ("report", pa.string())])


def pack_by_shard(table: pa.Table, num_shards: int = NUM_SHARDS, piece: int = 0, *,
                  lean: bool = True) -> pa.RecordBatch:
    """Valid trace rows -> data rows of SHARD_PIECE_SCHEMA, one per shard present,
    shards ascending, numbered `piece`.

    The rows take the trace schema's types (the files of one trace may differ, and a
    shard's pieces are put together again). `lean` (the replay): a client id stays
    only on joins, the one event the replay reads it on, and a recorded error is
    dropped (the replay makes its own answers): less to encode and shuffle; and the
    group ids, member ids and events go dictionary-encoded (DICTIONARY_COLUMNS), one
    dictionary per shard's piece: the replay numbers members and groups and reads
    events from the indices (replay._encoded) instead of hashing every row's strings
    again, and the pieces cross the shuffle smaller. What-if reads a member's client
    id from its first request of any kind. A null group id fails here (shard_array's
    TypeError), as it fails the single-process replay."""
    import pyarrow.compute as pc

    from .trace import TRACE_SCHEMA
    table = table.select(TRACE_SCHEMA.names).cast(TRACE_SCHEMA)
    if lean:
        on_join = pc.equal(table.column("event"), "join")
        table = table.set_column(
            table.schema.get_field_index("client_id"), "client_id",
            pc.if_else(on_join, table.column("client_id"), pa.scalar(None, pa.string())))
        table = table.set_column(table.schema.get_field_index("error"), "error",
                                 pa.nulls(table.num_rows, table.schema.field("error").type))
    parts = split_on(table, shard_array(table.column("group_id"), num_shards))
    if lean:
        parts = {shard: dictionary_columns(part) for shard, part in parts.items()}
    n = len(parts)
    return pa.RecordBatch.from_arrays(
        [pa.array(list(parts), pa.int32()), pa.array([piece] * n, pa.int64()),
         pa.array([table_to_ipc(p) for p in parts.values()], pa.binary()),
         pa.nulls(n, pa.string())], schema=SHARD_PIECE_SCHEMA)


# The columns of a replay's packed rows sent dictionary-encoded (see pack_by_shard)
DICTIONARY_COLUMNS = ("group_id", "member_id", "event")


def dictionary_columns(table: pa.Table) -> pa.Table:
    """`table` with its DICTIONARY_COLUMNS dictionary-encoded (one dictionary each)."""
    for name in DICTIONARY_COLUMNS:
        at = table.schema.get_field_index(name)
        table = table.set_column(at, name, table.column(name).combine_chunks().dictionary_encode())
    return table


def _report_rows(shards: List[int], pieces: List[int], reports: List[str]) -> pa.RecordBatch:
    n = len(shards)
    return pa.RecordBatch.from_arrays(
        [pa.array(shards, pa.int32()), pa.array(pieces, pa.int64()), pa.nulls(n, pa.binary()),
         pa.array(reports, pa.string())], schema=SHARD_PIECE_SCHEMA)


def pack_pieces(pieces, num_shards: int, lean: bool = True):
    """ingest's validated pieces (ordinal, valid rows, counts) -> SHARD_PIECE_SCHEMA
    batches: each piece's data rows, then the reports (see above)."""
    from .ingest import piece_report, span_report, time_span, wider
    ordinals, reports, span = [], [], (None, None)
    for number, good, stats in pieces:
        if good.num_rows:
            yield pack_by_shard(good, num_shards, number, lean=lean)
        piece_span = time_span(good)
        ordinals.append(number)
        reports.append(piece_report(stats, piece_span))
        span = wider(span, *piece_span)
    if not ordinals:
        return
    yield _report_rows([0] * len(ordinals), ordinals, reports)
    if num_shards > 1 and span[1] is not None:
        text = span_report(span)
        yield _report_rows(list(range(1, num_shards)), [ordinals[0]] * (num_shards - 1),
                           [text] * (num_shards - 1))


def _pack_units_fn(units, num_shards, lean=True):
    """The task of a range of trace units (spark.range ids): each unit (file, row group)
    read by the worker itself and validated piece by piece (ingest.read_unit)."""
    def pack(batches):
        from .ingest import read_unit
        for batch in batches:
            ids = batch.column("id").to_pylist()
            yield from pack_pieces((p for i in ids for p in read_unit(units, i)),
                                   num_shards, lean)
    return pack


def _pack_dataframe_fn(num_shards, lean=True):
    """The task of a partition of a trace DataFrame: its rows, validated piece by piece,
    numbered after the partition."""
    def pack(batches):
        from pyspark import TaskContext

        from .ingest import ordinal, validated_pieces
        partition = TaskContext.get().partitionId()
        yield from pack_pieces(validated_pieces(batches, ordinal(partition, 0)), num_shards,
                               lean)
    return pack


def packed_trace(spark, path: str, *, num_shards: int = NUM_SHARDS, lean: bool = True):
    """A Parquet trace (a file or a directory) as SHARD_PIECE_SCHEMA rows. The Python
    workers read its row groups with pyarrow, one task per row group (MAX_READ_TASKS
    at most), and validate them where they read them: the path must be readable by
    the executors, as for spark.read; the driver reads only the files' footers."""
    from .ingest import trace_units
    units = trace_units(path)
    ids = spark.range(0, len(units), 1, numPartitions=max(1, min(len(units), MAX_READ_TASKS)))
    return ids.mapInArrow(_pack_units_fn(units, num_shards, lean), schema=SHARD_PIECE_DDL)


def packed_dataframe(df, *, num_shards: int = NUM_SHARDS, lean: bool = True):
    """packed_trace for a trace DataFrame (its trace columns; a missing one is reported
    as validate reports it)."""
    from .trace import TRACE_SCHEMA
    return df.select(*[c for c in TRACE_SCHEMA.names if c in df.columns]).mapInArrow(
        _pack_dataframe_fn(num_shards, lean), schema=SHARD_PIECE_DDL)


class ShardInput:
    """What a task of the shuffle by shard received, put back together: per shard its
    valid rows in trace order and the whole trace's last valid time (where its replay
    stops); per key, the piece reports it received (shard 0's)."""

    def __init__(self, batches, keys=lambda batch: batch.column("shard").to_pylist()):
        self.pieces: Dict[object, list] = {}
        self.last: Dict[object, int] = {}
        self.reports: Dict[object, List[Tuple[int, str]]] = {}
        for batch in batches:
            for k, piece, blob, report in zip(keys(batch), batch.column("piece").to_pylist(),
                                              batch.column("ipc"),
                                              batch.column("report").to_pylist()):
                if blob.is_valid:
                    # kept as the batch's own bytes (no copy) and decoded only when its
                    # shard's turn comes (rows): one shard's rows in memory at a time,
                    # not the task's whole share of the trace
                    self.pieces.setdefault(k, []).append((piece, blob.as_buffer()))
                    continue
                bounds = json.loads(report)
                if "stats" in bounds:
                    self.reports.setdefault(k, []).append((piece, report))
                if bounds["last_ms"] is not None:
                    self.last[k] = max(self.last.get(k, bounds["last_ms"]), bounds["last_ms"])

    def keys(self) -> List[object]:
        """The keys with rows, ascending."""
        return sorted(self.pieces)

    def rows(self, k) -> pa.Table:
        return pa.concat_tables([table_from_ipc(blob) for _, blob in
                                 sorted(self.pieces[k], key=lambda p: p[0])])


def out_of_order_report(shard: int, rows: pa.Table) -> Tuple[int, str]:
    """A shard's out-of-order count as a report (numbered below every piece)."""
    from .ingest import piece_report
    from .trace import IngestStats, count_out_of_order
    return -1 - shard, piece_report(IngestStats(out_of_order=count_out_of_order(rows)),
                                    (None, None))


def ingest_blob(reports: List[Tuple[int, str]]) -> pa.RecordBatch:
    pieces, texts = zip(*reports) if reports else ((), ())
    return table_blobs(INGEST_TABLE, pa.table([pa.array(pieces, pa.int64()),
                                               pa.array(texts, pa.string())],
                                              schema=INGEST_SCHEMA))


def per_shard(batches, work, ingest=lambda blob: blob):
    """The skeleton of a task of the shuffle by shard: its pieces put together by shard
    (ShardInput), then work(shard, rows, end_ms) for every shard in turn, shards
    ascending (its batches yielded; end_ms: the trace's last valid time), then the
    ingest reports the task received with each shard's out-of-order count, as
    ingest(ingest_blob(...)). A shard's pieces are all in one partition (the shuffle's
    key), so this is the same work as one task per shard."""
    got = ShardInput(batches)
    reports = list(got.reports.get(0, ()))
    for shard in got.keys():
        rows = got.rows(shard)
        reports.append(out_of_order_report(shard, rows))
        yield from work(shard, rows, got.last.get(shard))
    if reports:
        yield ingest(ingest_blob(reports))


def _run_partition_fn(impl, num_shards, out_dir: Optional[str] = None):
    """The task of one partition of the shuffle by shard (mapInArrow): every shard
    replayed in turn up to the trace's end (per_shard)."""
    def run(batches):
        return per_shard(batches, lambda shard, rows, end_ms: _replay_shard(
            rows, shard, impl, end_ms, num_shards, out_dir))
    return run


def replay_trace_file(spark, path: str, *, impl=None, num_shards: int = NUM_SHARDS,
                      out_dir: Optional[str] = None):
    """A Parquet trace (a file or a directory) -> the result blobs (BLOB_DDL: each row a
    chunk of the table it names, as Arrow IPC; `decoded_table` turns them into rows),
    read and validated by the tasks (packed_trace). With `out_dir`, the tasks write the
    replay tables (replay.TABLES) there themselves (write_shard_tables; the directories
    must exist) and the blobs hold only the runtime rows and the ingest reports
    (`ingest_stats`)."""
    return _replay_packed(packed_trace(spark, path, num_shards=num_shards), impl,
                          num_shards, out_dir)


def replay_dataframe(spark, df, *, impl=None, num_shards: int = NUM_SHARDS):
    """replay_trace_file's blobs for a trace DataFrame."""
    return _replay_packed(packed_dataframe(df, num_shards=num_shards), impl, num_shards)


def _replay_packed(packed, impl, num_shards, out_dir=None):
    # repartition by column: every shard's pieces in one partition; adaptive execution
    # may coalesce small partitions
    return packed.repartition("shard").mapInArrow(
        _run_partition_fn(impl, num_shards, out_dir), schema=BLOB_DDL)


def blob_tables(rows, names: Dict[str, pa.Schema]) -> Dict[str, pa.Table]:
    """Collected blob rows -> the tables named in `names` (each its schema when no
    blob holds it)."""
    parts: Dict[str, list] = {name: [] for name in names}
    for row in rows:
        if row["table"] in parts:
            # (in the table's schema: a replay's responses come dictionary-encoded)
            table = from_steps(table_from_ipc(row["ipc"]))
            parts[row["table"]].append(table.cast(names[row["table"]]))
    return {name: pa.concat_tables(parts[name]) if parts[name] else schema.empty_table()
            for name, schema in names.items()}


def decoded_table(blobs, name: str, schema: pa.Schema) -> pa.Table:
    """The rows of table `name` from the result blobs, collected into the driver."""
    rows = blobs.filter(blobs.table == name).select("table", "ipc").collect()
    return blob_tables(rows, {name: schema})[name]


def ingest_stats(reports: pa.Table):
    """The INGEST_TABLE rows gathered from the tasks -> the trace's IngestStats and its
    first and last valid times."""
    from .ingest import merge_reports
    return merge_reports(zip(reports.column("piece").to_pylist(),
                             reports.column("report").to_pylist()))


def replay_spark(spark, trace_path: str, out_dir: Optional[str] = None, *, impl=None,
                 num_shards: int = NUM_SHARDS, stats=None) -> Dict[str, pa.Table]:
    """Replay a Parquet trace on Spark. With `out_dir`, each table is written there as
    Parquet (out_dir/<table>/shard-NNNNN.parquet, one file per shard, written by the
    task that replayed it), and runtime.json lists, per shard, the executor
    Python, where it imported fastcoord from and which twin ran; returns the tables
    collected (canonical order). The tasks set bad rows aside (trace.validate); the
    counts are merged into `stats` (an IngestStats) when given."""
    return _replay_spark(spark, trace_path, out_dir, impl=impl, num_shards=num_shards,
                         collect=True, stats=stats)


def write_replay_spark(spark, trace_path: str, out_dir: str, *, impl=None,
                       num_shards: int = NUM_SHARDS, stats=None) -> Dict[str, int]:
    """replay_spark's files (out_dir/<table>/ and runtime.json) without collecting the
    tables into the driver: each table's row count, read from the Parquet files
    written. What `fastcoord replay` needs: a 10M-event trace's 10M response rows
    would otherwise cross to the driver and be sorted there only to be counted."""
    _replay_spark(spark, trace_path, out_dir, impl=impl, num_shards=num_shards, collect=False,
                  stats=stats)
    import pyarrow.dataset as ds
    return {name: ds.dataset(os.path.join(out_dir, name), format="parquet").count_rows()
            for name in TABLES}


def _replay_spark(spark, trace_path, out_dir, *, impl, num_shards, collect, stats):
    def counted(reports: pa.Table) -> None:
        if stats is not None:
            stats.merge(ingest_stats(reports)[0])

    if out_dir is None:
        # cached: each table's collect reads the blobs of one replay
        blobs = replay_trace_file(spark, trace_path, impl=impl, num_shards=num_shards).cache()
        try:
            counted(decoded_table(blobs, INGEST_TABLE, INGEST_SCHEMA))
            return {name: canonical(decoded_table(blobs, name, schema), name)
                    for name, schema in TABLES.items()}
        finally:
            blobs.unpersist()
    # The tasks write the tables themselves (write_shard_tables): no result rows to
    # convert, cache and decode again for Spark's writer; the job returns the runtime
    # rows and the ingest reports alone, in one collect.
    fresh_table_dirs(out_dir)
    blobs = replay_trace_file(spark, trace_path, impl=impl, num_shards=num_shards,
                              out_dir=out_dir)
    small = blob_tables(blobs.collect(), {RUNTIME_TABLE: RUNTIME_SCHEMA,
                                          INGEST_TABLE: INGEST_SCHEMA})
    counted(small[INGEST_TABLE])
    rows = small[RUNTIME_TABLE].sort_by("shard").to_pylist()
    for name, schema in TABLES.items():
        folder = os.path.join(out_dir, name)
        if not any(f.endswith(".parquet") and not f.startswith(".") for f in os.listdir(folder)):
            # no shard at all: the schema, no rows
            write_table_file(os.path.join(folder, "empty.parquet"), schema.empty_table())
    with open(os.path.join(out_dir, "runtime.json"), "w") as f:
        json.dump(rows, f, indent=2)
    if not collect:
        return {}
    import pyarrow.dataset as ds
    return {name: canonical(ds.dataset(os.path.join(out_dir, name), format="parquet")
                            .to_table(), name)
            for name in TABLES}


# -- where a command's time goes ------------------------------------------------------------------

class StageClock:
    """While a job runs (`with`), when each of its Spark stages was first seen running (a
    background thread polling the status tracker every `interval` seconds): `split()`
    turns that into the driver's planning (from the start until the first stage runs),
    the first stage (the replay's reading, validating and packing of the trace), the
    rest (the shuffle by shard: replay and the tasks' writing) until no stage runs, and
    the driver's finishing after that. A Spark Connect session has no status tracker
    here: its job is one span."""

    def __init__(self, spark, interval: float = 0.05):
        import threading
        self.tracker = None if is_connect_session(spark) else spark.sparkContext.statusTracker()
        self.interval = interval
        self.first_seen: Dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.start = self.end = self.last_active = 0.0

    def _run(self) -> None:
        import time
        while not self._stop.wait(self.interval):
            try:
                ids = self.tracker.getActiveStageIds()
            except Exception:          # the context is going away
                return
            now = time.perf_counter()
            for sid in ids:
                self.first_seen.setdefault(sid, now)
            if ids:
                self.last_active = now

    def __enter__(self) -> "StageClock":
        import time
        self.start = time.perf_counter()
        if self.tracker is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        import time
        self.end = time.perf_counter()
        if self.tracker is not None:
            self._stop.set()
            self._thread.join()

    def split(self) -> Dict[str, float]:
        """{planning, reading_packing, replay_writing, finishing} seconds, or {job}
        when fewer than two stages were seen."""
        seen = sorted(self.first_seen.values())
        if len(seen) < 2:
            return {"job": self.end - self.start}
        return {"planning": seen[0] - self.start, "reading_packing": seen[1] - seen[0],
                "replay_writing": self.last_active - seen[1],
                "finishing": self.end - self.last_active}

"""The Spark replay: partition the trace by coordinator shard, run each shard's
ShardReplay inside a Python worker (`repartition("shard").mapInArrow`), write the same
tables as the single-process replay.

The trace reaches the shuffle packed: the Python workers read its Parquet row groups
themselves (pyarrow), map each row's group to its shard, and hand Spark one row per
(shard, piece of the trace) holding that shard's rows as an Arrow IPC stream. The JVM
moves a few hundred binary values instead of converting 10M rows from Parquet to its
rows, shuffling them, and converting them again to Arrow for the replay.

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

import hashlib
import json
import os
import sys
import tempfile
import zipfile
from typing import Dict, List, Optional, Tuple

import pandas as pd
import pyarrow as pa

from .replay import (NUM_SHARDS, TABLES, ShardReplay, canonical, fresh_table_dirs,
                     shard_array, split_on, write_table_file)

_SPARK_TYPES = {pa.int32(): "int", pa.int64(): "bigint", pa.string(): "string",
                pa.binary(): "binary"}


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark DDL of an Arrow schema of int32, int64, string and binary columns."""
    return ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in schema)


# Each worker call also sends a "_runtime" table of one row per shard: where fastcoord
# came from and which twin ran, so a cluster run can be checked (runtime.json) without a
# second job.
RUNTIME_TABLE = "_runtime"
RUNTIME_SCHEMA = pa.schema([("shard", pa.int32()), ("fastcoord", pa.string()),
                            ("python", pa.string()), ("impl", pa.string()),
                            ("host", pa.string())])

# Results the driver collects (replay_spark without an output directory, and the
# runtime rows) leave the workers as Arrow IPC streams (LZ4-compressed), one row per
# (table, chunk of at most RESULT_ROWS_PER_BLOB rows): a few binary values instead of
# wide rows, whose conversion checks every cell of every other table's columns for
# null. Tables for an output directory are written by the replay tasks themselves
# (write_shard_tables).
BLOB_SCHEMA = pa.schema([("table", pa.string()), ("ipc", pa.binary())])
BLOB_DDL = spark_ddl(BLOB_SCHEMA)
RESULT_ROWS_PER_BLOB = 100_000      # a blob of a few MB at most
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")

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


# Spark measures the Arrow batch it is filling for a Python worker after every row
# (ArrowWriter.sizeInBytes over the whole struct of columns) unless this byte limit is
# Int.MaxValue, which turns the check off: 718 of 2,060 JFR samples of the JVM in the
# replay stage on the 10M-event benchmark were in it, when Spark still fed the replay
# the trace's rows (what-if's tasks and replay_dataframe's packing are still fed so). Batches stay bounded by
# spark.sql.execution.arrow.maxRecordsPerBatch (10,000 rows of a trace: a few hundred
# KiB), far below Arrow's 2 GiB limit that the byte limit guards against.
ARROW_MAX_BYTES_PER_BATCH = str(2**31 - 1)


def session(master: str = "local[2]", app: str = "fastcoord-replay", *, ui: bool = False,
            shuffle_partitions: Optional[int] = None, executor_python: Optional[str] = None,
            conf: Optional[Dict[str, str]] = None):
    """A SparkSession for the replay on `master` (see the module doc for shipping).
    `conf`: extra Spark settings (e.g. spark.executor.memory)."""
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
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.sql.execution.arrow.maxBytesPerBatch", ARROW_MAX_BYTES_PER_BATCH))
    if is_local(master):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        b = b.config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    else:
        # PySpark reads the executors' interpreter from PYSPARK_PYTHON when the context
        # starts; unset, the executors run Spark's default `python3`, never our venv.
        if executor_python:
            os.environ["PYSPARK_PYTHON"] = executor_python
        b = b.config("spark.archives", f"{package_archive()}#{SHIP_NAME}")
    # the replay's shuffle has one key per coordinator shard: Spark's default of 200
    # partitions leaves most of them empty and costs every later job (the per-table
    # writes and collects) 200 tasks each
    b = b.config("spark.sql.shuffle.partitions", str(shuffle_partitions or NUM_SHARDS))
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


def shard_udf(num_shards: int):
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("int")
    def shard(groups: pd.Series) -> pd.Series:
        from .replay import shard_column
        return pd.Series(shard_column(groups.tolist(), num_shards), dtype="int32")
    return shard


def table_to_ipc(table: pa.Table, *, compress: bool = True) -> bytes:
    """`table` as one Arrow IPC stream (LZ4 unless not `compress`): how results travel
    from a Python worker as a Spark binary value, with their exact types (the replay's
    and what-if's)."""
    sink = pa.BufferOutputStream()
    options = _IPC_OPTIONS if compress else None
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def table_from_ipc(blob) -> pa.Table:
    """table_to_ipc's table back, from its bytes (or bytearray, as collect() gives)."""
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


def _blobs(name: str, table: pa.Table) -> pa.RecordBatch:
    """`table` as blob rows: at least one (an empty table still says its schema)."""
    chunks = [table.slice(i, RESULT_ROWS_PER_BLOB)
              for i in range(0, table.num_rows, RESULT_ROWS_PER_BLOB)] or [table]
    return pa.RecordBatch.from_arrays(
        [pa.array([name] * len(chunks)), pa.array([table_to_ipc(c) for c in chunks])],
        schema=BLOB_SCHEMA)


def _runtime_row(shard: int, impl: str) -> pa.Table:
    import socket

    import fastcoord
    values = {"shard": shard, "fastcoord": os.path.dirname(os.path.abspath(fastcoord.__file__)),
              "python": sys.executable, "impl": impl, "host": socket.gethostname()}
    return pa.Table.from_pylist([values], schema=RUNTIME_SCHEMA)


def _replay_shard(table: pa.Table, shard: int, impl, end_ms, num_shards,
                  out_dir: Optional[str] = None):
    """One shard's trace rows (in the trace schema: pack_by_shard's) -> its result
    blobs: the four tables (unless written to `out_dir` here, see write_shard_tables)
    and the runtime row."""
    replay = ShardReplay(shard, impl=impl, num_shards=num_shards)
    out = replay.run(table, end_ms)
    used = replay.coord.impl if replay.coord is not None else "none"
    if out_dir is not None:
        write_shard_tables(out_dir, shard, out)
    else:
        for name, t in out.items():
            yield _blobs(name, t)
    yield _blobs(RUNTIME_TABLE, _runtime_row(shard, used))


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


def _run_partition_fn(impl, end_ms, num_shards, out_dir: Optional[str] = None):
    """The task of one partition of the shuffle by shard (mapInArrow): its packed pieces
    (SHARD_PIECE_SCHEMA rows) put together by shard, then every shard replayed in turn,
    shards ascending. A shard's pieces are all in one partition (the shuffle's key), so
    this is the same work as one task per shard."""
    def run(batches):
        pieces: Dict[int, list] = {}
        for batch in batches:
            for shard, blob in zip(batch.column("shard").to_pylist(),
                                   batch.column("ipc").to_pylist()):
                pieces.setdefault(shard, []).append(table_from_ipc(blob))
        for shard in sorted(pieces):
            yield from _replay_shard(pa.concat_tables(pieces[shard]), shard, impl, end_ms,
                                     num_shards, out_dir)
    return run


def with_shards(df, num_shards: int = NUM_SHARDS):
    """`df` with a `shard` column: its group's coordinator shard (Kafka's partitionFor).

    The Java string hash runs in Python once per distinct group (`shard_udf`), and the
    mapping goes back to the rows as a broadcast join in the JVM: per row in a pandas
    UDF it cost 11 s of the 10M-event benchmark's stage on one core, the join 1.7 s.

    The join is null-safe (<=>) so that a null group id reaches the UDF, which fails the
    job on it as it did per row (shard_for's TypeError). With a plain equi-join Spark
    infers `group_id IS NOT NULL` for the mapping side: the null group would never be
    hashed and its rows would go on with a null shard."""
    from pyspark.sql import functions as F
    mapping = df.select("group_id").distinct().select(
        F.col("group_id").alias("_shard_group"),
        shard_udf(num_shards)(F.col("group_id")).alias("shard"))
    joined = df.join(F.broadcast(mapping), df.group_id.eqNullSafe(mapping._shard_group), "left")
    return joined.drop("_shard_group")


# What the shuffle carries: one row per (shard, piece of the trace), the shard's rows of
# that piece as an uncompressed Arrow IPC stream (Spark compresses shuffle blocks).
SHARD_PIECE_SCHEMA = pa.schema([("shard", pa.int32()), ("ipc", pa.binary())])
SHARD_PIECE_DDL = spark_ddl(SHARD_PIECE_SCHEMA)
PACK_ROWS = 1 << 20         # trace rows per packed piece at most: bounds a worker's memory
MAX_READ_TASKS = 256        # tasks reading a trace's row groups at most


def pack_by_shard(table: pa.Table, num_shards: int = NUM_SHARDS) -> pa.RecordBatch:
    """Trace rows -> SHARD_PIECE_SCHEMA rows, one per shard present, shards ascending.

    The rows take the trace schema's types (the files of one trace may differ, and a
    shard's pieces are put together again). A client id stays only on joins, the one
    event that reads it, and a recorded error is dropped (the replay makes its own
    answers): less to encode and shuffle. A null group id fails here (shard_array's
    TypeError), as it fails the single-process replay."""
    import pyarrow.compute as pc

    from .trace import TRACE_SCHEMA
    table = table.select(TRACE_SCHEMA.names).cast(TRACE_SCHEMA)
    on_join = pc.equal(table.column("event"), "join")
    table = table.set_column(
        table.schema.get_field_index("client_id"), "client_id",
        pc.if_else(on_join, table.column("client_id"), pa.scalar(None, pa.string())))
    table = table.set_column(table.schema.get_field_index("error"), "error",
                             pa.nulls(table.num_rows, table.schema.field("error").type))
    parts = split_on(table, shard_array(table.column("group_id"), num_shards))
    return pa.RecordBatch.from_arrays(
        [pa.array(list(parts), pa.int32()),
         pa.array([table_to_ipc(p, compress=False) for p in parts.values()], pa.binary())],
        schema=SHARD_PIECE_SCHEMA)


def _pack_batches(batches, num_shards):
    """Arrow batches of trace rows -> packed pieces of about PACK_ROWS rows at most."""
    held, rows = [], 0
    for batch in batches:
        if batch.num_rows:
            held.append(batch)
            rows += batch.num_rows
        if rows >= PACK_ROWS:
            yield pack_by_shard(pa.Table.from_batches(held), num_shards)
            held, rows = [], 0
    if held:
        yield pack_by_shard(pa.Table.from_batches(held), num_shards)


def _pack_dataframe_fn(num_shards):
    def pack(batches):
        yield from _pack_batches(batches, num_shards)
    return pack


def _pack_units_fn(units, num_shards):
    """The task of a range of trace units (spark.range ids): each unit (file, row group)
    read by the worker itself, in batches, and packed."""
    def pack(batches):
        import pyarrow.parquet as pq

        from .trace import TRACE_SCHEMA
        for batch in batches:
            for i in batch.column("id").to_pylist():
                path, row_group = units[i]
                with pq.ParquetFile(path) as f:
                    yield from _pack_batches(
                        f.iter_batches(row_groups=[row_group], columns=TRACE_SCHEMA.names),
                        num_shards)
    return pack


def trace_units(path: str) -> Tuple[List[Tuple[str, int]], Optional[int]]:
    """A Parquet trace (a file, or a directory of them) as (file, row group) units, in
    file order, and its last event time (None without rows): from the row groups'
    statistics, else by reading the time column. A file without one of the trace's
    columns is a ValueError naming them."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from .trace import TRACE_SCHEMA
    units: List[Tuple[str, int]] = []
    end_ms: Optional[int] = None
    for fragment in ds.dataset(path, format="parquet").get_fragments():
        names = set(fragment.physical_schema.names)
        missing = [n for n in TRACE_SCHEMA.names if n not in names]
        if missing:
            raise ValueError(f"trace file {fragment.path} lacks column(s) {missing}")
        for rg in fragment.row_groups:
            if not rg.num_rows:
                continue
            units.append((fragment.path, rg.id))
            last = (rg.statistics or {}).get("time_ms", {}).get("max")
            if last is None:                    # written without statistics
                with pq.ParquetFile(fragment.path) as f:
                    times = f.read_row_group(rg.id, columns=["time_ms"]).column("time_ms")
                last = pc.max(times).as_py()
            if last is not None:
                end_ms = last if end_ms is None else max(end_ms, last)
    return units, end_ms


def replay_trace_file(spark, path: str, *, impl=None, num_shards: int = NUM_SHARDS,
                      out_dir: Optional[str] = None):
    """A Parquet trace (a file or a directory) -> the result blobs (BLOB_DDL: each row a
    chunk of the table it names, as Arrow IPC; `decoded_table` turns them into rows).
    The Python workers read its row groups with pyarrow, one task per row group
    (MAX_READ_TASKS at most): the path must be readable by the executors, as for
    spark.read. With `out_dir`, the tasks write the four tables there themselves
    (write_shard_tables; the directories must exist) and the blobs hold only the
    runtime rows."""
    units, end_ms = trace_units(path)
    ids = spark.range(0, len(units), 1, numPartitions=max(1, min(len(units), MAX_READ_TASKS)))
    packed = ids.mapInArrow(_pack_units_fn(units, num_shards), schema=SHARD_PIECE_DDL)
    return _replay_packed(packed, impl, end_ms, num_shards, out_dir)


def replay_dataframe(spark, df, *, impl=None, num_shards: int = NUM_SHARDS):
    """replay_trace_file's blobs for a trace DataFrame (every trace column present)."""
    from pyspark.sql import functions as F

    from .trace import TRACE_SCHEMA
    end_ms = df.agg(F.max("time_ms")).collect()[0][0]
    packed = df.select(*TRACE_SCHEMA.names).mapInArrow(_pack_dataframe_fn(num_shards),
                                                       schema=SHARD_PIECE_DDL)
    return _replay_packed(packed, impl, end_ms, num_shards)


def _replay_packed(packed, impl, end_ms, num_shards, out_dir=None):
    # repartition by column: every shard's pieces in one partition; adaptive execution
    # may coalesce small partitions
    return packed.repartition("shard").mapInArrow(
        _run_partition_fn(impl, end_ms, num_shards, out_dir), schema=BLOB_DDL)


def decoded_table(blobs, name: str, schema: pa.Schema) -> pa.Table:
    """The rows of table `name` from the result blobs, collected into the driver."""
    parts = [table_from_ipc(row["ipc"])
             for row in blobs.filter(blobs.table == name).select("ipc").collect()]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def replay_spark(spark, trace_path: str, out_dir: Optional[str] = None, *, impl=None,
                 num_shards: int = NUM_SHARDS) -> Dict[str, pa.Table]:
    """Replay a Parquet trace on Spark. With `out_dir`, each table is written there as
    Parquet (out_dir/<table>/shard-NNNNN.parquet, one file per shard, written by the
    task that replayed it), and runtime.json lists, per shard, the executor
    Python, where it imported fastcoord from and which twin ran; returns the tables
    collected (canonical order)."""
    return _replay_spark(spark, trace_path, out_dir, impl=impl, num_shards=num_shards,
                         collect=True)


def write_replay_spark(spark, trace_path: str, out_dir: str, *, impl=None,
                       num_shards: int = NUM_SHARDS) -> Dict[str, int]:
    """replay_spark's files (out_dir/<table>/ and runtime.json) without collecting the
    tables into the driver: each table's row count, read from the Parquet files
    written. What `fastcoord replay` needs: a 10M-event trace's 10M response rows
    would otherwise cross to the driver and be sorted there only to be counted."""
    _replay_spark(spark, trace_path, out_dir, impl=impl, num_shards=num_shards, collect=False)
    import pyarrow.dataset as ds
    return {name: ds.dataset(os.path.join(out_dir, name), format="parquet").count_rows()
            for name in TABLES}


def _replay_spark(spark, trace_path, out_dir, *, impl, num_shards, collect):
    if out_dir is None:
        # cached: each table's collect reads the blobs of one replay
        blobs = replay_trace_file(spark, trace_path, impl=impl, num_shards=num_shards).cache()
        try:
            return {name: canonical(decoded_table(blobs, name, schema), name)
                    for name, schema in TABLES.items()}
        finally:
            blobs.unpersist()
    # The tasks write the tables themselves (write_shard_tables): no result rows to
    # convert, cache and decode again for Spark's writer; the job returns the runtime
    # rows alone.
    fresh_table_dirs(out_dir)
    blobs = replay_trace_file(spark, trace_path, impl=impl, num_shards=num_shards,
                              out_dir=out_dir)
    rows = decoded_table(blobs, RUNTIME_TABLE, RUNTIME_SCHEMA).sort_by("shard").to_pylist()
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

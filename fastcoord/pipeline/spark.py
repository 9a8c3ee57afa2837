"""The Spark replay: partition the trace by coordinator shard, run each shard's
ShardReplay inside a Python worker (`groupBy("shard").applyInPandas`), write the same
tables as the single-process replay.

`session(master)` makes a SparkSession with PYSPARK_PYTHON set to this interpreter
(so the workers import the same fastcoord, compiled extension included).
"""
from __future__ import annotations

import os
import sys
from typing import Dict, Optional

import pandas as pd
import pyarrow as pa

from .replay import NUM_SHARDS, TABLES, canonical, replay_shard_table

# One wide row type carries the four tables out of the workers ("table" says which).
_WIDE: Dict[str, pa.DataType] = {"table": pa.string()}
for _schema in TABLES.values():
    for _f in _schema:
        if _f.name not in _WIDE:
            _WIDE[_f.name] = _f.type
WIDE_SCHEMA = pa.schema(list(_WIDE.items()))
_SPARK_TYPES = {pa.int32(): "int", pa.int64(): "bigint", pa.string(): "string"}
WIDE_DDL = ", ".join(f"{n} {_SPARK_TYPES[t]}" for n, t in _WIDE.items())


def session(master: str = "local[2]", app: str = "fastcoord-replay", *, ui: bool = False,
            shuffle_partitions: Optional[int] = None):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    b = (SparkSession.builder.master(master).appName(app)
         .config("spark.ui.enabled", "true" if ui else "false")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable))
    if shuffle_partitions:
        b = b.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    return b.getOrCreate()


def _shard_udf(num_shards: int):
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("int")
    def shard(groups: pd.Series) -> pd.Series:
        from .replay import shard_column
        return pd.Series(shard_column(groups.tolist(), num_shards), dtype="int32")
    return shard


def _run_shard_fn(impl, end_ms, num_shards):
    def run(pdf):
        from .trace import TRACE_SCHEMA
        shard = int(pdf["shard"].iloc[0])
        table = pa.Table.from_pandas(pdf.drop(columns=["shard"]), preserve_index=False)
        table = pa.table({f.name: table.column(f.name).cast(f.type) for f in TRACE_SCHEMA},
                         schema=TRACE_SCHEMA)
        out = replay_shard_table(table, shard, impl=impl, end_ms=end_ms, num_shards=num_shards)
        frames = []
        for name, t in out.items():
            cols = {}
            for fname, ftype in _WIDE.items():
                if fname == "table":
                    cols[fname] = pa.array([name] * t.num_rows, pa.string())
                elif fname in t.column_names:
                    cols[fname] = t.column(fname)
                else:
                    cols[fname] = pa.nulls(t.num_rows, ftype)
            frames.append(pa.table(cols, schema=WIDE_SCHEMA).to_pandas())
        return pd.concat(frames, ignore_index=True)
    return run


def replay_dataframe(spark, df, *, impl=None, num_shards: int = NUM_SHARDS):
    """A trace DataFrame -> the wide result DataFrame (column `table` names the table)."""
    from pyspark.sql import functions as F
    end_ms = df.agg(F.max("time_ms")).collect()[0][0]
    with_shard = df.withColumn("shard", _shard_udf(num_shards)(F.col("group_id")))
    return with_shard.groupBy("shard").applyInPandas(
        _run_shard_fn(impl, end_ms, num_shards), schema=WIDE_DDL)


def replay_spark(spark, trace_path: str, out_dir: Optional[str] = None, *, impl=None,
                 num_shards: int = NUM_SHARDS) -> Dict[str, pa.Table]:
    """Replay a Parquet trace on Spark. With `out_dir`, each table is written there as
    Parquet (out_dir/<table>/) by Spark; returns the tables collected (canonical order)."""
    wide = replay_dataframe(spark, spark.read.parquet(trace_path), impl=impl,
                            num_shards=num_shards).cache()
    result = {}
    for name, schema in TABLES.items():
        part = wide.filter(wide.table == name).select(*schema.names)
        if out_dir is not None:
            part.write.mode("overwrite").parquet(os.path.join(out_dir, name))
        table = part.toArrow() if hasattr(part, "toArrow") else pa.Table.from_pandas(
            part.toPandas(), preserve_index=False)
        result[name] = canonical(table, name)
    wide.unpersist()
    return result

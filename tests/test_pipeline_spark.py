"""The replay on real Spark (local[2]): golden traces, and Spark == single-process."""
import os
import sys

import pytest

pytest.importorskip("pyspark")
from fastcoord.pipeline.gen import generate
from fastcoord.pipeline.replay import replay_local
from fastcoord.pipeline.spark import replay_spark, write_replay_spark
from fastcoord.pipeline.trace import read_trace, write_trace

from test_pipeline_replay import crash_trace, leave_trace, static_restart_trace


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2]").appName("fastcoord-tests")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


def test_golden_traces_through_spark(spark, tmp_path):
    import pyarrow as pa
    # three golden groups in one trace (renamed apart), replayed by Spark
    tables = []
    for name, make in (("crash", crash_trace), ("leave", leave_trace),
                       ("static", static_restart_trace)):
        t = make()
        tables.append(t.set_column(t.schema.get_field_index("group_id"), "group_id",
                                   pa.array([name] * t.num_rows, pa.string())))
    trace = pa.concat_tables(tables)
    trace = trace.set_column(0, "seq", pa.array(range(trace.num_rows), pa.int64()))
    path = str(tmp_path / "golden.parquet")
    write_trace(trace, path)
    out = replay_spark(spark, path, str(tmp_path / "out"))
    exp = {(r["group_id"], r["member_id"], r["time_ms"], r["reason"])
           for r in out["expirations"].to_pylist()}
    # the leave group's trace stops at 30000 while the whole trace runs to 45000: its
    # last member (last heartbeat 30000) expires at 40000 inside the replay horizon
    assert exp == {("crash", "b", 22000, "session"), ("leave", "a", 40000, "session")}
    reb = sorted((r["group_id"], r["start_ms"], r["end_ms"], r["cause"])
                 for r in out["rebalances"].to_pylist())
    assert reb == [("crash", 0, 6000, "member-join"), ("crash", 22000, 24001, "session-timeout"),
                   ("leave", 0, 6000, "member-join"), ("leave", 10000, 12001, "leave"),
                   ("static", 0, 6000, "member-join")]
    for name in ("responses", "rebalances", "expirations", "groups"):
        assert os.path.isdir(tmp_path / "out" / name)
    local = replay_local(trace)
    for name in out:
        assert out[name].to_pylist() == local[name].to_pylist(), name


@pytest.mark.parametrize("seed", [11, 12])
def test_spark_equals_single_process(spark, tmp_path, seed):
    trace = generate(groups=15, members=6, duration_s=240, seed=seed)
    path = str(tmp_path / "t.parquet")
    write_trace(trace, path)
    got = replay_spark(spark, path)
    want = replay_local(trace)
    for name in want:
        assert got[name].to_pylist() == want[name].to_pylist(), name
    assert got["responses"].num_rows == trace.num_rows
    assert len(set(got["responses"].column("shard").to_pylist())) > 2


def test_write_replay_spark_writes_what_replay_spark_returns(spark, tmp_path):
    """The CLI's form: the same files, nothing collected; the counts are the files'
    rows, and the files hold the single-process replay's rows."""
    import pyarrow.dataset as ds
    from fastcoord.pipeline.replay import canonical
    trace = generate(groups=12, members=5, duration_s=200, seed=13)
    path = str(tmp_path / "t.parquet")
    write_trace(trace, path)
    out = str(tmp_path / "out")
    counts = write_replay_spark(spark, path, out)
    want = replay_local(trace)
    assert counts == {name: t.num_rows for name, t in want.items()}
    assert counts["responses"] == trace.num_rows
    for name, t in want.items():
        got = canonical(ds.dataset(os.path.join(out, name), format="parquet").to_table(), name)
        assert got.select(t.column_names).to_pylist() == t.to_pylist(), name
    assert os.path.isfile(os.path.join(out, "runtime.json"))


def _job_args(argv):
    import argparse

    from fastcoord.pipeline.cli import add_parsers
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_spark_setting_flags():
    from fastcoord.pipeline.cli import spark_conf
    args = _job_args(["replay", "t.parquet", "--out", "o", "--driver-memory", "6g",
                      "--executor-memory", "4g", "--conf", "spark.sql.shuffle.partitions=7",
                      "--conf", " spark.task.cpus = 1 "])
    assert spark_conf(args) == {"spark.driver.memory": "6g", "spark.executor.memory": "4g",
                                "spark.sql.shuffle.partitions": "7", "spark.task.cpus": "1"}
    assert spark_conf(_job_args(["whatif", "t.parquet", "--out", "o"])) == {}
    for bad in ("spark.x", "=1", "spark.x="):
        with pytest.raises(SystemExit):
            _job_args(["replay", "t.parquet", "--out", "o", "--conf", bad])


def test_launch_settings_on_a_running_session_are_reported(spark, tmp_path, capsys):
    """The CLI in a process whose Spark session already runs (the shared one): the job
    runs on it, and a driver memory it cannot apply any more is said, not ignored."""
    from fastcoord.cli import main
    trace = str(tmp_path / "t.parquet")
    write_trace(generate(groups=3, members=3, duration_s=30, seed=2), trace)
    out = str(tmp_path / "out")
    assert main(["replay", trace, "--out", out, "--master", "local[2]",
                 "--driver-memory", "123m"]) == 0
    printed = capsys.readouterr()
    err = printed.err
    n = read_trace(trace).num_rows
    assert f"; responses {n}, rebalances " in printed.out        # counted from the files
    assert "not applied: spark.driver.memory" in err
    assert not spark.sparkContext._jsc.sc().isStopped()    # the owner's session lives on


def test_spark_connect_without_its_client_packages_says_so(monkeypatch):
    """sc:// is a Spark Connect session (tests/test_pipeline_connect.py runs one); with
    the Connect client packages missing it fails before connecting, naming them."""
    from fastcoord.pipeline import spark as sp
    assert sp.is_connect("sc://127.0.0.1:15002") and not sp.is_connect("spark://h:7077")
    assert sp.connect_client_missing() == [], "grpcio & co. are dev dependencies"
    monkeypatch.setattr(sp, "CONNECT_CLIENT_MODULES",
                        dict(sp.CONNECT_CLIENT_MODULES, zstandard="no_such_module_zstd"))
    with pytest.raises(RuntimeError, match=r"missing here: zstandard .*fastcoord\[spark\]"):
        sp.session("sc://127.0.0.1:1")


def test_session_turns_off_the_per_row_arrow_batch_measure(spark):
    """session() sets the Arrow batch byte limit to Int.MaxValue, the one value at which
    Spark skips measuring the batch after every row it writes for a Python worker (the
    batches stay bounded by maxRecordsPerBatch)."""
    from fastcoord.pipeline import spark as sp
    s = sp.session("local[2]")           # the running session, given the replay's settings
    assert s.conf.get("spark.sql.execution.arrow.maxBytesPerBatch") == str(2**31 - 1)
    assert int(s.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")) > 0


def test_with_shards_maps_groups_as_kafka_does_and_fails_on_a_null_group(spark):
    """Each row gets its group's shard (shard_for); a null group id fails the job with
    shard_for's error rather than going on with a null shard."""
    from fastcoord import shard_for
    from fastcoord.pipeline.spark import with_shards
    groups = ["orders", "payments", "g-1", "", "orders"]
    df = spark.createDataFrame([(g, i) for i, g in enumerate(groups)], "group_id string, i int")
    got = {r["i"]: r["shard"] for r in with_shards(df, 7).collect()}
    assert got == {i: shard_for(g, 7) for i, g in enumerate(groups)}
    bad = spark.createDataFrame([("orders", 0), (None, 1)], "group_id string, i int")
    with pytest.raises(Exception, match="group_id must be a str"):
        with_shards(bad, 7).collect()

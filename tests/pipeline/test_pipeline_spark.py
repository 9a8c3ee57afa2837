"""The replay on real Spark (local[2]): golden traces, and Spark == single-process."""
import os

import pytest

pytest.importorskip("pyspark")
from fastcoord.pipeline.gen import generate
from fastcoord.pipeline.replay import TABLES, replay_local
from fastcoord.pipeline.spark import replay_spark, write_replay_spark
from fastcoord.pipeline.trace import read_trace, write_trace

from helpers.traces import crash_trace, leave_trace, static_restart_trace


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
    # the committed offsets (every table above, offsets included, row for row)
    assert set(want) >= {"offsets"} and got["offsets"].num_rows > 0


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


def test_local_session_runs_its_jvm_with_the_light_jit(spark):
    """A local master's JVM (driver and executor) starts with LOCAL_DRIVER_JAVA_OPTIONS:
    C1 alone and the serial collector (see spark.py for why and what it saves)."""
    from fastcoord.pipeline import spark as sp
    args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory
                .getRuntimeMXBean().getInputArguments())
    for option in sp.LOCAL_DRIVER_JAVA_OPTIONS.split():
        assert option in args, args


def test_a_local_session_listens_on_loopback_only(spark):
    """In local mode the driver's ports are bound to 127.0.0.1 (Spark's own choice is
    the machine's external address, open to the network for nothing), and so is the
    JVM's own idea of its local address (else it looks for an external one, warning on
    stderr when the host name resolves to loopback)."""
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert conf.get("spark.driver.host") == "127.0.0.1"
    import ipaddress
    import socket
    local = spark.sparkContext._jvm.org.apache.spark.util.Utils.localHostName()
    assert ipaddress.ip_address(socket.gethostbyname(local)).is_loopback, local


def test_spark_shows_no_progress_bar_of_its_own(spark):
    """The commands print their own progress on stderr; Spark's console bar would
    interleave with it."""
    assert spark.sparkContext.getConf().get("spark.ui.showConsoleProgress") == "false"


def test_session_bounds_the_arrow_batches_fed_to_python(spark, tmp_path):
    """session() bounds the bytes of an Arrow batch Spark fills for a Python worker: the
    jobs feed their workers packed pieces of a few MB, and 10,000 of them in a batch
    (maxRecordsPerBatch alone) overran the JVM's direct memory on a 10M-event what-if.
    The limit at work, set small here for a small trace: the pieces arrive in several
    batches, none much over the limit unless a single piece is."""
    from fastcoord.pipeline import spark as sp
    s = sp.session("local[2]")           # the running session, given the replay's settings
    assert s.conf.get("spark.sql.execution.arrow.maxBytesPerBatch") == str(4 << 20)
    path = str(tmp_path / "t.parquet")
    write_trace(generate(groups=40, members=5, duration_s=120, seed=4), path)
    limit = 64 << 10

    def sizes(batches):
        import pyarrow as pa
        for batch in batches:
            blobs = [len(b) for b in batch.column("ipc").to_pylist() if b is not None]
            yield pa.RecordBatch.from_pydict({"rows": [batch.num_rows],
                                              "bytes": [sum(blobs)],
                                              "largest": [max(blobs, default=0)]})
    s.conf.set("spark.sql.execution.arrow.maxBytesPerBatch", str(limit))
    try:
        got = sp.packed_trace(s, path).repartition(1).mapInArrow(
            sizes, "rows bigint, bytes bigint, largest bigint").collect()
    finally:
        s.conf.set("spark.sql.execution.arrow.maxBytesPerBatch", sp.ARROW_MAX_BYTES_PER_BATCH)
    assert sum(r["bytes"] for r in got) > 4 * limit and len(got) > 4
    assert all(r["bytes"] <= limit + 2 * r["largest"] for r in got), got


def _split_files(trace, d, row_group_size, statistics=(True, False)):
    """`trace` as a directory of Parquet files (one per entry of `statistics`, small
    row groups; the second without column statistics and with wider types for two
    columns) beside a file Spark and pyarrow both skip as metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    os.makedirs(d)
    half = trace.num_rows // 2
    second = trace.slice(half)
    for name, wider in (("session_timeout_ms", pa.int64()), ("member_id", pa.large_string())):
        second = second.set_column(second.schema.get_field_index(name), name,
                                   second.column(name).cast(wider))
    for i, (part, stats) in enumerate(zip((trace.slice(0, half), second), statistics)):
        pq.write_table(part, os.path.join(d, f"part-{i}.parquet"),
                       row_group_size=row_group_size, write_statistics=stats)
    open(os.path.join(d, "_SUCCESS"), "w").close()


@pytest.mark.slow
def test_a_directory_of_row_groups_and_a_dataframe_replay_as_one_file(spark, tmp_path):
    """The workers read the trace's row groups themselves (trace_units): a directory of
    files with many row groups, with and without statistics, and with a column's type
    differing between files, replays as the single-process replay does; so does the
    same trace given as a DataFrame, and a file whose name Spark's reader would skip (a
    leading "_")."""
    import pyarrow.parquet as pq

    from fastcoord.pipeline.ingest import trace_units
    from fastcoord.pipeline.replay import canonical
    from fastcoord.pipeline.spark import decoded_table, replay_dataframe
    from fastcoord.pipeline.trace import IngestStats
    trace = generate(groups=9, members=5, duration_s=150, seed=21)
    want = replay_local(trace)
    d = str(tmp_path / "dir")
    _split_files(trace, d, row_group_size=300)
    units = trace_units(d)
    assert len(units) == sum(pq.ParquetFile(os.path.join(d, f)).num_row_groups
                             for f in ("part-0.parquet", "part-1.parquet")) > 4
    sizes = [pq.ParquetFile(u.path).metadata.row_group(u.row_group).num_rows for u in units]
    assert [u.first_row for u in units] == [sum(sizes[:i]) for i in range(len(units))]
    assert sum(sizes) == trace.num_rows
    stats = IngestStats()
    got = replay_spark(spark, d, stats=stats)
    for name in want:
        assert got[name].to_pylist() == want[name].to_pylist(), name
    assert (stats.rows_in, stats.rows_ok, stats.malformed) == (trace.num_rows, trace.num_rows, 0)
    whole = str(tmp_path / "whole.parquet")      # (Spark's reader takes one type a column)
    write_trace(trace, whole)
    blobs = replay_dataframe(spark, spark.read.parquet(whole)).cache()
    for name, schema in TABLES.items():
        assert canonical(decoded_table(blobs, name, schema), name).to_pylist() == \
            want[name].to_pylist(), name
    blobs.unpersist()
    hidden = str(tmp_path / "_trace.parquet")
    write_trace(trace, hidden)
    got = replay_spark(spark, hidden)
    assert got["responses"].to_pylist() == want["responses"].to_pylist()


@pytest.mark.slow
def test_an_empty_trace_and_one_missing_a_column(spark, tmp_path):
    """An empty trace has no units and replays to empty tables; a file without a
    column is read as nulls in it and reported, not refused."""
    from fastcoord.pipeline.ingest import read_validated, trace_units
    from fastcoord.pipeline.trace import IngestStats
    trace = generate(groups=2, members=3, duration_s=30, seed=3)
    empty = str(tmp_path / "empty.parquet")
    write_trace(trace.slice(0, 0), empty)
    assert trace_units(empty) == []
    got = replay_spark(spark, empty)
    assert all(t.num_rows == 0 for t in got.values())
    lacking = str(tmp_path / "lacking.parquet")
    write_trace(trace.drop_columns(["client_id"]), lacking)
    assert "client_id" not in trace_units(lacking)[0].columns
    stats = IngestStats()
    got = replay_spark(spark, lacking, stats=stats)
    assert stats.missing_columns == ["client_id"] and stats.rows_ok == trace.num_rows
    good, _ = read_validated(lacking)
    assert good.column("client_id").null_count == trace.num_rows
    want = replay_local(good)
    for name in want:
        assert got[name].to_pylist() == want[name].to_pylist(), name


def test_packing_keeps_each_shards_rows_and_only_what_the_replay_reads(monkeypatch):
    """pack_pieces: per shard its valid rows in order, numbered by piece, the client id
    on joins only (what-if's packing keeps them all), no recorded error; pieces of at
    most PIECE_ROWS rows put back together are the valid trace; every piece's report
    to shard 0, the time range to every other shard; pack_by_shard fails on a null
    group (validation sets such rows aside before)."""
    import json

    import pyarrow as pa
    import pyarrow.compute as pc

    from fastcoord.pipeline import ingest
    from fastcoord.pipeline import spark as sp
    from fastcoord.pipeline.replay import split_by_shard
    from fastcoord.pipeline.trace import TRACE_SCHEMA
    trace = generate(groups=8, members=4, duration_s=60, seed=5).select(
        TRACE_SCHEMA.names).combine_chunks()
    dirty = trace.set_column(trace.schema.get_field_index("group_id"), "group_id",
                             pa.array([None] + trace.column("group_id").to_pylist()[1:],
                                      pa.string()))
    monkeypatch.setattr(ingest, "PIECE_ROWS", 300)
    pieces = list(ingest.validated_pieces(dirty.to_batches(max_chunksize=128), 1 << 20))
    assert len(pieces) == -(-trace.num_rows // 384)          # 3 batches of 128 a piece
    assert [p[0] for p in pieces] == [(1 << 20) + k for k in range(len(pieces))]
    assert sum(p[2].malformed for p in pieces) == 1
    for lean in (True, False):
        got, reports, spans = {}, [], set()
        for batch in sp.pack_pieces(iter(pieces), 7, lean=lean):
            assert batch.schema == sp.SHARD_PIECE_SCHEMA
            for s, piece, blob, report in zip(*(batch.column(c).to_pylist()
                                                for c in batch.schema.names)):
                if blob is not None:
                    got.setdefault(s, []).append((piece, sp.table_from_ipc(blob)))
                elif s == 0:
                    reports.append((piece, report))
                else:
                    spans.add((s, report))
        assert [r[0] for r in reports] == [p[0] for p in pieces]
        stats, first, last = ingest.merge_reports(reports)
        assert (stats.rows_in, stats.malformed) == (trace.num_rows, 1)
        times = trace.column("time_ms").to_pylist()[1:]
        assert (first, last) == (min(times), max(times))
        assert {s for s, _ in spans} == set(range(1, 7))
        assert {json.loads(r)["last_ms"] for _, r in spans} == {last}
        want = split_by_shard(trace.slice(1), 7)
        assert sorted(got) == list(want)
        for s, rows in want.items():
            assert [p for p, _ in got[s]] == sorted(p for p, _ in got[s])
            back = pa.concat_tables([t for _, t in got[s]])
            assert back.column("seq").to_pylist() == rows.column("seq").to_pylist()
            if not lean:
                assert back.equals(rows)
                continue
            assert back.column("error").null_count == back.num_rows
            joins = pc.equal(rows.column("event"), "join")
            assert back.column("client_id").to_pylist() == \
                pc.if_else(joins, rows.column("client_id"), None).to_pylist()
            # the ids and events travel dictionary-encoded, the same values
            assert all(pa.types.is_dictionary(back.schema.field(c).type)
                       for c in sp.DICTIONARY_COLUMNS)
            keep = [c for c in TRACE_SCHEMA.names if c not in ("client_id", "error")]
            assert back.select(keep).cast(rows.select(keep).schema).equals(rows.select(keep))
    with pytest.raises(TypeError, match="group_id must be a str"):
        sp.pack_by_shard(dirty, 7)


def test_shard_pieces_travel_compressed():
    """Each shard's piece is LZ4-compressed Arrow IPC (it crosses the shuffle and the
    JVM-Python socket twice): at most half the bytes of the same rows uncompressed, and
    exactly those rows back."""
    from fastcoord.pipeline import spark as sp
    trace = generate(groups=20, members=5, duration_s=60, seed=4)
    batch = sp.pack_by_shard(trace, 3, lean=False)
    want = sp.split_on(trace, sp.shard_array(trace.column("group_id"), 3))
    assert batch.column("shard").to_pylist() == sorted(want)
    for shard, blob in zip(batch.column("shard").to_pylist(), batch.column("ipc").to_pylist()):
        rows = sp.table_from_ipc(blob)
        assert rows.equals(want[shard].cast(rows.schema))
        plain = sp.table_to_ipc(rows, compress=False)
        assert len(blob) * 2 <= len(plain), (shard, len(blob), len(plain))
        assert sp.table_from_ipc(plain).equals(rows)


def test_a_shards_pieces_go_back_in_trace_order_whatever_order_they_arrive_in():
    """ShardInput orders each shard's pieces by their number: the shuffle may deliver
    them in any order, and rows of equal (time, seq) replay in the trace's order."""
    import pyarrow as pa

    from fastcoord.pipeline import spark as sp
    trace = generate(groups=5, members=3, duration_s=60, seed=8)
    halves = [trace.slice(0, trace.num_rows // 2), trace.slice(trace.num_rows // 2)]
    batches = [sp.pack_by_shard(h, 3, piece, lean=False) for piece, h in enumerate(halves)]
    got = sp.ShardInput(reversed(batches))
    assert all(len(got.pieces[s]) == 2 for s in got.keys()) and len(got.keys()) == 3
    for s in got.keys():
        want = pa.concat_tables([sp.split_on(h, sp.shard_array(h.column("group_id"), 3))
                                 .get(s, h.slice(0, 0)) for h in halves])
        assert got.rows(s).equals(want.cast(got.rows(s).schema))


def test_replay_tasks_write_one_whole_file_per_shard_and_table(spark, tmp_path):
    """With an output directory the replay tasks write the tables themselves: one file
    per (table, shard), nothing else (no temporary left), and a second replay into the
    same directory replaces the first one's files instead of mixing with them; an
    empty trace leaves each table's schema."""
    import pyarrow.dataset as ds

    from fastcoord.pipeline.replay import TABLES
    out = str(tmp_path / "out")
    first = generate(groups=10, members=4, duration_s=60, seed=31)
    write_trace(first, str(tmp_path / "a.parquet"))
    counts = write_replay_spark(spark, str(tmp_path / "a.parquet"), out)
    shards = sorted(set(replay_local(first)["responses"].column("shard").to_pylist()))
    for name in TABLES:
        assert sorted(os.listdir(os.path.join(out, name))) == \
            [f"shard-{s:05d}.parquet" for s in shards], name
    second = generate(groups=3, members=3, duration_s=40, seed=32)
    write_trace(second, str(tmp_path / "b.parquet"))
    counts = write_replay_spark(spark, str(tmp_path / "b.parquet"), out)
    want = replay_local(second)
    assert counts == {name: t.num_rows for name, t in want.items()}
    got = ds.dataset(os.path.join(out, "responses"), format="parquet").to_table()
    assert sorted(got.column("seq").to_pylist()) == sorted(second.column("seq").to_pylist())
    empty = str(tmp_path / "empty.parquet")
    write_trace(second.slice(0, 0), empty)
    assert write_replay_spark(spark, empty, out) == {name: 0 for name in TABLES}
    for name, schema in TABLES.items():
        assert os.listdir(os.path.join(out, name)) == ["empty.parquet"]
        assert ds.dataset(os.path.join(out, name), format="parquet").schema.names == schema.names
    # a replay that fails leaves no runtime.json of an earlier one beside its tables
    assert os.path.isfile(os.path.join(out, "runtime.json"))
    with pytest.raises(Exception, match="impl must be None, 'native' or 'pure'"):
        write_replay_spark(spark, str(tmp_path / "b.parquet"), out, impl="bogus")
    assert not os.path.exists(os.path.join(out, "runtime.json"))


def test_a_shard_file_appears_whole_or_not_at_all(tmp_path):
    import pyarrow as pa

    from fastcoord.pipeline.spark import shard_file, write_shard_tables
    (tmp_path / "responses").mkdir()
    (tmp_path / "groups").mkdir()
    table = pa.table({"x": [1, 2, 3]})
    write_shard_tables(str(tmp_path), 7, {"responses": table})
    write_shard_tables(str(tmp_path), 7, {"responses": table})     # a retried task
    assert os.listdir(tmp_path / "responses") == ["shard-00007.parquet"]
    import pyarrow.parquet as pq
    assert pq.read_table(shard_file(str(tmp_path), "responses", 7)).equals(table)
    # a write that fails after its temporary file exists (the rename cannot replace a
    # directory) leaves no temporary behind
    (tmp_path / "groups" / "shard-00008.parquet").mkdir()
    (tmp_path / "groups" / "shard-00008.parquet" / "x").touch()
    with pytest.raises(OSError):
        write_shard_tables(str(tmp_path), 8, {"groups": table})
    assert os.listdir(tmp_path / "groups") == ["shard-00008.parquet"]


def test_a_dictionary_encoded_column_reads_back_from_its_shard_file_as_strings(tmp_path):
    """A replay's responses from a packed trace keep their ids and events
    dictionary-encoded: the shard file stores them as Parquet's dictionary pages and
    reads back in the table's documented types, by pyarrow and by a dataset of shard
    files of either kind."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from fastcoord.pipeline.spark import shard_file, write_shard_tables
    (tmp_path / "responses").mkdir()
    plain = pa.table({"group_id": ["g", "h", "g"], "n": pa.array([1, 2, 3], pa.int32())})
    encoded = plain.set_column(0, "group_id", plain.column("group_id").dictionary_encode())
    write_shard_tables(str(tmp_path), 1, {"responses": encoded})
    write_shard_tables(str(tmp_path), 2, {"responses": plain})
    got = pq.read_table(shard_file(str(tmp_path), "responses", 1))
    assert got.schema == plain.schema and got.equals(plain)
    meta = pq.ParquetFile(shard_file(str(tmp_path), "responses", 1)).metadata
    assert "RLE_DICTIONARY" in meta.row_group(0).column(0).encodings
    both = ds.dataset(str(tmp_path / "responses"), format="parquet").to_table()
    assert both.schema == plain.schema and both.num_rows == 6


def test_a_replay_in_one_process_replaces_a_spark_replays_output(spark, tmp_path):
    """`--master none` into a directory a Spark replay wrote: its tables replace the
    shard files (they would otherwise be read together with its own) and the Spark
    run's runtime.json goes; and a Spark replay into a directory returns the runtime
    rows alone to the driver (the tables stay in the files its tasks wrote)."""
    import pyarrow.dataset as ds

    from fastcoord.cli import main
    from fastcoord.pipeline.replay import TABLES
    from fastcoord.pipeline.spark import INGEST_TABLE, RUNTIME_TABLE, replay_trace_file
    trace = generate(groups=6, members=4, duration_s=60, seed=41)
    path, out = str(tmp_path / "t.parquet"), str(tmp_path / "out")
    write_trace(trace, path)
    write_replay_spark(spark, path, out)
    assert os.path.isfile(os.path.join(out, "runtime.json"))
    blob_rows = replay_trace_file(spark, path, out_dir=out).collect()
    assert {r["table"] for r in blob_rows} == {RUNTIME_TABLE, INGEST_TABLE}
    assert main(["replay", path, "--out", out, "--master", "none"]) == 0
    want = replay_local(trace)
    for name in TABLES:
        assert os.listdir(os.path.join(out, name)) == ["part-0.parquet"], name
        assert ds.dataset(os.path.join(out, name), format="parquet").count_rows() == \
            want[name].num_rows, name
    assert not os.path.exists(os.path.join(out, "runtime.json"))


def _dirty_trace_dir(d):
    """A trace directory whose rows a reader must sort out: in the first file a null
    group, a null time, an unknown event and a row whose time goes back within its
    group; the second file without client ids and without `seq` (its rows are numbered
    by their place in the trace). The first file has small row groups: many units."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from fastcoord.pipeline.trace import validate
    trace = generate(groups=7, members=4, duration_s=90, seed=17)
    assert validate(trace)[1].out_of_order == 0
    half = trace.num_rows // 2
    rows = trace.slice(0, half).to_pylist()
    rows[5]["group_id"] = None
    rows[9]["time_ms"] = None
    rows[12]["event"] = "describe"
    later = next(i for i in range(30, half) if any(r["group_id"] == rows[i]["group_id"]
                                                   for r in rows[:i]))
    rows[later]["time_ms"] = 0
    os.makedirs(d)
    pq.write_table(pa.Table.from_pylist(rows, schema=trace.schema),
                   os.path.join(d, "a.parquet"), row_group_size=200)
    second = trace.slice(half).drop_columns(["client_id", "seq"])
    pq.write_table(second, os.path.join(d, "b.parquet"))
    assert pc.min(trace.column("time_ms")).as_py() >= 0
    return trace.num_rows


def test_the_tasks_validate_the_trace_as_one_process_does(spark, tmp_path, capsys):
    """Bad rows are set aside and counted where Spark's tasks read them: the replay,
    what-if and ingest.json of a Spark job equal those of one process reading the same
    pieces (ingest.read_validated), examples and out-of-order count included."""
    import json

    from fastcoord.cli import main
    from fastcoord.pipeline.ingest import read_validated
    from fastcoord.pipeline.trace import IngestStats
    from fastcoord.pipeline.whatif import make_grid, whatif_local, whatif_spark
    d = str(tmp_path / "dirty")
    n = _dirty_trace_dir(d)
    good, want_stats = read_validated(d)
    assert (want_stats.rows_in, want_stats.malformed, want_stats.unknown_event,
            want_stats.out_of_order, want_stats.missing_columns) == \
        (n, 2, 1, 1, ["client_id"])
    assert want_stats.rows_ok == good.num_rows == n - 3
    assert sorted(good.column("seq").to_pylist()) == list(range(n))[:5] + \
        list(range(n))[6:9] + list(range(n))[10:12] + list(range(n))[13:]
    stats = IngestStats()
    got = replay_spark(spark, d, stats=stats)
    assert stats.as_dict() == want_stats.as_dict()
    want = replay_local(good)
    for name in want:
        assert got[name].to_pylist() == want[name].to_pylist(), name
    grid = make_grid([10_000, 30_000], ["off"])
    stats = IngestStats()
    got = whatif_spark(spark, d, grid, stats=stats)
    assert stats.as_dict() == want_stats.as_dict()
    want = whatif_local(good, grid)
    for name in want:
        assert got[name].to_pylist() == want[name].to_pylist(), name
    ingest, source = {}, {}
    for master in ("none", "local[2]"):
        out = str(tmp_path / master)
        assert main(["replay", d, "--out", out, "--master", master]) == 0
        with open(os.path.join(out, "ingest.json")) as f:
            ingest[master] = json.load(f)
        with open(os.path.join(out, "trace.json")) as f:     # (what the report checks)
            source[master] = json.load(f)
        assert f"fastcoord replay: {n - 3} events (2 malformed, 1 unknown, 1 out of order)" \
            in capsys.readouterr().out
    assert ingest["none"] == ingest["local[2]"] == want_stats.as_dict()
    from fastcoord.pipeline.ingest import trace_fingerprint
    assert source["none"] == source["local[2]"] == {
        "trace": os.path.abspath(d), "trace_fingerprint": trace_fingerprint(d)}

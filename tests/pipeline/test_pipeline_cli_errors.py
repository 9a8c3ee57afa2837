"""Mistakes a person makes with the pipeline's commands get one line and a non-zero
exit, before any work (issue: errors a person can act on)."""
import os

import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from fastcoord.cli import main  # noqa: E402
from fastcoord.pipeline.gen import generate  # noqa: E402


@pytest.mark.parametrize("command", ["replay", "whatif"])
def test_a_trace_without_a_required_column_is_named(tmp_path, capsys, command):
    """A trace without member_id replayed as every row malformed, exit 0 ("0 events
    (N malformed)"); now the missing column is named and nothing runs."""
    table = generate(groups=2, members=2, duration_s=30, seed=1).drop_columns(["member_id"])
    path = str(tmp_path / "t.parquet")
    pq.write_table(table, path)
    out = tmp_path / "out"
    assert main([command, path, "--out", str(out), "--master", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "has no member_id column" in err and "a trace needs time_ms, group_id" in err
    assert not (out / "responses").exists()


@pytest.mark.parametrize("argv, message", [
    (["--session-timeout", "2s"], "outside the broker's bounds [6000 ms, 1800000 ms]"),
    (["--session-timeout", "10s,31m"], "1860000 ms is outside the broker's bounds"),
    (["--session-timeout", "10s", "--heartbeat-interval", "10s"],
     "heartbeat interval of 10000 ms is not below the session timeout of 10000 ms"),
])
def test_whatif_refuses_what_kafka_would_refuse(tmp_path, capsys, argv, message):
    """A 2 s session ran a simulation Kafka's broker would refuse at the first join;
    a heartbeat interval at the session timeout one its clients refuse."""
    path = str(tmp_path / "t.parquet")
    pq.write_table(generate(groups=2, members=2, duration_s=30, seed=1), path)
    out = tmp_path / "out"
    assert main(["whatif", path, "--out", str(out), "--master", "none"] + argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (out / "summary.json").exists()


@pytest.mark.parametrize("master", ["bogus", "local[x]", "local[0]", "spark://"])
def test_a_master_spark_would_not_take_is_refused_before_spark_starts(tmp_path, capsys, master):
    """--master bogus made Spark's JVM print 43-83 lines of traceback; now argparse
    says what a master looks like (exit 2)."""
    with pytest.raises(SystemExit) as exc:
        main(["replay", str(tmp_path / "t.parquet"), "--out", str(tmp_path / "out"),
              "--master", master])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "not a Spark master" in err and "local[*]" in err and "Traceback" not in err


def test_relative_paths_are_made_absolute_on_the_driver(tmp_path, monkeypatch):
    """A relative --out (or trace) resolved on each executor against its own work
    directory; the driver now hands out absolute paths, URLs as given."""
    from argparse import Namespace
    from fastcoord.pipeline.cli import _paths_absolute
    monkeypatch.chdir(tmp_path)
    args = Namespace(trace="t.parquet", out="results/replay")
    _paths_absolute(args)
    assert (args.trace, args.out) == (str(tmp_path / "t.parquet"),
                                      str(tmp_path / "results" / "replay"))
    args = Namespace(trace="hdfs://nn:8020/traces/t.parquet", out="s3a://bucket/out")
    _paths_absolute(args)
    assert (args.trace, args.out) == ("hdfs://nn:8020/traces/t.parquet", "s3a://bucket/out")
    # and a relative run in one process lands where it was asked
    pq.write_table(generate(groups=2, members=2, duration_s=30, seed=1), "t.parquet")
    assert main(["replay", "t.parquet", "--out", "out", "--master", "none"]) == 0
    assert (tmp_path / "out" / "responses").is_dir()


def test_a_trace_without_the_optional_offsets_replays_and_says_what_that_means(
        tmp_path, capsys):
    """A trace written before the offsets column replays (exit 0, an empty offsets
    table), and the command says the column was filled with its default and what that
    means, as a note rather than an error."""
    trace = generate(groups=2, members=2, duration_s=30, seed=1).drop_columns(["offsets"])
    pq.write_table(trace, str(tmp_path / "t.parquet"))
    out = tmp_path / "out"
    assert main(["replay", str(tmp_path / "t.parquet"), "--out", str(out),
                 "--master", "none"]) == 0
    err = capsys.readouterr().err
    assert ("optional columns the trace does not have, filled with defaults: offsets "
            "(commits name no partitions: the replay's offsets table is empty)") in err
    assert pq.read_table(str(out / "offsets")).num_rows == 0


class _Context:
    def __init__(self):
        self.cancelled = 0

    def cancelAllJobs(self):
        self.cancelled += 1


class _Session:
    def __init__(self):
        self.sparkContext = _Context()


def _py4j_record(logger_name):
    """What py4j logs when the JVM is gone under a call: `logging.exception` from its
    own file, on the root logger or on one of its own."""
    import logging
    import os
    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError:
        import sys
        exc_info = sys.exc_info()
    return logging.LogRecord(logger_name, logging.ERROR,
                             os.path.join("site-packages", "py4j", "java_gateway.py"), 1,
                             "Exception while sending command.", None, exc_info)


def test_ctrl_c_silences_py4j_until_the_session_is_stopped():
    """Once Ctrl-C is pressed the JVM goes away under py4j, which logs a traceback per
    broken call (the stray traceback after "interrupted; stopped"): from the press until
    close() py4j's records are dropped, before and after they pass, and fastcoord's own
    records pass throughout."""
    import logging
    from fastcoord.pipeline.cli import CtrlC

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append((record.name, record.getMessage()))

    root = logging.getLogger()
    keep = Keep()
    root.addHandler(keep)
    try:
        session = _Session()
        ctrl_c = CtrlC(session)

        def log_all(tag):
            root.handle(_py4j_record("root"))
            py4j = logging.getLogger("py4j.clientserver")
            if py4j.isEnabledFor(logging.ERROR):
                py4j.handle(_py4j_record("py4j.clientserver"))
            logging.getLogger("fastcoord.pipeline").error(tag)

        log_all("before")
        with pytest.raises(KeyboardInterrupt):
            with ctrl_c:
                ctrl_c._on_sigint(2, None)
                log_all("pressed")
        log_all("stopping")
        ctrl_c.close()
        log_all("after")
    finally:
        root.removeHandler(keep)
    assert session.sparkContext.cancelled == 1
    py4j_seen = [name for name, msg in seen if msg == "Exception while sending command."]
    assert py4j_seen == ["root", "py4j.clientserver"] * 2       # before and after only
    assert [msg for name, msg in seen if name == "fastcoord.pipeline"] == \
        ["before", "pressed", "stopping", "after"]


def test_a_ctrl_c_while_spark_starts_is_fastcoords_to_act_on(monkeypatch):
    """PySpark's context installs its own SIGINT handler as it starts, some moments
    before the session is there: a Ctrl-C then cancelled jobs through the gateway the
    main thread was calling (py4j's tracebacks). Here a stand-in for the session's
    start installs such a handler and a SIGINT arrives: fastcoord's handler is the one
    that runs (the press is noted, and the command stops once the session is up)."""
    import os
    import signal
    from argparse import Namespace

    from fastcoord.pipeline import cli

    theirs = []

    def starting(master, conf):
        signal.signal(signal.SIGINT, lambda signum, frame: theirs.append(signum))
        os.kill(os.getpid(), signal.SIGINT)
        return _Session(), False

    monkeypatch.setattr(cli, "_spark_session", starting)
    before = signal.getsignal(signal.SIGINT)
    args = Namespace(command="replay", master="local[1]", conf=None)
    with pytest.raises(KeyboardInterrupt):
        cli._on_spark(args, "replaying", lambda session: pytest.fail("the job ran"))
    assert theirs == []
    assert signal.getsignal(signal.SIGINT) is before


def _small_trace(tmp_path) -> str:
    path = str(tmp_path / "t.parquet")
    pq.write_table(generate(groups=2, members=2, duration_s=30, seed=1), path)
    return path


@pytest.mark.parametrize("command", ["replay", "whatif"])
def test_an_out_that_is_a_file_is_named_before_any_work(tmp_path, capsys, command):
    """--out naming an existing file ended in a FileExistsError traceback (exit 1);
    now one line, exit 2, the file untouched."""
    trace = _small_trace(tmp_path)
    out = tmp_path / "results"
    out.write_text("mine")
    assert main([command, trace, "--out", str(out), "--master", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"fastcoord {command}: --out {out} is a file, not a directory", err
    assert out.read_text() == "mine"


@pytest.mark.parametrize("command", ["replay", "whatif", "report"])
def test_an_out_that_cannot_be_written_is_named_before_any_work(
        tmp_path, capsys, monkeypatch, command):
    """A directory the command may not write in (chmod 555, as a user) gave a
    PermissionError traceback, on Spark after the JVM had started; now one line and
    exit 2 before any work. (Root writes anywhere: the refusal is simulated.)"""
    import fastcoord.pipeline.cli as pcli
    trace = _small_trace(tmp_path)
    out = tmp_path / "ro"
    out.mkdir()

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(pcli.tempfile, "mkstemp", refuse)
    argv = ([command, str(out)] if command == "report"
            else [command, trace, "--out", str(out), "--master", "none"])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.endswith(f"cannot write in {out}: Permission denied"), err
    assert os.listdir(out) == []


@pytest.mark.parametrize("where", ["a directory", "under a file", "in no directory",
                                   "ending in a slash"])
def test_trace_gen_and_convert_name_an_out_they_cannot_write(tmp_path, capsys, where):
    """A trace written over a directory, under a file, into a directory that is not
    there, or to a path ending in / ended in pyarrow's traceback (exit 1), after the
    work; now one line, exit 2, before it."""
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    out = {"a directory": tmp_path / "adir",
           "under a file": tmp_path / "afile" / "t.parquet",
           "in no directory": tmp_path / "nope" / "t.parquet",
           "ending in a slash": tmp_path / "new"}[where]
    target = str(out) + ("/" if where == "ending in a slash" else "")
    log = tmp_path / "requests.jsonl"
    log.write_text("")
    for argv in (["trace", "gen", target, "--groups", "1", "--duration-s", "10"],
                 ["trace", "convert", str(log), target]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"fastcoord trace {argv[1]}: "), err
        assert {"a directory": f"{out} is a directory, not a file",
                "under a file": f"{out.parent} is not a directory",
                "in no directory": f"no such directory: {out.parent}",
                "ending in a slash": f"{target} names a directory (it ends in /), not a file",
                }[where] in err[0], err


@pytest.mark.parametrize("command", ["replay", "whatif"])
@pytest.mark.parametrize("what", ["missing", "empty directory", "no rows"])
def test_a_trace_that_is_not_there_or_holds_no_rows_is_refused(tmp_path, capsys, command,
                                                              what):
    """A trace path that is not there said "cannot read the trace X: X" (pyarrow's
    message, the path again); an empty
    directory (a wrong path, a Spark output not yet written) or a trace of no rows
    replayed as 0 events, exit 0 (whatif printing nan crash detections). Now one line
    naming what is wrong, exit 2, no output."""
    path = tmp_path / "trace"
    if what == "empty directory":
        path.mkdir()
    elif what == "no rows":
        path = tmp_path / "t.parquet"
        pq.write_table(generate(groups=2, members=2, duration_s=30, seed=1).slice(0, 0),
                       str(path))
    out = tmp_path / "out"
    assert main([command, str(path), "--out", str(out), "--master", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err == {"missing": f"fastcoord {command}: cannot read the trace {path}: no such "
                              "file or directory",
                   "empty directory": f"fastcoord {command}: the trace {path} has no rows "
                                      "(a directory without Parquet files, or only empty "
                                      "ones)",
                   "no rows": f"fastcoord {command}: the trace {path} has no rows"}[what], err
    assert not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["whatif", "t.parquet", "--out", "o", "--session-timeout", "10x"],
     "argument --session-timeout: not a duration: '10x'"),
    (["whatif", "t.parquet", "--out", "o", "--static", "maybe"], "argument --static"),
    (["replay", "t.parquet", "--out", "o", "--master", "local[-1]"], "not a Spark master"),
    (["replay", "t.parquet"], "the following arguments are required: --out"),
    (["trace", "gen", "t.parquet", "--groups", "many"], "argument --groups"),
    (["trace", "convert", "a.log", "t.parquet", "--format", "csv"], "argument --format"),
])
def test_a_bad_option_is_two_lines(capsys, argv, message):
    """A bad option printed argparse's whole usage (whatif's: 8 lines of flags) above
    the one line that says what is wrong; now a one-line usage and that line."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err
    command = " ".join(argv[:2] if argv[0] == "trace" else argv[:1])
    assert err[0].startswith(f"usage: fastcoord {command} ") and "--help" in err[0], err
    assert err[1].startswith(f"fastcoord {command}: error: ") and message in err[1], err


@pytest.mark.parametrize("words, option, bad", [
    (["--session-timeout", "-5s"], "--session-timeout", "-5s"),
    (["--session-timeout=-5s"], "--session-timeout", "-5s"),
    (["--session-timeout", "-5s,10s"], "--session-timeout", "-5s"),
    (["--session-timeout", "10s,-5s"], "--session-timeout", "-5s"),
    (["--rebalance-timeout", "-1m"], "--rebalance-timeout", "-1m"),
    (["--heartbeat-interval", "-0.5s"], "--heartbeat-interval", "-0.5s"),
    (["--protocol", "consumer", "--reaction", "-100ms"], "--reaction", "-100ms"),
])
def test_a_negative_duration_says_so(capsys, words, option, bad):
    """'--session-timeout -5s' got argparse's "expected one argument" (a word starting
    with '-' reads as an option unless it is a negative number) and
    '--session-timeout=-5s' "not a duration". Both now say a duration must be
    positive, naming the option."""
    with pytest.raises(SystemExit) as exc:
        main(["whatif", "t.parquet", "--out", "o"] + words)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err
    assert err[1] == (f"fastcoord whatif: error: argument {option}: a duration must be "
                      f"positive: {bad!r}"), err


def test_every_pipeline_option_says_what_it_is():
    """trace gen's --groups, --duration-s, --seed, --static-fraction, convert's LOG and
    OUT and every job's --impl were listed in --help with no word on them."""
    import argparse
    from fastcoord.pipeline.cli import add_parsers
    parser = argparse.ArgumentParser(prog="fastcoord")
    add_parsers(parser.add_subparsers(dest="command"))

    def parsers(p, name):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    yield from parsers(sub, f"{name} {sub_name}")
        yield name, p
    bare = [f"{name} {action.dest}" for name, p in parsers(parser, "fastcoord")
            for action in p._actions
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
            and not action.help]
    assert bare == []


@pytest.mark.parametrize("flag, value", [("--groups", "0"), ("--groups", "-3"),
                                         ("--members", "0"), ("--duration-s", "0"),
                                         ("--duration-s", "-5"), ("--static-fraction", "2"),
                                         ("--static-fraction", "-0.1")])
def test_trace_gen_refuses_sizes_that_make_no_trace(tmp_path, capsys, flag, value):
    """--groups 0 or -3 wrote an empty trace (exit 0), --duration-s -5 ended in a
    ValueError traceback from random, --static-fraction 2 was taken as 1; now argparse
    says what the option takes, exit 2, and nothing is written."""
    out = tmp_path / "t.parquet"
    with pytest.raises(SystemExit) as exc:
        main(["trace", "gen", str(out), flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert f"argument {flag}: " in err[-1] and value in err[-1], err
    assert not out.exists()


def test_whatif_without_a_crash_prints_no_nan(tmp_path, capsys):
    """A configuration under which no crash was detected printed its detection as
    'p50/p99 nan/nans'; now it says there was none."""
    path = str(tmp_path / "t.parquet")
    pq.write_table(generate(groups=2, members=2, duration_s=30, seed=1, crash_per_hour=0),
                   path)
    assert main(["whatif", path, "--out", str(tmp_path / "out"), "--master", "none",
                 "--session-timeout", "10s", "--static", "off"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "crash detection" in line]
    assert len(rows) == 2 and "nan" not in out, out
    assert all(line.endswith("crash detection: no crash detected") for line in rows), out


@pytest.mark.parametrize("flag", ["--driver-memory", "--executor-memory"])
@pytest.mark.parametrize("size", ["10x", "6 g", "0.5g", "g"])
def test_a_memory_size_the_jvm_would_not_take_is_refused(tmp_path, capsys, flag, size):
    """--driver-memory 10x went to the JVM as -Xmx10x: the JVM printed 'Invalid maximum
    heap size' and PySpark a 30-line traceback (JAVA_GATEWAY_EXITED), exit 1. Now
    argparse says what a size looks like, before Spark starts."""
    with pytest.raises(SystemExit) as exc:
        main(["replay", str(tmp_path / "t.parquet"), "--out", str(tmp_path / "out"),
              "--master", "local[1]", flag, size])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and f"argument {flag}: not a memory size: {size!r}" in err[1], err
    from fastcoord.pipeline.cli import _size
    assert [_size(s) for s in ("6g", "512m", "4G", "1024", "2gb")] == \
        ["6g", "512m", "4G", "1024", "2gb"]


@pytest.mark.parametrize("command", ["replay", "whatif"])
@pytest.mark.parametrize("spoil", ["time_ms", "event"])
def test_a_trace_without_one_valid_row_is_a_failure(tmp_path, capsys, command, spoil):
    """A trace every row of which is malformed (no time) or of an unknown event ran to
    exit 0: '0 events (5 malformed...)' and empty tables, or a what-if of nothing. Now
    the counts are still written (ingest.json, with examples), and the command says
    no row was valid and exits 2."""
    table = generate(groups=2, members=2, duration_s=30, seed=1)
    i = table.schema.get_field_index(spoil)
    bad = (pa.nulls(table.num_rows, pa.int64()) if spoil == "time_ms"
           else pa.array(["bogus"] * table.num_rows))
    path = str(tmp_path / "t.parquet")
    pq.write_table(table.set_column(i, spoil, bad), path)
    out = tmp_path / "out"
    assert main([command, path, "--out", str(out), "--master", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    kind = "malformed" if spoil == "time_ms" else "unknown"
    assert err[-1] == (f"fastcoord {command}: no valid row in the trace {path}: "
                       f"{table.num_rows} rows, all {kind} (examples in "
                       f"{out / 'ingest.json'})"), err
    assert (out / "ingest.json").is_file()
    assert not (out / "summary.json").exists() and not (out / "responses").exists()


def test_whatif_refuses_a_heartbeat_not_below_the_traces_own_sessions(tmp_path, capsys):
    """--session-timeout trace --heartbeat-interval 20s on a trace whose consumers
    joined with 10 s sessions was simulated with a heartbeat of a third of the session
    (a fallback inside the model), under the label heartbeat=20s: its figures were
    not of the setting named. Now it is refused as a fixed session is (Kafka's clients
    refuse such a pair), naming the trace's session timeout."""
    path = _small_trace(tmp_path)
    sessions = pq.read_table(path, columns=["event", "session_timeout_ms"]).to_pylist()
    shortest = min(r["session_timeout_ms"] for r in sessions
                   if r["event"] == "join" and r["session_timeout_ms"])
    out = tmp_path / "out"
    hb = f"{shortest // 1000}s"
    assert main(["whatif", path, "--out", str(out), "--master", "none",
                 "--session-timeout", "trace", "--heartbeat-interval", hb]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"fastcoord whatif: a heartbeat interval of {shortest} ms is not below "
                   f"the session timeout of {shortest} ms that some of the trace's consumers "
                   "joined with (session=trace; Kafka's clients refuse that)"), err
    assert not (out / "summary.json").exists()
    # below it, as before
    assert main(["whatif", path, "--out", str(out), "--master", "none",
                 "--session-timeout", "trace", "--heartbeat-interval", "1s"]) == 0


def test_an_interrupted_job_does_not_draw_its_bar_full(capsys):
    """Ctrl-C during a one-process whatif drew the progress bar at 100.0% just above
    'interrupted; stopped' (closing the bar marked the job done); it now ends the
    line where the job stopped."""
    from fastcoord.pipeline.cli import _with_bar

    def job(progress):
        progress(3, 10)
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        _with_bar("whatif (configuration x shard)", job)
    err = capsys.readouterr().err
    assert "30.0%" in err and "100.0%" not in err and err.endswith("\n"), repr(err)
    assert _with_bar("x", lambda progress: (progress(1, 2), 7)[1]) == 7
    assert "100.0%" in capsys.readouterr().err


def test_a_replay_leaves_no_timings_of_an_earlier_one(tmp_path):
    """A one-process replay into the --out of an earlier Spark replay left that run's
    timings.json (its master, its spans) beside the new tables, as if it described them;
    runtime.json went, timings.json stayed."""
    path = _small_trace(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "timings.json").write_text('{"master": "local[2]"}')
    assert main(["replay", path, "--out", str(out), "--master", "none"]) == 0
    assert not (out / "timings.json").exists()


def test_a_progress_bar_into_a_log_is_a_few_lines():
    """Into a file (stderr redirected, CI's log) the bar was redrawn with a carriage
    return every 0.1 s: one line of hundreds of bars. It now writes a line at each
    tenth and at the end."""
    import io
    from fastcoord._progress import Progress
    log = io.StringIO()
    bar = Progress(1000, "whatif (configuration x shard)", stream=log)
    for done in range(1, 1001):
        bar._last_draw = -1.0                 # as if every update came 0.1 s later
        bar.update(done)
    bar.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and 10 <= len(lines) <= 11, lines
    assert lines[-1].strip().startswith("whatif (configuration x shard) [####")
    assert "100.0%" in lines[-1]


@pytest.mark.parametrize("command", ["replay", "whatif"])
def test_an_out_inside_the_trace_directory_is_refused(tmp_path, capsys, command):
    """A trace given as a directory is every Parquet file under it: with --out inside
    it, the first run wrote its tables there and the next one read them (and
    ingest.json) as part of the trace. Now refused before any work."""
    traces = tmp_path / "traces"
    traces.mkdir()
    pq.write_table(generate(groups=2, members=2, duration_s=30, seed=1),
                   str(traces / "t.parquet"))
    out = traces / "results"
    assert main([command, str(traces), "--out", str(out), "--master", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"fastcoord {command}: --out {out} is inside the trace directory "
                   f"{traces}: a later run would read its tables as trace"), err
    assert not out.exists()


@pytest.mark.parametrize("command", ["replay", "whatif"])
def test_a_trace_it_may_not_read_is_named_so(tmp_path, capsys, monkeypatch, command):
    """A trace the user may not read said "cannot read the trace X: [Errno 13] Error
    creating dataset. Could not read schema from X. Is this a 'parquet' file?: ..."
    (pyarrow's words, asking whether it is Parquet); now it says it may not be read.
    (Root reads anything: the refusal is simulated.)"""
    import fastcoord.pipeline.cli as pcli
    path = _small_trace(tmp_path)

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(pcli, "open", refuse, raising=False)
    out = tmp_path / "out"
    assert main([command, path, "--out", str(out), "--master", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"fastcoord {command}: cannot read the trace {path}: Permission denied", err

"""`fastcoord serve --config FILE`: options from a TOML/JSON file, the command line wins.

The file is turned into command-line words, so these tests check both the words and a
real server started from a file (its topics answered to a real kafka-python client).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fastcoord.server.config_file import ConfigFileError, config_argv
from helpers.server import ServerProc

FLAGS = {"--port", "--host", "--data-dir", "--fsync", "--repair", "--metrics-port", "--topic"}
ROOT = Path(__file__).resolve().parents[2]


def test_words_from_toml(tmp_path):
    cfg = tmp_path / "serve.toml"
    cfg.write_text('port = 9999\nrepair = true\ndata-dir = "d"\n'
                   'fsync = "interval"\n[topics]\norders = 12\nclicks = 3\n')
    words = config_argv(str(cfg), FLAGS)
    assert words == ["--port", "9999", "--repair", "--data-dir", str(tmp_path / "d"),
                     "--fsync", "interval", "--topic", "orders:12", "--topic", "clicks:3"]


def test_words_from_json_with_underscores_and_false_flag(tmp_path):
    cfg = tmp_path / "serve.json"
    cfg.write_text(json.dumps({"metrics_port": 0, "repair": False, "topics": {"a": 1}}))
    assert config_argv(str(cfg), FLAGS) == ["--metrics-port", "0", "--topic", "a:1"]


@pytest.mark.parametrize("body, message", [
    ("prot = 1\n", "unknown option 'prot'"),
    ("config = 'x.toml'\n", "unknown option 'config'"),
    ("topics = 3\n", "'topics' must be a table"),
    ("port = [1, 2]\n", "must be a single value"),
    ("port = \n", "is not valid"),
])
def test_bad_files_name_the_problem(tmp_path, body, message):
    cfg = tmp_path / "serve.toml"
    cfg.write_text(body)
    with pytest.raises(ConfigFileError, match=message):
        config_argv(str(cfg), FLAGS)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigFileError, match="cannot read config file"):
        config_argv(str(tmp_path / "nope.toml"), FLAGS)


def _serve_with(tmp_path, body: str) -> subprocess.CompletedProcess:
    cfg = tmp_path / "serve.toml"
    cfg.write_text(body)
    return subprocess.run([sys.executable, "-m", "fastcoord", "serve", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=60, cwd=str(ROOT))


@pytest.mark.parametrize("body, expected", [
    ('port = "ninety"\n', ["--port", "ninety"]),     # argparse checks it like a flag
    ('porrt = 9092\n', ["unknown option 'porrt'"]),
])
def test_bad_file_stops_serve_with_a_clear_error(tmp_path, body, expected):
    proc = _serve_with(tmp_path, body)
    assert proc.returncode == 2
    for text in expected:
        assert text in proc.stderr


def test_server_started_from_a_file_declares_its_topics(tmp_path):
    """Topics from the file and from the command line are both declared; the command
    line's --port 0 wins over the file's port."""
    from kafka import KafkaConsumer

    cfg = tmp_path / "serve.toml"
    cfg.write_text('port = 1\nstatus-interval-s = 60\n[topics]\nfromfile = 3\n')
    server = ServerProc(tmp_path / "server.log", "--config", str(cfg), "--topic", "fromflag:2",
                        topics=())
    try:
        assert server.port != 1
        assert "fromfile:3" in server.first_line and "fromflag:2" in server.first_line
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, request_timeout_ms=10_000)
        try:
            assert consumer.partitions_for_topic("fromfile") == {0, 1, 2}
            assert consumer.partitions_for_topic("fromflag") == {0, 1}
        finally:
            consumer.close()
    finally:
        assert server.stop() == 0


def test_make_run_config_is_valid():
    """The embedded defaults `make run` uses parse into serve's own words."""
    from fastcoord.cli import _add_serve_parser
    import argparse

    serve = _add_serve_parser(argparse.ArgumentParser().add_subparsers())
    words = config_argv(str(ROOT / "serve.toml"), serve._option_string_actions)
    args = serve.parse_args(words)
    assert args.port == 9092 and args.host == "127.0.0.1"
    assert dict(args.topic) == {"orders": 12, "payments": 6, "clicks": 4}
    assert args.data_dir == str(ROOT / "data")


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_serve_size_flags_take_a_whole_number_of_at_least_one(capsys, value):
    """The serve flags that must be positive say so in the words the pipeline's flags
    use, a word included (argparse's own message named the check's function)."""
    from fastcoord.cli import _add_serve_parser
    import argparse

    serve = _add_serve_parser(argparse.ArgumentParser().add_subparsers())
    with pytest.raises(SystemExit) as exc:
        serve.parse_args(["--max-inflight-requests", value])
    assert exc.value.code == 2
    assert (f"argument --max-inflight-requests: expected a whole number of at least 1, "
            f"got {value!r}") in capsys.readouterr().err

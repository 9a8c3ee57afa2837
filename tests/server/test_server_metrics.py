"""`fastcoord serve --metrics-port`: the status counters in Prometheus' text format,
scraped over HTTP; and `fastcoord loadgen` against a real server."""
from __future__ import annotations

import datetime
import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from helpers.server import ROOT, RawConn, ServerProc, metrics_url, scrape, wait_until


def test_metrics_endpoint_counts_requests_heartbeats_groups(tmp_path):
    server = ServerProc(tmp_path / "server.log", "--metrics-port", "0", "--store", "memory")
    try:
        url = metrics_url(server)
        before = scrape(url)
        assert before["fastcoord_heartbeats_total"] == 0
        assert before["fastcoord_connections"] == 0
        assert before['fastcoord_groups{state="Stable"}'] == 0
        conn = RawConn(server.port)
        joined = conn.call(11, 3, {"group_id": "m", "session_timeout": 10_000,
                                   "rebalance_timeout": 10_000, "member_id": "",
                                   "protocol_type": "consumer",
                                   "protocols": [{"name": "range", "metadata": b""}]})
        assert joined.error_code == 0
        for _ in range(3):
            conn.call(12, 4, {"group_id": "m", "generation_id": joined.generation_id,
                              "member_id": joined.member_id})
        after = scrape(url)
        assert after["fastcoord_connections"] == 1
        assert after["fastcoord_heartbeats_total"] == 3
        assert after["fastcoord_joins_total"] == 1
        assert after["fastcoord_requests_total"] == 4
        assert after['fastcoord_groups{state="CompletingRebalance"}'] == 1
        assert after["fastcoord_request_latency_p99_seconds"] > 0
        # The collector's passes: generation 0 runs often; the counts never go back.
        gc_keys = [f'fastcoord_gc_collections_total{{generation="{g}"}}' for g in range(3)]
        assert after[gc_keys[0]] > 0
        assert all(after[k] >= before[k] for k in gc_keys)
        conn.close()
        assert wait_until(lambda: scrape(url)["fastcoord_connections"] == 0, 10)
        # anything but GET /metrics is a 404
        try:
            urllib.request.urlopen(url.replace("/metrics", "/nope"), timeout=10)
            raise AssertionError("expected a 404")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
    finally:
        assert server.stop() == 0, server.log()
    assert "Traceback" not in server.log()


def test_metrics_and_status_count_consumer_groups(tmp_path):
    server = ServerProc(tmp_path / "server.log", "--metrics-port", "0", "--store", "memory",
                        "--status-interval-s", "0.2", topics=["orders:2"])
    try:
        url = metrics_url(server)
        assert scrape(url)['fastcoord_consumer_groups{state="Stable"}'] == 0
        conn = RawConn(server.port)
        joined = conn.call(68, 1, {
            "group_id": "cg", "member_id": "member-1", "member_epoch": 0, "instance_id": None,
            "rack_id": None, "rebalance_timeout": datetime.timedelta(seconds=30),
            "subscribed_topic_names": ["orders"],
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []})
        assert (joined.error_code, joined.member_epoch) == (0, 1), joined.error_message
        after = scrape(url)
        assert after['fastcoord_consumer_groups{state="Stable"}'] == 1
        assert after['fastcoord_groups{state="Stable"}'] == 0     # (classic groups only)
        assert after["fastcoord_consumer_heartbeats_total"] == 1
        status = []

        def status_seen() -> bool:      # the status lines come on the server's stdout
            while not server._lines.empty():
                status.append(server._lines.get())
            return any("consumer_groups[Stable=1]" in line and "consumer_heartbeats=1" in line
                       for line in status)

        assert wait_until(status_seen, 10), status[-3:]
        conn.close()
    finally:
        assert server.stop() == 0, server.log()
    assert "Traceback" not in server.log()


def test_metrics_report_the_durable_store_loaded(tmp_path):
    server = ServerProc(tmp_path / "server.log", "--metrics-port", "0")
    try:
        assert scrape(metrics_url(server))["fastcoord_store_loaded"] == 1
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_loadgen_command_against_a_server(tmp_path, event_loop):
    """`fastcoord loadgen` sets up real groups and prints a JSON summary of answered
    heartbeats; the server saw them. On asyncio's own event loop and on uvloop."""
    if event_loop == "uvloop":
        pytest.importorskip("uvloop")
    server = ServerProc(tmp_path / "server.log", "--metrics-port", "0", "--store", "memory",
                        "--no-request-log", "--event-loop", event_loop)
    assert f"event loop {event_loop}" in server.first_line, server.first_line
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "fastcoord", "loadgen", "--port", str(server.port),
             "--connections", "4", "--members", "40", "--groups", "4", "--duration-s", "0.5",
             "--warmup-s", "0.1", "--pipeline", "4", "--setup-timeout-s", "30",
             "--event-loop", event_loop],
            capture_output=True, timeout=60, cwd=str(ROOT))
        assert proc.returncode == 0, proc.stderr.decode()
        summary = json.loads(proc.stdout)
        assert summary["heartbeats"] > 0 and summary["errors"] == {}
        assert summary["p50_ms"] <= summary["p99_ms"] <= summary["p999_ms"]
        beats = scrape(metrics_url(server))["fastcoord_heartbeats_total"]
        assert beats >= summary["heartbeats"]
        assert scrape(metrics_url(server))['fastcoord_groups{state="Stable"}'] == 4
    finally:
        assert server.stop() == 0, server.log()

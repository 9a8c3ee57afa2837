"""The wire-server harness itself (tests/helpers/server.py): `fastcoord serve` announces
its port, prints status lines, stops cleanly on SIGTERM and refuses a bad topic."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

from helpers.server import ROOT, RawConn, ServerProc


def test_serve_announces_port_and_stops_cleanly_on_sigterm(tmp_path):
    server = ServerProc(tmp_path / "server.log")
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5):
            pass
    finally:
        code = server.stop()
    assert code == 0, server.log()
    assert "shutting down" in server.log()


def test_serve_prints_a_status_line(tmp_path):
    server = ServerProc(tmp_path / "server.log", "--status-interval-s", "0.2")
    try:
        conn = RawConn(server.port)
        conn.call(12, 4, {"group_id": "g", "generation_id": 0, "member_id": "m"})
        line = ""
        deadline = time.monotonic() + 10
        while "heartbeats/s" not in line or "requests=1" not in line:
            line = server._lines.get(timeout=max(0.01, deadline - time.monotonic()))
        assert "connections=1" in line and "p99_ms=" in line
        conn.close()
    finally:
        assert server.stop() == 0


def test_serve_rejects_a_bad_topic_declaration():
    proc = subprocess.run([sys.executable, "-m", "fastcoord", "serve", "--port", "0",
                           "--topic", "orders"], capture_output=True, timeout=60,
                          cwd=str(ROOT))
    assert proc.returncode == 2
    assert b"name:partitions" in proc.stderr

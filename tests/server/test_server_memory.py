"""Bounded memory: what a client can make the server hold is bounded per connection
(requests in flight behind a parked one) and in total (large partial frames share
queued_max_request_bytes), and at --max-connections idle connections make room
before new ones are refused. A real server subprocess on 127.0.0.1; its memory is
read from /proc/PID/status."""
from __future__ import annotations

import select
import socket
import struct
import threading
import time

import pytest

from fastcoord.server.protocol import encode_request
from helpers.server import RawConn, ServerProc, proc_status, wait_until

MIB = 1024 * 1024
# A sender gives up once the server has read nothing of its connection for this long:
# long enough that a server reading everything (as before reading was bounded) is
# never taken for one that stopped, even on a loaded machine.
STALL_S = 5.0
HEARTBEAT = {"group_id": "g", "generation_id": 0, "member_id": "nobody"}
# A JoinGroup that parks: the first member of a new group waits out the initial
# rebalance delay (the server is started with one far longer than the test).
PARKED_JOIN = {"group_id": "parked", "session_timeout": 30_000, "rebalance_timeout": 60_000,
               "member_id": "", "protocol_type": "consumer",
               "protocols": [{"name": "range", "metadata": b""}]}


def _push(sock: socket.socket, data: bytes, stall_s: float) -> int:
    """Send `data` until done or until the server has read nothing for `stall_s`
    (its reading paused and the socket buffers full); the bytes sent."""
    sock.setblocking(False)
    view = memoryview(data)
    sent = 0
    while sent < len(view):
        try:
            sent += sock.send(view[sent:sent + MIB])
        except BlockingIOError:
            if not select.select([], [sock], [], stall_s)[1]:
                break
    return sent


def _in_threads(jobs):
    threads = [threading.Thread(target=job, daemon=True) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a sender did not finish"


@pytest.mark.slow
def test_pipelined_requests_and_partial_frames_grow_memory_by_less_than_64_mib(tmp_path):
    proc = ServerProc(tmp_path / "server.log", "--group-initial-rebalance-delay-ms", "60000",
                      "--group-max-session-timeout-ms", "60000", "--no-request-log",
                      "--no-heartbeat-lane")
    conns = []
    try:
        probe = RawConn(proc.port)
        assert probe.call(12, 4, HEARTBEAT).error_code == 25
        assert probe.call(18, 0, {}).error_code == 0
        before = proc_status(proc.proc.pid, "VmRSS")

        # 500k ApiVersions pipelined behind a parked JoinGroup on one connection.
        parked = RawConn(proc.port)
        conns.append(parked)
        parked.send(11, 1, PARKED_JOIN)
        one = encode_request(18, 0, 7, {}, "raw")
        pipelined = one * 500_000
        # 40 connections, each sending 15 MiB of a frame that never completes.
        partial = struct.pack(">i", 15 * MIB + 1024) + b"\0" * (15 * MIB)
        cut = [socket.create_connection(("127.0.0.1", proc.port), timeout=10)
               for _ in range(40)]
        conns += cut
        sent = {}

        def pipeline():
            sent["pipelined"] = _push(parked.sock, pipelined, STALL_S)

        def cut_frame(i, sock):
            def job():
                sent[i] = _push(sock, partial, STALL_S)
            return job

        # One after the other: a server that reads everything (as before reading was
        # bounded) spends a while on the pipelined requests, and must have read them
        # before the partial frames' senders start counting their stall.
        started = time.monotonic()
        _in_threads([pipeline])
        _in_threads([cut_frame(i, s) for i, s in enumerate(cut)])
        time.sleep(0.5)          # whatever was read is handled by now
        pid = proc.proc.pid
        rss, peak = proc_status(pid, "VmRSS"), proc_status(pid, "VmHWM")
        print(f"RSS {before / MIB:.0f} -> {rss / MIB:.0f} MiB (peak {peak / MIB:.0f} MiB); "
              f"pipelined {sent['pipelined'] / len(pipelined):.0%} sent, partial frames "
              f"{sum(v for k, v in sent.items() if k != 'pipelined') / MIB:.0f} MiB sent "
              f"in {time.monotonic() - started:.1f} s")
        assert rss - before < 64 * MIB
        assert peak - before < 64 * MIB
        # Everyone else is still served, and so is a new connection.
        assert probe.call(12, 4, HEARTBEAT).error_code == 25
        fresh = RawConn(proc.port)
        conns.append(fresh)
        assert fresh.call(12, 4, HEARTBEAT).error_code == 25
        probe.close()
    finally:
        for c in conns:
            c.close()
        assert proc.stop() == 0
    assert "Traceback" not in proc.log(), proc.log()[-3000:]


def _sync_frame(corr: int, size: int) -> bytes:
    """A SyncGroup of about `size` bytes (an assignment that large) for a group that
    does not exist: answered at once, with an error."""
    body = {"group_id": "none", "generation_id": 1, "member_id": "m",
            "assignments": [{"member_id": "m", "assignment": b"\1" * size}]}
    return encode_request(14, 0, corr, body, "raw")


def _answered(conn: RawConn, corr: int, timeout: float) -> bool:
    """True if the next frame on `conn` answers `corr` within `timeout`."""
    conn.sock.settimeout(timeout)
    try:
        frame = conn.recv_frame()
    except socket.timeout:
        return False
    assert frame is not None, "closed by the server"
    assert struct.unpack_from(">i", frame)[0] == corr
    return True


def test_requests_in_flight_pause_reading_and_resume_in_order(tmp_path):
    """Behind a parked JoinGroup, 5,000 pipelined requests with at most 100 in flight:
    reading pauses and resumes as the answers drain, every answer arrives, in order."""
    proc = ServerProc(tmp_path / "server.log", "--group-initial-rebalance-delay-ms", "300",
                      "--max-inflight-requests", "100", "--no-heartbeat-lane")
    conn = RawConn(proc.port)
    try:
        join = conn.send(11, 1, PARKED_JOIN)
        corrs = [conn.send(18, 0, {}) for _ in range(5000)]
        assert conn.recv()[0] == join
        assert [conn.recv()[0] for _ in corrs] == corrs
        assert conn.call(12, 4, HEARTBEAT).error_code == 25
    finally:
        conn.close()
        assert proc.stop() == 0
    assert "Traceback" not in proc.log(), proc.log()[-3000:]


def test_large_frames_share_the_request_budget(tmp_path):
    """queued_max_request_bytes fits one 800 KB frame: a second waits (unread) until
    the first completes; a partial frame that never completes is closed once another
    has waited --idle-grace-ms, and the waiting one is served."""
    proc = ServerProc(tmp_path / "server.log", "--queued-max-request-bytes", "1000000",
                      "--idle-grace-ms", "500")
    holder, waiter = RawConn(proc.port), RawConn(proc.port)
    try:
        first, second = _sync_frame(1, 800_000), _sync_frame(2, 800_000)
        holder.send_raw(first[:-10])
        time.sleep(0.2)                      # the holder's reservation is made first
        waiter.send_raw(second)
        assert not _answered(waiter, 2, 0.5)
        holder.send_raw(first[-10:])
        assert _answered(holder, 1, 5)
        assert _answered(waiter, 2, 5)

        holder.send_raw(_sync_frame(3, 800_000)[:-10])     # never completed
        time.sleep(0.2)
        waiter.send_raw(_sync_frame(4, 800_000))
        started = time.monotonic()
        assert _answered(waiter, 4, 10)
        assert time.monotonic() - started >= 0.4             # it waited the grace period
        assert holder.closed_by_server()
        assert wait_until(lambda: "held the request budget" in proc.log(), 5)
    finally:
        holder.close()
        waiter.close()
        assert proc.stop() == 0
    assert "Traceback" not in proc.log(), proc.log()[-3000:]


def test_max_connections_closes_an_idle_connection_before_refusing(tmp_path):
    proc = ServerProc(tmp_path / "server.log", "--max-connections", "2",
                      "--idle-grace-ms", "500", "--no-heartbeat-lane")
    conns = []
    try:
        idle, busy = RawConn(proc.port), RawConn(proc.port)
        conns += [idle, busy]
        assert idle.call(12, 4, HEARTBEAT).error_code == 25
        time.sleep(0.7)                       # idle past the grace period
        assert busy.call(12, 4, HEARTBEAT).error_code == 25
        fresh = RawConn(proc.port)            # admitted: the idle one makes room
        conns.append(fresh)
        assert fresh.call(12, 4, HEARTBEAT).error_code == 25
        assert idle.closed_by_server()
        assert wait_until(lambda: "closing it for a new one" in proc.log(), 5)
        assert busy.call(12, 4, HEARTBEAT).error_code == 25
        assert fresh.call(12, 4, HEARTBEAT).error_code == 25
        refused = RawConn(proc.port)          # nobody idle long enough: refused
        conns.append(refused)
        assert refused.closed_by_server()
        assert busy.call(12, 4, HEARTBEAT).error_code == 25
        assert fresh.call(12, 4, HEARTBEAT).error_code == 25
    finally:
        for c in conns:
            c.close()
        assert proc.stop() == 0

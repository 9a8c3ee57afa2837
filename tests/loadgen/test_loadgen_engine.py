"""The load generator's C measurement engine (fastcoord/loadgen/_native/engine.pyx).

- Against `FakeBroker`, a stand-in server in this process that answers each request
  with a Heartbeat response of its version and can misbehave on purpose (responses a
  byte at a time, a slow reader, an error code, a wrong correlation id, a connection
  closed mid-run, no answer at all): the engine's framing, FIFOs, partial writes, error
  counts and failures, without kio.
- Against a real `fastcoord serve` subprocess with `Loadgen` (20 connections, 400
  members): both engines, closed and open loop, on asyncio's own loop and on uvloop;
  stale members' ILLEGAL_GENERATION counted; a server killed mid-run reported as an
  error, not a hang; the `--engine` flag of `fastcoord loadgen`.

Everything is on 127.0.0.1, every run lasts well under a second and every wait is bounded.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Callable, List, Optional

import pytest

from fastcoord._twins import NO_EXTENSIONS

try:
    if NO_EXTENSIONS:
        raise ImportError("FASTCOORD_NO_EXTENSIONS is set")
    from fastcoord.loadgen._native.engine import run_heartbeats
except ImportError:             # not built, switched off, or not Linux
    run_heartbeats = None
needs_engine = pytest.mark.skipif(run_heartbeats is None,
                                  reason="the C load generator engine is not built")

ILLEGAL_GENERATION = 22


# -- a stand-in server -------------------------------------------------------------------

CONSUMER_HEARTBEAT = 68


def heartbeat_response(version: int, correlation: int, error: int, api_key: int = 12) -> bytes:
    """The layout fastcoord serve answers with (see _response in wire.pyx); for a
    ConsumerGroupHeartbeat (flexible at every version), that of Kafka's schema."""
    if api_key == CONSUMER_HEARTBEAT:
        # header: correlation id, tags | throttle, error, error message (null), member id
        # "m", member epoch, heartbeat interval, assignment (null), tags
        body = (struct.pack(">ibih", correlation, 0, 0, error) + b"\0\x02m"
                + struct.pack(">iibb", 7, 5000, -1, 0))
        return struct.pack(">i", len(body)) + body
    body = struct.pack(">i", correlation)
    if version >= 4:
        body += b"\0"                               # header tagged fields
    if version >= 1:
        body += struct.pack(">i", 0)                # throttle
    body += struct.pack(">h", error)
    if version >= 4:
        body += b"\0"                               # body tagged fields
    return struct.pack(">i", len(body)) + body


def heartbeat_frame(version: int, pad: int = 40, api_key: int = 12) -> bytes:
    """A frame the engine accepts: a (ConsumerGroup)Heartbeat header, correlation id 0,
    `pad` bytes."""
    body = struct.pack(">hhi", api_key, version, 0) + b"m" * pad
    return struct.pack(">i", len(body)) + body


def _recv_exact(sock: socket.socket, n: int) -> Optional[bytes]:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


class FakeBroker:
    """One thread per connection reads each request and answers it (blocking sockets)."""

    def __init__(self, *, error: Callable[[int], int] = lambda corr: 0, dribble: bool = False,
                 read_delay_s: float = 0.0, close_after: Optional[int] = None,
                 answer: bool = True, corrupt_after: Optional[int] = None) -> None:
        self.error, self.dribble, self.read_delay_s = error, dribble, read_delay_s
        self.close_after, self.answer, self.corrupt_after = close_after, answer, corrupt_after
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests = 0
        self.socks: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def connect(self, count: int, sndbuf: Optional[int] = None) -> List[socket.socket]:
        socks = []
        for _ in range(count):
            s = socket.socket()
            if sndbuf is not None:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            s.connect(("127.0.0.1", self.port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setblocking(False)
            socks.append(s)
        self.socks += socks
        return socks

    def _accept(self) -> None:
        index = 0
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock, index), daemon=True).start()
            index += 1

    def _serve(self, sock: socket.socket, index: int) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.read_delay_s:
            time.sleep(self.read_delay_s)
        served = 0
        with sock:
            while True:
                try:
                    head = _recv_exact(sock, 4)
                    body = head and _recv_exact(sock, struct.unpack(">i", head)[0])
                except OSError:
                    return
                if not body:
                    return
                api_key, version, corr = struct.unpack_from(">hhi", body)
                served += 1
                self.requests += 1
                if index == 0 and self.close_after is not None and served > self.close_after:
                    return                                  # closes connection 0
                if not self.answer:
                    continue
                if index == 0 and self.corrupt_after is not None and served > self.corrupt_after:
                    corr += 1000
                reply = heartbeat_response(version, corr, self.error(corr), api_key)
                try:
                    if self.dribble:                       # one byte per segment
                        for i in range(len(reply)):
                            sock.sendall(reply[i:i + 1])
                            time.sleep(0.0001)
                    else:
                        sock.sendall(reply)
                except OSError:
                    return

    def close(self) -> None:
        self.listener.close()
        for s in self.socks:
            s.close()


@pytest.fixture
def broker_factory():
    made: List[FakeBroker] = []

    def make(**kw) -> FakeBroker:
        made.append(FakeBroker(**kw))
        return made[-1]
    yield make
    for broker in made:
        broker.close()


def _run(socks, frames_per_conn, **kw) -> dict:
    kw.setdefault("duration_s", 0.3)
    kw.setdefault("warmup_s", 0.05)
    started = time.monotonic()
    result = run_heartbeats([s.fileno() for s in socks], frames_per_conn, **kw)
    result["wall_s"] = time.monotonic() - started
    return result


def _assert_clean(result: dict) -> None:
    assert result["failure"] is None, result["failure"]
    assert result["answered"] == result["sent"] > 0
    assert result["unanswered"] == 0
    lat = result["latencies"]
    assert lat.dtype.name == "float64" and len(lat) == result["answered"]
    assert lat.min() > 0 and lat.max() < 5.0


# -- the engine against the stand-in -----------------------------------------------------

@needs_engine
@pytest.mark.parametrize("version", [0, 1, 3, 4])
def test_closed_loop_every_version(broker_factory, version):
    broker = broker_factory()
    socks = broker.connect(4)
    result = _run(socks, [[heartbeat_frame(version), heartbeat_frame(version, 7)]] * 4,
                  pipeline=3)
    _assert_clean(result)
    assert result["errors"] == {} and result["unsent"] == 0
    assert result["heartbeat_version"] == version
    assert result["sample_response"] == heartbeat_response(version, 1, 0)[4:]
    assert result["error_sample_response"] is None


@needs_engine
def test_responses_split_across_reads(broker_factory):
    """Every response arrives a byte at a time: frames reassembled across recv()s."""
    broker = broker_factory(dribble=True)
    socks = broker.connect(3)
    result = _run(socks, [[heartbeat_frame(4)]] * 3, pipeline=2, duration_s=0.2)
    _assert_clean(result)
    assert result["recvs"] > 4 * result["answered"]      # many reads per response


@needs_engine
def test_open_loop_sends_the_offered_rate(broker_factory):
    broker = broker_factory()
    socks = broker.connect(5)
    rate, duration = 2000.0, 0.5
    result = _run(socks, [[heartbeat_frame(4)]] * 5, pipeline=8, rate=rate,
                  duration_s=duration, warmup_s=0.1)
    _assert_clean(result)
    offered = rate * duration
    # sent + unsent is the schedule's count in the window (a generous bound: not timed)
    assert 0.8 * offered <= result["sent"] + result["unsent"] <= 1.2 * offered
    assert result["elapsed_s"] == pytest.approx(duration)
    assert result["sleeps"] > 0                           # it sleeps between sends


@needs_engine
def test_open_loop_counts_unsent_when_every_connection_is_full(broker_factory):
    broker = broker_factory(answer=False)
    socks = broker.connect(2)
    result = _run(socks, [[heartbeat_frame(4)]] * 2, pipeline=2, rate=1000.0,
                  duration_s=0.3, warmup_s=0.05, drain_s=0.2)
    # 4 requests in flight, never answered: the rest of the schedule is unsent
    assert result["unsent"] >= 250
    assert "4 heartbeats unanswered" in result["failure"]
    assert result["failed_connection"] is None


@needs_engine
@pytest.mark.parametrize("version", [0, 1, 3, 4])
def test_error_codes_counted(broker_factory, version):
    """Odd correlation ids get ILLEGAL_GENERATION: half of each connection's responses.
    Every version: the error code sits at another offset in each response layout (with
    no errors, any offset of the zeros around it would read as 0)."""
    broker = broker_factory(error=lambda corr: ILLEGAL_GENERATION if corr % 2 else 0)
    socks = broker.connect(4)
    result = _run(socks, [[heartbeat_frame(version)]] * 4, pipeline=4)
    _assert_clean(result)
    errors = result["errors"][ILLEGAL_GENERATION]
    # each connection's measured window is one run of consecutive ids: off by <= 1 each
    assert abs(errors - result["answered"] / 2) <= len(socks)
    assert set(result["errors"]) == {ILLEGAL_GENERATION}
    # the first response with an error: correlation id 1 on some connection
    assert (result["error_sample_response"]
            == heartbeat_response(version, 1, ILLEGAL_GENERATION)[4:])


@needs_engine
@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_heartbeats_counted(broker_factory, version):
    """ConsumerGroupHeartbeat frames: the error code read where Kafka's layout puts it
    (after the flexible header's tag byte and the throttle time), half of them
    FENCED_MEMBER_EPOCH; the responses are longer than a Heartbeat's."""
    fenced = 110
    broker = broker_factory(error=lambda corr: fenced if corr % 2 else 0)
    socks = broker.connect(3)
    frame = heartbeat_frame(version, api_key=CONSUMER_HEARTBEAT)
    result = _run(socks, [[frame]] * 3, pipeline=4)
    _assert_clean(result)
    assert (result["api_key"], result["heartbeat_version"]) == (CONSUMER_HEARTBEAT, version)
    assert set(result["errors"]) == {fenced}
    assert abs(result["errors"][fenced] - result["answered"] / 2) <= len(socks)
    assert (result["error_sample_response"]
            == heartbeat_response(version, 1, fenced, CONSUMER_HEARTBEAT)[4:])


@needs_engine
def test_partial_writes_wait_for_epollout(broker_factory):
    """Frames far larger than the socket buffers, and a server that starts reading late:
    send() takes part of the output and the rest goes out on EPOLLOUT."""
    broker = broker_factory(read_delay_s=0.2)
    socks = broker.connect(2, sndbuf=4096)
    big = heartbeat_frame(4, pad=600_000)
    result = _run(socks, [[big]] * 2, pipeline=3, duration_s=0.5, warmup_s=0.0)
    _assert_clean(result)
    assert result["blocked_sends"] > 0


@needs_engine
@pytest.mark.parametrize("misbehaviour,version,conns,pipeline,message", [
    (dict(close_after=20), 4, 3, 4, "closed by the server|reset|Broken pipe"),
    (dict(corrupt_after=10), 1, 2, 1, "correlation id 1011, expected 11"),
], ids=["closed", "wrong-correlation-id"])
def test_connection_failure_is_reported(broker_factory, misbehaviour, version, conns,
                                        pipeline, message):
    """Connection 0 is closed, or answers with a wrong correlation id: the run stops there
    (not at its end) and says which connection and why."""
    broker = broker_factory(**misbehaviour)
    socks = broker.connect(conns)
    result = _run(socks, [[heartbeat_frame(version)]] * conns, pipeline=pipeline,
                  duration_s=2.0)
    assert result["failed_connection"] == 0
    assert re.search(message, result["failure"]), result["failure"]
    assert result["wall_s"] < 2.0                         # stopped there, not at the end


@needs_engine
@pytest.mark.parametrize("frames,message", [
    ([[]], "non-empty list"),
    ([[b"\0\0\0\x08\0\x0c\0\x04"]], "frame of 8 bytes"),
    ([[struct.pack(">ihhi", 8, 11, 4, 0)]], "not a Heartbeat"),
    ([[heartbeat_frame(4), heartbeat_frame(3)]], "not a Heartbeat v4"),
    ([[heartbeat_frame(5)]], "not a Heartbeat"),
    ([[heartbeat_frame(2, api_key=CONSUMER_HEARTBEAT)]], "not a Heartbeat"),
    ([[heartbeat_frame(1, api_key=CONSUMER_HEARTBEAT), heartbeat_frame(1)]],
     "not a ConsumerGroupHeartbeat v1"),
    ([[heartbeat_frame(1), heartbeat_frame(1, api_key=CONSUMER_HEARTBEAT)]],
     "not a Heartbeat v1"),
])
def test_bad_frames_rejected(broker_factory, frames, message):
    broker = broker_factory()
    socks = broker.connect(1)
    with pytest.raises(ValueError, match=message):
        run_heartbeats([socks[0].fileno()], frames)


@needs_engine
def test_bad_arguments_rejected(broker_factory):
    broker = broker_factory()
    socks = broker.connect(1)
    fd = socks[0].fileno()
    with pytest.raises(ValueError):
        run_heartbeats([fd], [[heartbeat_frame(4)]], rate=0.0)
    with pytest.raises(ValueError):
        run_heartbeats([fd], [[heartbeat_frame(4)]], pipeline=0)
    with pytest.raises(ValueError):
        run_heartbeats([fd, fd], [[heartbeat_frame(4)]])
    with pytest.raises(OSError):            # the same socket twice
        run_heartbeats([fd, fd], [[heartbeat_frame(4)]] * 2)


# -- Loadgen against a real server -------------------------------------------------------

from helpers.loadgen import loadgen_on  # noqa: E402
from helpers.server import ROOT, ServerProc  # noqa: E402

try:
    from fastcoord.loadgen import Loadgen, LoadgenError
except ImportError:             # kio (the server extra) is not installed
    Loadgen = None
needs_server = pytest.mark.skipif(Loadgen is None, reason="kio is not installed")
# the engines this build has: the C one unless it is not built (or switched off)
ENGINES = ["c", "python"] if run_heartbeats is not None else ["python"]

SIZE = dict(connections=20, members=400, groups=20)


def _new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def loaded(request, tmp_path_factory):
    """A server and a Loadgen with every member set up, on one kind of event loop."""
    loop = _new_loop(request.param)
    server = ServerProc(tmp_path_factory.mktemp("server") / "server.log", "--store", "memory",
                        "--no-request-log", topics=())
    with loadgen_on(server, loop, lambda port: Loadgen("127.0.0.1", port, pipeline=8,
                                                       setup_timeout_s=60, **SIZE)) as gen:
        yield gen, loop, server


@needs_server
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("rate", [None, 2000.0], ids=["closed", "open-2000"])
def test_loadgen_engines(loaded, engine, rate):
    gen, loop, _ = loaded
    summary = loop.run_until_complete(gen.measure(0.5, 0.1, rate, engine))
    assert summary["engine"] == engine
    assert summary["errors"] == {}, summary
    assert summary["unsent"] == 0
    assert summary["heartbeats"] == summary["sent"] == len(gen.latencies) > 0
    assert 0 < summary["p50_ms"] <= summary["p99_ms"] <= summary["p999_ms"] <= summary["max_ms"]
    if rate is not None:
        assert 0.8 * rate * 0.5 <= summary["heartbeats"] <= 1.2 * rate * 0.5
    assert summary["loadgen_cpu_s"] > 0
    if sys.platform.startswith("linux"):
        assert summary["loadgen_runq_wait_s"] >= 0
    if engine == "c":
        stats = summary["engine_stats"]
        assert stats["sends"] > 0 and stats["recvs"] > 0
        assert stats["cpu_user_s"] + stats["cpu_system_s"] > 0


@needs_server
def test_loadgen_counts_stale_members(loaded):
    """Half the members of each connection beat with generation + 1: the server answers
    ILLEGAL_GENERATION to those, about half the heartbeats, and both engines count it."""
    gen, loop, _ = loaded
    saved = [list(conn.frames) for conn in gen.conns]
    try:
        for conn in gen.conns:
            for i, mid in enumerate(conn.members):
                if i % 2 == 0:
                    conn.frames[i] = gen.heartbeat_frame(mid, gen.generation[mid] + 1)
        for engine in ENGINES:
            summary = loop.run_until_complete(gen.measure(0.3, 0.05, None, engine))
            answered = summary["heartbeats"]
            stale = summary["errors"].get(str(ILLEGAL_GENERATION), 0)
            assert set(summary["errors"]) == {str(ILLEGAL_GENERATION)}, summary
            # each connection's members come round in turn: the window holds about
            # half stale ones, off by at most a pipeline's worth per connection
            assert abs(stale - answered / 2) <= SIZE["connections"] * (gen.pipeline + 1), summary
    finally:
        for conn, frames in zip(gen.conns, saved):
            conn.frames = frames
    summary = loop.run_until_complete(gen.measure(0.2, 0.0, None))
    assert summary["errors"] == {}                       # their generation is intact


@needs_server
@needs_engine
def test_loadgen_c_engine_reports_a_server_killed_mid_run(tmp_path):
    loop = asyncio.new_event_loop()
    server = ServerProc(tmp_path / "server.log", "--store", "memory", "--no-request-log",
                        topics=())
    gen = Loadgen("127.0.0.1", server.port, connections=4, members=40, groups=4,
                  pipeline=4, setup_timeout_s=60)
    try:
        loop.run_until_complete(gen.__aenter__())
        killer = threading.Timer(0.3, os.kill, (server.proc.pid, signal.SIGKILL))
        killer.start()
        started = time.monotonic()
        with pytest.raises(LoadgenError, match="closed by the server|reset|Broken pipe"):
            loop.run_until_complete(gen.measure(5.0, 0.0, None, "c"))
        assert time.monotonic() - started < 4.0            # reported, not waited out
        killer.join()
        with pytest.raises(LoadgenError, match="unusable"):
            loop.run_until_complete(gen.measure(0.1, 0.0, None, "c"))
    finally:
        loop.run_until_complete(gen.__aexit__(None, None, None))
        loop.close()
        server.stop()


@needs_server
def test_loadgen_command_engine_flag(tmp_path):
    """`fastcoord loadgen --engine c|python` runs that engine and says so."""
    server = ServerProc(tmp_path / "server.log", "--store", "memory", "--no-request-log",
                        topics=())
    try:
        for engine in ENGINES:
            proc = subprocess.run(
                [sys.executable, "-m", "fastcoord", "loadgen", "--port", str(server.port),
                 "--connections", "4", "--members", "40", "--groups", "4",
                 "--duration-s", "0.3", "--warmup-s", "0.05", "--rate", "1000",
                 "--setup-timeout-s", "30", "--engine", engine],
                capture_output=True, timeout=60, cwd=str(ROOT))
            assert proc.returncode == 0, proc.stderr.decode()
            summary = json.loads(proc.stdout)
            assert summary["engine"] == engine
            assert summary["heartbeats"] > 0 and summary["errors"] == {}
    finally:
        assert server.stop() == 0, server.log()


def test_the_cli_connections_default_fits_fewer_members(capsys):
    """`fastcoord loadgen --members 20` without --connections took the default of 100
    sockets and stopped at 'members must be >= connections'. The default is now 100,
    or the members when fewer: the command goes on (here to a port nothing listens on,
    whose refusal it reports)."""
    import socket
    from fastcoord.cli import main
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(["loadgen", "--members", "20", "--groups", "4", "--port", str(port),
                 "--setup-timeout-s", "5", "--event-loop", "asyncio"])
    err = capsys.readouterr().err
    assert code == 1 and "members must be >= connections" not in err, err
    assert "fastcoord loadgen:" in err and ("refused" in err.lower() or "Errno" in err), err

"""The server's heartbeat lane (`lane.HeartbeatLane`): both twins over real socket pairs
(what it answers, when and how it hands a socket back), then `fastcoord serve` with the
lane on and off (the same bytes on the wire, idle connections in the lane closed)."""
from __future__ import annotations

import collections
import json
import os
import socket
import struct
import sys
import time

import pytest

pytest.importorskip("kio")
if not sys.platform.startswith("linux"):
    pytest.skip("the heartbeat lane is built on epoll (Linux only)", allow_module_level=True)

import fastcoord  # noqa: E402
from fastcoord._twins import module  # noqa: E402
from fastcoord.server.protocol import (  # noqa: E402
    SUPPORTED_VERSIONS, encode_request, encode_response,
)
from helpers.server import (  # noqa: E402
    ServerProc, metrics_url, read_responses, scrape, serve_exchange,
)

LO, HI = SUPPORTED_VERSIONS[12]
MAX_FRAME = 1 << 20


def _hb(corr: int, group: str = "g", version: int = 4) -> bytes:
    return encode_request(12, version, corr, {"group_id": group, "generation_id": 1,
                                              "member_id": "m", "group_instance_id": None},
                          client_id="c")


def _answer(corr: int, error: int = 0, version: int = 4) -> bytes:
    return encode_response(12, version, corr, {"error_code": error})


class Returns(list):
    """on_return: keeps (key, rest, unsent, error) per hand-back."""

    def __call__(self, key, rest, unsent, error) -> None:
        assert type(rest) is bytes and type(unsent) is bytes
        self.append((key, rest, unsent, error))


class Lane:
    """A lane of the twin `impl` serving one end of a socket pair; the test drives the
    other end (`peer`) as the client."""

    def __init__(self, impl: str, heartbeat=None, log=None, host=None) -> None:
        self.latencies = collections.deque()
        self.reader = module(impl, "server.wire").HeartbeatReader(
            heartbeat or (lambda group, member, generation, instance: 0),
            MAX_FRAME, LO, HI, self.latencies, log)
        self.returns = Returns()
        self.lane = module(impl, "server.lane").HeartbeatLane(self.reader, self.returns)
        self.peer, self.served = socket.socketpair()
        self.served.setblocking(False)
        self.peer.settimeout(5)
        self.fd = self.served.fileno()
        self.lane.add(self.fd, "conn-1", host)

    def poll_until(self, done, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "the lane did not get there in time"
            self.lane.poll()
            time.sleep(0.001)

    def receive(self, want: int) -> bytes:
        """The next `want` bytes the peer receives (polling the lane meanwhile)."""
        data = b""
        self.peer.setblocking(False)
        try:
            def enough() -> bool:
                nonlocal data
                try:
                    data += self.peer.recv(65536)
                except BlockingIOError:
                    pass
                return len(data) >= want
            self.poll_until(enough)
        finally:
            self.peer.settimeout(5)
        return data

    def close(self) -> None:
        self.lane.close()
        self.peer.close()
        self.served.close()


@pytest.fixture
def lane(impl):
    made = []

    def make(heartbeat=None) -> Lane:
        made.append(Lane(impl, heartbeat))
        return made[-1]
    yield make
    for each in made:
        each.close()


def test_answers_heartbeats_one_read_at_a_time_and_keeps_the_socket(lane):
    ln = lane()
    for corr in range(5):
        ln.peer.sendall(_hb(corr, version=corr % 5))
        expected = _answer(corr, version=corr % 5)
        assert ln.receive(len(expected)) == expected
    ln.peer.sendall(b"".join(_hb(c) for c in range(10, 30)))          # a burst: one read
    expected = b"".join(_answer(c) for c in range(10, 30))
    assert ln.receive(len(expected)) == expected
    assert ln.returns == [] and ln.fd in ln.lane and len(ln.lane) == 1
    assert ln.reader.answered == 25 and len(ln.latencies) == 25
    assert ln.lane.reads >= 6 and ln.lane.handbacks == 0


def test_hands_back_at_the_first_request_it_does_not_answer(lane):
    """Heartbeats, then another API, then a heartbeat, in one read: the first ones are
    answered and sent, the rest of the read (from the other request on) is handed back
    with the socket, which the lane then leaves alone."""
    ln = lane()
    other = encode_request(18, 0, 99, {}, client_id="c")
    ln.peer.sendall(_hb(1) + _hb(2) + other + _hb(3))
    ln.poll_until(lambda: ln.returns)
    assert ln.returns == [("conn-1", other + _hb(3), b"", None)]
    assert ln.peer.recv(4096) == _answer(1) + _answer(2)
    assert ln.fd not in ln.lane and len(ln.lane) == 0 and ln.lane.handbacks == 1
    ln.peer.sendall(_hb(4))                        # no longer served: nothing answers
    for _ in range(20):
        ln.lane.poll()
    ln.peer.setblocking(False)
    with pytest.raises(BlockingIOError):
        ln.peer.recv(4096)
    assert ln.returns[1:] == []


def test_hands_back_a_frame_cut_short(lane):
    ln = lane()
    whole = _hb(7)
    ln.peer.sendall(_hb(6) + whole[:11])
    ln.poll_until(lambda: ln.returns)
    assert ln.returns == [("conn-1", whole[:11], b"", None)]
    assert ln.peer.recv(4096) == _answer(6)


def test_end_of_stream_hands_back_with_nothing(lane):
    ln = lane()
    ln.peer.sendall(_hb(1))
    assert ln.receive(len(_answer(1))) == _answer(1)
    ln.peer.shutdown(socket.SHUT_WR)
    ln.poll_until(lambda: ln.returns)
    assert ln.returns == [("conn-1", b"", b"", None)]
    assert ln.served.recv(10) == b""               # still there for the owner to see


def test_a_heartbeat_that_raises_hands_back_its_error_after_the_earlier_answers(lane):
    def heartbeat(group, member, generation, instance):
        if group == "boom":
            raise RuntimeError("coordinator failure")
        return 0

    ln = lane(heartbeat)
    ln.peer.sendall(_hb(1) + _hb(2, group="boom") + _hb(3))
    ln.poll_until(lambda: ln.returns)
    [(key, rest, unsent, error)] = ln.returns
    assert (key, rest, unsent) == ("conn-1", b"", b"")
    assert isinstance(error, RuntimeError) and "coordinator failure" in str(error)
    assert ln.peer.recv(4096) == _answer(1)
    assert ln.reader.answered == 1


def test_a_reset_connection_hands_back_an_oserror(impl):
    """A TCP peer that resets the connection (close with SO_LINGER 0: an RST): the
    lane's read fails with ECONNRESET and hands the socket back with that error."""
    reader = module(impl, "server.wire").HeartbeatReader(lambda *a: 0, MAX_FRAME, LO, HI)
    returns = Returns()
    ln = module(impl, "server.lane").HeartbeatLane(reader, returns)
    listener = socket.create_server(("127.0.0.1", 0))
    peer = socket.create_connection(listener.getsockname(), timeout=5)
    served, _ = listener.accept()
    try:
        served.setblocking(False)
        ln.add(served.fileno(), "conn-1")
        peer.sendall(_hb(1))
        deadline = time.monotonic() + 5
        while ln.reads == 0:
            assert time.monotonic() < deadline
            ln.poll()
        assert peer.recv(4096) == _answer(1)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()                                 # an RST, not a FIN
        while not returns:
            assert time.monotonic() < deadline
            ln.poll()
            time.sleep(0.001)
        [(key, rest, unsent, error)] = returns
        assert (key, rest, unsent) == ("conn-1", b"", b"")
        assert isinstance(error, ConnectionResetError), error
    finally:
        ln.close()
        served.close()
        listener.close()
        if peer.fileno() >= 0:
            peer.close()


def test_a_client_that_does_not_read_gets_its_unsent_answers_handed_back(lane):
    """The kernel takes only part of the answers: what it did not take is handed back
    (to go out first), with the rest of the read; nothing is lost or sent twice."""
    ln = lane()
    ln.served.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    ln.peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sent = 0
    ln.peer.setblocking(False)
    burst = b"".join(_hb(c) for c in range(400))
    while not ln.returns and sent < 200:
        try:
            ln.peer.send(burst)
        except BlockingIOError:
            pass
        sent += 1
        ln.lane.poll()
    assert ln.returns, "the lane never filled the socket"
    [(key, rest, unsent, error)] = ln.returns
    assert key == "conn-1" and error is None
    # What reached the peer, then unsent, then the answers to rest, would be the answers
    # to every request the peer sent, in order: check the part the lane answered.
    received = b""
    while True:
        try:
            chunk = ln.peer.recv(1 << 20)
        except BlockingIOError:
            break
        if not chunk:
            break
        received += chunk
    answers = received + unsent
    size = len(_answer(0))
    assert len(answers) % size == 0 and len(answers) > 0
    corrs = [struct.unpack_from(">i", answers, i + 4)[0] for i in range(0, len(answers), size)]
    assert corrs == [c % 400 for c in range(len(corrs))]
    assert unsent or rest                          # why it was handed back


def test_request_log_lines_for_what_the_lane_answers(impl):
    """A logging reader: a line per answer with the connection's host, written once per
    poll (and before a hand-back); nothing for what is handed back."""
    chunks = []
    ln = Lane(impl, log=chunks.append, host=b'"10.0.0.7"')
    try:
        ln.peer.sendall(_hb(1) + _hb(2))
        ln.receive(2 * len(_answer(1)))
        ln.peer.sendall(_hb(3) + encode_request(18, 0, 4, {}, client_id="c"))
        ln.poll_until(lambda: ln.returns)
        lines = [json.loads(x) for x in b"".join(chunks).splitlines()]
        assert [(x["api"], x["host"], x["client"], x["group"], x["error"]) for x in lines] \
            == [("Heartbeat", "10.0.0.7", "c", "g", 0)] * 3
        assert all(type(chunk) is bytes for chunk in chunks)
    finally:
        ln.close()


def test_a_failing_hand_back_does_not_cost_other_connections_their_turn(impl):
    """Two connections ready in one poll; the hand-back of one raises (its owner's
    code failed). The other is still answered in that poll (edge-triggered, it would
    not be reported again), and poll raises the failure afterwards."""
    def on_return(key, rest, unsent, error):
        raise RuntimeError(f"owner of {key} failed")

    reader = module(impl, "server.wire").HeartbeatReader(lambda *a: 0, MAX_FRAME, LO, HI)
    ln = module(impl, "server.lane").HeartbeatLane(reader, on_return)
    pairs = [socket.socketpair() for _ in range(2)]
    try:
        for i, (peer, served) in enumerate(pairs):
            served.setblocking(False)
            ln.add(served.fileno(), f"conn-{i}")
        other = encode_request(18, 0, 9, {}, client_id="c")
        pairs[0][0].sendall(other)                  # handed back: on_return raises
        pairs[1][0].sendall(_hb(5))                 # answered in the same poll
        time.sleep(0.05)
        with pytest.raises(RuntimeError, match="owner of conn-0 failed"):
            ln.poll()
        pairs[1][0].settimeout(5)
        assert pairs[1][0].recv(4096) == _answer(5)
        assert pairs[0][1].fileno() not in ln and pairs[1][1].fileno() in ln
    finally:
        ln.close()
        for a, b in pairs:
            a.close()
            b.close()


def test_last_active_moves_with_reads(lane):
    ln = lane()
    entered = ln.lane.last_active(ln.fd)
    time.sleep(0.02)
    ln.peer.sendall(_hb(1))
    ln.receive(len(_answer(1)))
    assert ln.lane.last_active(ln.fd) > entered
    with pytest.raises(KeyError):
        ln.lane.last_active(ln.fd + 1000)
    read_at = ln.lane.last_active(ln.fd)
    assert ln.lane.idle(read_at) == [] and ln.lane.idle(read_at + 0.001) == ["conn-1"]


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_bad_arguments(impl):
    lane_type = module(impl, "server.lane").HeartbeatLane
    reader = module(impl, "server.wire").HeartbeatReader(lambda *a: 0, MAX_FRAME, LO, HI)
    stdin_open = _is_open(0)
    with pytest.raises(TypeError, match="on_return"):
        lane_type(reader, None)
    with pytest.raises(TypeError):
        lane_type(None, Returns())
    # A lane that failed to construct must not close descriptor 0 as it goes (its
    # epoll descriptor's initial value, before the native twin got this right).
    assert _is_open(0) == stdin_open
    ln = lane_type(reader, Returns())
    a, b = socket.socketpair()
    try:
        with pytest.raises(ValueError, match="fd"):
            ln.add(-1, "k")
        with pytest.raises(TypeError):
            ln.add("3", "k")
        with pytest.raises(TypeError, match="host"):
            ln.add(a.fileno(), "k", "127.0.0.1")
        ln.add(a.fileno(), "k")
        with pytest.raises(ValueError, match="already"):
            ln.add(a.fileno(), "k")
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            with pytest.raises(OSError):
                ln.add(devnull, "k")                # a file: epoll cannot watch it
        finally:
            os.close(devnull)
        assert ln.remove(a.fileno()) is True
        assert ln.remove(a.fileno()) is False
        assert len(ln) == 0
        ln.add(a.fileno(), "k")
        ln.close()
        assert len(ln) == 0 and ln.poll() == 0 and ln.remove(a.fileno()) is False
        with pytest.raises(ValueError, match="closed"):
            ln.fileno()
        with pytest.raises(ValueError, match="closed"):
            ln.add(b.fileno(), "k")
    finally:
        a.close()
        b.close()


@pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE, reason="native not built")
def test_twins_answer_and_hand_back_alike():
    """The same reads through both twins: the same bytes on the wire, the same
    hand-backs."""
    other = encode_request(18, 0, 99, {}, client_id="c")
    reads = [_hb(1), _hb(2) + _hb(3, group="é漢"), _hb(4, version=0) + other + _hb(5)]
    seen = []
    for impl in ("native", "pure"):
        ln = Lane(impl, lambda group, member, generation, instance: len(group) % 3)
        try:
            wire = b""
            for data in reads:
                ln.peer.sendall(data)
                ln.poll_until(lambda: ln.returns or ln.lane.reads >= reads.index(data) + 1)
                time.sleep(0.01)
                ln.peer.setblocking(False)
                try:
                    wire += ln.peer.recv(65536)
                except BlockingIOError:
                    pass
            seen.append((wire, list(ln.returns), ln.reader.answered))
        finally:
            ln.close()
    assert seen[0] == seen[1]
    assert seen[0][1] == [("conn-1", other + _hb(5), b"", None)]


# -- fastcoord serve with the lane on and off ------------------------------------------------

def test_server_answers_the_same_with_and_without_the_lane(tmp_path):
    """Heartbeats one per read and in bursts, other requests between them, a frame split
    across sends, non-ASCII ids: the same response bytes with the lane on, off, and
    with no fast path at all; with it on, the lane served reads and gave sockets back."""
    def hb(corr, version=4, group="g1"):
        return _hb(corr, group, version)

    join = encode_request(11, 5, 900, {
        "group_id": "g3", "session_timeout": 1, "rebalance_timeout": 6000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}]}, client_id="c")
    meta = encode_request(18, 3, 901, {"client_software_name": "t",
                                       "client_software_version": "1"}, client_id="c")
    sends = [(encode_request(18, 0, 1, {}, client_id="c"), 1)]
    sends += [(hb(10 + i, version=i % 5), 1) for i in range(20)]
    sends += [(b"".join(hb(40 + i) for i in range(8)), 8)]
    sends += [(hb(60) + join + hb(61), 3)]
    sends += [(hb(62 + i), 1) for i in range(3)]
    sends += [(meta, 1)]
    sends += [(hb(70 + i, group="é漢"), 1) for i in range(5)]
    split = hb(80)
    sends += [(hb(79) + split[:9], 1), (split[9:] + hb(81), 2)]
    sends += [(hb(90 + i), 1) for i in range(5)]
    results, lane_reads, handbacks, lane_conns = [], [], [], []
    configs = [[], ["--no-heartbeat-lane"], ["--no-heartbeat-fast-path"]]
    if fastcoord.NATIVE_AVAILABLE:
        configs.append(["--impl", "pure"])            # the pure twin's lane in the server
    for flag in configs:
        got, samples = serve_exchange(tmp_path / str(len(results)), sends, flag)
        lane_reads.append(samples["fastcoord_lane_reads_total"])
        handbacks.append(samples["fastcoord_lane_handbacks_total"])
        lane_conns.append(samples["fastcoord_lane_connections"])
        assert samples["fastcoord_heartbeats_total"] == 46
        results.append(got)
    assert all(result == results[0] for result in results[1:])
    assert [int.from_bytes(r[:4], "big") for r in results[0]] == (
        [1] + list(range(10, 30)) + list(range(40, 48)) + [60, 900, 61, 62, 63, 64, 901]
        + list(range(70, 75)) + [79, 80, 81] + list(range(90, 95)))
    # The lane served most heartbeat reads, and gave the socket back for the JoinGroup,
    # the Metadata request and the split frame.
    assert lane_reads[0] >= 30 and handbacks[0] >= 3 and lane_conns[0] == 1
    assert lane_reads[1:3] == [0, 0] and handbacks[1:3] == [0, 0]
    if len(configs) == 4:
        assert lane_reads[3] >= 30 and handbacks[3] >= 3


def test_server_closes_an_idle_connection_that_was_in_the_lane(tmp_path):
    """A connection heartbeating in the lane is not idle; once it stops, the idle
    timeout closes it as any other."""
    server = ServerProc(tmp_path / "server.log", "--store", "memory", "--no-request-log",
                        "--idle-timeout-ms", "600", "--metrics-port", "0")
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(encode_request(18, 0, 1, {}, client_id="c"))
            read_responses(sock, 1)
            for corr in range(12):                     # 1.2 s of heartbeats, 0.1 s apart
                sock.sendall(_hb(corr))
                # (an unknown group: UNKNOWN_MEMBER_ID, 25)
                assert read_responses(sock, 1) == [_answer(corr, 25)[4:]]
                time.sleep(0.1)
            assert scrape(metrics_url(server))["fastcoord_lane_connections"] == 1
            stopped = time.monotonic()
            sock.settimeout(5)
            assert sock.recv(10) == b""                # closed by the server
            waited = time.monotonic() - stopped
            assert 0.5 <= waited < 3.5
        assert scrape(metrics_url(server))["fastcoord_lane_connections"] == 0
    finally:
        assert server.stop() == 0, server.log()


def test_server_logs_the_same_with_and_without_the_lane(tmp_path):
    """With the request log on (the serve default): heartbeats one per read (non-ASCII
    and null client ids, non-ASCII groups), other requests between them: the same
    responses and the same request-log lines (but their time fields) with the lane on,
    off, and with no fast path; with it on, the lane served reads and wrote the lines."""
    def hb(corr, group="g1", client="c-é"):
        return encode_request(12, corr % 5, corr, {
            "group_id": group, "generation_id": 1, "member_id": "m\u2603",
            "group_instance_id": None}, client_id=client)

    sends = [(encode_request(18, 0, 1, {}, client_id="c"), 1)]
    sends += [(hb(10 + i), 1) for i in range(10)]
    sends += [(hb(30 + i, group="é漢\"q\\", client=None), 1) for i in range(5)]
    sends += [(encode_request(18, 3, 50, {"client_software_name": "t",
                                          "client_software_version": "1"},
                              client_id="c"), 1)]
    sends += [(hb(60 + i, client="tab\there"), 1) for i in range(5)]
    results, lane_reads = [], []
    configs = [[], ["--no-heartbeat-lane"], ["--no-heartbeat-fast-path"]]
    if fastcoord.NATIVE_AVAILABLE:
        configs.append(["--impl", "pure"])
    for flag in configs:
        run = tmp_path / str(len(results))
        got, samples = serve_exchange(run, sends, flag, request_log=True)
        lane_reads.append(samples["fastcoord_lane_reads_total"])
        lines = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
        assert all(isinstance(line.pop("ts"), float) and line.pop("latency_ms") >= 0
                   for line in lines)
        results.append((got, lines))
    assert all(result == results[0] for result in results[1:])
    responses, lines = results[0]
    beats = [line for line in lines if line["api"] == "Heartbeat"]
    assert len(beats) == 20
    assert {line["client"] for line in beats} == {"c-é", None, "tab\there"}
    assert beats[10]["group"] == "é漢\"q\\" and beats[0]["member"] == "m\u2603"
    assert lane_reads[0] >= 15 and lane_reads[1:3] == [0, 0]

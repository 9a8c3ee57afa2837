"""The server's heartbeat fast path (`wire.heartbeat_run`): both twins, against kio and
the per-frame path, on random and mutated buffers, with a real coordinator, and over a
socket with the fast path on and off (same bytes, same request log)."""
from __future__ import annotations

import json
import random
import re
import socket
import struct

import pytest

pytest.importorskip("kio")

import fastcoord  # noqa: E402
from fastcoord import CoordinatorConfig, Errors, GroupCoordinator, ManualClock  # noqa: E402
from fastcoord._twins import module  # noqa: E402
from fastcoord.server.protocol import (  # noqa: E402
    SUPPORTED_VERSIONS, encode_request, encode_response,
)
from helpers.heartbeats import ERRORS, kio_decode, mutate, random_frames  # noqa: E402
from helpers.server import (  # noqa: E402
    ServerProc, metrics_url, read_responses, scrape, serve_exchange,
)

LO, HI = SUPPORTED_VERSIONS[12]
MAX_FRAME = 1 << 20


class Recorder:
    """A heartbeat callable that records its calls and answers an error derived from
    its arguments, so a wrong argument shows up in the responses too."""

    def __init__(self) -> None:
        self.calls = []

    def __call__(self, group, member, generation, instance):
        self.calls.append((group, member, generation, instance))
        return ERRORS[(len(group) * 7 + len(member) + generation) % len(ERRORS)]


def _run(impl, buf: bytes, pos: int = 0, log: bool = True):
    fast = module(impl, "server.wire").heartbeat_run
    rec, out = Recorder(), []
    entries = [] if log else None
    end = fast(bytearray(buf), pos, MAX_FRAME, LO, HI, rec, out, entries)
    return end, out, entries, rec.calls


def _framed(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def _random_buffer(rng, n: int) -> bytes:
    frames = []
    for version, frame in random_frames(rng, n):
        roll = rng.random()
        if roll < 0.08:
            frame = mutate(rng, frame)
        elif roll < 0.10:
            frame = encode_request(18, 3, rng.randrange(1000), {
                "client_software_name": "x", "client_software_version": "1"})[4:]
        frames.append(_framed(frame))
    buf = b"".join(frames)
    if rng.random() < 0.3:                      # a frame cut short by the end of a read
        buf = buf[:rng.randrange(len(buf) + 1)]
    return buf


needs_native = pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE,
                                  reason="compares the native twin, which is not built")


@needs_native
def test_twins_agree_on_random_and_mutated_buffers():
    rng = random.Random(11)
    answered = 0
    for _ in range(300):
        buf = _random_buffer(rng, rng.randint(1, 12))
        start = rng.choice([0, 0, 0, min(len(buf), rng.randrange(len(buf) + 1))])
        native = _run("native", buf, start)
        pure = _run("pure", buf, start)
        assert native == pure, buf
        answered += len(native[1])
    assert answered > 300    # runs stop at the first declined frame; still, many are answered


def test_answered_frames_are_what_kio_reads_and_encodes(impl):
    """Every answered frame: the coordinator got exactly kio's reading of it, and the
    response is exactly what the general encoder makes."""
    rng = random.Random(12)
    for version, frame in random_frames(rng, 800):
        end, out, entries, calls = _run(impl, _framed(frame))
        if not out:                              # declined: long strings etc.
            assert end == 0 and not calls
            continue
        client, group, generation, member, instance = kio_decode(frame, version)
        assert calls == [(group, member, generation, instance)]
        error = Recorder()(group, member, generation, instance)
        correlation = struct.unpack_from(">i", frame, 4)[0]
        assert out == [encode_response(12, version, correlation, {"error_code": error})]
        assert entries == [(version, client, group, member, generation, error, instance)]
        assert end == len(frame) + 4


def test_stops_at_the_first_frame_it_does_not_answer(impl):
    hb = _framed(encode_request(12, 4, 7, {"group_id": "g", "generation_id": 1,
                                           "member_id": "m", "group_instance_id": None})[4:])
    api_versions = _framed(encode_request(18, 0, 8, {})[4:])
    end, out, _, calls = _run(impl, hb + hb + api_versions + hb)
    assert (end, len(out), len(calls)) == (2 * len(hb), 2, 2)
    # Starting after the ApiVersions frame answers the last heartbeat.
    end, out, _, _ = _run(impl, hb + hb + api_versions + hb, 2 * len(hb) + len(api_versions))
    assert (end, len(out)) == (3 * len(hb) + len(api_versions), 1)
    # Incomplete, oversized, negative and too-short frames are left to the per-frame path.
    assert _run(impl, hb + hb[:-1])[0] == len(hb)
    assert _run(impl, struct.pack(">i", MAX_FRAME + 1) + b"\0" * 12)[0] == 0
    assert _run(impl, struct.pack(">i", -1) + hb)[0] == 0
    assert _run(impl, struct.pack(">i", 4) + b"\0\x0c\0\0")[0] == 0
    # A version outside what is advertised is left alone too.
    v9 = bytearray(hb)
    v9[6:8] = (9).to_bytes(2, "big")
    assert _run(impl, bytes(v9))[0] == 0
    assert _run(impl, b"")[0] == 0
    # No log list: nothing logged, same answers.
    assert _run(impl, hb, log=False)[1:3] == (_run(impl, hb)[1], None)


def test_bad_arguments(impl):
    fast = module(impl, "server.wire").heartbeat_run
    with pytest.raises(TypeError):
        fast(b"\0\0\0\0", 0, MAX_FRAME, LO, HI, Recorder(), [], None)
    with pytest.raises(ValueError, match="pos"):
        fast(bytearray(4), 5, MAX_FRAME, LO, HI, Recorder(), [], None)


def test_with_a_real_coordinator(impl):
    """The errors answered are the coordinator's: NONE for the member, ILLEGAL_GENERATION
    for a stale generation, UNKNOWN_MEMBER_ID for a stranger; the heartbeat refreshed the
    session (the member survives past its first deadline)."""
    clock = ManualClock()
    coord = GroupCoordinator(CoordinatorConfig(group_initial_rebalance_delay_ms=0),
                             clock=clock, impl=impl)
    joined = []
    coord.join_group("g", "", "consumer", [("range", b"")], session_timeout_ms=10_000,
                     rebalance_timeout_ms=10_000, callback=joined.append)
    member = joined[-1].member_id
    coord.join_group("g", member, "consumer", [("range", b"")], session_timeout_ms=10_000,
                     rebalance_timeout_ms=10_000, callback=joined.append)
    coord.advance_time(1)
    generation = joined[-1].generation_id
    synced = []
    coord.sync_group("g", generation, member, {member: b""}, callback=synced.append)
    assert synced and synced[-1].error == Errors.NONE
    frames = b"".join(_framed(encode_request(12, v, v, {
        "group_id": "g", "generation_id": gen, "member_id": mid, "group_instance_id": None})[4:])
        for v, gen, mid in [(0, generation, member), (4, generation + 1, member),
                            (2, generation, "stranger")])
    coord.advance_time(9_000)
    out = []
    end = module(impl, "server.wire").heartbeat_run(bytearray(frames), 0, MAX_FRAME, LO, HI,
                                             coord.heartbeat, out, None)
    assert end == len(frames)
    # The error is the response's last field (v4: before the trailing tagged-fields byte).
    errors = [int.from_bytes(out[0][-2:], "big"), int.from_bytes(out[1][-3:-1], "big"),
              int.from_bytes(out[2][-2:], "big")]
    assert errors == [Errors.NONE, Errors.ILLEGAL_GENERATION, Errors.UNKNOWN_MEMBER_ID]
    coord.advance_time(5_000)      # past the first deadline (10 s), within the refreshed one
    assert coord.heartbeat("g", member, generation) == Errors.NONE


def _exchange(port: int, frames: bytes, count: int) -> list:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(frames)
        return read_responses(sock, count)


def test_server_answers_and_logs_the_same_with_and_without_the_fast_path(tmp_path):
    """Over a socket: an ApiVersions, then heartbeats of every version (some with an
    instance id), a JoinGroup in the middle, more heartbeats: the same response bytes and
    the same request-log lines (but their time fields) with the fast path on and off."""
    rng = random.Random(13)
    frames = [encode_request(18, 0, 1, {})]
    for i in range(60):
        version = rng.randint(LO, HI)
        frames.append(encode_request(12, version, 100 + i, {
            "group_id": rng.choice(["g1", "g2", "é漢"]), "generation_id": rng.randint(-1, 3),
            "member_id": rng.choice(["m", ""]),
            "group_instance_id": rng.choice([None, "i-1"]) if version >= 3 else None},
            client_id="client-é"))
        if i == 30:
            # A join answered at once (session timeout out of bounds): a new member's
            # id is random, which would make the two runs differ for no reason.
            frames.append(encode_request(11, 5, 500, {
                "group_id": "g3", "session_timeout": 1, "rebalance_timeout": 6000,
                "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]}, client_id="client-é"))
    payload = b"".join(frames)
    results = []
    fast_answered = []
    for flag in ([], ["--no-heartbeat-fast-path"]):
        (tmp_path / str(len(results))).mkdir()
        server = ServerProc(tmp_path / str(len(results)) / "server.log", "--store", "memory",
                            "--metrics-port", "0", *flag)
        try:
            responses = _exchange(server.port, payload, len(frames))
            samples = scrape(metrics_url(server))
            fast_answered.append(samples["fastcoord_heartbeats_fast_path_total"])
            assert samples["fastcoord_heartbeats_total"] == 60
        finally:
            assert server.stop() == 0, server.log()
        lines = [json.loads(line) for line in server.request_log_path.read_text().splitlines()]
        for line in lines:
            del line["ts"], line["latency_ms"]
        results.append((responses, lines))
    assert results[0] == results[1]
    # The comparison means something only if the first server really took the fast path
    # (all but the heartbeats read together with the ApiVersions/JoinGroup before them).
    assert fast_answered[0] > 0 and fast_answered[1] == 0
    responses, lines = results[0]
    assert [int.from_bytes(r[:4], "big", signed=True) for r in responses] == \
        [1] + [100 + i for i in range(31)] + [500] + [100 + i for i in range(31, 60)]
    assert sum(1 for line in lines if line["api"] == "Heartbeat") == 60


# -- the per-read fast path (wire.HeartbeatReader) -------------------------------------------

class Writes(list):
    """A transport.write stand-in that keeps every call's bytes."""

    def __call__(self, data: bytes) -> None:
        assert type(data) is bytes
        self.append(data)


def _read(impl, data: bytes, heartbeat=None, latencies=None):
    import collections
    latencies = collections.deque() if latencies is None else latencies
    reader = module(impl, "server.wire").HeartbeatReader(heartbeat or Recorder(), MAX_FRAME, LO, HI,
                                                  latencies)
    writes = Writes()
    used = reader(data, writes)
    return used, writes, reader.answered, len(latencies)


def test_reader_answers_what_heartbeat_run_answers_in_one_write(impl):
    """On random and mutated reads: the bytes consumed, the calls made and the responses
    are heartbeat_run's from position 0, all in one write (none when nothing was
    answered); the counter and the latency samples count the answers."""
    rng = random.Random(14)
    answered = 0
    for _ in range(300):
        data = _random_buffer(rng, rng.randint(1, 12))
        end, out, _, calls = _run(impl, data, 0, log=False)
        rec = Recorder()
        used, writes, count, samples = _read(impl, data, rec)
        assert used == end
        assert rec.calls == calls
        assert writes == ([b"".join(out)] if out else [])
        assert count == samples == len(out)
        answered += len(out)
    assert answered > 300


@needs_native
def test_reader_twins_agree():
    """The same reads: the same bytes used, answers and counts; with a request log, the
    same lines too (but their time fields)."""
    rng = random.Random(15)
    for _ in range(200):
        data = _random_buffer(rng, rng.randint(1, 12))
        assert _read("native", data)[:3] == _read("pure", data)[:3]
        assert _log_read("native", data) == _log_read("pure", data)


def test_reader_writes_what_it_answered_before_a_heartbeat_raised(impl):
    hb = [_framed(encode_request(12, 4, c, {"group_id": g, "generation_id": 1,
                                            "member_id": "m", "group_instance_id": None})[4:])
          for c, g in ((1, "g"), (2, "boom"), (3, "g"))]

    def heartbeat(group, member, generation, instance):
        if group == "boom":
            raise RuntimeError("coordinator failure")
        return 0

    reader = module(impl, "server.wire").HeartbeatReader(heartbeat, MAX_FRAME, LO, HI)
    writes = Writes()
    with pytest.raises(RuntimeError, match="coordinator failure"):
        reader(b"".join(hb), writes)
    assert writes == [encode_response(12, 4, 1, {"error_code": 0})]
    assert reader.answered == 1


_HOST = b'"127.0.0.1"'


def _log_read(impl, data: bytes):
    """The reader with a request log: (bytes used, responses, its log lines parsed, with
    ts and latency_ms checked as numbers and removed)."""
    chunks = []
    reader = module(impl, "server.wire").HeartbeatReader(Recorder(), MAX_FRAME, LO, HI, None,
                                                  chunks.append)
    writes = Writes()
    used = reader(data, writes, _HOST)
    assert all(type(chunk) is bytes for chunk in chunks) and len(chunks) <= 1
    lines = []
    for text in b"".join(chunks).decode("ascii").splitlines():
        line = json.loads(text)
        assert isinstance(line.pop("ts"), float) and line.pop("latency_ms") >= 0
        lines.append(line)
    return used, writes, lines


def test_reader_log_lines_are_the_request_logs(impl):
    """On random and mutated reads: one request-log line per answer, in order, with the
    fields RequestLog writes for a heartbeat (JSON escaping included: json.dumps'
    ensure_ascii text of random non-ASCII ids)."""
    from fastcoord.server.requestlog import heartbeat_line
    rng = random.Random(16)
    logged = 0
    for _ in range(300):
        data = _random_buffer(rng, rng.randint(1, 12))
        end, out, entries, _ = _run(impl, data, 0, log=True)
        used, writes, lines = _log_read(impl, data)
        assert used == end and writes == ([b"".join(out)] if out else [])
        expected = []
        for version, client, group, member, generation, error, instance in entries:
            line = json.loads(heartbeat_line(0.5, version, client, _HOST.decode(), group,
                                             member, generation, error, 0.001,
                                             instance_id=instance))
            del line["ts"], line["latency_ms"]
            expected.append(line)
        assert lines == expected
        logged += len(lines)
    assert logged > 300


_EDGE_IDS = ["", "consumer-1-0f3a", 'quo"te', "back\\slash", "tab\tnl\ncr\r", "\x00\x1f",
             "del\x7f", "tilde~ space", "\u00e9", "\u6f22", "\U0001f600", 'mix \u00e9"\\\x7f']
_TS = re.compile(rb'^\{"ts":[0-9]+\.[0-9]{6},')
_LATENCY = re.compile(rb',"latency_ms":[0-9]+\.[0-9]{3}(?=,"instance":|\}$)')


def test_reader_log_line_text_is_the_request_logs(impl):
    """Byte for byte the text RequestLog writes (heartbeat_line), but for the values of
    ts and latency_ms (checked for their form: %.6f and %.3f digits): ids that need
    JSON escapes (quotes, backslashes, control characters, DEL, non-ASCII, beyond the
    BMP), a null client id, the extreme generations and negative error codes; a static
    member's group instance id (v3+) after them, a dynamic member's line without it."""
    from fastcoord.server.requestlog import heartbeat_line
    errors = iter([-1, 0, 25, 27, 22, 16, 15] * 100)
    cases = []
    for i, text in enumerate(_EDGE_IDS):
        client = [None, "", text, "consumer-7"][i % 4]
        generation = [-2**31, -1, 0, 2**31 - 1][i % 4]
        version = [0, 1, 2, 3, 4][i % 5]
        instance = text if version >= 3 and i % 2 else None
        cases.append((version, client, text, _EDGE_IDS[-1 - i], generation, instance))
        cases.append((4, text, "g", text, -1, None))
        cases.append((3, "c", "g", "m", 1, text))
    data = b""
    answers = []

    def heartbeat(group, member, generation, instance):
        answers.append(next(errors))
        return answers[-1]

    for c, (version, client, group, member, generation, instance) in enumerate(cases):
        body = {"group_id": group, "generation_id": generation, "member_id": member}
        if version >= 3:
            body["group_instance_id"] = instance
        data += _framed(encode_request(12, version, c, body, client_id=client)[4:])
    chunks = []
    reader = module(impl, "server.wire").HeartbeatReader(heartbeat, MAX_FRAME, LO, HI, None,
                                                  chunks.append)
    assert reader(data, Writes(), _HOST) == len(data)
    lines = b"".join(chunks).splitlines(keepends=False)
    assert len(lines) == len(cases) == len(answers)
    for line, (version, client, group, member, generation, instance), error in zip(
            lines, cases, answers):
        assert _TS.search(line) and _LATENCY.search(line), line
        assert (b',"instance":' in line) == (instance is not None), line
        want = heartbeat_line(0.5, version, client, _HOST.decode(), group, member,
                              generation, error, 0.001,
                              instance_id=instance).rstrip("\n").encode("ascii")
        assert _LATENCY.sub(b"", _TS.sub(b"", line)) == \
            _LATENCY.sub(b"", _TS.sub(b"", want)), (line, want)


def test_reader_declines_a_client_id_that_is_not_utf8(impl):
    """The Python decoder declines it (kio then answers), so the reader must too, log
    or no log, before calling the coordinator."""
    frame = bytearray(_framed(encode_request(12, 2, 5, {
        "group_id": "g", "generation_id": 1, "member_id": "m"}, client_id="ab")[4:]))
    at = frame.index(b"ab")
    frame[at:at + 2] = b"\xff\xfe"
    rec = Recorder()
    reader = module(impl, "server.wire").HeartbeatReader(rec, MAX_FRAME, LO, HI)
    assert reader(bytes(frame), Writes()) == 0 and rec.calls == []
    assert _run(impl, bytes(frame), 0, log=False)[0] == 0


def test_reader_bad_arguments(impl):
    reader_type = module(impl, "server.wire").HeartbeatReader
    with pytest.raises(TypeError, match="heartbeat"):
        reader_type(None, MAX_FRAME, LO, HI)
    with pytest.raises(ValueError, match="max_frame"):
        reader_type(Recorder(), 4, LO, HI)
    with pytest.raises(TypeError, match="log"):
        reader_type(Recorder(), MAX_FRAME, LO, HI, None, "not callable")
    reader = reader_type(Recorder(), MAX_FRAME, LO, HI)
    with pytest.raises(TypeError):
        reader(bytearray(8), Writes())
    with pytest.raises(TypeError, match="host"):
        reader(b"", Writes(), "127.0.0.1")
    assert reader.answered == 0


def test_server_per_read_fast_path_answers_as_the_general_path(tmp_path):
    """No request log (where the per-read path applies): heartbeats sent one per read
    and in pipelined bursts, a JoinGroup among them, a frame split across two sends:
    the same response bytes with the fast path on and off, and with it on, the
    per-read path answered heartbeats (the metric counts them)."""
    def hb(corr, version=4, group="g1"):
        return encode_request(12, version, corr, {
            "group_id": group, "generation_id": 1, "member_id": "m",
            "group_instance_id": None}, client_id="c")

    join = encode_request(11, 5, 900, {
        "group_id": "g3", "session_timeout": 1, "rebalance_timeout": 6000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}]}, client_id="c")
    # (bytes of one send, responses it completes)
    sends = [(encode_request(18, 0, 1, {}, client_id="c"), 1)]
    sends += [(hb(10 + i, version=i % 5), 1) for i in range(20)]             # one per read
    sends += [(b"".join(hb(40 + i) for i in range(8)), 8)]                  # a burst
    sends += [(hb(60) + join + hb(61), 3)]
    sends += [(hb(70 + i, group="é漢"), 1) for i in range(5)]
    split = hb(80)
    sends += [(split[:9], 0), (split[9:] + hb(81), 2)]                      # split mid-frame
    results, fast, read_path = [], [], []
    for flag in ([], ["--no-heartbeat-fast-path"]):
        got, samples = serve_exchange(tmp_path / str(len(results)), sends, flag)
        fast.append(samples["fastcoord_heartbeats_fast_path_total"])
        read_path.append(samples["fastcoord_heartbeats_read_path_total"])
        assert samples["fastcoord_heartbeats_total"] == 37
        results.append(got)
    assert results[0] == results[1]
    assert [int.from_bytes(r[:4], "big") for r in results[0]] == (
        [1] + list(range(10, 30)) + list(range(40, 48)) + [60, 900, 61]
        + list(range(70, 75)) + [80, 81])
    assert fast[0] >= 30 and fast[1] == 0
    # ... and the per-read path itself (not the per-frame run, which the counter above
    # also counts) answered the heartbeats that came one per read: 20 + 5 at least
    assert read_path[0] >= 25 and read_path[1] == 0


def test_unknown_server_error_is_answered_not_declined(impl):
    """A heartbeat answering UNKNOWN_SERVER_ERROR (-1) gets that response from both
    paths, and the coordinator is called once (the fast path's own "not answered" is
    not an error code)."""
    frame = _framed(encode_request(12, 4, 9, {"group_id": "g", "generation_id": 1,
                                              "member_id": "m", "group_instance_id": None})[4:])
    calls = []

    def heartbeat(group, member, generation, instance):
        calls.append(group)
        return -1

    wire = module(impl, "server.wire")
    out = []
    assert wire.heartbeat_run(bytearray(frame), 0, MAX_FRAME, LO, HI, heartbeat, out) == len(frame)
    expected = encode_response(12, 4, 9, {"error_code": -1})
    assert out == [expected] and calls == ["g"]
    writes = Writes()
    assert wire.HeartbeatReader(heartbeat, MAX_FRAME, LO, HI)(frame, writes) == len(frame)
    assert writes == [expected] and calls == ["g", "g"]

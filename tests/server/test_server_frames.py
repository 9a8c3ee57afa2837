"""No frame crashes the server: every length prefix of every advertised (api, version)
is checked against the bytes left before kio decodes (fastcoord/server/framecheck.py),
a null where the schema has a non-nullable array is a malformed request, and a refused
frame is one rate-limited log line. The decoder runs under an address-space limit in a
subprocess, so a count that makes it allocate shows as a dead subprocess; then the same
frames over real sockets beside a healthy consumer group that must not rebalance."""
from __future__ import annotations

import logging
import re
import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fastcoord import CoordinatorConfig, GroupCoordinator
from fastcoord.server.apis import KafkaApis, Session
from fastcoord.server.framecheck import FrameError, check_request
from fastcoord.server.protocol import (
    MalformedRequest, decode_request, encode_request, request_class,
)

from helpers import frames as fs
from helpers.server import RawConn, ServerProc

# The frame of the issue: Metadata v9 whose topics count (a compact varint) says 2**32-2.
METADATA_V9_HUGE = (struct.pack(">hhih", 3, 9, 1, -1) + b"\x00" + b"\xff\xff\xff\xff\x0f"
                    + b"\x00" * 4)


def _with_count_at(api_key: int, version: int, field_offset: int, count: bytes) -> bytes:
    """A valid frame of (api, version) with `count` written over the bytes that start
    `field_offset` bytes before its end."""
    frame = fs.valid_frame(api_key, version)
    pos = len(frame) - field_offset
    return frame[:pos] + count + frame[pos + len(count):]


# ---- in process --------------------------------------------------------------------------

@pytest.mark.parametrize("api_key,version", fs.ADVERTISED,
                         ids=[f"{k}v{v}" for k, v in fs.ADVERTISED])
def test_a_valid_frame_walks_to_its_end_and_decodes(api_key, version):
    """The checker accepts every well-formed request, to its last byte (every array
    holding elements, every nullable value set, tagged fields present)."""
    cls = request_class(api_key, version)
    frame = fs.valid_frame(api_key, version)
    assert check_request(cls, frame) == len(frame)
    for cut in range(8, len(frame)):    # and any frame cut short is refused by it
        with pytest.raises(FrameError):
            if check_request(cls, frame[:cut]) != cut:
                raise FrameError("stopped short")
    request = decode_request(frame, fs.ALL_VERSIONS)
    if api_key != 12:                   # the Heartbeat hot path has its own body type
        assert request.body == fs.sample(cls)


def test_null_non_nullable_arrays_are_malformed_and_nullable_ones_are_answered():
    """Kafka refuses a request whose non-nullable array is null when it parses it (the
    connection is closed); here too, for every array of every advertised (api,
    version), nested ones included. The nullable ones (Metadata v1+ and OffsetFetch
    v2+ topics: all of them) decode, and their handler answers once."""
    coordinator = GroupCoordinator(CoordinatorConfig(), impl="pure")
    apis = KafkaApis(coordinator, {"ab": 2}, host="127.0.0.1", port=9092)
    refused = answered = 0
    frames = fs.null_array_frames()
    for api_key, version, path, nullable, frame in frames:
        if not nullable:
            with pytest.raises(MalformedRequest, match=f"{path.split('.')[-1]}: null array"):
                decode_request(frame, fs.ALL_VERSIONS)
            refused += 1
            continue
        request = decode_request(frame, fs.ALL_VERSIONS)
        replies = []
        apis.handle(Session("127.0.0.1"), request, replies.append)
        assert len(replies) == 1, (api_key, version, path)
        answered += 1
    assert answered == sum(1 for f in frames if f[3]) > 0
    assert refused == len(frames) - answered > 0


_CRASH_FRAMES = [
    ("Metadata v9 compact count 2**32-2", METADATA_V9_HUGE),
    ("DescribeGroups v5 compact count 2**32-2",
     struct.pack(">hhih", 15, 5, 1, -1) + b"\x00" + b"\xff\xff\xff\xff\x0f" + b"\x00\x00"),
    ("JoinGroup v5 protocols int32 count 2**31-1", _with_count_at(11, 5, 2 * 10 + 4,
                                                                   b"\x7f\xff\xff\xff")),
    ("OffsetCommit v2 partitions int32 count 2**31-1", _with_count_at(8, 2, 2 * 16 + 4,
                                                                       b"\x7f\xff\xff\xff")),
]


@pytest.mark.parametrize("name,frame", _CRASH_FRAMES, ids=[n for n, _ in _CRASH_FRAMES])
def test_a_count_the_frame_cannot_hold_is_malformed_and_nothing_allocates(name, frame):
    """Under an address-space limit of 1 GiB more than it started with, the decoder
    refuses the frame; before the check kio asked for up to 32 GiB and the process
    aborted (SIGABRT, status -6)."""
    status, result, err = fs.run_limited("decode_all", [frame.hex()])
    assert status == 0, f"{name}: decoder process died with status {status}: {err}"
    assert len(result) == 1 and "array count" in result[0] and "bytes left" in result[0], result


def test_every_boundary_count_at_every_position_of_every_advertised_request():
    """Each position of each advertised (api, version)'s full frame gets, overwritten
    and inserted, the counts on an edge (0, 1, bytes left, one more, 2**31-1, 2**32-2,
    as int16, int32 and varint; -1; -2): the decoder answers or refuses every one, in
    a process that dies if anything allocates a gigabyte."""
    status, seen, err = fs.run_limited("sweep", 1)
    assert status == 0, f"decoder process died with status {status}: {err}"
    assert seen["pairs"] == len(fs.ADVERTISED)
    assert seen["malformed"] > 100_000 and seen["decoded"] > 10_000


def test_random_mutations_of_every_advertised_request():
    status, seen, err = fs.run_limited("fuzz", 1500)
    assert status == 0, f"decoder process died with status {status}: {err}"
    assert seen["malformed"] + seen["decoded"] == 1500
    assert seen["malformed"] > 500 and seen["decoded"] > 10


def test_a_long_varint_and_negative_lengths_are_malformed():
    cls = request_class(3, 9)
    head = struct.pack(">hhih", 3, 9, 1, -1) + b"\x00"
    for body, message in [(b"\x80\x80\x80\x80\x80\x01", "longer than 5 bytes"),
                          (b"\x02\x85\x80\x80\x80\x10", "length"),      # a huge topic name
                          (b"\x02\x80\x80", "cut short")]:
        with pytest.raises(FrameError, match=message):
            check_request(cls, head + body)
    join = request_class(11, 5)
    frame = fs.valid_frame(11, 5)
    bad = frame[:14] + struct.pack(">h", -2) + frame[16:]      # group id length -2
    with pytest.raises(FrameError, match="negative length -2"):
        check_request(join, bad)


def test_unknown_tagged_fields_are_skipped_as_kafka_skips_them():
    """A flexible version's tagged fields are extensible: Kafka keeps a tag its schema
    does not know aside and reads on, in the header, the body and a nested struct alike.
    So must the server (kio alone refuses one)."""
    body = {"group_id": "g", "member_id": "m", "member_epoch": 3, "instance_id": None,
            "rack_id": None, "rebalance_timeout": -1, "subscribed_topic_names": None,
            "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": [{"topic_id": fs.sample(request_class(68, 1)).topic_partitions[0]
                                  .topic_id, "partitions": [0, 1]}]}
    plain = encode_request(68, 1, 7, body, client_id="t")[4:]
    header_tags = 8 + 2 + 1
    assert plain[header_tags] == 0 and plain[-2:] == b"\x00\x00"
    tagged = (plain[:header_tags] + b"\x01" + b"\x05\x02ab"      # the header's
              + plain[header_tags + 1:-2]
              + b"\x01" + b"\x0a\x01z"                           # the owned topic's
              + b"\x02" + b"\x07\x03abc" + b"\x09\x00")           # the body's, two
    expected = decode_request(plain)
    got = decode_request(tagged)
    assert (got.api_key, got.correlation_id, got.client_id, got.body) == \
        (expected.api_key, expected.correlation_id, expected.client_id, expected.body)
    assert got.size == len(tagged)
    # and in ConsumerGroupDescribe, whose answer carries no topic of the request
    plain = encode_request(69, 1, 8, {"group_ids": ["g"], "include_authorized_operations": True},
                           client_id="t")[4:]
    assert decode_request(plain[:-1] + b"\x01\x07\x03abc").body == decode_request(plain).body
    # a tagged field still has to fit in the frame
    with pytest.raises(MalformedRequest):
        decode_request(plain[:-1] + b"\x01\x07\x05abc")


def test_skipping_unknown_tagged_fields_is_bounded(monkeypatch):
    """The skip is a Python walk that records each field it drops: a frame of millions
    of empty unknown tags (two bytes each) must be refused at the bound, not walked and
    copied whole (seconds and gigabytes for one 16 MB frame). A few hundred are still
    skipped. (The bound is checked by its count, not by a time: the pure twin's walk
    of the bomb's first check takes a second here and more on a slower machine.)"""
    plain = encode_request(69, 1, 8, {"group_ids": ["g"], "include_authorized_operations": True},
                           client_id="t")[4:]
    few = plain[:-1] + fs.varint(300) + b"\x07\x00" * 300
    assert decode_request(few).body == decode_request(plain).body
    many = 4_000_000
    bomb = plain[:-1] + fs.varint(many) + b"\x07\x00" * many
    with pytest.raises(MalformedRequest, match="tagged fields"):
        decode_request(bomb)
    from fastcoord.server import framecheck
    monkeypatch.setattr(framecheck, "MAX_TAG_EDITS", 8)
    at_bound = plain[:-1] + fs.varint(8) + b"\x07\x00" * 8
    assert decode_request(at_bound).body == decode_request(plain).body
    with pytest.raises(MalformedRequest, match="tagged fields"):
        decode_request(plain[:-1] + fs.varint(9) + b"\x07\x00" * 9)


def test_skipping_unknown_tagged_fields_on_two_threads_at_once(monkeypatch):
    """The server may check frames on several threads: a walk that drops unknown tags
    must collect its own edits, whatever another thread walks meanwhile. One thread is
    held inside its walk (before it reaches a tagged-field section) while the main
    thread skips the tags of another frame and checks a third; the held walk must then
    drop exactly its own frame's unknown tags."""
    import threading
    from fastcoord.server import framecheck
    cls = request_class(69, 1)

    def frame(group: str) -> bytes:
        return encode_request(69, 1, 8, {"group_ids": [group],
                                         "include_authorized_operations": True},
                              client_id="t")[4:]
    held_plain, other_plain = frame("held"), frame("other")
    held = held_plain[:-1] + b"\x01\x07\x03abc"
    other = other_plain[:-1] + b"\x02\x07\x01x\x09\x00"
    inside, resume = threading.Event(), threading.Event()
    uvarint = framecheck._uvarint
    holder = []

    def pausing_uvarint(data, pos, end):
        if threading.current_thread() is holder[0] and not inside.is_set():
            inside.set()
            assert resume.wait(10)
        return uvarint(data, pos, end)
    monkeypatch.setattr(framecheck, "_uvarint", pausing_uvarint)
    results = {}
    thread = threading.Thread(target=lambda: results.update(
        held=framecheck.without_unknown_tags(cls, held)))
    holder.append(thread)
    thread.start()
    try:
        assert inside.wait(10)
        assert framecheck.without_unknown_tags(cls, other) == other_plain
        assert check_request(cls, other) == len(other)
    finally:
        resume.set()
        thread.join(10)
    assert results["held"] == held_plain


# ---- over the socket, beside a healthy group --------------------------------------------

GROUP = "healthy-group"


class HealthyMember:
    """One member of a group formed over RawConn: JoinGroup v5 (with the member-id
    round trip), SyncGroup v3 as leader, then Heartbeat v3."""

    def __init__(self, port: int) -> None:
        self.conn = RawConn(port)
        join = {"group_id": GROUP, "session_timeout": 10_000, "rebalance_timeout": 10_000,
                "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b"m"}]}
        first = self.conn.call(11, 5, join)
        assert first.error_code == 79
        joined = self.conn.call(11, 5, join | {"member_id": first.member_id})
        assert joined.error_code == 0 and joined.leader == joined.member_id
        self.member_id, self.generation = joined.member_id, joined.generation_id
        synced = self.conn.call(14, 3, {
            "group_id": GROUP, "generation_id": self.generation, "member_id": self.member_id,
            "group_instance_id": None,
            "assignments": [{"member_id": self.member_id, "assignment": b"a"}]})
        assert synced.error_code == 0 and synced.assignment == b"a"

    def heartbeat(self) -> int:
        return self.conn.call(12, 3, {"group_id": GROUP, "generation_id": self.generation,
                                      "member_id": self.member_id,
                                      "group_instance_id": None}).error_code

    def described(self):
        return self.conn.call(15, 5, {"groups": [GROUP],
                                      "include_authorized_operations": False}).groups[0]


def _attack(port: int, frame: bytes) -> None:
    """One frame on its own connection, then end of input; wait for the server's close
    (it answers what it can first)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = ServerProc(tmp_path_factory.mktemp("frames") / "server.log", topics=["ab:2"])
    yield proc
    assert proc.stop() == 0
    assert "Traceback" not in proc.log(), proc.log()[-3000:]


def test_hostile_frames_over_the_socket_leave_the_server_and_a_group_alone(server):
    """The crash frames, a stride of the boundary sweep and random mutations of every
    advertised (api, version), each on its own connection, between heartbeats of a
    stable group's member: every heartbeat answers 0, the group keeps its generation
    and the server lives; each kind of refusal is logged at most once per interval."""
    member = HealthyMember(server.port)
    started = time.monotonic()
    frames = {pair: fs.valid_frame(*pair, elements=1) for pair in fs.ADVERTISED}
    attacks = [METADATA_V9_HUGE]
    for pair in fs.ADVERTISED:
        attacks.extend(list(fs.boundary_mutations(frames[pair]))[::97])
    heartbeats = []
    for i, frame in enumerate(attacks):
        _attack(server.port, frame)
        if i % 4 == 0:
            heartbeats.append(member.heartbeat())
    sent = len(attacks)

    @settings(max_examples=300, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def mutate(data):
        nonlocal sent
        _attack(server.port, fs.mutated(data.draw, frames))
        sent += 1
        heartbeats.append(member.heartbeat())

    mutate()
    assert server.alive()
    assert set(heartbeats) == {0} and len(heartbeats) > 300
    group = member.described()
    assert (group.group_state, len(group.members)) == ("Stable", 1)
    assert member.heartbeat() == 0 and member.described().members[0].member_id == member.member_id
    # rate-limited: each kind of refusal at most once per 10 s interval
    elapsed = time.monotonic() - started
    kinds: dict = {}
    for line in server.log().splitlines():
        m = re.search(r"malformed request: (\w+ v\d+)", line)
        if m:
            kinds[m.group(1)] = kinds.get(m.group(1), 0) + 1
    assert kinds and max(kinds.values()) <= elapsed // 10 + 1, kinds
    assert sum(kinds.values()) < sent // 4


def test_the_same_refusal_is_logged_once_per_interval(server):
    """Fifty truncated JoinGroup frames on fifty connections: one log line."""
    def lines():
        return [line for line in server.log().splitlines()
                if "malformed request: JoinGroup v7" in line]

    before = len(lines())
    whole = fs.valid_frame(11, 7)
    started = time.monotonic()
    for _ in range(50):
        _attack(server.port, whole[:-3])
    assert time.monotonic() - started < 10
    assert len(lines()) - before <= 1 and lines(), lines()


class _RaisingApis(KafkaApis):
    def handle(self, session, request, reply):
        raise RuntimeError("handler bug")


class _Transport:
    closed = 0

    def close(self):
        self.closed += 1

    def write(self, data):
        pass


def test_a_handler_exception_is_one_traceback_per_kind_per_interval(caplog):
    """Every request that meets the same handler failure closes its connection; the
    log has one line with its traceback, not one per request."""
    from types import SimpleNamespace

    from fastcoord.server import server as server_module

    apis = _RaisingApis(GroupCoordinator(CoordinatorConfig(), impl="pure"), {},
                        host="127.0.0.1", port=9092)
    stub = SimpleNamespace(apis=apis, request_log=None, release=lambda conn: None)
    server_module.rate_log._seen.clear()
    frame = fs.valid_frame(16, 4)
    with caplog.at_level(logging.ERROR, logger="fastcoord.server"):
        for _ in range(20):
            conn = server_module.Connection(stub)
            conn.session, conn.transport, conn.peer = Session("h"), _Transport(), "h:1"
            conn._on_frame(frame)
            assert conn.closing and conn.transport.closed == 1
    failed = [r for r in caplog.records if "ListGroups v4" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert "RuntimeError: handler bug" in failed[0].getMessage()

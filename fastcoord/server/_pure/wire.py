"""The server's hot path, pure twin: a run of plain Heartbeat frames answered in order.

Walk the receive buffer from `pos`; for each whole frame that is a Heartbeat request in
the plain form (`decode_heartbeat_request` accepts it), call the coordinator and append
the encoded response to `out`. Stop at the first frame that is anything else and return
its position: the server's per-frame path handles it, so which path answered never
changes what a client sees. fastcoord/server/_native/wire.pyx does the same in one C loop.
"""
from __future__ import annotations

import itertools
import struct
import time
from typing import Callable, Deque, List, Optional, Tuple

from ..protocol import (HEARTBEAT_KEY, decode_heartbeat_request,
                               encode_heartbeat_response)
from ..requestlog import heartbeat_line

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hhi")

# (version, client id, group id, member id, generation, error, instance id)
LogEntry = Tuple[int, Optional[str], str, str, int, int, Optional[str]]


def heartbeat_run(buf: bytearray, pos: int, max_frame: int, min_version: int,
                  max_version: int, heartbeat: Callable[[str, str, int, Optional[str]], int],
                  out: List[bytes], log: Optional[List[LogEntry]] = None) -> int:
    if not isinstance(buf, bytearray):
        raise TypeError(f"buf must be a bytearray, got {type(buf).__name__}")
    if not 0 <= pos <= len(buf):
        raise ValueError(f"pos must be within the buffer, got {pos}")
    end = len(buf)
    while end - pos >= 4:
        (size,) = _SIZE.unpack_from(buf, pos)
        if size < 8 or size > max_frame or end - pos - 4 < size:
            break                                   # not whole, or not ours to judge
        api_key, version, correlation = _KEY_VERSION.unpack_from(buf, pos + 4)
        if api_key != HEARTBEAT_KEY or not min_version <= version <= min(max_version, 4):
            break
        request = decode_heartbeat_request(buf[pos + 4:pos + 4 + size], version, correlation)
        if request is None:                         # an unusual form: the full decoder's
            break
        body = request.body
        error = int(heartbeat(body.group_id, body.member_id, body.generation_id,
                              body.group_instance_id))
        out.append(encode_heartbeat_response(version, correlation, error))
        if log is not None:
            log.append((version, request.client_id, body.group_id, body.member_id,
                        body.generation_id, error, body.group_instance_id))
        pos += 4 + size
    return pos


class HeartbeatReader:
    """The whole per-read fast path of a connection whose reads hold plain heartbeats.

    `reader(data, write)` answers the Heartbeat frames at the start of `data` (one
    read, with nothing buffered before it), hands all their responses to `write` in one
    call, and returns how many bytes it consumed; the caller's general path handles
    the rest. It counts what it answered (`answered`) and records each answer's latency
    (the time spent in the call) in `latencies` when given.

    With `log` (the request log's write_lines) and a connection's `host` (its address as
    JSON text, bytes), each answer also gets its request-log line (requestlog's
    heartbeat_line); the lines go to `log` in one call per read."""

    def __init__(self, heartbeat: Callable[[str, str, int, Optional[str]], int],
                 max_frame: int, min_version: int, max_version: int,
                 latencies: Optional[Deque[float]] = None,
                 log: Optional[Callable[[bytes], object]] = None, steady=None,
                 consumer_min: int = 0, consumer_max: int = -1) -> None:
        if not callable(heartbeat):
            raise TypeError(f"heartbeat must be callable, got {type(heartbeat).__name__}")
        if max_frame < 8:
            raise ValueError(f"max_frame must be at least 8, got {max_frame}")
        if log is not None and not callable(log):
            raise TypeError(f"log must be callable or None, got {type(log).__name__}")
        if steady is not None and not callable(steady):
            raise TypeError(f"steady must be callable or None, got {type(steady).__name__}")
        self.steady = steady                # the member table's consumer_steady
        self.consumer_min = consumer_min
        self.consumer_max = consumer_max
        self.consumer_answered = 0
        self.log = log
        self.heartbeat = heartbeat
        self.max_frame = max_frame
        self.min_version = min_version
        self.max_version = max_version
        self.latencies = latencies
        self.answered = 0

    def __call__(self, data: bytes, write: Callable[[bytes], object],
                 host: Optional[bytes] = None, ident=None) -> int:
        """With `ident` (the connection's (client id, client host)) and `steady`, a
        settled member's steady ConsumerGroupHeartbeat is answered too
        (consumer_heartbeat_frame's)."""
        if not isinstance(data, bytes):
            raise TypeError(f"data must be bytes, got {type(data).__name__}")
        if host is not None and type(host) is not bytes:
            raise TypeError(f"host must be bytes (JSON text) or None, got {type(host).__name__}")
        check_ident(ident)
        logging = self.log is not None and host is not None
        started = time.perf_counter()
        ts = time.time()
        out: List[bytes] = []
        entries: Optional[List[LogEntry]] = [] if logging else None
        apis: List[str] = []            # each log entry's API
        consumers = 0
        try:
            buf = bytearray(data)
            pos = 0
            while True:
                logged = len(entries) if entries is not None else 0
                pos = heartbeat_run(buf, pos, self.max_frame, self.min_version,
                                    self.max_version, self.heartbeat, out, entries)
                apis.extend(itertools.repeat("Heartbeat",
                                             (len(entries) if entries is not None else 0) - logged))
                answered = self._answer_steady(buf, pos, ident) if ident is not None else None
                if answered is None:
                    return pos
                data_out, version, client_id, group, member, epoch = answered
                out.append(data_out)
                consumers += 1
                if entries is not None:
                    entries.append((version, client_id, group, member, epoch, 0, None))
                    apis.append("ConsumerGroupHeartbeat")
                pos += 4 + _SIZE.unpack_from(buf, pos)[0]
        finally:
            # What was answered goes out even when a later heartbeat call raised.
            if out:
                self.answered += len(out) - consumers
                self.consumer_answered += consumers
                write(b"".join(out))
                seconds = time.perf_counter() - started
                if self.latencies is not None:
                    self.latencies.extend(itertools.repeat(seconds, len(out)))
                if entries:
                    host_text = host.decode("ascii")
                    self.log("".join(
                        heartbeat_line(ts, version, client_id, host_text, group, member,
                                       generation, error, seconds, api, instance)
                        for (version, client_id, group, member, generation, error,
                             instance), api in zip(entries, apis)
                    ).encode("ascii"))

    def _answer_steady(self, buf: bytearray, pos: int, ident):
        """consumer_heartbeat_frame of the whole frame at buf[pos], or None."""
        if self.steady is None or len(buf) - pos < 4:
            return None
        (size,) = _SIZE.unpack_from(buf, pos)
        if size < 8 or size > self.max_frame or len(buf) - pos - 4 < size:
            return None
        return consumer_heartbeat_frame(bytes(buf[pos + 4:pos + 4 + size]), self.consumer_min,
                                        self.consumer_max, self.steady, ident[0], ident[1])

    def flush_log(self) -> None:
        """Nothing to do: each call hands its lines to `log` itself (the native twin
        buffers across the calls of its C-level `answer`)."""


# -- ConsumerGroupHeartbeat (KIP-848): a settled member's steady heartbeat -------------------
CONSUMER_HEARTBEAT_KEY = 68
_STEADY_HEAD = struct.Struct(">hhih")           # api key, version, correlation, client length
_I32 = struct.Struct(">i")


def consumer_heartbeat_frame(frame: bytes, min_version: int, max_version: int, steady,
                             client_id: str, client_host: str):
    """A ConsumerGroupHeartbeat frame (without its length prefix) in the steady form
    (every optional field null, rebalance_timeout_ms -1, one-byte compact lengths, no
    tagged fields), answered by `steady(group_id, member_id, member_epoch, client_id,
    client_host)` (the member table's consumer_steady): (response frame, version,
    header client id, group id, member id, member epoch). None when the frame is not in
    that form, an id is not valid UTF-8, or `steady` declines, having changed nothing:
    the general path (kio, apis.py) answers it. wire.pyx does the same in C."""
    if not isinstance(frame, bytes):
        raise TypeError(f"frame must be bytes, got {type(frame).__name__}")
    parsed = _parse_steady(frame, min_version, max_version)
    if parsed is None:
        return None
    version, correlation, header_client, group_id, member_id, member_raw, epoch = parsed
    result = steady(group_id, member_id, epoch, client_id, client_host)
    if result is None:
        return None
    body = b"".join([
        _I32.pack(correlation), b"\x00",                     # header: no tagged fields
        _I32.pack(0), b"\x00\x00", b"\x00",                  # throttle, error, null message
        bytes([len(member_raw) + 1]), member_raw,            # member id
        _I32.pack(result.member_epoch), _I32.pack(result.heartbeat_interval_ms),
        b"\xff", b"\x00"])                                   # null assignment, no tags
    return _I32.pack(len(body)) + body, version, header_client, group_id, member_id, epoch


def _parse_steady(frame: bytes, min_version: int, max_version: int):
    """(version, correlation, client id, group id, member id, member id bytes, epoch) of
    a steady-form ConsumerGroupHeartbeat, or None."""
    try:
        api_key, version, correlation, n = _STEADY_HEAD.unpack_from(frame, 0)
        if api_key != CONSUMER_HEARTBEAT_KEY or not min_version <= version <= min(max_version, 1):
            return None
        pos = 10
        client = None
        if n >= 0:
            client = frame[pos:pos + n].decode("utf-8")
            pos += n
            if pos > len(frame):
                return None
        elif n != -1:
            return None
        if frame[pos] != 0:                     # header tagged fields
            return None
        ids = []
        pos += 1
        for _ in range(2):                      # group id, member id: compact, not null
            length = frame[pos] - 1
            if not 0 <= length < 127 or pos + 1 + length > len(frame):
                return None
            ids.append(frame[pos + 1:pos + 1 + length])
            pos += 1 + length
        (epoch,) = _I32.unpack_from(frame, pos)
        pos += 4
        if frame[pos:pos + 2] != b"\x00\x00" or _I32.unpack_from(frame, pos + 2)[0] != -1:
            return None                         # instance id, rack id null; timeout -1
        pos += 6
        if frame[pos:] != bytes(5 if version >= 1 else 4):     # the rest null, no tags
            return None
        return (version, correlation, client, ids[0].decode("utf-8"), ids[1].decode("utf-8"),
                ids[1], epoch)
    except (struct.error, IndexError, UnicodeDecodeError):
        return None


def check_ident(ident) -> None:
    """A connection's (client id, client host) for the steady consumer heartbeats, or None."""
    if ident is not None and not (type(ident) is tuple and len(ident) == 2
                                  and type(ident[0]) is str and type(ident[1]) is str):
        raise TypeError(f"ident must be a (client_id, client_host) tuple of str or None, "
                        f"got {ident!r}")

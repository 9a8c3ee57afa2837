"""The request log: one JSON line per answered request, rotated by size.

Fields: ts (unix seconds), api, version, client (client id), host, group, member,
generation, error (the top-level error code, when the response has one), latency_ms
(from decoding the request to encoding its response, parked time included): the
request arrived at ts - latency_ms. A ConsumerGroupHeartbeat's generation is its
request's member epoch, its member the request's member id (a v0 join without one: the
id the coordinator gave it).

After those, the fields a replay needs, each only where it applies (`_extras`;
docs/server.md lists them): `instance` (group instance id), a JoinGroup's
`session_timeout_ms`, `rebalance_timeout_ms`, `protocol_type`, `protocols` (names, in
order) and its answer's `answer_member` (when not the request's) and
`answer_generation`; a LeaveGroup v3+'s `members` ([member id, instance id, error]
each); an OffsetCommit's `offsets` ([topic, partition, offset] each) and, for `error`,
the error its partitions share. Lists are cut at a byte budget each (`<list>_total`
then gives the request's count), so a line stays bounded. A Heartbeat's line has only
`instance`, when the request named one (v3+ of a static member): a replaced static
member's heartbeat is fenced by it; a dynamic member's line is the common fields alone.
Writes are buffered and flushed by the server every second and at shutdown. Rotation
renames files in the caller's thread but deletes the oldest in a thread of its own:
unlinking a large file is slow on the filesystem, a stall the event loop would
otherwise take at every rotation. The
heartbeat fast paths (`wire.HeartbeatReader`, both twins) format their lines themselves
in this same format (`heartbeat_line`) and hand them over in blocks (`write_lines`).

A failing disk (ENOSPC, EIO) never stops the log for good nor raises into the server:
the lines that cannot be written are dropped and counted (`dropped`), one warning says
so, and every later flush tries again (reopening the file if rotation lost it); the
first write that succeeds logs how many were dropped. A flush that fails part way
cuts the file back to its last whole line.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .protocol import API_NAMES, duration_ms
from .._ratelog import RateLimitedLog

__all__ = ["RequestLog"]

log = logging.getLogger(__name__)
limited = RateLimitedLog(log)

CONSUMER_GROUP_HEARTBEAT = 68
_BUFFER = 1 << 16        # lines are written to the file in blocks of about this size

_encode_str = json.encoder.encode_basestring_ascii     # what json.dumps uses (C)

# One line per request, its fields as JSON text, in this order (what json.dumps(...,
# separators=(",", ":")) makes of them); ts and latency_ms as fixed-point text
# (microseconds of the clock, milliseconds with three decimals): the digits C's %.6f /
# %.3f give, so the native fast path's lines (wire.pyx) are the same text.
_LINE = ('{{"ts":{:.6f},"api":{},"version":{},"client":{},"host":{},"group":{},"member":{},'
         '"generation":{},"error":{},"latency_ms":{:.3f}{}}}\n')

OFFSET_COMMIT, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 11, 12, 13, 14
# The byte budget of each list a line carries (its entries' JSON text): what a client
# sends is bounded by the frame, but one topic named per partition would multiply it
_LIST_BUDGET = {"protocols": 4096, "members": 16384, "offsets": 65536}


def heartbeat_line(ts: float, version: int, client_id, host_json: str, group_id: str,
                   member_id: str, generation: int, error: int, seconds: float,
                   api: str = "Heartbeat", instance_id=None) -> str:
    """The request-log line of an answered Heartbeat, or `api` (a steady
    ConsumerGroupHeartbeat: `generation` its member epoch) (`host_json`: the peer's
    address as JSON text; `instance_id`: the group instance id the request named, or
    None): what RequestLog writes for it, and what the fast paths format."""
    return _LINE.format(ts, _encode_str(api), version, _json_str(client_id), host_json,
                        _encode_str(group_id), _encode_str(member_id), generation, error,
                        seconds * 1000.0, _instance(instance_id))


def _instance(instance_id) -> str:
    """A heartbeat line's `,"instance":...` (nothing for None: a dynamic member's line
    stays the common fields alone)."""
    return "" if instance_id is None else f',"instance":{_json_str(instance_id)}'


def host_json(host) -> str:
    """A peer address as JSON text (what a request-log line's "host" holds)."""
    return _json_str(host)


def _json_str(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return _encode_str(value)
    return json.dumps(value)


def _json_int(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    return json.dumps(value)


def _ms(value):
    """A kio duration (timedelta) as whole milliseconds (None stays None)."""
    return None if value is None else duration_ms(value)


def _capped(name: str, entries) -> str:
    """`,"name":[...]` of the entries (each its JSON text) while they fit the list's byte
    budget; when some are left out, `,"name_total":N` follows."""
    budget = _LIST_BUDGET[name]
    parts = []
    used = total = 0
    for text in entries:
        total += 1
        if used <= budget:
            used += len(text) + 1
            if used <= budget:
                parts.append(text)
    out = f',"{name}":[{",".join(parts)}]'
    return out if len(parts) == total else f'{out},"{name}_total":{total}'


def _offsets(topics):
    """An OffsetCommit's [topic, partition, offset] entries as JSON text (each topic's
    name encoded once)."""
    for t in topics:
        head = f"[{_json_str(t.name)},"
        for p in t.partitions:
            yield f"{head}{p.partition_index:d},{p.committed_offset:d}]"    # (ints: kio's)


def _shared_error(body):
    """The error code every partition of an OffsetCommit answer has, else None (mixed
    per-partition errors, or none)."""
    codes = {p.get("error_code") for t in body.get("topics") or ()
             for p in t.get("partitions") or ()}
    return codes.pop() if len(codes) == 1 else None


def _extras(api_key: int, req, body) -> str:
    """The fields a replay needs beyond the common ones (the module's docstring), as
    JSON text to go before the line's closing brace ("" for most requests)."""
    if req is None or api_key not in (JOIN_GROUP, SYNC_GROUP, LEAVE_GROUP, OFFSET_COMMIT,
                                      HEARTBEAT):
        return ""
    if api_key == HEARTBEAT:        # (the fast paths' text: heartbeat_line)
        return _instance(getattr(req, "group_instance_id", None))
    out = []
    instance = getattr(req, "group_instance_id", None)
    if instance is not None:
        out.append(f',"instance":{_json_str(instance)}')
    if api_key == JOIN_GROUP:
        out.append(f',"session_timeout_ms":{_json_int(_ms(getattr(req, "session_timeout", None)))}')
        rebalance = _ms(getattr(req, "rebalance_timeout", None))
        if rebalance is not None:
            out.append(f',"rebalance_timeout_ms":{_json_int(rebalance)}')
        out.append(f',"protocol_type":{_json_str(getattr(req, "protocol_type", None))}')
        out.append(_capped("protocols", (_json_str(p.name)
                                         for p in getattr(req, "protocols", ()))))
        member = body.get("member_id")
        if member and member != getattr(req, "member_id", None):
            out.append(f',"answer_member":{_json_str(member)}')
        generation = body.get("generation_id")
        if isinstance(generation, int) and generation >= 0:
            out.append(f',"answer_generation":{generation}')
    elif api_key == LEAVE_GROUP and getattr(req, "members", None):
        errors = [m.get("error_code") for m in body.get("members") or ()]
        if len(errors) != len(req.members):      # not answered per member (refused)
            errors = [body.get("error_code")] * len(req.members)
        out.append(_capped("members", (
            f"[{_json_str(m.member_id)},{_json_str(m.group_instance_id)},{_json_int(e)}]"
            for m, e in zip(req.members, errors))))
    elif api_key == OFFSET_COMMIT and getattr(req, "topics", None):
        out.append(_capped("offsets", _offsets(req.topics)))
    return "".join(out)


def _discard(path: Path) -> None:
    """Delete a file the log has let go of (run on the log's deleting thread)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:          # the log goes on; the file stays for a person
        log.warning("could not delete %s: %s", path, exc)


class RequestLog:
    def __init__(self, path, *, max_bytes: int = 64 * 1024 * 1024, backups: int = 5) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.backups = backups
        # One thread deletes, in order, the files the log lets go of; they are renamed
        # to hidden names first, and any a crash left behind go now.
        self._discarder = ThreadPoolExecutor(1, thread_name_prefix="request-log-discard")
        self._trash_prefix = f".{self.path.name}.discarding-"
        self._trash_names = itertools.count()
        for leftover in sorted(self.path.parent.glob(self._trash_prefix + "*")):
            self._discarder.submit(_discard, leftover)
        # Binary: lines are ASCII (JSON with non-ASCII escaped), and the fast paths
        # hand over blocks of them as bytes. _size: the file's length with _buf's.
        self._buf = bytearray()
        self._fd = -1
        self._size = 0
        self._failing = False        # lines are being dropped (until a write succeeds)
        self._closed = False
        self.dropped = 0             # lines the disk would not take
        self._open()

    def _open(self) -> None:
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size + len(self._buf)

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def record(self, conn, request, body: dict, seconds: float) -> None:
        req = request.body
        generation = getattr(req, "generation_id", None)
        if generation is None:
            generation = getattr(req, "generation_id_or_member_epoch", None)
        if generation is None:      # ConsumerGroupHeartbeat: the member epoch
            generation = getattr(req, "member_epoch", None)
        member_id = getattr(req, "member_id", None)
        if not isinstance(body, dict):
            body = {}
        error = body.get("error_code")
        if request.api_key == CONSUMER_GROUP_HEARTBEAT and not member_id \
                and body.get("member_id"):
            member_id = body["member_id"]   # v0's join: the id the coordinator made
        elif request.api_key == OFFSET_COMMIT and error is None:
            error = _shared_error(body)     # its answer is per partition
        self._write(API_NAMES.get(request.api_key, request.api_key), request.api_version,
                    request.client_id, conn, getattr(req, "group_id", None),
                    member_id, generation, error, seconds,
                    _extras(request.api_key, req, body))

    def record_heartbeat(self, conn, version: int, client_id, group_id, member_id,
                         generation: int, error: int, seconds: float,
                         instance_id=None) -> None:
        """A heartbeat answered by the server's fast path: the same line `record` makes."""
        self._write("Heartbeat", version, client_id, conn, group_id, member_id, generation,
                    error, seconds, _instance(instance_id))

    def record_consumer_heartbeat(self, conn, version: int, client_id, group_id, member_id,
                                  member_epoch: int, seconds: float) -> None:
        """A steady ConsumerGroupHeartbeat answered by the server's fast path (error 0):
        the same line `record` makes."""
        self._write(API_NAMES[CONSUMER_GROUP_HEARTBEAT], version, client_id, conn, group_id,
                    member_id, member_epoch, 0, seconds)

    def write_lines(self, lines: bytes) -> None:
        """Whole lines formatted elsewhere (the heartbeat fast paths), in one write."""
        self._append(lines)

    def _write(self, api, version, client_id, conn, group_id, member_id, generation, error,
               seconds: float, extras: str = "") -> None:
        line = _LINE.format(
            time.time(), _json_str(api) if isinstance(api, str) else api, version,
            _json_str(client_id), _json_str(conn.session.peer_host if conn.session else None),
            _json_str(group_id), _json_str(member_id), _json_int(generation), _json_int(error),
            seconds * 1000, extras).encode()
        self._append(line)

    def _append(self, lines: bytes) -> None:
        if self._fd < 0:             # lost by a failed rotation: until a flush reopens it
            self.dropped += lines.count(b"\n")
            return
        self._buf += lines
        self._size += len(lines)
        if self._size >= self.max_bytes:
            self._rotate()
        elif len(self._buf) >= _BUFFER:
            self._write_out()

    def _write_out(self) -> bool:
        """Write _buf to the file; on an error drop it (counted), cut off any part
        written, warn once, and return False."""
        buf = self._buf
        if not buf:
            return True
        start = self._size - len(buf)
        written = 0
        try:
            with memoryview(buf) as view:
                while written < len(buf):
                    written += os.write(self._fd, view[written:])
        except OSError as exc:
            if written:
                try:
                    os.ftruncate(self._fd, start)
                except OSError:
                    pass
            self._fail(exc, buf.count(b"\n"))
            buf.clear()
            self._size = start
            return False
        buf.clear()
        if self._failing:
            self._failing = False
            log.warning("request log %s: writing again (%d lines dropped so far)",
                        self.path, self.dropped)
        return True

    def _fail(self, exc: OSError, lines: int) -> None:
        self.dropped += lines
        if not self._failing:
            self._failing = True
            limited.warning(("request-log", str(self.path)), "request log %s: %s; dropping "
                            "lines (counted) until the disk takes them again",
                            self.path, exc)

    def _rotate(self) -> None:
        if not self._write_out():
            return                   # still too big: the next flush that works rotates
        try:
            self._shift_files()
        except OSError as exc:
            self._close_fd()
            self._fail(exc, 0)

    def _shift_files(self) -> None:
        self._close_fd()
        # The file falling off the end (the oldest backup, or this one when none are
        # kept) is renamed out of the way, so that no rename below replaces (and so
        # deletes) a file here; the discarder deletes it.
        oldest = self.path.with_name(f"{self.path.name}.{self.backups}") if self.backups > 0 \
            else self.path
        if oldest.exists():
            trash = self.path.with_name(f"{self._trash_prefix}{next(self._trash_names)}")
            os.replace(oldest, trash)
            self._discarder.submit(_discard, trash)
        for i in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        if self.backups > 0:
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self._open()

    def flush(self) -> None:
        """Write what is buffered (every second, from the server); after a failure,
        first reopen the file if it was lost."""
        if self._closed:
            return
        if self._fd < 0:
            try:
                self._open()
            except OSError as exc:
                self._fail(exc, 0)
                return
        if self._write_out() and self._size >= self.max_bytes:
            self._rotate()

    def close(self) -> None:
        if not self._closed:
            self.flush()
            self._closed = True
            self._close_fd()
        self._discarder.shutdown(wait=True)

"""The asyncio TCP server: connections, framing, response order, time, shutdown.

One event loop thread does everything: it reads frames, decodes them, calls the
coordinator, encodes responses, and advances time (`coord.expire_due()` and the
fetch timer every `tick_ms`, from `loop.call_later`), so no thread ever races the loop
and coordinator callbacks, wherever they fire, run on the loop thread.

Each connection keeps a queue of replies, one per request in arrival order; a
response is written only when every earlier one has been written, so a parked
JoinGroup holds back the responses behind it on that connection (Kafka's ordering
guarantee) while other connections go on.
"""
from __future__ import annotations

import asyncio
import collections
import gc
import itertools
import logging
import os
import signal
import struct
import time
from dataclasses import dataclass, field
from typing import Dict, Optional, Set, Tuple

from kio.schema.index import api_key_map

from fastcoord import (CoordinatorConfig, GroupConfigError, GroupCoordinator, Purgatory,
                       SystemClock, Timer)
from fastcoord._twins import module
from fastcoord.core.coordinator import RETENTION_SLICE_GROUPS

from .apis import KafkaApis, Session
from .._ratelog import RateLimitedLog
from .requestlog import host_json
from .topic_ids import TopicIds
from .protocol import (API_NAMES, HEARTBEAT_KEY, MalformedRequest, UnsupportedRequest,
                       decode_request, encode_response)

log = logging.getLogger("fastcoord.server")
# What a client can make happen on every request is logged through this: one line per
# kind per interval (a hostile client must not fill the log, nor pay a traceback each).
rate_log = RateLimitedLog(log)
# A partial frame this small is the connection's own business; a larger one reserves
# its whole size from the server's queued_max_request_bytes before more of it is read.
_SMALL_FRAME = 64 * 1024
# One connection's buffered requests are handled for at most this long in one event-loop
# callback; the rest wait their turn behind the other connections (as Kafka handles one
# request of a connection at a time), however many a client sends in one write.
_FRAMES_SLICE_S = 0.005

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
_CONSUMER_HEARTBEAT_KEY = 68
_CONSUMER_HEARTBEAT = _CONSUMER_HEARTBEAT_KEY.to_bytes(2, "big")     # a frame's first bytes


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 9092                       # 0: any free port (announced on stdout)
    advertised_host: Optional[str] = None  # what Metadata/FindCoordinator tell clients
    topics: Dict[str, int] = field(default_factory=dict)
    coordinator: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    impl: Optional[str] = None
    max_frame_bytes: int = 16 * 1024 * 1024
    max_connections: int = 10_000
    idle_timeout_ms: int = 600_000         # Kafka's connections.max.idle.ms
    # At max_connections, a connection idle this long is closed to admit a new one.
    idle_grace_ms: int = 10_000
    # Reading a connection pauses while it has this many requests unanswered or
    # answered but held behind an earlier one (or this many bytes of such answers),
    # as Kafka mutes a channel while a request is in progress; it resumes at half.
    max_inflight_requests: int = 1000
    max_inflight_bytes: int = 4 * 1024 * 1024
    # Kafka's queued.max.request.bytes: the memory all partial frames larger than
    # _SMALL_FRAME may reserve together; a connection whose frame does not fit waits
    # (its reading paused) until another frame completes.
    queued_max_request_bytes: int = 32 * 1024 * 1024
    tick_ms: int = 5                       # how often time is advanced from the loop
    write_buffer_high: int = 4 * 1024 * 1024
    security: object = None                # fastcoord.server.security.Security or None
    status_interval_s: float = 0.0         # > 0: print a status line this often
    data_dir: Optional[str] = None         # the durable store lives in data_dir/groups
    store: str = "memory"                  # "durable" (needs data_dir) or "memory"
    fsync: str = "always"                  # DurableStore policy: "always" or "interval"
    fsync_interval_ms: int = 1000
    repair: bool = False                   # truncate a corrupt shard log at the bad record
    metrics_port: Optional[int] = None     # Prometheus text on GET /metrics (0: any free port)
    heartbeat_fast_path: bool = True       # runs of plain Heartbeat frames in one loop (wire)
    heartbeat_lane: bool = True            # heartbeat-only connections served from C (lane)


class Connection(asyncio.Protocol):
    """One client connection: frames in, ordered responses out."""

    def __init__(self, server: "CoordinatorServer") -> None:
        self.server = server
        self.transport: Optional[asyncio.Transport] = None
        self.session: Optional[Session] = None
        self.peer = "?"
        self.closing = False
        self.last_active = time.monotonic()
        self._buf = bytearray()
        self._pending: collections.deque = collections.deque()
        self._out: Optional[list] = None     # responses held back while corked
        # The per-read heartbeat fast path (the server's HeartbeatReader) while it
        # applies to this connection: never before its first request (which records the
        # client id), nor with SASL or ACLs (see _set_reader). It writes the request-log
        # lines of what it answers itself.
        self._reader = None
        self._write = None
        self._fd = -1                        # the socket's descriptor (for the lane)
        self._lane_fd = -1                   # >= 0 while the server's heartbeat lane serves it
        self._write_paused = False           # the transport asked us to stop (pause_writing)
        # Reading is paused while any reason holds (_sync_reading): the above, the lane,
        # too much in flight (_inflight_full), a large frame waiting for the server's
        # request budget (_wanted > 0; _reserved: what its frame at the head of _buf holds).
        self._reading = True
        self._inflight_full = False
        self._yielded = False                # frames left for a later callback (_frames)
        self._held = 0                       # bytes of the answers in _pending
        self._wanted = 0
        self._waiting_since = 0.0
        self._reserved = 0
        self._log_host: Optional[bytes] = None  # peer address as JSON, with a request log
        # (client id, client host) while the fast paths serve it: what a steady
        # ConsumerGroupHeartbeat's settled member must have come from
        self._ident: Optional[Tuple[str, str]] = None

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        host = peer[0] if peer else "?"
        self.peer = f"{host}:{peer[1]}" if peer else "?"
        server = self.server
        if len(server.connections) >= server.config.max_connections and \
                not server.make_room():
            rate_log.warning("max-connections", "%s: refused: %d connections is the maximum",
                            self.peer, server.config.max_connections)
            self.closing = True
            transport.close()
            return
        server.connections.add(self)
        self.session = Session(host)
        if server.request_log is not None:
            self._log_host = host_json(self.session.peer_host).encode("ascii")
        self._write = transport.write
        transport.set_write_buffer_limits(high=server.config.write_buffer_high)
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1

    def connection_lost(self, exc) -> None:
        self.closing = True
        self._leave_lane()
        self.server.connections.discard(self)
        self._drop_pending()

    def pause_writing(self) -> None:
        # The client is not reading its responses: stop reading its requests.
        self._write_paused = True
        self._sync_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._sync_reading()

    def _sync_reading(self) -> None:
        """Read the socket exactly while nothing holds it back: the client not reading
        its answers, too many requests in flight, a large frame waiting for the request
        budget, or the lane reading it instead. Each holder clears its own reason and
        calls this, so one reason ending never resumes what another still pauses."""
        transport = self.transport
        if transport is None or self.closing:
            return
        reading = not (self._write_paused or self._inflight_full or self._wanted
                       or self._yielded or self._lane_fd >= 0)
        if reading != self._reading:
            self._reading = reading
            if reading:
                transport.resume_reading()
            else:
                transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.last_active = time.monotonic()
        reader = self._reader
        if reader is not None and not self._buf and not self._pending:
            # Nothing is buffered or waiting to go out before this read, so answering
            # its leading heartbeats at once keeps the responses in request order.
            try:
                used = reader(data, self._write, self._log_host, self._ident)
            except Exception:
                log.exception("%s: the heartbeat fast path failed; closing", self.peer)
                self.close()
                return
            if used == len(data):
                # A read of heartbeats only: serve the next ones in the lane, if any.
                lane = self.server.lane
                if (lane is not None and self._fd >= 0 and not self._write_paused
                        and not self.closing and self.transport.get_write_buffer_size() == 0):
                    self._enter_lane(lane)
                return
            data = data[used:]
        self._corked_frames(data)

    def _corked_frames(self, data) -> None:
        # Cork: the responses answered while these frames are handled go out in one
        # write (one send() for a pipelined batch instead of one per response).
        self._out = out = []
        try:
            self._frames(data)
        finally:
            self._out = None
            if out and not self.closing:
                self.transport.write(b"".join(out))

    # -- the heartbeat lane (fastcoord/server/_native/lane.pyx) -------------------------------------
    def _enter_lane(self, lane) -> None:
        """Hand the socket's reading to the lane: nothing is buffered, waiting or unsent,
        so the lane's answers keep request order."""
        self._lane_fd = self._fd
        self._sync_reading()
        try:
            lane.add(self._fd, self, self._log_host, self._ident)
        except (OSError, ValueError):
            log.exception("%s: could not enter the heartbeat lane", self.peer)
            self._lane_fd = -1
            self._sync_reading()

    def _leave_lane(self) -> None:
        """Take the socket back from the lane without a hand-back (closing)."""
        if self._lane_fd >= 0:
            self.last_active = self.idle_since()
            if self.server.lane is not None:
                self.server.lane.remove(self._lane_fd)
            self._lane_fd = -1

    def lane_returned(self, rest: bytes, unsent: bytes, error) -> None:
        """The lane gave the socket back (its on_return): `unsent` answers go out first,
        then `rest`, the read's bytes from the first one the lane did not answer, takes
        the general path; an `error` closes the connection."""
        self._lane_fd = -1
        self.last_active = time.monotonic()
        if self.closing or self.transport is None:
            return
        if unsent:
            self.transport.write(unsent)
        if error is not None:
            if isinstance(error, OSError):
                log.info("%s: %s; closing", self.peer, error)
            else:
                log.error("%s: the heartbeat lane failed; closing", self.peer, exc_info=error)
            self.close()
            return
        self._sync_reading()
        if rest:
            self.data_received(rest)

    def idle_since(self) -> float:
        """time.monotonic() of the last request read (by the event loop or the lane)."""
        lane = self.server.lane
        if self._lane_fd >= 0 and lane is not None and self._lane_fd in lane:
            return max(self.last_active, lane.last_active(self._lane_fd))
        return self.last_active

    def _frames(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        limit = self.server.config.max_frame_bytes
        fast = self._fast_path()
        started = time.perf_counter()
        while end - pos >= 4 and not self._inflight_full:
            if fast is not None and not self._pending:
                # Nothing is waiting to go out before them, so answering a run of plain
                # heartbeats at once keeps the responses in request order.
                pos = self._heartbeat_run(fast, buf, pos, limit)
                if self.closing:
                    return
                if end - pos < 4:
                    break
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > limit:
                log.warning("%s: frame of %d bytes rejected (maximum %d); closing",
                            self.peer, size, limit)
                self.close()
                return
            if end - pos - 4 < size:
                if size > _SMALL_FRAME and not self._reserved:
                    self._reserve(size)
                break
            frame = bytes(buf[pos + 4:pos + 4 + size])
            pos += 4 + size
            if self._reserved:
                self.server.release(self)
            costly = self._on_frame(frame)
            if self.closing:
                return
            if len(self._pending) >= self.server.config.max_inflight_requests or \
                    self._held >= self.server.config.max_inflight_bytes:
                # The rest of the read waits in _buf until answers drain (_flush).
                self._inflight_full = True
                self._sync_reading()
            fast = self._fast_path()    # that frame may have changed the session
            if costly and end - pos >= 4 and time.perf_counter() - started >= _FRAMES_SLICE_S:
                # the rest after the other connections' turn; nothing is read meanwhile
                if not self._yielded:
                    self._yielded = True
                    self._sync_reading()
                    self.server.loop.call_soon(self._frames_turn)
                break
        self._set_reader(fast)
        if pos:
            del buf[:pos]

    def _reserve(self, size: int) -> None:
        """Reserve a large partial frame's whole size from the request budget before
        reading more of it, or pause reading until the budget has room (the server's
        release() reserves it then)."""
        if self.server.reserve(self, size):
            return
        self._wanted = size
        self._waiting_since = time.monotonic()
        self.server.budget_waiters[self] = None
        self._sync_reading()
        rate_log.warning("request-budget", "%s: a %d-byte frame waits: partial frames hold "
                        "%d bytes of the %d of queued_max_request_bytes", self.peer, size,
                        self.server.queued_bytes, self.server.config.queued_max_request_bytes)

    def _frames_turn(self) -> None:
        """This connection's turn again after _frames gave way: on with the frames left
        in _buf, then read again."""
        self._yielded = False
        if self.closing:
            return
        self._corked_frames(b"")
        self._sync_reading()

    def _resume_frames(self) -> None:
        """Answers drained below half the in-flight bounds: go on with the frames left
        in _buf, then read again."""
        if self.closing:
            return
        self._corked_frames(b"")
        self._sync_reading()

    # -- requests ----------------------------------------------------------------------------
    def _fast_path(self):
        """The heartbeat fast path, or None where it would skip something that applies to
        this connection in its current state: the first request (it records the client
        id), SASL before authentication, ACL checks, a close after the next reply."""
        server = self.server
        session = self.session
        if (server.heartbeat_run is None or session.raw_sasl or session.client_id is None
                or session.close_after_reply):
            return None
        security = server.apis.security
        if security is None or (security.acls is None
                                and (not security.sasl_enabled or session.authenticated)):
            return server.heartbeat_run
        return None

    def _set_reader(self, fast) -> None:
        server = self.server
        self._reader = server.heartbeat_reader if fast is not None else None
        session = self.session
        self._ident = (session.client_id or "", session.client_host) \
            if fast is not None else None

    def _heartbeat_run(self, fast, buf: bytearray, pos: int, limit: int) -> int:
        server = self.server
        apis = server.apis
        out = self._out
        answered = len(out)
        entries = [] if server.request_log is not None else None
        lo, hi = server.heartbeat_versions
        started = time.perf_counter()
        try:
            new_pos = fast(buf, pos, limit, lo, hi, apis.coord.heartbeat, out, entries)
        except Exception:
            log.exception("%s: the heartbeat fast path failed; closing", self.peer)
            self.close()
            return pos
        answered = len(out) - answered
        if answered:
            seconds = time.perf_counter() - started     # each was answered within the run
            apis.counters["requests"] += answered
            apis.counters["heartbeats"] += answered
            apis.counters["heartbeats_fast_path"] += answered
            server.latencies.extend(itertools.repeat(seconds, answered))
            if entries:
                record = server.request_log.record_heartbeat
                try:
                    for version, client_id, group, member, generation, error, instance \
                            in entries:
                        record(self, version, client_id, group, member, generation, error,
                               seconds, instance)
                except Exception:
                    rate_log.error("request-log", "writing the request log failed", exc_info=True)
        return new_pos

    def _on_frame(self, frame: bytes) -> bool:
        """Handle one request frame; False when a steady ConsumerGroupHeartbeat took the
        member table's fast path (no need to look at the clock after it)."""
        server = self.server
        apis = server.apis
        if self.session.raw_sasl:
            self._raw_sasl_token(frame)
            return True
        if frame[:2] == _CONSUMER_HEARTBEAT and self._consumer_steady(frame):
            return False
        try:
            request = decode_request(frame, apis.versions)
        except UnsupportedRequest as exc:
            rate_log.warning(_log_key("unsupported", frame, apis.versions),
                             "%s: %s (correlation id %d); closing",
                             self.peer, exc, exc.correlation_id)
            self.close()
            return True
        except MalformedRequest as exc:
            rate_log.warning(_log_key("malformed", frame, apis.versions),
                             "%s: malformed request: %s; closing", self.peer, exc)
            self.close()
            return True
        session = self.session
        if session.client_id is None:
            session.client_id = request.client_id
        if apis.needs_authentication(session, request):
            log.warning("%s: %s before SASL authentication; closing", self.peer,
                        API_NAMES[request.api_key])
            self.close()
            return True
        if not apis.expects_response(request):
            reply = _ignore
        else:
            reply = _Reply(self, request, server.request_log)
            self._pending.append(reply)
        try:
            apis.handle(session, request, reply)
        except Exception as exc:
            # One traceback per (exception type, API) per interval, however many requests
            # meet the same failure.
            rate_log.error((type(exc), request.api_key),
                           "%s: %s v%d (correlation id %d) failed: %s: %s; closing", self.peer,
                           API_NAMES[request.api_key], request.api_version,
                           request.correlation_id, type(exc).__name__, exc, exc_info=True)
            self.close()
        return True

    def _consumer_steady(self, frame: bytes) -> bool:
        """A settled member's steady ConsumerGroupHeartbeat answered without kio or the
        group logic (the wire twin's consumer_heartbeat_frame over the member table's
        consumer_steady), where the heartbeat fast path would apply (_fast_path: no ACL,
        no SASL pending, the client id known): whether it was. Otherwise nothing
        happened and the general path answers it."""
        if self._fast_path() is None:
            return False
        server = self.server
        apis = server.apis
        session = self.session
        span = apis.versions.get(_CONSUMER_HEARTBEAT_KEY)
        if span is None:
            return False
        lo, hi = span
        started = time.perf_counter()
        answered = server.consumer_heartbeat_frame(
            frame, lo, hi, apis.coord.member_table.consumer_steady, session.client_id or "",
            session.client_host)
        if answered is None:
            return False
        data, version, client_id, group_id, member_id, epoch = answered
        counters = apis.counters
        counters["requests"] += 1
        counters["consumer_heartbeats"] += 1
        counters["consumer_heartbeats_fast_path"] += 1
        reply = _Reply(self, None, None)    # (its place in the answers' order)
        self._pending.append(reply)
        reply.data = data
        self._held += len(data)
        seconds = time.perf_counter() - started
        server.latencies.append(seconds)
        self._flush()
        if server.request_log is not None:
            try:
                server.request_log.record_consumer_heartbeat(
                    self, version, client_id, group_id, member_id, epoch, seconds)
            except Exception:
                rate_log.error("request-log", "writing the request log failed", exc_info=True)
        return True

    def _raw_sasl_token(self, token: bytes) -> None:
        """After a v0 SaslHandshake the client sends the PLAIN token as a bare frame
        and gets a bare (empty) frame back on success; failure closes the connection."""
        session = self.session
        session.raw_sasl = False
        principal = self.server.apis.security.authenticate_plain(token)
        if principal is None:
            log.warning("%s: SASL/PLAIN authentication failed; closing", self.peer)
            self.close()
            return
        session.principal = principal
        session.authenticated = True
        self.transport.write(b"\x00\x00\x00\x00")

    def _flush(self) -> None:
        pending = self._pending
        transport = self.transport
        out = self._out
        while pending and pending[0].data is not None:
            reply = pending.popleft()
            self._held -= len(reply.data)
            if not reply.cancelled and not self.closing:
                if out is not None:
                    out.append(reply.data)
                else:
                    transport.write(reply.data)
        if self._inflight_full and not self.closing:
            config = self.server.config
            if len(pending) <= config.max_inflight_requests // 2 and \
                    self._held <= config.max_inflight_bytes // 2:
                self._inflight_full = False
                # Not from here: this may run inside another connection's request.
                self.server.loop.call_soon(self._resume_frames)

    def close(self) -> None:
        """Close after writing what is already queued; drop what is still parked."""
        if self.closing:
            return
        out = self._out
        if out and self.transport is not None:    # corked responses go first
            self.transport.write(b"".join(out))
            out.clear()
        self.closing = True
        self._leave_lane()
        self._drop_pending()
        if self.transport is not None:
            self.transport.close()

    def _drop_pending(self) -> None:
        """Closing: cancel what is parked, free what is held and reserved."""
        for reply in self._pending:
            reply.cancelled = True
        self._pending.clear()
        self._held = 0
        self._buf = bytearray()
        self.server.release(self)

    @property
    def parked(self) -> int:
        return sum(1 for r in self._pending if r.data is None)


def _log_key(kind: str, frame: bytes, versions) -> tuple:
    """The rate-limit key of a refused frame: one per advertised (api, version), one
    per other Kafka API, one for everything else, so a client cannot make a key per
    value it sends."""
    if len(frame) < 4:
        return (kind,)
    api_key, api_version = _KEY_VERSION.unpack_from(frame, 0)
    span = versions.get(api_key)
    if span is not None and span[0] <= api_version <= span[1]:
        return (kind, api_key, api_version)
    if api_key in api_key_map:
        return (kind, api_key)
    return (kind,)


class _Reply:
    """The `reply(body)` callable handed to a handler, and the request's place in its
    connection's queue: encodes the response, keeps it, and writes every response that
    is now at the head of the queue."""

    __slots__ = ("conn", "data", "cancelled", "request", "started", "request_log")

    def __init__(self, conn: Connection, request, request_log) -> None:
        self.conn = conn
        self.data: Optional[bytes] = None    # the encoded response, once answered
        self.cancelled = False               # the connection closed first
        self.request = request
        self.request_log = request_log
        self.started = time.perf_counter()

    def __call__(self, body: dict) -> None:
        if self.data is not None or self.cancelled:   # a second reply, or closed meanwhile
            return
        request = self.request
        version = request.api_version if request.body is not None else 0
        try:
            data = encode_response(request.api_key, version, request.correlation_id, body)
        except Exception:
            log.exception("%s: encoding the %s v%d response failed; closing", self.conn.peer,
                          API_NAMES[request.api_key], version)
            self.conn.close()
            return
        self.data = data
        conn = self.conn
        conn._held += len(data)
        conn.server.latencies.append(time.perf_counter() - self.started)
        conn._flush()
        if conn.session.close_after_reply:
            conn.close()
        if self.request_log is not None:
            try:
                self.request_log.record(conn, request, body, time.perf_counter() - self.started)
            except Exception:
                rate_log.error("request-log", "writing the request log failed", exc_info=True)


class LoopStore:
    """The durable store as the coordinator sees it from the server: every completion
    (fired on a writer thread once the write is on disk) is handed to the event loop
    thread, so the coordinator callbacks it triggers (the leader's SyncGroup answer,
    each OffsetCommit answer, a consumer group's heartbeat answer) run on the loop like
    everything else."""

    def __init__(self, store) -> None:
        self.store = store
        self.loop: Optional[asyncio.AbstractEventLoop] = None

    def _on_loop(self, done):
        loop = self.loop
        if loop is None:
            return done

        def fire(error) -> None:
            try:
                loop.call_soon_threadsafe(done, error)
            except RuntimeError:        # the loop is gone (after shutdown): answer here
                done(error)
        return fire

    def store_group(self, group_id: str, record, done) -> None:
        self.store.store_group(group_id, record, self._on_loop(done))

    def store_offsets(self, group_id: str, offsets, done) -> None:
        self.store.store_offsets(group_id, offsets, self._on_loop(done))

    def store_consumer_group(self, group_id: str, record, done) -> None:
        self.store.store_consumer_group(group_id, record, self._on_loop(done))

    def delete_offsets(self, group_id: str, partitions, done) -> None:
        self.store.delete_offsets(group_id, partitions, self._on_loop(done))


def _ignore(body: dict) -> None:
    """Reply of a request that gets no response (Produce with acks=0)."""


class CoordinatorServer:
    """The coordinator-only broker. `await start()`, then `await shutdown()`."""

    def __init__(self, config: ServerConfig, *, request_log=None) -> None:
        self.config = config
        self.clock = SystemClock()
        self.store = None                  # the DurableStore, when config.store == "durable"
        self._loop_store: Optional[LoopStore] = None
        self._load_task: Optional[asyncio.Task] = None
        self.loaded: Optional[dict] = None  # {shard: (groups, offsets)} once loading is done
        if config.store == "durable":
            if not config.data_dir:
                raise ValueError("store='durable' needs a data_dir")
            from fastcoord.storage import DurableStore
            self.store = DurableStore(os.path.join(config.data_dir, "groups"),
                                      num_shards=config.coordinator.num_shards,
                                      fsync=config.fsync,
                                      fsync_interval_ms=config.fsync_interval_ms,
                                      repair=config.repair,
                                      offsets_retention_ms=(
                                          config.coordinator.offsets_retention_minutes * 60_000))
            self._loop_store = LoopStore(self.store)
        elif config.store != "memory":
            raise ValueError(f"store must be 'durable' or 'memory', got {config.store!r}")
        self.coord = GroupCoordinator(config.coordinator, clock=self.clock, impl=config.impl,
                                      store=self._loop_store)
        # The declared topics: what the consumer protocol's assignors see, and their ids
        # (kept in the durable store: stable across restarts).
        self.topic_ids = TopicIds.for_topics(config.topics, self.store)
        self.coord.set_topics(dict(config.topics))
        if self.store is not None:
            self._load_group_configs()
        # The wire fast path of the coordinator's twin (a pure server stays pure throughout).
        wire = module(config.impl, "server.wire")
        self.heartbeat_run = wire.heartbeat_run if config.heartbeat_fast_path else None
        self.heartbeat_reader = None         # made in start(), once the APIs exist
        self.lane = None                     # the heartbeat lane (start(); Linux, fast path on)
        self.heartbeat_versions = (0, -1)    # the advertised Heartbeat versions (start())
        self._wire = wire
        self.consumer_heartbeat_frame = wire.consumer_heartbeat_frame
        self.timer = Timer(self.clock, impl=config.impl)
        self.fetch_purgatory = Purgatory("fetch", self.timer)
        self.connections: Set[Connection] = set()
        # The request budget (queued_max_request_bytes): bytes reserved by large partial
        # frames, their connections (oldest reservation first), and the connections
        # whose frame waits for room (first come, first served), as ordered dicts.
        self.queued_bytes = 0
        self.budget_holders: Dict[Connection, None] = {}
        self.budget_waiters: Dict[Connection, None] = {}
        self.latencies: collections.deque = collections.deque(maxlen=100_000)
        self._status_handle = None
        self._metrics_server = None
        self.metrics_port: Optional[int] = None
        self._status_last = (time.monotonic(), 0)
        self.request_log = request_log
        self.apis: Optional[KafkaApis] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.port: Optional[int] = None
        self._server: Optional[asyncio.base_events.Server] = None
        self._tick_handle = None
        self._sweep_handle = None
        # the next offsets retention check (clock ms; the first one interval after start)
        self._next_retention_ms = (self.clock.now_ms()
                                   + config.coordinator.offsets_retention_check_interval_ms)
        self._retention_in_pass = False     # a retention pass runs a slice each tick
        self.retention_slice_groups = RETENTION_SLICE_GROUPS
        self._stopped = False

    def _load_group_configs(self) -> None:
        """The groups' dynamic configs the store kept. One that the coordinator's
        bounds, changed since it was set, no longer allow is left out (the group takes
        the defaults), said once per group."""
        for group_id, values in self.store.load_group_configs().items():
            try:
                self.coord.set_group_config(group_id, values)
            except (GroupConfigError, ValueError) as exc:
                log.warning("group %s: its kept configs %s are not applied: %s",
                            group_id, values, exc)

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        cfg = self.config
        if self.store is not None:
            # Until its shard is loaded, a group answers COORDINATOR_LOAD_IN_PROGRESS.
            self._loop_store.loop = self.loop
            for shard in range(self.coord.config.num_shards):
                if self.coord.owns_shard(shard):
                    self.coord.begin_loading(shard)
        self._server = await self.loop.create_server(
            lambda: Connection(self), cfg.host, cfg.port, reuse_address=True, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        advertised = cfg.advertised_host or (
            "127.0.0.1" if cfg.host in ("", "0.0.0.0", "::") else cfg.host)
        self.apis = KafkaApis(self.coord, cfg.topics, host=advertised, port=self.port,
                              fetch_purgatory=self.fetch_purgatory, security=cfg.security,
                              topic_ids=self.topic_ids,
                              keep_group_configs=(self.store.store_group_configs
                                                  if self.store is not None else None))
        self.heartbeat_versions = lo, hi = self.apis.versions[HEARTBEAT_KEY]
        if cfg.heartbeat_fast_path:
            consumer_lo, consumer_hi = self.apis.versions.get(_CONSUMER_HEARTBEAT_KEY, (0, -1))
            self.heartbeat_reader = self._wire.HeartbeatReader(
                self.coord.heartbeat, cfg.max_frame_bytes, lo, hi, self.latencies,
                self.request_log.write_lines if self.request_log is not None else None,
                self.coord.member_table.consumer_steady, consumer_lo, consumer_hi)
            if cfg.heartbeat_lane:
                self.lane = self._make_lane()
        self._tick()
        self._sweep()
        if self.store is not None:
            self._load_task = self.loop.create_task(self._load())
        if cfg.status_interval_s > 0:
            self._status_handle = self.loop.call_later(cfg.status_interval_s, self._status)
        if cfg.metrics_port is not None:
            self._metrics_server = await asyncio.start_server(
                self._metrics_client, cfg.host, cfg.metrics_port, reuse_address=True)
            self.metrics_port = self._metrics_server.sockets[0].getsockname()[1]

    def _make_lane(self):
        """The heartbeat lane of the server's twin, watched by the event loop; None
        where the twin has none (not Linux: no epoll)."""
        try:
            lane_module = module(self.config.impl, "server.lane")
        except ImportError:
            log.info("no heartbeat lane on this platform; the event loop serves every read")
            return None
        lane = lane_module.HeartbeatLane(self.heartbeat_reader, Connection.lane_returned)
        self.loop.add_reader(lane.fileno(), lane.poll)
        return lane

    async def _load(self) -> None:
        """Load every owned shard from the durable store (a worker thread reads and
        decodes the logs; the coordinator is thread-safe), then serve those groups."""
        from fastcoord.storage import load_into
        started = time.monotonic()
        try:
            self.loaded = await self.loop.run_in_executor(None, load_into, self.coord, self.store)
        except Exception as exc:   # a corrupt shard: it answers NOT_COORDINATOR, the rest serve
            log.error("loading %s failed: %s (that shard answers NOT_COORDINATOR; "
                      "--repair truncates a corrupt log at the bad record)",
                      self.store.data_dir, exc)
            self.loaded = {}
            print(f"fastcoord serve: loading failed: {exc}", flush=True)
            return
        groups = sum(g for g, _ in self.loaded.values())
        offsets = sum(o for _, o in self.loaded.values())
        print(f"fastcoord serve: loaded {len(self.loaded)} shards ({groups} groups, {offsets} "
              f"offsets) from {self.store.data_dir} in {time.monotonic() - started:.3f} s",
              flush=True)

    async def wait_loaded(self) -> None:
        if self._load_task is not None:
            await asyncio.shield(self._load_task)

    def _groups_by_state(self, group_type: str = "classic") -> Dict[str, int]:
        """The groups of one type ("classic", "consumer") counted by state."""
        states: Dict[str, int] = {}
        for g in self.coord.list_groups(types=[group_type]):
            states[str(g.state)] = states.get(str(g.state), 0) + 1
        return states

    def _p99_seconds(self) -> float:
        lat = sorted(self.latencies)
        return lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0.0

    def counters(self) -> Dict[str, int]:
        """The request counters: the APIs' own plus the per-read fast path's
        (heartbeats_read_path: answered a whole read at a time, a part of
        heartbeats_fast_path; its steady consumer heartbeats count in
        consumer_heartbeats_fast_path)."""
        counters = dict(self.apis.counters)
        reader = self.heartbeat_reader
        fast = reader.answered if reader is not None else 0
        for key in ("requests", "heartbeats", "heartbeats_fast_path"):
            counters[key] += fast
        counters["heartbeats_read_path"] = fast
        consumers = reader.consumer_answered if reader is not None else 0
        for key in ("requests", "consumer_heartbeats", "consumer_heartbeats_fast_path"):
            counters[key] += consumers
        return counters

    def status_line(self) -> str:
        """connections, groups by state, heartbeats/s, joins, p99 latency (since last)."""
        now = time.monotonic()
        counters = self.counters()
        beats = counters["heartbeats"]
        then, beats_then = self._status_last
        self._status_last = (now, beats)
        states = self._groups_by_state()
        consumer_states = self._groups_by_state("consumer")
        p99 = self._p99_seconds() * 1000
        self.latencies.clear()
        groups = " ".join(f"{k}={v}" for k, v in sorted(states.items())) or "none"
        consumer_groups = " ".join(f"{k}={v}" for k, v in sorted(consumer_states.items())) \
            or "none"
        return (f"status: connections={len(self.connections)} groups[{groups}] "
                f"consumer_groups[{consumer_groups}] "
                f"heartbeats/s={(beats - beats_then) / max(now - then, 1e-9):.0f} "
                f"consumer_heartbeats={counters.get('consumer_heartbeats', 0)} "
                f"joins={counters['joins']} requests={counters['requests']} "
                f"p99_ms={p99:.2f}")

    def metrics_text(self) -> str:
        """The status line's counters in Prometheus' text format (version 0.0.4)."""
        counters = self.counters()
        lines = [
            "# HELP fastcoord_connections Open client connections.",
            "# TYPE fastcoord_connections gauge",
            f"fastcoord_connections {len(self.connections)}",
            "# HELP fastcoord_groups Classic-protocol groups by state.",
            "# TYPE fastcoord_groups gauge",
        ]
        states = self._groups_by_state()
        for state in ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"):
            lines.append(f'fastcoord_groups{{state="{state}"}} {states.get(state, 0)}')
        lines += ["# HELP fastcoord_consumer_groups Consumer-protocol (KIP-848) groups by state.",
                  "# TYPE fastcoord_consumer_groups gauge"]
        states = self._groups_by_state("consumer")
        for state in ("Empty", "Assigning", "Reconciling", "Stable"):
            lines.append(f'fastcoord_consumer_groups{{state="{state}"}} {states.get(state, 0)}')
        for name, key, text in (("requests", "requests", "Requests handled."),
                                ("heartbeats", "heartbeats", "Heartbeat requests."),
                                ("heartbeats_fast_path", "heartbeats_fast_path",
                                 "Heartbeat requests answered by the wire fast path."),
                                ("heartbeats_read_path", "heartbeats_read_path",
                                 "Of those, the ones answered a whole read at a time."),
                                ("joins", "joins", "JoinGroup requests."),
                                ("consumer_heartbeats", "consumer_heartbeats",
                                 "ConsumerGroupHeartbeat requests (KIP-848)."),
                                ("consumer_heartbeats_fast_path",
                                 "consumer_heartbeats_fast_path",
                                 "Of those, the steady ones answered by the wire fast path.")):
            lines += [f"# HELP fastcoord_{name}_total {text}",
                      f"# TYPE fastcoord_{name}_total counter",
                      f"fastcoord_{name}_total {counters[key]}"]
        lane = self.lane
        for name, kind, value, text in (
                ("lane_connections", "gauge", len(lane) if lane is not None else 0,
                 "Connections the heartbeat lane serves (heartbeat-only reads answered "
                 "from C, off the event loop's reading)."),
                ("lane_reads_total", "counter", lane.reads if lane is not None else 0,
                 "Reads the heartbeat lane answered (their heartbeats count in "
                 "heartbeats_read_path)."),
                ("lane_polls_total", "counter", lane.polls if lane is not None else 0,
                 "Batches of ready connections the lane served (its reads divided by "
                 "this: connections per batch)."),
                ("lane_handbacks_total", "counter", lane.handbacks if lane is not None else 0,
                 "Times a connection left the lane (a read with another request, a cut "
                 "frame, an error or end of stream).")):
            lines += [f"# HELP fastcoord_{name} {text}", f"# TYPE fastcoord_{name} {kind}",
                      f"fastcoord_{name} {value}"]
        lines += ["# HELP fastcoord_request_latency_p99_seconds 99th percentile of the "
                  "request latency (receipt to response) since the last status line.",
                  "# TYPE fastcoord_request_latency_p99_seconds gauge",
                  f"fastcoord_request_latency_p99_seconds {self._p99_seconds():.6f}"]
        # The collector's passes: a full (generation 2) pass walks every live member's
        # objects and stops the loop meanwhile, so its count explains latency spikes.
        lines += ["# HELP fastcoord_gc_collections_total Garbage collector passes by "
                  "generation.", "# TYPE fastcoord_gc_collections_total counter"]
        for generation, stats in enumerate(gc.get_stats()):
            lines.append(f'fastcoord_gc_collections_total{{generation="{generation}"}} '
                         f'{stats["collections"]}')
        if self.request_log is not None:
            lines += ["# HELP fastcoord_request_log_dropped_lines_total Request-log lines "
                      "the disk would not take (full or failing).",
                      "# TYPE fastcoord_request_log_dropped_lines_total counter",
                      f"fastcoord_request_log_dropped_lines_total "
                      f"{getattr(self.request_log, 'dropped', 0)}"]
        if self.store is not None:
            lines += ["# HELP fastcoord_store_loaded 1 once every owned shard is loaded.",
                      "# TYPE fastcoord_store_loaded gauge",
                      f"fastcoord_store_loaded {int(self.loaded is not None)}"]
        return "\n".join(lines) + "\n"

    async def _metrics_client(self, reader, writer) -> None:
        """A minimal HTTP/1.x responder: GET /metrics (or /) gets the text format."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            parts = head.split(b"\r\n", 1)[0].split()
            if len(parts) >= 2 and parts[0] == b"GET" and \
                    parts[1].split(b"?", 1)[0] in (b"/metrics", b"/"):
                status, body = "200 OK", self.metrics_text().encode()
            else:
                status, body = "404 Not Found", b"try GET /metrics\n"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; "
                         f"charset=utf-8\r\nContent-Length: {len(body)}\r\n"
                         f"Connection: close\r\n\r\n".encode() + body)
            await asyncio.wait_for(writer.drain(), 5)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError):
            pass
        except Exception:
            log.exception("metrics request failed")
        finally:
            writer.close()

    def _status(self) -> None:
        try:
            print(self.status_line(), flush=True)
        except Exception:
            rate_log.error("status", "status line failed", exc_info=True)
        finally:
            if not self._stopped:
                self._status_handle = self.loop.call_later(self.config.status_interval_s,
                                                           self._status)

    # -- the request budget and the connection limit -----------------------------------------
    def reserve(self, conn: Connection, size: int) -> bool:
        """Reserve `size` bytes of queued_max_request_bytes for `conn`'s partial frame,
        if they fit (a frame alone may take more: it is never refused for its size)."""
        if self.queued_bytes and self.queued_bytes + size > self.config.queued_max_request_bytes:
            return False
        self.queued_bytes += size
        conn._reserved = size
        self.budget_holders[conn] = None
        return True

    def release(self, conn: Connection) -> None:
        """`conn`'s frame completed or it closed: give back what it holds or stop its
        wait, then let the waiting frames that now fit be read, in their order."""
        self.budget_waiters.pop(conn, None)
        conn._wanted = 0
        if not conn._reserved:
            return
        self.queued_bytes -= conn._reserved
        conn._reserved = 0
        del self.budget_holders[conn]
        while self.budget_waiters:
            waiter = next(iter(self.budget_waiters))
            if not self.reserve(waiter, waiter._wanted):
                break
            del self.budget_waiters[waiter]
            waiter._wanted = 0
            waiter._sync_reading()

    def _unstick_budget(self, now: float) -> None:
        """Frames that never complete must not hold the budget for ever: once the
        first waiter has waited idle_grace_ms, close the connection whose partial frame
        has held its reservation longest."""
        if not self.budget_waiters or not self.budget_holders:
            return
        waiter = next(iter(self.budget_waiters))
        if now - waiter._waiting_since < self.config.idle_grace_ms / 1000.0:
            return
        holder = next(iter(self.budget_holders))
        rate_log.warning("request-budget-close", "%s: its %d-byte frame held the request "
                        "budget while others waited %.0f ms; closing", holder.peer,
                        holder._reserved, (now - waiter._waiting_since) * 1000)
        holder.close()

    def _idle_connections(self, cutoff: float):
        """The open connections nothing was read from since `cutoff`, parked ones
        excepted. The lane answers for its connections in one C pass; the loop below
        skips them (a Python call each would stall the loop in proportion to their
        number)."""
        idle = self.lane.idle(cutoff) if self.lane is not None else []
        idle += [conn for conn in self.connections
                 if conn._lane_fd < 0 and conn.last_active < cutoff]
        return [conn for conn in idle if not conn.closing and not conn.parked]

    def make_room(self) -> bool:
        """At max_connections: close the connection idle longest, if idle for
        idle_grace_ms, so that a new one can be admitted; False if none is."""
        now = time.monotonic()
        idle = self._idle_connections(now - self.config.idle_grace_ms / 1000.0)
        if not idle:
            return False
        victim = min(idle, key=Connection.idle_since)
        rate_log.info("max-connections-idle", "%s: idle for %.0f ms at %d connections, the "
                     "maximum; closing it for a new one", victim.peer,
                     (now - victim.idle_since()) * 1000, self.config.max_connections)
        victim.close()
        return True

    # -- time ------------------------------------------------------------------------------
    # Each periodic task reschedules itself whatever happens in it: an exception (a full
    # disk under the request log) is logged, rate limited, and never stops the task.
    def _tick(self) -> None:
        """Advance time: fire due coordinator timers and delayed fetches."""
        try:
            self.coord.expire_due()
            now = self.clock.now_ms()
            self.timer.advance_to(now)
            self._retention_slice(now)
        except Exception:
            rate_log.error("tick", "advancing time failed", exc_info=True)
        finally:
            if not self._stopped:
                self._tick_handle = self.loop.call_later(self.config.tick_ms / 1000.0,
                                                         self._tick)

    def _retention_slice(self, now: int) -> None:
        """Once the check interval is due, the offsets retention pass runs one slice
        of `retention_slice_groups` groups a tick until it is done, so that a tick
        stays short whatever the number of groups (the next pass is due one interval
        after this one started)."""
        if not self._retention_in_pass:
            if now < self._next_retention_ms:
                return
            self._next_retention_ms = (
                now + self.config.coordinator.offsets_retention_check_interval_ms)
            self._retention_in_pass = True
        try:
            done = self.coord.cleanup_group_metadata_step(self.retention_slice_groups)[2]
        except Exception:
            self._retention_in_pass = False     # (tried again the next interval)
            raise
        self._retention_in_pass = not done

    def _sweep(self) -> None:
        """Close idle connections (nothing received for idle_timeout_ms), unstick the
        request budget and flush the request log."""
        limit = self.config.idle_timeout_ms / 1000.0
        try:
            now = time.monotonic()
            for conn in self._idle_connections(now - limit):
                log.info("%s: idle for %.0f ms; closing", conn.peer,
                         (now - conn.idle_since()) * 1000)
                conn.close()
            self._unstick_budget(now)
            if self.request_log is not None:
                self.request_log.flush()
        except Exception:
            rate_log.error("sweep", "the periodic sweep failed", exc_info=True)
        finally:
            if not self._stopped:
                self._sweep_handle = self.loop.call_later(min(1.0, limit / 4), self._sweep)

    # -- shutdown ----------------------------------------------------------------------------
    async def shutdown(self, drain_timeout: float = 2.0) -> None:
        """Stop accepting, answer every parked request (joins and syncs get
        NOT_COORDINATOR as when a broker resigns, fetches their empty answer), write
        what is queued and close every connection."""
        if self._stopped:
            return
        self._stopped = True
        if self._server is not None:
            self._server.close()
        if self._metrics_server is not None:
            self._metrics_server.close()
        for handle in (self._tick_handle, self._sweep_handle, self._status_handle):
            if handle is not None:
                handle.cancel()
        if self.store is not None:
            # Finish (fsync) every pending write and answer its request before the
            # connections close; later writes fail with NOT_COORDINATOR.
            if self._load_task is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(self._load_task), 30)
                except Exception:
                    log.exception("loading did not finish before shutdown")
            await self.loop.run_in_executor(None, self.store.close)
            for _ in range(3):
                await asyncio.sleep(0)      # run the completions handed to the loop
        for shard in range(self.coord.config.num_shards):
            if self.coord.owns_shard(shard):
                self.coord.unload_shard(shard)
        self.coord.active = False
        for op in self.fetch_purgatory.cancel_for_key("fetch"):
            op.force_complete()
        for conn in list(self.connections):
            conn._flush()
            conn.close()
        deadline = time.monotonic() + drain_timeout
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        if self.lane is not None:
            self.loop.remove_reader(self.lane.fileno())
            self.lane.close()
            self.lane = None
        if self._server is not None:
            await self._server.wait_closed()
        if self.request_log is not None:
            self.request_log.close()


def _hold_standard_descriptors() -> None:
    """Open /dev/null on descriptors 0-2 where they are closed (a server started with
    `<&-`, or by a parent that closed them): uvloop's libuv aborts the process when it
    closes a socket that got one of those numbers."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            held = os.open(os.devnull, os.O_RDWR)   # the lowest free number: this one
            if held != fd:
                os.close(held)


async def serve(config: ServerConfig, *, ready=None, request_log=None) -> int:
    """Run until SIGTERM or SIGINT, then shut down cleanly. `ready(server)` is called
    once listening."""
    _hold_standard_descriptors()
    server = CoordinatorServer(config, request_log=request_log)
    await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready(server)
    try:
        await stop.wait()
    finally:
        log.info("shutting down: %d connections", len(server.connections))
        await server.shutdown()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0

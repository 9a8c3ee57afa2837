"""`fastcoord loadgen`: heartbeat load against a `fastcoord serve` on loopback.

Opens `connections` TCP connections, makes `members` real group members in `groups`
groups with real protocol bytes (kio-encoded JoinGroup/SyncGroup: MEMBER_ID_REQUIRED,
rejoin, the leader's assignment, followers' syncs; members spread round-robin over
the connections), then, for `duration_s`, keeps `pipeline` Heartbeat requests in
flight on every connection, each connection cycling through its members. It measures
heartbeats answered per second and the latency of each (send to response, in the
client) and returns / prints a JSON summary with p50/p99/p999.

With `protocol="consumer"` the members are Kafka 4's consumer group protocol's
(KIP-848) instead: each joins with a ConsumerGroupHeartbeat v1 (its member id made
here, unique to the run, subscribed to `topic`), then every member heartbeats, echoing
its assignment back as its owned partitions, round after round until a round changes
no member's epoch or assignment and a steady heartbeat (member id and epoch, every
optional field null) answers NONE for every member: the groups are Stable. The
measured requests are those steady heartbeats. The server's consumer session timeout
(`--group-consumer-session-timeout-ms`, 45 s by default) must outlast any pause between
setup and measurement, or the members are gone.

Heartbeat frames are encoded by kio once per member; only the correlation id is
patched per request (Kafka's header layout: size, api key, api version, correlation
id). The response's correlation id and error code are read at their fixed offsets;
some responses are also decoded by kio and compared (every 1024th with the asyncio
engine; the first one, and the first with an error, with the C engine). Both engines
count and time the heartbeats sent in the measured window (`sent`), every one of which
must be answered in the drain after it (`heartbeats`).

Two engines run the measurement (setup is always asyncio):

- "c" (the default where it is built: fastcoord/loadgen/_native/engine.pyx, Linux): the
  sockets are handed to one C loop with the GIL released (epoll, non-blocking
  send/recv, the open loop paced on CLOCK_MONOTONIC: each send's lag behind its schedule
  is counted, engine_stats late_sends and max_lag_ms). Its own CPU per heartbeat is small
  next to the server's (see its docstring), so the latency it reports is the server's.
  The event loop is blocked meanwhile: the server under test must not share it.
- "python": the asyncio protocol below (the readable version, and the fallback). It
  saturates its own core at high rates, sends the open loop in bursts every
  0.5 ms, and its latencies include its own queueing at high rates.
"""
from __future__ import annotations

import asyncio
import collections
import datetime
import gc
import json
import struct
import time
import uuid
from typing import Dict, List, Optional

from fastcoord._twins import NO_EXTENSIONS
from fastcoord.server.protocol import decode_response, encode_request

try:
    if NO_EXTENSIONS:
        raise ImportError("FASTCOORD_NO_EXTENSIONS is set")
    from ._native.engine import run_heartbeats as _run_heartbeats
except ImportError as exc:       # not built (or not Linux): the asyncio engine only
    _run_heartbeats = None
    _NATIVE_ERROR: Optional[ImportError] = exc
else:
    _NATIVE_ERROR = None

ENGINES = ("c", "python")
DEFAULT_ENGINE = "c" if _run_heartbeats is not None else "python"
DRAIN_S = 10.0                   # in-flight heartbeats must be answered this soon after a run

JOIN, SYNC, HEARTBEAT = 11, 14, 12
JOIN_VERSION, SYNC_VERSION = 7, 5
CONSUMER_HEARTBEAT, CONSUMER_HEARTBEAT_VERSION = 68, 1
PROTOCOLS = ("classic", "consumer")
MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS, COORDINATOR_LOAD_IN_PROGRESS = 79, 27, 14
UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH = 25, 110
SETTLE_ROUNDS = 100             # consumer protocol: heartbeat rounds before giving up
_I32 = struct.Struct(">i")
_H16 = struct.Struct(">h")
_SIZE = struct.Struct(">i")
_NO_CORRELATION = bytes(4)      # the C engine writes each request's own id there


def _subscription(topic: str) -> bytes:
    """ConsumerProtocol Subscription v0: version, [topics], user data (null)."""
    t = topic.encode()
    return _H16.pack(0) + _I32.pack(1) + _H16.pack(len(t)) + t + _I32.pack(-1)


# ConsumerProtocol Assignment v0 with no partitions: version, [], user data (null).
_ASSIGNMENT = _H16.pack(0) + _I32.pack(0) + _I32.pack(-1)


class LoadgenError(RuntimeError):
    pass


def _topic_partitions(assignment) -> list:
    """A ConsumerGroupHeartbeat answer's assignment as the owned partitions a request
    carries (by topic id, as given)."""
    if assignment is None:
        return []
    return [{"topic_id": tp.topic_id, "partitions": list(tp.partitions)}
            for tp in assignment.topic_partitions]


def _runq_wait_s(path: str = "/proc/thread-self/schedstat") -> Optional[float]:
    """Seconds the task has spent runnable but waiting for a CPU (Linux schedstat: time
    on CPU, time waiting on a run queue, timeslices), or None where there is none. On a
    shared machine this says how much of a run's latency is other processes' doing."""
    try:
        with open(path) as f:
            return int(f.read().split()[1]) * 1e-9
    except (OSError, ValueError, IndexError):
        return None


def resolve_engine(engine: Optional[str]) -> str:
    """None or "auto": the C engine where it is built, else "python"."""
    if engine is None or engine == "auto":
        return DEFAULT_ENGINE
    if engine not in ENGINES:
        raise ValueError(f"engine must be 'auto', 'c' or 'python', got {engine!r}")
    if engine == "c" and _run_heartbeats is None:
        raise LoadgenError(f"the C load generator engine is not built ({_NATIVE_ERROR}); "
                           "build the extensions (pip install -e .) or use engine='python'")
    return engine


class _Conn(asyncio.Protocol):
    """One connection: request/response calls during setup, then pipelined heartbeats."""

    def __init__(self, gen: "Loadgen", index: int) -> None:
        self.gen = gen
        self.index = index
        self.transport: Optional[asyncio.Transport] = None
        self._buf = bytearray()
        self._corr = 0
        self._calls: Dict[int, tuple] = {}
        self.closed: asyncio.Future = asyncio.get_running_loop().create_future()
        # heartbeat phase
        self.beating = False
        self.members: List[str] = []        # the member ids whose heartbeats it sends
        self.frames: List[tuple] = []       # theirs: (prefix, suffix) around the correlation id
        self._next = 0
        # (correlation id, send time, sent in the measured window)
        self._sent: collections.deque = collections.deque()
        self.inflight = 0

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        for fut, _, _ in self._calls.values():
            if not fut.done():
                fut.set_exception(LoadgenError(f"connection {self.index} closed: {exc}"))
        self._calls.clear()
        if not self.closed.done():
            self.closed.set_result(exc)
        if self.beating and not self.gen.stopping:
            self.gen.lost += 1

    def call(self, api_key: int, version: int, body) -> asyncio.Future:
        self._corr += 1
        fut = asyncio.get_running_loop().create_future()
        self._calls[self._corr] = (fut, api_key, version)
        self.transport.write(encode_request(api_key, version, self._corr, body,
                                            client_id="fastcoord-loadgen"))
        return fut

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos, end = 0, len(buf)
        beats = 0
        now = time.perf_counter()
        gen = self.gen
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if end - pos - 4 < size:
                break
            start = pos + 4
            pos = start + size
            (corr,) = _I32.unpack_from(buf, start)
            if self.beating and self._sent and corr == self._sent[0][0]:
                _, sent_at, measured = self._sent.popleft()
                self.inflight -= 1
                (err,) = _H16.unpack_from(buf, start + gen.error_offset)
                if measured:
                    gen.record(now - sent_at, err)
                if gen.checked % 1024 == 0:
                    gen.check(bytes(buf[start:pos]), err)
                gen.checked += 1
                beats += 1
                continue
            call = self._calls.pop(corr, None)
            if call is None:
                gen.fail(LoadgenError(f"connection {self.index}: unexpected correlation id {corr}"))
                return
            fut, api_key, version = call
            if not fut.done():
                try:
                    fut.set_result(decode_response(api_key, version, bytes(buf[start:pos]))[1])
                except Exception as exc:   # a response kio cannot decode is a server bug
                    fut.set_exception(exc)
        if pos:
            del buf[:pos]
        if beats and self.beating and not gen.stopping and gen.rate is None:
            self.send_beats(beats)

    def send_beats(self, n: int) -> None:
        frames = self.frames
        count = len(frames)
        nxt = self._next
        corr = self._corr
        sent = self._sent
        now = time.perf_counter()
        measured = self.gen.measuring
        if measured:
            self.gen.sent += n
        out = []
        for _ in range(n):
            corr += 1
            prefix, suffix = frames[nxt]
            out.append(prefix)
            out.append(_I32.pack(corr))
            out.append(suffix)
            sent.append((corr, now, measured))
            nxt += 1
            if nxt == count:
                nxt = 0
        self._corr = corr
        self._next = nxt
        self.inflight += n
        self.transport.write(b"".join(out))


class Loadgen:
    """`async with Loadgen(...) as gen:` connects and sets up every member; then
    `await gen.measure(duration_s, warmup_s, rate)` as often as wanted."""

    def __init__(self, host: str = "127.0.0.1", port: int = 9092, *, connections: int = 100,
                 members: int = 1000, groups: int = 100, pipeline: int = 4,
                 heartbeat_version: int = 4, session_timeout_ms: int = 300_000,
                 setup_timeout_s: float = 600.0, topic: str = "loadgen",
                 protocol: str = "classic") -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be 'classic' or 'consumer', got {protocol!r}")
        if connections < 1 or members < 1 or groups < 1 or pipeline < 1:
            raise ValueError("connections, members, groups and pipeline must be >= 1")
        if members < connections:
            raise ValueError("members must be >= connections (each connection beats for "
                             "at least one member)")
        if groups > members:
            raise ValueError("groups must be <= members")
        if not 0 <= heartbeat_version <= 4:
            raise ValueError("heartbeat_version must be in 0..4")
        self.host, self.port = host, port
        self.connections, self.members, self.groups = connections, members, groups
        self.pipeline = pipeline
        self.hb_version = heartbeat_version
        self.session_timeout_ms = session_timeout_ms
        self.setup_timeout_s = setup_timeout_s
        self.topic = topic
        self.protocol = protocol
        # the measured request: classic Heartbeat (of `heartbeat_version`), or
        # ConsumerGroupHeartbeat v1
        if protocol == "consumer":
            self.api_key, self.api_version = CONSUMER_HEARTBEAT, CONSUMER_HEARTBEAT_VERSION
            flexible = has_throttle = True        # flexible from v0
        else:
            self.api_key, self.api_version = HEARTBEAT, heartbeat_version
            flexible, has_throttle = heartbeat_version >= 4, heartbeat_version >= 1
        # response: correlation id, [header tags], [throttle_time_ms], error_code
        self.error_offset = 4 + (1 if flexible else 0) + (4 if has_throttle else 0)
        self.conns: List[_Conn] = []
        self.measuring = False
        self.stopping = False
        self.latencies: List[float] = []
        self.errors: Dict[int, int] = collections.Counter()
        self.answered = 0
        self.sent = 0                 # heartbeats sent in the measured window
        self.checked = 0
        self.lost = 0
        self._failure: Optional[BaseException] = None
        self.generation: Dict[str, int] = {}      # member id -> generation (member epoch)
        self.owned: Dict[str, list] = {}          # consumer: member id -> its assignment
        self.member_group: Dict[str, str] = {}
        self.rejoins = 0
        self.setup_rounds = 0           # consumer: heartbeat rounds until Stable
        self.rate: Optional[float] = None
        # group names unique to this run: a second run against the same server does not
        # join (and wait on) the groups of the first, whose members never left
        self.run_id = uuid.uuid4().hex[:8]
        self.unsent = 0
        self.elapsed = 0.0
        self.setup_s = 0.0
        self.engine = DEFAULT_ENGINE
        self.engine_stats: dict = {}
        self.cpu_s = 0.0
        self.runq_wait_s: Optional[float] = None
        self._broken: Optional[str] = None     # why the connections cannot be used again

    # -- bookkeeping -------------------------------------------------------------------------
    def record(self, latency: float, err: int) -> None:
        """The answer to a heartbeat sent in the measured window."""
        self.latencies.append(latency)
        self.answered += 1
        if err:
            self.errors[err] += 1

    def check(self, frame: bytes, err: int) -> None:
        _, resp = decode_response(self.api_key, self.api_version, frame)
        if int(resp.error_code) != err:
            self.fail(LoadgenError(f"error code read at offset {self.error_offset} ({err}) "
                                   f"differs from kio's ({int(resp.error_code)})"))

    def fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc

    async def __aenter__(self) -> "Loadgen":
        started = time.perf_counter()
        try:
            await asyncio.wait_for(self.connect(), self.setup_timeout_s)
            await asyncio.wait_for(self.setup(), self.setup_timeout_s)
        except BaseException:
            await self.close()
            raise
        self.setup_s = time.perf_counter() - started
        # The members' setup objects are long-lived: keep the collector from walking
        # them again and again during the measurement (pauses that look like latency).
        gc.collect()
        gc.freeze()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- setup -------------------------------------------------------------------------------
    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        sem = asyncio.Semaphore(200)

        async def one(i: int) -> _Conn:
            async with sem:
                _, conn = await loop.create_connection(lambda: _Conn(self, i), self.host,
                                                       self.port)
                return conn
        self.conns = list(await asyncio.gather(*(one(i) for i in range(self.connections))))

    async def _join_member(self, conn: _Conn, group: str, member_id: str) -> tuple:
        body = {"group_id": group, "session_timeout": self.session_timeout_ms,
                "rebalance_timeout": self.session_timeout_ms, "member_id": member_id,
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": _subscription(self.topic)}],
                "reason": None}
        for _ in range(100):
            resp = await conn.call(JOIN, JOIN_VERSION, body)
            err = int(resp.error_code)
            if err == MEMBER_ID_REQUIRED:
                body["member_id"] = resp.member_id
                continue
            if err == COORDINATOR_LOAD_IN_PROGRESS:
                await asyncio.sleep(0.05)
                continue
            if err:
                raise LoadgenError(f"JoinGroup {group}: error {err}")
            return resp
        raise LoadgenError(f"JoinGroup {group}: no answer after 100 attempts")

    async def _member(self, conn: _Conn, group: str, member_id: str = "") -> None:
        """Join (and rejoin until a sync succeeds); record the member's generation."""
        for _ in range(50):
            joined = await self._join_member(conn, group, member_id)
            member_id = joined.member_id
            assignments = []
            if joined.leader == member_id:
                assignments = [{"member_id": m.member_id, "assignment": _ASSIGNMENT}
                               for m in joined.members]
            synced = await conn.call(SYNC, SYNC_VERSION, {
                "group_id": group, "generation_id": joined.generation_id,
                "member_id": member_id, "group_instance_id": None,
                "protocol_type": "consumer", "protocol_name": joined.protocol_name,
                "assignments": assignments})
            err = int(synced.error_code)
            if err == 0:
                self.generation[member_id] = joined.generation_id
                self.member_group[member_id] = group
                conn.members.append(member_id)
                return
            if err not in (REBALANCE_IN_PROGRESS, 22, 25):
                raise LoadgenError(f"SyncGroup {group}: error {err}")
            if err == 25:
                member_id = ""
            self.rejoins += 1
        raise LoadgenError(f"member of {group} never completed a rebalance")

    async def setup(self) -> None:
        """Make every member (of the protocol asked for) and encode its heartbeat."""
        if self.protocol == "consumer":
            await self._setup_consumer()
        else:
            await self._setup_classic()
        # each connection's heartbeat frames, encoded once by kio
        for conn in self.conns:
            conn.frames = [self.heartbeat_frame(mid) for mid in conn.members]

    async def _setup_classic(self) -> None:
        """Every group's members join together (groups in waves, so that a group's
        initial rebalance delay sees all of them), then all members are checked with one
        heartbeat each: whoever sees a rebalance rejoins, until every member is in a
        stable generation."""
        by_group: Dict[int, List[int]] = collections.defaultdict(list)
        for m in range(self.members):
            by_group[m % self.groups].append(m)
        wave = max(1, 20_000 // max(1, self.members // self.groups))
        sem = asyncio.Semaphore(wave)

        async def group(g: int) -> None:
            async with sem:
                await asyncio.gather(*(self._member(self.conns[m % self.connections],
                                                    f"loadgen-{self.run_id}-{g}")
                                     for m in by_group[g]))
        await asyncio.gather(*(group(g) for g in by_group))
        for _ in range(20):
            stale = await self._check_generations()
            if not stale:
                break
            await asyncio.gather(*(self._member(conn, self.member_group[mid], mid)
                                   for conn, mid in stale))
        else:
            raise LoadgenError("groups did not settle")

    def heartbeat_frame(self, member_id: str, generation: Optional[int] = None) -> tuple:
        """The member's Heartbeat (or steady ConsumerGroupHeartbeat) request as (prefix,
        suffix) around the correlation id (size, api key, api version | correlation id |
        the rest), in its generation (member epoch) unless another is given."""
        if generation is None:
            generation = self.generation[member_id]
        if self.protocol == "consumer":
            body = self._steady_body(member_id, generation)
        else:
            body = {"group_id": self.member_group[member_id], "generation_id": generation,
                    "member_id": member_id, "group_instance_id": None}
        data = encode_request(self.api_key, self.api_version, 0, body,
                              client_id="fastcoord-loadgen")
        return data[:8], data[12:]

    # -- setup, consumer group protocol ----------------------------------------------------
    def _steady_body(self, member_id: str, epoch: int) -> dict:
        """A heartbeat that changes nothing: member id and epoch, every optional field
        null (rebalance timeout -1: kio's default)."""
        return {"group_id": self.member_group[member_id], "member_id": member_id,
                "member_epoch": epoch, "topic_partitions": None}

    async def _consumer_call(self, conn: _Conn, member_id: str, body: dict):
        """One ConsumerGroupHeartbeat, retried while the group's shard is loading."""
        for _ in range(100):
            resp = await conn.call(CONSUMER_HEARTBEAT, CONSUMER_HEARTBEAT_VERSION, body)
            if int(resp.error_code) != COORDINATOR_LOAD_IN_PROGRESS:
                return resp
            await asyncio.sleep(0.05)
        raise LoadgenError(f"ConsumerGroupHeartbeat {member_id}: coordinator still loading")

    async def _consumer_join(self, conn: _Conn, member_id: str) -> None:
        """Join (epoch 0, subscribed to the topic, owning nothing); record the epoch and
        assignment answered."""
        resp = await self._consumer_call(conn, member_id, {
            "group_id": self.member_group[member_id], "member_id": member_id,
            "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout": datetime.timedelta(milliseconds=self.session_timeout_ms),
            "subscribed_topic_names": [self.topic], "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": []})
        err = int(resp.error_code)
        if err:
            raise LoadgenError(f"ConsumerGroupHeartbeat join of {member_id}: error {err} "
                               f"({resp.error_message})")
        self.generation[member_id] = resp.member_epoch
        self.owned[member_id] = _topic_partitions(resp.assignment)

    async def _consumer_beat(self, conn: _Conn, member_id: str, steady: bool) -> bool:
        """One heartbeat of the member, owning its assignment (or a steady one): True if
        its epoch or assignment changed (or it had to rejoin)."""
        epoch = self.generation[member_id]
        body = self._steady_body(member_id, epoch)
        if not steady:
            body["topic_partitions"] = self.owned[member_id]
        resp = await self._consumer_call(conn, member_id, body)
        err = int(resp.error_code)
        if err in (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH):
            self.rejoins += 1                   # (a session that timed out): join again
            await self._consumer_join(conn, member_id)
            return True
        if err:
            raise LoadgenError(f"ConsumerGroupHeartbeat {member_id} (epoch {epoch}): "
                               f"error {err} ({resp.error_message})")
        changed = resp.member_epoch != epoch
        self.generation[member_id] = resp.member_epoch
        if resp.assignment is not None:
            owned = _topic_partitions(resp.assignment)
            changed = changed or owned != self.owned[member_id]
            self.owned[member_id] = owned
        return changed

    async def _setup_consumer(self) -> None:
        """Every member joins (all at once: a join does not wait for the others), then
        heartbeat rounds until the groups are Stable (see the module docstring)."""
        members = []
        for m in range(self.members):
            mid = f"loadgen-{self.run_id}-m{m}"
            self.member_group[mid] = f"loadgen-{self.run_id}-{m % self.groups}"
            conn = self.conns[m % self.connections]
            conn.members.append(mid)
            members.append((conn, mid))
        await asyncio.gather(*(self._consumer_join(conn, mid) for conn, mid in members))
        for _ in range(SETTLE_ROUNDS):
            self.setup_rounds += 1
            changed = await asyncio.gather(*(self._consumer_beat(conn, mid, False)
                                             for conn, mid in members))
            if any(changed):
                continue
            changed = await asyncio.gather(*(self._consumer_beat(conn, mid, True)
                                             for conn, mid in members))
            if not any(changed):
                return
        raise LoadgenError(f"consumer groups not Stable after {SETTLE_ROUNDS} rounds")

    async def _check_generations(self) -> list:
        stale = []

        async def one(conn: _Conn, mid: str) -> None:
            resp = await conn.call(HEARTBEAT, self.hb_version, {
                "group_id": self.member_group[mid], "generation_id": self.generation[mid],
                "member_id": mid, "group_instance_id": None})
            if int(resp.error_code) != 0:
                stale.append((conn, mid))
        await asyncio.gather(*(one(conn, mid) for conn in self.conns for mid in conn.members))
        for conn, mid in stale:
            conn.members.remove(mid)
        return stale

    # -- the measurement -----------------------------------------------------------------------
    async def measure(self, duration_s: float, warmup_s: float = 0.0,
                      rate: Optional[float] = None, engine: Optional[str] = None) -> dict:
        """One measurement on the connections and members set up: closed loop
        (`rate` None: every connection keeps `pipeline` heartbeats in flight, a response
        sends the next) or open loop (`rate` heartbeats/s in all, spread round-robin over
        the connections, at most `pipeline` in flight on each; what cannot be sent
        because every connection is full counts as `unsent`). `engine`: "c", "python"
        or None/"auto" (C where built; see the module docstring)."""
        engine = resolve_engine(engine)
        if self._broken is not None:
            raise LoadgenError(f"the connections are unusable after an earlier failure: "
                               f"{self._broken}")
        self.engine = engine
        self.engine_stats = {}
        self.latencies = []
        self.errors = collections.Counter()
        self.answered = 0
        self.sent = 0
        self.unsent = 0
        self.rate = rate
        cpu = time.thread_time()
        waited = _runq_wait_s()
        if engine == "c":
            await self._measure_c(duration_s, warmup_s, rate)
        else:
            await self._measure_python(duration_s, warmup_s, rate)
        self.cpu_s = time.thread_time() - cpu
        now_waited = _runq_wait_s()
        self.runq_wait_s = (None if waited is None or now_waited is None
                            else now_waited - waited)
        return self.summary()

    async def _measure_c(self, duration_s: float, warmup_s: float,
                         rate: Optional[float]) -> None:
        """Hand the sockets to the C engine for the run, then give them back to asyncio."""
        await self._quiesce()
        frames = [[b"".join((prefix, _NO_CORRELATION, suffix)) for prefix, suffix in c.frames]
                  for c in self.conns]
        transports = [c.transport for c in self.conns]
        # Paused, the transports read nothing more: the engine's epoll alone sees the
        # sockets' input until they resume.
        for transport in transports:
            transport.pause_reading()
        try:
            fds = [t.get_extra_info("socket").fileno() for t in transports]
            # Called here, not in an executor: the loop has nothing else to do, and
            # Ctrl-C reaches the engine (it checks for signals while it runs).
            result = _run_heartbeats(fds, frames, pipeline=self.pipeline, rate=rate,
                                     duration_s=duration_s, warmup_s=warmup_s,
                                     drain_s=DRAIN_S)
        except BaseException as exc:
            self._broken = f"the C engine stopped: {exc!r}"   # requests may be in flight
            raise
        finally:
            for transport in transports:
                if not transport.is_closing():
                    transport.resume_reading()
        if result["failure"] is not None:
            # Requests or half a response may be left on the sockets: they cannot go back
            # to the asyncio protocol.
            self._broken = result["failure"]
            raise LoadgenError(f"C engine: {result['failure']}")
        self.latencies = result["latencies"]
        self.answered = result["answered"]
        self.sent = result["sent"]
        self.elapsed = result["elapsed_s"]
        self.unsent = result["unsent"]
        self.errors = collections.Counter(result["errors"])
        for frame in (result["sample_response"], result["error_sample_response"]):
            if frame is not None:
                self.check(frame, _H16.unpack_from(frame, self.error_offset)[0])
        self.engine_stats = {
            "sends": result["sends"], "recvs": result["recvs"],
            "blocked_sends": result["blocked_sends"], "polls": result["polls"],
            "sleeps": result["sleeps"], "late_sends": result["late_sends"],
            "max_lag_ms": round(result["max_lag_s"] * 1000.0, 3),
            "cpu_user_s": round(result["cpu_user_s"], 3),
            "cpu_system_s": round(result["cpu_system_s"], 3),
        }
        if self._failure is not None:
            raise self._failure

    async def _quiesce(self) -> None:
        """Wait until no setup call or heartbeat is in flight, nothing is half-read and
        nothing waits in asyncio's write buffers: the C engine starts with empty FIFOs,
        and bytes left to asyncio would be lost to it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_S
        while True:
            closed = sum(1 for c in self.conns if c.closed.done())
            if closed or self.lost:
                raise LoadgenError(f"{max(closed, self.lost)} connections closed by the server")
            busy = [c for c in self.conns if c._calls or c.inflight or c._buf
                    or c.transport.get_write_buffer_size()]
            if not busy:
                return
            if loop.time() >= deadline:
                raise LoadgenError(f"{len(busy)} connections still busy {DRAIN_S:g} s "
                                   "before the C engine could take them over")
            await asyncio.sleep(0.001)

    async def _measure_python(self, duration_s: float, warmup_s: float,
                              rate: Optional[float]) -> None:
        """The asyncio engine: _Conn.send_beats/data_received, paced by _pace."""
        loop = asyncio.get_running_loop()
        self.stopping = False
        for conn in self.conns:
            conn.beating = True
        pacer = None
        if rate is None:
            for conn in self.conns:
                conn.send_beats(self.pipeline)
        else:
            pacer = loop.create_task(self._pace(rate))
        await asyncio.sleep(warmup_s)
        self.measuring = True
        started = time.perf_counter()
        await asyncio.sleep(duration_s)
        self.measuring = False
        self.elapsed = time.perf_counter() - started
        self.stopping = True
        if pacer is not None:
            await pacer
        deadline = loop.time() + 10
        while any(c.inflight for c in self.conns) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        if any(c.inflight for c in self.conns):
            raise LoadgenError("heartbeats still unanswered 10 s after the run")
        if self.lost:
            raise LoadgenError(f"{self.lost} connections closed by the server during the run")
        if self._failure is not None:
            raise self._failure

    async def _pace(self, rate: float) -> None:
        conns = self.conns
        count = len(conns)
        cap = self.pipeline
        i = 0
        issued = 0
        start = time.perf_counter()
        while not self.stopping:
            due = int(rate * (time.perf_counter() - start)) - issued
            if due > 0:
                batch: Dict[_Conn, int] = {}
                full = 0
                while due > 0 and full < count:
                    conn = conns[i]
                    i = i + 1 if i + 1 < count else 0
                    n = batch.get(conn, 0)
                    if conn.inflight + n < cap:
                        batch[conn] = n + 1
                        due -= 1
                        issued += 1
                        full = 0
                    else:
                        full += 1
                if due > 0:              # every connection has `pipeline` in flight
                    if self.measuring:
                        self.unsent += due
                    issued += due
                for conn, n in batch.items():
                    conn.send_beats(n)
            await asyncio.sleep(0.0005)

    async def close(self) -> None:
        self.stopping = True
        for conn in self.conns:
            if conn.transport is not None:
                conn.transport.close()
        if self.conns:
            await asyncio.wait([c.closed for c in self.conns], timeout=10)

    def summary(self) -> dict:
        import numpy as np
        lat = np.asarray(self.latencies, dtype=np.float64) * 1000.0
        pct = (lambda q: round(float(np.percentile(lat, q)), 3)) if len(lat) else (lambda q: None)
        return {
            "connections": self.connections, "members": self.members, "groups": self.groups,
            "pipeline": self.pipeline, "protocol": self.protocol,
            # of the request measured: Heartbeat's, or ConsumerGroupHeartbeat's
            "heartbeat_version": self.api_version,
            "engine": self.engine,
            "mode": "closed loop" if self.rate is None else f"open loop at {self.rate:g}/s",
            "unsent": self.unsent,
            # heartbeats sent in the measured window, and those answered (after the
            # drain: all of them, or the run fails)
            "sent": self.sent,
            "duration_s": round(self.elapsed, 3), "heartbeats": self.answered,
            "heartbeats_per_s": round(self.answered / self.elapsed, 1) if self.elapsed else 0.0,
            "p50_ms": pct(50), "p99_ms": pct(99), "p999_ms": pct(99.9),
            "max_ms": round(float(lat.max()), 3) if len(lat) else None,
            "errors": {str(k): v for k, v in sorted(self.errors.items())},
            "setup_s": round(self.setup_s, 3),
            "setup_rejoins": self.rejoins,
            "setup_rounds": self.setup_rounds,
            # CPU time of the load generator's thread over the run (warm-up, measured
            # window and drain): its own cost next to the heartbeats it sent
            "loadgen_cpu_s": round(self.cpu_s, 3),
            # ... and the time it was runnable but another process had its CPU
            "loadgen_runq_wait_s": (None if self.runq_wait_s is None
                                    else round(self.runq_wait_s, 3)),
            "engine_stats": self.engine_stats,
        }


async def run_loadgen(host: str = "127.0.0.1", port: int = 9092, *, connections: int = 100,
                      members: int = 1000, groups: int = 100, duration_s: float = 10.0,
                      pipeline: int = 4, warmup_s: float = 1.0, rate: Optional[float] = None,
                      heartbeat_version: int = 4, session_timeout_ms: int = 300_000,
                      setup_timeout_s: float = 600.0, topic: str = "loadgen",
                      engine: Optional[str] = None, protocol: str = "classic") -> dict:
    """Set up, run one measurement and return its summary (see the module docstring)."""
    engine = resolve_engine(engine)          # before the setup, which takes a while
    async with Loadgen(host, port, connections=connections, members=members, groups=groups,
                       pipeline=pipeline, heartbeat_version=heartbeat_version,
                       session_timeout_ms=session_timeout_ms, setup_timeout_s=setup_timeout_s,
                       topic=topic, protocol=protocol) as gen:
        return await gen.measure(duration_s, warmup_s, rate, engine)


def main(args) -> int:
    """The `fastcoord loadgen` command (args from fastcoord.cli)."""
    import sys
    try:
        result = asyncio.run(run_loadgen(
            args.host, args.port, connections=args.connections, members=args.members,
            groups=args.groups, duration_s=args.duration_s, pipeline=args.pipeline,
            warmup_s=args.warmup_s, rate=args.rate or None,
            heartbeat_version=args.heartbeat_version,
            session_timeout_ms=args.session_timeout_ms, setup_timeout_s=args.setup_timeout_s,
            topic=args.topic, engine=args.engine, protocol=args.protocol))
    except (OSError, LoadgenError, ValueError, asyncio.TimeoutError) as exc:
        print(f"fastcoord loadgen: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 0


__all__ = ["run_loadgen", "Loadgen", "LoadgenError", "ENGINES", "DEFAULT_ENGINE",
           "resolve_engine"]

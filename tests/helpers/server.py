"""Harness for the wire-server tests (tests/server/test_server_serve.py tests the harness).

- `ServerProc`: `python -m fastcoord serve --port 0 ...` as a subprocess; the port is
  read from its first line; stopped by PID (SIGTERM, then SIGKILL after a timeout).
- `RawConn`: a blocking connection speaking kio-encoded frames; `wait_until`;
  `metrics_url`/`scrape`: a server's Prometheus endpoint, read and checked.
- `ClientProc`: this file run as a script: one real Kafka consumer (kafka-python,
  aiokafka or confluent-kafka) in its own process, driven by JSON lines on stdin
  (commit, committed, close) and reporting JSON lines on stdout (its assignment each
  time it changes, command results).

Everything is on 127.0.0.1 and every wait is bounded.
"""
from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

HERE = Path(__file__).resolve()
# the repository: the working directory of the processes started here
ROOT = HERE.parents[2]

# Short timeouts so rebalances take a fraction of a second (the server is started with
# a small group.min.session.timeout.ms and initial rebalance delay to allow them).
SESSION_MS = 2000
HEARTBEAT_MS = 200
MAX_POLL_MS = 4000
SERVER_ARGS = ["--group-min-session-timeout-ms", "500",
               "--group-initial-rebalance-delay-ms", "100"]


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def proc_status(pid: int, field: str) -> int:
    """A /proc/PID/status size (VmRSS, VmHWM) in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


class ServerProc:
    """`fastcoord serve` in a subprocess on a free port of 127.0.0.1."""

    def __init__(self, log_path: Path, *args: str, topics: Iterable[str] = ("orders:4",),
                 wait_loaded: bool = True) -> None:
        cmd = [sys.executable, "-m", "fastcoord", "serve", "--host", "127.0.0.1", "--port", "0"]
        for t in topics:
            cmd += ["--topic", t]
        cmd += list(SERVER_ARGS) + ["--data-dir", str(log_path.parent)] + list(args)
        self.request_log_path = log_path.parent / "requests.jsonl"
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log,
                                     cwd=str(ROOT))
        self._lines: "queue.Queue[str]" = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            first = self._lines.get(timeout=30)
        except queue.Empty:
            self.stop()
            raise RuntimeError(f"server did not start: {self.log()}") from None
        # "fastcoord serve: listening on 127.0.0.1:PORT (...)"
        self.first_line = first
        self.port = int(first.split("listening on ", 1)[1].split()[0].rsplit(":", 1)[1])
        # With the durable store (the default with --data-dir), groups answer
        # COORDINATOR_LOAD_IN_PROGRESS until the store is loaded: wait for that.
        self.loaded_line = None
        if wait_loaded and "store durable" in first:
            deadline = time.monotonic() + 30
            while self.loaded_line is None:
                try:
                    line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
                except queue.Empty:
                    self.stop()
                    raise RuntimeError(f"server did not load its store: {self.log()}") from None
                if line.startswith("fastcoord serve: load"):
                    self.loaded_line = line
        self.bootstrap = f"127.0.0.1:{self.port}"

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self._lines.put(raw.decode(errors="replace"))

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> Optional[int]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        self._log.close()
        _close_pipes(self.proc, self._reader)
        return self.proc.returncode


def metrics_url(server: ServerProc) -> str:
    found = re.search(r"metrics on (http://\S+/metrics)", server.first_line)
    assert found, server.first_line
    return found.group(1)


def scrape(url: str) -> dict:
    """The samples of a Prometheus text page, checking each has its TYPE line."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        name, value = line.rsplit(" ", 1)
        samples[name] = float(value)
    # every sample has HELP and TYPE lines
    for name in samples:
        base = name.split("{", 1)[0]
        assert f"# TYPE {base} " in text, base
    return samples


def serve_exchange(run_dir, sends, flags, request_log: bool = False):
    """A memory-store server (with its request log in `run_dir`, or none) started with
    `flags`: one connection sends each payload of `sends` ((bytes, responses it
    completes) pairs) and reads the responses it completes. Returns (response frames,
    metrics samples)."""
    run_dir.mkdir()
    server = ServerProc(run_dir / "server.log", "--store", "memory", "--metrics-port", "0",
                        *([] if request_log else ["--no-request-log"]), *flags)
    got = []
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            for payload, expect in sends:
                sock.sendall(payload)
                got += read_responses(sock, expect)
            samples = scrape(metrics_url(server))
    finally:
        assert server.stop() == 0, server.log()
    return got, samples


def read_responses(sock, count: int) -> list:
    got, data = [], b""
    while len(got) < count:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(got)} responses"
        data += chunk
        while len(data) >= 4 and len(data) >= 4 + int.from_bytes(data[:4], "big"):
            size = int.from_bytes(data[:4], "big")
            got.append(data[4:4 + size])
            data = data[4 + size:]
    assert data == b""
    return got


class ClientProc:
    """One consumer of `lib` in its own process (this file run as a script)."""

    def __init__(self, lib: str, bootstrap: str, group: str, topic: str, name: str,
                 log_dir: Path, **options) -> None:
        self.name = name
        self.lib = lib
        cfg = dict(lib=lib, bootstrap=bootstrap, group=group, topic=topic, name=name,
                   session_ms=SESSION_MS, heartbeat_ms=HEARTBEAT_MS, max_poll_ms=MAX_POLL_MS)
        cfg.update(options)
        cfg["max_poll_ms"] = max(cfg["max_poll_ms"], cfg["session_ms"])  # librdkafka insists
        self.log_path = log_dir / f"client-{name}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, str(HERE), json.dumps(cfg)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log)
        self.assignment: Optional[frozenset] = None
        self.events: "queue.Queue[dict]" = queue.Queue()
        self.history: List[Tuple[float, frozenset]] = []
        self.poll_errors: List[str] = []
        self.commit_retries: List[str] = []     # commits refused while rebalancing, retried
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if "assigned" in msg:
                self.assignment = frozenset(tuple(tp) for tp in msg["assigned"])
                self.history.append((time.monotonic(), self.assignment))
            elif "poll_error" in msg:
                self.poll_errors.append(msg["poll_error"])
            elif "commit_retry" in msg:
                self.commit_retries.append(msg["commit_retry"])
            else:
                self.events.put(msg)

    def send(self, cmd: dict) -> None:
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, cmd: dict, key: str, timeout: float = 20.0) -> dict:
        self.send(cmd)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{self.name}: no {key!r} answer to {cmd} within {timeout}s; "
                                     f"log:\n{self.log()}")
            try:
                msg = self.events.get(timeout=remaining)
            except queue.Empty:
                continue
            if "error" in msg:
                raise AssertionError(f"{self.name}: {cmd} failed: {msg['error']}")
            if key in msg:
                return msg

    def commit(self, offsets: Dict[Tuple[str, int], int]) -> None:
        self.request({"cmd": "commit", "offsets": [[t, p, o] for (t, p), o in offsets.items()]},
                     "committed_ok")

    def committed(self, partitions: Iterable[Tuple[str, int]]) -> Dict[Tuple[str, int], Optional[int]]:
        msg = self.request({"cmd": "committed", "partitions": [list(tp) for tp in partitions]},
                           "committed")
        return {(t, p): o for t, p, o in msg["committed"]}

    def close(self, timeout: float = 20.0) -> None:
        """Graceful close (the consumer leaves its group), bounded."""
        if self.proc.poll() is None:
            try:
                self.send({"cmd": "close"})
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.assignment = None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.assignment = None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._log.close()
        _close_pipes(self.proc, self._reader)


def _close_pipes(proc: subprocess.Popen, reader: threading.Thread) -> None:
    """Close an exited process's pipes now rather than whenever the collector gets to
    them; stdout only once its reader thread has seen the end of it."""
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:             # a write still buffered to a process that is gone
            pass
    reader.join(timeout=5)
    if not reader.is_alive():
        proc.stdout.close()


def exact_cover(clients: List[ClientProc], partitions: Iterable[Tuple[str, int]],
                require_all_busy: bool = True, balanced: bool = False) -> bool:
    """Every partition assigned to exactly one client (and each holds one, if asked;
    and the counts differ by one at most, if `balanced`)."""
    seen: List[Tuple[str, int]] = []
    for c in clients:
        if c.assignment is None:
            return False
        if require_all_busy and not c.assignment:
            return False
        seen.extend(c.assignment)
    if balanced:
        sizes = [len(c.assignment) for c in clients]
        if max(sizes) - min(sizes) > 1:
            return False
    return sorted(seen) == sorted(partitions)


def assert_covered(clients: List[ClientProc], partitions, timeout: float, *,
                   all_busy: bool = True, balanced: bool = False,
                   server: Optional[ServerProc] = None) -> None:
    """Wait (bounded) until `clients` hold `partitions` exactly once between them; else
    fail with each client's assignment and log (and the server's, if given).

    Under the consumer protocol partitions move one member at a time, so an exact cover
    also holds part way through a reconciliation (one member still to revoke what
    another has yet to receive: 3, 2 and 1 partitions of 6). `balanced` waits for the
    end of it where the assignor balances: the losers hold only their targets then."""
    ok = wait_until(lambda: exact_cover(clients, partitions, all_busy, balanced), timeout)
    assert ok, f"no exact cover of {partitions} within {timeout}s: {describe(clients)}\n" + \
        "\n".join(f"--- {c.name}\n{c.log()}" for c in clients) + \
        (f"\n--- server\n{server.log()[-4000:]}" if server is not None else "")


def stop_all(clients: List[ClientProc], server: ServerProc) -> None:
    """Close the clients, stop the server: it must exit cleanly, with no traceback logged."""
    for c in clients:
        c.close(timeout=5)
        c.cleanup()
    code = server.stop()
    assert code == 0, f"server exit status {code}:\n{server.log()[-3000:]}"
    assert "Traceback" not in server.log(), server.log()[-3000:]


class ClientCluster:
    """A `fastcoord serve` (`flags`, declaring `topics`) and the client processes
    `spawn` starts against it; leaving the `with` block stops them all by PID, then
    the server, with stop_all's checks."""

    def __init__(self, tmp_path: Path, *flags: str, topics: List[str]) -> None:
        self.tmp_path = tmp_path
        self.server = ServerProc(tmp_path / "server.log", *flags, topics=topics)
        self.clients: List[ClientProc] = []

    def spawn(self, lib: str, group: str, subscription: str, name: str,
              **options) -> ClientProc:
        client = ClientProc(lib, self.server.bootstrap, group, subscription, name,
                            self.tmp_path, **options)
        self.clients.append(client)
        return client

    def __enter__(self) -> "ClientCluster":
        return self

    def __exit__(self, *exc) -> None:
        stop_all(self.clients, self.server)


def describe(clients: List[ClientProc]) -> str:
    return "; ".join(f"{c.name}: {sorted(c.assignment) if c.assignment is not None else None}"
                     for c in clients)


class RawConn:
    """A blocking Kafka-protocol connection speaking kio-encoded frames."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._corr = 0
        self.sent: Dict[int, Tuple[int, int]] = {}

    def send(self, api_key: int, version: int, body, client_id: str = "raw") -> int:
        from fastcoord.server.protocol import encode_request
        self._corr += 1
        self.sock.sendall(encode_request(api_key, version, self._corr, body, client_id))
        self.sent[self._corr] = (api_key, version)
        return self._corr

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self, n: int) -> Optional[bytes]:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv_frame(self) -> Optional[bytes]:
        head = self._read(4)
        if head is None:
            return None
        return self._read(int.from_bytes(head, "big", signed=True))

    def recv(self):
        """(correlation id, decoded response) of the next frame; the response version
        is that of the request (v0 for an ApiVersions the server does not support)."""
        from fastcoord.server.protocol import SUPPORTED_VERSIONS, decode_response
        frame = self.recv_frame()
        assert frame is not None, "connection closed by the server"
        corr = int.from_bytes(frame[:4], "big", signed=True)
        api_key, version = self.sent.pop(corr)
        lo, hi = SUPPORTED_VERSIONS.get(api_key, (0, -1))
        if api_key == 18 and not lo <= version <= hi:
            version = 0
        return corr, decode_response(api_key, version, frame)[1]

    def call(self, api_key: int, version: int, body):
        corr = self.send(api_key, version, body)
        got, response = self.recv()
        assert got == corr
        return response

    def closed_by_server(self, timeout: float = 5.0) -> bool:
        """True if the server closes the connection (EOF or reset) within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()

    def __del__(self) -> None:
        # A test that expects the server to close a connection keeps its own end open:
        # it closes when the test drops the RawConn, not when the collector gets to the
        # socket (warning then inside whatever test runs). No socket if connecting failed.
        sock = getattr(self, "sock", None)
        if sock is not None:
            sock.close()


# ---- the client process ---------------------------------------------------------------------

def _emit(msg: dict) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def _stdin_commands() -> "queue.Queue[dict]":
    commands: "queue.Queue[dict]" = queue.Queue()

    def pump() -> None:
        for line in sys.stdin:
            line = line.strip()
            if line:
                commands.put(json.loads(line))
        commands.put({"cmd": "close"})     # stdin closed: the test is gone

    threading.Thread(target=pump, daemon=True).start()
    return commands


# A commit refused because the consumer is rebalancing is retried after polling, as the
# clients tell their users to do: kafka-python 3.0.12 can start a rebalance of its own
# right after a join completes (a join task that finished between two polls is dropped
# and a new JoinGroup sent), and a commit in that window fails on the client side.
COMMIT_RETRY_S = 15.0


def _rebalancing(exc: Exception) -> bool:
    return "RebalanceInProgress" in type(exc).__name__ or "REBALANCE_IN_PROGRESS" in str(exc)


def _command_loop(poll, assignment, commit, committed, close) -> None:
    """Poll, report the assignment whenever it changes, run commands from stdin."""
    commands = _stdin_commands()
    last = None
    pending: Optional[Tuple[dict, float]] = None    # a commit to retry, and when to give up
    while True:
        try:
            poll()
        except Exception as exc:  # e.g. an authorization error: reported, and go on
            _emit({"poll_error": f"{type(exc).__name__}: {exc}"})
            time.sleep(0.2)
        current = sorted([tp.topic, tp.partition] for tp in assignment())
        if current != last:
            last = current
            _emit({"assigned": current})
        give_up = None
        if pending is not None:
            (cmd, give_up), pending = pending, None
        else:
            try:
                cmd = commands.get_nowait()
            except queue.Empty:
                continue
        try:
            if cmd["cmd"] == "close":
                close()
                _emit({"closed": True})
                return
            if cmd["cmd"] == "commit":
                try:
                    commit([tuple(x) for x in cmd["offsets"]])
                except Exception as exc:
                    if not _rebalancing(exc):
                        raise
                    if give_up is None:
                        give_up = time.monotonic() + COMMIT_RETRY_S
                        _emit({"commit_retry": f"{type(exc).__name__}: {exc}"})
                    elif time.monotonic() >= give_up:
                        raise
                    pending = (cmd, give_up)
                    continue
                _emit({"committed_ok": True})
            elif cmd["cmd"] == "committed":
                _emit({"committed": [[t, p, o] for (t, p), o in
                                     committed([tuple(x) for x in cmd["partitions"]])]})
        except Exception as exc:  # reported to the test, which fails with it
            _emit({"error": f"{type(exc).__name__}: {exc}"})


def _run_kafka_python(cfg: dict) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    opts = dict(bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"], client_id=cfg["name"],
                enable_auto_commit=False, auto_offset_reset="earliest",
                session_timeout_ms=cfg["session_ms"], heartbeat_interval_ms=cfg["heartbeat_ms"],
                max_poll_interval_ms=cfg["max_poll_ms"], fetch_max_wait_ms=100,
                request_timeout_ms=30000, retry_backoff_ms=50, reconnect_backoff_ms=50)
    if cfg.get("instance_id"):
        opts["group_instance_id"] = cfg["instance_id"]
    if cfg.get("user"):
        opts.update(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                    sasl_plain_username=cfg["user"], sasl_plain_password=cfg["password"])
    consumer = KafkaConsumer(**opts)
    consumer.subscribe([cfg["topic"]])
    _command_loop(
        poll=lambda: consumer.poll(timeout_ms=50),
        assignment=consumer.assignment,
        commit=lambda offsets: consumer.commit(
            {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for t, p, o in offsets}),
        committed=lambda tps: [(tp, consumer.committed(TopicPartition(*tp))) for tp in tps],
        close=consumer.close)


def _run_aiokafka(cfg: dict) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    loop = asyncio.new_event_loop()
    run = loop.run_until_complete
    opts = dict(bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"],
                client_id=cfg["name"], enable_auto_commit=False,
                auto_offset_reset="earliest", session_timeout_ms=cfg["session_ms"],
                heartbeat_interval_ms=cfg["heartbeat_ms"],
                max_poll_interval_ms=cfg["max_poll_ms"],
                rebalance_timeout_ms=cfg["max_poll_ms"], fetch_max_wait_ms=100,
                retry_backoff_ms=50)
    if cfg.get("instance_id"):
        opts["group_instance_id"] = cfg["instance_id"]

    async def make():   # the consumer binds to the running loop
        consumer = AIOKafkaConsumer(cfg["topic"], **opts)
        await consumer.start()
        return consumer

    consumer = run(make())

    async def committed(tps):
        return [(tp, await consumer.committed(TopicPartition(*tp))) for tp in tps]

    # The loop runs (heartbeats included) while each poll waits, i.e. nearly always.
    _command_loop(
        poll=lambda: run(consumer.getmany(timeout_ms=50)),
        assignment=consumer.assignment,
        commit=lambda offsets: run(consumer.commit(
            {TopicPartition(t, p): OffsetAndMetadata(o, "") for t, p, o in offsets})),
        committed=lambda tps: run(committed(tps)),
        close=lambda: run(consumer.stop()))


def _run_confluent(cfg: dict) -> None:
    from confluent_kafka import Consumer, TopicPartition

    conf = {"bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"],
            "client.id": cfg["name"], "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": cfg["session_ms"],
            "heartbeat.interval.ms": cfg["heartbeat_ms"],
            "max.poll.interval.ms": cfg["max_poll_ms"], "fetch.wait.max.ms": 100,
            "broker.address.family": "v4", "reconnect.backoff.ms": 50,
            "retry.backoff.ms": 50}
    if cfg.get("group_protocol") == "consumer":
        # KIP-848: the coordinator times sessions and heartbeats and assigns; librdkafka
        # refuses these settings under this protocol
        conf["group.protocol"] = "consumer"
        del conf["session.timeout.ms"], conf["heartbeat.interval.ms"]
    if cfg.get("assignor"):
        conf["partition.assignment.strategy"] = cfg["assignor"]
    if cfg.get("instance_id"):
        conf["group.instance.id"] = cfg["instance_id"]
    if cfg.get("user"):
        conf.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                     "sasl.username": cfg["user"], "sasl.password": cfg["password"]})
    consumer = Consumer(conf)
    consumer.subscribe([cfg["topic"]])

    def poll() -> None:
        msg = consumer.poll(0.05)
        if msg is not None and msg.error() is not None:
            _emit({"poll_error": f"{msg.error().name()}: {msg.error().str()}"})

    def committed(tps):
        found = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=10)
        _raise_partition_errors("OffsetFetch", found)
        return [((tp.topic, tp.partition), tp.offset if tp.offset >= 0 else None) for tp in found]

    def commit(offsets):
        # a synchronous commit raises only when every partition failed; the others are
        # in the returned list
        done = consumer.commit(offsets=[TopicPartition(t, p, o) for t, p, o in offsets],
                               asynchronous=False)
        _raise_partition_errors("OffsetCommit", done)

    _command_loop(
        poll=poll,
        assignment=consumer.assignment,
        commit=commit,
        committed=committed,
        close=consumer.close)


def _raise_partition_errors(what: str, partitions) -> None:
    failed = [f"{tp.topic}-{tp.partition}: {tp.error.name()}" for tp in partitions
              if tp.error is not None]
    if failed:
        raise RuntimeError(f"{what} failed for {', '.join(failed)}")


def _client_main(cfg: dict) -> None:
    import logging
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s.%(msecs)03d %(threadName)s %(name)s %(message)s")
    if os.environ.get("FC_CLIENT_DEBUG"):
        logging.getLogger(os.environ["FC_CLIENT_DEBUG"]).setLevel(logging.DEBUG)
    {"kafka-python": _run_kafka_python, "aiokafka": _run_aiokafka,
     "confluent": _run_confluent}[cfg["lib"]](cfg)


if __name__ == "__main__":
    _client_main(json.loads(sys.argv[1]))

"""Wire-server benchmark: `fastcoord serve` (a subprocess) under `fastcoord loadgen`.

The server runs on core 0 (`taskset -c 0`), the load generator in this process on
core 1 (when the machine has two cores and taskset). The load generator connects
`connections` sockets, makes `members` real members of `groups` groups (JoinGroup,
SyncGroup, kio-encoded), then measures Heartbeat requests:

  server-heartbeat  closed-pN: every connection keeps N heartbeats in flight (the
                    server's saturation throughput; latency is then queueing:
                    in-flight / throughput, Little's law).
                    open-R: R heartbeats/s in all, spread over the connections (at most
                    8 in flight on each), latency at that offered load (R = 10,000,
                    25,000, 50,000, 75,000 and the target 100,000).
                    ops = heartbeats answered in the measured window (one call);
                    extra_info: heartbeats_per_s, p50_ms, p99_ms, p999_ms, unsent.
                    peer "native": the server as `fastcoord serve` runs it (the
                    heartbeat lane on); "native, no lane": a second server with
                    --no-heartbeat-lane (every read through the event loop and the
                    per-read path), for closed-p1 and open-100000 in the same run;
                    "native, request log": a third server with its request log on
                    (the serve default: a JSON line per request, written to a file),
                    for closed-p1, open-50000 and open-100000;
                    "native, consumer protocol": a fourth server whose members
                    are KIP-848 ones (`fastcoord loadgen --protocol consumer`: joined
                    with ConsumerGroupHeartbeat v1, heartbeated until their groups are
                    Stable, with the topic declared, CONSUMER_PARTITIONS partitions),
                    measured on steady ConsumerGroupHeartbeats (member id + epoch),
                    for closed-p1, closed-p8 and open-100000 beside the classic rows.
  server-reader     wire.HeartbeatReader in this process, no network: one read of 16
  (no log,          heartbeats per call, answered by a heartbeat that returns 0 at
   request log)     once; with the request log, its lines go to a real RequestLog
                    file. native and pure; extra_info ns_per_heartbeat.

Server: memory store, no request log (the hot path only: heartbeats touch neither),
native coordinator, uvloop when installed (the serve default; this process too).
Load generator: setup in asyncio, the measurement by its C engine
(fastcoord/loadgen/_native/engine.pyx: epoll, the open loop paced on CLOCK_MONOTONIC, under
half a microsecond of its own CPU per heartbeat in the closed loop), or by the asyncio
engine with FASTCOORD_BENCH_LOADGEN_ENGINE=python (it saturates its core near
100,000/s, and its latencies then include its own queueing). extra_info: engine,
per_server_cpu_s (heartbeats answered per CPU second of the server), setup_s,
loadgen_cpu_s and server_cpu_s (CPU seconds of the load generator's thread and of the
server process over the measured call, warm-up and drain included: server_cpu_s /
duration is the server's core utilisation; server_sys_share: the kernel's part of it),
loadgen_runq_wait_s and server_runq_wait_s (seconds each
was runnable but waiting for its core: other processes' share of a shared machine,
which shows up as latency; all per measured window). Full size: 1,000 connections,
100,000 members in 1,000 groups, 10 s windows after 2 s of warm-up: one for a closed
loop, three for an open loop, whose figures are then the medians of the three (each
window's p99 in p99_ms_rounds: the tail moves a lot between windows on a shared VM).
The issue's target: >= 100,000 heartbeats/s with p99 <= 5 ms. With
--benchmark-disable (make test): 20 connections, 400 members, one 0.5 s window per
case.
"""
from __future__ import annotations

import asyncio
import os
import statistics
import queue
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import fastcoord

pytest.importorskip("kio")

from fastcoord.loadgen import Loadgen, _runq_wait_s  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FULL = dict(connections=1000, members=100_000, groups=1000, duration_s=10.0, warmup_s=2.0)
QUICK = dict(connections=20, members=400, groups=20, duration_s=0.5, warmup_s=0.1)
OPEN_ROUNDS = 3         # measured windows per open-loop case (full size)
# (case, pipeline, offered rate at full size, offered rate in quick mode)
CASES = [("closed-p1", 1, None, None), ("closed-p8", 8, None, None),
         ("open-10000", 8, 10_000, 1_000), ("open-25000", 8, 25_000, 2_000),
         ("open-50000", 8, 50_000, 3_000), ("open-75000", 8, 75_000, 3_500),
         ("open-100000", 8, 100_000, 4_000)]
CONSUMER_CASES = [c for c in CASES if c[0] in ("closed-p1", "closed-p8", "open-100000")]
CONSUMER_PARTITIONS = 100      # per group of 100 members (full size): one each
# "auto": the C engine where it is built (it is on Linux), else the asyncio one
ENGINE = os.environ.get("FASTCOORD_BENCH_LOADGEN_ENGINE", "auto")
try:
    import uvloop
except ImportError:       # the server and the load generator then use asyncio's own loop
    uvloop = None


PINNED = (shutil.which("taskset") is not None and hasattr(os, "sched_setaffinity")
          and len(os.sched_getaffinity(0)) >= 2)


def _pinned() -> bool:
    return PINNED


class _Server:
    """`fastcoord serve --port 0` pinned to core 0, stopped by PID."""

    def __init__(self, log_path: Path, *args: str, request_log: bool = False) -> None:
        cmd = [sys.executable, "-m", "fastcoord", "serve", "--host", "127.0.0.1", "--port", "0",
               "--store", "memory", "--status-interval-s", "0",
               *(["--data-dir", str(log_path.parent)] if request_log else ["--no-request-log"]),
               "--group-initial-rebalance-delay-ms", "500", "--max-connections", "20000",
               "--log-level", "WARNING", *args]
        if _pinned():
            cmd = ["taskset", "-c", "0"] + cmd
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, cwd=str(ROOT))
        lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x.decode()) for x in self.proc.stdout],
                         daemon=True).start()
        try:
            first = lines.get(timeout=60)
        except queue.Empty:
            self.stop()
            raise RuntimeError(f"server did not start: {log_path.read_text()}") from None
        self.port = int(first.split("listening on ", 1)[1].split()[0].rsplit(":", 1)[1])

    def cpu_s(self) -> float:
        """User + system CPU seconds of the server process so far (Linux), else 0."""
        return sum(self.cpu_split_s())

    def cpu_split_s(self) -> tuple:
        """(user, system) CPU seconds of the server process so far (Linux), else zeros:
        system is the kernel's share (its sockets, epoll, and on loopback the peer's
        TCP receive work done inside the server's send)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return (0.0, 0.0)
        tick = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) / tick, int(fields[12]) / tick)

    def runq_wait_s(self) -> float:
        """Seconds the server's main thread has been runnable but not running (Linux), else 0."""
        return _runq_wait_s(f"/proc/{self.proc.pid}/schedstat") or 0.0

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def loaded(request, tmp_path_factory):
    """A server and a load generator with every member set up, shared by the cases."""
    yield from _loaded(request, tmp_path_factory)


@pytest.fixture(scope="module")
def loaded_no_lane(request, tmp_path_factory):
    """The same with the server's heartbeat lane off."""
    yield from _loaded(request, tmp_path_factory, "--no-heartbeat-lane")


@pytest.fixture(scope="module")
def loaded_request_log(request, tmp_path_factory):
    """The same with the server's request log on."""
    yield from _loaded(request, tmp_path_factory, request_log=True)


@pytest.fixture(scope="module")
def loaded_consumer(request, tmp_path_factory):
    """The same with consumer-protocol (KIP-848) members. The server's consumer session
    timeout is raised: the members must outlive the setup and the pauses between cases,
    which the 45 s default need not."""
    yield from _loaded(request, tmp_path_factory, "--topic", f"loadgen:{CONSUMER_PARTITIONS}",
                       "--group-consumer-session-timeout-ms", "300000",
                       "--group-consumer-max-session-timeout-ms", "600000",
                       protocol="consumer")


def _loaded(request, tmp_path_factory, *server_args, request_log: bool = False,
            protocol: str = "classic"):
    quick = request.config.getoption("benchmark_disable")
    size = QUICK if quick else FULL
    server = _Server(tmp_path_factory.mktemp("server") / "server.log", *server_args,
                     request_log=request_log)
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if _pinned():
        os.sched_setaffinity(0, {1})
    loop = uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()
    gen = None
    try:
        gen = Loadgen("127.0.0.1", server.port, connections=size["connections"],
                      members=size["members"], groups=size["groups"], pipeline=8,
                      setup_timeout_s=300, protocol=protocol)
        loop.run_until_complete(gen.__aenter__())
        yield gen, loop, size, quick, server
    finally:
        if gen is not None:
            loop.run_until_complete(gen.__aexit__(None, None, None))
        loop.close()
        if affinity is not None:
            os.sched_setaffinity(0, affinity)
        code = server.stop()
        assert code == 0, server.log_path.read_text()[-3000:]


@pytest.mark.parametrize("case,pipeline,rate,quick_rate", CASES, ids=[c[0] for c in CASES])
def test_server_heartbeats(benchmark, loaded, case, pipeline, rate, quick_rate):
    _measure(benchmark, loaded, "native", case, pipeline, rate, quick_rate)


@pytest.mark.parametrize("case,pipeline,rate,quick_rate",
                         [c for c in CASES if c[0] in ("closed-p1", "open-100000")],
                         ids=["closed-p1", "open-100000"])
def test_server_heartbeats_without_the_lane(benchmark, loaded_no_lane, case, pipeline, rate,
                                            quick_rate):
    _measure(benchmark, loaded_no_lane, "native, no lane", case, pipeline, rate, quick_rate)


@pytest.mark.parametrize("case,pipeline,rate,quick_rate",
                         [c for c in CASES if c[0] in ("closed-p1", "open-50000", "open-100000")],
                         ids=["closed-p1", "open-50000", "open-100000"])
def test_server_heartbeats_with_the_request_log(benchmark, loaded_request_log, case, pipeline,
                                                rate, quick_rate):
    _measure(benchmark, loaded_request_log, "native, request log", case, pipeline, rate,
             quick_rate)


@pytest.mark.parametrize("case,pipeline,rate,quick_rate", CONSUMER_CASES,
                         ids=[c[0] for c in CONSUMER_CASES])
def test_server_consumer_heartbeats(benchmark, loaded_consumer, case, pipeline, rate,
                                    quick_rate):
    _measure(benchmark, loaded_consumer, "native, consumer protocol", case, pipeline, rate,
             quick_rate)


def _measure(benchmark, loaded, peer, case, pipeline, rate, quick_rate):
    gen, loop, size, quick, server = loaded
    gen.pipeline = pipeline
    offered = quick_rate if quick else rate
    loop.run_until_complete(gen.measure(size["warmup_s"], 0.0, offered, ENGINE))   # warm-up
    results = []
    benchmark.group = "server-heartbeat"
    # The open loop's tail moves a lot between windows on a shared machine: three
    # windows, and the medians of their figures (each window's in *_rounds).
    rounds = OPEN_ROUNDS if rate is not None and not quick else 1
    server_split, server_wait = server.cpu_split_s(), server.runq_wait_s()
    benchmark.pedantic(lambda: results.append(
        loop.run_until_complete(gen.measure(size["duration_s"], 0.0, offered, ENGINE))),
        rounds=rounds, iterations=1)
    server_split = [b - a for a, b in zip(server_split, server.cpu_split_s())]
    server_cpu, server_wait = sum(server_split), server.runq_wait_s() - server_wait
    for summary in results:
        assert summary["heartbeats"] == summary["sent"] > 0       # all answered
        assert summary["errors"] == {}, summary   # every member stays in its generation

    def median(key):
        return statistics.median(r[key] for r in results)

    benchmark.extra_info.update({
        "peer": peer, "case": case, "ops": median("heartbeats"),
        "heartbeats_per_s": median("heartbeats_per_s"), "p50_ms": median("p50_ms"),
        "p99_ms": median("p99_ms"), "p999_ms": median("p999_ms"),
        "p99_ms_rounds": [r["p99_ms"] for r in results],
        "connections": size["connections"], "members": size["members"],
        "pipeline": pipeline, "offered_per_s": offered or 0,
        "unsent": sum(r["unsent"] for r in results),
        "pinned": int(_pinned()), "uvloop": int(uvloop is not None),
        "engine": results[-1]["engine"],
        "loadgen_cpu_s": round(sum(r["loadgen_cpu_s"] for r in results) / rounds, 3),
        # per round: CPU seconds of the server over one measured call (warm-up and drain
        # included): / duration is its core's utilisation
        "server_cpu_s": round(server_cpu / rounds, 3),
        "server_sys_share": round(server_split[1] / server_cpu, 3) if server_cpu else None,
        "loadgen_runq_wait_s": round(sum(r["loadgen_runq_wait_s"] or 0 for r in results)
                                     / rounds, 3),
        "server_runq_wait_s": round(server_wait / rounds, 3),
        # heartbeats per CPU second of the server (warm-up and drain in the CPU too): its
        # cost per heartbeat, less at the mercy of a shared machine than the rate
        "per_server_cpu_s": round(sum(r["heartbeats"] for r in results) / server_cpu)
        if server_cpu else None,
        "setup_s": round(gen.setup_s, 1),
        "rounds": rounds,
    })
    print(f"\n{case}: {benchmark.extra_info}")


# -- the per-read fast path alone, in this process -------------------------------------------

READ_HEARTBEATS = 16                    # heartbeats in one read
READS = 2_000                           # reads per measured call
READER_PEERS = (["native"] if fastcoord.NATIVE_AVAILABLE else []) + ["pure"]


@pytest.mark.parametrize("request_log", [False, True], ids=["no log", "request log"])
@pytest.mark.parametrize("peer", READER_PEERS)
def test_heartbeat_reader(benchmark, tmp_path, peer, request_log):
    """wire.HeartbeatReader on one read of 16 v4 heartbeats (the lane's per-read work:
    parse, the heartbeat call, encode, and with the request log its lines, handed to a
    real RequestLog file), without the network and with a heartbeat that answers 0 at
    once: what the reader and the log cost, apart from the coordinator (coordinator.md)
    and the kernel (the cases above). ops = heartbeats; extra_info ns_per_heartbeat."""
    from fastcoord._twins import module
    from fastcoord.server.protocol import encode_request
    from fastcoord.server.requestlog import RequestLog
    data = b"".join(encode_request(12, 4, i, {
        "group_id": f"group-{i % 4:04d}", "generation_id": 3,
        "member_id": f"consumer-{i}-{i:032x}", "group_instance_id": None},
        client_id=f"loadgen-{i}") for i in range(READ_HEARTBEATS))
    log = RequestLog(tmp_path / "requests.jsonl") if request_log else None
    reader = module(peer, "server.wire").HeartbeatReader(
        lambda group, member, generation, instance: 0, 1 << 20, 0, 4, None,
        log.write_lines if log is not None else None)
    sent = []
    host = b'"127.0.0.1"' if log is not None else None
    reads = READS if peer == "native" else READS // 20
    calls = []

    def run():
        for _ in range(reads):
            reader(data, sent.append, host)
        sent.clear()
        calls.append(1)

    benchmark.group = "server-reader, " + ("request log" if request_log else "no log")
    benchmark.pedantic(run, rounds=15 if peer == "native" else 5, iterations=1,
                       warmup_rounds=1)
    if log is not None:
        log.close()
        lines = sum(path.read_bytes().count(b"\n") for path in tmp_path.glob("requests.jsonl*"))
        assert lines == READ_HEARTBEATS * reads * len(calls)
    assert reader.answered == READ_HEARTBEATS * reads * len(calls)
    benchmark.extra_info.update({"peer": peer, "ops": READ_HEARTBEATS * reads})
    if benchmark.stats is not None:         # None under --benchmark-disable
        benchmark.extra_info["ns_per_heartbeat"] = round(
            benchmark.stats.stats.median / (READ_HEARTBEATS * reads) * 1e9, 1)

"""`fastcoord serve --data-dir DIR`: committed offsets survive a restart.

A real kafka-python consumer commits; the server is SIGKILLed (by PID) or stopped with
SIGTERM, restarted on the same data dir, and a new consumer of the group reads the
offsets back. Everything on 127.0.0.1, every wait bounded.
"""
from __future__ import annotations

import os
import signal
import time

import pytest

from helpers.server import ClientProc, RawConn, ServerProc, wait_until

TOPIC = "orders"
PARTITIONS = [(TOPIC, p) for p in range(4)]
BOUND = 30.0


class _Procs:
    """Servers and consumers started by one test, all stopped by PID at its end."""

    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.servers: list = []
        self.clients: list = []

    def server(self, *args: str) -> ServerProc:
        server = ServerProc(self.tmp_path / f"server-{len(self.servers) + 1}.log", *args,
                            topics=[f"{TOPIC}:4"])
        self.servers.append(server)
        return server

    def client(self, server: ServerProc, name: str, group: str = "durable",
               wait_assigned: bool = True) -> ClientProc:
        client = ClientProc("kafka-python", server.bootstrap, group, TOPIC, name, self.tmp_path)
        self.clients.append(client)
        if wait_assigned:
            ok = wait_until(lambda: client.assignment == frozenset(PARTITIONS), BOUND)
            assert ok, f"{name} never got all of {PARTITIONS}: {client.assignment}\n{client.log()}"
        return client

    def stop_all(self) -> None:
        for c in self.clients:
            c.cleanup()
        for server in self.servers:
            if server.alive():
                code = server.stop()
                assert code == 0, server.log()[-3000:]
                assert "Traceback" not in server.log(), server.log()[-3000:]


@pytest.fixture
def procs(tmp_path):
    p = _Procs(tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


def _restart_cycle(procs: _Procs, stop, *args: str) -> None:
    """Commit with one consumer, stop the server with `stop(server)`, restart it on the
    same data dir and read the offsets back with a new consumer of the group."""
    first = procs.server(*args)
    assert "store durable" in first.first_line, first.first_line
    if "--fsync" in args:
        assert "fsync interval" in first.first_line, first.first_line
    a = procs.client(first, "a")
    offsets = {tp: 1000 + 7 * i for i, tp in enumerate(PARTITIONS)}
    a.commit(offsets)                       # answered only once fsync'd
    a.commit({PARTITIONS[0]: 4242})         # the latest commit wins on load
    offsets[PARTITIONS[0]] = 4242
    stop(first)
    a.kill()
    second = procs.server(*args)
    assert "loaded 50 shards (1 groups, 4 offsets)" in second.loaded_line, second.log()
    b = procs.client(second, "b")
    assert b.committed(PARTITIONS) == offsets
    # a group nobody committed to has no offsets, after the restart as before
    c = procs.client(second, "c", group="other", wait_assigned=False)
    assert c.committed(PARTITIONS[:1]) == {PARTITIONS[0]: None}


def _kill(server: ServerProc) -> None:
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=10)
    assert server.proc.returncode == -signal.SIGKILL
    server.stop()     # closes its log file; the process is gone


@pytest.mark.clients
def test_committed_offsets_survive_sigkill(procs):
    _restart_cycle(procs, _kill)


@pytest.mark.clients
def test_fsync_interval_survives_sigkill_too(procs):
    """--fsync interval acknowledges once written to the OS: a killed process loses
    nothing (only an OS crash could lose the last interval)."""
    _restart_cycle(procs, _kill, "--fsync", "interval", "--fsync-interval-ms", "60000")


@pytest.mark.clients
def test_committed_offsets_survive_a_clean_sigterm_restart(procs):
    def term(server: ServerProc) -> None:
        assert server.stop() == 0, server.log()
        assert "shutting down" in server.log()
    _restart_cycle(procs, term)


@pytest.mark.clients
def test_memory_store_forgets_on_restart(procs, tmp_path):
    """--store memory: the same cycle reads nothing back (what durable is for)."""
    first = procs.server("--store", "memory")
    assert "store memory" in first.first_line
    a = procs.client(first, "a")
    a.commit({PARTITIONS[0]: 5})
    assert first.stop() == 0
    a.kill()
    second = procs.server("--store", "memory")
    b = procs.client(second, "b", wait_assigned=False)
    assert b.committed(PARTITIONS[:1]) == {PARTITIONS[0]: None}
    assert not (tmp_path / "groups").exists()


def _fill(data_dir, commits: int) -> None:
    """Write `commits` offset commits of group "slow" straight into a durable store, the
    last one being offset 777 for partition 0, so loading its shard takes a moment."""
    from fastcoord import OffsetAndMetadata
    from fastcoord.storage import DurableStore

    store = DurableStore(data_dir / "groups", num_shards=50, fsync="interval")
    done = []
    for i in range(commits):
        store.store_offsets("slow", {(TOPIC, i % 4): OffsetAndMetadata(i)}, done.append)
    store.store_offsets("slow", {(TOPIC, 0): OffsetAndMetadata(777)}, done.append)
    store.close()
    assert len(done) == commits + 1 and set(done) == {0}


def test_load_in_progress_until_the_shard_is_loaded(tmp_path):
    """In process: right after start() the group's shard is loading (the coordinator
    answers COORDINATOR_LOAD_IN_PROGRESS); once loaded, the offsets are there."""
    import asyncio

    from fastcoord import CoordinatorConfig, Errors
    from fastcoord.server import CoordinatorServer, ServerConfig

    _fill(tmp_path, 20_000)

    async def run():
        server = CoordinatorServer(ServerConfig(port=0, data_dir=str(tmp_path), store="durable",
                                                coordinator=CoordinatorConfig()))
        await server.start()
        try:
            error, _ = server.coord.fetch_offsets("slow")
            assert error == Errors.COORDINATOR_LOAD_IN_PROGRESS
            # Kafka's exceptions while loading: heartbeat NONE, sync REBALANCE_IN_PROGRESS
            assert server.coord.heartbeat("slow", "m", 1) == Errors.NONE
            joined = []
            server.coord.join_group("slow", "", "consumer", [("range", b"")],
                                    session_timeout_ms=10_000, callback=joined.append)
            assert [j.error for j in joined] == [Errors.COORDINATOR_LOAD_IN_PROGRESS]
            await asyncio.wait_for(server.wait_loaded(), BOUND)
            error, found = server.coord.fetch_offsets("slow")
            assert error == Errors.NONE
            assert found[(TOPIC, 0)].offset == 777
            assert sum(g for g, _ in server.loaded.values()) == 1
        finally:
            await server.shutdown()
        assert server.store._closed

    asyncio.run(asyncio.wait_for(run(), 2 * BOUND))


def test_load_in_progress_on_the_wire(tmp_path):
    """A client asking before the shard is loaded gets error 14 (retriable) and, asking
    again, the loaded offset: never a wrong answer (such as "no offset")."""
    _fill(tmp_path, 100_000)
    server = ServerProc(tmp_path / "server.log", "--status-interval-s", "0",
                        topics=[f"{TOPIC}:4"], wait_loaded=False)
    try:
        conn = RawConn(server.port)
        seen = []
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline:
            resp = conn.call(9, 7, {"group_id": "slow", "topics": [
                {"name": TOPIC, "partition_indexes": [0]}], "require_stable": False})
            seen.append(resp.error_code)
            if resp.error_code == 0:
                assert resp.topics[0].partitions[0].committed_offset == 777
                break
        assert seen[-1] == 0, seen
        assert set(seen) <= {0, 14}, seen
        conn.close()
    finally:
        assert server.stop() == 0, server.log()


@pytest.mark.slow
def test_acknowledged_commits_survive_repeated_sigkill(tmp_path):
    """Four connections commit offsets as fast as the server answers (each its own
    simple group); the server is SIGKILLed at a random moment, restarted on the same data
    dir, and every acknowledged commit must be there (the value read back is the last
    acknowledged one, or the one in flight at the kill). Repeated CYCLES times."""
    import random
    import threading

    CYCLES = 6
    rng = random.Random(7)
    acked = {f"crash-{i}": -1 for i in range(4)}      # group -> last acknowledged offset
    for cycle in range(CYCLES):
        server = ServerProc(tmp_path / f"server-{cycle}.log", "--status-interval-s", "0",
                            "--no-request-log", topics=[f"{TOPIC}:4"])
        try:
            check = RawConn(server.port)
            for group, last in acked.items():
                resp = check.call(9, 7, {"group_id": group, "topics": [
                    {"name": TOPIC, "partition_indexes": [0]}], "require_stable": False})
                assert resp.error_code == 0
                got = resp.topics[0].partitions[0].committed_offset
                assert got in (last, last + 1), (cycle, group, got, last)
                acked[group] = got
            check.close()
            stop = threading.Event()
            errors = []

            def commit_loop(group: str) -> None:
                try:
                    conn = RawConn(server.port, timeout=5)
                except OSError:
                    return
                offset = acked[group]
                try:
                    while not stop.is_set():
                        offset += 1
                        resp = conn.call(8, 7, {
                            "group_id": group, "generation_id_or_member_epoch": -1,
                            "member_id": "", "group_instance_id": None, "topics": [
                                {"name": TOPIC, "partitions": [
                                    {"partition_index": 0, "committed_offset": offset,
                                     "committed_leader_epoch": -1,
                                     "committed_metadata": ""}]}]})
                        err = resp.topics[0].partitions[0].error_code
                        if err != 0:
                            errors.append((group, offset, err))
                            return
                        acked[group] = offset
                except (OSError, AssertionError):
                    pass                 # the server was killed mid-request
                finally:
                    conn.close()

            threads = [threading.Thread(target=commit_loop, args=(g,)) for g in acked]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.3, 0.8))
            os.kill(server.proc.pid, signal.SIGKILL)
            server.proc.wait(timeout=10)
            stop.set()
            for t in threads:
                t.join(timeout=10)
                assert not t.is_alive()
            assert not errors, errors
        finally:
            server.stop()
    assert min(acked.values()) > 0        # commits were acknowledged along the way


def test_corrupt_shard_is_refused_then_repaired(tmp_path):
    """A bit flip in the middle of a shard's log: the server reports it, that shard's
    groups answer NOT_COORDINATOR (nothing silently wrong), other shards serve; with
    --repair the log is truncated at the bad record and the shard loads."""
    from fastcoord import shard_for

    _fill(tmp_path, 100)
    shard_dir = tmp_path / "groups" / f"shard-{shard_for('slow', 50):03d}"
    (segment,) = sorted(shard_dir.glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0x10
    segment.write_bytes(bytes(data))
    other = "other"
    assert shard_for(other, 50) != shard_for("slow", 50)

    def fetch(conn: RawConn, group: str):
        return conn.call(9, 7, {"group_id": group, "topics": [
            {"name": TOPIC, "partition_indexes": [0]}], "require_stable": False})

    server = ServerProc(tmp_path / "server-1.log", "--status-interval-s", "0",
                        topics=[f"{TOPIC}:4"])
    try:
        assert server.loaded_line.startswith("fastcoord serve: loading failed"), \
            server.loaded_line
        assert str(segment.name) in server.log() or "corrupt" in server.log().lower()
        conn = RawConn(server.port)
        assert fetch(conn, "slow").error_code == 16          # NOT_COORDINATOR
        resp = fetch(conn, other)
        assert resp.error_code == 0
        assert resp.topics[0].partitions[0].committed_offset == -1
        conn.close()
    finally:
        assert server.stop() == 0, server.log()

    server = ServerProc(tmp_path / "server-2.log", "--status-interval-s", "0", "--repair",
                        topics=[f"{TOPIC}:4"])
    try:
        assert server.loaded_line.startswith("fastcoord serve: loaded 50 shards (1 groups"), \
            server.loaded_line
        conn = RawConn(server.port)
        resp = fetch(conn, "slow")
        assert resp.error_code == 0
        offset = resp.topics[0].partitions[0].committed_offset
        assert 0 <= offset < 100 and offset % 4 == 0    # an earlier commit of partition 0
        conn.close()
    finally:
        assert server.stop() == 0, server.log()


def test_data_dir_of_another_shard_count_is_refused(tmp_path):
    import subprocess
    import sys

    from helpers.server import ROOT
    _fill(tmp_path, 1)        # a store written with 50 shards
    proc = subprocess.run([sys.executable, "-m", "fastcoord", "serve", "--port", "0",
                           "--data-dir", str(tmp_path), "--num-shards", "10"],
                          capture_output=True, timeout=60, cwd=str(ROOT))
    assert proc.returncode == 2
    assert b"num_shards" in proc.stderr, proc.stderr

"""No wedged connection: a leader's SyncGroup waiting for its assignment's durable write
is answered when the leader leaves, so the later answers on its connection go out.

The server runs in this process (a thread's event loop) on a real socket of 127.0.0.1
with the durable store (fsync=always) on a temporary directory; the store's group
writes are really written, but their completions are held until the test releases
them, which makes the window between the leader's sync and its answer deterministic.
"""
from __future__ import annotations

import asyncio
import threading

import pytest

from helpers.server import RawConn

BOUND = 30.0
ANSWER = 5.0       # how long an answer due at once may take (a slow shared machine)
GROUP = "no-wedge"
JOIN = {"group_id": GROUP, "session_timeout": 10_000, "rebalance_timeout": 10_000,
        "member_id": "", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00"}]}
API_VERSIONS = {"client_software_name": "t", "client_software_version": "1"}


class HeldServer:
    """A CoordinatorServer of the twin `impl` with the durable store on a loop of its own thread; its
    group writes complete only when `release()` is called."""

    def __init__(self, tmp_path, impl: str) -> None:
        from fastcoord import CoordinatorConfig
        from fastcoord.server import CoordinatorServer, ServerConfig
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = CoordinatorServer(ServerConfig(
            port=0, data_dir=str(tmp_path), store="durable", fsync="always", impl=impl,
            coordinator=CoordinatorConfig(group_initial_rebalance_delay_ms=0)))
        self._run(self.server.start())
        self._run(self.server.wait_loaded())
        self.held: list = []
        store = self.server.store
        real = store.store_group

        def store_group(group_id, record, done):
            real(group_id, record, lambda error: self.held.append((done, error)))
        store.store_group = store_group
        self.port = self.server.port

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(BOUND)

    def release(self) -> None:
        while self.held:
            done, error = self.held.pop(0)
            done(error)

    def stop(self) -> None:
        self.release()
        try:
            self._run(self.server.shutdown())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(BOUND)
            if not self.thread.is_alive():
                self.loop.close()       # (its self-pipe sockets with it)


@pytest.fixture
def held(tmp_path, impl):
    s = HeldServer(tmp_path, impl)
    try:
        yield s
    finally:
        s.stop()


def _leader(conn: RawConn):
    joined = conn.call(11, 3, JOIN)
    assert joined.error_code == 0 and joined.leader == joined.member_id, joined
    return joined


@pytest.mark.parametrize("leave_on", ["same", "other"])
def test_leader_leaving_while_its_sync_is_stored_leaves_no_wedge(held, leave_on):
    conn = RawConn(held.port, timeout=ANSWER)
    other = RawConn(held.port, timeout=ANSWER)
    try:
        joined = _leader(conn)
        sync = conn.send(14, 3, {"group_id": GROUP, "generation_id": joined.generation_id,
                                 "member_id": joined.member_id, "group_instance_id": None,
                                 "assignments": [{"member_id": joined.member_id,
                                                  "assignment": b"a"}]})
        leave = {"group_id": GROUP, "members": [{"member_id": joined.member_id,
                                                 "group_instance_id": None}]}
        if leave_on == "same":
            left = conn.send(13, 3, leave)
        else:
            # the sync reached the coordinator: its write is parked on the store
            for _ in range(int(BOUND / 0.01)):
                if held.held:
                    break
                threading.Event().wait(0.01)
            assert other.call(13, 3, leave).members[0].error_code == 0
        versions = conn.send(18, 3, API_VERSIONS)
        corr, answer = conn.recv()
        assert corr == sync and answer.error_code == 25, answer      # UNKNOWN_MEMBER_ID
        if leave_on == "same":
            corr, answer = conn.recv()
            assert corr == left and answer.members[0].error_code == 0, answer
        corr, answer = conn.recv()
        assert corr == versions and answer.error_code == 0
        held.release()                  # the write lands late: no second answer
        assert conn.call(18, 3, API_VERSIONS).error_code == 0
    finally:
        conn.close()
        other.close()

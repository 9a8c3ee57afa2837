"""A full disk never disables anything for good: the request log drops (and counts)
what it cannot write, warns once and writes again once space returns, rotation
included; the server's periodic tasks go on (idle connections are still closed);
commits answer NOT_COORDINATOR meanwhile and succeed again by themselves. On a real
full tmpfs."""
from __future__ import annotations

import errno
import json
import logging
import os

from helpers.server import RawConn, ServerProc, wait_until
from helpers.server import metrics_url, scrape

NOT_COORDINATOR = 16
HEARTBEAT = {"group_id": "g", "generation_id": 0, "member_id": "nobody"}


def _fill(directory) -> str:
    """Fill the file system of `directory` to the last byte; the filler's path."""
    path = os.path.join(directory, "filler")
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
    return path


def _lines(path) -> list:
    """Every line of a request log, each of which must be whole JSON."""
    with open(path, "rb") as f:
        return [json.loads(line) for line in f.read().splitlines()]


def _record(log, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        log.write_lines(b'{"ts":%d,"api":"Heartbeat"}\n' % i)


def test_request_log_drops_lines_while_full_and_writes_again(small_tmpfs, caplog):  # noqa: F811
    from fastcoord.server.requestlog import RequestLog
    log = RequestLog(small_tmpfs / "requests.jsonl", max_bytes=20_000, backups=1)
    _record(log, 100)
    log.flush()
    filler = _fill(small_tmpfs)
    with caplog.at_level(logging.WARNING, logger="fastcoord.server.requestlog"):
        for batch in range(20):             # rotations and flushes, all failing
            _record(log, 500, 100 + batch * 500)
            log.flush()
    assert log.dropped > 0
    warnings = [r for r in caplog.records if "dropping lines" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert "No space left on device" in warnings[0].getMessage()
    os.unlink(filler)                        # space returns
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fastcoord.server.requestlog"):
        _record(log, 10, 1_000_000)
        log.flush()
    assert "writing again" in caplog.text
    log.close()
    written = _lines(small_tmpfs / "requests.jsonl")
    if os.path.exists(small_tmpfs / "requests.jsonl.1"):
        written = _lines(small_tmpfs / "requests.jsonl.1") + written
    seen = [line["ts"] for line in written]
    assert seen[-10:] == list(range(1_000_000, 1_000_010))
    assert len(seen) + log.dropped == 100 + 20 * 500 + 10
    assert seen == sorted(seen)              # whole lines, in order, none twice


def test_server_keeps_serving_and_recovers_from_a_full_disk(tmp_path, small_tmpfs):  # noqa: F811
    data = small_tmpfs / "data"              # the store and the request log; stderr is not
    proc = ServerProc(tmp_path / "server.log", "--data-dir", str(data),
                      "--idle-timeout-ms", "400", "--status-interval-s", "0.2",
                      "--metrics-port", "0")
    request_log = data / "requests.jsonl"
    conns = []
    try:
        conn = RawConn(proc.port)
        conns.append(conn)
        commit = {"group_id": "simple", "generation_id": -1, "member_id": "",
                  "retention_time_ms": -1,
                  "topics": [{"name": "orders", "partitions": [
                      {"partition_index": 0, "committed_offset": 5,
                       "committed_metadata": "m" * 1000}]}]}

        def commit_error():                  # on the latest connection
            return conn.call(8, 2, commit).topics[0].partitions[0].error_code

        assert commit_error() == 0
        filler = _fill(small_tmpfs)
        # The log's last page may still take a few: commit until the disk says no.
        first = next((i for i in range(100) if commit_error() != 0), None)
        assert first is not None, "the tmpfs never filled up"
        assert [commit_error() for _ in range(3)] == [NOT_COORDINATOR] * 3
        for _ in range(2000):                # request-log lines the disk cannot take
            assert conn.call(12, 4, HEARTBEAT).error_code == 25
        # The sweeper still runs: an idle connection is closed.
        idle = RawConn(proc.port)
        conns.append(idle)
        assert idle.call(12, 4, HEARTBEAT).error_code == 25
        assert idle.closed_by_server(5)
        assert "dropping lines" in proc.log()
        dropped = "fastcoord_request_log_dropped_lines_total"
        assert scrape(metrics_url(proc))[dropped] >= 2000
        os.unlink(filler)                    # space returns: commits and the log recover
        conn = RawConn(proc.port)            # the first one went idle meanwhile
        conns.append(conn)
        assert wait_until(lambda: commit_error() == 0, 5)
        size = os.path.getsize(request_log)
        assert wait_until(lambda: os.path.getsize(request_log) > size, 5)
        assert wait_until(lambda: "writing again" in proc.log(), 5)
    finally:
        for c in conns:
            c.close()
        assert proc.stop() == 0
    log_text = proc.log()
    assert "Traceback" not in log_text, log_text[-3000:]
    assert log_text.count("dropping lines") == 1, log_text[-3000:]


def test_periodic_sweep_survives_an_exception(tmp_path, caplog):
    """The sweep's request-log flush raising (any failure, not only a handled one)
    neither stops the sweep (idle connections are still closed) nor logs a traceback
    per sweep."""
    import asyncio

    from fastcoord.server.protocol import encode_request
    from fastcoord.server.requestlog import RequestLog
    from fastcoord.server.server import CoordinatorServer, ServerConfig

    class FailingFlush(RequestLog):
        failing = True

        def flush(self):
            if self.failing:
                raise OSError(errno.EIO, "injected")
            super().flush()

    async def scenario():
        server = CoordinatorServer(ServerConfig(port=0, idle_timeout_ms=200),
                                   request_log=FailingFlush(tmp_path / "requests.jsonl"))
        await server.start()
        try:
            await asyncio.sleep(0.3)          # a few failing sweeps first
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(encode_request(12, 4, 1, HEARTBEAT, "t"))
            head = await asyncio.wait_for(reader.readexactly(4), 5)
            await reader.readexactly(int.from_bytes(head, "big"))
            assert await asyncio.wait_for(reader.read(), 5) == b""   # closed as idle
            writer.close()
        finally:
            server.request_log.failing = False
            await server.shutdown()

    with caplog.at_level(logging.ERROR, logger="fastcoord.server"):
        asyncio.run(scenario())
    failures = [r for r in caplog.records if "sweep failed" in r.getMessage()]
    assert len(failures) == 1, caplog.text

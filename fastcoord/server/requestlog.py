"""The request log: one JSON line per answered request, rotated by size.

Fields: ts (unix seconds), api, version, client (client id), host, group, member,
generation, error (the top-level error code, when the response has one), latency_ms
(from decoding the request to encoding its response, parked time included).
Writes are buffered and flushed by the server every second and at shutdown.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

from .protocol import API_NAMES

__all__ = ["RequestLog"]

_encode_str = json.encoder.encode_basestring_ascii     # what json.dumps uses (C)


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


class RequestLog:
    def __init__(self, path, *, max_bytes: int = 64 * 1024 * 1024, backups: int = 5) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.backups = backups
        self._file = open(self.path, "a", encoding="utf-8", buffering=1 << 16)
        self._size = self._file.tell()

    def record(self, conn, request, body: dict, seconds: float) -> None:
        req = request.body
        generation = getattr(req, "generation_id", None)
        if generation is None:
            generation = getattr(req, "generation_id_or_member_epoch", None)
        error = body.get("error_code") if isinstance(body, dict) else None
        self._write(API_NAMES.get(request.api_key, request.api_key), request.api_version,
                    request.client_id, conn, getattr(req, "group_id", None),
                    getattr(req, "member_id", None), generation, error, seconds)

    def record_heartbeat(self, conn, version: int, client_id, group_id, member_id,
                         generation: int, error: int, seconds: float) -> None:
        """A heartbeat answered by the server's fast path: the same line `record` makes."""
        self._write("Heartbeat", version, client_id, conn, group_id, member_id, generation,
                    error, seconds)

    def _write(self, api, version, client_id, conn, group_id, member_id, generation, error,
               seconds: float) -> None:
        # Formatted by hand (the hot path: one line per heartbeat); the same JSON that
        # json.dumps(..., separators=(",", ":")) makes of these fields, in this order.
        line = (f'{{"ts":{round(time.time(), 6)!r},'
                f'"api":{_json_str(api) if isinstance(api, str) else api},'
                f'"version":{version},"client":{_json_str(client_id)},'
                f'"host":{_json_str(conn.session.client_host if conn.session else None)},'
                f'"group":{_json_str(group_id)},"member":{_json_str(member_id)},'
                f'"generation":{_json_int(generation)},"error":{_json_int(error)},'
                f'"latency_ms":{round(seconds * 1000, 3)!r}}}\n')
        self._file.write(line)
        self._size += len(line)
        if self._size >= self.max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        self._file.close()
        for i in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        if self.backups > 0:
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink()
        self._file = open(self.path, "a", encoding="utf-8", buffering=1 << 16)
        self._size = 0

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

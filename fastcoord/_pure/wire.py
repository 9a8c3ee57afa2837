"""The server's hot path, pure twin: a run of plain Heartbeat frames answered in order.

Walk the receive buffer from `pos`; for each whole frame that is a Heartbeat request in
the plain form (`decode_heartbeat_request` accepts it), call the coordinator and append
the encoded response to `out`. Stop at the first frame that is anything else and return
its position: the server's per-frame path handles it, so which path answered never
changes what a client sees. fastcoord/_native/wire.pyx does the same in one C loop.
"""
from __future__ import annotations

import struct
from typing import Callable, List, Optional, Tuple

from ..server.protocol import (HEARTBEAT_KEY, decode_heartbeat_request,
                               encode_heartbeat_response)

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hhi")

LogEntry = Tuple[int, Optional[str], str, str, int, int]


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
                        body.generation_id, error))
        pos += 4 + size
    return pos

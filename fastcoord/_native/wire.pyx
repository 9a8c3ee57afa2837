# cython: language_level=3
"""The server's hot path: a run of plain Heartbeat frames answered in one C loop.

`heartbeat_run` walks the connection's receive buffer from `pos`, and for each whole
frame that is a Heartbeat request in the plain form the Python decoder
(`server.protocol.decode_heartbeat_request`) accepts, calls `heartbeat(group, member,
generation, instance)` and appends the encoded response to `out`. It stops, returning
the position reached, at the first frame it does not answer (another API, an unusual
or malformed form, an oversized or incomplete frame): the caller's per-frame path
handles that one exactly as before, so behaviour never depends on which path ran.

The pure twin is fastcoord/_pure/wire.py (the same function over the Python decoder).
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, uint8_t

from fastcoord._native.bigendian cimport read_i16, read_i32, write_i32

cdef enum:
    HEARTBEAT_KEY = 12


# A string field: [start, start + length) of the frame, or length -1 for null.
cdef struct Field:
    Py_ssize_t start
    Py_ssize_t length


cdef inline Py_ssize_t _str16(const uint8_t* f, Py_ssize_t pos, Py_ssize_t end,
                              bint nullable, Field* out) noexcept nogil:
    """An int16-length string at f[pos]: the position after it, or -1 to decline."""
    cdef int16_t n
    if pos + 2 > end:
        return -1
    n = read_i16(f + pos)
    if n < 0:
        if n == -1 and nullable:
            out.start = pos + 2
            out.length = -1
            return pos + 2
        return -1
    if pos + 2 + n > end:
        return -1
    out.start = pos + 2
    out.length = n
    return pos + 2 + n


cdef inline Py_ssize_t _compact(const uint8_t* f, Py_ssize_t pos, Py_ssize_t end,
                                bint nullable, Field* out) noexcept nogil:
    """A compact string with a one-byte length at f[pos]: the next position, or -1."""
    cdef int n
    if pos + 1 > end:
        return -1
    n = <int>f[pos] - 1
    if n < 0:
        if not nullable:
            return -1
        out.start = pos + 1
        out.length = -1
        return pos + 1
    if n >= 127 or pos + 1 + n > end:       # a multi-byte varint length, or cut short
        return -1
    out.start = pos + 1
    out.length = n
    return pos + 1 + n


cdef inline Py_ssize_t _string(const uint8_t* f, Py_ssize_t pos, Py_ssize_t end,
                               bint nullable, bint compact, Field* out) noexcept nogil:
    """A string field of either encoding (flexible versions use compact strings)."""
    if compact:
        return _compact(f, pos, end, nullable, out)
    return _str16(f, pos, end, nullable, out)


cdef inline object _text(const uint8_t* f, Field field):
    if field.length < 0:
        return None
    return PyUnicode_DecodeUTF8(<const char*>(f + field.start), field.length, "strict")


cdef bytes _response(int version, int32_t correlation, int error):
    """The Heartbeat response frame: size, correlation id, [v4+: header tags], [v1+:
    throttle 0], error, [v4+: body tags] (byte for byte what protocol.py encodes)."""
    cdef bint flexible = version >= 4
    cdef Py_ssize_t n = 10 + (4 if version >= 1 else 0) + (2 if flexible else 0)
    cdef bytes response = PyBytes_FromStringAndSize(NULL, n)
    cdef char* r = PyBytes_AS_STRING(response)
    cdef Py_ssize_t p = 8
    write_i32(r, <int32_t>(n - 4))
    write_i32(r + 4, correlation)
    if flexible:
        r[p] = 0                                  # header tagged fields
        p += 1
    if version >= 1:
        write_i32(r + p, 0)                       # throttle
        p += 4
    r[p] = <char>(error >> 8)
    r[p + 1] = <char>error
    if flexible:
        r[p + 2] = 0                              # body tagged fields
    return response


def heartbeat_run(bytearray buf, Py_ssize_t pos, Py_ssize_t max_frame, int min_version,
                  int max_version, heartbeat, list out, list log=None):
    """heartbeat_run(buf, pos, max_frame, min_version, max_version, heartbeat, out, log=None) -> int

    Answer the consecutive plain Heartbeat frames of `buf` from `pos`; return the
    position of the first frame not answered (== len(buf) when all were). `log`, when a
    list, receives (api_version, client_id, group_id, member_id, generation, error) per
    answered request, for the request log."""
    cdef Py_ssize_t end = len(buf), fpos, fend, p
    cdef const uint8_t* f
    cdef int32_t size, correlation, generation
    cdef int version, error
    cdef bint flexible
    cdef Field client, group, member, instance
    if pos < 0 or pos > end:
        raise ValueError(f"pos must be within the buffer, got {pos}")
    while end - pos >= 4:
        # Re-read the buffer's address each frame: heartbeat() runs Python code, which
        # never resizes this buffer (the caller owns it) but costs nothing to be safe.
        f = <const uint8_t*>(<char*>buf)
        size = read_i32(f + pos)
        if size < 8 or size > max_frame or end - pos - 4 < size:
            break
        fpos = pos + 4
        fend = fpos + size
        if read_i16(f + fpos) != HEARTBEAT_KEY:
            break
        version = read_i16(f + fpos + 2)
        if version < min_version or version > max_version or version > 4:
            break
        correlation = read_i32(f + fpos + 4)
        p = _str16(f, fpos + 8, fend, True, &client)
        if p < 0:
            break
        instance.length = -1
        flexible = version >= 4
        if flexible:
            if p >= fend or f[p] != 0:               # header tagged fields
                break
            p += 1
        p = _string(f, p, fend, False, flexible, &group)
        if p < 0 or p + 4 > fend:
            break
        generation = read_i32(f + p)
        p = _string(f, p + 4, fend, False, flexible, &member)
        if p < 0:
            break
        if version >= 3:
            p = _string(f, p, fend, True, flexible, &instance)
            if p < 0:
                break
        if flexible:
            if p >= fend or f[p] != 0:               # body tagged fields
                break
            p += 1
        if p != fend:                                  # bytes left over
            break
        try:
            group_id = _text(f, group)
            member_id = _text(f, member)
            instance_id = _text(f, instance)
        except UnicodeDecodeError:
            break
        error = heartbeat(group_id, member_id, generation, instance_id)
        out.append(_response(version, correlation, error))
        if log is not None:
            log.append((version, _text(<const uint8_t*>(<char*>buf), client), group_id,
                        member_id, generation, error))
        pos = fend
    return pos

# cython: language_level=3
"""The server's hot path: a run of plain Heartbeat frames answered in one C loop.

`heartbeat_run` walks the connection's receive buffer from `pos`, and for each whole
frame that is a Heartbeat request in the plain form the Python decoder
(`server.protocol.decode_heartbeat_request`) accepts, calls `heartbeat(group, member,
generation, instance)` and appends the encoded response to `out`. It stops, returning
the position reached, at the first frame it does not answer (another API, an unusual
or malformed form, an oversized or incomplete frame): the caller's per-frame path
handles that one exactly as before, so behaviour never depends on which path ran.

`HeartbeatReader` is the same parsing for a whole read: it answers the read's leading
heartbeats and hands their responses to the transport in one write, so a connection
whose reads are plain heartbeats runs no Python code per heartbeat but the
coordinator's.

The pure twin is fastcoord/server/_pure/wire.py (the same function over the Python decoder).
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8, PyUnicode_DecodeUTF8
from libc.stdio cimport snprintf
from libc.stdint cimport int16_t, int32_t, uint8_t
from libc.stdlib cimport free
from libc.string cimport memcpy, strlen

from fastcoord.core._native.engines cimport MemberTable
from fastcoord.server._native.bigendian cimport read_i16, read_i32, write_i32
from fastcoord.server._native.buffers cimport grow
from fastcoord.core._native.clocks cimport monotonic_s, realtime_s
from fastcoord.server._native.jsontext cimport (
    plain_json, put_int, put_quoted, put_text, put_thousandths,
)

from json.encoder import encode_basestring_ascii as _json_str   # json.dumps' own (C)

cdef enum:
    HEARTBEAT_KEY = 12


cdef inline char* _put_literal(char* p, const char* text) noexcept nogil:
    """A C string literal (its length is folded at compile time once inlined)."""
    return put_text(p, text, strlen(text))


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


cdef Py_ssize_t _encode(char* r, int version, int32_t correlation, int error) noexcept nogil:
    """The Heartbeat response frame into r: size, correlation id, [v4+: header tags],
    [v1+: throttle 0], error, [v4+: body tags] (byte for byte what protocol.py encodes).
    Returns its length (at most MAX_RESPONSE)."""
    cdef bint flexible = version >= 4
    cdef Py_ssize_t n = 10 + (4 if version >= 1 else 0) + (2 if flexible else 0)
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
    return n


cdef enum:
    MAX_RESPONSE = 16           # the v4 response: 4 + 4 + 1 + 4 + 2 + 1


cdef Py_ssize_t _parse(const uint8_t* f, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t max_frame,
                       int min_version, int max_version, Heartbeat* hb) noexcept nogil:
    """The frame at f[pos] if it is a whole Heartbeat request in the plain form the
    Python decoder accepts: the position after it. Otherwise -1 (another API, an unusual
    or malformed form, an oversized or incomplete frame): the general path's to judge."""
    cdef int32_t size
    cdef Py_ssize_t fpos, fend, p
    cdef bint flexible
    if end - pos < 4:
        return -1
    size = read_i32(f + pos)
    if size < 8 or size > max_frame or end - pos - 4 < size:
        return -1
    fpos = pos + 4
    fend = fpos + size
    if read_i16(f + fpos) != HEARTBEAT_KEY:
        return -1
    hb.version = read_i16(f + fpos + 2)
    if hb.version < min_version or hb.version > max_version or hb.version > 4:
        return -1
    hb.correlation = read_i32(f + fpos + 4)
    p = _str16(f, fpos + 8, fend, True, &hb.client)
    if p < 0:
        return -1
    hb.instance.length = -1
    flexible = hb.version >= 4
    if flexible:
        if p >= fend or f[p] != 0:               # header tagged fields
            return -1
        p += 1
    p = _string(f, p, fend, False, flexible, &hb.group)
    if p < 0 or p + 4 > fend:
        return -1
    hb.generation = read_i32(f + p)
    p = _string(f, p + 4, fend, False, flexible, &hb.member)
    if p < 0:
        return -1
    if hb.version >= 3:
        p = _string(f, p, fend, True, flexible, &hb.instance)
        if p < 0:
            return -1
    if flexible:
        if p >= fend or f[p] != 0:               # body tagged fields
            return -1
        p += 1
    if p != fend:                                  # bytes left over
        return -1
    return fend


cdef enum:
    # _answer's "not answered": outside the int16 error codes (UNKNOWN_SERVER_ERROR is
    # -1, a code the coordinator may answer and that must go out like any other)
    DECLINED = -0x10000
    # where _answer leaves the decoded ids (heartbeat_run's request-log entries)
    ID_GROUP = 0
    ID_MEMBER = 1
    ID_CLIENT = 2
    ID_INSTANCE = 3


cdef inline int _answer(const uint8_t* f, Heartbeat* hb, heartbeat,
                        list ids) except? -0x10001:
    """Call heartbeat(group, member, generation, instance) for a parsed request: its
    error code, or DECLINED when an id is not valid UTF-8 (the general path then
    decides, and heartbeat was not called). With `ids` (a list of 4), the decoded
    group, member, client and instance ids are left there (ID_*) for the request log."""
    try:
        group_id = _text(f, hb.group)
        member_id = _text(f, hb.member)
        instance_id = _text(f, hb.instance)
        client_id = _text(f, hb.client)     # the Python decoder declines a bad one too
    except UnicodeDecodeError:
        return DECLINED
    if ids is not None:
        ids[ID_GROUP] = group_id
        ids[ID_MEMBER] = member_id
        ids[ID_CLIENT] = client_id
        ids[ID_INSTANCE] = instance_id
    return heartbeat(group_id, member_id, hb.generation, instance_id)


def heartbeat_run(bytearray buf, Py_ssize_t pos, Py_ssize_t max_frame, int min_version,
                  int max_version, heartbeat, list out, list log=None):
    """heartbeat_run(buf, pos, max_frame, min_version, max_version, heartbeat, out, log=None) -> int

    Answer the consecutive plain Heartbeat frames of `buf` from `pos`; return the
    position of the first frame not answered (== len(buf) when all were). `log`, when a
    list, receives (api_version, client_id, group_id, member_id, generation, error,
    group_instance_id) per answered request, for the request log."""
    cdef Py_ssize_t end = len(buf), next_pos
    cdef const uint8_t* f
    cdef Heartbeat hb
    cdef int error
    cdef char response[MAX_RESPONSE]
    cdef list ids = [None, None, None, None] if log is not None else None
    if pos < 0 or pos > end:
        raise ValueError(f"pos must be within the buffer, got {pos}")
    while True:
        # Re-read the buffer's address each frame: heartbeat() runs Python code, which
        # never resizes this buffer (the caller owns it) but costs nothing to be safe.
        f = <const uint8_t*>(<char*>buf)
        next_pos = _parse(f, pos, end, max_frame, min_version, max_version, &hb)
        if next_pos < 0:
            break
        error = _answer(f, &hb, heartbeat, ids)
        if error == DECLINED:
            break
        out.append(PyBytes_FromStringAndSize(response,
                                             _encode(response, hb.version, hb.correlation, error)))
        if log is not None:
            log.append((hb.version, ids[ID_CLIENT], ids[ID_GROUP], ids[ID_MEMBER],
                        hb.generation, error, ids[ID_INSTANCE]))
        pos = next_pos
    return pos


cdef char* _put_id(char* p, const uint8_t* f, Field field) except NULL:
    """An id of the frame (valid UTF-8: _answer decoded it) as JSON text: null, its
    bytes in quotes, or, when it needs escapes (rarely), json.dumps' text of it."""
    cdef object text
    if field.length < 0:
        return _put_literal(p, b"null")
    if plain_json(f + field.start, field.length):
        return put_quoted(p, f + field.start, field.length)
    text = _json_str(_text(f, field))
    if len(text) > 6 * field.length + 2:       # cannot happen: \uXXXX per byte at most
        raise ValueError(f"request log: the escaped id {text!r} outgrew its bound")
    return put_text(p, PyUnicode_AsUTF8(text), len(text))


cdef class HeartbeatReader:
    """The whole per-read fast path of a connection whose reads hold plain heartbeats.

    `reader(data, write)` answers the Heartbeat frames at the start of `data` (one
    read's bytes, with nothing buffered before them), hands every response to
    `write` in one call (the transport's write: one send() per read), and returns how
    many bytes it consumed; the caller's general path takes the rest. It counts what
    it answered and records each answer's latency (the time spent in the call, as
    the general path records receipt to response) in `latencies` (a deque) when given.
    No Python code runs per heartbeat except the coordinator's heartbeat itself.

    With `log` (the request log's write_lines) and a connection's `host` (its address
    as JSON text, bytes), each answer also gets its request-log line, formatted here
    (RequestLog's fields and format, the request's group instance id where it names
    one); the lines go to `log` in one call per read, or
    per `flush_log()` for callers of the C-level `answer`."""

    def __cinit__(self, heartbeat, Py_ssize_t max_frame, int min_version, int max_version,
                  latencies=None, log=None, steady=None, int consumer_min=0,
                  int consumer_max=-1):
        if not callable(heartbeat):
            raise TypeError(f"heartbeat must be callable, got {type(heartbeat).__name__}")
        if max_frame < 8:
            raise ValueError(f"max_frame must be at least 8, got {max_frame}")
        if log is not None and not callable(log):
            raise TypeError(f"log must be callable or None, got {type(log).__name__}")
        if steady is not None and not callable(steady):
            raise TypeError(f"steady must be callable or None, got {type(steady).__name__}")
        self.steady = steady
        # A native member table's bound consumer_steady is asked without a Python call:
        # the same method's C body, whose answer is what the call would return
        owner = getattr(steady, "__self__", None)
        self.table = owner if isinstance(owner, MemberTable) and \
            getattr(steady, "__name__", None) == "consumer_steady" else None
        self.consumer_min = consumer_min
        self.consumer_max = consumer_max
        self.consumer_answered = 0
        self.log = log
        self.log_buf = NULL
        self.log_len = 0
        self.log_cap = 0
        self.heartbeat = heartbeat
        self.max_frame = max_frame
        self.min_version = min_version
        self.max_version = max_version
        self.latencies = latencies
        self.answered = 0
        self.scratch = NULL
        self.scratch_cap = 0

    def __dealloc__(self):
        free(self.scratch)
        free(self.log_buf)

    cdef Py_ssize_t answer(self, const uint8_t* f, Py_ssize_t end, Py_ssize_t* used,
                           object host, double started, object ident) except -1:
        """Answer the leading heartbeats of f[0:end] (read at `started`, monotonic
        seconds) into the scratch buffer and return the bytes consumed. `*used` is the
        length of the responses in scratch, kept up to date per answer, so that when a
        heartbeat call raises, the caller can still send the answers before it (they are
        counted and timed here either way). With a log and `host` (bytes), each
        answer's log line is buffered (flush_log). With `ident` (the connection's
        (client id, client host)) and `steady`, a settled member's steady
        ConsumerGroupHeartbeat is answered too (consumer_heartbeat_frame's)."""
        cdef Py_ssize_t pos = 0, next_pos, answered = 0, consumers = 0
        cdef Heartbeat hb
        cdef int error
        cdef bint logging = self.log is not None and host is not None
        cdef char ts[32]                  # the read's time, the same in each of its lines
        cdef Py_ssize_t ts_len = 0
        if logging:
            ts_len = snprintf(ts, sizeof(ts), b"%.6f", realtime_s())
        used[0] = 0
        try:
            while True:
                next_pos = _parse(f, pos, end, self.max_frame, self.min_version,
                                  self.max_version, &hb)
                if next_pos < 0:
                    if ident is None or self.steady is None:
                        break
                    next_pos = self._answer_steady(f, pos, end, used, <tuple>ident, &hb)
                    if next_pos < 0:
                        break                     # the general path's to judge
                    consumers += 1
                    pos = next_pos
                    if logging:
                        self._log_line(ts, ts_len, f, &hb, <bytes>host, 0,
                                       monotonic_s() - started, b"ConsumerGroupHeartbeat")
                    continue
                error = _answer(f, &hb, self.heartbeat, None)
                if error == DECLINED:
                    break                         # the general path's to judge
                if used[0] + MAX_RESPONSE > self.scratch_cap and \
                        grow(&self.scratch, &self.scratch_cap, used[0] + MAX_RESPONSE) < 0:
                    raise MemoryError()
                used[0] += _encode(self.scratch + used[0], hb.version, hb.correlation, error)
                answered += 1
                pos = next_pos
                if logging:
                    self._log_line(ts, ts_len, f, &hb, <bytes>host, error,
                                   monotonic_s() - started, b"Heartbeat")
        finally:
            if answered or consumers:
                self.answered += answered
                self.consumer_answered += consumers
                if self.latencies is not None:
                    seconds = monotonic_s() - started
                    for _ in range(answered + consumers):
                        self.latencies.append(seconds)
        return pos

    cdef Py_ssize_t _answer_steady(self, const uint8_t* f, Py_ssize_t pos, Py_ssize_t end,
                                   Py_ssize_t* used, tuple ident, Heartbeat* hb) except -2:
        """The frame at f[pos] answered into scratch if it is a settled member's steady
        ConsumerGroupHeartbeat (consumer_heartbeat_frame's rules): the position after
        it, `hb` holding its ids (as spans of f) for the request log. Otherwise -1,
        nothing done."""
        cdef int32_t size
        cdef Steady cg
        cdef const uint8_t* frame = f + pos + 4
        if end - pos < 4:
            return -1
        size = read_i32(f + pos)
        if size < 8 or size > self.max_frame or end - pos - 4 < size:
            return -1
        if _parse_steady(frame, size, self.consumer_min, self.consumer_max, &cg) < 0:
            return -1
        try:
            group_id = _text(frame, cg.group)
            member_id = _text(frame, cg.member)
        except UnicodeDecodeError:
            return -1
        cdef int32_t epoch, interval
        client_id, client_host = ident
        if self.table is not None:
            # (the answer's epoch is the request's; its interval kept beside the cached
            # answer, which is not touched)
            if not (type(client_id) is str and type(client_host) is str):
                return -1
            interval = self.table.c_wire_steady(group_id, member_id, cg.epoch, client_id,
                                                client_host)
            if interval < 0:
                return -1
            epoch = cg.epoch
        else:
            result = self.steady(group_id, member_id, cg.epoch, client_id, client_host)
            if result is None:
                return -1
            epoch = result.member_epoch
            interval = result.heartbeat_interval_ms
        if used[0] + 27 + cg.member.length > self.scratch_cap and \
                grow(&self.scratch, &self.scratch_cap, used[0] + 27 + cg.member.length) < 0:
            raise MemoryError()
        used[0] += _encode_steady(self.scratch + used[0], frame, &cg, epoch, interval)
        hb.version = cg.version
        hb.generation = cg.epoch
        hb.client = cg.client
        hb.group = cg.group
        hb.member = cg.member
        hb.instance.length = -1             # (null in the steady form: no line field)
        hb.client.start += pos + 4          # (spans of f, as _parse leaves them)
        hb.group.start += pos + 4
        hb.member.start += pos + 4
        return pos + 4 + size

    cdef int _log_line(self, const char* ts, Py_ssize_t ts_len, const uint8_t* f,
                       const Heartbeat* hb, bytes host, int error, double seconds,
                       const char* api) except -1:
        """The request-log line of the heartbeat `hb` of frame buffer `f`, answered with
        `error` in `seconds`, into log_buf: the fields and text RequestLog writes for it
        (ts is the read's, formatted once; latency_ms is rounded to the microsecond)."""
        cdef Py_ssize_t host_len = PyBytes_GET_SIZE(host)
        cdef Py_ssize_t ids_len = (hb.group.length + hb.member.length
                                   + (hb.client.length if hb.client.length > 0 else 0)
                                   + (hb.instance.length if hb.instance.length > 0 else 0))
        # The fixed text and numbers take under 240 bytes; a JSON string at most 6
        # bytes per byte of UTF-8 (a \uXXXX escape) and its quotes.
        cdef Py_ssize_t need = self.log_len + 256 + ts_len + host_len + 6 * ids_len
        cdef char* p
        cdef long long micros
        if need > self.log_cap and grow(&self.log_buf, &self.log_cap, need) < 0:
            raise MemoryError()
        p = self.log_buf + self.log_len
        p = _put_literal(p, b'{"ts":')
        p = put_text(p, ts, ts_len)
        p = _put_literal(p, b',"api":"')
        p = _put_literal(p, api)
        p = _put_literal(p, b'","version":')
        p = put_int(p, hb.version)
        p = _put_literal(p, b',"client":')
        p = _put_id(p, f, hb.client)
        p = _put_literal(p, b',"host":')
        p = put_text(p, PyBytes_AS_STRING(host), host_len)
        p = _put_literal(p, b',"group":')
        p = _put_id(p, f, hb.group)
        p = _put_literal(p, b',"member":')
        p = _put_id(p, f, hb.member)
        p = _put_literal(p, b',"generation":')
        p = put_int(p, hb.generation)
        p = _put_literal(p, b',"error":')
        p = put_int(p, error)
        p = _put_literal(p, b',"latency_ms":')
        micros = <long long>(seconds * 1e6 + (0.5 if seconds >= 0 else -0.5))
        p = put_thousandths(p, micros)
        if hb.instance.length >= 0:             # a static member's (heartbeat_line's)
            p = _put_literal(p, b',"instance":')
            p = _put_id(p, f, hb.instance)
        p = _put_literal(p, b'}\n')
        self.log_len = p - self.log_buf
        return 0

    def flush_log(self):
        """flush_log(): hand the buffered request-log lines to `log` in one call."""
        cdef bytes lines
        if self.log_len:
            lines = PyBytes_FromStringAndSize(self.log_buf, self.log_len)
            self.log_len = 0
            self.log(lines)

    def __call__(self, bytes data, write, host=None, ident=None):
        cdef Py_ssize_t used = 0, pos
        if host is not None and type(host) is not bytes:
            raise TypeError(f"host must be bytes (JSON text) or None, got {type(host).__name__}")
        check_ident(ident)
        try:
            pos = self.answer(<const uint8_t*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data),
                              &used, host, monotonic_s(), ident)
        finally:
            # What was answered goes out even when a later heartbeat call raised.
            if used:
                write(PyBytes_FromStringAndSize(self.scratch, used))
            self.flush_log()
        return pos


# -- ConsumerGroupHeartbeat (KIP-848): a settled member's steady heartbeat -------------------
cdef enum:
    CONSUMER_HEARTBEAT_KEY = 68
    NULL_ENTITY = 0xFF          # a null nullable struct (the response's assignment): int8 -1


cdef Py_ssize_t _parse_steady(const uint8_t* f, Py_ssize_t size, int min_version,
                              int max_version, Steady* cg) noexcept nogil:
    """The frame f[0:size] (no length prefix) if it is a ConsumerGroupHeartbeat v0/v1
    in the steady form a settled member sends: every optional field null,
    rebalance_timeout_ms -1, one-byte compact lengths, no tagged fields, nothing left
    over: 0. Otherwise -1, the general path's (kio's) to decode."""
    cdef Py_ssize_t p, nulls
    if size < 8 or read_i16(f) != CONSUMER_HEARTBEAT_KEY:
        return -1
    cg.version = read_i16(f + 2)
    if cg.version < min_version or cg.version > max_version or cg.version > 1:
        return -1
    cg.correlation = read_i32(f + 4)
    p = _str16(f, 8, size, True, &cg.client)
    if p < 0 or p >= size or f[p] != 0:          # header tagged fields
        return -1
    p = _compact(f, p + 1, size, False, &cg.group)
    if p < 0:
        return -1
    p = _compact(f, p, size, False, &cg.member)
    if p < 0 or p + 4 > size:
        return -1
    cg.epoch = read_i32(f + p)
    p += 4
    if p + 6 > size or f[p] != 0 or f[p + 1] != 0:      # instance id, rack id: null
        return -1
    if read_i32(f + p + 2) != -1:                       # rebalance_timeout_ms
        return -1
    p += 6
    # subscribed topic names, [v1: regex,] server assignor, topic partitions: null;
    # then the body's tagged fields: none
    nulls = 5 if cg.version >= 1 else 4
    if p + nulls != size:
        return -1
    while p < size:
        if f[p] != 0:
            return -1
        p += 1
    return 0


cdef Py_ssize_t _encode_steady(char* r, const uint8_t* f, Steady* cg, int32_t epoch,
                               int32_t interval) noexcept nogil:
    """The response to the steady heartbeat `cg` of frame `f` into r: throttle 0, error 0,
    null message, its member id (the request's bytes), `epoch`, `interval`, null
    assignment, no tagged fields (byte for byte what kio encodes). Its length."""
    cdef Py_ssize_t n = cg.member.length, p = 9
    write_i32(r + 4, cg.correlation)
    r[8] = 0                                      # header tagged fields
    write_i32(r + p, 0)                           # throttle
    r[p + 4] = 0                                  # error code (int16)
    r[p + 5] = 0
    r[p + 6] = 0                                  # error message: null
    r[p + 7] = <char>(n + 1)                      # member id (n < 127: one-byte length)
    p += 8
    memcpy(r + p, f + cg.member.start, n)
    p += n
    write_i32(r + p, epoch)
    write_i32(r + p + 4, interval)
    r[p + 8] = <char>NULL_ENTITY                  # assignment: null
    r[p + 9] = 0                                  # body tagged fields
    p += 10
    write_i32(r, <int32_t>(p - 4))
    return p


def consumer_heartbeat_frame(bytes frame, int min_version, int max_version, steady,
                             str client_id, str client_host):
    """consumer_heartbeat_frame(frame, min_version, max_version, steady, client_id, client_host) -> tuple | None

    A ConsumerGroupHeartbeat frame (without its length prefix) in the steady form,
    answered by `steady(group_id, member_id, member_epoch, client_id, client_host)`
    (the member table's consumer_steady: the settled member's cached answer, or None):
    (response frame, version, header client id, group id, member id, member epoch).
    None when the frame is not in that form, an id is not valid UTF-8, or `steady`
    declines, having changed nothing: the general path (kio, apis.py) answers it."""
    cdef const uint8_t* f = <const uint8_t*>PyBytes_AS_STRING(frame)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(frame)
    cdef Steady cg
    cdef char* r
    cdef bytes response
    if _parse_steady(f, size, min_version, max_version, &cg) < 0:
        return None
    try:
        group_id = _text(f, cg.group)
        member_id = _text(f, cg.member)
        header_client = _text(f, cg.client)
    except UnicodeDecodeError:
        return None
    result = steady(group_id, member_id, cg.epoch, client_id, client_host)
    if result is None:
        return None
    response = PyBytes_FromStringAndSize(NULL, 27 + cg.member.length)
    r = PyBytes_AS_STRING(response)
    _encode_steady(r, f, &cg, result.member_epoch, result.heartbeat_interval_ms)
    return response, cg.version, header_client, group_id, member_id, cg.epoch


def check_ident(ident):
    """A connection's (client id, client host) for the steady consumer heartbeats, or None."""
    if ident is not None and not (type(ident) is tuple and len(ident) == 2
                                  and type(ident[0]) is str and type(ident[1]) is str):
        raise TypeError(f"ident must be a (client_id, client_host) tuple of str or None, "
                        f"got {ident!r}")

# cython: language_level=3, freethreading_compatible=True
"""The load generator's measurement engine: Heartbeat (or ConsumerGroupHeartbeat)
requests on many connections, paced, sent, received and timed in one C loop with the
GIL released.

`run_heartbeats(fds, frames, ...)` takes connections that are already set up (their
members joined and synced by fastcoord/loadgen.py, in asyncio) and, for each,
the encoded Heartbeat request frames of its members. It then owns the sockets for one
run: warm-up (not measured), `duration_s` measured, and a drain until every request
sent has its response. Its own (user-space) CPU per heartbeat is small next to the
kernel's (send, recv, epoll) and the server's, so the latency it reports is the server's
and the kernel's, not the load generator's queueing. (The open loop
spins between sends due less than SLACK_NS apart: its CPU time there is not its cost.)
`fastcoord.loadgen` keeps the asyncio engine it replaces as the readable (and
portable) version.

- Closed loop (`rate` None): every connection keeps `pipeline` requests in flight; each
  response sends the next one on its connection.
- Open loop (`rate` > 0): the n-th heartbeat is due at start + n / rate. The loop reads
  CLOCK_MONOTONIC every iteration and sends what is due now, round-robin over the
  connections, at most `pipeline` in flight on each; what is due when every connection
  is full is not sent and counts as `unsent` (an open loop never queues).
- Responses on a connection come in request order (Kafka's guarantee), so a FIFO per
  connection of (correlation id, send time) matches each response with its request;
  the response's correlation id is checked and its error code read at the fixed
  offset of the API and version in use.

Only requests sent inside the measured window are counted and timed (by their send
time, so the window is exact whatever the loop was doing at its edges). A connection
that the server closes, a response that does not match, or requests still unanswered
`drain_s` after the run end the run with `failure` set in the result, never a hang.

Linux only (epoll): setup.py builds it only there.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.errno cimport EINTR, errno
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdio cimport snprintf
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcpy, memmove, memset, strerror
from posix.resource cimport getrusage, rusage
from posix.time cimport timespec
from posix.unistd cimport close

from fastcoord.server._native.bigendian cimport read_i16, read_i32, write_i32
from fastcoord.server._native.buffers cimport grow
from fastcoord.core._native.clocks cimport monotonic_ns
from fastcoord.server._native.sockets cimport (EPOLL_CLOEXEC, EPOLL_CTL_ADD, EPOLL_CTL_MOD, EPOLLERR,
                                        EPOLLHUP, EPOLLIN, EPOLLOUT, EPOLLRDHUP, MSG_DONTWAIT,
                                        MSG_NOSIGNAL, epoll_create1, epoll_ctl, epoll_event,
                                        epoll_wait, fc_would_block, recv, send)

import numpy as np

__all__ = ["run_heartbeats"]


cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    enum:
        POLLIN
    ctypedef unsigned long nfds_t
    int ppoll(pollfd* fds, nfds_t nfds, const timespec* timeout, const void* sigmask)

cdef extern from "<sys/resource.h>" nogil:
    enum:
        RUSAGE_THREAD               # Linux: the calling thread's own times

cdef extern from "Python.h":
    # Declared here without `except -1`: called from a nogil loop through a `with gil`
    # function, its error must stay set for the caller to raise, not be reported.
    int _check_signals "PyErr_CheckSignals" ()


cdef enum:
    HEARTBEAT_KEY = 12
    CONSUMER_HEARTBEAT_KEY = 68   # ConsumerGroupHeartbeat (KIP-848)
    MAX_EVENTS = 256
    MAX_RESPONSE = 1 << 20        # a (ConsumerGroup)Heartbeat response is small: more is garbage
    SAMPLE_MAX = 1024            # a ConsumerGroupHeartbeat error carries its message
    IN_START = 4096
    SEND_BURST_MAX = 32         # open-loop sends between two looks at the responses
    FAILURE_MAX = 256
    WHAT_MAX = 200              # a failure's text before "connection N: " goes in front

# The kernel may wake a sleeping thread up to its timer slack (50 µs by default) after
# the time asked: the open loop sleeps until that long before the next send is due and
# spins on epoll_wait(0) for the rest, and does not sleep for less than SLEEP_MIN_NS
# (a sleep that short costs more in the switch than it saves).
cdef int64_t SLACK_NS = 50_000
cdef int64_t SLEEP_MIN_NS = 20_000
cdef int64_t SIGNAL_CHECK_NS = 100_000_000     # Ctrl-C stays responsive during a run
cdef int64_t SIGNAL_FORCE_NS = 900_000_000
cdef int64_t LATE_NS = 100_000                 # an open-loop send this late counts as late


cdef struct Conn:
    int fd
    bint blocked                  # EPOLLOUT armed: the kernel took only part of the output
    uint32_t corr                 # the last correlation id sent (wraps like the wire int32)
    Py_ssize_t frame0             # this connection's frames: [frame0, frame0 + nframes)
    Py_ssize_t nframes
    Py_ssize_t next_frame         # the member whose heartbeat goes next (round-robin)
    int head                      # FIFO of requests in flight: ring slots
    int inflight                  #   [index * pipeline, (index + 1) * pipeline)
    char* inbuf                   # bytes received and not yet a whole frame
    Py_ssize_t in_len
    Py_ssize_t in_cap
    char* outbuf                  # bytes queued and not yet taken by the kernel
    Py_ssize_t out_pos
    Py_ssize_t out_len
    Py_ssize_t out_cap


cdef struct Run:
    int epfd
    Conn* conns
    Py_ssize_t nconn
    int pipeline
    # the response layout of the Heartbeat version in use (see _response in wire.pyx)
    bint flexible                 # v4+: a tag byte after the correlation id
    int error_offset              # of the error code, from the correlation id
    int min_size                  # of a response frame, without its size field
    double rate_per_ns            # 0: closed loop
    int64_t t0
    int64_t t_measure             # requests sent in [t_measure, t_end) are measured
    int64_t t_end                 # no request is sent from then on
    int64_t t_drain               # unanswered requests then are a failure
    int64_t now                   # the clock at the last recv()
    # every connection's frames, copied once so the loop touches no Python object
    char* arena
    Py_ssize_t* frame_off
    Py_ssize_t* frame_len
    int32_t* fifo_corr
    int64_t* fifo_ns
    Py_ssize_t total_inflight
    # results
    double* lat                   # seconds, one per measured response
    Py_ssize_t nlat               # measured responses (one latency each)
    Py_ssize_t lat_cap
    int64_t* errors               # measured responses by error code (as uint16)
    int64_t issued                # open loop: heartbeats scheduled so far (sent or not)
    int64_t sent                  # measured requests sent
    int64_t unsent
    int64_t sends                 # send() calls
    int64_t recvs                 # recv() calls that returned bytes
    int64_t blocked_sends         # times a connection's output waited for EPOLLOUT
    int64_t polls                 # epoll_wait() calls
    int64_t sleeps                # sleeps of the open loop between sends (ppoll)
    int64_t late_sends            # measured open-loop sends LATE_NS or more behind schedule
    int64_t max_lag_ns
    char sample[SAMPLE_MAX]       # the first response (for a check by kio in Python)
    int sample_len
    char error_sample[SAMPLE_MAX] # the first response with an error
    int error_sample_len
    Py_ssize_t failed_conn
    char failure[FAILURE_MAX]


cdef void _thread_cpu(double* user_s, double* system_s) noexcept nogil:
    """CPU time of this thread so far: in user space, and in the kernel (where the
    sockets' send and receive paths run, loopback delivery to the peer included)."""
    cdef rusage ru
    getrusage(RUSAGE_THREAD, &ru)
    user_s[0] = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6
    system_s[0] = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6


cdef void _init_run(Run* r) noexcept:
    """Every pointer NULL and every count 0, so _release frees only what was made."""
    memset(r, 0, sizeof(Run))
    r.epfd = -1
    r.failed_conn = -2                 # < -1: no failure yet (see _fail)


cdef int _reraise() except -1:
    return -1          # the error set by the signal handler propagates from here


cdef int _fail(Run* r, Py_ssize_t index, const char* what) noexcept nogil:
    """Record the run's failure (the first one wins) and return -1."""
    if r.failed_conn < -1:
        r.failed_conn = index
        if index >= 0:
            snprintf(r.failure, FAILURE_MAX, "connection %zd: %s", index, what)
        else:
            snprintf(r.failure, FAILURE_MAX, "%s", what)
    return -1


cdef int _fail_errno(Run* r, Py_ssize_t index, const char* call) noexcept nogil:
    cdef char what[WHAT_MAX]
    if index < 0:
        snprintf(what, WHAT_MAX, "%s: %s", call, strerror(errno))
    else:
        snprintf(what, WHAT_MAX, "%s: %s (%d heartbeats in flight)", call,
                 strerror(errno), r.conns[index].inflight)
    return _fail(r, index, what)


cdef int _signals() noexcept with gil:
    return _check_signals()


cdef int _watch(Run* r, Conn* c, Py_ssize_t index, bint output) noexcept nogil:
    """Interest in the socket's input always, in its output only while some is waiting."""
    cdef epoll_event ev
    ev.events = EPOLLIN | EPOLLRDHUP | (EPOLLOUT if output else 0)
    ev.data.u64 = <uint64_t>index
    if epoll_ctl(r.epfd, EPOLL_CTL_MOD, c.fd, &ev) < 0:
        return _fail_errno(r, index, "epoll_ctl")
    c.blocked = output
    return 0


cdef int _queue(Run* r, Conn* c, Py_ssize_t index, int64_t now) noexcept nogil:
    """Put the connection's next heartbeat in its output buffer and its FIFO."""
    cdef Py_ssize_t f = c.frame0 + c.next_frame
    cdef Py_ssize_t n = r.frame_len[f]
    cdef Py_ssize_t slot
    cdef char* p
    if c.out_len + n > c.out_cap:
        if c.out_pos:                   # the kernel took a part: move the rest down first
            memmove(c.outbuf, c.outbuf + c.out_pos, c.out_len - c.out_pos)
            c.out_len -= c.out_pos
            c.out_pos = 0
        if c.out_len + n > c.out_cap and grow(&c.outbuf, &c.out_cap, c.out_len + n) < 0:
            return _fail(r, index, "out of memory for the output buffer")
    p = c.outbuf + c.out_len
    memcpy(p, r.arena + r.frame_off[f], n)
    c.corr += 1
    write_i32(p + 8, c.corr)             # size, api key, api version | correlation id
    c.out_len += n
    c.next_frame += 1
    if c.next_frame == c.nframes:
        c.next_frame = 0
    slot = index * r.pipeline + (c.head + c.inflight) % r.pipeline
    r.fifo_corr[slot] = <int32_t>c.corr
    r.fifo_ns[slot] = now
    c.inflight += 1
    r.total_inflight += 1
    if r.t_measure <= now < r.t_end:
        r.sent += 1
    return 0


cdef int _flush(Run* r, Conn* c, Py_ssize_t index) noexcept nogil:
    """Send what the connection has queued; what the kernel does not take waits in the
    buffer for EPOLLOUT (a send() that takes part of it is not an error)."""
    cdef ssize_t n
    while c.out_pos < c.out_len:
        n = send(c.fd, c.outbuf + c.out_pos, c.out_len - c.out_pos,
                 MSG_DONTWAIT | MSG_NOSIGNAL)
        r.sends += 1
        if n < 0:
            if errno == EINTR:
                continue
            if fc_would_block(errno):
                if not c.blocked:
                    r.blocked_sends += 1
                    return _watch(r, c, index, True)
                return 0
            return _fail_errno(r, index, "send")
        c.out_pos += n
    c.out_pos = 0
    c.out_len = 0
    if c.blocked:
        return _watch(r, c, index, False)
    return 0


cdef inline void _keep_sample(char* dest, int* dest_len, const uint8_t* frame,
                              Py_ssize_t size) noexcept nogil:
    if dest_len[0] == 0 and size <= SAMPLE_MAX:
        memcpy(dest, frame, size)
        dest_len[0] = <int>size


cdef int _record(Run* r, int64_t latency_ns, int error) noexcept nogil:
    cdef double* p
    if r.nlat == r.lat_cap:
        p = <double*>realloc(r.lat, r.lat_cap * 2 * sizeof(double))
        if p == NULL:
            return _fail(r, -1, "out of memory for the latencies")
        r.lat = p
        r.lat_cap *= 2
    r.lat[r.nlat] = latency_ns * 1e-9
    r.nlat += 1
    if error != 0:
        r.errors[<uint16_t>error] += 1
    return 0


cdef Py_ssize_t _read(Run* r, Conn* c, Py_ssize_t index) noexcept nogil:
    """Read what the socket has and match every whole response frame with the request
    at the head of the FIFO: the number of responses, or -1 on failure."""
    cdef char what[WHAT_MAX]
    cdef ssize_t n
    cdef Py_ssize_t pos = 0, size, slot, got = 0
    cdef const uint8_t* p
    cdef const uint8_t* body
    cdef int32_t corr
    cdef int64_t sent_at
    cdef int error
    if c.in_cap - c.in_len < 256 and grow(&c.inbuf, &c.in_cap, c.in_len + IN_START) < 0:
        return _fail(r, index, "out of memory for the input buffer")
    n = recv(c.fd, c.inbuf + c.in_len, c.in_cap - c.in_len, MSG_DONTWAIT)
    if n == 0:
        snprintf(what, WHAT_MAX, "closed by the server (%d heartbeats in flight)",
                 c.inflight)
        return _fail(r, index, what)
    if n < 0:
        if errno == EINTR or fc_would_block(errno):
            return 0
        return _fail_errno(r, index, "recv")
    r.now = monotonic_ns()
    r.recvs += 1
    c.in_len += n
    p = <const uint8_t*>c.inbuf
    while c.in_len - pos >= 4:
        size = read_i32(p + pos)
        if size < r.min_size or size > MAX_RESPONSE:
            snprintf(what, WHAT_MAX, "response frame of %zd bytes (a Heartbeat "
                     "response of this version has at least %d)", size, r.min_size)
            return _fail(r, index, what)
        if c.in_len - pos - 4 < size:
            break                       # the rest of this frame is still on its way
        body = p + pos + 4
        if c.inflight == 0:
            return _fail(r, index, "a response with no request in flight")
        slot = index * r.pipeline + c.head
        corr = read_i32(body)
        if corr != r.fifo_corr[slot]:
            snprintf(what, WHAT_MAX, "response correlation id %d, expected %d",
                     corr, r.fifo_corr[slot])
            return _fail(r, index, what)
        if r.flexible and body[4] != 0:
            return _fail(r, index, "tagged fields in a response header (not expected)")
        error = read_i16(body + r.error_offset)
        sent_at = r.fifo_ns[slot]
        c.head = c.head + 1 if c.head + 1 < r.pipeline else 0
        c.inflight -= 1
        r.total_inflight -= 1
        if r.t_measure <= sent_at < r.t_end:
            if _record(r, r.now - sent_at, error) < 0:
                return -1
        _keep_sample(r.sample, &r.sample_len, body, size)
        if error != 0:
            _keep_sample(r.error_sample, &r.error_sample_len, body, size)
        pos += 4 + size
        got += 1
    if pos:
        c.in_len -= pos
        memmove(c.inbuf, c.inbuf + pos, c.in_len)
    return got


cdef inline int64_t _due(Run* r, int64_t k) noexcept nogil:
    """Open loop: when heartbeat k (from 0) is due, start + k / rate."""
    return r.t0 + <int64_t>(k / r.rate_per_ns)


cdef int _send_due(Run* r, int64_t now, Py_ssize_t* rr) noexcept nogil:
    """Open loop: send the heartbeats due by `now`, round-robin from connection *rr, at
    most SEND_BURST_MAX of them: a loop that fell behind (descheduled, or its sends cost
    more than the schedule allows) then reads responses between bursts, so that their
    receive times are not pushed back by a long run of sends."""
    # how many are due by now (the inverse of _due)
    cdef int64_t target = <int64_t>((now - r.t0) * r.rate_per_ns) + 1
    cdef int64_t lag, sent_at = now
    cdef Py_ssize_t i = rr[0], full
    cdef int burst = 0
    cdef Conn* c
    while r.issued < target and burst < SEND_BURST_MAX:
        full = 0
        while r.conns[i].inflight >= r.pipeline:
            i = i + 1 if i + 1 < r.nconn else 0
            full += 1
            if full == r.nconn:
                # Every connection has `pipeline` in flight: what is due is dropped,
                # not queued (queueing would turn the open loop into a closed one).
                if now >= r.t_measure:
                    r.unsent += target - r.issued
                r.issued = target
                rr[0] = i
                return 0
        c = &r.conns[i]
        if burst:
            sent_at = monotonic_ns()            # each request's own send time (a send takes µs)
        if sent_at >= r.t_measure:
            lag = sent_at - _due(r, r.issued)
            if lag >= LATE_NS:
                r.late_sends += 1
            if lag > r.max_lag_ns:
                r.max_lag_ns = lag
        r.issued += 1
        if _queue(r, c, i, sent_at) < 0:
            return -1
        if not c.blocked and _flush(r, c, i) < 0:
            return -1
        i = i + 1 if i + 1 < r.nconn else 0
        burst += 1
    rr[0] = i
    return 0


cdef int _on_event(Run* r, epoll_event* ev) noexcept nogil:
    cdef Py_ssize_t index = <Py_ssize_t>ev.data.u64
    cdef Conn* c = &r.conns[index]
    cdef Py_ssize_t got, k
    if ev.events & EPOLLOUT and c.blocked:
        if _flush(r, c, index) < 0:
            return -1
    if ev.events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP):
        got = _read(r, c, index)
        if got < 0:
            return -1
        if got and r.rate_per_ns == 0 and r.now < r.t_end:
            # closed loop: each response sends the connection's next heartbeat
            for k in range(got):
                if _queue(r, c, index, r.now) < 0:
                    return -1
            if not c.blocked and _flush(r, c, index) < 0:
                return -1
    return 0


cdef int _loop(Run* r) noexcept nogil:
    """The run: 0 when every request was answered, -1 on failure (r.failure), -2 when
    a signal handler raised (the Python error is set)."""
    cdef epoll_event events[MAX_EVENTS]
    cdef pollfd pfd
    cdef timespec ts
    cdef int64_t now, wait, deadline, next_check
    cdef Py_ssize_t i, rr = 0
    cdef int n, k, timeout_ms
    cdef bint sending
    cdef bint open_loop = r.rate_per_ns > 0
    cdef char what[WHAT_MAX]
    pfd.fd = r.epfd
    pfd.events = POLLIN
    now = r.t0
    next_check = now + SIGNAL_CHECK_NS
    if not open_loop:
        for i in range(r.nconn):
            for k in range(r.pipeline):
                if _queue(r, &r.conns[i], i, now) < 0:
                    return -1
            if _flush(r, &r.conns[i], i) < 0:
                return -1
    while True:
        now = monotonic_ns()
        sending = now < r.t_end
        if not sending:
            if r.total_inflight == 0:
                return 0
            if now >= r.t_drain:
                snprintf(what, WHAT_MAX, "%zd heartbeats unanswered %.1f s after the run",
                         r.total_inflight, (r.t_drain - r.t_end) * 1e-9)
                return _fail(r, -1, what)
        elif open_loop and _send_due(r, now, &rr) < 0:
            return -1
        # How long nothing is due: until the next open-loop send, the end of the run or
        # the drain's deadline, and at most SIGNAL_CHECK_NS. Block in epoll_wait for
        # whole milliseconds of that; below a millisecond the loop sleeps in ppoll with
        # a nanosecond timeout, and below SLEEP_MIN_NS it spins.
        deadline = r.t_end if sending else r.t_drain
        if sending and open_loop:
            wait = _due(r, r.issued)            # the next one
            if wait < deadline:
                deadline = wait
        if deadline > now + SIGNAL_CHECK_NS:
            deadline = now + SIGNAL_CHECK_NS
        wait = deadline - now - (SLACK_NS if open_loop else 0)
        timeout_ms = <int>(wait // 1_000_000) if wait >= 1_000_000 else 0
        # Signal handlers (Ctrl-C) run with the GIL, which another thread may hold for
        # milliseconds: take it only where the loop is about to block for a millisecond
        # anyway, and at the latest every SIGNAL_FORCE_NS (a loop that sends every few
        # microseconds never blocks).
        if now >= next_check and (timeout_ms > 0 or now >= next_check + SIGNAL_FORCE_NS):
            next_check = now + SIGNAL_CHECK_NS
            if _signals() < 0:
                return -2
            continue                    # that may have taken a while: look at the clock
        n = epoll_wait(r.epfd, events, MAX_EVENTS, timeout_ms)
        r.polls += 1
        if n < 0:
            if errno != EINTR:
                return _fail_errno(r, -1, "epoll_wait")
            continue
        for k in range(n):
            if _on_event(r, &events[k]) < 0:
                return -1
        if n == 0 and timeout_ms == 0 and wait >= SLEEP_MIN_NS:
            ts.tv_sec = 0
            ts.tv_nsec = wait       # < 1 ms here; a ready socket ends the sleep at once
            r.sleeps += 1
            ppoll(&pfd, 1, &ts, NULL)


cdef int _response_layout(Run* r, int api_key, int version) except -1:
    """Where the error code sits (see _response in wire.pyx): Heartbeat v0 correlation
    id, error; v1-3 + throttle before the error; v4 + a header tag byte after the
    correlation id and a body tag byte at the end. ConsumerGroupHeartbeat (flexible from
    v0) is laid out as Heartbeat v4 up to its error code; what follows is longer."""
    r.flexible = version >= 4 or api_key == CONSUMER_HEARTBEAT_KEY
    r.error_offset = 4 + (1 if r.flexible else 0) + (4 if version >= 1 or r.flexible else 0)
    r.min_size = r.error_offset + 2 + (1 if r.flexible else 0)
    return 0


cdef bint _heartbeat_kind(int api_key, int version) noexcept:
    """The requests the engine sends: Heartbeat v0-4, ConsumerGroupHeartbeat v0-1."""
    if api_key == HEARTBEAT_KEY:
        return 0 <= version <= 4
    return api_key == CONSUMER_HEARTBEAT_KEY and 0 <= version <= 1


cdef Py_ssize_t _copy_frames(Run* r, list frames, int* api_key) except -1:
    """Copy every frame into one arena (the loop must not touch Python objects) and
    check that they are all Heartbeat requests, or all ConsumerGroupHeartbeat requests,
    of one version; return that version (and the api key in `api_key`)."""
    cdef Py_ssize_t total = 0, count = 0, i, f = 0, off = 0, n
    cdef const uint8_t* b
    cdef int version = -1, v, key
    cdef Conn* c
    for conn_frames in frames:
        if not isinstance(conn_frames, list) or not conn_frames:
            raise ValueError("every connection needs a non-empty list of frames (bytes)")
        for frame in <list>conn_frames:
            if not isinstance(frame, bytes):
                raise TypeError(f"frames must be bytes, got {type(frame).__name__}")
            total += PyBytes_GET_SIZE(frame)
            count += 1
    r.arena = <char*>malloc(total)
    r.frame_off = <Py_ssize_t*>malloc(count * sizeof(Py_ssize_t))
    r.frame_len = <Py_ssize_t*>malloc(count * sizeof(Py_ssize_t))
    if r.arena == NULL or r.frame_off == NULL or r.frame_len == NULL:
        raise MemoryError()
    for i in range(r.nconn):
        c = &r.conns[i]
        c.frame0 = f
        c.nframes = len(<list>frames[i])
        for frame in <list>frames[i]:
            n = PyBytes_GET_SIZE(frame)
            b = <const uint8_t*>PyBytes_AS_STRING(frame)
            if n < 12 or read_i32(b) != n - 4:
                raise ValueError(f"connection {i}: a frame of {n} bytes whose size field "
                                 f"says {read_i32(b) if n >= 4 else None}")
            key = read_i16(b + 4)
            v = read_i16(b + 6)
            if not _heartbeat_kind(key, v) or (version >= 0 and (key != api_key[0] or v != version)):
                what = ("Heartbeat v0-4 or ConsumerGroupHeartbeat v0-1" if version < 0 else
                        f"{'Heartbeat' if api_key[0] == HEARTBEAT_KEY else 'ConsumerGroupHeartbeat'}"
                        f" v{version}")
                raise ValueError(f"connection {i}: not a {what} request "
                                 f"(api key {key}, version {v})")
            version = v
            api_key[0] = key
            memcpy(r.arena + off, b, n)
            r.frame_off[f] = off
            r.frame_len[f] = n
            off += n
            f += 1
            if n * r.pipeline > c.out_cap:
                c.out_cap = n * r.pipeline      # room for a pipeline of its largest frames
    return version


cdef _release(Run* r):
    cdef Py_ssize_t i
    if r.conns != NULL:
        for i in range(r.nconn):
            free(r.conns[i].inbuf)
            free(r.conns[i].outbuf)
        free(r.conns)
    if r.epfd >= 0:
        close(r.epfd)               # the sockets stay open: they are the caller's
    free(r.arena)
    free(r.frame_off)
    free(r.frame_len)
    free(r.fifo_corr)
    free(r.fifo_ns)
    free(r.lat)
    free(r.errors)


def run_heartbeats(fds, frames, *, int pipeline=1, rate=None, double duration_s=1.0,
                   double warmup_s=0.0, double drain_s=10.0):
    """run_heartbeats(fds, frames, *, pipeline=1, rate=None, duration_s=1.0, warmup_s=0.0, drain_s=10.0) -> dict

    Heartbeats on the connected sockets `fds` (the caller's: left open, and nothing
    else may read or write them meanwhile), `frames[i]` being connection i's encoded
    Heartbeat or ConsumerGroupHeartbeat requests (bytes, one per member, all of one API
    and version; bytes 8..12, the correlation id, are replaced). Closed loop when `rate`
    is None, else open loop at `rate` heartbeats/s in all (see the module docstring). Returns a dict: answered,
    sent, elapsed_s, unsent, errors ({code: count}), latencies (numpy float64 seconds,
    one per measured response, in arrival order), failure (None or the reason the run
    stopped early; the connections are then in an unknown state), failed_connection,
    sample_response / error_sample_response (response frames without the size field,
    for checking the layout), and the loop's own counts (sends, recvs, blocked_sends,
    polls, sleeps, late_sends, max_lag_s, cpu_user_s, cpu_system_s: the run's thread
    CPU in user space and in the kernel, polling included)."""
    cdef Run r
    cdef Py_ssize_t i, nconn
    cdef int version, status, api_key = -1
    cdef double user0, sys0, user1, sys1
    cdef double rate_value = 0.0
    cdef epoll_event ev
    cdef double[::1] view
    cdef Conn* c
    fds = list(fds)
    frames = list(frames)
    nconn = len(fds)
    if nconn == 0 or nconn != len(frames):
        raise ValueError("need one list of frames per socket, and at least one socket")
    if pipeline < 1:
        raise ValueError("pipeline must be >= 1")
    if not duration_s > 0 or not warmup_s >= 0 or not drain_s > 0:
        raise ValueError("duration_s and drain_s must be > 0, warmup_s >= 0")
    if rate is not None:
        rate_value = rate
        if not rate_value > 0:
            raise ValueError("rate must be > 0 (or None for the closed loop)")
    _init_run(&r)
    try:
        r.nconn = nconn
        r.pipeline = pipeline
        r.rate_per_ns = rate_value * 1e-9
        r.conns = <Conn*>calloc(nconn, sizeof(Conn))
        r.fifo_corr = <int32_t*>malloc(nconn * pipeline * sizeof(int32_t))
        r.fifo_ns = <int64_t*>malloc(nconn * pipeline * sizeof(int64_t))
        r.errors = <int64_t*>calloc(65536, sizeof(int64_t))
        r.lat_cap = max(1024, <Py_ssize_t>(rate_value * duration_s * 1.1)
                        if rate is not None else 1 << 20)
        r.lat = <double*>malloc(r.lat_cap * sizeof(double))
        if (r.conns == NULL or r.fifo_corr == NULL or r.fifo_ns == NULL or r.errors == NULL
                or r.lat == NULL):
            raise MemoryError()
        version = _copy_frames(&r, frames, &api_key)
        _response_layout(&r, api_key, version)
        r.epfd = epoll_create1(EPOLL_CLOEXEC)
        if r.epfd < 0:
            raise OSError(errno, f"epoll_create1: {strerror(errno).decode()}")
        for i in range(nconn):
            c = &r.conns[i]
            c.fd = fds[i]
            c.in_cap = IN_START
            c.inbuf = <char*>malloc(c.in_cap)
            c.outbuf = <char*>malloc(c.out_cap)
            if c.inbuf == NULL or c.outbuf == NULL:
                raise MemoryError()
            ev.events = EPOLLIN | EPOLLRDHUP
            ev.data.u64 = <uint64_t>i
            if epoll_ctl(r.epfd, EPOLL_CTL_ADD, c.fd, &ev) < 0:
                raise OSError(errno, f"connection {i} (fd {c.fd}): epoll_ctl: "
                                     f"{strerror(errno).decode()}")
        with nogil:
            _thread_cpu(&user0, &sys0)
            r.t0 = monotonic_ns()
            r.t_measure = r.t0 + <int64_t>(warmup_s * 1e9)
            r.t_end = r.t_measure + <int64_t>(duration_s * 1e9)
            r.t_drain = r.t_end + <int64_t>(drain_s * 1e9)
            status = _loop(&r)
            _thread_cpu(&user1, &sys1)
        if status == -2:
            _reraise()
        errors = {}
        for i in range(65536):
            if r.errors[i]:
                errors[<int16_t><uint16_t>i] = r.errors[i]
        latencies = np.empty(r.nlat, dtype=np.float64)
        if r.nlat:
            view = latencies
            memcpy(&view[0], r.lat, r.nlat * sizeof(double))
        return {
            "answered": r.nlat,
            "sent": r.sent,
            "elapsed_s": (r.t_end - r.t_measure) * 1e-9,
            "unsent": r.unsent,
            "errors": errors,
            "latencies": latencies,
            "failure": (<char*>r.failure).decode("utf-8", "replace") if status else None,
            "failed_connection": r.failed_conn if status and r.failed_conn >= 0 else None,
            "unanswered": r.total_inflight,
            "api_key": api_key,
            "heartbeat_version": version,
            "sample_response": PyBytes_FromStringAndSize(r.sample, r.sample_len)
                               if r.sample_len else None,
            "error_sample_response": PyBytes_FromStringAndSize(r.error_sample,
                                                               r.error_sample_len)
                                     if r.error_sample_len else None,
            "sends": r.sends, "recvs": r.recvs, "blocked_sends": r.blocked_sends,
            "polls": r.polls, "sleeps": r.sleeps, "late_sends": r.late_sends,
            "max_lag_s": r.max_lag_ns * 1e-9,
            "cpu_user_s": user1 - user0, "cpu_system_s": sys1 - sys0,
        }
    finally:
        _release(&r)


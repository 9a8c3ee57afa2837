# cython: language_level=3
"""The server's heartbeat lane: connections whose reads are plain heartbeats, served
from C without a Python call per read.

With many connections and one heartbeat per read (how consumers behave), the per-read
path (`wire.HeartbeatReader`) still costs a trip through the event loop per request:
the loop's poll and read callback, a bytes object, the protocol's `data_received` and
the transport's `write`. The lane takes those connections off the event loop's reading
and serves them itself: their sockets sit in the lane's own epoll set, whose descriptor
the event loop watches (`loop.add_reader(lane.fileno(), lane.poll)`), so one callback
answers every ready connection: `recv` into one buffer, the reader's C core (parse,
`coord.heartbeat`, encode), one `send` of the answers.

A connection leaves the lane (`on_return(key, rest, unsent, error)`, after which the
lane no longer touches its socket) at the first read that holds anything else: another
API, a frame cut short, a heartbeat the reader declines. `rest` is that read's bytes
from the first one not answered, `unsent` what the kernel did not take of the answers
(they go out first), `error` an OSError from recv or send, or the exception a heartbeat
call raised; the owner's general path takes it from there, so behaviour never depends
on which path ran. An end of stream (recv returns 0) leaves the lane with nothing:
the owner's own reading sees it.

Edge-triggered: epoll reports a socket once per arrival instead of re-checking every
ready socket at the next wait (a tcp_poll per socket per wait, level-triggered). So
each serve reads until the socket is drained: a read shorter than the buffer empties
it; after FULL_READS_MAX full reads (a client pipelining faster than it is answered)
the connection is handed back, and the owner's level-triggered reading takes the rest.

The pure twin is fastcoord/server/_pure/lane.py (select.epoll and os.read/os.write).
Linux only (epoll): setup.py builds it only there.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.errno cimport EINTR, errno
from libc.stdint cimport uint8_t
from libc.string cimport memset
from posix.unistd cimport close

from fastcoord.server._native.sockets cimport (EPOLL_CLOEXEC, EPOLL_CTL_ADD, EPOLL_CTL_DEL, EPOLLET,
                                        EPOLLIN,
                                        MSG_DONTWAIT, MSG_NOSIGNAL, epoll_create1, epoll_ctl,
                                        epoll_event, epoll_wait, fc_would_block, recv, send)
from fastcoord.core._native.clocks cimport monotonic_s
from fastcoord.server._native.wire cimport HeartbeatReader

import os

from fastcoord.server._native.wire import check_ident

__all__ = ["HeartbeatLane"]

cdef enum:
    MAX_EVENTS = 256            # ready connections served per poll (the rest: next poll)
    READ_SIZE = 65536           # one recv; a heartbeat frame is about 60-100 bytes
    FULL_READS_MAX = 16         # full reads in one serve before handing the socket back

cdef double POLL_BUDGET_S = 0.001   # one poll call serves batches for at most this long


cdef class HeartbeatLane:
    def __cinit__(self, reader, on_return):
        # Before anything can raise: __dealloc__ closes epfd, which starts at 0 (stdin).
        self.epfd = -1
        if not isinstance(reader, HeartbeatReader):
            raise TypeError(f"reader must be a HeartbeatReader, got {type(reader).__name__}")
        if not callable(on_return):
            raise TypeError(f"on_return must be callable, got {type(on_return).__name__}")
        self.reader = reader
        self.on_return = on_return
        self.conns = {}
        self.hosts = {}
        self.idents = {}
        self.last_read = NULL
        self.active = NULL
        self.fd_cap = 0
        self.buf = <char*>PyMem_Malloc(READ_SIZE)
        if self.buf is NULL:
            raise MemoryError()
        self.epfd = epoll_create1(EPOLL_CLOEXEC)
        if self.epfd < 0:
            raise OSError(errno, os.strerror(errno))
        self.reads = 0
        self.handbacks = 0

    def __dealloc__(self):
        if self.epfd >= 0:
            close(self.epfd)
        PyMem_Free(self.buf)
        PyMem_Free(self.last_read)
        PyMem_Free(self.active)

    def fileno(self):
        """fileno() -> int: the epoll descriptor, readable when a connection is."""
        self._check_open()
        return self.epfd

    def __len__(self):
        return len(self.conns)

    def __contains__(self, fd):
        return fd in self.conns

    cdef int _check_open(self) except -1:
        if self.epfd < 0:
            raise ValueError("the lane is closed")
        return 0

    def add(self, int fd, key, host=None, ident=None):
        """add(fd, key, host=None, ident=None): serve socket `fd` (non-blocking, its
        owner's reading paused); `key` is what on_return gets when it leaves; `host`
        (bytes: the peer's address as JSON text) goes in its request-log lines when the
        reader logs; `ident`, the connection's (client id, client host), lets the reader
        answer its steady ConsumerGroupHeartbeats."""
        cdef epoll_event ev
        cdef double* grown
        cdef char* grown_active
        cdef Py_ssize_t cap
        self._check_open()
        if fd < 0:
            raise ValueError(f"fd must be a file descriptor, got {fd}")
        if fd in self.conns:
            raise ValueError(f"fd {fd} is already in the lane")
        if host is not None and type(host) is not bytes:
            raise TypeError(f"host must be bytes (JSON text) or None, got {type(host).__name__}")
        check_ident(ident)
        if fd >= self.fd_cap:
            cap = max(fd + 1, 2 * self.fd_cap, 1024)
            grown = <double*>PyMem_Realloc(self.last_read, cap * sizeof(double))
            if grown is NULL:
                raise MemoryError()
            self.last_read = grown
            grown_active = <char*>PyMem_Realloc(self.active, cap)
            if grown_active is NULL:
                raise MemoryError()
            memset(grown_active + self.fd_cap, 0, cap - self.fd_cap)
            self.active = grown_active
            self.fd_cap = cap
        ev.events = EPOLLIN | EPOLLET
        ev.data.fd = fd
        if epoll_ctl(self.epfd, EPOLL_CTL_ADD, fd, &ev) < 0:
            raise OSError(errno, f"adding fd {fd} to the lane: {os.strerror(errno)}")
        self.conns[fd] = key
        self.hosts[fd] = host
        self.idents[fd] = ident
        self.active[fd] = 1
        self.last_read[fd] = monotonic_s()

    def remove(self, int fd):
        """remove(fd) -> bool: stop serving `fd` (no on_return); False if it was not in."""
        if self.epfd < 0 or fd not in self.conns:
            return False
        self._drop(fd)
        return True

    cdef object _drop(self, int fd):
        cdef epoll_event ev       # (ignored by EPOLL_CTL_DEL; old kernels want non-NULL)
        epoll_ctl(self.epfd, EPOLL_CTL_DEL, fd, &ev)   # fails only if already closed
        self.active[fd] = 0
        del self.hosts[fd]
        del self.idents[fd]
        return self.conns.pop(fd)

    def last_active(self, int fd):
        """last_active(fd) -> float: time.monotonic() of fd's last read in the lane (or
        of its entry)."""
        if fd not in self.conns:
            raise KeyError(fd)
        return self.last_read[fd]

    def idle(self, double before):
        """idle(before) -> list: the keys of the connections whose last read in the lane
        (or entry) was before `before` (time.monotonic() seconds)."""
        cdef int fd
        return [key for fd, key in self.conns.items() if self.last_read[fd] < before]

    def poll(self):
        """poll() -> int: serve the connections ready now (without waiting), again while
        more become ready, for up to POLL_BUDGET_S: how many were served.

        Under load, requests arrive while a batch is served; taking them in the same
        call costs one epoll_wait each round instead of a whole turn of the event loop
        (its own wait, timers, a Python callback). The
        time budget keeps the loop's timers and other connections served meanwhile."""
        cdef epoll_event events[MAX_EVENTS]
        cdef int n, total = 0
        cdef double until
        if self.epfd < 0:
            return 0
        until = monotonic_s() + POLL_BUDGET_S
        while True:
            n = epoll_wait(self.epfd, events, MAX_EVENTS, 0)
            if n < 0:
                if errno == EINTR:
                    return total
                raise OSError(errno, os.strerror(errno))
            if n == 0:
                return total
            total += n
            self.polls += 1
            self._serve_batch(events, n)
            if self.epfd < 0 or monotonic_s() >= until:
                return total

    cdef int _serve_batch(self, epoll_event* events, int n) except -1:
        """Serve the batch's connections; flush its request-log lines."""
        cdef int i, fd
        failure = None
        try:
            for i in range(n):
                fd = events[i].data.fd
                # A hand-back earlier in this batch may have removed (even closed) it.
                if not self._has(fd):
                    continue
                # Edge-triggered: a connection skipped now would not be reported again
                # before its next request, so one failure must not cost the others
                # their turn. (Its own hand-back already happened, or it stays served.)
                try:
                    self._serve(fd)
                except Exception as exc:
                    if failure is None:
                        failure = exc
        finally:
            self.reader.flush_log()         # one write of the batch's request-log lines
        if failure is not None:
            raise failure                   # for the event loop's exception handler
        return 0

    cdef int _serve(self, int fd) except -1:
        """Read `fd` until drained, answering each read (edge-triggered: what is left
        unread now would not be reported again until more arrives)."""
        cdef int reads = 0
        cdef Py_ssize_t got
        while True:
            got = self._serve_read(fd)
            if got < READ_SIZE:            # drained, or handed back (got is then -1)
                return 0
            reads += 1
            if reads == FULL_READS_MAX:
                self._hand_back(fd, b"", b"", None)
                return 0

    cdef Py_ssize_t _serve_read(self, int fd) except -2:
        """One recv and its answers: the bytes read (all answered and sent), else -1
        (nothing to read, or the socket was handed back)."""
        cdef Py_ssize_t got, pos = 0, used = 0, sent = 0
        cdef int err
        cdef double now
        cdef object error = None
        got = recv(fd, self.buf, READ_SIZE, MSG_DONTWAIT)
        if got < 0:
            err = errno
            if fc_would_block(err) or err == EINTR:
                return -1
            self._hand_back(fd, b"", b"", OSError(err, os.strerror(err)))
            return -1
        if got == 0:                          # end of stream: the owner's reading sees it
            self._hand_back(fd, b"", b"", None)
            return -1
        self.reads += 1
        self.last_read[fd] = now = monotonic_s()
        try:
            pos = self.reader.answer(<const uint8_t*>self.buf, got, &used,
                                     self.hosts[fd] if self.reader.log is not None else None,
                                     now, self.idents[fd])
        except Exception as exc:
            error = exc                       # the answers before it still go out
            pos = got                         # and nothing of this read is handed on
        if used:
            sent = send(fd, self.reader.scratch, used, MSG_DONTWAIT | MSG_NOSIGNAL)
            if sent < 0:
                err = errno
                if not (fc_would_block(err) or err == EINTR):
                    self._hand_back(fd, b"", b"", OSError(err, os.strerror(err)))
                    return -1
                sent = 0
        if pos < got or sent < used or error is not None:
            self._hand_back(fd, PyBytes_FromStringAndSize(self.buf + pos, got - pos),
                            PyBytes_FromStringAndSize(self.reader.scratch + sent, used - sent),
                            error)
            return -1
        return got

    cdef int _hand_back(self, int fd, bytes rest, bytes unsent, error) except -1:
        key = self._drop(fd)
        self.reader.flush_log()             # the log keeps the order of the answers
        self.handbacks += 1
        self.on_return(key, rest, unsent, error)
        return 0

    def close(self):
        """close(): stop serving every connection (no on_return) and free the epoll set."""
        self.conns.clear()
        self.hosts.clear()
        self.idents.clear()
        if self.epfd >= 0:
            close(self.epfd)
            self.epfd = -1

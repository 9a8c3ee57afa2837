# cython: language_level=3
from fastcoord.server._native.sockets cimport epoll_event
from fastcoord.server._native.wire cimport HeartbeatReader


cdef class HeartbeatLane:
    cdef int epfd                   # the lane's epoll set (-1: closed)
    cdef readonly HeartbeatReader reader
    cdef object on_return           # on_return(key, rest, unsent, error)
    cdef dict conns                 # fd -> its owner's key, for every socket in the lane
    cdef dict hosts                 # fd -> its peer address as JSON text (request log)
    cdef dict idents                # fd -> its (client id, client host), or None
    cdef double* last_read          # by fd: monotonic time of the last read in the lane
    cdef char* active               # by fd: 1 while in the lane (conns' keys, for C)
    cdef Py_ssize_t fd_cap          # the length of last_read and active
    cdef char* buf                  # one recv's bytes
    cdef readonly long long reads       # reads served in the lane
    cdef readonly long long handbacks   # connections that left by on_return
    cdef readonly long long polls       # batches served (epoll_wait calls that found some)

    cdef int _check_open(self) except -1
    cdef object _drop(self, int fd)
    cdef inline bint _has(self, int fd) noexcept:
        return 0 <= fd < self.fd_cap and self.active[fd]

    cdef int _serve(self, int fd) except -1
    cdef int _serve_batch(self, epoll_event* events, int n) except -1
    cdef Py_ssize_t _serve_read(self, int fd) except -2
    cdef int _hand_back(self, int fd, bytes rest, bytes unsent, error) except -1

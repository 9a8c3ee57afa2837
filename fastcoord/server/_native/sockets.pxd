# cython: language_level=3
# Linux sockets and epoll, declared once for the extensions that drive sockets from C
# (the load generator's engine and the server's heartbeat lane). Declarations only.
from libc.stdint cimport uint32_t, uint64_t

cdef extern from *:
    """
    #include <errno.h>
    /* POSIX lets a non-blocking socket say either; on Linux they are one value, which
       a Cython `or` would turn into a switch with a duplicate case. */
    static inline int fc_would_block(int e) { return e == EAGAIN || e == EWOULDBLOCK; }
    """
    bint fc_would_block(int e) nogil

cdef extern from "<sys/epoll.h>" nogil:
    ctypedef union epoll_data_t:
        void* ptr
        int fd
        uint32_t u32
        uint64_t u64
    struct epoll_event:
        uint32_t events
        epoll_data_t data
    enum:
        EPOLLIN
        EPOLLOUT
        EPOLLERR
        EPOLLHUP
        EPOLLRDHUP
        EPOLLET
        EPOLL_CTL_ADD
        EPOLL_CTL_MOD
        EPOLL_CTL_DEL
        EPOLL_CLOEXEC
    int epoll_create1(int flags)
    int epoll_ctl(int epfd, int op, int fd, epoll_event* event)
    int epoll_wait(int epfd, epoll_event* events, int maxevents, int timeout)

cdef extern from "<sys/socket.h>" nogil:
    ssize_t send(int fd, const void* buf, size_t n, int flags)
    ssize_t recv(int fd, void* buf, size_t n, int flags)
    enum:
        MSG_DONTWAIT
        MSG_NOSIGNAL


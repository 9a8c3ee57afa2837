# cython: language_level=3
# The clocks the C hot paths read, without a Python call. Inline only (no module of its
# own): the wire reader, the heartbeat lane and the load generator's engine cimport these.
from libc.stdint cimport int64_t
from posix.time cimport CLOCK_MONOTONIC, CLOCK_REALTIME, clock_gettime, timespec


cdef inline double monotonic_s() noexcept nogil:
    """time.monotonic() (and time.perf_counter(), on Linux)."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef inline int64_t monotonic_ns() noexcept nogil:
    """time.monotonic_ns()."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1_000_000_000 + ts.tv_nsec


cdef inline double realtime_s() noexcept nogil:
    """time.time()."""
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9

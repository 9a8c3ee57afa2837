# cython: language_level=3
from libc.stdint cimport int32_t, uint8_t

from fastcoord.core._native.engines cimport MemberTable

# A string field: [start, start + length) of the frame, or length -1 for null.
cdef struct Field:
    Py_ssize_t start
    Py_ssize_t length


# A plain Heartbeat request as it sits in a frame (strings are spans of the buffer).
cdef struct Heartbeat:
    int version
    int32_t correlation
    int32_t generation
    Field client
    Field group
    Field member
    Field instance


# A ConsumerGroupHeartbeat request in the steady form (wire.pyx's _parse_steady).
cdef struct Steady:
    int version
    int32_t correlation
    int32_t epoch
    Field client
    Field group
    Field member


cdef class HeartbeatReader:
    cdef object heartbeat           # the coordinator's heartbeat(group, member, generation, instance)
    cdef Py_ssize_t max_frame
    cdef int min_version
    cdef int max_version
    cdef object latencies           # a deque of seconds, or None
    cdef readonly long long answered
    cdef char* scratch              # the responses of one read, before the one write
    cdef Py_ssize_t scratch_cap
    cdef readonly object log        # the request log's write_lines, or None
    cdef char* log_buf              # request-log lines not yet handed to log
    cdef Py_ssize_t log_len
    cdef Py_ssize_t log_cap
    cdef object steady              # the member table's consumer_steady, or None
    cdef MemberTable table          # steady's table when it is the native one's: called in C
    cdef int consumer_min           # the ConsumerGroupHeartbeat versions it answers
    cdef int consumer_max
    cdef readonly long long consumer_answered

    cdef Py_ssize_t answer(self, const uint8_t* f, Py_ssize_t end, Py_ssize_t* used,
                           object host, double started, object ident) except -1
    cdef Py_ssize_t _answer_steady(self, const uint8_t* f, Py_ssize_t pos, Py_ssize_t end,
                                   Py_ssize_t* used, tuple ident, Heartbeat* hb) except -2
    cdef int _log_line(self, const char* ts, Py_ssize_t ts_len, const uint8_t* f,
                       const Heartbeat* hb, bytes host, int error, double seconds,
                       const char* api) except -1

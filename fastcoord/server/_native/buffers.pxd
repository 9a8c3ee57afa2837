# cython: language_level=3
# Growable byte buffers (malloc'd: free them with free()). Inline only: the wire reader
# and the load generator's engine cimport this.
from libc.stdlib cimport realloc


cdef inline int grow(char** buf, Py_ssize_t* cap, Py_ssize_t need) noexcept nogil:
    """Make `*buf` hold at least `need` bytes (doubling, 1 KiB at least); -1 when out of
    memory (`*buf` and `*cap` unchanged)."""
    cdef Py_ssize_t new_cap = cap[0] * 2
    cdef char* p
    if new_cap < need:
        new_cap = need
    if new_cap < 1024:
        new_cap = 1024
    p = <char*>realloc(buf[0], new_cap)
    if p == NULL:
        return -1
    buf[0] = p
    cap[0] = new_cap
    return 0

# cython: language_level=3
# Writing JSON text into a C buffer, for the request log's heartbeat lines (wire.pyx).
# Inline only (no module of its own). snprintf costs more than the rest of a line put
# together (its format parsing, and %f's exact decimal conversion), so the per-line
# fields are written here: integers, fixed-point milliseconds and plain strings.
# Every `put_*` writes at `p` and returns the position after what it wrote; the caller
# has made room (the bounds are given with each).
from libc.stdint cimport uint8_t
from libc.string cimport memcpy


cdef inline char* put_text(char* p, const char* s, Py_ssize_t n) noexcept nogil:
    """n bytes of s."""
    memcpy(p, s, n)
    return p + n


cdef inline char* put_int(char* p, long long value) noexcept nogil:
    """A decimal integer, as %lld writes it (at most 20 bytes)."""
    cdef char digits[20]
    cdef int n = 0
    cdef unsigned long long u
    if value < 0:
        p[0] = c'-'
        p += 1
        u = <unsigned long long>(-(value + 1)) + 1       # no overflow at the minimum
    else:
        u = <unsigned long long>value
    while True:
        digits[n] = <char>(c'0' + u % 10)
        n += 1
        u //= 10
        if u == 0:
            break
    while n:
        n -= 1
        p[0] = digits[n]
        p += 1
    return p


cdef inline char* put_thousandths(char* p, long long value) noexcept nogil:
    """value / 1000 with three decimals (1234 -> "1.234", -5 -> "-0.005"): the text
    %.3f gives for value / 1000 (at most 22 bytes)."""
    cdef long long whole, frac
    if value < 0:
        p[0] = c'-'
        p += 1
        value = -value
    whole = value // 1000
    frac = value % 1000
    p = put_int(p, whole)
    p[0] = c'.'
    p[1] = <char>(c'0' + frac // 100)
    p[2] = <char>(c'0' + frac // 10 % 10)
    p[3] = <char>(c'0' + frac % 10)
    return p + 4


cdef inline bint plain_json(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    """Whether s[0:n] goes into a JSON string as it is: printable ASCII but for the
    quote and the backslash, which is exactly what json.dumps (ensure_ascii) leaves
    unescaped."""
    cdef Py_ssize_t i
    cdef uint8_t c
    for i in range(n):
        c = s[i]
        if c < 0x20 or c > 0x7e or c == 0x22 or c == 0x5c:
            return False
    return True


cdef inline char* put_quoted(char* p, const uint8_t* s, Py_ssize_t n) noexcept nogil:
    """s[0:n] (plain_json text) as a JSON string (n + 2 bytes)."""
    p[0] = c'"'
    memcpy(p + 1, s, n)
    p[n + 1] = c'"'
    return p + n + 2

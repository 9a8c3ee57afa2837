# cython: language_level=3
"""Request frames' length prefixes checked in C, before kio decodes them.

The same check as fastcoord/server/framecheck.py's walk (the pure twin,
fastcoord/server/_pure/framecheck.py), which also compiles each request schema into the flat
program of int32 words run here (`request_program`: its docstring lists the
instructions). The interpreter holds no Python object: it reads the frame's bytes and
the program's words, and stops at the first length or count the frame cannot hold.
Only then does Python run again: the pure walk goes over the refused frame to say
which field and why, so both twins refuse with the same message.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc

from fastcoord.server._native.bigendian cimport read_i16, read_i32

from fastcoord.server import framecheck as _pure
from fastcoord.server.framecheck import FrameError

__all__ = ["FrameError", "check_request", "RequestProgram"]

cdef enum:
    OP_SKIP = 1
    OP_STR16 = 2
    OP_STR32 = 3
    OP_CSTR = 4
    OP_ARRAY = 5
    OP_NULLABLE = 6
    OP_TAGS = 7
    ARRAY_COMPACT = 1
    ARRAY_NULLABLE = 2
    ARRAY_FIXED = 4

_OURS = {"OP_SKIP": OP_SKIP, "OP_STR16": OP_STR16, "OP_STR32": OP_STR32, "OP_CSTR": OP_CSTR,
         "OP_ARRAY": OP_ARRAY, "OP_NULLABLE": OP_NULLABLE, "OP_TAGS": OP_TAGS,
         "ARRAY_COMPACT": ARRAY_COMPACT, "ARRAY_NULLABLE": ARRAY_NULLABLE,
         "ARRAY_FIXED": ARRAY_FIXED}
for _name, _value in _OURS.items():
    if getattr(_pure, _name) != _value:
        raise ImportError(f"fastcoord.server._native.framecheck is stale: {_name} is "
                          f"{getattr(_pure, _name)} in framecheck.py, {_value} here (rebuild)")

cdef enum:
    REFUSED = -1      # walk's answer for a frame it refuses (positions are >= 0)


cdef inline Py_ssize_t uvarint(const uint8_t* f, Py_ssize_t pos, Py_ssize_t end,
                               int64_t* out) noexcept nogil:
    """An unsigned varint of at most 5 bytes at `pos` into `*out`: the position after
    it, or REFUSED when the window ends first or it runs longer."""
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if pos >= end:
            return REFUSED
        b = f[pos]
        pos += 1
        value |= <uint64_t>(b & 0x7F) << shift
        if not (b & 0x80):
            out[0] = <int64_t>value
            return pos
        shift += 7
        if shift >= 35:
            return REFUSED


cdef inline Py_ssize_t prefix(const uint8_t* f, Py_ssize_t pos, Py_ssize_t end, int width,
                             int64_t* n) noexcept nogil:
    """A length or count at `pos` into `*n`: width 0 a compact varint (the value + 1),
    2 or 4 a big-endian signed integer. The position after it, or REFUSED."""
    if width == 0:
        pos = uvarint(f, pos, end, n)
        if pos >= 0:
            n[0] -= 1
        return pos
    if width > end - pos:
        return REFUSED
    n[0] = read_i16(f + pos) if width == 2 else read_i32(f + pos)
    return pos + width


cdef Py_ssize_t walk(const uint8_t* f, Py_ssize_t pos, Py_ssize_t end,
                     const int32_t* prog, Py_ssize_t pc, Py_ssize_t stop) noexcept nogil:
    """Run program words [pc, stop) over the frame bytes [pos, end): the position after
    them, or REFUSED. Invariant: pos <= end after every instruction (each checks
    what it takes against end - pos first), so end - pos never goes negative."""
    cdef int32_t op, flags, body_len
    cdef int64_t n, size, tag, i
    cdef Py_ssize_t body, table, t, r
    while pc < stop:
        op = prog[pc]
        if op == OP_SKIP:
            if prog[pc + 1] > end - pos:
                return REFUSED
            pos += prog[pc + 1]
            pc += 2
        elif op == OP_STR16 or op == OP_STR32 or op == OP_CSTR:
            pos = prefix(f, pos, end, 0 if op == OP_CSTR else 2 if op == OP_STR16 else 4, &n)
            if pos < 0:
                return REFUSED
            if n < 0:
                if n != -1:                   # -1 is null: kio knows if it is allowed
                    return REFUSED
            elif n > end - pos:
                return REFUSED
            else:
                pos += n
            pc += 1
        elif op == OP_ARRAY:
            flags = prog[pc + 1]
            body_len = prog[pc + 4]
            body = pc + 5
            pos = prefix(f, pos, end, 0 if flags & ARRAY_COMPACT else 4, &n)
            if pos < 0:
                return REFUSED
            if n < 0:
                if n != -1 or not (flags & ARRAY_NULLABLE):
                    return REFUSED
            elif n > 0:
                if n > (end - pos) // prog[pc + 2]:       # least >= 1
                    return REFUSED
                if flags & ARRAY_FIXED:
                    pos += n * prog[pc + 3]               # fits: checked just above
                else:
                    for i in range(n):
                        pos = walk(f, pos, end, prog, body, body + body_len)
                        if pos < 0:
                            return REFUSED
            pc = body + body_len
        elif op == OP_NULLABLE:
            body_len = prog[pc + 1]
            if pos >= end:
                return REFUSED
            if <int8_t>f[pos] < 0:
                pos += 1
            else:
                pos = walk(f, pos + 1, end, prog, pc + 2, pc + 2 + body_len)
                if pos < 0:
                    return REFUSED
            pc += 2 + body_len
        elif op == OP_TAGS:
            table = pc + 2
            pc = table + prog[pc + 1]
            if pos < end and f[pos] == 0:     # the usual empty section
                pos += 1
                continue
            pos = uvarint(f, pos, end, &n)
            if pos < 0 or n > (end - pos) // 2:   # a tag and a size: a byte each at least
                return REFUSED
            for i in range(n):
                pos = uvarint(f, pos, end, &tag)
                if pos < 0:
                    return REFUSED
                pos = uvarint(f, pos, end, &size)
                if pos < 0 or size > end - pos:
                    return REFUSED
                t = table
                while t < pc:                 # a known tag: walked inside its size
                    if prog[t] == tag:
                        r = walk(f, pos, pos + size, prog, t + 2, t + 2 + prog[t + 1])
                        if r < 0:
                            return REFUSED
                        break
                    t += 2 + prog[t + 1]
                pos += size
        else:                                 # not an instruction: a broken program
            return REFUSED
    return pos


cdef class RequestProgram:
    """One request class's program (`framecheck.request_program(cls)`), in C memory."""
    cdef int32_t* words
    cdef Py_ssize_t length

    def __cinit__(self, cls):
        program = _pure.request_program(cls)
        self.length = len(program)
        self.words = <int32_t*>malloc(max(1, self.length) * sizeof(int32_t))
        if self.words == NULL:
            raise MemoryError()
        for i, word in enumerate(program):
            self.words[i] = word

    def __dealloc__(self):
        free(self.words)

    cpdef Py_ssize_t walk(self, frame) except -2:
        """Where the walk of the whole frame (bytes, or any contiguous buffer) ends:
        its size for a well-formed one, or -1 when it refuses the frame."""
        cdef Py_buffer view
        # (walk is nogil, but a walk takes less than releasing the GIL would; bytes,
        # what the server reads into, is read in place without a buffer request)
        if type(frame) is bytes:
            return walk(<const uint8_t*>PyBytes_AS_STRING(frame), 0, PyBytes_GET_SIZE(frame),
                        self.words, 0, self.length)
        PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
        try:
            return walk(<const uint8_t*>view.buf, 0, view.len, self.words, 0, self.length)
        finally:
            PyBuffer_Release(&view)


cdef dict _programs = {}


def check_request(cls, frame) -> int:
    """Walk a whole request frame (header and body, without the size prefix) of request
    class `cls`; raise `FrameError` at the first length or count it cannot hold.
    Returns where the walk ended (the frame's size for a well-formed one)."""
    cdef RequestProgram program = _programs.get(cls)
    if program is None:
        program = _programs[cls] = RequestProgram(cls)
    cdef Py_ssize_t end = program.walk(frame)
    if end >= 0:
        return end
    _pure.check_request(cls, frame)           # raises FrameError, naming the field
    raise FrameError("refused by the native frame check, not by the pure one")

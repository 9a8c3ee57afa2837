# cython: language_level=3
"""Scanning a shard log's bytes in C (native twin of fastcoord._pure.logscan).

`scan` walks a segment's frames, checks each CRC (the crc32c package on the frame's
bytes), and applies each record to the latest-record-per-key dicts: offsets records,
nearly all of a log, are decoded here in C loops; group records and offset tombstones
go through the pure twin's `apply_other` (the Python decoders). `find_frame_after` looks
for the next valid frame after a bad one: the header checks run in a C loop without
the GIL, and only a position that passes them has its CRC computed, so a garbage tail
costs a pass over its bytes. Results are the pure twin's (tests/test_storage_scan.py).
"""
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.long cimport PyLong_FromLong, PyLong_FromLongLong
from cpython.ref cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

import struct

from crc32c import crc32c as _crc32c

from fastcoord.results import OffsetAndMetadata
from fastcoord._pure.logscan import apply_other as _apply_other
from fastcoord.storage.records import FrameError

cdef enum:
    FRAME_SIZE = 8
    HEAD_SIZE = 13
    MIN_PAYLOAD = 13
    MAX_PAYLOAD = 1 << 28
    ENTRY_BYTES = 32
    OFFSETS = 1
    GROUP = 2
    GROUP_TOMBSTONE = 3
    OFFSET_TOMBSTONES = 4

cdef uint32_t NONE_LEN = 0xFFFFFFFF
cdef object _DECODE_ERRORS = (struct.error, FrameError, UnicodeDecodeError, IndexError)
cdef object _tuple_new = tuple.__new__
cdef object _OAM = OffsetAndMetadata


# Little-endian fields a byte at a time: neither alignment nor the host's byte order
# matters (compilers fold these into single loads on little-endian hosts).
cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
            | (<uint32_t>p[3] << 24))


cdef inline uint64_t _u64(const uint8_t* p) noexcept nogil:
    return <uint64_t>_u32(p) | (<uint64_t>_u32(p + 4) << 32)


cdef inline bint _plausible(const uint8_t* p, Py_ssize_t q, Py_ssize_t n) noexcept nogil:
    """The header checks every valid frame passes before its CRC (the pure twin's
    plausible_frame)."""
    cdef uint32_t length, glen
    cdef uint8_t kind
    if q + FRAME_SIZE + MIN_PAYLOAD > n:
        return False
    length = _u32(p + q + 4)
    if length < MIN_PAYLOAD or length > MAX_PAYLOAD or q + FRAME_SIZE + length > n:
        return False
    kind = p[q + FRAME_SIZE]
    glen = _u32(p + q + FRAME_SIZE + 9)
    return 1 <= kind <= 4 and glen <= length - HEAD_SIZE


cdef inline uint32_t _crc_of(object mv, Py_ssize_t start, Py_ssize_t end) except? 0:
    return _crc32c(mv[start:end])


def find_frame_after(data, Py_ssize_t pos):
    """The offset of the first frame strictly after `pos` whose header is plausible and
    whose CRC checks out, or None."""
    cdef const uint8_t[::1] buf = data
    cdef Py_ssize_t n = buf.shape[0]
    cdef const uint8_t* p = &buf[0] if n else NULL
    cdef Py_ssize_t q = pos + 1
    mv = memoryview(data)
    while True:
        with nogil:
            while q < n and not _plausible(p, q, n):
                q += 1
        if q >= n:
            return None
        if _crc_of(mv, q + 4, q + FRAME_SIZE + _u32(p + q + 4)) == _u32(p + q):
            return q
        q += 1


cdef bint any_none(const uint8_t* mlens, uint32_t n) noexcept:
    cdef uint32_t i
    for i in range(n):
        if _u32(mlens + 4 * i) == NONE_LEN:
            return True
    return False



cdef str _utf8(const uint8_t* p, Py_ssize_t n):
    return PyUnicode_DecodeUTF8(<const char*>p, n, "surrogatepass")


cdef class _Offsets:
    """One offsets record's columns, checked before anything is applied (so a record
    that does not decode changes nothing, as in the pure twin)."""
    cdef list topics
    cdef list metadata        # None when every entry's metadata is ""
    cdef const uint8_t* cols
    cdef uint32_t n

    cdef str check(self, const uint8_t* p, Py_ssize_t pos, Py_ssize_t end):
        """Parse the topic table and the columns of the body [pos, end); the reason it
        does not decode, or None."""
        cdef uint32_t ntopics, slen, i, m, t
        cdef uint64_t blob, total = 0
        cdef const uint8_t* mlens
        cdef const uint8_t* tidx
        cdef Py_ssize_t cursor
        if pos + 4 > end:
            return "topic table runs past the record"
        ntopics = _u32(p + pos)
        pos += 4
        self.topics = []
        for i in range(ntopics):
            if pos + 4 > end:
                return "topic table runs past the record"
            slen = _u32(p + pos)
            if slen == NONE_LEN:
                return "a required string is null"
            if pos + 4 + <Py_ssize_t>slen > end:
                return "topic table runs past the record"
            self.topics.append(_utf8(p + pos + 4, slen))
            pos += 4 + slen
        if pos + 4 > end:
            return "offset entries run past the record"
        self.n = _u32(p + pos)
        pos += 4
        blob = <uint64_t>pos + <uint64_t>self.n * ENTRY_BYTES
        if blob > <uint64_t>end:
            return "offset entries run past the record"
        self.cols = p + pos
        if ntopics != 1 and self.n:          # one topic: its index is not looked at
            tidx = self.cols
            for i in range(self.n):
                if _u32(tidx + 4 * i) >= ntopics:
                    return "topic index out of range"
        mlens = self.cols + 28 * <Py_ssize_t>self.n
        for i in range(self.n):
            m = _u32(mlens + 4 * i)
            if m != NONE_LEN:
                total += m
        if blob + total != <uint64_t>end:
            return "offset metadata does not fill the record"
        self.metadata = None
        if total or blob != <uint64_t>end or any_none(mlens, self.n):
            self.metadata = []
            cursor = <Py_ssize_t>blob
            for i in range(self.n):
                m = _u32(mlens + 4 * i)
                if m == NONE_LEN:
                    self.metadata.append(None)
                elif m == 0:
                    self.metadata.append("")
                else:
                    self.metadata.append(_utf8(p + cursor, m))
                    cursor += m
        return None

    cdef Py_ssize_t apply(self, dict into) except -1:
        """Set every entry into `into` ((topic, partition) -> OffsetAndMetadata)."""
        cdef uint32_t i, n = self.n
        cdef const uint8_t* c = self.cols
        cdef Py_ssize_t n4 = 4 * <Py_ssize_t>n
        cdef object topic = self.topics[0] if len(self.topics) == 1 else None
        cdef bint one = len(self.topics) == 1
        cdef int64_t stamp, last_stamp = 0
        cdef object stamp_obj = None
        cdef object md = ""
        for i in range(n):
            if not one:
                topic = self.topics[_u32(c + 4 * i)]
            key = (topic, PyLong_FromLong(<int32_t>_u32(c + n4 + 4 * i)))
            stamp = <int64_t>_u64(c + 5 * n4 + 8 * i)
            if stamp_obj is None or stamp != last_stamp:
                stamp_obj = PyLong_FromLongLong(stamp)
                last_stamp = stamp
            if self.metadata is not None:
                md = self.metadata[i]
            PyDict_SetItem(into, key, _tuple_new(_OAM, (
                PyLong_FromLongLong(<int64_t>_u64(c + 2 * n4 + 8 * i)), md,
                PyLong_FromLong(<int32_t>_u32(c + 4 * n4 + 4 * i)), stamp_obj)))
        return n


def scan(data, dict groups, dict offsets, dict group_ms, dict offsets_ms, tombstone):
    """Apply every valid record of `data` in order. Returns (end, reason, records,
    entries), as the pure twin's scan."""
    cdef const uint8_t[::1] buf = data
    cdef Py_ssize_t n = buf.shape[0]
    cdef const uint8_t* p = &buf[0] if n else NULL
    cdef Py_ssize_t pos = 0, end, body, gend
    cdef uint32_t length, glen, crc
    cdef uint8_t kind
    cdef Py_ssize_t records = 0, entries = 0
    cdef _Offsets cols = _Offsets()
    cdef str why
    cdef dict current
    cdef PyObject* found
    mv = memoryview(data)
    while pos < n:
        if pos + FRAME_SIZE > n:
            return pos, "truncated frame header", records, entries
        crc = _u32(p + pos)
        length = _u32(p + pos + 4)
        if length < MIN_PAYLOAD or length > MAX_PAYLOAD:
            return pos, f"bad record length {length}", records, entries
        end = pos + FRAME_SIZE + length
        if end > n:
            return pos, f"record length {length} runs past the end of the file", records, entries
        if _crc_of(mv, pos + 4, end) != crc:
            return pos, "CRC32C mismatch", records, entries
        body = pos + FRAME_SIZE
        kind = p[body]
        write_ms = PyLong_FromLongLong(<int64_t>_u64(p + body + 1))
        glen = _u32(p + body + 9)
        gend = body + HEAD_SIZE + glen
        if gend > end:
            return pos, "group id runs past the record", records, entries
        try:
            gid = _utf8(p + body + HEAD_SIZE, glen)
            if kind == OFFSETS:
                why = cols.check(p, gend, end)
                if why is not None:
                    return pos, f"undecodable record: {why}", records, entries
                found = PyDict_GetItem(offsets, gid)
                if found is NULL:
                    current = {}
                    offsets[gid] = current
                else:
                    current = <dict>found
                entries += cols.apply(current)
                offsets_ms[gid] = write_ms
            elif GROUP <= kind <= OFFSET_TOMBSTONES:
                _apply_other(kind, data, gend, end, gid, write_ms, groups, offsets, group_ms,
                             offsets_ms, tombstone)
                entries += 1
            else:
                return pos, f"unknown record type {kind}", records, entries
        except _DECODE_ERRORS as exc:
            return pos, f"undecodable record: {exc}", records, entries
        records += 1
        pos = end
    return pos, None, records, entries

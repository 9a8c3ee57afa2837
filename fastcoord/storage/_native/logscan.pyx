# cython: language_level=3
"""Scanning a shard log's bytes in C (native twin of fastcoord.storage._pure.logscan).

`check` walks a segment's frames, checks each CRC (the crc32c package on the frame's
bytes) and decodes each record (offsets, group and consumer group records in C loops;
offset tombstones, rare, with the Python decoder), keeping the valid ones in a Records object; `apply`
applies the records of every segment checked, a group at a time, newest first, so that
only the newest value per key is ever built. `find_frame_after` looks for the next valid
frame after a bad one: the header checks run in a C loop without the GIL, and only a
position that passes them has its CRC computed, so a garbage tail costs a pass over its
bytes. Results are the pure twin's (tests/storage/test_storage_scan.py).
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.long cimport PyLong_FromLong, PyLong_FromLongLong
from cpython.ref cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.string cimport memcmp, memset
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

import struct

from crc32c import crc32c as _crc32c

from fastcoord.core.results import OffsetAndMetadata
from fastcoord.storage.records import (
    FrameError, MAX_DEPTH, _CG_SKIP, _MEMBER_FIELDS, decode_offset_tombstones, fold_consumer,
)

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
    CONSUMER_GROUP = 6
    T_NONE = 0
    T_FALSE = 1
    T_TRUE = 2
    T_INT = 3
    T_STR = 4
    T_BYTES = 5
    T_LIST = 6
    T_TUPLE = 7
    T_DICT = 8

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
    return (1 <= kind <= 4 or kind == CONSUMER_GROUP) and glen <= length - HEAD_SIZE


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


cdef object DELETED = object()        # an offset tombstone, newest first


@cython.final
cdef class _Record:
    """One valid record of a segment, checked and its strings decoded by the forward
    pass: offsets records keep their columns in the buffer, to be read newest first."""
    cdef int kind
    cdef str gid
    cdef object ms
    cdef object value          # GROUP, CONSUMER_GROUP: the record dict;
                               # OFFSET_TOMBSTONES: [(topic, partition)]
    cdef list topics           # OFFSETS: its topic table, as _TopicIds
    cdef list metadata         # None when every entry's metadata is ""
    cdef const uint8_t* cols
    cdef uint32_t n

    cdef Py_ssize_t newest_first(self, dict cur, _Keys keys, uint32_t serial) except -1:
        """Set each entry whose key the group (`serial`) has not set yet, last entry
        first (a later entry of a record wins, as a later record does)."""
        cdef Py_ssize_t i, kid
        cdef uint32_t n = self.n
        cdef const uint8_t* c = self.cols
        cdef Py_ssize_t n4 = 4 * <Py_ssize_t>n
        cdef bint one = len(self.topics) == 1
        cdef _TopicIds tids = None
        if n == 0:
            return 0                        # (its topic table may be empty too)
        tids = <_TopicIds>self.topics[0]
        cdef int64_t stamp, last_stamp = 0
        cdef object stamp_obj = None
        cdef object md = ""
        for i in range(<Py_ssize_t>n - 1, -1, -1):
            if not one:
                tids = <_TopicIds>self.topics[_u32(c + 4 * i)]
            kid = keys.key_id(tids, <int32_t>_u32(c + n4 + 4 * i))
            if keys.mark[kid] == serial:
                continue                    # a newer record set or deleted it
            keys.mark[kid] = serial
            stamp = <int64_t>_u64(c + 5 * n4 + 8 * i)
            if stamp_obj is None or stamp != last_stamp:
                stamp_obj = PyLong_FromLongLong(stamp)
                last_stamp = stamp
            if self.metadata is not None:
                md = self.metadata[i]
            PyDict_SetItem(cur, keys.keys[kid], _tuple_new(_OAM, (
                PyLong_FromLongLong(<int64_t>_u64(c + 2 * n4 + 8 * i)), md,
                PyLong_FromLong(<int32_t>_u32(c + 4 * n4 + 4 * i)), stamp_obj)))
        return n


cdef enum:
    DENSE_PARTITIONS = 1 << 16     # partitions below this may have their key id in an array


@cython.final
cdef class _TopicIds:
    """One topic's (topic, partition) key ids: in an array for the usual partitions (the
    array grows only as far as a few times the topic's keys: a partition number alone,
    from a hostile log, cannot make it large)."""
    cdef object topic
    cdef Py_ssize_t* dense          # partition -> key id, -1 for none yet
    cdef Py_ssize_t cap
    cdef Py_ssize_t count           # keys of the topic
    cdef dict sparse                # other partitions -> key id

    cdef bint in_dense(self, int32_t partition):
        return 0 <= partition < DENSE_PARTITIONS and (partition < self.cap
                                                       or partition < 4 * self.count + 16)

    def __cinit__(self, topic):
        self.topic = topic
        self.sparse = {}

    def __dealloc__(self):
        PyMem_Free(self.dense)

    cdef int grow(self, Py_ssize_t need) except -1:
        cdef Py_ssize_t cap = min(max(need, 2 * self.cap, 16), DENSE_PARTITIONS)
        cdef Py_ssize_t i
        cdef Py_ssize_t* dense = <Py_ssize_t*>PyMem_Realloc(self.dense, cap * sizeof(Py_ssize_t))
        if dense is NULL:
            raise MemoryError()
        for i in range(self.cap, cap):
            dense[i] = -1
        self.dense = dense
        self.cap = cap
        return 0


@cython.final
cdef class _Keys:
    """The (topic, partition) keys of a load, numbered: one tuple per key, shared by
    every group's dict (many groups commit the same partitions), and per key the serial
    of the last group that set it (while applying a group's records newest first, a key
    already marked with its serial was set by a newer record)."""
    cdef dict topics                # topic -> _TopicIds
    cdef list keys                  # key id -> (topic, partition)
    cdef uint32_t* mark             # key id -> serial
    cdef Py_ssize_t cap
    cdef uint32_t serial

    def __cinit__(self):
        self.topics = {}
        self.keys = []

    def __dealloc__(self):
        PyMem_Free(self.mark)

    cdef _TopicIds topic(self, topic):
        cdef PyObject* found = PyDict_GetItem(self.topics, topic)
        if found is not NULL:
            return <_TopicIds>found
        tids = _TopicIds(topic)
        PyDict_SetItem(self.topics, topic, tids)
        return tids

    cdef uint32_t next_serial(self):
        if self.serial == 0xFFFFFFFF:          # wrapped: forget every mark
            memset(self.mark, 0, self.cap * sizeof(uint32_t))
            self.serial = 0
        self.serial += 1
        return self.serial

    cdef inline Py_ssize_t key_id(self, _TopicIds tids, int32_t partition) except -1:
        cdef Py_ssize_t kid
        if 0 <= partition < tids.cap:
            kid = tids.dense[partition]
            if kid >= 0:
                return kid
        return self.new_id(tids, partition)

    cdef Py_ssize_t new_id(self, _TopicIds tids, int32_t partition) except -1:
        cdef Py_ssize_t kid
        cdef Py_ssize_t cap
        cdef uint32_t* mark
        cdef bint dense = tids.in_dense(partition)
        part = PyLong_FromLong(partition)
        if dense:
            if partition >= tids.cap:
                tids.grow(partition + 1)
            if tids.dense[partition] >= 0:
                return tids.dense[partition]
        found = tids.sparse.get(part)     # (numbered before the array reached it)
        if found is not None:
            if dense:
                tids.dense[partition] = found
            return found
        kid = len(self.keys)
        if kid >= self.cap:
            cap = max(2 * self.cap, 1024)
            mark = <uint32_t*>PyMem_Realloc(self.mark, cap * sizeof(uint32_t))
            if mark is NULL:
                raise MemoryError()
            memset(mark + self.cap, 0, (cap - self.cap) * sizeof(uint32_t))
            self.mark = mark
            self.cap = cap
        self.keys.append((tids.topic, part))
        tids.count += 1
        if dense:
            tids.dense[partition] = kid
        else:
            tids.sparse[part] = kid
        return kid


@cython.final
cdef class _Strings:
    """The previous record's group id and topic table: a group's records follow one
    another and repeat them, so equal bytes reuse the decoded strings."""
    cdef const uint8_t* gid_p
    cdef Py_ssize_t gid_n
    cdef str gid
    cdef const uint8_t* table_p
    cdef Py_ssize_t table_n
    cdef list topics                # of _TopicIds
    cdef _Keys keys

    def __cinit__(self, _Keys keys):
        self.keys = keys

    cdef str group(self, const uint8_t* p, Py_ssize_t n):
        if self.gid is None or n != self.gid_n or memcmp(p, self.gid_p, n) != 0:
            self.gid = _utf8(p, n)
            self.gid_p = p
            self.gid_n = n
        return self.gid

    cdef list table(self, const uint8_t* p, Py_ssize_t start, Py_ssize_t stop, uint32_t count):
        """The topics (as _TopicIds) of the (bounds-checked) table p[start:stop] of `count`
        strings."""
        cdef uint32_t i, slen
        cdef Py_ssize_t pos = start
        if (self.topics is not None and stop - start == self.table_n
                and memcmp(p + start, self.table_p, stop - start) == 0):
            return self.topics
        topics = []
        for i in range(count):
            slen = _u32(p + pos)
            topics.append(self.keys.topic(_utf8(p + pos + 4, slen)))
            pos += 4 + slen
        self.topics = topics
        self.table_p = p + start
        self.table_n = stop - start
        return topics


@cython.final
cdef class _Fields:
    """Fields of a record body [pos, end) (the pure twin's _Reader): one that runs past
    `end` raises FrameError."""
    cdef const uint8_t* p
    cdef Py_ssize_t pos
    cdef Py_ssize_t end

    cdef Py_ssize_t take(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t start = self.pos
        if n > self.end - start:
            raise FrameError("a field runs past the record")
        self.pos = start + n
        return start

    cdef uint32_t u32(self) except? 0xFFFFFFFF:
        return _u32(self.p + self.take(4))

    cdef int32_t i32(self) except? -1:
        return <int32_t>_u32(self.p + self.take(4))

    cdef int u8(self) except -1:
        return self.p[self.take(1)]

    cdef int64_t i64(self) except? -1:
        return <int64_t>_u64(self.p + self.take(8))

    cdef uint32_t count(self, Py_ssize_t least) except? 0xFFFFFFFF:
        """A u32 count of items of at least `least` bytes each, checked against the bytes
        left (before anything is built for them)."""
        cdef uint32_t n = self.u32()
        if <uint64_t>n * <uint64_t>least > <uint64_t>(self.end - self.pos):
            raise FrameError("a count runs past the record")
        return n

    cdef object raw(self, bint text):
        """A string (text) or bytes field; None for length 0xFFFFFFFF."""
        cdef uint32_t n = self.u32()
        if n == NONE_LEN:
            return None
        cdef Py_ssize_t start = self.take(n)
        if text:
            return _utf8(self.p + start, n)
        return PyBytes_FromStringAndSize(<const char*>self.p + start, n)

    cdef str text(self):
        value = self.raw(True)
        if value is None:
            raise FrameError("a required string is null")
        return value


cdef dict _group_record(const uint8_t* p, Py_ssize_t pos, Py_ssize_t end):
    """The pure twin's decode_group_record, in C."""
    cdef _Fields r = _Fields()
    cdef uint32_t i, count
    r.p = p
    r.pos = pos
    r.end = end
    record = {"protocol_type": r.raw(True), "generation": r.i32(), "protocol": r.raw(True),
              "leader": r.raw(True)}
    members = []
    count = r.u32()
    for i in range(count):
        member_id = r.text()
        instance_id = r.raw(True)
        client_id = r.text()
        client_host = r.text()
        rebalance = r.i32()
        session = r.i32()
        subscription = r.raw(False) or b""
        assignment = r.raw(False) or b""
        members.append({"member_id": member_id, "instance_id": instance_id,
                        "client_id": client_id, "client_host": client_host,
                        "rebalance_timeout_ms": rebalance, "session_timeout_ms": session,
                        "subscription": subscription, "assignment": assignment})
    if r.pos != end:
        raise FrameError("group record does not fill the record")
    record["members"] = members
    return record


# -- consumer group records (the pure twin's decode_consumer_record, in C) ----------------
cdef dict _cg_parts(_Fields r):
    cdef uint32_t i, j, n, count = r.count(8)
    cdef Py_ssize_t start
    parts = {}
    for i in range(count):
        topic = r.text()
        n = r.count(4)
        start = r.take(4 * <Py_ssize_t>n)
        parts[topic] = [PyLong_FromLong(<int32_t>_u32(r.p + start + 4 * j)) for j in range(n)]
    return parts


cdef list _cg_strs(_Fields r):
    cdef uint32_t i, count = r.count(4)
    return [r.text() for i in range(count)]


cdef object _cg_value(_Fields r, int depth):
    cdef int tag
    cdef uint32_t i, count
    if depth > MAX_DEPTH:
        raise FrameError(f"a value nested deeper than {MAX_DEPTH}")
    tag = r.u8()
    if tag == T_NONE:
        return None
    if tag == T_FALSE or tag == T_TRUE:
        return tag == T_TRUE
    if tag == T_INT:
        return PyLong_FromLongLong(r.i64())
    if tag == T_STR:
        return r.text()
    if tag == T_BYTES:
        value = r.raw(False)
        if value is None:
            raise FrameError("a bytes value is null")
        return value
    if tag == T_LIST or tag == T_TUPLE:
        count = r.count(1)
        items = [_cg_value(r, depth + 1) for i in range(count)]
        return tuple(items) if tag == T_TUPLE else items
    if tag == T_DICT:
        return _cg_extras(r, {}, (), depth + 1)
    raise FrameError(f"unknown value tag {tag}")


cdef dict _cg_extras(_Fields r, dict into, tuple known, int depth):
    cdef uint32_t i, count = r.count(5)
    for i in range(count):
        key = r.text()
        if key in known:
            raise FrameError(f"an extra field named {key!r}")
        into[key] = _cg_value(r, depth)
    return into


cdef dict _cg_member(_Fields r):
    m = {}
    m["instance_id"] = r.raw(True)
    m["rack_id"] = r.raw(True)
    m["client_id"] = r.raw(True)
    m["client_host"] = r.raw(True)
    m["rebalance_timeout_ms"] = r.i32()
    m["server_assignor"] = r.raw(True)
    m["topic_names"] = _cg_strs(r)
    m["topic_regex"] = r.raw(True)
    m["state"] = r.u8()
    m["member_epoch"] = r.i32()
    m["previous_epoch"] = r.i32()
    m["assigned"] = _cg_parts(r)
    m["revoking"] = _cg_parts(r)
    m["target"] = _cg_parts(r)
    return _cg_extras(r, m, _MEMBER_FIELDS, 0)


cdef dict _consumer_record(const uint8_t* p, Py_ssize_t pos, Py_ssize_t end):
    cdef _Fields r = _Fields()
    cdef uint32_t i, count
    cdef int full, present
    r.p = p
    r.pos = pos
    r.end = end
    full = r.u8()
    if full > 1:
        raise FrameError(f"bad full flag {full}")
    record = {"consumer": True, "full": full == 1}
    record["group_epoch"] = r.i32()
    record["assignment_epoch"] = r.i32()
    metadata = {}
    count = r.count(8)
    for i in range(count):
        topic = r.text()
        metadata[topic] = r.i32()
    record["metadata"] = metadata
    resolved = {}
    count = r.count(8)
    for i in range(count):
        regex = r.text()
        resolved[regex] = _cg_strs(r)
    record["resolved"] = resolved
    members = {}
    count = r.count(5)
    for i in range(count):
        member_id = r.text()
        present = r.u8()
        if present > 1:
            raise FrameError(f"bad member flag {present}")
        members[member_id] = _cg_member(r) if present else None
    record["members"] = members
    _cg_extras(r, record, _CG_SKIP, 0)
    if r.pos != end:
        raise FrameError("consumer group record does not fill the record")
    return record


cdef str _check_offsets(_Record rec, _Strings strings, const uint8_t* p, Py_ssize_t pos,
                        Py_ssize_t end):
    """Parse an offsets body [pos, end) into `rec`: the reason it does not decode, or None
    (the pure twin's decode_offsets accepts exactly the same bodies)."""
    cdef uint32_t ntopics, slen, i, m
    cdef uint64_t blob, total = 0
    cdef const uint8_t* mlens
    cdef Py_ssize_t cursor, table
    if pos + 4 > end:
        return "topic table runs past the record"
    ntopics = _u32(p + pos)
    pos += 4
    table = pos
    for i in range(ntopics):
        if pos + 4 > end:
            return "topic table runs past the record"
        slen = _u32(p + pos)
        if slen == NONE_LEN:
            return "a required string is null"
        if pos + 4 + <Py_ssize_t>slen > end:
            return "topic table runs past the record"
        pos += 4 + slen
    rec.topics = strings.table(p, table, pos, ntopics)
    if pos + 4 > end:
        return "offset entries run past the record"
    rec.n = _u32(p + pos)
    pos += 4
    blob = <uint64_t>pos + <uint64_t>rec.n * ENTRY_BYTES
    if blob > <uint64_t>end:
        return "offset entries run past the record"
    rec.cols = p + pos
    if ntopics != 1:                      # one topic: its index is not looked at
        for i in range(rec.n):
            if _u32(rec.cols + 4 * i) >= ntopics:
                return "topic index out of range"
    mlens = rec.cols + 28 * <Py_ssize_t>rec.n
    for i in range(rec.n):
        m = _u32(mlens + 4 * i)
        if m != NONE_LEN:
            total += m
    if blob + total != <uint64_t>end:
        return "offset metadata does not fill the record"
    rec.metadata = None
    if total or any_none(mlens, rec.n):
        rec.metadata = []
        cursor = <Py_ssize_t>blob
        for i in range(rec.n):
            m = _u32(mlens + 4 * i)
            if m == NONE_LEN:
                rec.metadata.append(None)
            elif m == 0:
                rec.metadata.append("")
            else:
                rec.metadata.append(_utf8(p + cursor, m))
                cursor += m
    return None


cdef class Records:
    """The checked records of one or more segments, in log order, waiting for `apply`:
    offsets records point into their segment's buffer, which this holds a view of (so
    the buffer cannot be closed under them) until `release`."""
    cdef list recs
    cdef list views
    cdef _Keys keys                 # the keys of the records' topic tables

    def __cinit__(self):
        self.recs = []
        self.views = []
        self.keys = _Keys()

    def release(self):
        """Drop the records and the views of their buffers."""
        self.recs = []
        self.keys = _Keys()
        views, self.views = self.views, []
        for mv in views:
            mv.release()


def check(data, Records out):
    """Check every frame of `data` (CRC, decoding) up to the first bad one, appending
    the valid records to `out`. Returns (end, reason, records, entries), as scan does."""
    cdef const uint8_t[::1] buf = data
    cdef Py_ssize_t n = buf.shape[0]
    cdef const uint8_t* p = &buf[0] if n else NULL
    cdef Py_ssize_t pos = 0, end, body, gend
    cdef uint32_t length, glen, crc
    cdef uint8_t kind
    cdef Py_ssize_t entries = 0, records = 0
    cdef _Strings strings = _Strings(out.keys)
    cdef _Record rec
    cdef list recs = out.recs
    cdef str why
    reason = None
    mv = memoryview(data)
    out.views.append(mv)
    while pos < n:
        if pos + FRAME_SIZE > n:
            reason = "truncated frame header"
            break
        crc = _u32(p + pos)
        length = _u32(p + pos + 4)
        if length < MIN_PAYLOAD or length > MAX_PAYLOAD:
            reason = f"bad record length {length}"
            break
        end = pos + FRAME_SIZE + length
        if end > n:
            reason = f"record length {length} runs past the end of the file"
            break
        if _crc_of(mv, pos + 4, end) != crc:
            reason = "CRC32C mismatch"
            break
        body = pos + FRAME_SIZE
        kind = p[body]
        glen = _u32(p + body + 9)
        gend = body + HEAD_SIZE + glen
        if gend > end:
            reason = "group id runs past the record"
            break
        rec = _Record()
        rec.kind = kind
        rec.ms = PyLong_FromLongLong(<int64_t>_u64(p + body + 1))
        try:
            rec.gid = strings.group(p + body + HEAD_SIZE, glen)
            if kind == OFFSETS:
                why = _check_offsets(rec, strings, p, gend, end)
                if why is not None:
                    reason = f"undecodable record: {why}"
                    break
                entries += rec.n
            elif kind == GROUP:
                rec.value = _group_record(p, gend, end)
                entries += 1
            elif kind == GROUP_TOMBSTONE:
                entries += 1
            elif kind == OFFSET_TOMBSTONES:
                rec.value = decode_offset_tombstones(data, gend, end)
                entries += 1
            elif kind == CONSUMER_GROUP:
                rec.value = _consumer_record(p, gend, end)
                entries += 1
            else:
                reason = f"unknown record type {kind}"
                break
        except _DECODE_ERRORS as exc:
            reason = f"undecodable record: {exc}"
            break
        recs.append(rec)
        records += 1
        pos = end
    return pos, reason, records, entries


def apply(Records recs, dict groups, dict offsets, dict group_ms, dict offsets_ms, tombstone):
    """Apply the checked records of `recs` (after what the dicts hold), then release
    them. Newest first, so that an offset a later record overwrote, in this segment or a
    later one, is never built: only the latest value per key is (a log that is not
    compacted holds many values per key)."""
    try:
        _apply_newest_first(recs.recs, recs.keys, groups, offsets, group_ms, offsets_ms,
                            tombstone)
    finally:
        recs.release()


def scan(data, dict groups, dict offsets, dict group_ms, dict offsets_ms, tombstone):
    """Apply every valid record of `data` in order (check, then apply). Returns (end,
    reason, records, entries), as the pure twin's scan, with the same effect on the
    dicts."""
    cdef Records recs = Records()
    result = check(data, recs)
    apply(recs, groups, offsets, group_ms, offsets_ms, tombstone)
    return result


cdef _apply_newest_first(list recs, _Keys keys, dict groups, dict offsets, dict group_ms,
                         dict offsets_ms, tombstone):
    """The effect of applying `recs` in order (after what the dicts hold), computed a
    group at a time, newest record first (see _apply_group)."""
    cdef dict by_group = {}
    cdef _Record rec
    cdef list grecs
    for rec in recs:
        grecs = by_group.get(rec.gid)
        if grecs is None:
            by_group[rec.gid] = [rec]
        else:
            grecs.append(rec)
    for gid, grecs in by_group.items():
        _apply_group(gid, grecs, keys, groups, offsets, group_ms, offsets_ms, tombstone)


cdef tuple _consumer_fold(list grecs, Py_ssize_t newest, previous, tombstone):
    """The group's record after its newest record, grecs[newest], a consumer group's:
    the consumer records back to the last that starts afresh (a full one), or to a GROUP
    record or a tombstone, folded oldest first over it (over `previous`, an earlier
    apply's, when none of those is there), with the write time of the last record that
    made it (None: `previous` stands, every record skipped, as a partial record that
    does not follow is)."""
    cdef _Record rec
    cdef Py_ssize_t j = newest, k
    while j >= 0:
        rec = <_Record>grecs[j]
        if rec.kind == GROUP or rec.kind == GROUP_TOMBSTONE:
            break
        if rec.kind == CONSUMER_GROUP and rec.value["full"]:
            break
        j -= 1
    written = None
    if j < 0:
        value = previous
    elif rec.kind == GROUP:
        value = rec.value
        written = rec.ms
    elif rec.kind == GROUP_TOMBSTONE:
        value = tombstone
        written = rec.ms
    else:
        value = None
    for k in range(max(j, 0), newest + 1):
        rec = <_Record>grecs[k]
        if rec.kind == CONSUMER_GROUP:
            folded = fold_consumer(value, rec.value)
            if folded is not value:
                value = folded
                written = rec.ms
    return value, written


cdef _apply_group(str gid, list grecs, _Keys keys, dict groups, dict offsets, dict group_ms,
                  dict offsets_ms, tombstone):
    """One group's records (in log order), applied newest first: the newest group record
    (a consumer group's: the fold of its run, _consumer_fold) or tombstone wins; a tombstone hides the group's older offsets records; per offset
    key the newest set or delete wins; the group's offsets exist afterwards if any key
    is set, or (empty) if its newest offsets-or-offset-tombstones record sets offsets
    (an offset tombstones record that leaves them empty removes them)."""
    cdef _Record rec
    cdef Py_ssize_t i, kid
    cdef bint named = False, dead = False, deleting = False
    cdef int newest_kind = 0
    cdef uint32_t serial = keys.next_serial()
    cdef dict cur = None, older
    newest_ms = None
    for i in range(len(grecs) - 1, -1, -1):
        rec = <_Record>grecs[i]
        if rec.kind == GROUP or rec.kind == GROUP_TOMBSTONE or rec.kind == CONSUMER_GROUP:
            if not named:
                named = True
                if rec.kind == CONSUMER_GROUP:
                    folded, written = _consumer_fold(grecs, i, groups.get(gid), tombstone)
                    if written is not None:
                        groups[gid] = folded
                        group_ms[gid] = written
                else:
                    groups[gid] = rec.value if rec.kind == GROUP else tombstone
                    group_ms[gid] = rec.ms
            if rec.kind == GROUP_TOMBSTONE:
                dead = True
                break                 # older offsets records do not count
            continue
        if newest_kind == 0:
            newest_kind = rec.kind
        if cur is None:
            cur = {}
        if rec.kind == OFFSETS:
            if newest_ms is None:
                newest_ms = rec.ms
            rec.newest_first(cur, keys, serial)
        else:
            deleting = True
            for topic, part in rec.value:
                kid = keys.key_id(keys.topic(topic), part)
                if keys.mark[kid] != serial:
                    keys.mark[kid] = serial
                    cur[keys.keys[kid]] = DELETED
    if cur is None:
        if dead:
            offsets.pop(gid, None)
            offsets_ms.pop(gid, None)
        return
    older = None if dead else offsets.get(gid)
    if older:                     # an earlier apply's: these values win
        for key, value in cur.items():
            if value is DELETED:
                older.pop(key, None)
            else:
                older[key] = value
        cur = older
    elif deleting:
        for key in [key for key, value in cur.items() if value is DELETED]:
            del cur[key]
    if cur or newest_kind == OFFSETS:
        offsets[gid] = cur
        if newest_ms is not None:
            offsets_ms[gid] = newest_ms
    else:
        offsets.pop(gid, None)
        offsets_ms.pop(gid, None)

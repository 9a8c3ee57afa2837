from libc.stdint cimport int64_t, int32_t, uint32_t, uint64_t, int16_t, uint8_t
from cpython.object cimport PyObject

from fastcoord.core._native.mutex cimport (
    PTHREAD_MUTEX_RECURSIVE, mutex_lock_with_gil, pthread_mutex_init, pthread_mutex_lock,
    pthread_mutex_t, pthread_mutex_trylock, pthread_mutex_unlock, pthread_mutexattr_destroy,
    pthread_mutexattr_init, pthread_mutexattr_settype, pthread_mutexattr_t)


# What the heartbeat path needs of a group. Allocated once and never freed (recycled
# through a free list), so a racing reader that followed a stale pointer still locks
# valid memory and then fails its slot-generation check.
ctypedef struct GroupCore:
    pthread_mutex_t mu          # reentrant: the group logic nests, as Kafka's group lock does
    PyObject* group_id          # strong reference while live
    int32_t state
    int32_t generation
    int32_t shard
    int32_t live                # 1 while a GroupRecord owns it
    # A consumer group's quiet point (consumer.py publishes it): the group epoch at which
    # nothing is pending for the group (target at the group epoch, no regex to resolve),
    # 0 when something is, and the topics version its metadata was computed from. A
    # member settled at this epoch, with the table's topics version still this one, may
    # be answered by consumer_heartbeat alone. A group epoch bump re-publishes it: one
    # store, whatever the group's size.
    int32_t cquiet
    int64_t ctopics


# One member's heartbeat state: 48 bytes, in chunks that never move. Its wheel entry is
# tagged with slot | gen << 32 and never cancelled: an entry whose slot was freed (gen
# moved) or re-armed elsewhere (armed moved) is recognised as stale when it fires.
ctypedef struct Slot:
    GroupCore* core             # NULL when the slot is free
    PyObject* member_id         # strong reference once joined; NULL while pending or free
    int64_t deadline            # session deadline (ms)
    int64_t armed               # deadline of the slot's live wheel entry, -1 if none
    int32_t session_timeout
    uint32_t gen                # bumped when freed: stale handles and entries miss
    int32_t consumer            # 1: a consumer-protocol member (classic paths never see it)
    int32_t cepoch              # the member epoch its steady heartbeat is settled at; 0: none


# A settled consumer member's cached answer and the client id and host it holds for
# (strong references; NULL while not settled): beside the slots, in chunks of their
# size, allocated on first use, so classic members' slots stay as they were. Raw
# pointers, not a list of tuples: a steady heartbeat then compares the client strings
# by identity and touches no Python object but the result it returns.
ctypedef struct CSlot:
    PyObject* result
    PyObject* client_id
    PyObject* client_host
    int32_t interval            # the result's heartbeat_interval_ms (c_wire_steady's)


cdef enum:
    SLOT_CHUNK_BITS = 12
    SLOT_CHUNK = 4096           # slots per chunk
    MAX_CHUNKS = 65536          # 268 M members at most
    MIN_CHUNK_INDEX = 16        # the chunk index's first capacity (64 k members)
    MAX_RETIRED = 16            # outgrown indexes kept: log2(MAX_CHUNKS / MIN_CHUNK_INDEX)


cdef extern from "Python.h":
    Py_hash_t PyObject_Hash(object o) except? -1
    bint PyUnicode_CheckExact(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    unsigned int PyUnicode_KIND(object o)
    void* PyUnicode_DATA(object o)
    int PyObject_RichCompareBool(object a, object b, int op) except -1
    int Py_EQ

cdef extern from "<string.h>" nogil:
    int memcmp(const void* a, const void* b, size_t n)


cdef inline Py_hash_t id_hash(object s) except? -1:
    """hash(s), by the public call (a str's own hash is cached in it by CPython; its
    layout is not API, so it is not read here)."""
    return PyObject_Hash(s)


cdef inline bint id_equal(PyObject* stored, object given) except -1:
    """stored == given for ids: identity, then (exact str) length, kind and bytes: the
    ids a server decodes from the wire are equal to the stored ones but never the same
    object, so this is the common case, not PyObject_RichCompare's general dispatch."""
    cdef object s
    cdef Py_ssize_t n
    cdef unsigned int kind
    if stored == <PyObject*>given:
        return True
    s = <object>stored
    if PyUnicode_CheckExact(s) and PyUnicode_CheckExact(given):
        n = PyUnicode_GET_LENGTH(s)
        kind = PyUnicode_KIND(s)
        if n != PyUnicode_GET_LENGTH(given) or kind != PyUnicode_KIND(given):
            return False    # canonical (PEP 393) strings of different kinds differ
        return memcmp(PyUnicode_DATA(s), PyUnicode_DATA(given), <size_t>n * kind) == 0
    return PyObject_RichCompareBool(s, given, Py_EQ)


cdef inline bint same_id(PyObject* stored, object given) except -1:
    """id_equal, its identity case first without a call (the steady heartbeat's)."""
    return stored == <PyObject*>given or id_equal(stored, given)


cdef inline void lock_with_gil(GroupCore* core) noexcept:
    mutex_lock_with_gil(&core.mu)       # (a group's lock, as every C mutex: mutex.pxd)


cdef class GroupRecord(OperationLock):
    cdef GroupCore* core
    cdef readonly str group_id
    cdef readonly int shard         # (its core's: a typed reader loads it, no property call)
    cdef public dict slots          # member id -> slot, members that have joined
    cdef public object group        # the group logic's Group
    cdef MemberTable table

    # (cpdef: the group logic's request paths take the lock by these, C calls)
    cpdef acquire(self, bint blocking=*, double timeout=*)
    cpdef release(self)


cdef class MemberTable(TimerSink):
    # (group id, member id) -> slot for joined members: open addressing, 8-byte entries
    # (hash bits << 32 | slot + 2; 0 empty, 1 deleted). The scalar heartbeat's only
    # lookup: one probe, then the slot itself, then its group core.
    cdef uint64_t* map
    cdef Py_ssize_t map_cap
    cdef Py_ssize_t map_used        # live + deleted entries
    cdef Py_ssize_t map_live
    cdef int clock_kind             # 0: call clock.now_ms(); 1: ManualClock; 2: SystemClock
    # The chunk index (`chunks`, with `cchunks` beside it) grows by doubling. An outgrown
    # pair is kept, not freed, until the table goes: a heartbeat that read the old
    # pointer without the GIL still finds every chunk that existed when it read it, and
    # a slot in a newer chunk is handed out only after the new index is in place.
    cdef Slot** chunks
    cdef Py_ssize_t nchunks
    cdef Py_ssize_t chunks_cap      # entries of `chunks` and `cchunks`
    cdef void* retired[2 * MAX_RETIRED]
    cdef int nretired
    cdef Py_ssize_t nslots          # slots handed out so far (high-water mark)
    cdef list free_slots
    cdef list slot_recs             # slot -> GroupRecord (keeps GroupCore owners alive)
    cdef list free_cores            # recycled GroupCore pointers (as ints)
    cdef uint8_t* shards
    cdef readonly int num_shards
    cdef public bint active
    cdef public dict groups         # group id -> GroupRecord
    cdef public object clock
    cdef object now_ms              # clock.now_ms, bound once
    cdef public Timer timer
    cdef public object on_deadline
    cdef public object version_fallback   # group_version's checked path: f(group_id)
    cdef public object mixed_heartbeat    # a consumer group's classic heartbeat (mixed groups)
    cdef public object consumer_fallback  # consumer_group_heartbeat's checked path
    cdef CSlot** cchunks            # the CSlot chunks beside `chunks` (NULL until used)
    cdef int64_t ctopics            # the consumer logic's topics version (set_topics)
    # consumer_heartbeat: a builtin method of the C entry bound to this table, and the
    # general path it hands every call but the plain steady one (bound)
    cdef readonly object consumer_heartbeat
    cdef object consumer_general
    # consumer_heartbeat_handle: the same, a builtin method of its C entry, and its
    # general path (bound)
    cdef readonly object consumer_heartbeat_handle
    cdef object consumer_handle_general

    cdef Slot* slot_ptr(self, Py_ssize_t slot) noexcept nogil
    cdef CSlot* cslot_ptr(self, Py_ssize_t slot) noexcept nogil
    cdef int grow_chunk_index(self) except -1
    cdef void consumer_clear(self, Py_ssize_t slot) noexcept
    cdef int64_t now(self) except? -1
    cdef Py_ssize_t map_find(self, object group_id, object member_id, int consumer,
                             bint answer=*) except -2
    cdef int map_insert(self, Py_ssize_t slot) except -1
    cdef void map_delete(self, Py_ssize_t slot) noexcept
    cdef int map_resize(self, Py_ssize_t cap) except -1
    cdef int bind_member(self, Py_ssize_t slot, object member_id) except -1
    cdef void unbind_member(self, Py_ssize_t slot) noexcept
    cdef GroupCore* new_core(self) except NULL
    cdef int arm(self, Py_ssize_t slot, Slot* s, int64_t deadline) except -1
    cdef int refresh(self, Py_ssize_t slot, Slot* s, int64_t deadline) except -1
    cdef int on_timer(self, int64_t tag, int64_t deadline_ms) except -1
    cdef Py_ssize_t _batch(self, int64_t* hp, int32_t* gp, int16_t* op, Py_ssize_t n,
                           int64_t now) noexcept nogil
    cdef int _rearm_if_needed(self, Py_ssize_t slot) except -1
    cdef inline void _prefetch_ahead(self, int64_t* hp, Py_ssize_t i, Py_ssize_t n,
                                     bint cslots) noexcept nogil
    cdef Py_ssize_t _consumer_batch(self, int64_t* hp, int32_t* ep, uint8_t* op, Py_ssize_t n,
                                    int64_t now) noexcept nogil
    cdef int c_heartbeat_handle(self, int64_t h, int32_t g, int64_t now) except -1
    cdef object c_consumer_handle(self, int64_t h, int32_t epoch)
    cdef object c_consumer_steady(self, object group_id, object member_id, object member_epoch,
                                  object client_id, object client_host)
    cdef object c_steady(self, object group_id, object member_id, object member_epoch,
                         str client_id, str client_host)
    cdef int32_t c_wire_steady(self, str group_id, str member_id, int32_t epoch,
                               str client_id, str client_host) except -2
    cdef int c_answer(self, object callback, object result) except -1
    cdef int c_callback_raised(self) except -1
    cpdef int shard_state(self, int shard) except -1
    cpdef object make_result(self, type cls, tuple values)
    cpdef unsigned long current_thread(self)
    # (cpdef: the group logic calls these once per member of a join round, C calls)
    cpdef set_session_timeout(self, Py_ssize_t slot, int session_timeout_ms)
    cpdef touch(self, Py_ssize_t slot)
    cpdef object group_version(self, object group_id)
    cdef Py_ssize_t c_commit_handle(self, int64_t h, int32_t g, object instance_id,
                                    int64_t now) except -2

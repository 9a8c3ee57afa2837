"""Member heartbeat tables: the coordinator's hot path in C (twin: _pure/members.py).

A heartbeat is a dict lookup of the group, a dict lookup of the member's slot, a
lock of the group's mutex, two integer checks and one store of the new deadline:
no allocation and no timer insertion. Each slot owns one wheel entry; when it
comes due, `on_timer` re-checks it lazily (re-inserts at the moved deadline, or
hands the slot to the group logic's `on_deadline`). `heartbeat_batch` does the
same for arrays of handles with the GIL released, taking each group's lock once
per run of consecutive handles of that group.
"""
cimport cython
from cpython.mem cimport PyMem_RawCalloc, PyMem_RawFree
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyCFunction, PyMethodDef, PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.ref cimport Py_INCREF, Py_DECREF, Py_XDECREF
from libc.stdint cimport int64_t, int32_t, uint32_t, uint64_t, int16_t, uint8_t, uintptr_t
from libc.string cimport memcpy
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
cimport numpy as cnp

import logging
import numpy as np

from fastcoord.core._native.tuples cimport fc_tuple_new
from cpython.pythread cimport PyThread_get_thread_ident
from fastcoord.core.clock cimport ManualClock
from fastcoord.core.clock import SystemClock
from fastcoord.core.config import shard_for
from fastcoord.core.errors import Errors
from fastcoord.core._pure.members import check_batch, check_handle_args

cnp.import_array()

cdef extern from *:
    """
    /* Mix a group id's and a member id's str hashes into one 64-bit map hash. */
    static inline uint64_t fc_mix(Py_hash_t g, Py_hash_t m) {
        uint64_t h = (uint64_t)m * 0x9E3779B97F4A7C15ULL ^ (uint64_t)g;
        h ^= h >> 29; h *= 0xBF58476D1CE4E5B9ULL; h ^= h >> 32;
        return h;
    }
    """
    uint64_t fc_mix(Py_hash_t g, Py_hash_t m) nogil


cdef extern from "Python.h":
    # CPython's fast call convention for a builtin function (public API)
    int METH_FASTCALL
    int METH_KEYWORDS
    object PyCFunction_NewEx(PyMethodDef* ml, object self, object module)
    object PyObject_Vectorcall(object callable, PyObject** args, size_t nargsf,
                               PyObject* kwnames)
    long PyLong_AsLongAndOverflow(object o, int* overflow) except? -1
    # (an exact int sets no error: out of range is the overflow flag)
    bint fc_long_exact "PyLong_CheckExact"(PyObject* o) noexcept
    long long fc_as_longlong "PyLong_AsLongLongAndOverflow"(PyObject* o, int* overflow) noexcept


cdef extern from *:
    """
    /* callback(arg), its result dropped: 0, or -1 with what it raised pending. */
    static int fc_call1(PyObject *callback, PyObject *arg) {
        PyObject *r = PyObject_CallOneArg(callback, arg);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        return 0;
    }
    /* -1, the error indicator already set: a pending exception, raised in Cython. */
    static int fc_pending(void) { return -1; }
    """
    int fc_call1(object callback, object arg)     # (-1 is checked by the caller)
    int fc_pending() except -1


cdef extern from *:
    """
    #define fc_prefetch(p) __builtin_prefetch((const void*)(p), 1, 1)
    """
    void fc_prefetch(const void* p) nogil

cdef enum:
    PREFETCH_SLOT = 16      # handles ahead whose slot we ask the cache for
    PREFETCH_CORE = 8       # handles ahead whose group core we ask for (slot is in by then)

cdef enum:
    REARM_FLAG = 0x4000     # set in heartbeat_batch's output while the GIL is released

cdef enum:
    MAP_EMPTY = 0
    MAP_DELETED = 1
    MAP_MIN_CAP = 16

from fastcoord.core._native.constants cimport (
    C_ILLEGAL_GENERATION, C_INVALID_GROUP, C_NONE, C_NOT_AVAILABLE, C_NOT_COORDINATOR,
    C_REBALANCING, C_UNKNOWN, CR, DEAD, EMPTY, PR, SHARD_ACTIVE, SHARD_LOADING,
    SHARD_NOT_OWNED, STABLE)
from fastcoord.core import states as _states


def _check_constants():
    """constants.pxd's C values are states.py's and errors.py's: a build whose copies
    disagree fails at import, not in a heartbeat's answer."""
    c_values = {"EMPTY": EMPTY, "PR": PR, "CR": CR, "STABLE": STABLE, "DEAD": DEAD,
                "SHARD_NOT_OWNED": SHARD_NOT_OWNED, "SHARD_LOADING": SHARD_LOADING,
                "SHARD_ACTIVE": SHARD_ACTIVE}
    for name, value in c_values.items():
        if getattr(_states, name) != value:
            raise ImportError(f"constants.pxd {name}={value}, states.py has {getattr(_states, name)}")
    codes = {"NONE": C_NONE, "COORDINATOR_NOT_AVAILABLE": C_NOT_AVAILABLE,
             "NOT_COORDINATOR": C_NOT_COORDINATOR, "ILLEGAL_GENERATION": C_ILLEGAL_GENERATION,
             "INVALID_GROUP_ID": C_INVALID_GROUP, "UNKNOWN_MEMBER_ID": C_UNKNOWN,
             "REBALANCE_IN_PROGRESS": C_REBALANCING}
    for name, value in codes.items():
        if Errors[name] != value:
            raise ImportError(f"constants.pxd's code for {name} is {value}, errors.py's {int(Errors[name])}")


_check_constants()

cdef object _coord_log = logging.getLogger("fastcoord.coordinator")
cdef object E_NONE = Errors.NONE
cdef object E_NOT_AVAILABLE = Errors.COORDINATOR_NOT_AVAILABLE
cdef object E_NOT_COORDINATOR = Errors.NOT_COORDINATOR
cdef object E_ILLEGAL_GENERATION = Errors.ILLEGAL_GENERATION
cdef object E_INVALID_GROUP = Errors.INVALID_GROUP_ID
cdef object E_UNKNOWN = Errors.UNKNOWN_MEMBER_ID
cdef object E_REBALANCING = Errors.REBALANCE_IN_PROGRESS
cdef object E_FENCED = Errors.FENCED_INSTANCE_ID


# consumer_heartbeat's entry: a C function of CPython's fast call convention
# (METH_FASTCALL | METH_KEYWORDS), bound to its table as a builtin method. Cython's own
# wrapper for a def of thirteen arguments fills and releases all thirteen on every
# call; the steady heartbeat passes three and `callback`, so the entry reads those
# four from the caller's argument array and hands every other call, unchanged, to
# consumer_heartbeat_general, which parses them all.
cdef object _consumer_entry(MemberTable table, PyObject** args, Py_ssize_t nargs,
                            PyObject* kwnames):
    cdef object callback, result
    # kwnames holds the keyword names after the positional arguments; a call written
    # `callback=cb` passes the interned name, so identity is the test (any other
    # object naming it takes the general path, which compares by value)
    if (nargs == 3 and kwnames is not NULL and PyTuple_GET_SIZE(<object>kwnames) == 1
            and PyTuple_GET_ITEM(<object>kwnames, 0) == <PyObject*>"callback"):
        callback = <object>args[3]
        if callable(callback):
            # every other argument its default (client_id and client_host "")
            result = table.c_steady(<object>args[0], <object>args[1], <object>args[2], "", "")
            if result is not None:
                table.c_answer(callback, result)
                return None
    return PyObject_Vectorcall(table.consumer_general, args, <size_t>nargs, kwnames)


# consumer_heartbeat_handle's entry, of the same convention: two exact ints in range
# (a handle and an int32 epoch) are read from the argument array and answered by
# c_consumer_handle; every other call goes, unchanged, to
# consumer_heartbeat_handle_general, which checks its arguments as the pure twin does.
cdef object _consumer_handle_entry(MemberTable table, PyObject** args, Py_ssize_t nargs,
                                   PyObject* kwnames):
    cdef long long h, e
    cdef int over_h = 0, over_e = 0
    if nargs == 2 and kwnames is NULL and fc_long_exact(args[0]) and fc_long_exact(args[1]):
        h = fc_as_longlong(args[0], &over_h)
        e = fc_as_longlong(args[1], &over_e)
        if not (over_h or over_e) and -0x80000000 <= e <= 0x7FFFFFFF:
            return table.c_consumer_handle(h, <int32_t>e)
    return PyObject_Vectorcall(table.consumer_handle_general, args, <size_t>nargs, kwnames)


cdef void _fast_entry(PyMethodDef* d, const char* name, void* fn, const char* doc) noexcept:
    """`d` describes `fn` as a builtin of CPython's fast call convention with keywords."""
    d.ml_name = name
    d.ml_meth = <PyCFunction>fn
    d.ml_flags = METH_FASTCALL | METH_KEYWORDS
    d.ml_doc = doc


cdef PyMethodDef _CONSUMER_HANDLE_ENTRY
_fast_entry(&_CONSUMER_HANDLE_ENTRY, b"consumer_heartbeat_handle", <void*>_consumer_handle_entry,
    b"consumer_heartbeat_handle(handle, member_epoch) -> result | None\n\n"
    b"consumer_heartbeat_batch for one member: its cached answer, or None, having changed "
    b"nothing; any call but two ints in range goes to consumer_heartbeat_handle_general.")

cdef PyMethodDef _CONSUMER_ENTRY
_fast_entry(&_CONSUMER_ENTRY, b"consumer_heartbeat", <void*>_consumer_entry,
    b"consumer_heartbeat(group_id, member_id, member_epoch, *, instance_id=None, rack_id=None, "
    b"rebalance_timeout_ms=-1, subscribed_topic_names=None, subscribed_topic_regex=None, "
    b"server_assignor=None, owned_partitions=None, client_id='', client_host='', callback)\n\n"
    b"GroupCoordinator.consumer_group_heartbeat, bound to it: the plain steady heartbeat of a "
    b"settled member is answered here, every other call as consumer_heartbeat_general.")


cdef object static_error(GroupRecord rec, object member_id, object instance_id):
    """A static member's check (a heartbeat's, a commit's), with its group's lock held and
    the group not Dead (Kafka validates the instance id before the member id):
    UNKNOWN_MEMBER_ID when the instance id maps to no member, FENCED_INSTANCE_ID when it
    maps to another (a newer incarnation); None when it maps to this member."""
    current = (<dict>rec.group.static).get(instance_id)
    if current is None:
        return E_UNKNOWN
    if current != member_id:
        return E_FENCED
    return None


cdef class GroupRecord:
    """A group's lock (`with rec:`), state, generation and shard for the hot path, and its
    member id -> slot map. State and generation are written by the group logic."""

    def __cinit__(self, MemberTable table, str group_id, int shard):
        self.table = table
        self.core = table.new_core()
        self.core.state = EMPTY
        self.core.generation = 0
        self.core.shard = shard
        self.shard = shard
        self.core.live = 1
        self.core.cquiet = 0
        self.core.ctopics = -1
        Py_INCREF(group_id)
        self.core.group_id = <PyObject*>group_id
        self.group_id = group_id
        self.slots = {}
        self.group = None

    def __dealloc__(self):
        # The core is recycled, never freed: see GroupCore in members.pxd.
        if self.core is NULL:
            return
        self.core.live = 0
        Py_XDECREF(self.core.group_id)
        self.core.group_id = NULL
        if self.table is not None and self.table.free_cores is not None:
            self.table.free_cores.append(<uintptr_t>self.core)
        else:
            # The table is being torn down too (garbage collection of a cycle): nothing can
            # reach this core any more.
            PyMem_RawFree(self.core)
        self.core = NULL

    @property
    def state(self):
        return self.core.state

    @state.setter
    def state(self, int value):
        self.core.state = value

    @property
    def generation(self):
        return self.core.generation

    @generation.setter
    def generation(self, int value):
        self.core.generation = value

    cpdef acquire(self, bint blocking=True, double timeout=-1):
        """threading.RLock.acquire's contract, as the pure twin's lock keeps it: wait
        (timeout -1), wait at most `timeout` seconds, or only try (blocking False);
        whether the lock was taken."""
        return mutex_acquire(&self.core.mu, blocking, timeout)

    cpdef release(self):
        pthread_mutex_unlock(&self.core.mu)

    cdef void c_acquire(self) noexcept:
        lock_with_gil(self.core)

    cdef void c_release(self) noexcept:
        pthread_mutex_unlock(&self.core.mu)

    def __enter__(self):
        lock_with_gil(self.core)
        return self

    # (Three named arguments, not *exc: every `with rec:` of the group logic calls this,
    # and a fixed-arity method takes the fast call, where *exc makes a tuple per call.)
    def __exit__(self, exc_type, exc, traceback):
        pthread_mutex_unlock(&self.core.mu)


cdef inline Py_ssize_t _steady_slot(MemberTable t, str group_id, str member_id,
                                     int32_t epoch, GroupCore** core, uint32_t* gen,
                                     bint answer) except -2:
    """The slot of the settled consumer member (group_id, member_id) at `epoch` whose
    group is quiet at it, read without the group's lock (its core and the slot's
    generation in `core` and `gen`, for _steady_locked to re-check under it); or -1.
    `answer`: the caller returns the cached answer (map_find asks for its line)."""
    cdef Py_ssize_t slot
    cdef Slot* s
    cdef CSlot* c
    if not t.active:
        return -1
    slot = t.map_find(group_id, member_id, 1, answer)
    if slot < 0:
        return -1
    s = t.slot_ptr(slot)
    core[0] = s.core
    gen[0] = s.gen
    if s.cepoch != epoch:
        return -1
    c = t.cslot_ptr(slot)
    if c is NULL or c.result is NULL:
        return -1
    if t.shards[core[0].shard] != SHARD_ACTIVE or core[0].cquiet != epoch \
            or core[0].ctopics != t.ctopics:
        return -1
    return slot


cdef inline CSlot* _steady_locked(MemberTable t, Py_ssize_t slot, GroupCore* core,
                                  uint32_t gen, int32_t epoch, str client_id,
                                  str client_host) except? NULL:
    """Under the group's lock, which the slow path publishes under: _steady_slot's
    reading re-checked and the client id and host the recorded ones: the member's CSlot,
    its session refreshed; or NULL, nothing changed (a new client id or host is the
    slow path's to record)."""
    cdef Slot* s = t.slot_ptr(slot)
    cdef CSlot* c
    if (s.core is not core or s.gen != gen or not s.consumer or s.cepoch != epoch
            or core.cquiet != epoch or core.ctopics != t.ctopics):
        return NULL
    c = t.cslot_ptr(slot)
    if c is NULL or c.result is NULL or not (same_id(c.client_id, client_id)
                                            and same_id(c.client_host, client_host)):
        return NULL
    t.refresh(slot, s, t.now() + s.session_timeout)
    return c


cdef class MemberTable(TimerSink):
    def __cinit__(self, clock, Timer timer, int num_shards):
        if num_shards <= 0:
            raise ValueError(f"num_shards must be > 0, got {num_shards}")
        self.chunks = <Slot**>PyMem_RawCalloc(MIN_CHUNK_INDEX, sizeof(Slot*))
        self.cchunks = <CSlot**>PyMem_RawCalloc(MIN_CHUNK_INDEX, sizeof(CSlot*))
        self.chunks_cap = MIN_CHUNK_INDEX
        self.nretired = 0
        if self.cchunks is NULL:
            raise MemoryError()
        self.shards = <uint8_t*>PyMem_RawCalloc(num_shards, 1)
        if self.chunks is NULL or self.shards is NULL:
            raise MemoryError()
        self.map = <uint64_t*>PyMem_RawCalloc(MAP_MIN_CAP, sizeof(uint64_t))
        if self.map is NULL:
            raise MemoryError()
        self.map_cap = MAP_MIN_CAP
        self.map_used = 0
        self.map_live = 0
        self.clock_kind = 1 if type(clock) is ManualClock else 2 if type(clock) is SystemClock else 0
        self.nchunks = 0
        self.nslots = 0
        self.num_shards = num_shards
        self.free_slots = []
        self.slot_recs = []
        self.free_cores = []
        self.groups = {}
        self.active = True
        self.clock = clock
        self.now_ms = clock.now_ms
        self.timer = timer
        self.on_deadline = None
        self.version_fallback = None
        self.mixed_heartbeat = None
        self.consumer_fallback = None
        self.ctopics = 0
        # (bound methods of this table: a cycle through it, which the GC collects)
        self.consumer_general = self.consumer_heartbeat_general
        self.consumer_heartbeat = PyCFunction_NewEx(&_CONSUMER_ENTRY, self, None)
        self.consumer_handle_general = self.consumer_heartbeat_handle_general
        self.consumer_heartbeat_handle = PyCFunction_NewEx(&_CONSUMER_HANDLE_ENTRY, self, None)

    def __dealloc__(self):
        cdef Py_ssize_t i, j
        if self.chunks is not NULL:
            for i in range(self.nchunks):
                PyMem_RawFree(self.chunks[i])
            PyMem_RawFree(self.chunks)
        if self.cchunks is not NULL:
            for i in range(self.nchunks):
                if self.cchunks[i] is not NULL:
                    for j in range(SLOT_CHUNK):
                        self.consumer_clear((i << SLOT_CHUNK_BITS) + j)
                    PyMem_RawFree(self.cchunks[i])
            PyMem_RawFree(self.cchunks)
        for i in range(self.nretired):
            PyMem_RawFree(self.retired[i])
        if self.shards is not NULL:
            PyMem_RawFree(self.shards)
        if self.map is not NULL:
            PyMem_RawFree(self.map)
        # GroupCores are leaked on purpose only while records live; free the recycled ones.
        if self.free_cores is not None:
            for ptr in self.free_cores:
                PyMem_RawFree(<void*><uintptr_t>ptr)

    cdef int grow_chunk_index(self) except -1:
        """Double the chunk index; the outgrown pair is retired (see the declaration)."""
        cdef Py_ssize_t cap = self.chunks_cap * 2
        cdef Slot** chunks
        cdef CSlot** cchunks
        if self.nretired + 2 > 2 * MAX_RETIRED:
            raise MemoryError("member table is full")
        chunks = <Slot**>PyMem_RawCalloc(cap, sizeof(Slot*))
        if chunks is NULL:
            raise MemoryError()
        cchunks = <CSlot**>PyMem_RawCalloc(cap, sizeof(CSlot*))
        if cchunks is NULL:
            PyMem_RawFree(chunks)
            raise MemoryError()
        memcpy(chunks, self.chunks, self.chunks_cap * sizeof(Slot*))
        memcpy(cchunks, self.cchunks, self.chunks_cap * sizeof(CSlot*))
        self.retired[self.nretired] = self.chunks
        self.retired[self.nretired + 1] = self.cchunks
        self.nretired += 2
        self.chunks = chunks
        self.cchunks = cchunks
        self.chunks_cap = cap
        return 0

    cdef inline Slot* slot_ptr(self, Py_ssize_t slot) noexcept nogil:
        return &self.chunks[slot >> SLOT_CHUNK_BITS][slot & (SLOT_CHUNK - 1)]

    cdef inline CSlot* cslot_ptr(self, Py_ssize_t slot) noexcept nogil:
        """The slot's CSlot, or NULL when its chunk was never used."""
        cdef CSlot* chunk = self.cchunks[slot >> SLOT_CHUNK_BITS]
        if chunk is NULL:
            return NULL
        return &chunk[slot & (SLOT_CHUNK - 1)]

    cdef void consumer_clear(self, Py_ssize_t slot) noexcept:
        """Unsettle: drop the slot's cached answer (its settled epoch is the caller's)."""
        cdef CSlot* c = self.cslot_ptr(slot)
        cdef PyObject* result
        cdef PyObject* client_id
        cdef PyObject* client_host
        if c is NULL or c.result is NULL:
            return
        result, client_id, client_host = c.result, c.client_id, c.client_host
        c.result = c.client_id = c.client_host = NULL
        Py_DECREF(<object>result)
        Py_DECREF(<object>client_id)
        Py_DECREF(<object>client_host)

    cdef inline int64_t now(self) except? -1:
        """clock.now_ms() without a Python call for the two clocks fastcoord ships."""
        cdef timespec ts
        if self.clock_kind == 2:            # SystemClock: the same CLOCK_MONOTONIC
            clock_gettime(CLOCK_MONOTONIC, &ts)
            return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000
        if self.clock_kind == 1:            # exactly a ManualClock: read its field
            return (<ManualClock>self.clock)._now
        return self.now_ms()

    # -- the (group id, member id) -> slot map ------------------------------------------
    cdef Py_ssize_t map_find(self, object group_id, object member_id, int consumer,
                             bint answer=True) except -2:
        """The slot of (group id, member id) among classic members (consumer 0) or
        consumer-protocol members (consumer 1), or -1. For a consumer member whose cached
        answer the caller returns (`answer`), that answer's line is asked for early."""
        cdef uint64_t h = fc_mix(id_hash(group_id), id_hash(member_id))
        cdef uint64_t tag = h >> 32, e
        cdef Py_ssize_t mask = self.map_cap - 1, i = <Py_ssize_t>(h & <uint64_t>mask), slot
        cdef Slot* s
        cdef CSlot* c = NULL
        while True:
            e = self.map[i]
            if e == MAP_EMPTY:
                return -1
            if e != MAP_DELETED and (e >> 32) == tag:
                slot = <Py_ssize_t><uint32_t>e - 2
                if consumer:
                    # a steady consumer heartbeat reads the slot's CSlot next: ask for
                    # its line while the slot's own loads
                    c = self.cslot_ptr(slot)
                    fc_prefetch(c)
                s = self.slot_ptr(slot)
                if s.consumer == consumer and id_equal(s.member_id, member_id):
                    if answer and c is not NULL and c.result is not NULL:
                        # ... and returns its cached answer, whose line is asked for
                        # here (read without the lock, only to ask): its miss then
                        # overlaps the group core's, which the group id's check loads
                        fc_prefetch(c.result)
                    if id_equal(s.core.group_id, group_id):
                        return slot
            i = (i + 1) & mask

    cdef int map_insert(self, Py_ssize_t slot) except -1:
        cdef Slot* s = self.slot_ptr(slot)
        cdef uint64_t h, e
        cdef Py_ssize_t mask, i
        if (self.map_used + 1) * 2 > self.map_cap:
            self.map_resize(max(<Py_ssize_t>MAP_MIN_CAP, self.map_cap * 2
                                if (self.map_live + 1) * 4 > self.map_cap else self.map_cap))
        h = fc_mix(id_hash(<object>s.core.group_id), id_hash(<object>s.member_id))
        mask = self.map_cap - 1
        i = <Py_ssize_t>(h & <uint64_t>mask)
        while True:
            e = self.map[i]
            if e == MAP_EMPTY or e == MAP_DELETED:
                if e == MAP_EMPTY:
                    self.map_used += 1
                self.map[i] = ((h >> 32) << 32) | <uint64_t>(slot + 2)
                self.map_live += 1
                return 0
            i = (i + 1) & mask

    cdef void map_delete(self, Py_ssize_t slot) noexcept:
        cdef Slot* s = self.slot_ptr(slot)
        cdef uint64_t h = fc_mix(id_hash(<object>s.core.group_id),
                                 id_hash(<object>s.member_id))
        cdef uint64_t want = ((h >> 32) << 32) | <uint64_t>(slot + 2), e
        cdef Py_ssize_t mask = self.map_cap - 1, i = <Py_ssize_t>(h & <uint64_t>mask)
        while True:
            e = self.map[i]
            if e == MAP_EMPTY:
                return                       # not there (never inserted)
            if e == want:
                self.map[i] = MAP_DELETED
                self.map_live -= 1
                return
            i = (i + 1) & mask

    cdef int map_resize(self, Py_ssize_t cap) except -1:
        cdef uint64_t* old = self.map
        cdef Py_ssize_t old_cap = self.map_cap, j, i, mask = cap - 1
        cdef uint64_t e, h
        cdef Slot* s
        cdef uint64_t* fresh = <uint64_t*>PyMem_RawCalloc(cap, sizeof(uint64_t))
        if fresh is NULL:
            raise MemoryError()
        for j in range(old_cap):
            e = old[j]
            if e == MAP_EMPTY or e == MAP_DELETED:
                continue
            s = self.slot_ptr(<Py_ssize_t><uint32_t>e - 2)
            h = fc_mix(id_hash(<object>s.core.group_id), id_hash(<object>s.member_id))
            i = <Py_ssize_t>(h & <uint64_t>mask)
            while fresh[i] != MAP_EMPTY:
                i = (i + 1) & mask
            fresh[i] = e
        self.map = fresh
        self.map_cap = cap
        self.map_used = self.map_live
        PyMem_RawFree(old)
        return 0

    cdef int bind_member(self, Py_ssize_t slot, object member_id) except -1:
        """The slot's member has joined under `member_id`: visible to heartbeats."""
        cdef Slot* s = self.slot_ptr(slot)
        self.unbind_member(slot)
        Py_INCREF(member_id)
        s.member_id = <PyObject*>member_id
        self.map_insert(slot)
        (<GroupRecord>self.slot_recs[slot]).slots[member_id] = slot
        return 0

    cdef void unbind_member(self, Py_ssize_t slot) noexcept:
        cdef Slot* s = self.slot_ptr(slot)
        cdef PyObject* mid = s.member_id
        if mid is NULL:
            return
        self.map_delete(slot)
        rec = <GroupRecord>self.slot_recs[slot]
        if not s.consumer and rec.slots.get(<object>mid) == slot:
            del rec.slots[<object>mid]
        s.member_id = NULL
        Py_DECREF(<object>mid)

    cdef GroupCore* new_core(self) except NULL:
        cdef GroupCore* core
        cdef pthread_mutexattr_t attr
        if self.free_cores:
            return <GroupCore*><uintptr_t>self.free_cores.pop()
        core = <GroupCore*>PyMem_RawCalloc(1, sizeof(GroupCore))
        if core is NULL:
            raise MemoryError()
        pthread_mutexattr_init(&attr)
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE)
        pthread_mutex_init(&core.mu, &attr)
        pthread_mutexattr_destroy(&attr)
        return core

    # -- shards and groups ------------------------------------------------------------
    def set_shard_state(self, int shard, int state):
        if not 0 <= shard < self.num_shards:
            raise ValueError(f"shard {shard} is outside [0, {self.num_shards})")
        self.shards[shard] = state

    cpdef int shard_state(self, int shard) except -1:
        if not 0 <= shard < self.num_shards:
            raise ValueError(f"shard {shard} is outside [0, {self.num_shards})")
        return self.shards[shard]

    cpdef object make_result(self, type cls, tuple values):
        """A result NamedTuple (fastcoord.core.results) from its field values, as
        tuple.__new__(cls, values) makes it: the group logic's answers, built in C."""
        return fc_tuple_new(cls, values)

    cpdef unsigned long current_thread(self):
        """The calling thread's identifier (threading.get_ident's), by a C call."""
        return PyThread_get_thread_ident()

    def new_group(self, str group_id, int shard):
        rec = GroupRecord(self, group_id, shard)
        self.groups[group_id] = rec
        return rec

    def drop_group(self, group_id):
        self.groups.pop(group_id, None)

    # -- slots -----------------------------------------------------------------------------
    def alloc(self, GroupRecord rec, str member_id, int session_timeout_ms, int64_t deadline_ms,
              bint pending):
        """A slot for a new member (a pending one is not visible to heartbeats), armed at
        `deadline_ms`. The caller holds `rec`'s lock."""
        cdef Py_ssize_t slot
        cdef Slot* s
        if self.free_slots:
            slot = self.free_slots.pop()
        else:
            slot = self.nslots
            if (slot >> SLOT_CHUNK_BITS) >= self.nchunks:
                if self.nchunks >= MAX_CHUNKS:
                    raise MemoryError("member table is full")
                if self.nchunks == self.chunks_cap:
                    self.grow_chunk_index()
                self.chunks[self.nchunks] = <Slot*>PyMem_RawCalloc(SLOT_CHUNK, sizeof(Slot))
                if self.chunks[self.nchunks] is NULL:
                    raise MemoryError()
                self.nchunks += 1
            self.nslots += 1
            self.slot_recs.append(None)
        s = self.slot_ptr(slot)
        s.core = rec.core
        s.deadline = deadline_ms
        s.armed = -1
        s.session_timeout = session_timeout_ms
        s.member_id = NULL
        s.consumer = 0
        s.cepoch = 0
        self.slot_recs[slot] = rec
        if not pending:
            self.bind_member(slot, member_id)
        self.arm(slot, s, deadline_ms)
        return slot

    def promote(self, Py_ssize_t slot, str member_id, int session_timeout_ms,
                int64_t deadline_ms):
        """A pending member joined: make it visible and give it a new deadline."""
        cdef Slot* s = self.slot_ptr(slot)
        self.bind_member(slot, member_id)
        s.session_timeout = session_timeout_ms
        self.refresh(slot, s, deadline_ms)

    def free(self, Py_ssize_t slot, member_id=None):
        cdef Slot* s
        if slot < 0 or slot >= self.nslots:
            return
        s = self.slot_ptr(slot)
        if s.core is NULL:
            return
        self.unbind_member(slot)
        s.armed = -1                         # its wheel entry, if any, is now stale
        s.core = NULL
        s.gen = (s.gen + 1) & 0x7FFFFFFF
        s.consumer = 0
        s.cepoch = 0
        self.slot_recs[slot] = None
        self.consumer_clear(slot)
        self.free_slots.append(slot)

    def rename(self, Py_ssize_t slot, str old_id, str new_id):
        """The slot's member takes a new id (a static member's replacement or its undoing):
        a new incarnation, so the slot's generation moves on as when it is freed, and a
        handle taken for the old id misses it, answering what a heartbeat by that id
        answers (UNKNOWN_MEMBER_ID). The slot's wheel entry is re-armed under the new
        generation (the one it had is now stale). The caller holds the group's lock,
        under which the batch re-checks the generation."""
        cdef Slot* s = self.slot_ptr(slot)
        self.bind_member(slot, new_id)
        s.gen = (s.gen + 1) & 0x7FFFFFFF
        self.arm(slot, s, s.deadline)

    cpdef set_session_timeout(self, Py_ssize_t slot, int session_timeout_ms):
        self.slot_ptr(slot).session_timeout = session_timeout_ms

    cpdef touch(self, Py_ssize_t slot):
        cdef Slot* s = self.slot_ptr(slot)
        self.refresh(slot, s, self.now() + s.session_timeout)

    def set_deadline(self, Py_ssize_t slot, int64_t deadline_ms):
        self.refresh(slot, self.slot_ptr(slot), deadline_ms)

    def deadline(self, Py_ssize_t slot):
        return self.slot_ptr(slot).deadline

    cdef inline int refresh(self, Py_ssize_t slot, Slot* s, int64_t deadline) except -1:
        s.deadline = deadline
        if s.armed < 0 or deadline < s.armed:
            # Rare: not armed, or a shorter timeout (the lazy re-check would come too late).
            # An older entry stays in the wheel and is ignored when it fires.
            self.arm(slot, s, deadline)
        return 0

    cdef int arm(self, Py_ssize_t slot, Slot* s, int64_t deadline) except -1:
        s.armed = deadline
        self.timer.c_schedule_tag_at(deadline, self, <int64_t>slot | (<int64_t>s.gen << 32))
        return 0

    cdef int on_timer(self, int64_t tag, int64_t deadline_ms) except -1:
        cdef Py_ssize_t slot = <Py_ssize_t><uint32_t>tag
        cdef uint32_t gen = <uint32_t>(tag >> 32)
        cdef Slot* s
        cdef GroupCore* core
        if slot >= self.nslots:
            return 0
        s = self.slot_ptr(slot)
        core = s.core
        if core is NULL or s.gen != gen or s.armed != deadline_ms:
            return 0                         # a stale entry: freed or re-armed since
        lock_with_gil(core)
        try:
            if s.core is not core or s.gen != gen or s.armed != deadline_ms:
                return 0
            if s.deadline > deadline_ms:        # heartbeats moved it: check again later
                self.arm(slot, s, s.deadline)
                return 0
            s.armed = -1
        finally:
            pthread_mutex_unlock(&core.mu)
        self.on_deadline(slot)
        return 0

    # -- reads ------------------------------------------------------------------------------
    cpdef object group_version(self, object group_id):
        """GroupCoordinator.group_version, bound to it (and a C call for a compiled
        replay's observations): the version of a group the group logic holds, in an
        active shard of an active table, read in C (a replay asks after every join and
        sync); every other case, and any other argument, goes to `version_fallback`,
        the coordinator's checked path."""
        cdef PyObject* rec_p
        cdef GroupRecord rec
        if type(group_id) is str and self.active:
            rec_p = PyDict_GetItem(self.groups, group_id)
            if rec_p is not NULL:
                rec = <GroupRecord>rec_p
                if rec.group is not None and self.shards[rec.core.shard] == SHARD_ACTIVE:
                    return rec.group.version
        return self.version_fallback(group_id)

    # -- consumer-protocol members (KIP-848) ------------------------------------------------
    # A consumer member's slot is in the map under its (group id, member id), marked
    # `consumer`: the classic paths (heartbeat, heartbeat_batch, member_handle,
    # commit_handle) never see it, as Kafka answers a classic Heartbeat naming a
    # consumer member UNKNOWN_MEMBER_ID. The slow path (core/consumer.py) publishes
    # what consumer_heartbeat may answer alone: each member's settled epoch and cached
    # answer, and its group's quiet point (GroupCore.cquiet, ctopics).
    def consumer_bind(self, Py_ssize_t slot, str member_id):
        """The consumer member of `slot` (allocated pending) is findable by consumer
        heartbeats under `member_id` (a static member's replacement re-binds its slot to
        the new id), unsettled. The caller holds the group's lock."""
        cdef Slot* s = self.slot_ptr(slot)
        cdef PyObject* old = s.member_id
        self.consumer_unsettle(slot)
        if old is not NULL:
            self.map_delete(slot)
            s.member_id = NULL
            Py_DECREF(<object>old)
        s.consumer = 1
        Py_INCREF(member_id)
        s.member_id = <PyObject*>member_id
        self.map_insert(slot)
        if old is not NULL:
            # A new incarnation, as rename's: a handle taken for the old id misses it,
            # and the wheel entry moves to the new generation
            s.gen = (s.gen + 1) & 0x7FFFFFFF
            self.arm(slot, s, s.deadline)

    def consumer_settle(self, Py_ssize_t slot, int32_t member_epoch, result, str client_id,
                        str client_host):
        """The member's steady heartbeat at `member_epoch` (> 0), from `client_id` at
        `client_host`, is answered `result` while its group is quiet at that epoch. The
        caller holds the group's lock."""
        cdef Py_ssize_t chunk = slot >> SLOT_CHUNK_BITS
        cdef CSlot* c
        cdef int32_t interval = result.heartbeat_interval_ms   # (the wire's answer needs it)
        if member_epoch <= 0:
            raise ValueError(f"member_epoch must be > 0, got {member_epoch}")
        if self.cchunks[chunk] is NULL:
            self.cchunks[chunk] = <CSlot*>PyMem_RawCalloc(SLOT_CHUNK, sizeof(CSlot))
            if self.cchunks[chunk] is NULL:
                raise MemoryError()
        self.consumer_clear(slot)
        c = self.cslot_ptr(slot)
        Py_INCREF(result)
        Py_INCREF(client_id)
        Py_INCREF(client_host)
        c.result = <PyObject*>result
        c.client_id = <PyObject*>client_id
        c.client_host = <PyObject*>client_host
        c.interval = interval
        self.slot_ptr(slot).cepoch = member_epoch

    def consumer_unsettle(self, Py_ssize_t slot):
        """The member's next heartbeat runs the slow path. The caller holds the lock."""
        self.slot_ptr(slot).cepoch = 0
        self.consumer_clear(slot)

    def consumer_quiet(self, GroupRecord rec, int32_t group_epoch, int64_t topics_version):
        """The group is quiet at `group_epoch` (0: not quiet) with its metadata computed
        from `topics_version`. The caller holds the group's lock."""
        rec.core.cquiet = group_epoch
        rec.core.ctopics = topics_version

    def consumer_topics(self, int64_t topics_version):
        """set_topics moved the topics version: no group is quiet at the old one."""
        self.ctopics = topics_version

    cdef object c_consumer_steady(self, object group_id, object member_id, object member_epoch,
                                  object client_id, object client_host):
        """The cached answer of a settled member's steady heartbeat (its session
        refreshed), or None, having changed nothing: the slow path's to answer."""
        if not (type(client_id) is str and type(client_host) is str):
            return None
        return self.c_steady(group_id, member_id, member_epoch, client_id, client_host)

    cdef inline object c_steady(self, object group_id, object member_id, object member_epoch,
                                str client_id, str client_host):
        """c_consumer_steady once the client id and host are known to be str."""
        cdef Py_ssize_t slot
        cdef GroupCore* core
        cdef uint32_t gen
        cdef CSlot* c
        cdef long epoch
        cdef int overflow
        if not (type(group_id) is str and type(member_id) is str and type(member_epoch) is int):
            return None
        epoch = PyLong_AsLongAndOverflow(member_epoch, &overflow)
        if overflow or epoch <= 0 or epoch > 0x7FFFFFFF:
            return None
        slot = _steady_slot(self, <str>group_id, <str>member_id, <int32_t>epoch, &core, &gen,
                            True)
        if slot < 0:
            return None
        lock_with_gil(core)
        try:
            c = _steady_locked(self, slot, core, gen, <int32_t>epoch, client_id, client_host)
            return None if c is NULL else <object>c.result
        finally:
            pthread_mutex_unlock(&core.mu)

    cdef int32_t c_wire_steady(self, str group_id, str member_id, int32_t epoch,
                               str client_id, str client_host) except -2:
        """c_steady for a server's wire path, which needs the answer's heartbeat interval
        alone (its member epoch is the request's): the interval, or -1 having changed
        nothing. The cached answer object is not touched."""
        cdef Py_ssize_t slot
        cdef GroupCore* core
        cdef uint32_t gen
        cdef CSlot* c
        if epoch <= 0:
            return -1
        slot = _steady_slot(self, group_id, member_id, epoch, &core, &gen, False)
        if slot < 0:
            return -1
        lock_with_gil(core)
        try:
            c = _steady_locked(self, slot, core, gen, epoch, client_id, client_host)
            return -1 if c is NULL else c.interval
        finally:
            pthread_mutex_unlock(&core.mu)

    cdef inline int c_answer(self, object callback, object result) except -1:
        """callback(result) as the coordinator runs callbacks: what it raises is logged."""
        if fc_call1(callback, result) < 0:
            self.c_callback_raised()
        return 0

    cdef int c_callback_raised(self) except -1:
        """What a callback raised, pending: an Exception is logged (the group state is
        unaffected), anything else (KeyboardInterrupt, SystemExit) propagates."""
        try:
            fc_pending()
        except Exception:
            _coord_log.exception("a coordinator callback raised; the group state is unaffected")
        return 0

    @cython.binding(False)  # a plain method descriptor: CPython's call fast paths
    def consumer_heartbeat_general(self, group_id, member_id, member_epoch, *, instance_id=None,
                                   rack_id=None, rebalance_timeout_ms=-1,
                                   subscribed_topic_names=None, subscribed_topic_regex=None,
                                   server_assignor=None, owned_partitions=None, client_id="",
                                   client_host="", callback, topic_filter=None):
        """consumer_heartbeat with any arguments (its entry hands here every call but the
        plain steady one): a settled member's steady heartbeat (every optional field
        None, rebalance_timeout_ms -1, at its settled epoch, in an active shard) is
        answered here, its session refreshed and `callback` given the slow path's
        answer, cached; every other case, and any other argument, goes to
        `consumer_fallback` (every argument, in order), the coordinator's checked path.
        (`topic_filter` matters only where regexes are resolved: never in a steady
        answer, which a group with regexes to resolve does not get.)"""
        cdef object result = None
        if (instance_id is None and rack_id is None and subscribed_topic_names is None
                and subscribed_topic_regex is None and server_assignor is None
                and owned_partitions is None and type(rebalance_timeout_ms) is int
                and rebalance_timeout_ms == -1 and callable(callback)
                and (topic_filter is None or callable(topic_filter))):
            result = self.c_consumer_steady(group_id, member_id, member_epoch, client_id,
                                            client_host)
        if result is None:
            self.consumer_fallback(group_id, member_id, member_epoch, instance_id, rack_id,
                                   rebalance_timeout_ms, subscribed_topic_names,
                                   subscribed_topic_regex, server_assignor, owned_partitions,
                                   client_id, client_host, callback, topic_filter)
            return
        self.c_answer(callback, result)

    def consumer_steady(self, group_id, member_id, member_epoch, client_id, client_host):
        """consumer_heartbeat's fast case alone, for a server's wire path: the settled
        member's cached answer (its session refreshed), or None, having changed
        nothing (the server's general path then answers)."""
        return self.c_consumer_steady(group_id, member_id, member_epoch, client_id, client_host)

    # -- consumer members by handle ---------------------------------------------------------
    def consumer_member_handle(self, group_id, member_id):
        """The consumer member's handle for consumer_heartbeat_batch, or -1 if unknown."""
        cdef Py_ssize_t slot
        if type(group_id) is not str:
            raise TypeError(f"group_id must be a str, got {type(group_id).__name__}")
        if type(member_id) is not str:
            raise TypeError(f"member_id must be a str, got {type(member_id).__name__}")
        slot = self.map_find(group_id, member_id, 1)
        return -1 if slot < 0 else self.handle(slot)

    def consumer_heartbeat_batch(self, handles, member_epochs):
        """consumer_heartbeat_batch(handles: int64[n], member_epochs: int32[n]) -> bool[n]

        One steady heartbeat per element (consumer_heartbeat with every optional field
        None, from the client id and host the member last used): True where the member
        was settled at that epoch in a quiet group, so the answer is its cached one and
        its session is refreshed; False where nothing was done and the heartbeat needs
        consumer_group_heartbeat."""
        check_batch(handles, member_epochs, "member_epochs")    # the twins' checks
        cdef cnp.ndarray h_arr = handles
        cdef cnp.ndarray e_arr = member_epochs
        cdef Py_ssize_t n = cnp.PyArray_DIM(h_arr, 0)
        cdef cnp.ndarray out = np.zeros(n, dtype=np.bool_)
        cdef int64_t* hp = <int64_t*>cnp.PyArray_DATA(h_arr)
        cdef int32_t* ep = <int32_t*>cnp.PyArray_DATA(e_arr)
        cdef uint8_t* op = <uint8_t*>cnp.PyArray_DATA(out)
        cdef int64_t now = self.now()
        cdef Py_ssize_t nrearm = 0, i
        if n == 0:
            return out
        with nogil:
            nrearm = self._consumer_batch(hp, ep, op, n, now)
        if nrearm:
            for i in range(n):          # rare: wheel entries to move, with the GIL
                if op[i] & 2:
                    op[i] = 1
                    self._rearm_if_needed(<Py_ssize_t><uint32_t>hp[i])
        return out

    def consumer_heartbeat_handle_general(self, handle, member_epoch):
        """consumer_heartbeat_handle(handle: int, member_epoch: int) -> result | None

        consumer_heartbeat_batch for one member: its cached answer (the
        ConsumerGroupHeartbeatResult consumer_group_heartbeat would give), or None,
        having changed nothing. (The entry hands here every call it does not read
        itself: the twins' argument errors are raised here.)"""
        cdef int64_t h
        cdef int32_t e
        if type(handle) is not int or type(member_epoch) is not int:
            check_handle_args(handle, member_epoch, "member_epoch")
        try:
            h = handle
            e = member_epoch
        except OverflowError:
            check_handle_args(handle, member_epoch, "member_epoch")
            raise
        return self.c_consumer_handle(h, e)

    cdef object c_consumer_handle(self, int64_t h, int32_t epoch):
        """One steady heartbeat by handle: the member's cached answer, its session
        refreshed, or None, having changed nothing. Random handles make this
        memory-bound, so the lines it needs are asked for early and together: the
        CSlot with the slot, then the cached answer (through the CSlot, read without
        the lock only to ask for it) with the group core; everything is re-read under
        the group's lock, which is taken once."""
        cdef Py_ssize_t slot = <Py_ssize_t><uint32_t>h     # low 32 bits
        cdef uint32_t gen = <uint32_t>(h >> 32)
        cdef Slot* s
        cdef CSlot* c
        cdef GroupCore* core
        cdef PyObject* cached
        if h < 0 or slot >= self.nslots or epoch <= 0 or not self.active:
            return None
        c = self.cslot_ptr(slot)
        if c is NULL:
            return None
        fc_prefetch(c)
        s = self.slot_ptr(slot)
        core = s.core
        if core is NULL or s.gen != gen or not s.consumer or s.cepoch != epoch:
            return None
        cached = c.result
        if cached is NULL:
            return None
        fc_prefetch(cached)     # its reference count is written on the way out
        # (the core's fields are read before the lock too, so that every line the
        # call needs is on its way before the lock's atomic waits for them)
        if self.shards[core.shard] != SHARD_ACTIVE or core.cquiet != epoch \
                or core.ctopics != self.ctopics:
            return None
        lock_with_gil(core)
        try:
            # Re-checked under the group's lock, under which the slow path publishes.
            if (s.core is not core or s.gen != gen or not s.consumer or s.cepoch != epoch
                    or core.cquiet != epoch or core.ctopics != self.ctopics
                    or c.result is NULL):
                return None
            self.refresh(slot, s, self.now() + s.session_timeout)
            return <object>c.result
        finally:
            pthread_mutex_unlock(&core.mu)

    cdef inline void _prefetch_ahead(self, int64_t* hp, Py_ssize_t i, Py_ssize_t n,
                                     bint cslots) noexcept nogil:
        """A batch loop at element i of the n handles `hp` asks the cache for what later
        elements read: random handles make the loop memory-bound, so the loads start
        early (the slot, and its CSlot for consumer heartbeats, PREFETCH_SLOT ahead; the
        group core, through a slot loaded by then, PREFETCH_CORE ahead)."""
        cdef int64_t ahead
        cdef GroupCore* core
        cdef Py_ssize_t nslots = self.nslots
        if i + PREFETCH_SLOT < n:
            ahead = hp[i + PREFETCH_SLOT]
            if ahead >= 0 and <Py_ssize_t><uint32_t>ahead < nslots:
                fc_prefetch(self.slot_ptr(<Py_ssize_t><uint32_t>ahead))
                if cslots:
                    fc_prefetch(self.cslot_ptr(<Py_ssize_t><uint32_t>ahead))
        if i + PREFETCH_CORE < n:
            ahead = hp[i + PREFETCH_CORE]
            if ahead >= 0 and <Py_ssize_t><uint32_t>ahead < nslots:
                core = self.slot_ptr(<Py_ssize_t><uint32_t>ahead).core
                if core is not NULL:
                    fc_prefetch(core)

    cdef Py_ssize_t _consumer_batch(self, int64_t* hp, int32_t* ep, uint8_t* op, Py_ssize_t n,
                                    int64_t now) noexcept nogil:
        """The steady consumer heartbeats of `hp` at epochs `ep`: op[i] 1 when answered,
        1 | 2 when answered and its wheel entry must move (the caller's, with the GIL),
        0 when left alone. Returns how many need the wheel."""
        cdef GroupCore* held = NULL
        cdef GroupCore* core
        cdef Slot* s
        cdef CSlot* c
        cdef int64_t h, deadline
        cdef int32_t epoch
        cdef Py_ssize_t i, slot, nrearm = 0, nslots = self.nslots
        cdef uint32_t gen
        cdef int64_t topics = self.ctopics
        if not self.active:
            return 0
        for i in range(n):
            self._prefetch_ahead(hp, i, n, True)
            op[i] = 0
            h = hp[i]
            epoch = ep[i]
            slot = <Py_ssize_t><uint32_t>h     # low 32 bits
            gen = <uint32_t>(h >> 32)
            if h < 0 or slot >= nslots or epoch <= 0:
                continue
            s = self.slot_ptr(slot)
            core = s.core
            if core is NULL or s.gen != gen or not s.consumer \
                    or self.shards[core.shard] != SHARD_ACTIVE:
                continue
            if core is not held:
                if held is not NULL:
                    pthread_mutex_unlock(&held.mu)
                pthread_mutex_lock(&core.mu)
                held = core
            # Re-checked under the group's lock, under which the slow path publishes.
            if (s.core is not core or s.gen != gen or not s.consumer or s.cepoch != epoch
                    or core.cquiet != epoch or core.ctopics != topics):
                continue
            c = self.cslot_ptr(slot)
            if c is NULL or c.result is NULL:
                continue
            deadline = now + s.session_timeout
            s.deadline = deadline
            op[i] = 1
            if s.armed < 0 or deadline < s.armed:
                op[i] = 3                        # needs the wheel: done with the GIL
                nrearm += 1
        if held is not NULL:
            pthread_mutex_unlock(&held.mu)
        return nrearm

    # -- handles ----------------------------------------------------------------------------
    def handle(self, Py_ssize_t slot):
        return <int64_t>slot | (<int64_t>self.slot_ptr(slot).gen << 32)

    def member_handle(self, group_id, member_id):
        """The member's handle for heartbeat_batch, or -1 if unknown."""
        cdef Py_ssize_t slot
        if type(group_id) is not str:
            raise TypeError(f"group_id must be a str, got {type(group_id).__name__}")
        if type(member_id) is not str:
            raise TypeError(f"member_id must be a str, got {type(member_id).__name__}")
        slot = self.map_find(group_id, member_id, 0)
        return -1 if slot < 0 else self.handle(slot)

    # -- the hot path -----------------------------------------------------------------------------
    @cython.binding(False)  # a plain method descriptor: CPython's call fast paths
    def heartbeat(self, group_id, member_id, generation_id, group_instance_id=None):
        """heartbeat(group_id, member_id, generation_id, group_instance_id=None) -> Errors"""
        cdef Py_ssize_t slot
        cdef Slot* s
        cdef GroupCore* core
        cdef int shard_state, state
        cdef long gen
        cdef bint gen_fits = True
        if type(group_id) is not str:
            if group_id is None:                 # a missing group id, as Kafka's null
                return E_INVALID_GROUP
            raise TypeError(f"group_id must be a str or None, got {type(group_id).__name__}")
        if type(member_id) is not str:
            raise TypeError(f"member_id must be a str, got {type(member_id).__name__}")
        if type(generation_id) is not int:
            raise TypeError(f"generation_id must be an int, got {type(generation_id).__name__}")
        if group_instance_id is not None and type(group_instance_id) is not str:
            raise TypeError("group_instance_id must be a str or None, "
                            f"got {type(group_instance_id).__name__}")
        if not self.active or len(<str>group_id) == 0:
            return self._heartbeat_by_dict(group_id, member_id, generation_id, group_instance_id)
        slot = self.map_find(group_id, member_id, 0)
        if slot < 0:        # unknown group or member, or a pending member: the full path
            return self._heartbeat_by_dict(group_id, member_id, generation_id, group_instance_id)
        s = self.slot_ptr(slot)
        core = s.core
        shard_state = self.shards[core.shard]
        if shard_state != SHARD_ACTIVE:
            return E_NONE if shard_state == SHARD_LOADING else E_NOT_COORDINATOR
        try:
            gen = generation_id
        except OverflowError:       # beyond a long: no group's generation
            gen_fits = False
        lock_with_gil(core)
        try:
            if s.core is not core or s.member_id is NULL or s.consumer:
                # Freed while we waited for the lock: answer as if it were never found.
                pthread_mutex_unlock(&core.mu)
                core = NULL
                return self._heartbeat_by_dict(group_id, member_id, generation_id,
                                               group_instance_id)
            state = core.state
            if state == DEAD:
                return E_NOT_AVAILABLE
            if group_instance_id is not None:
                error = static_error(<GroupRecord>self.slot_recs[slot], member_id,
                                     group_instance_id)
                if error is not None:
                    return error
            if not gen_fits or gen != core.generation:
                return E_ILLEGAL_GENERATION
            if state == EMPTY:
                return E_UNKNOWN
            self.refresh(slot, s, self.now() + s.session_timeout)
            return E_REBALANCING if state == PR else E_NONE
        finally:
            if core is not NULL:
                pthread_mutex_unlock(&core.mu)

    def _heartbeat_by_dict(self, group_id, member_id, generation_id, group_instance_id):
        """The full heartbeat path through the group and member dicts (every case the map
        does not answer: unknown group or member, pending member)."""
        cdef PyObject* rec_p
        cdef PyObject* slot_p
        cdef GroupRecord rec
        cdef GroupCore* core
        cdef Slot* s
        cdef Py_ssize_t slot
        cdef int shard_state, state
        cdef long gen
        cdef bint gen_fits = True
        if len(<str>group_id) == 0:
            return E_INVALID_GROUP
        if not self.active:
            return E_NOT_AVAILABLE
        rec_p = PyDict_GetItem(self.groups, group_id)
        if rec_p is NULL:
            shard_state = self.shards[shard_for(group_id, self.num_shards)]
        else:
            shard_state = self.shards[(<GroupRecord>rec_p).core.shard]
        if shard_state != SHARD_ACTIVE:
            return E_NONE if shard_state == SHARD_LOADING else E_NOT_COORDINATOR
        if rec_p is NULL:
            return E_UNKNOWN
        rec = <GroupRecord>rec_p
        # -- mixed groups: a consumer group's classic members are the group logic's (the
        # map never holds them, so this is off the classic hot path) --
        if rec.group is not None and rec.group.consumer is not None \
                and self.mixed_heartbeat is not None:
            return self.mixed_heartbeat(group_id, member_id, generation_id, group_instance_id)
        # -- end mixed groups --
        if group_instance_id is not None and rec.group is None:
            return E_UNKNOWN        # (a record the group logic has not yet given its group)
        core = rec.core
        try:
            gen = generation_id
        except OverflowError:       # beyond a long: no group's generation
            gen_fits = False
        lock_with_gil(core)
        try:
            state = core.state
            if state == DEAD:
                return E_NOT_AVAILABLE
            if group_instance_id is not None:
                error = static_error(rec, member_id, group_instance_id)
                if error is not None:
                    return error
            slot_p = PyDict_GetItem(rec.slots, member_id)
            if slot_p is NULL:
                return E_UNKNOWN
            if not gen_fits or gen != core.generation:
                return E_ILLEGAL_GENERATION
            if state == EMPTY:
                return E_UNKNOWN
            slot = <object>slot_p
            s = self.slot_ptr(slot)
            self.refresh(slot, s, self.now() + s.session_timeout)
            return E_REBALANCING if state == PR else E_NONE
        finally:
            pthread_mutex_unlock(&core.mu)

    def heartbeat_batch(self, handles, generation_ids):
        """heartbeat_batch(handles: int64[n], generation_ids: int32[n]) -> int16[n]"""
        cdef cnp.ndarray h_arr = _check_array("handles", handles, cnp.NPY_INT64)
        cdef cnp.ndarray g_arr = _check_array("generation_ids", generation_ids, cnp.NPY_INT32)
        cdef Py_ssize_t n = cnp.PyArray_DIM(h_arr, 0)
        if cnp.PyArray_DIM(g_arr, 0) != n:
            raise ValueError(f"handles and generation_ids differ in length "
                             f"({n} != {cnp.PyArray_DIM(g_arr, 0)})")
        cdef cnp.npy_intp dims[1]
        dims[0] = n
        cdef cnp.ndarray out = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT16, 0)
        cdef int64_t* hp = <int64_t*>cnp.PyArray_DATA(h_arr)
        cdef int32_t* gp = <int32_t*>cnp.PyArray_DATA(g_arr)
        cdef int16_t* op = <int16_t*>cnp.PyArray_DATA(out)
        cdef int64_t now = self.now()
        cdef Py_ssize_t nrearm = 0, i
        if n == 0:
            return out
        with nogil:
            nrearm = self._batch(hp, gp, op, n, now)
        if nrearm:
            # Rare: members whose wheel entry must move (not armed, or deadline earlier);
            # the loop flagged them in `out`. The wheel needs the GIL.
            for i in range(n):
                if op[i] & REARM_FLAG:
                    op[i] &= ~REARM_FLAG
                    self._rearm_if_needed(<Py_ssize_t><uint32_t>hp[i])
        return out

    @cython.binding(False)  # a plain method descriptor: CPython's call fast paths
    def heartbeat_handle(self, handle, generation_id):
        """heartbeat_handle(handle: int, generation_id: int) -> int

        heartbeat_batch for one member, without the arrays: the same checks and effect,
        the error code as an int."""
        cdef int64_t h
        cdef int32_t g
        _handle_args(handle, generation_id, &h, &g)
        return self.c_heartbeat_handle(h, g, self.now())

    cdef int c_heartbeat_handle(self, int64_t h, int32_t g, int64_t now) except -1:
        """heartbeat_handle for C callers, at `now`: the error code."""
        cdef int16_t o
        if self._batch(&h, &g, &o, 1, now):
            o &= ~REARM_FLAG
            self._rearm_if_needed(<Py_ssize_t><uint32_t>h)
        return o

    def commit_handle(self, handle, generation_id, instance_id=None):
        """commit_handle(handle: int, generation_id: int, instance_id: str | None = None) -> int

        The member table's part of an offset commit by a member's handle (a trace
        replay's commits): where GroupLogic.commit_offsets would accept the commit (shard
        active, the member joined, its generation the group's, the group Stable or
        PreparingRebalance, a static member's instance id its own), touch the member's
        session as that does and return its slot, for GroupLogic.commit_accepted to store
        the offsets. Otherwise -1, having changed nothing: commit_offsets decides."""
        cdef int64_t h
        cdef int32_t g
        _handle_args(handle, generation_id, &h, &g)
        if instance_id is not None and type(instance_id) is not str:
            raise TypeError(f"instance_id must be a str or None, got {type(instance_id).__name__}")
        return self.c_commit_handle(h, g, instance_id, self.now())

    cdef Py_ssize_t c_commit_handle(self, int64_t h, int32_t g, object instance_id,
                                    int64_t now) except -2:
        """commit_handle for C callers, at `now` (instance_id: a str or None)."""
        cdef Py_ssize_t slot = <Py_ssize_t><uint32_t>h
        cdef uint32_t gen = <uint32_t>(h >> 32)
        cdef Slot* s
        cdef GroupCore* core
        if h < 0 or slot >= self.nslots or not self.active:
            return -1
        s = self.slot_ptr(slot)
        core = s.core
        if core is NULL or s.gen != gen or self.shards[core.shard] != SHARD_ACTIVE:
            return -1
        lock_with_gil(core)
        try:
            # Re-checked under the group's lock, as the heartbeat does.
            if s.core is not core or s.gen != gen or s.member_id is NULL or s.consumer:
                return -1
            if g != core.generation or (core.state != STABLE and core.state != PR):
                return -1
            if instance_id is not None and static_error(
                    <GroupRecord>self.slot_recs[slot], <object>s.member_id,
                    instance_id) is not None:
                return -1       # commit_offsets' static check: the heartbeat's
            self.refresh(slot, s, now + s.session_timeout)
            return slot
        finally:
            pthread_mutex_unlock(&core.mu)

    cdef Py_ssize_t _batch(self, int64_t* hp, int32_t* gp, int16_t* op, Py_ssize_t n,
                           int64_t now) noexcept nogil:
        cdef GroupCore* held = NULL
        cdef GroupCore* core
        cdef Slot* s
        cdef int64_t h, deadline
        cdef Py_ssize_t i, slot, nrearm = 0
        cdef uint32_t gen
        cdef int state, shard_state
        cdef bint active = self.active
        for i in range(n):
            self._prefetch_ahead(hp, i, n, False)
            h = hp[i]
            slot = <Py_ssize_t><uint32_t>h     # low 32 bits
            gen = <uint32_t>(h >> 32)
            if h < 0 or slot >= self.nslots:
                op[i] = C_UNKNOWN
                continue
            s = self.slot_ptr(slot)
            core = s.core
            if core is NULL or s.gen != gen:
                op[i] = C_UNKNOWN
                continue
            if not active:
                op[i] = C_NOT_AVAILABLE
                continue
            shard_state = self.shards[core.shard]
            if shard_state != SHARD_ACTIVE:
                op[i] = C_NONE if shard_state == SHARD_LOADING else C_NOT_COORDINATOR
                continue
            if core is not held:
                if held is not NULL:
                    pthread_mutex_unlock(&held.mu)
                pthread_mutex_lock(&core.mu)
                held = core
            # Re-check under the group's lock: a slot is freed only under it.
            if s.core is not core or s.gen != gen:
                op[i] = C_UNKNOWN
                continue
            state = core.state
            if state == DEAD:
                op[i] = C_NOT_AVAILABLE
            elif s.member_id is NULL or s.consumer:     # pending, or not a classic member
                op[i] = C_UNKNOWN
            elif gp[i] != core.generation:
                op[i] = C_ILLEGAL_GENERATION
            elif state == EMPTY:
                op[i] = C_UNKNOWN
            else:
                deadline = now + s.session_timeout
                s.deadline = deadline
                op[i] = C_REBALANCING if state == PR else C_NONE
                if s.armed < 0 or deadline < s.armed:
                    op[i] |= REARM_FLAG          # needs the wheel: done with the GIL
                    nrearm += 1
        if held is not NULL:
            pthread_mutex_unlock(&held.mu)
        return nrearm

    cdef int _rearm_if_needed(self, Py_ssize_t slot) except -1:
        cdef Slot* s = self.slot_ptr(slot)
        cdef GroupCore* core = s.core
        if core is NULL:
            return 0
        lock_with_gil(core)
        try:
            if s.core is core and (s.armed < 0 or s.deadline < s.armed):
                self.arm(slot, s, s.deadline)
        finally:
            pthread_mutex_unlock(&core.mu)
        return 0

    def stats(self):
        return {"slots": self.nslots, "free": len(self.free_slots), "groups": len(self.groups),
                "slot_bytes": sizeof(Slot), "group_core_bytes": sizeof(GroupCore),
                "map_capacity": self.map_cap, "map_live": self.map_live,
                "map_bytes_per_member": (self.map_cap * sizeof(uint64_t)) / max(self.map_live, 1)}


cdef int _handle_args(object handle, object generation_id, int64_t* h, int32_t* g) except -1:
    """A handle and a generation id as C ints, or the twins' errors (check_handle_args)."""
    if type(handle) is not int or type(generation_id) is not int:
        check_handle_args(handle, generation_id)        # raises the twins' TypeError
    try:
        h[0] = handle
        g[0] = generation_id
    except OverflowError:
        check_handle_args(handle, generation_id)        # raises the twins' ValueError
        raise
    return 0


cdef cnp.ndarray _check_array(str name, arr, int typenum):
    if not cnp.PyArray_Check(arr):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(arr).__name__}")
    cdef cnp.ndarray a = <cnp.ndarray>arr
    if cnp.PyArray_TYPE(a) != typenum:
        want = "int64" if typenum == cnp.NPY_INT64 else "int32"
        raise TypeError(f"{name} must have dtype {want}, got {a.dtype}")
    if cnp.PyArray_NDIM(a) != 1:
        raise ValueError(f"{name} must be one-dimensional, got {cnp.PyArray_NDIM(a)} dimensions")
    if not cnp.PyArray_IS_C_CONTIGUOUS(a):
        raise ValueError(f"{name} must be C-contiguous")
    return a

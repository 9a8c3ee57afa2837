"""Hierarchical timing wheel, native core: the C-level API for other Cython modules.

Entries are 32-byte C structs in one growable pool (PyMem_Realloc; slots are
handed out from the free list, else from the never-used tail, which is not written
before then), linked into
circular doubly linked lists by int32 indices (bucket sentinels live in the same
pool), with a free list and a per-slot generation counter.  An entry id is
``slot | generation << 32``; a stale id never reaches a reused slot.

C-level API (call with the GIL held; none of them runs user code):

    cdef int64_t c_schedule_tag_at(self, int64_t deadline_ms, object sink, int64_t tag) except -1
    cdef int64_t c_schedule_at(self, int64_t deadline_ms, object fn) except -1
    cdef bint c_cancel_id(self, int64_t entry_id) noexcept
    cdef int c_schedule_tags(self, const int64_t[:] deadlines, const int64_t[:] tags,
                             object sink, int64_t[:] ids) except -1
    cdef Py_ssize_t c_cancel_ids(self, const int64_t[:] ids) except -1
    cdef int64_t c_current_ms(self) except? -1
    cdef int c_idle_through(self, int64_t now, int64_t min_delay) except -1

and advance_to's, which runs the callbacks due (the mutex released):

    cdef Py_ssize_t c_advance_to(self, int64_t target, bint step_clock) except -1

When a tag entry fires the timer calls ``sink.on_timer(tag, deadline_ms)``: a
C call when ``sink`` is a ``TimerSink`` (subclass it in Cython and override the
cdef method), else a Python method call.
"""
from libc.stdint cimport int32_t, int64_t
from cpython.object cimport PyObject

from fastcoord.core._native.mutex cimport (mutex_lock_with_gil, pthread_mutex_t,
                                          pthread_mutex_unlock)


cdef extern from *:
    """
    #ifdef Py_GIL_DISABLED
    #define FC_FREE_THREADED 1
    #else
    #define FC_FREE_THREADED 0
    #endif
    """
    # a free-threaded CPython build (PEP 703): a constant, so the C compiler drops the
    # branch it rules out
    const bint FC_FREE_THREADED


# threading.Lock.acquire's contract for such a mutex (timer.pyx): wait (timeout -1), wait
# at most `timeout` seconds, or only try (blocking False); whether it was taken.
cdef bint mutex_acquire(pthread_mutex_t* mu, bint blocking, double timeout) except -1

# kind of a pool slot
cdef enum:
    FC_KIND_FN = -1        # payload is a strong reference to a callable
    FC_KIND_SENTINEL = -2  # a bucket's (or the ready list's) list head
    FC_KIND_FREE = -3      # on the free list
    FC_KIND_DEAD = -4      # cancelled, still linked in its list: on the pending list
    # kind >= 0: a tag entry; kind is the index of its sink in the sink table

# prev of an entry that waits in the run (a whole-due bucket sorted by deadline);
# prev == -1: fired, cancelled, free or being moved; prev >= 0: linked in a list
cdef enum:
    FC_LINK_RUN = -2

# cancelled entries whose unlinking waits (see Timer._cancel_u)
cdef enum:
    FC_PEND_CAP = 256

ctypedef union fc_payload:
    PyObject* fn           # FC_KIND_FN
    int64_t tag            # tag entries

ctypedef struct fc_entry:  # 32 bytes
    int32_t prev
    int32_t next           # also the free-list link
    int32_t gen            # bumped on every free: stale ids never match
    int32_t kind
    int64_t deadline       # absolute ms
    fc_payload u

ctypedef struct fc_level:
    int64_t tick
    int64_t interval       # saturated at INT64_MAX for the topmost levels
    int64_t current        # relative to the timer's origin, multiple of tick

ctypedef struct fc_bucket:
    int64_t expiration     # relative; -1 when not in the heap
    int32_t sentinel       # pool index of the list head
    int32_t _pad

ctypedef struct fc_sortitem:
    int64_t deadline
    int32_t pos            # arrival position: keeps a sort stable
    int32_t idx


cdef class TimerSink:
    """Receives tag entries: override on_timer in a Cython subclass (C call),
    or define a Python ``on_timer(tag, deadline_ms)`` method in a Python subclass."""
    cdef int on_timer(self, int64_t tag, int64_t deadline_ms) except -1


cdef class Timer:
    cdef pthread_mutex_t _mtx
    cdef bint _mtx_ok
    cdef object _clock
    cdef bint _manual_clock         # exactly a ManualClock: its time read from _now
    cdef int64_t _tick
    cdef int32_t _size
    cdef int64_t _origin
    cdef int64_t _time
    cdef Py_ssize_t _count
    # entry pool
    cdef fc_entry* _pool
    cdef int32_t _cap
    cdef int32_t _hwm               # slots [0, _hwm) were ever handed out; the rest are raw
    cdef int32_t _free
    cdef int32_t _ready
    cdef int32_t _pend[FC_PEND_CAP]  # FC_KIND_DEAD entries, unlinked by _drain_u
    cdef int32_t _pend_n
    # wheel
    cdef fc_level* _levels
    cdef int32_t _nlevels
    cdef fc_bucket* _buckets
    cdef int32_t* _heap
    cdef int32_t _heap_n
    cdef int32_t _heap_cap
    cdef fc_sortitem* _batch
    cdef int32_t _batch_cap
    # the run: a whole-due bucket sorted by deadline, fired from _run[_run_pos]
    cdef fc_sortitem* _run
    cdef int32_t _run_cap
    cdef int32_t _run_pos
    cdef int32_t _run_n
    # sinks of tag entries
    cdef PyObject** _sink_obj
    cdef int64_t* _sink_live
    cdef char* _sink_native
    cdef int32_t _nsinks
    cdef int32_t _sink_cap
    cdef int32_t _sinks_registered
    cdef int32_t _sink_sweep_at
    cdef dict _sink_ids
    cdef PyObject* _last_sink
    cdef int32_t _last_sid
    # reaper
    cdef int64_t _wake_at
    cdef object _wake
    cdef object _thread
    cdef bint _stop

    # C-level API
    cdef int64_t c_schedule_tag_at(self, int64_t deadline_ms, object sink, int64_t tag) except -1
    cdef int64_t c_schedule_at(self, int64_t deadline_ms, object fn) except -1
    cdef bint c_cancel_id(self, int64_t entry_id) noexcept
    cdef int c_schedule_tags(self, const int64_t[:] deadlines, const int64_t[:] tags,
                             object sink, int64_t[:] ids) except -1
    cdef Py_ssize_t c_cancel_ids(self, const int64_t[:] ids) except -1
    cdef int64_t c_current_ms(self) except? -1
    cdef int c_idle_through(self, int64_t now, int64_t min_delay) except -1
    cdef int _step_manual_clock(self, int64_t t) except -1
    cdef Py_ssize_t c_advance_to(self, int64_t target, bint step_clock) except -1

    # internals (all "_u" helpers run with the mutex held)
    cdef int _add_u(self, int64_t deadline, int32_t kind, PyObject* fn, int64_t tag,
                    int64_t* eid) noexcept
    cdef int32_t _alloc_u(self) noexcept
    cdef int _grow_u(self, int64_t need) noexcept
    cdef int _add_level_u(self) noexcept
    cdef int _place_u(self, int32_t idx) noexcept
    cdef void _heap_push_u(self, int32_t bid) noexcept
    cdef int32_t _heap_pop_u(self) noexcept
    cdef void _advance_wheels_u(self, int64_t rel) noexcept
    cdef void _merge_ready_u(self, fc_sortitem* batch, int32_t n) noexcept
    cdef void _flush_u(self, int32_t bid) noexcept
    cdef int32_t _collect_u(self, int32_t bid, fc_sortitem** buf, int32_t* cap,
                            int32_t mark) noexcept
    cdef void _take_whole_u(self, int32_t bid) noexcept
    cdef int32_t _run_head_u(self) noexcept
    cdef int32_t _pop_due_u(self, int64_t target) noexcept
    cdef int32_t _sink_id_u(self, object sink, list garbage) except -2
    cdef bint _cancel_u(self, int64_t entry_id, PyObject** fn) noexcept
    cdef void _drain_u(self) noexcept
    cdef int32_t _lock_with_sink(self, object sink, list garbage) except -1
    cdef int64_t _next_deadline_u(self, bint* found) noexcept
    cdef bint _idle_through_u(self, int64_t target, int64_t min_delay) noexcept

    # The mutex guards the pool and wheel where threads run without a GIL. With a GIL it
    # is redundant: every section it guards runs C only, holding the GIL throughout (no
    # Python code, no GIL release, no allocation of a collected object, hence no
    # collection), so no other thread can interleave; there it is not taken, which
    # spares a lock and an unlock (about 60 instructions) per call.
    cdef inline void _acquire(self) noexcept:
        if FC_FREE_THREADED:
            mutex_lock_with_gil(&self._mtx)

    cdef inline void _release(self) noexcept:
        if FC_FREE_THREADED:
            pthread_mutex_unlock(&self._mtx)

    cdef inline void _unlink_u(self, int32_t idx) noexcept:
        cdef fc_entry* pool = self._pool
        cdef int32_t p = pool[idx].prev
        cdef int32_t n = pool[idx].next
        pool[p].next = n
        pool[n].prev = p
        pool[idx].prev = -1
        pool[idx].next = -1

    cdef inline void _link_before_u(self, int32_t node, int32_t idx) noexcept:
        cdef fc_entry* pool = self._pool
        cdef int32_t p = pool[node].prev
        pool[idx].prev = p
        pool[idx].next = node
        pool[p].next = idx
        pool[node].prev = idx

    cdef inline void _free_slot_u(self, int32_t idx) noexcept:
        cdef fc_entry* e = &self._pool[idx]
        e.kind = FC_KIND_FREE
        e.gen = (e.gen + 1) & 0x7FFFFFFF
        e.prev = -1
        e.next = self._free
        e.u.tag = 0
        self._free = idx


cdef class TimerHandle:
    cdef Timer _timer
    cdef int64_t _eid
    cdef int64_t _deadline


cdef class StepLock:
    cdef pthread_mutex_t _mu
    cdef bint _held                 # (release() of a lock not held is an error)

    cdef inline void c_acquire(self) noexcept:
        mutex_lock_with_gil(&self._mu)
        self._held = True

    cdef inline void c_release(self) noexcept:
        self._held = False
        pthread_mutex_unlock(&self._mu)


cdef class ManualStepper:
    cdef Timer timer
    cdef object clock               # the timer's ManualClock
    cdef StepLock step_lock         # the lock, when a StepLock: taken by C calls
    cdef object acquire, release    # else its methods, bound once
    cdef object after_fire
    cdef object fallback

    cdef object c_advance(self, int64_t step)

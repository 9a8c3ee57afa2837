"""Delayed operations and purgatory, native twin (see fastcoord/core/_pure/purgatory.py)."""
from libc.stdint cimport int64_t
from fastcoord.core._native.mutex cimport (mutex_lock_with_gil, pthread_mutex_destroy,
                                          pthread_mutex_init, pthread_mutex_t,
                                          pthread_mutex_unlock)

cdef class OperationLock:
    # A lock the purgatory takes by C calls when it is an operation's `lock` (any other
    # lock it takes by `with`). The purgatory knows nothing else of what it guards.
    cdef void c_acquire(self) noexcept      # blocks; waits with the GIL released
    cdef void c_release(self) noexcept


cdef class DelayedOperation:
    cdef int _completed          # 0/1, flipped once with an atomic compare-and-swap
    cdef int _checked            # 1 while a check of its first key tries it, 2 if completed then
    cdef int64_t _delay_ms
    cdef public object lock
    cdef Timer _ntimer           # native timer entry: (_ntimer, _eid)
    cdef int64_t _eid
    cdef object _handle          # entry of any other timer: its handle
    cdef object _owner
    cdef object _w_owner         # the first list it is on: (_w_owner, _w_key)
    cdef object _w_key
    cdef list _watches           # the others: [purgatory, key, ...]
    cdef object __weakref__

    cdef bint c_force_complete(self) except -1
    cdef bint _disarm(self) except -1
    cdef int _watch(self, object owner, object key) except -1
    cdef int _unwatch(self) except -1
    cdef int _arm(self, object timer, object owner) except -1


# How many watcher lists (and their locks) a purgatory has: a key's is hash(key) % STRIPES
cdef enum:
    STRIPES = 32


cdef class Purgatory:
    cdef readonly str name
    cdef readonly object timer
    cdef readonly int64_t purge_interval
    cdef pthread_mutex_t _stripe_mu[STRIPES]    # a watcher list's lock
    cdef list _maps                       # per stripe: key -> op, or list of ops
    cdef list _dirty                      # per stripe: keys whose list may hold a completed op
    cdef pthread_mutex_t _count_mu        # a purge's start and _purge_visits
    cdef int64_t _delayed                 # (atomic, as _estimated)
    cdef int64_t _estimated
    cdef int64_t _purge_visits
    cdef bint _purge_queued                # a purge is queued in the timer or running

    cdef int _add_delayed(self, int64_t n) except -1
    cdef bint _try_complete(self, object op) except -1
    cdef bint _watch_op(self, object op, list keys, object key0) except -1
    cdef int _check_op(self, object op, object key, Py_ssize_t* already, Py_ssize_t* now) except -1
    cdef Py_ssize_t _check_key(self, key) except -1
    cdef Py_ssize_t _purge_key(self, int i, key) except -1
    cdef Py_ssize_t _clean(self, int i, key, lst) except -1
    cdef int _completed_on(self, key) except -1
    cdef Py_ssize_t _maybe_purge(self) except -1

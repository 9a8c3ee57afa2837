"""Delayed operations and purgatory, native twin (same algorithm and protocol as
fastcoord/core/_pure/purgatory.py, which documents it).

Fast path: a native DelayedOperation on a native Timer puts itself in the timer
as the entry's callable (``op()`` runs its expiration), so arming creates no
handle object; any other combination goes through the Python-level protocol.

A watcher list of one operation is that operation itself, the value of its key in
the stripe's dict (a key's value: a list, of one or more operations, or an
operation, never a list); a second operation on the key makes it a list.
"""
cimport cython
from cpython.dict cimport PyDict_SetDefault
from libc.stdint cimport int64_t

import threading

from fastcoord.core._pure.purgatory import batch_keys as _purg_batch_keys
from fastcoord.core._pure.purgatory import batch_watch_args as _purg_batch_watch_args


cdef extern from "Python.h":
    # (public since 3.9: a vectorcall with one argument, no generic call path)
    object PyObject_CallOneArg(object callable, object arg)


cdef extern from *:
    """
    static inline int fc_cas_int(int *p, int expected, int desired) {
        return __atomic_compare_exchange_n(p, &expected, desired, 0,
                                           __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    static inline int fc_load_int(int *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    static inline int fc_xchg_int(int *p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
    static inline void fc_add_i64(int64_t *p, int64_t n) { __atomic_add_fetch(p, n, __ATOMIC_SEQ_CST); }
    static inline int64_t fc_load_i64(int64_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    static inline void fc_store_i64(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
    """
    bint fc_cas_int(int* p, int expected, int desired) nogil
    int fc_load_int(int* p) nogil
    int fc_xchg_int(int* p, int v) nogil
    void fc_add_i64(int64_t* p, int64_t n) nogil
    int64_t fc_load_i64(int64_t* p) nogil
    void fc_store_i64(int64_t* p, int64_t v) nogil


# threading's lock types (what threading.RLock() and threading.Lock() make) and their
# methods, unbound: an operation's lock of one of them is taken by calling these, with
# neither the bound methods nor the __exit__ arguments a `with` makes at every call
cdef object _purg_RLock = type(threading.RLock())
cdef object _purg_Lock = type(threading.Lock())
cdef object _purg_rlock_acquire = _purg_RLock.acquire
cdef object _purg_rlock_release = _purg_RLock.release
cdef object _purg_lock_acquire = _purg_Lock.acquire
cdef object _purg_lock_release = _purg_Lock.release


cdef inline bint _completed(object op) except -1:
    # op.is_completed: for a DelayedOperation (every op a purgatory arms) its flag
    if isinstance(op, DelayedOperation):
        return fc_load_int(&(<DelayedOperation>op)._completed) != 0
    return bool(op.is_completed)


cdef inline int _purg_completed_on(owner, key) except -1:
    # owner._fc_completed_on(key), by a C call for a native purgatory
    if type(owner) is Purgatory:
        return (<Purgatory>owner)._completed_on(key)
    owner._fc_completed_on(key)
    return 0


cdef inline bint _purg_purge_due(Purgatory p) noexcept:
    # more watched than in the timer by over purge_interval, and no purge queued
    return (fc_load_i64(&p._estimated) - fc_load_i64(&p._delayed) > p.purge_interval
            and not p._purge_queued)


cdef tuple _purg_watch_args(ops, keys_per_op):
    """_pure's batch_watch_args, checked in C when ops and keys_per_op are lists of
    native operations and non-empty lists of hashable keys (a broker's batch); copies,
    since the hooks may change the caller's lists."""
    cdef list op_list, key_lists
    cdef Py_ssize_t k, n
    if type(ops) is list and type(keys_per_op) is list:
        op_list = list(ops)
        key_lists = list(keys_per_op)
        n = len(op_list)
        if n == len(key_lists):
            for k in range(n):
                keys = key_lists[k]
                if (not isinstance(op_list[k], DelayedOperation) or type(keys) is not list
                        or not keys or not _purg_hashable(<list>keys)):
                    break
                key_lists[k] = list(keys)
            else:
                return op_list, key_lists
    return _purg_batch_watch_args(ops, keys_per_op)  # the general case, and its errors


cdef bint _purg_hashable(list keys) except -1:
    # every key hashes (False on the first that does not)
    for key in keys:
        try:
            hash(key)
        except TypeError:
            return False
    return True


cdef class OperationLock:
    """The base of locks the purgatory takes by C calls (subclasses define both)."""

    cdef void c_acquire(self) noexcept:
        pass

    cdef void c_release(self) noexcept:
        pass


cdef class DelayedOperation:
    """Subclass and override try_complete(), on_complete() and on_expiration()."""

    def __init__(self, delay_ms, lock=None):
        cdef int64_t d
        if type(delay_ms) is not int and (isinstance(delay_ms, bool)
                                          or not isinstance(delay_ms, int)):
            raise TypeError(f"delay_ms must be an int, got {type(delay_ms).__name__}")
        if (lock is not None and type(lock) is not _purg_RLock and type(lock) is not _purg_Lock
                and not (hasattr(lock, "acquire") and hasattr(lock, "release"))):
            raise TypeError(f"lock must be a lock (acquire/release), got {type(lock).__name__}")
        try:
            d = delay_ms
        except OverflowError:
            d = -(1 << 63)      # out of range below
        if d < -(1 << 62) or d >= (1 << 62):
            raise ValueError(f"delay_ms out of range: {delay_ms}")
        self._delay_ms = d
        self.lock = threading.RLock() if lock is None else lock
        self._completed = 0
        self._eid = -1

    def try_complete(self):
        """Check whether the operation can complete now; if so call force_complete()
        and return its result. Called with self.lock held."""
        raise NotImplementedError

    def on_complete(self):
        """Runs exactly once, in the caller of the winning force_complete()."""

    def on_expiration(self):
        """Runs after on_complete() when the operation completed by timing out."""

    @property
    def delay_ms(self):
        return self._delay_ms

    @property
    def is_completed(self):
        return fc_load_int(&self._completed) != 0

    cdef bint c_force_complete(self) except -1:
        if not fc_cas_int(&self._completed, 0, 1):
            return False
        self._unwatch()
        self._disarm()
        self.on_complete()
        return True

    def force_complete(self):
        """Complete the operation if nobody did yet: True for the one winner, which
        cancels the timer entry and runs on_complete()."""
        return self.c_force_complete()

    def run_expiration(self):
        """What the timer runs at the deadline (Kafka's run())."""
        owner = self._owner
        if owner is not None:
            if type(owner) is Purgatory:
                (<Purgatory>owner)._add_delayed(-1)
            else:
                owner._fc_delayed_add(-1)
        self._handle = None
        self._ntimer = None
        self._eid = -1
        if self.c_force_complete():
            self.on_expiration()

    def __call__(self):
        self.run_expiration()

    cdef int _watch(self, owner, key) except -1:
        # the first list in two fields (an op is on one list, in the common case: no
        # list object for it), the others in _watches
        if self._w_owner is None:
            self._w_owner = owner
            self._w_key = key
        elif self._watches is None:
            self._watches = [owner, key]
        else:
            self._watches.append(owner)
            self._watches.append(key)
        return 0

    def _fc_watch(self, owner, key):
        self._watch(owner, key)

    cdef int _unwatch(self) except -1:
        # (after _completed is set: a purgatory that lists the op after this read
        # sees the flag and marks its key itself)
        cdef list w = self._watches
        cdef Py_ssize_t i
        owner = self._w_owner
        if owner is None:
            return 0
        key = self._w_key
        self._w_owner = self._w_key = self._watches = None
        if not fc_cas_int(&self._checked, 1, 2):   # (else that check purges key next)
            _purg_completed_on(owner, key)
        if w is not None:
            for i in range(0, len(w), 2):
                _purg_completed_on(w[i], w[i + 1])
        return 0

    cdef bint _disarm(self) except -1:
        cdef bint done = False
        cdef Timer t = self._ntimer
        if t is not None:
            done = t.c_cancel_id(self._eid)
            if done:
                self._ntimer = None
        else:
            h = self._handle
            if h is not None and h.cancel():
                self._handle = None
                done = True
        if done:
            owner = self._owner
            if owner is not None:
                if type(owner) is Purgatory:
                    (<Purgatory>owner)._add_delayed(-1)
                else:
                    owner._fc_delayed_add(-1)
        return done

    def _fc_arm(self, timer, owner):
        self._arm(timer, owner)

    cdef int _arm(self, timer, owner) except -1:
        cdef Timer t
        if self._ntimer is not None or self._handle is not None:
            return 0
        self._owner = owner
        if type(owner) is Purgatory:
            (<Purgatory>owner)._add_delayed(1)
        else:
            owner._fc_delayed_add(1)
        if type(timer) is Timer:
            t = <Timer>timer
            self._eid = t.c_schedule_at(t.c_current_ms() + self._delay_ms, self)
            self._ntimer = t
        else:
            self._handle = timer.schedule(self._delay_ms, self.run_expiration)
        if fc_load_int(&self._completed):
            self._disarm()
        return 0

    def _fc_disarm(self):
        return self._disarm()

    def __repr__(self):
        return f"<{type(self).__name__} delay_ms={self._delay_ms} completed={bool(self._completed)}>"


cdef class Purgatory:
    """Operations watched on keys, expired by a timer (Kafka's DelayedOperationPurgatory)."""

    def __init__(self, name, timer, *, purge_interval=1000):
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        if not callable(getattr(timer, "schedule", None)):
            raise TypeError(f"timer must be a Timer, got {type(timer).__name__}")
        if isinstance(purge_interval, bool) or not isinstance(purge_interval, int):
            raise TypeError(f"purge_interval must be an int, got {type(purge_interval).__name__}")
        if purge_interval < 0:
            raise ValueError(f"purge_interval must be >= 0, got {purge_interval}")
        self.name = name
        self.timer = timer
        self.purge_interval = purge_interval
        self._maps = [{} for _ in range(STRIPES)]
        self._dirty = [set() for _ in range(STRIPES)]
        self._delayed = 0
        self._estimated = 0

    def __cinit__(self, *args, **kwargs):
        # The watcher lists' locks and the counters' (C mutexes: a `with` on a
        # threading.Lock looks up and calls __enter__ and __exit__ at every check of a
        # key)
        cdef int i
        for i in range(STRIPES):
            pthread_mutex_init(&self._stripe_mu[i], NULL)
        pthread_mutex_init(&self._count_mu, NULL)

    def __dealloc__(self):
        cdef int i
        for i in range(STRIPES):
            pthread_mutex_destroy(&self._stripe_mu[i])
        pthread_mutex_destroy(&self._count_mu)

    cdef int _add_delayed(self, int64_t n) except -1:
        fc_add_i64(&self._delayed, n)
        return 0

    def _fc_delayed_add(self, n):
        self._add_delayed(n)

    @property
    def delayed(self):
        """Operations of this purgatory whose expiry is in the timer."""
        return fc_load_i64(&self._delayed)

    @property
    def watched(self):
        """Total length of the watcher lists (a completed op may still be listed)."""
        cdef Py_ssize_t total = 0
        cdef int i
        cdef dict m
        for i in range(STRIPES):
            mutex_lock_with_gil(&self._stripe_mu[i])
            try:
                m = self._maps[i]
                for lst in m.values():
                    total += len(<list>lst) if type(lst) is list else 1
            finally:
                pthread_mutex_unlock(&self._stripe_mu[i])
        return total

    @property
    def purge_visits(self):
        """How many watcher lists the purges have visited so far."""
        return self._purge_visits

    def __len__(self):
        return self.watched

    def try_complete_else_watch(self, op, keys):
        """Try to complete op; else watch it on every key, try again, and if still
        not done arm its expiry. True when completed by this call."""
        if (type(keys) is list or type(keys) is tuple) and len(keys) == 1:
            return self._watch_op(op, None, keys[0])   # (one key: no copy of the list)
        keys = list(keys)
        if not keys:
            raise ValueError("keys must not be empty")
        return self._watch_op(op, keys, None)

    def try_complete_else_watch_many(self, ops, keys_per_op):
        """try_complete_else_watch(ops[k], keys_per_op[k]) for each k, in order; their
        results. Every argument is checked first: a bad one watches nothing."""
        cdef list op_list, key_lists, out
        cdef Py_ssize_t k
        op_list, key_lists = _purg_watch_args(ops, keys_per_op)
        out = [None] * len(op_list)
        for k in range(len(op_list)):
            out[k] = self._watch_op(op_list[k], <list>key_lists[k], None)
        return out

    def check_and_complete_keys(self, keys):
        """check_and_complete(key) for each key, in order; how many they completed.
        Every key is checked (hashable) first."""
        cdef Py_ssize_t now = 0
        cdef list key_list
        if type(keys) is list and _purg_hashable(<list>keys):
            key_list = list(keys)  # (the hooks may change the caller's list)
        else:
            key_list = _purg_batch_keys(keys, "keys")  # the general case, and its errors
        for key in key_list:
            now += self._check_key(key)
        return now

    cdef bint _watch_op(self, object op, list keys, object key0) except -1:
        # try_complete_else_watch's work, on keys (checked non-empty) or, when keys is
        # None, on the one key key0
        cdef int i
        cdef dict m
        cdef bint watch_created = False
        cdef Py_ssize_t k, nkeys = 1 if keys is None else len(keys), n
        if self._try_complete(op):
            return True
        for k in range(nkeys):
            key = key0 if keys is None else keys[k]
            if _completed(op):
                return False
            i = <int>((<size_t>hash(key)) % STRIPES)   # unsigned: cdivision is on
            mutex_lock_with_gil(&self._stripe_mu[i])
            try:
                m = self._maps[i]
                n = len(m)
                lst = <object>PyDict_SetDefault(m, key, op)   # one lookup
                if len(m) != n:
                    pass                        # key's list: op alone
                elif type(lst) is list:
                    (<list>lst).append(op)
                else:
                    m[key] = [lst, op]
                if isinstance(op, DelayedOperation):
                    (<DelayedOperation>op)._watch(self, key)
                else:
                    op._fc_watch(self, key)
                if _completed(op):   # completed before it could tell us
                    (<set>self._dirty[i]).add(key)
            finally:
                pthread_mutex_unlock(&self._stripe_mu[i])
            if not watch_created:
                watch_created = True
                fc_add_i64(&self._estimated, 1)
        if self._try_complete(op):
            return True
        if _completed(op):
            pass
        elif isinstance(op, DelayedOperation):
            (<DelayedOperation>op)._arm(self.timer, self)
        else:
            op._fc_arm(self.timer, self)
        self._maybe_purge()
        return False

    cdef bint _try_complete(self, object op) except -1:
        """op.try_complete() with op.lock held: by C calls for an OperationLock (a
        group's lock in the native coordinator), by threading's lock methods, unbound,
        for its RLock and Lock, by `with` for any other lock."""
        cdef OperationLock c_lock
        lock = (<DelayedOperation>op).lock if isinstance(op, DelayedOperation) else op.lock
        if type(lock) is _purg_RLock:
            acquire, release = _purg_rlock_acquire, _purg_rlock_release
        elif type(lock) is _purg_Lock:
            acquire, release = _purg_lock_acquire, _purg_lock_release
        elif isinstance(lock, OperationLock):
            c_lock = <OperationLock>lock
            c_lock.c_acquire()
            try:
                return op.try_complete()
            finally:
                c_lock.c_release()
        else:
            with lock:
                return op.try_complete()
        PyObject_CallOneArg(acquire, lock)
        try:
            return op.try_complete()
        finally:
            PyObject_CallOneArg(release, lock)

    def check_and_complete(self, key):
        """Try the operations watched on key; return how many this call completed."""
        return self._check_key(key)

    cdef Py_ssize_t _check_key(self, key) except -1:
        cdef int i = <int>((<size_t>hash(key)) % STRIPES)   # unsigned: cdivision is on
        cdef Py_ssize_t already = 0, now = 0
        cdef dict m
        cdef object one = None   # the snapshot of a list of one op: that op
        cdef list snapshot = None
        mutex_lock_with_gil(&self._stripe_mu[i])
        try:
            m = self._maps[i]
            lst = m.get(key)
            if lst is None:
                return 0
            if type(lst) is not list:
                one = lst
            elif len(<list>lst) == 1:
                one = (<list>lst)[0]
            else:
                snapshot = list(lst)
        finally:
            pthread_mutex_unlock(&self._stripe_mu[i])
        if snapshot is None:
            self._check_op(one, key, &already, &now)
        else:
            for op in snapshot:
                self._check_op(op, key, &already, &now)
        if already or now:
            self._purge_key(i, key)
        return now

    cdef int _check_op(self, object op, key, Py_ssize_t* already, Py_ssize_t* now) except -1:
        # one op of check_and_complete(key)'s snapshot: count it completed before, or try
        # it. A native op first listed by this very key object is tried with _checked 1
        # (taken 0 -> 1: a check that finds it taken tries the plain way, and only the
        # taker resets it): completing then, it does not mark key dirty (it sets
        # _checked 2); the mark is made here after all unless the try answers True (then
        # this check purges key)
        cdef DelayedOperation d = None
        cdef bint done = False
        if _completed(op):
            already[0] += 1
            return 0
        if isinstance(op, DelayedOperation):
            d = <DelayedOperation>op
        if not (d is not None and d._w_owner is self and d._w_key is key
                and fc_cas_int(&d._checked, 0, 1)):
            if self._try_complete(op):
                now[0] += 1
            return 0
        try:
            done = self._try_complete(op)
        finally:
            if fc_xchg_int(&d._checked, 0) == 2 and not done:
                self._completed_on(key)
        if done:
            now[0] += 1
        return 0

    cdef Py_ssize_t _purge_key(self, int i, key) except -1:
        cdef dict m
        mutex_lock_with_gil(&self._stripe_mu[i])
        try:
            m = self._maps[i]
            lst = m.get(key)
            if lst is None:
                return 0
            return self._clean(i, key, lst)
        finally:
            pthread_mutex_unlock(&self._stripe_mu[i])

    cdef Py_ssize_t _clean(self, int i, key, lst) except -1:
        # (stripe i's lock held) drop the completed operations of key's list
        cdef list keep
        cdef Py_ssize_t done = 0
        cdef set dirty = self._dirty[i]
        if dirty:
            dirty.discard(key)
        if type(lst) is not list:               # one op
            if not _completed(lst):
                return 0
            del (<dict>self._maps[i])[key]
            return 1
        for op in <list>lst:
            done += _completed(op)
        if done == 0:
            return 0
        if done == len(<list>lst):      # no new list
            del (<dict>self._maps[i])[key]
            return done
        keep = [op for op in <list>lst if not _completed(op)]
        done = len(<list>lst) - len(keep)
        if keep:
            lst[:] = keep
        else:
            del (<dict>self._maps[i])[key]
        return done

    cdef int _completed_on(self, key) except -1:
        cdef int i = <int>((<size_t>hash(key)) % STRIPES)   # unsigned: cdivision is on
        mutex_lock_with_gil(&self._stripe_mu[i])
        try:
            if key in <dict>self._maps[i]:
                (<set>self._dirty[i]).add(key)
        finally:
            pthread_mutex_unlock(&self._stripe_mu[i])
        return 0

    def _fc_completed_on(self, key):
        """An operation listed on key completed: key's list needs a purge."""
        self._completed_on(key)

    def cancel_for_key(self, key):
        """Stop watching key: remove its operations and cancel their timer entries
        (they are not completed); return them."""
        cdef int i = <int>((<size_t>hash(key)) % STRIPES)   # unsigned: cdivision is on
        mutex_lock_with_gil(&self._stripe_mu[i])
        try:
            lst = (<dict>self._maps[i]).pop(key, None)
            (<set>self._dirty[i]).discard(key)
        finally:
            pthread_mutex_unlock(&self._stripe_mu[i])
        if lst is None:
            return []
        if type(lst) is not list:
            lst = [lst]
        for op in lst:
            op._fc_disarm()
        return lst

    cdef Py_ssize_t _maybe_purge(self) except -1:
        # With a reaper thread the purge runs there, else on the caller's thread; one
        # purge at a time (_purge_queued from here to its end)
        if not _purg_purge_due(self):
            return 0    # (the common case, decided without the lock)
        mutex_lock_with_gil(&self._count_mu)
        if not _purg_purge_due(self):
            pthread_mutex_unlock(&self._count_mu)
            return 0
        fc_store_i64(&self._estimated, fc_load_i64(&self._delayed))
        self._purge_queued = True
        pthread_mutex_unlock(&self._count_mu)
        if getattr(self.timer, "reaping", False):
            self.timer.schedule(0, self._queued_purge)
            return 0
        return self._queued_purge()

    def _queued_purge(self):
        try:
            return self.purge_completed()
        finally:
            self._purge_queued = False

    def purge_completed(self):
        """Drop completed operations from every watcher list; return how many.
        Visits only the lists in the stripes' dirty sets."""
        cdef Py_ssize_t purged = 0, visits = 0
        cdef int i
        cdef dict m
        cdef set dirty
        for i in range(STRIPES):
            dirty = self._dirty[i]
            if not dirty:
                continue
            mutex_lock_with_gil(&self._stripe_mu[i])
            try:
                m = self._maps[i]
                for key in list(dirty):
                    lst = m.get(key)
                    if lst is None:
                        dirty.discard(key)
                        continue
                    visits += 1
                    purged += self._clean(i, key, lst)
            finally:
                pthread_mutex_unlock(&self._stripe_mu[i])
        mutex_lock_with_gil(&self._count_mu)
        self._purge_visits += visits
        pthread_mutex_unlock(&self._count_mu)
        return purged

    def shutdown(self):
        """Stop watching everything and cancel the timer entries of the operations."""
        cdef int i
        ops = []
        for i in range(STRIPES):
            mutex_lock_with_gil(&self._stripe_mu[i])
            try:
                for lst in (<dict>self._maps[i]).values():
                    if type(lst) is list:
                        ops.extend(<list>lst)
                    else:
                        ops.append(lst)
                (<dict>self._maps[i]).clear()
                (<set>self._dirty[i]).clear()
            finally:
                pthread_mutex_unlock(&self._stripe_mu[i])
        for op in ops:
            op._fc_disarm()

    def __repr__(self):
        return f"Purgatory({self.name!r}, watched={self.watched}, delayed={self.delayed})"

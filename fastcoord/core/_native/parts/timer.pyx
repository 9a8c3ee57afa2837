"""Hierarchical timing wheel, native twin (same algorithm as fastcoord.core._pure.timer).

Read fastcoord/core/_pure/timer.py first: it is the specification.  Here the entries
are 32-byte C structs in one pool (see timer.pxd), the bucket heap is a C binary
heap of bucket ids, and the lock is a pthread mutex that is never held while
Python code runs (callbacks, __del__ of released objects, the clock); it is taken on
a free-threaded build only, the GIL doing its work otherwise (timer.pxd, _acquire).

Callbacks run without the lock, in deadline order; a callback that raises is
logged on the ``fastcoord.timer`` logger and the other due entries still fire.
"""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, INT64_MAX, INT64_MIN
from libc.stdlib cimport qsort
from libc.string cimport memcpy, memmove, memset
from cpython.object cimport PyObject
from cpython.ref cimport Py_XINCREF, Py_XDECREF
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from cpython.long cimport PyLong_AsLongLongAndOverflow

from fastcoord.core._native.clocks cimport monotonic_s
from fastcoord.core._native.mutex cimport pthread_mutex_destroy, pthread_mutex_init, pthread_mutex_trylock
from posix.unistd cimport usleep

import logging
import sys
import threading

import numpy as np

from fastcoord.core.clock cimport ManualClock
from threading import TIMEOUT_MAX


_log = logging.getLogger("fastcoord.timer")
# buffer format prefixes that mean this machine's byte order and sizes
_NATIVE_ORDER = "@=" + ("<" if sys.byteorder == "little" else ">")

cdef int64_t LIMIT = (1 << 62) - 1
cdef int64_t NEVER = INT64_MAX
cdef int64_t NO_REAPER = INT64_MIN
cdef int32_t MAX_LEVELS = 64
cdef int32_t MAX_CAP = 0x7FFFFFFF
cdef int32_t RUN_KEEP = 1 << 16  # an exhausted run buffer above this is released
cdef int32_t RUN_PREFETCH = 6    # run entries prefetched ahead of the one fired
cdef int32_t DRAIN_PREFETCH = 8  # pending entries whose neighbours are prefetched ahead
cdef size_t HUGE_POOL_BYTES = 8 << 20  # a pool this big asks for huge pages
# test hooks (Timer._test_alloc_limits): simulate running out of memory
cdef int32_t _collect_cap_limit = 0x7FFFFFFF  # collect buffers never grow past this
cdef int32_t _radix_n_limit = 0x7FFFFFFF      # longer sorts get no scratch (qsort)


cdef extern from *:
    """
    #define FC_PREFETCH(p) __builtin_prefetch((p), 1, 3)
    #if defined(__linux__)
    #include <stdint.h>
    #include <sys/mman.h>
    #endif
    /* Ask for transparent huge pages on the pages of [p, p + n): a big pool is touched at
       random (cancel) and page-faulted in as it is first written (schedule), both far
       cheaper on 2 MiB pages (the TLB covers it; one fault per 2 MiB). Whole pages, not
       just the 2 MiB-aligned middle: a big block is a mapping of its own, and marking only
       part of it would split it, and then realloc could no longer grow it in place
       (mremap) but would copy it. Linux only, and only a hint: without THP, or
       elsewhere, nothing changes. */
    static void fc_advise_huge(void* p, size_t n) {
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
        const uintptr_t page = 4096;
        uintptr_t a = (uintptr_t)p & ~(page - 1);
        uintptr_t b = ((uintptr_t)p + n + page - 1) & ~(page - 1);
        (void)madvise((void*)a, (size_t)(b - a), MADV_HUGEPAGE);
    #else
        (void)p; (void)n;
    #endif
    }
    """
    void FC_PREFETCH(const void* p) nogil
    void fc_advise_huge(void* p, size_t n) nogil


cdef int _cmp_sortitem(const void* a, const void* b) noexcept nogil:
    cdef const fc_sortitem* x = <const fc_sortitem*>a
    cdef const fc_sortitem* y = <const fc_sortitem*>b
    if x.deadline < y.deadline:
        return -1
    if x.deadline > y.deadline:
        return 1
    return -1 if x.pos < y.pos else (1 if x.pos > y.pos else 0)


cdef void _sort_items(fc_sortitem* a, int32_t n) noexcept:
    """Sort a[0:n] by deadline, stably (a[k].pos must be k): insertion sort when
    short, else an LSD radix sort on deadline - min (a counting pass per digit of
    up to 16 bits; a whole-due bucket of level L spans tick_L, so usually 1-2
    passes), qsort on (deadline, pos) when no scratch memory.  GIL held."""
    cdef int32_t k, j, passes, dbits, nb, sh, p
    cdef int64_t lo, hi, d
    cdef uint64_t span, mask
    cdef bint sorted_ = True
    cdef fc_sortitem x
    cdef fc_sortitem* tmp
    cdef fc_sortitem* src
    cdef fc_sortitem* dst
    cdef fc_sortitem* sw
    cdef int32_t* cnt
    cdef int32_t c, total
    if n < 2:
        return
    lo = hi = a[0].deadline
    for k in range(1, n):
        d = a[k].deadline
        if d < a[k - 1].deadline:
            sorted_ = False
        if d < lo:
            lo = d
        elif d > hi:
            hi = d
    if sorted_:
        return
    if n <= 32:
        for k in range(1, n):
            x = a[k]
            j = k - 1
            while j >= 0 and a[j].deadline > x.deadline:
                a[j + 1] = a[j]
                j -= 1
            a[j + 1] = x
        return
    span = <uint64_t>hi - <uint64_t>lo
    dbits = 0
    while dbits < 64 and (span >> dbits) != 0:
        dbits += 1
    passes = (dbits + 15) // 16 if n >= 4096 else (dbits + 10) // 11
    dbits = (dbits + passes - 1) // passes
    nb = 1 << dbits
    mask = <uint64_t>(nb - 1)
    tmp = NULL
    if n <= _radix_n_limit:
        tmp = <fc_sortitem*>PyMem_Malloc(<size_t>n * sizeof(fc_sortitem) + <size_t>nb * sizeof(int32_t))
    if tmp == NULL:
        qsort(a, n, sizeof(fc_sortitem), _cmp_sortitem)
        return
    cnt = <int32_t*>(tmp + n)
    src = a
    dst = tmp
    sh = 0
    for p in range(passes):
        memset(cnt, 0, <size_t>nb * sizeof(int32_t))
        for k in range(n):
            cnt[((<uint64_t>src[k].deadline - <uint64_t>lo) >> sh) & mask] += 1
        total = 0
        for k in range(nb):
            c = cnt[k]
            cnt[k] = total
            total += c
        for k in range(n):
            j = <int32_t>(((<uint64_t>src[k].deadline - <uint64_t>lo) >> sh) & mask)
            dst[cnt[j]] = src[k]
            cnt[j] += 1
        sw = src
        src = dst
        dst = sw
        sh += dbits
    if src != a:
        memcpy(a, src, <size_t>n * sizeof(fc_sortitem))
    PyMem_Free(tmp)


cdef inline int64_t _as_ms(object value, str name) except? -1:
    """An int argument within [-LIMIT, LIMIT] (TypeError / ValueError naming it)."""
    cdef int overflow = 0
    cdef long long v
    if type(value) is int:  # the common case: one C conversion, no exception frame
        v = PyLong_AsLongLongAndOverflow(value, &overflow)
        if not overflow and -LIMIT <= v <= LIMIT:
            return v
    return _as_ms_checked(value, name)


cdef int64_t _as_ms_checked(object value, str name) except? -1:
    """_as_ms for any argument: the checks, and their errors."""
    cdef int64_t v
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    try:
        v = value
    except OverflowError:
        raise ValueError(f"{name} out of range: {value} (|{name}| must be < 2**62)") from None
    if v < -LIMIT or v > LIMIT:
        raise ValueError(f"{name} out of range: {value} (|{name}| must be < 2**62)")
    return v


cdef object _int64_view(object buf, str name):
    """buf as a 1-D memoryview of native int64 (TypeError naming it otherwise)."""
    try:
        m = memoryview(buf)
    except TypeError:
        raise TypeError(f"{name} must be an int64 buffer (a numpy array, array.array('q')), "
                        f"got {type(buf).__name__}") from None
    if m.ndim != 1 or m.itemsize != 8 or m.format.lstrip(_NATIVE_ORDER) not in ("q", "l"):
        raise TypeError(f"{name} must be a 1-D int64 buffer, got format {m.format!r} "
                        f"in {m.ndim} dimension(s)")
    return m


cdef inline int64_t _as_tag(object tag) except? -1:
    """A tag argument: an int within int64 (TypeError / ValueError otherwise)."""
    cdef int overflow = 0
    cdef long long v
    if type(tag) is int:
        v = PyLong_AsLongLongAndOverflow(tag, &overflow)
        if not overflow:
            return v
    elif isinstance(tag, bool) or not isinstance(tag, int):
        raise TypeError(f"tag must be an int, got {type(tag).__name__}")
    if tag < -(1 << 63) or tag >= (1 << 63):
        raise ValueError(f"tag must fit in int64, got {tag}")
    return tag


cdef int _check_sink(object sink) except -1:
    if not isinstance(sink, TimerSink) and not callable(getattr(sink, "on_timer", None)):
        raise TypeError(f"sink must have an on_timer(tag, deadline_ms) method, got {type(sink).__name__}")
    return 0


cdef class TimerSink:
    """Receives tag entries (see timer.pxd). The default C hook forwards to a
    Python-level ``on_timer`` defined by a Python subclass."""

    cdef int on_timer(self, int64_t tag, int64_t deadline_ms) except -1:
        meth = getattr(self, "on_timer", None)
        if meth is None:
            raise NotImplementedError(f"{type(self).__name__} does not implement on_timer")
        meth(tag, deadline_ms)
        return 0


@cython.freelist(256)
@cython.no_gc_clear     # traversed (it keeps its Timer alive) but never cleared: _timer
cdef class TimerHandle: # stays valid for cancel(); the cycle breaks elsewhere (the callback)
    """What schedule/schedule_at return: cancel() and deadline_ms."""

    def __init__(self):
        raise TypeError("TimerHandle objects are made by Timer.schedule")

    @property
    def deadline_ms(self):
        return self._deadline

    @property
    def entry_id(self):
        return self._eid

    @cython.binding(False)  # a plain method descriptor: CPython's call fast paths
    def cancel(self):
        """Remove the entry; True only if it was still scheduled. O(1)."""
        return self._timer.c_cancel_id(self._eid)

    def __repr__(self):
        return f"TimerHandle(deadline_ms={self._deadline})"


cdef inline TimerHandle _new_handle(Timer timer, int64_t eid, int64_t deadline):
    cdef TimerHandle h = TimerHandle.__new__(TimerHandle)
    h._timer = timer
    h._eid = eid
    h._deadline = deadline
    return h


cdef class Timer:
    """Hierarchical timing wheel driven by advance_to (or a reaper thread)."""

    def __cinit__(self):
        self._mtx_ok = False
        self._pool = NULL
        self._levels = NULL
        self._buckets = NULL
        self._heap = NULL
        self._batch = NULL
        self._run = NULL
        self._run_cap = 0
        self._run_pos = 0
        self._run_n = 0
        self._sink_obj = NULL
        self._sink_live = NULL
        self._sink_native = NULL
        self._last_sink = NULL
        self._wake_at = NO_REAPER

    def __init__(self, clock, *, tick_ms=1, wheel_size=20):
        cdef int32_t i
        if isinstance(tick_ms, bool) or not isinstance(tick_ms, int):
            raise TypeError(f"tick_ms must be an int, got {type(tick_ms).__name__}")
        if isinstance(wheel_size, bool) or not isinstance(wheel_size, int):
            raise TypeError(f"wheel_size must be an int, got {type(wheel_size).__name__}")
        if tick_ms <= 0 or tick_ms > (1 << 62):
            raise ValueError(f"tick_ms must be in [1, 2**62], got {tick_ms}")
        if wheel_size < 2 or wheel_size > (1 << 24):
            raise ValueError(f"wheel_size must be in [2, 2**24], got {wheel_size}")
        if not callable(getattr(clock, "now_ms", None)):
            raise TypeError("clock must have a now_ms() method")
        if self._pool != NULL:
            raise RuntimeError("Timer.__init__ called twice")
        now_obj = clock.now_ms()
        cdef int64_t now = _as_ms(now_obj, "clock.now_ms()")
        self._clock = clock
        self._manual_clock = type(clock) is ManualClock
        self._tick = tick_ms
        self._size = wheel_size
        self._origin = now - (now % self._tick) if now >= 0 else now - (((now % self._tick) + self._tick) % self._tick)
        self._time = now
        self._count = 0
        if pthread_mutex_init(&self._mtx, NULL) != 0:
            raise MemoryError("pthread_mutex_init failed")
        self._mtx_ok = True
        self._cap = 0
        self._hwm = 0
        self._free = -1
        self._pend_n = 0
        self._levels = <fc_level*>PyMem_Malloc(MAX_LEVELS * sizeof(fc_level))
        self._batch_cap = 256
        self._batch = <fc_sortitem*>PyMem_Malloc(self._batch_cap * sizeof(fc_sortitem))
        if self._levels == NULL or self._batch == NULL:
            raise MemoryError()
        self._nlevels = 0
        self._heap_n = 0
        self._heap_cap = 0
        self._ready = self._alloc_u()
        if self._ready < 0:
            raise MemoryError()
        self._pool[self._ready].kind = FC_KIND_SENTINEL
        self._pool[self._ready].prev = self._ready
        self._pool[self._ready].next = self._ready
        self._pool[self._ready].deadline = 0
        if self._add_level_u() < 0:
            raise MemoryError()
        self._sink_cap = 0
        self._nsinks = 0
        self._sinks_registered = 0
        self._sink_sweep_at = 16
        self._sink_ids = {}
        self._last_sid = -1
        self._wake = threading.Event()
        self._thread = None
        self._stop = False

    def __dealloc__(self):
        cdef int32_t i
        if self._pool != NULL:
            for i in range(self._hwm):
                if self._pool[i].kind == FC_KIND_FN:
                    Py_XDECREF(self._pool[i].u.fn)
            PyMem_Free(self._pool)
            self._pool = NULL
        if self._sink_obj != NULL:
            for i in range(self._nsinks):
                Py_XDECREF(self._sink_obj[i])
            PyMem_Free(self._sink_obj)
        PyMem_Free(self._sink_live)
        PyMem_Free(self._sink_native)
        PyMem_Free(self._levels)
        PyMem_Free(self._buckets)
        PyMem_Free(self._heap)
        PyMem_Free(self._batch)
        PyMem_Free(self._run)
        if self._mtx_ok:
            pthread_mutex_destroy(&self._mtx)

    # ------------------------------------------------------------ pool / wheel
    cdef int _grow_u(self, int64_t need) noexcept:
        """Make the pool hold at least `need` slots (at least double it). The new
        slots are not written: _alloc_u initialises each as it first hands it out, so
        a big pool is faulted in once, by its first use, not by a pass of its own."""
        cdef int64_t newcap
        cdef fc_entry* p
        cdef size_t nbytes
        if need <= self._cap:
            return 0
        if need > MAX_CAP:
            return -1
        newcap = 64 if self._cap == 0 else <int64_t>self._cap * 2
        if newcap < need:       # a batch's reserve: with room for what comes next
            newcap = need + (need >> 3)     # (a new level's sentinels, a few more)
        if newcap > MAX_CAP:
            newcap = MAX_CAP
        nbytes = <size_t>newcap * sizeof(fc_entry)
        p = <fc_entry*>PyMem_Realloc(self._pool, nbytes)
        if p == NULL:
            return -1
        if nbytes >= HUGE_POOL_BYTES:
            fc_advise_huge(p, nbytes)
        self._pool = p
        self._cap = <int32_t>newcap
        return 0

    cdef int32_t _alloc_u(self) noexcept:
        """A slot off the free list, else the first never-used one (growing the pool);
        -1: no memory. Its fields are the caller's to set (a new slot's gen is 0)."""
        cdef int32_t idx = self._free
        cdef fc_entry* e
        if idx < 0 and self._pend_n:
            self._drain_u()
            idx = self._free
        if idx >= 0:
            self._free = self._pool[idx].next
            return idx
        idx = self._hwm
        if idx == self._cap and self._grow_u(<int64_t>idx + 1) < 0:
            return -1
        self._hwm = idx + 1
        e = &self._pool[idx]
        e.prev = -1
        e.next = -1
        e.gen = 0
        e.kind = FC_KIND_FREE
        e.deadline = 0
        e.u.tag = 0
        return idx

    cdef int _add_level_u(self) noexcept:
        """Create the next (overflow) level: its buckets, their sentinels, heap room."""
        cdef int32_t L = self._nlevels
        cdef int32_t size = self._size
        cdef int32_t i, s
        cdef int64_t nb = <int64_t>(L + 1) * size
        cdef fc_bucket* b
        cdef int32_t* h
        cdef fc_level* lv
        if L >= MAX_LEVELS or nb > MAX_CAP:
            return -1
        b = <fc_bucket*>PyMem_Realloc(self._buckets, <size_t>nb * sizeof(fc_bucket))
        if b == NULL:
            return -1
        self._buckets = b
        h = <int32_t*>PyMem_Realloc(self._heap, <size_t>nb * sizeof(int32_t))
        if h == NULL:
            return -1
        self._heap = h
        self._heap_cap = <int32_t>nb
        for i in range(size):
            s = self._alloc_u()
            if s < 0:
                # give back what we took: the level is not created
                while i > 0:
                    i -= 1
                    self._free_slot_u(self._buckets[L * size + i].sentinel)
                return -1
            self._pool[s].kind = FC_KIND_SENTINEL
            self._pool[s].prev = s
            self._pool[s].next = s
            self._pool[s].deadline = 0
            self._buckets[L * size + i].sentinel = s
            self._buckets[L * size + i].expiration = -1
            self._buckets[L * size + i]._pad = 0
        lv = &self._levels[L]
        if L == 0:
            lv.tick = self._tick
            lv.current = 0
        else:
            lv.tick = self._levels[L - 1].interval
            lv.current = self._levels[L - 1].current
            lv.current -= lv.current % lv.tick
        if lv.tick > INT64_MAX // size:
            lv.interval = INT64_MAX
        else:
            lv.interval = lv.tick * size
        self._nlevels = L + 1
        return 0

    cdef void _heap_push_u(self, int32_t bid) noexcept:
        cdef int32_t* heap = self._heap
        cdef fc_bucket* B = self._buckets
        cdef int32_t i = self._heap_n
        cdef int32_t parent, p
        cdef int64_t exp = B[bid].expiration
        if i >= self._heap_cap:  # cannot happen: a bucket is in the heap at most once
            return
        self._heap_n = i + 1
        while i > 0:
            parent = (i - 1) >> 1
            p = heap[parent]
            if B[p].expiration < exp or (B[p].expiration == exp and p < bid):
                break
            heap[i] = p
            i = parent
        heap[i] = bid

    cdef int32_t _heap_pop_u(self) noexcept:
        cdef int32_t* heap = self._heap
        cdef fc_bucket* B = self._buckets
        cdef int32_t top = heap[0]
        cdef int32_t n = self._heap_n - 1
        cdef int32_t last, i, c, cb, c2
        cdef int64_t exp
        self._heap_n = n
        if n == 0:
            return top
        last = heap[n]
        exp = B[last].expiration
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            cb = heap[c]
            if c + 1 < n:
                c2 = heap[c + 1]
                if B[c2].expiration < B[cb].expiration or (
                        B[c2].expiration == B[cb].expiration and c2 < cb):
                    c += 1
                    cb = c2
            if exp < B[cb].expiration or (exp == B[cb].expiration and last < cb):
                break
            heap[i] = cb
            i = c
        heap[i] = last
        return top

    cdef int _place_u(self, int32_t idx) noexcept:
        """Put idx in its bucket: 1; already within the current tick: 0; no memory: -1."""
        cdef int64_t rel = self._pool[idx].deadline - self._origin
        cdef fc_level* lv = &self._levels[0]
        cdef int32_t i = 0
        cdef int64_t vid, exp
        cdef int32_t bid
        if rel - lv.current < lv.tick:
            return 0
        while True:
            if rel - lv.current < lv.interval:
                vid = rel // lv.tick
                bid = i * self._size + <int32_t>(vid % self._size)
                self._link_before_u(self._buckets[bid].sentinel, idx)
                exp = vid * lv.tick
                if self._buckets[bid].expiration != exp:
                    self._buckets[bid].expiration = exp
                    self._heap_push_u(bid)
                return 1
            i += 1
            if i == self._nlevels:
                if self._add_level_u() < 0:
                    return -1
            lv = &self._levels[i]

    cdef void _advance_wheels_u(self, int64_t rel) noexcept:
        cdef int32_t i
        cdef fc_level* lv
        for i in range(self._nlevels):
            lv = &self._levels[i]
            if rel - lv.current < lv.tick:
                break
            lv.current = rel - rel % lv.tick
            rel = lv.current

    cdef void _merge_ready_u(self, fc_sortitem* batch, int32_t n) noexcept:
        """Merge batch (in arrival order) into the sorted ready list, stably."""
        cdef fc_entry* pool = self._pool
        cdef int32_t ready = self._ready
        cdef int32_t k, cursor, idx
        cdef int64_t d
        if n > 1:
            for k in range(1, n):
                if batch[k].deadline < batch[k - 1].deadline:
                    qsort(batch, n, sizeof(fc_sortitem), _cmp_sortitem)
                    break
        cursor = pool[ready].prev
        k = n - 1
        while k >= 0:
            d = batch[k].deadline
            idx = batch[k].idx
            while cursor != ready and pool[cursor].deadline > d:
                cursor = pool[cursor].prev
            self._link_before_u(pool[cursor].next, idx)
            k -= 1

    cdef void _flush_u(self, int32_t bid) noexcept:
        cdef fc_entry* pool = self._pool
        cdef int32_t s = self._buckets[bid].sentinel
        cdef int32_t i = pool[s].next
        cdef int32_t nxt, n = 0
        cdef fc_sortitem one
        cdef fc_sortitem* nb
        self._buckets[bid].expiration = -1
        pool[s].next = s
        pool[s].prev = s
        while i != s:
            nxt = pool[i].next
            FC_PREFETCH(&pool[nxt])
            pool[i].prev = -1
            pool[i].next = -1
            if self._place_u(i) == 0:  # never -1 here: cascading creates no level
                if n == self._batch_cap:
                    nb = <fc_sortitem*>PyMem_Realloc(self._batch, <size_t>self._batch_cap * 2 * sizeof(fc_sortitem))
                    if nb != NULL:
                        self._batch = nb
                        self._batch_cap *= 2
                if n < self._batch_cap:
                    self._batch[n].deadline = pool[i].deadline
                    self._batch[n].pos = n
                    self._batch[n].idx = i
                    n += 1
                else:  # out of memory for the batch: insert alone (still sorted)
                    one.deadline = pool[i].deadline
                    one.pos = 0
                    one.idx = i
                    self._merge_ready_u(&one, 1)
            i = nxt
        if n:
            self._merge_ready_u(self._batch, n)

    cdef int32_t _collect_u(self, int32_t bid, fc_sortitem** buf, int32_t* cap,
                            int32_t mark) noexcept:
        """Empty bucket bid into (*buf)[0:n] (arrival order, pos = k), setting each
        entry's prev to mark (next to -1); returns n.  -1: no memory, and then
        the bucket is left exactly as it was.

        The list is walked from both ends at once (head forward into b[0:h],
        tail backward into b[cap-t:cap]): two independent chains of cache
        misses instead of one.  The tail part is then moved after the head part."""
        cdef fc_entry* pool = self._pool
        cdef int32_t s = self._buckets[bid].sentinel
        cdef int32_t i = pool[s].next
        cdef int32_t j = pool[s].prev
        cdef int32_t h = 0, t = 0, c = cap[0], newc, k, x, ni, pj
        cdef fc_sortitem* b = buf[0]
        cdef fc_sortitem* nb
        if i == s:
            return 0
        while True:
            if h + t + 2 > c:  # room for one more of each
                newc = 256 if c < 128 else (c * 2 if c < MAX_CAP // 2 else MAX_CAP)
                nb = NULL
                if newc >= h + t + 2 and newc <= _collect_cap_limit:
                    nb = <fc_sortitem*>PyMem_Realloc(b, <size_t>newc * sizeof(fc_sortitem))
                if nb == NULL:  # relink what was taken: the bucket is unchanged
                    for k in range(h):
                        x = b[k].idx
                        pool[x].prev = s if k == 0 else b[k - 1].idx
                        pool[x].next = b[k + 1].idx if k + 1 < h else i
                    for k in range(t):  # b[c-t:c]: forward order
                        x = b[c - t + k].idx
                        pool[x].prev = b[c - t + k - 1].idx if k > 0 else j
                        pool[x].next = b[c - t + k + 1].idx if k + 1 < t else s
                    pool[i].prev = b[h - 1].idx if h else s
                    pool[j].next = b[c - t].idx if t else s
                    buf[0] = b
                    return -1
                if t:
                    memmove(nb + newc - t, nb + c - t, <size_t>t * sizeof(fc_sortitem))
                b = nb
                c = newc
                buf[0] = b
                cap[0] = c
            # head side
            ni = pool[i].next
            FC_PREFETCH(&pool[ni])
            b[h].deadline = pool[i].deadline
            b[h].idx = i
            h += 1
            pool[i].prev = mark
            pool[i].next = -1
            if i == j:
                break
            i = ni
            # tail side
            pj = pool[j].prev
            FC_PREFETCH(&pool[pj])
            t += 1
            b[c - t].deadline = pool[j].deadline
            b[c - t].idx = j
            pool[j].prev = mark
            pool[j].next = -1
            if i == j:
                break
            j = pj
        if t:
            memmove(b + h, b + c - t, <size_t>t * sizeof(fc_sortitem))
        for k in range(h + t):
            b[k].pos = k
        pool[s].next = s
        pool[s].prev = s
        return h + t

    cdef void _take_whole_u(self, int32_t bid) noexcept:
        """A popped bucket due as a whole: its entries, sorted by deadline, become
        the run, or merge into the ready list while a run is being fired."""
        cdef fc_entry* pool = self._pool
        cdef int32_t ready = self._ready
        cdef int32_t tail = pool[ready].prev
        cdef int64_t exp = self._buckets[bid].expiration + self._origin
        cdef bint to_run = self._run_pos >= self._run_n and (tail == ready or pool[tail].deadline < exp)
        cdef int32_t n, k
        if to_run:
            n = self._collect_u(bid, &self._run, &self._run_cap, FC_LINK_RUN)
        else:
            n = self._collect_u(bid, &self._batch, &self._batch_cap, -1)
        if n < 0:  # no memory for the batch: cascade it as a partly due bucket
            self._flush_u(bid)
            return
        self._buckets[bid].expiration = -1
        if to_run:
            _sort_items(self._run, n)
            self._run_pos = 0
            self._run_n = n
            for k in range(min(n, RUN_PREFETCH)):
                FC_PREFETCH(&pool[self._run[k].idx])
        else:
            _sort_items(self._batch, n)
            self._merge_ready_u(self._batch, n)

    cdef int32_t _run_head_u(self) noexcept:
        """The pool index of the run's first entry still waiting (cancelled ones are
        skipped), or -1; an exhausted run is reset (a big buffer released)."""
        cdef fc_entry* pool = self._pool
        cdef fc_sortitem* run = self._run
        cdef int32_t pos = self._run_pos
        cdef int32_t n = self._run_n
        cdef int32_t idx
        while pos < n:
            idx = run[pos].idx
            if pool[idx].prev == FC_LINK_RUN:
                self._run_pos = pos
                return idx
            pos += 1
        if n:
            self._run_pos = 0
            self._run_n = 0
            if self._run_cap > RUN_KEEP:
                PyMem_Free(self._run)
                self._run = NULL
                self._run_cap = 0
        return -1

    cdef int32_t _pop_due_u(self, int64_t target) noexcept:
        cdef fc_entry* pool
        if self._pend_n:    # the wheel is walked with no cancelled entry left in it
            self._drain_u()
        pool = self._pool
        cdef int32_t ready = self._ready
        cdef int64_t origin = self._origin
        cdef int64_t rtarget = target - origin
        cdef int32_t head, b, r, e, pos
        cdef int64_t exp, d = 0
        while True:
            # the earlier of the run's head and the ready list's head (the run on ties)
            r = self._run_head_u()
            e = r
            if r >= 0:
                d = pool[r].deadline
            head = pool[ready].next
            if head != ready and (r < 0 or pool[head].deadline < d):
                e = head
                d = pool[head].deadline
            if self._heap_n > 0:
                b = self._heap[0]
                exp = self._buckets[b].expiration
                if exp <= rtarget and (e < 0 or exp + origin <= d):
                    self._heap_pop_u()
                    self._advance_wheels_u(exp)
                    if rtarget - exp >= self._levels[b // self._size].tick - 1:
                        self._take_whole_u(b)
                    else:
                        self._flush_u(b)
                    continue
            if e >= 0 and d <= target:
                if e == r:
                    pool[r].prev = -1
                    pos = self._run_pos + 1
                    self._run_pos = pos
                    if pos + RUN_PREFETCH < self._run_n:
                        FC_PREFETCH(&pool[self._run[pos + RUN_PREFETCH].idx])
                else:
                    self._unlink_u(head)
                return e
            return -1

    cdef int64_t _next_deadline_u(self, bint* found) noexcept:
        cdef int64_t best = 0
        cdef int32_t head, r
        if self._pend_n:    # (a cancelled entry may head the ready list)
            self._drain_u()
        head = self._pool[self._ready].next
        r = self._run_head_u()
        found[0] = False
        if self._heap_n > 0:
            best = self._buckets[self._heap[0]].expiration + self._origin
            found[0] = True
        if head != self._ready and (not found[0] or self._pool[head].deadline < best):
            best = self._pool[head].deadline
            found[0] = True
        if r >= 0 and (not found[0] or self._pool[r].deadline < best):
            best = self._pool[r].deadline
            found[0] = True
        return best

    # ------------------------------------------------------------------ sinks
    cdef int32_t _sink_id_u(self, object sink, list garbage) except -2:
        """The sink table index of sink (registering it); -1: no memory. Mutex held."""
        cdef PyObject* p = <PyObject*>sink
        cdef int32_t sid, i, newcap
        cdef PyObject** so
        cdef int64_t* sl
        cdef char* sn
        if p == self._last_sink:
            return self._last_sid
        key = id(sink)
        found = self._sink_ids.get(key)
        if found is not None:
            sid = found
            self._last_sink = p
            self._last_sid = sid
            return sid
        if self._sinks_registered >= self._sink_sweep_at:
            # release sinks that no longer have entries (lazily, so that a sink
            # whose only entry is cancelled and re-armed is not re-registered)
            for i in range(self._nsinks):
                if self._sink_obj[i] != NULL and self._sink_live[i] == 0:
                    del self._sink_ids[id(<object>self._sink_obj[i])]
                    garbage.append(<object>self._sink_obj[i])
                    Py_XDECREF(self._sink_obj[i])  # garbage keeps it alive until unlocked
                    self._sink_obj[i] = NULL
                    self._sinks_registered -= 1
            self._last_sink = NULL
            self._last_sid = -1
            self._sink_sweep_at = max(16, 2 * self._sinks_registered)
        sid = -1
        for i in range(self._nsinks):
            if self._sink_obj[i] == NULL:
                sid = i
                break
        if sid < 0:
            if self._nsinks == self._sink_cap:
                newcap = 8 if self._sink_cap == 0 else self._sink_cap * 2
                so = <PyObject**>PyMem_Realloc(self._sink_obj, newcap * sizeof(PyObject*))
                if so == NULL:
                    return -1
                self._sink_obj = so
                sl = <int64_t*>PyMem_Realloc(self._sink_live, newcap * sizeof(int64_t))
                if sl == NULL:
                    return -1
                self._sink_live = sl
                sn = <char*>PyMem_Realloc(self._sink_native, newcap * sizeof(char))
                if sn == NULL:
                    return -1
                self._sink_native = sn
                self._sink_cap = newcap
            sid = self._nsinks
            self._nsinks += 1
        Py_XINCREF(p)
        self._sink_obj[sid] = p
        self._sink_live[sid] = 0
        self._sink_native[sid] = isinstance(sink, TimerSink)
        self._sink_ids[key] = sid
        self._sinks_registered += 1
        self._last_sink = p
        self._last_sid = sid
        return sid

    # ------------------------------------------------------------- C-level API
    cdef int64_t c_current_ms(self) except? -1:
        # (A replay reads the time a few times per event: a ManualClock's field costs a
        # load, the call to its now_ms, which returns the same value, a Python call.)
        cdef int64_t now = ((<ManualClock>self._clock)._now if self._manual_clock
                            else self._clock.now_ms())
        cdef int64_t t = self._time
        return now if now > t else t

    cdef int _add_u(self, int64_t deadline, int32_t kind, PyObject* fn, int64_t tag,
                    int64_t* eid) noexcept:
        """Insert an entry (fn: a new reference is taken). Mutex held.
        Returns 1 when the reaper must be woken, 0 otherwise, -1: no memory."""
        cdef int32_t idx
        cdef int r
        cdef fc_entry* e
        cdef fc_sortitem one
        idx = self._alloc_u()
        if idx < 0:
            return -1
        e = &self._pool[idx]
        e.deadline = deadline
        e.kind = kind
        if kind == FC_KIND_FN:
            Py_XINCREF(fn)      # owned from the moment the entry holds it (GC traverses)
            e.u.fn = fn
        else:
            e.u.tag = tag
        r = self._place_u(idx)
        if r == 0:
            one.deadline = deadline
            one.pos = 0
            one.idx = idx
            self._merge_ready_u(&one, 1)
        elif r < 0:
            self._free_slot_u(idx)
            if kind == FC_KIND_FN:
                Py_XDECREF(fn)
            return -1
        if kind != FC_KIND_FN:
            self._sink_live[kind] += 1
        self._count += 1
        eid[0] = <int64_t>idx | (<int64_t>self._pool[idx].gen << 32)
        if deadline < self._wake_at:
            self._wake_at = deadline
            return 1
        return 0

    cdef int64_t c_schedule_at(self, int64_t deadline_ms, object fn) except -1:
        cdef int64_t eid = 0
        cdef int r
        self._acquire()
        r = self._add_u(deadline_ms, FC_KIND_FN, <PyObject*>fn, 0, &eid)
        self._release()
        if r < 0:
            raise MemoryError("timer entry pool")
        if r:
            self._wake.set()
        return eid

    cdef int32_t _lock_with_sink(self, object sink, list garbage) except -1:
        """Take the mutex and return sink's table index (registering it); on an error
        the mutex is released again."""
        cdef int32_t sid
        self._acquire()
        try:
            sid = self._sink_id_u(sink, garbage)
        except BaseException:
            self._release()
            raise
        if sid < 0:
            self._release()
            raise MemoryError("timer sink table")
        return sid

    cdef int64_t c_schedule_tag_at(self, int64_t deadline_ms, object sink, int64_t tag) except -1:
        cdef int32_t sid
        cdef int64_t eid = 0
        cdef int r
        cdef list garbage = None  # sinks released by a sweep: dropped after the lock
        self._acquire()
        if <PyObject*>sink == self._last_sink:     # (sinks come in runs: usually it is)
            sid = self._last_sid
        else:
            self._release()
            garbage = []
            sid = self._lock_with_sink(sink, garbage)
        r = self._add_u(deadline_ms, sid, NULL, tag, &eid)
        self._release()
        if r < 0:
            raise MemoryError("timer entry pool")
        if r:
            self._wake.set()
        return eid

    cdef bint c_cancel_id(self, int64_t entry_id) noexcept:
        cdef PyObject* fn = NULL
        cdef bint found
        self._acquire()
        found = self._cancel_u(entry_id, &fn)
        self._release()
        Py_XDECREF(fn)  # outside the lock: a __del__ may call back into the timer
        return found

    cdef bint _cancel_u(self, int64_t entry_id, PyObject** fn) noexcept:
        """Free the entry entry_id names, if still scheduled (mutex held). A callable
        entry's reference moves to *fn: the caller drops it once unlocked."""
        cdef int32_t idx
        cdef int32_t gen
        cdef fc_entry* e
        if entry_id < 0:
            return False
        # the low 32 bits (a C cast: `& 0xFFFFFFFF` would make Cython box a Python int per call)
        idx = <int32_t><uint32_t>entry_id
        gen = <int32_t>(entry_id >> 32)
        if idx >= self._hwm:     # (a never-used slot's memory is not initialised)
            return False
        e = &self._pool[idx]
        if e.kind < FC_KIND_FN or e.gen != gen:
            return False
        self._count -= 1
        if e.kind == FC_KIND_FN:
            fn[0] = e.u.fn
        else:
            self._sink_live[e.kind] -= 1
        if e.prev < 0:  # it waits in the run, which skips it once freed
            self._free_slot_u(idx)
            return True
        # Unlinking touches its two neighbours, at random places in a big pool: two
        # cache misses after the entry's own. It waits on the pending list instead, to
        # be unlinked with others by _drain_u, whose misses overlap. Meanwhile it stays
        # in its list, dead (its id stale already), and nothing walks a list before
        # draining: _pop_due_u and _next_deadline_u drain first (linking a new entry
        # beside it, or merging past it by deadline, is as for a live one).
        if self._pend_n == FC_PEND_CAP:
            self._drain_u()
        e.kind = FC_KIND_DEAD
        e.gen = (e.gen + 1) & 0x7FFFFFFF
        e.u.tag = 0
        self._pend[self._pend_n] = idx
        self._pend_n += 1
        return True

    cdef void _drain_u(self) noexcept:
        """Unlink and free the pending cancelled entries, prefetching the neighbours of
        those a few places ahead (a neighbour may change before its turn: each unlink
        reads the links as they are then)."""
        cdef fc_entry* pool = self._pool
        cdef int32_t* pend = self._pend
        cdef int32_t n = self._pend_n
        cdef int32_t k, j
        for k in range(min(n, DRAIN_PREFETCH)):
            FC_PREFETCH(&pool[pool[pend[k]].prev])
            FC_PREFETCH(&pool[pool[pend[k]].next])
        for k in range(n):
            if k + DRAIN_PREFETCH < n:
                j = pend[k + DRAIN_PREFETCH]
                FC_PREFETCH(&pool[pool[j].prev])
                FC_PREFETCH(&pool[pool[j].next])
            self._unlink_u(pend[k])
            self._free_slot_u(pend[k])
        self._pend_n = 0

    cdef int c_schedule_tags(self, const int64_t[:] deadlines, const int64_t[:] tags,
                             object sink, int64_t[:] ids) except -1:
        """schedule_tags for C callers (deadlines within [-LIMIT, LIMIT], one length):
        ids[k] = schedule_tag_at(deadlines[k], sink, tags[k]), in order, under one lock
        and one sink registration; out of memory, nothing stays scheduled.  The GIL
        stays held: the pool and wheel grow with PyMem_Realloc, and the collector
        walks the pool (see _timer_traverse)."""
        cdef Py_ssize_t k, done = 0, n = deadlines.shape[0]
        cdef int32_t sid
        cdef int r, wake = 0
        cdef PyObject* fn = NULL
        cdef list garbage = []  # sinks released by a sweep: dropped after the lock
        if n == 0:
            return 0
        sid = self._lock_with_sink(sink, garbage)
        if self._free < 0:      # all from the never-used tail: grow the pool once
            self._grow_u(<int64_t>self._hwm + n)    # (failing, the loop finds out)
        while done < n:
            r = self._add_u(deadlines[done], sid, NULL, tags[done], &ids[done])
            if r < 0:
                break
            wake |= r
            done += 1
        if done < n:  # tag entries only: no reference to drop
            for k in range(done):
                self._cancel_u(ids[k], &fn)
        self._release()
        if done < n:
            raise MemoryError("timer entry pool")
        if wake:
            self._wake.set()
        return 0

    cdef Py_ssize_t c_cancel_ids(self, const int64_t[:] ids) except -1:
        """cancel_ids for C callers: cancel_id per element under one lock; how many
        were still scheduled."""
        cdef Py_ssize_t k, found = 0, n = ids.shape[0]
        cdef PyObject* fn
        cdef list released = []  # callables of cancelled entries: dropped after the lock
        self._acquire()
        for k in range(n):
            fn = NULL
            if self._cancel_u(ids[k], &fn):
                found += 1
                if fn != NULL:
                    released.append(<object>fn)  # (no user code runs: an append)
                    Py_XDECREF(fn)
        self._release()
        return found

    # -------------------------------------------------------------- Python API
    @property
    def tick_ms(self):
        return self._tick

    @property
    def wheel_size(self):
        return self._size

    @property
    def reaping(self):
        """True while the reaper thread (start()) runs."""
        return self._thread is not None

    @property
    def levels(self):
        return self._nlevels

    def current_ms(self):
        """The later of clock.now_ms() and the last advance_to."""
        return self.c_current_ms()

    def __len__(self):
        return self._count

    @cython.binding(False)  # a plain method descriptor: CPython's call fast paths
    def schedule(self, delay_ms, fn):
        """Run fn() at current_ms() + delay_ms (delay <= 0: at the next advance_to)."""
        cdef int64_t delay = _as_ms(delay_ms, "delay_ms")
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        cdef int64_t deadline = self.c_current_ms() + delay
        if deadline < -LIMIT or deadline > LIMIT:
            raise ValueError(f"delay_ms out of range: the deadline {deadline} is beyond 2**62")
        return _new_handle(self, self.c_schedule_at(deadline, fn), deadline)

    @cython.binding(False)  # a plain method descriptor: CPython's call fast paths
    def schedule_at(self, deadline_ms, fn):
        """Run fn() at the absolute time deadline_ms."""
        cdef int64_t deadline = _as_ms(deadline_ms, "deadline_ms")
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        return _new_handle(self, self.c_schedule_at(deadline, fn), deadline)

    @cython.binding(False)  # a plain method descriptor: CPython's call fast paths
    def schedule_tag_at(self, deadline_ms, sink, tag):
        """Low-level: at deadline_ms call sink.on_timer(tag, deadline_ms). Returns an entry id.
        The sink is checked unless it is the last one the timer took (it was then)."""
        cdef int64_t deadline = _as_ms(deadline_ms, "deadline_ms")
        cdef int64_t t = _as_tag(tag)
        if <PyObject*>sink != self._last_sink:   # (a racy read: at worst one more check)
            _check_sink(sink)
        return self.c_schedule_tag_at(deadline, sink, t)

    @cython.binding(False)  # a plain method descriptor: CPython's call fast paths
    def cancel_id(self, entry_id):
        """Cancel an entry by id; True only if it was still scheduled."""
        cdef int overflow = 0
        cdef long long eid
        if type(entry_id) is int:   # one C conversion; beyond int64 it names no entry
            eid = PyLong_AsLongLongAndOverflow(entry_id, &overflow)
            return False if overflow else self.c_cancel_id(eid)
        if isinstance(entry_id, bool) or not isinstance(entry_id, int):
            raise TypeError(f"entry_id must be an int, got {type(entry_id).__name__}")
        if entry_id < 0 or entry_id >= (1 << 63):
            return False
        return self.c_cancel_id(entry_id)

    def schedule_tags(self, deadlines_ms, tags, sink):
        """schedule_tag_at(deadlines_ms[k], sink, tags[k]) for each k, in order; the
        entry ids as an int64 numpy array. Every argument is checked first: a bad one
        schedules nothing."""
        cdef const int64_t[:] d = _int64_view(deadlines_ms, "deadlines_ms")
        cdef const int64_t[:] t = _int64_view(tags, "tags")
        cdef Py_ssize_t k, n = d.shape[0]
        if t.shape[0] != n:
            raise ValueError(f"deadlines_ms and tags differ in length: {n} != {t.shape[0]}")
        for k in range(n):
            if d[k] < -LIMIT or d[k] > LIMIT:
                raise ValueError(f"deadlines_ms[{k}] out of range: {d[k]} "
                                 f"(|deadlines_ms| must be < 2**62)")
        _check_sink(sink)
        out = np.empty(n, dtype=np.int64)
        self.c_schedule_tags(d, t, sink, out)
        return out

    def cancel_ids(self, ids):
        """cancel_id(ids[k]) for each k; how many were still scheduled."""
        return self.c_cancel_ids(_int64_view(ids, "ids"))

    def advance_to(self, now_ms, *, step_clock=False):
        """Fire every entry with deadline <= now_ms in deadline order; return how many.

        Entries scheduled by a callback with a deadline <= now_ms fire in the
        same call.  With step_clock and a clock that has set_ms(), the clock is
        set to each entry's deadline just before it runs.
        """
        return self.c_advance_to(_as_ms(now_ms, "now_ms"), step_clock)

    cdef int _step_manual_clock(self, int64_t t) except -1:
        """ManualClock.set_ms(t), in its field (the clock is exactly a ManualClock): it
        never moves back. An entry fires with the clock at its deadline and the stepper
        ends at its target; set_ms is a Python function, and this runs for each entry
        fired. A time that is
        not an int, or not an int64 (set by hand), takes the method, which decides."""
        cdef int overflow = 0
        cdef long long now = 0
        cdef ManualClock clock = <ManualClock>self._clock
        clock_now = clock._now
        if type(clock_now) is int:
            now = PyLong_AsLongLongAndOverflow(clock_now, &overflow)
        if type(clock_now) is not int or overflow:
            self._clock.set_ms(t)
        elif t > now:
            clock._now = t
        return 0

    cdef Py_ssize_t c_advance_to(self, int64_t target, bint step_clock) except -1:
        """advance_to for C callers (target within [-LIMIT, LIMIT])."""
        cdef int64_t cur = self.c_current_ms()
        cdef int64_t deadline, tag = 0
        cdef int32_t idx, kind
        cdef PyObject* obj
        cdef bint native = False
        cdef Py_ssize_t fired = 0
        cdef fc_entry* e
        cdef object o
        cdef object set_ms = None       # the clock's, looked up at the first entry due
        if cur > target:
            target = cur
        while True:
            self._acquire()
            idx = self._pop_due_u(target)
            if idx < 0:
                if target > self._time:
                    self._time = target
                self._advance_wheels_u(target - self._origin)
                self._release()
                break
            e = &self._pool[idx]
            deadline = e.deadline
            kind = e.kind
            if kind == FC_KIND_FN:
                obj = e.u.fn  # our reference moves to obj
            else:
                tag = e.u.tag
                obj = self._sink_obj[kind]
                Py_XINCREF(obj)
                native = self._sink_native[kind]
                self._sink_live[kind] -= 1
            self._free_slot_u(idx)
            self._count -= 1
            if deadline > self._time:
                self._time = deadline
            self._release()
            fired += 1
            o = <object>obj
            Py_XDECREF(obj)  # o holds it now
            try:
                if step_clock:
                    if self._manual_clock:
                        self._step_manual_clock(deadline)
                    else:
                        if fired == 1:
                            set_ms = getattr(self._clock, "set_ms", None)
                        if set_ms is not None:
                            set_ms(deadline)
                if kind == FC_KIND_FN:
                    o()
                elif native:
                    (<TimerSink>o).on_timer(tag, deadline)
                else:
                    o.on_timer(tag, deadline)
            except Exception:
                _log.exception("timer callback for deadline %d raised", deadline)
        return fired

    def next_deadline_ms(self):
        """The earliest bucket expiration or ready/run deadline, or None when empty."""
        cdef bint found
        cdef int64_t nd
        self._acquire()
        nd = self._next_deadline_u(&found)
        self._release()
        return nd if found else None

    def idle_through(self, now_ms, min_delay_ms):
        """idle_through(now_ms, min_delay_ms) -> bool

        True when advance_to(now_ms) would fire nothing and would leave in place every
        wheel level that an entry scheduled from then on with a delay of at least
        min_delay_ms can land in (see the pure twin for the reasoning)."""
        cdef int64_t now = _as_ms(now_ms, "now_ms")
        cdef int64_t min_delay = _as_ms(min_delay_ms, "min_delay_ms")
        if min_delay < 0:
            raise ValueError(f"min_delay_ms must be >= 0, got {min_delay_ms}")
        return self.c_idle_through(now, min_delay)

    cdef int c_idle_through(self, int64_t now, int64_t min_delay) except -1:
        """idle_through for C callers (min_delay >= 0): 1 or 0."""
        cdef int64_t target = self.c_current_ms()
        cdef bint idle
        if now > target:
            target = now
        self._acquire()
        idle = self._idle_through_u(target, min_delay)
        self._release()
        return idle

    cdef bint _idle_through_u(self, int64_t target, int64_t min_delay) noexcept:
        """idle_through at `target`. Mutex held."""
        cdef bint found
        cdef int64_t due = self._next_deadline_u(&found), rel, tick
        cdef int32_t i
        cdef fc_level* lv
        if found and due <= target:
            return False
        rel = target - self._origin
        for i in range(self._nlevels):
            lv = &self._levels[i]
            if lv.interval > min_delay:
                return rel - lv.current < lv.tick
        # That level is not made yet: made from the top one, its clock rounded down.
        lv = &self._levels[self._nlevels - 1]
        tick = lv.interval                  # (< INT64_MAX: it is <= min_delay)
        while tick <= min_delay // self._size:
            tick *= self._size
        return rel // tick == lv.current // tick

    # ---------------------------------------------------------------- reaper
    def start(self, *, max_wait_ms=1000):
        """Start a daemon thread that fires due entries as the clock reaches them."""
        if isinstance(max_wait_ms, bool) or not isinstance(max_wait_ms, int):
            raise TypeError(f"max_wait_ms must be an int, got {type(max_wait_ms).__name__}")
        if max_wait_ms <= 0:
            raise ValueError(f"max_wait_ms must be > 0, got {max_wait_ms}")
        if self._thread is not None:
            raise RuntimeError("the timer's reaper is already running")
        self._stop = False
        self._wake.clear()
        self._acquire()
        self._wake_at = NEVER
        self._release()
        t = threading.Thread(target=self._reap, args=(max_wait_ms,),
                             name="fastcoord-timer-reaper", daemon=True)
        self._thread = t
        t.start()
        return self

    def _reap(self, max_wait_ms):
        cdef bint found
        cdef int64_t nd
        clock = self._clock
        wake = self._wake
        try:
            while not self._stop:
                wake.clear()
                self.advance_to(clock.now_ms())
                self._acquire()
                nd = self._next_deadline_u(&found)
                self._wake_at = nd if found else NEVER
                self._release()
                if self._stop:
                    break
                wait = max_wait_ms if not found else min(max(nd - clock.now_ms(), 0), max_wait_ms)
                if wait > 0:
                    wake.wait(wait / 1000.0)
        finally:
            self._acquire()
            self._wake_at = NO_REAPER
            self._release()

    def close(self):
        """Stop and join the reaper thread (if any)."""
        t = self._thread
        if t is None:
            return
        self._stop = True
        self._wake.set()
        if t is not threading.current_thread():
            t.join()
        self._thread = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return (f"Timer(tick_ms={self._tick}, wheel_size={self._size}, "
                f"levels={self._nlevels}, len={self._count})")

    # introspection for tests and benchmarks
    def _pool_capacity(self):
        return self._cap

    @staticmethod
    def _entry_size():
        return sizeof(fc_entry)

    @staticmethod
    def _test_alloc_limits(collect_cap=None, radix_n=None):
        """Tests only (module-wide): collect buffers fail to grow past collect_cap
        items (the bucket is cascaded instead) and sorts longer than radix_n get no
        scratch memory (qsort).  None: no limit."""
        global _collect_cap_limit, _radix_n_limit
        _collect_cap_limit = MAX_CAP if collect_cap is None else collect_cap
        _radix_n_limit = MAX_CAP if radix_n is None else radix_n


# -- the cycle collector -------------------------------------------------------------------
# The callbacks and sinks a Timer holds live in C arrays, which Cython's generated
# tp_traverse does not see. Without them a cycle through a Timer (a callback that closes
# over its timer, or keeps its own handle) would never be collected. This traverse
# reports them, then Cython's for the attributes. (No tp_clear of our own: clearing the
# callback, closure or handle side of such a cycle breaks it, and the Timer's dealloc
# then releases its entries.) It runs with the GIL, and the pool is only changed with
# the GIL held, so it sees a consistent pool.
cdef extern from "Python.h":
    ctypedef int (*visitproc)(PyObject*, void*) noexcept
    ctypedef int (*traverseproc)(PyObject*, visitproc, void*) noexcept
    ctypedef struct PyTypeObject:
        traverseproc tp_traverse

cdef traverseproc _attribute_traverse = (<PyTypeObject*>Timer).tp_traverse


cdef int _timer_traverse(PyObject* o, visitproc visit, void* arg) noexcept:
    cdef fc_entry* pool = (<Timer>o)._pool
    cdef PyObject** sinks = (<Timer>o)._sink_obj
    cdef int32_t i, r
    if pool != NULL:
        for i in range((<Timer>o)._hwm):
            if pool[i].kind == FC_KIND_FN and pool[i].u.fn != NULL:
                r = visit(pool[i].u.fn, arg)
                if r:
                    return r
    if sinks != NULL:
        for i in range((<Timer>o)._nsinks):
            if sinks[i] != NULL:
                r = visit(sinks[i], arg)
                if r:
                    return r
    return _attribute_traverse(o, visit, arg) if _attribute_traverse != NULL else 0


(<PyTypeObject*>Timer).tp_traverse = _timer_traverse


cdef bint mutex_acquire(pthread_mutex_t* mu, bint blocking, double timeout) except -1:
    """(timer.pxd) threading's rules for the arguments: a timeout with blocking False,
    a negative one (but -1) or NaN is a ValueError, one above TIMEOUT_MAX an
    OverflowError."""
    cdef double deadline, left
    cdef bint taken
    if not blocking:
        if timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        return pthread_mutex_trylock(mu) == 0
    if timeout == -1:
        mutex_lock_with_gil(mu)
        return True
    if not timeout >= 0:                        # (NaN included)
        raise ValueError("timeout value must be a non-negative number")
    if timeout > TIMEOUT_MAX:
        raise OverflowError("timeout value is too large")
    if pthread_mutex_trylock(mu) == 0:
        return True
    # Tries until the deadline, sleeping between them without the GIL: portable (macOS
    # has no pthread_mutex_timedlock) and for a path no request takes.
    deadline = monotonic_s() + timeout
    with nogil:
        while True:
            if pthread_mutex_trylock(mu) == 0:
                taken = True
                break
            left = deadline - monotonic_s()
            if left <= 0:
                taken = False
                break
            usleep(<unsigned int>(min(left, 0.001) * 1e6) + 1)
    return taken


cdef class StepLock:
    """The lock a ManualStepper shares with its owner (GroupCoordinator's time lock; the
    pure twin's is a threading.Lock): a C mutex, which the stepper takes by C calls
    where a threading.Lock's acquire() and release() were two Python calls at every
    step of a replay's clock. From Python: `with`, or acquire() and release() by the
    thread that holds it. Not reentrant."""

    def __cinit__(self):
        if pthread_mutex_init(&self._mu, NULL) != 0:
            raise MemoryError("pthread_mutex_init failed")
        self._held = False

    def __dealloc__(self):
        pthread_mutex_destroy(&self._mu)

    def acquire(self, bint blocking=True, double timeout=-1):
        """threading.Lock.acquire's contract (the pure twin's StepLock is one)."""
        if not mutex_acquire(&self._mu, blocking, timeout):
            return False
        self._held = True
        return True

    def release(self):
        if not self._held:
            raise RuntimeError("release unlocked lock")
        self.c_release()

    def locked(self):
        return self._held

    def __enter__(self):
        self.c_acquire()
        return True

    def __exit__(self, exc_type, exc, traceback):
        self.c_release()


cdef class ManualStepper:
    """Steps a ManualClock through its Timer (see fastcoord/core/_pure/timer.py): advance(ms)
    is one C call for an int step in range (GroupCoordinator.advance_time, bound to it)."""

    def __init__(self, Timer timer not None, lock, after_fire, fallback):
        if type(timer._clock) is not ManualClock:
            raise TypeError(f"the timer's clock must be a ManualClock, got "
                            f"{type(timer._clock).__name__}")
        self.timer = timer
        self.clock = timer._clock
        if type(lock) is StepLock:
            self.step_lock = lock
        else:
            self.acquire, self.release = lock.acquire, lock.release
        self.after_fire = after_fire
        self.fallback = fallback

    @cython.binding(False)  # a plain method descriptor: CPython's call fast paths
    def advance(self, ms):
        """advance(ms) -> how many entries fired (see the pure twin)."""
        cdef int overflow = 0
        cdef long long step
        if type(ms) is not int:
            return self.fallback(ms)
        step = PyLong_AsLongLongAndOverflow(ms, &overflow)
        if overflow:
            return self.fallback(ms)
        return self.c_advance(step)

    cdef object c_advance(self, int64_t step):
        """advance(step) for C callers (a replay's HeartbeatRun): a step out of [0,
        LIMIT] goes to the fallback too."""
        cdef int overflow = 0
        cdef long long now = 0
        cdef int64_t target
        cdef Py_ssize_t fired
        if step < 0 or step > LIMIT:
            return self.fallback(step)
        if self.step_lock is not None:
            self.step_lock.c_acquire()
        else:
            self.acquire()
        try:
            clock_now = (<ManualClock>self.clock)._now      # (exactly one: __init__)
            if type(clock_now) is int:
                now = PyLong_AsLongLongAndOverflow(clock_now, &overflow)
            if type(clock_now) is not int or overflow or now < -LIMIT or now > LIMIT - step:
                fired = -1                  # (the fallback's error, once released)
            else:
                target = now + step
                fired = self.timer.c_advance_to(target, True)
                self.timer._step_manual_clock(target)       # (the timer's clock is ours)
        finally:
            if self.step_lock is not None:
                self.step_lock.c_release()
            else:
                self.release()
        if fired < 0:
            return self.fallback(step)
        if fired:               # (nothing fired: no callback ran, nothing to deliver)
            self.after_fire()
        return fired

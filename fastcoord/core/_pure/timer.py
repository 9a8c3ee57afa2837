"""Hierarchical timing wheel, pure-Python twin (the readable specification).

The algorithm is the one of Varghese & Lauck's hierarchical timing wheels as
Kafka's SystemTimer uses it, with three deliberate differences:

* **Never early.** Kafka runs every task of a bucket when the bucket's tick
  starts, so with ``tick_ms > 1`` a task may fire up to one tick early.  Here a
  bucket that expires does not run its entries: it moves them to the *ready
  list*, a doubly linked list kept sorted by exact deadline, and only ready
  entries whose deadline is ``<= now`` fire.  Entries of the current, partial
  tick wait there for their exact deadline.
* **Exact order.** Entries fire in deadline order (equal deadlines in a fixed,
  deterministic order: the order in which they reached the ready list or the
  run, see below).
* **No cascade for a bucket that is due as a whole.** When ``advance_to(t)``
  pops a bucket whose whole range ``[expiration, expiration + tick_L)`` ends
  at or before ``t``, every entry in it fires in this call: its entries are not
  re-inserted level by level (the dominant cost of a big expiry: one
  unlink/relink per level per entry) but sorted by deadline at once (a stable
  sort: ties keep bucket order) and become the *run*, a sorted array fired
  from its front.  Only one run exists at a time; a whole-due bucket popped
  while a run is still being fired (or while the ready list holds a deadline
  at or after the bucket's expiration) is sorted the same way and merged into
  the ready list instead.  An entry waiting in the run is marked
  (``prev is _IN_RUN``); cancelling it unmarks it and the run skips it, so
  cancel stays O(1).  The next entry to fire is the earlier of the run's head
  and the ready list's head (the run first on equal deadlines: its entries got
  there first), and only if it is earlier than every bucket still in the heap
  (a bucket whose expiration is <= it is popped first), so entries that
  callbacks schedule inside the advanced range keep the exact order.
* **Callbacks outside the lock.** Due entries are taken off the ready list one
  at a time under the timer lock and run after it is released, so a callback
  may schedule or cancel freely (a callback that cancels an entry still
  waiting in the ready list prevents it from firing).  A callback that raises
  is logged on the ``fastcoord.timer`` logger and the remaining due entries
  still fire; the wheel was already consistent before the callback ran.

Structure
---------
Level ``L`` has ``wheel_size`` buckets of width ``tick_L = tick_ms *
wheel_size**L`` and covers ``interval_L = tick_L * wheel_size``.  Levels above
0 are created lazily (overflow wheels).  Each bucket is a circular doubly
linked list with a sentinel (the bucket object itself), so cancel is O(1).  A
heap (``heapq``) holds the buckets that contain entries, keyed by
``(expiration, bucket id)``; advancing time pops buckets from it, moving the
wheel clock from bucket to bucket (never tick by tick), and either re-inserts
("flushes") their entries one level down or into the ready list (a bucket that
is only partly due), or sorts them into the run (a bucket due as a whole).

Times inside the wheel are relative to ``origin`` (the clock at construction,
rounded down to a tick) so that wheel arithmetic works on non-negative numbers;
deadlines are stored absolute.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import sys
import threading

import numpy as np

from ..clock import ManualClock

__all__ = ["ManualStepper", "StepLock", "Timer", "TimerHandle"]

# The lock a ManualStepper shares with its owner (GroupCoordinator's time lock): here a
# threading.Lock; the native twin's is a C mutex its stepper takes by C calls.
StepLock = threading.Lock

_log = logging.getLogger("fastcoord.timer")

#: Deadlines and delays must lie in [-LIMIT, LIMIT] (both twins share this range,
#: the native one needs it to stay inside int64 arithmetic).
LIMIT = (1 << 62) - 1
_NEVER = 1 << 63  # reaper running, nothing scheduled: any schedule wakes it
_NO_REAPER = -(1 << 64)  # no reaper: no schedule ever needs to wake anything


def _check_int(value, name):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")


def _check_range(value, name):
    if value < -LIMIT or value > LIMIT:
        raise ValueError(f"{name} out of range: {value} (|{name}| must be <= 2**62)")


def _check_sink(sink):
    if not callable(getattr(sink, "on_timer", None)):
        raise TypeError(f"sink must have an on_timer(tag, deadline_ms) method, got {type(sink).__name__}")


# buffer format prefixes that mean this machine's byte order and sizes
_NATIVE_ORDER = "@=" + ("<" if sys.byteorder == "little" else ">")


def _int64_list(buf, name):
    """The ints of a 1-D native int64 buffer (TypeError naming it otherwise)."""
    try:
        m = memoryview(buf)
    except TypeError:
        raise TypeError(f"{name} must be an int64 buffer (a numpy array, array.array('q')), "
                        f"got {type(buf).__name__}") from None
    if m.ndim != 1 or m.itemsize != 8 or m.format.lstrip(_NATIVE_ORDER) not in ("q", "l"):
        raise TypeError(f"{name} must be a 1-D int64 buffer, got format {m.format!r} "
                        f"in {m.ndim} dimension(s)")
    return np.asarray(m).tolist()


class _Node:
    """A link in a circular doubly linked list (entries and bucket sentinels)."""

    __slots__ = ("prev", "next")


class _Bucket(_Node):
    """A bucket: the sentinel of its list plus its expiration (-1: not in the heap)."""

    __slots__ = ("expiration", "bid")

    def __init__(self, bid):
        self.prev = self.next = self
        self.expiration = -1
        self.bid = bid


#: ``prev`` of an entry waiting in the run (entries in a list have a node there,
#: entries fired, cancelled or never linked have None).
_IN_RUN = _Node()


class _Entry(_Node):
    """One scheduled callback. Linked (prev is not None) exactly while scheduled."""

    __slots__ = ("deadline", "fn", "sink", "tag", "eid")

    def __init__(self, deadline, fn, sink, tag, eid):
        self.prev = self.next = None
        self.deadline = deadline
        self.fn = fn
        self.sink = sink
        self.tag = tag
        self.eid = eid


class _Level:
    __slots__ = ("tick", "interval", "current", "buckets")

    def __init__(self, tick, size, current, first_bid):
        self.tick = tick
        self.interval = tick * size
        self.current = current - current % tick  # rounded down to this level's tick
        self.buckets = [_Bucket(first_bid + i) for i in range(size)]


def _link_before(node, e):
    """Insert e just before node (at the tail when node is a sentinel)."""
    p = node.prev
    e.prev = p
    e.next = node
    p.next = e
    node.prev = e


def _unlink(e):
    e.prev.next = e.next
    e.next.prev = e.prev
    e.prev = e.next = None


class TimerHandle:
    """What `schedule`/`schedule_at` return: `cancel()` and `deadline_ms`."""

    __slots__ = ("_timer", "_entry", "_deadline")

    def __init__(self, timer, entry):
        self._timer = timer
        self._entry = entry
        self._deadline = entry.deadline

    @property
    def deadline_ms(self) -> int:
        return self._deadline

    def cancel(self) -> bool:
        """Remove the entry; True only if it was still scheduled. O(1)."""
        return self._timer._cancel_entry(self._entry)

    def __repr__(self):
        return f"TimerHandle(deadline_ms={self._deadline})"


class Timer:
    """Hierarchical timing wheel driven by `advance_to` (or a reaper thread).

    Callbacks run without the timer lock held, in deadline order; one that
    raises is logged (``fastcoord.timer``) and the others still fire.
    """

    def __init__(self, clock, *, tick_ms=1, wheel_size=20):
        _check_int(tick_ms, "tick_ms")
        _check_int(wheel_size, "wheel_size")
        if tick_ms <= 0 or tick_ms > LIMIT:
            raise ValueError(f"tick_ms must be in [1, 2**62], got {tick_ms}")
        if wheel_size < 2 or wheel_size > (1 << 24):
            raise ValueError(f"wheel_size must be in [2, 2**24], got {wheel_size}")
        if not callable(getattr(clock, "now_ms", None)):
            raise TypeError("clock must have a now_ms() method")
        now = clock.now_ms()
        _check_int(now, "clock.now_ms()")
        _check_range(now, "clock.now_ms()")
        self._clock = clock
        self._tick = tick_ms
        self._size = wheel_size
        self._lock = threading.Lock()
        self._origin = now - now % tick_ms
        self._time = now  # the last advance_to target (or the deadline being fired)
        self._levels = [_Level(tick_ms, wheel_size, 0, 0)]
        self._heap = []  # (expiration, bucket id, bucket)
        self._ready = _Bucket(-1)  # sorted by deadline: due now or in the current tick
        self._run = []  # a whole-due bucket sorted by deadline, fired from _run_pos
        self._run_pos = 0
        self._count = 0
        self._tags = {}  # entry id -> entry, for the low-level tag API
        self._ids = itertools.count(1)
        self._last_sink = None  # the sink of the last tag entries scheduled: checked then
        # reaper
        self._wake_at = _NO_REAPER
        self._wake = threading.Event()
        self._thread = None
        self._stop = False

    # ------------------------------------------------------------------ time
    @property
    def tick_ms(self) -> int:
        return self._tick

    @property
    def wheel_size(self) -> int:
        return self._size

    @property
    def reaping(self) -> bool:
        """True while the reaper thread (start()) runs."""
        return self._thread is not None

    def current_ms(self) -> int:
        """The timer's current time: the later of clock.now_ms() and the last advance_to."""
        now = self._clock.now_ms()
        t = self._time
        return now if now > t else t

    def __len__(self) -> int:
        return self._count

    # -------------------------------------------------------------- schedule
    def schedule(self, delay_ms, fn) -> TimerHandle:
        """Run fn() at current_ms() + delay_ms (delay <= 0: at the next advance_to)."""
        _check_int(delay_ms, "delay_ms")
        _check_range(delay_ms, "delay_ms")
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        deadline = self.current_ms() + delay_ms
        _check_range(deadline, "delay_ms")
        e = _Entry(deadline, fn, None, 0, 0)
        self._add(e)
        return TimerHandle(self, e)

    def schedule_at(self, deadline_ms, fn) -> TimerHandle:
        """Run fn() at the absolute time deadline_ms."""
        _check_int(deadline_ms, "deadline_ms")
        _check_range(deadline_ms, "deadline_ms")
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        e = _Entry(deadline_ms, fn, None, 0, 0)
        self._add(e)
        return TimerHandle(self, e)

    def schedule_tag_at(self, deadline_ms, sink, tag) -> int:
        """Low-level: at deadline_ms call sink.on_timer(tag, deadline_ms). Returns an entry id.
        The sink is checked unless it is the last one the timer took (it was then)."""
        _check_int(deadline_ms, "deadline_ms")
        _check_range(deadline_ms, "deadline_ms")
        _check_int(tag, "tag")
        if tag < -(1 << 63) or tag >= (1 << 63):
            raise ValueError(f"tag must fit in int64, got {tag}")
        if sink is not self._last_sink:
            _check_sink(sink)
        e = _Entry(deadline_ms, None, sink, tag, next(self._ids))
        self._add(e, register=True)
        self._last_sink = sink
        return e.eid

    def cancel_id(self, entry_id) -> bool:
        """Cancel an entry made by schedule_tag_at; True only if it was still scheduled."""
        _check_int(entry_id, "entry_id")
        e = self._tags.get(entry_id)
        if e is None:
            return False
        return self._cancel_entry(e)

    def schedule_tags(self, deadlines_ms, tags, sink):
        """schedule_tag_at(deadlines_ms[k], sink, tags[k]) for each k, in order; the
        entry ids as an int64 numpy array. Every argument is checked first: a bad one
        schedules nothing."""
        deadlines = _int64_list(deadlines_ms, "deadlines_ms")
        tag_list = _int64_list(tags, "tags")
        if len(tag_list) != len(deadlines):
            raise ValueError(f"deadlines_ms and tags differ in length: "
                             f"{len(deadlines)} != {len(tag_list)}")
        for k, d in enumerate(deadlines):
            _check_range(d, f"deadlines_ms[{k}]")
        _check_sink(sink)
        ids = self._ids
        entries = [_Entry(d, None, sink, t, next(ids)) for d, t in zip(deadlines, tag_list)]
        self._add_all(entries, register=True)
        if entries:
            self._last_sink = sink
        return np.fromiter((e.eid for e in entries), dtype=np.int64, count=len(entries))

    def cancel_ids(self, ids) -> int:
        """cancel_id(ids[k]) for each k; how many were still scheduled."""
        get = self._tags.get
        cancel = self._cancel_entry
        found = 0
        for eid in _int64_list(ids, "ids"):
            e = get(eid)
            if e is not None and cancel(e):
                found += 1
        return found

    def _add(self, e, register=False):
        with self._lock:
            if register:
                self._tags[e.eid] = e
            if not self._place(e):
                self._insert_ready([e])
            self._count += 1
            notify = e.deadline < self._wake_at
            if notify:
                self._wake_at = e.deadline
        if notify:
            self._wake.set()

    def _add_all(self, entries, register=False):
        """_add for each entry, in order, under one lock."""
        if not entries:
            return
        with self._lock:
            for e in entries:
                if register:
                    self._tags[e.eid] = e
                if not self._place(e):
                    self._insert_ready([e])
            self._count += len(entries)
            first = min(e.deadline for e in entries)
            notify = first < self._wake_at
            if notify:
                self._wake_at = first
        if notify:
            self._wake.set()

    def _cancel_entry(self, e) -> bool:
        with self._lock:
            p = e.prev
            if p is None:  # fired, cancelled, or never linked
                return False
            if p is _IN_RUN:
                e.prev = None  # the run skips it
            else:
                _unlink(e)
            self._count -= 1
            if e.sink is not None:
                del self._tags[e.eid]
            fn, sink = e.fn, e.sink  # released after the lock (a __del__ may call us)
            e.fn = e.sink = None
        del fn, sink
        return True

    # ------------------------------------------------------- wheel internals
    def _place(self, e) -> bool:
        """Put e in its bucket; False when it is already within the current tick."""
        rel = e.deadline - self._origin
        levels = self._levels
        lv = levels[0]
        if rel < lv.current + lv.tick:
            return False
        i = 0
        while True:
            if rel - lv.current < lv.interval:
                vid = rel // lv.tick
                b = lv.buckets[vid % self._size]
                _link_before(b, e)
                exp = vid * lv.tick
                if b.expiration != exp:  # (re)used for a new range: enter the heap
                    b.expiration = exp
                    heapq.heappush(self._heap, (exp, b.bid, b))
                return True
            i += 1
            if i == len(levels):  # overflow wheel, created lazily
                levels.append(_Level(lv.interval, self._size, lv.current, i * self._size))
            lv = levels[i]

    def _advance_wheels(self, rel):
        """Move the wheel clocks to rel (relative time), rounding down per level."""
        for lv in self._levels:
            if rel < lv.current + lv.tick:
                break
            lv.current = rel - rel % lv.tick
            rel = lv.current

    def _insert_ready(self, batch):
        """Merge batch into the sorted ready list (stable: ties keep arrival order)."""
        if len(batch) > 1:
            batch.sort(key=_deadline)
        ready = self._ready
        cursor = ready.prev
        for e in reversed(batch):
            d = e.deadline
            while cursor is not ready and cursor.deadline > d:
                cursor = cursor.prev
            _link_before(cursor.next, e)

    def _flush(self, b):
        """An expired bucket: re-insert its entries one level down or into ready."""
        b.expiration = -1
        e = b.next
        b.prev = b.next = b
        batch = []
        while e is not b:
            nxt = e.next
            e.prev = e.next = None
            if not self._place(e):
                batch.append(e)
            e = nxt
        if batch:
            self._insert_ready(batch)

    def _take_whole(self, b):
        """An expired bucket due as a whole: its entries, sorted by deadline, become
        the run, or merge into the ready list while a run is being fired."""
        exp = b.expiration + self._origin
        b.expiration = -1
        tail = self._ready.prev
        to_run = self._run_pos == len(self._run) and (tail is self._ready or tail.deadline < exp)
        mark = _IN_RUN if to_run else None
        e = b.next
        b.prev = b.next = b
        batch = []
        while e is not b:
            nxt = e.next
            e.prev = mark
            e.next = None
            batch.append(e)
            e = nxt
        batch.sort(key=_deadline)  # stable: ties keep bucket order
        if to_run:
            self._run = batch
            self._run_pos = 0
        else:
            self._insert_ready(batch)

    def _run_head(self):
        """The run's first entry still waiting (cancelled ones are skipped), or None."""
        run = self._run
        pos = self._run_pos
        n = len(run)
        while pos < n:
            e = run[pos]
            if e.prev is _IN_RUN:
                self._run_pos = pos
                return e
            pos += 1
        if n:
            self._run = []
            self._run_pos = 0
        return None

    def _pop_due(self, target):
        """Under the lock: take and return the next entry due at target, or None."""
        heap = self._heap
        ready = self._ready
        origin = self._origin
        rtarget = target - origin
        while True:
            # the earlier of the run's head and the ready list's head (the run on ties)
            e = self._run_head()
            head = ready.next
            if head is not ready and (e is None or head.deadline < e.deadline):
                e = head
            if heap:
                exp = heap[0][0]
                if exp <= rtarget and (e is None or exp + origin <= e.deadline):
                    b = heapq.heappop(heap)[2]
                    self._advance_wheels(exp)
                    if rtarget - exp >= self._levels[b.bid // self._size].tick - 1:
                        self._take_whole(b)
                    else:
                        self._flush(b)
                    continue
            if e is not None and e.deadline <= target:
                if e is head:
                    _unlink(e)
                else:
                    e.prev = None
                    self._run_pos += 1
                return e
            return None

    # ---------------------------------------------------------------- firing
    def advance_to(self, now_ms, *, step_clock=False) -> int:
        """Fire every entry with deadline <= now_ms in deadline order; return how many.

        Entries scheduled by a callback with a deadline <= now_ms fire in the
        same call.  With step_clock and a clock that has set_ms(), the clock is
        set to each entry's deadline just before it runs.
        """
        _check_int(now_ms, "now_ms")
        _check_range(now_ms, "now_ms")
        set_ms = getattr(self._clock, "set_ms", None) if step_clock else None
        target = self.current_ms()
        if now_ms > target:
            target = now_ms
        lock = self._lock
        fired = 0
        while True:
            with lock:
                e = self._pop_due(target)
                if e is None:
                    if target > self._time:
                        self._time = target
                    self._advance_wheels(target - self._origin)
                    break
                self._count -= 1
                deadline = e.deadline
                if deadline > self._time:
                    self._time = deadline
                fn, sink, tag = e.fn, e.sink, e.tag
                e.fn = e.sink = None
                if sink is not None:
                    del self._tags[e.eid]
            fired += 1
            try:
                if set_ms is not None:
                    set_ms(deadline)
                if sink is None:
                    fn()
                else:
                    sink.on_timer(tag, deadline)
            except Exception:
                _log.exception("timer callback for deadline %d raised", deadline)
        return fired

    def next_deadline_ms(self):
        """The earliest bucket expiration or ready/run deadline, or None when empty."""
        with self._lock:
            return self._next_deadline()

    def idle_through(self, now_ms, min_delay_ms) -> bool:
        """True when advance_to(now_ms) would fire nothing and would leave in place
        every wheel level that an entry scheduled from then on with a delay of at
        least min_delay_ms can land in: a caller whose next schedules all have such
        delays may then move its clock to now_ms without advancing the timer, and
        every later schedule and firing is as if it had (a trace replay's shortcut
        for heartbeats, which only push session deadlines further out)."""
        _check_int(now_ms, "now_ms")
        _check_range(now_ms, "now_ms")
        _check_int(min_delay_ms, "min_delay_ms")
        if min_delay_ms < 0:
            raise ValueError(f"min_delay_ms must be >= 0, got {min_delay_ms}")
        target = self.current_ms()
        if now_ms > target:
            target = now_ms
        with self._lock:
            due = self._next_deadline()
            if due is not None and due <= target:
                return False
            # Levels whose whole span is at most min_delay_ms never take such an entry
            # (it lies beyond their span, however far their clock moved): the first
            # level that can must keep its clock, and then so do the ones above it.
            rel = target - self._origin
            for lv in self._levels:
                if lv.interval > min_delay_ms:
                    return rel - lv.current < lv.tick
            # That level is not made yet: it will be made from the top one, its clock
            # that one's rounded down to its own tick.
            top = self._levels[-1]
            tick = top.interval
            while tick * self._size <= min_delay_ms:
                tick *= self._size
            return rel // tick == top.current // tick

    def _next_deadline(self):
        best = None
        if self._heap:
            best = self._heap[0][0] + self._origin
        head = self._ready.next
        if head is not self._ready and (best is None or head.deadline < best):
            best = head.deadline
        e = self._run_head()
        if e is not None and (best is None or e.deadline < best):
            best = e.deadline
        return best

    # ---------------------------------------------------------------- reaper
    def start(self, *, max_wait_ms=1000):
        """Start a daemon thread that fires due entries as the clock reaches them."""
        _check_int(max_wait_ms, "max_wait_ms")
        if max_wait_ms <= 0:
            raise ValueError(f"max_wait_ms must be > 0, got {max_wait_ms}")
        if self._thread is not None:
            raise RuntimeError("the timer's reaper is already running")
        self._stop = False
        self._wake.clear()
        with self._lock:
            self._wake_at = _NEVER
        t = threading.Thread(target=self._reap, args=(max_wait_ms,),
                             name="fastcoord-timer-reaper", daemon=True)
        self._thread = t
        t.start()
        return self

    def _reap(self, max_wait_ms):
        clock = self._clock
        wake = self._wake
        try:
            while not self._stop:
                wake.clear()
                self.advance_to(clock.now_ms())
                with self._lock:
                    nd = self._next_deadline()
                    self._wake_at = _NEVER if nd is None else nd
                if self._stop:
                    break
                wait = max_wait_ms if nd is None else min(max(nd - clock.now_ms(), 0), max_wait_ms)
                if wait > 0:
                    wake.wait(wait / 1000.0)
        finally:
            with self._lock:
                self._wake_at = _NO_REAPER

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
                f"levels={len(self._levels)}, len={self._count})")


class ManualStepper:
    """Steps a ManualClock through its Timer, under a caller's lock: `advance(ms)` moves
    the clock by ms, firing everything due in deadline order with the clock at each
    deadline (advance_to with step_clock), sets the clock to the target, and then calls
    `after_fire()` if anything fired. An `ms` that is not an int step in range goes to
    `fallback(ms)`, which checks it and answers or raises (GroupCoordinator.advance_time
    binds `advance`, whose usual case is one C call in the native twin)."""

    def __init__(self, timer: Timer, lock, after_fire, fallback):
        if type(timer._clock) is not ManualClock:
            raise TypeError(f"the timer's clock must be a ManualClock, got "
                            f"{type(timer._clock).__name__}")
        self.timer = timer
        self.clock = timer._clock
        self.lock = lock
        self.after_fire = after_fire
        self.fallback = fallback

    def advance(self, ms) -> int:
        if type(ms) is not int or not 0 <= ms <= LIMIT:
            return self.fallback(ms)
        with self.lock:
            target = self.clock.now_ms() + ms
            if target <= LIMIT:
                fired = self.timer.advance_to(target, step_clock=True)
                self.clock.set_ms(target)
        if target > LIMIT:
            return self.fallback(ms)        # (its error, with the lock released)
        if fired:               # (nothing fired: no callback ran, nothing to deliver)
            self.after_fire()
        return fired


def _deadline(e):
    return e.deadline

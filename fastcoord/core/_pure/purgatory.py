"""Delayed operations and their purgatory, pure-Python twin (Kafka's
DelayedOperation / DelayedOperationPurgatory semantics).

An operation waits, watched on one or more keys, until ``try_complete()``
succeeds (after a ``check_and_complete(key)`` on one of its keys) or its delay
runs out on the timer (then ``on_expiration()`` runs after ``on_complete()``).
``force_complete()`` is exactly-once even when threads race.

Protocol between operations and purgatories (both twins implement it, so either
purgatory accepts operations of either twin):

* ``op.delay_ms``, ``op.lock``, ``op.is_completed``, ``op.try_complete()``,
  ``op.force_complete()``;
* ``op._fc_arm(timer, owner)``: schedule the op's expiry on ``timer`` at
  ``delay_ms`` from the timer's current time and report to ``owner`` through
  ``owner._fc_delayed_add(+1 / -1)`` while the entry is in the timer;
* ``op._fc_disarm() -> bool``: cancel the timer entry (not the operation);
* ``op._fc_watch(owner, key)``: the op is now in ``owner``'s list of ``key``;
  the winner of ``force_complete()`` then calls ``owner._fc_completed_on(key)``
  for each such key, after setting ``is_completed``.

Purges: a stripe keeps the keys whose list may hold a completed operation (its
``dirty`` set): a key goes in when an operation listed there completes, and out
when its list is cleaned (``check_and_complete`` cleans the list it scans). A
purge visits only those lists, never every key.

Locks: the purgatory's own (striped) locks protect only its watcher lists;
user code (``try_complete`` and the hooks) never runs under them.  The op's lock
is held around ``try_complete()``, as in Kafka.
"""
from __future__ import annotations

import threading

__all__ = ["DelayedOperation", "Purgatory"]

_STRIPES = 32


def batch_watch_args(ops, keys_per_op):
    """The checked arguments of try_complete_else_watch_many: (ops, keys lists), two
    lists of one length. Every element is checked before anything is watched, so a
    bad one leaves the purgatory as it was (both twins call this)."""
    ops = _sequence(ops, "ops")
    keys_per_op = _sequence(keys_per_op, "keys_per_op")
    if len(ops) != len(keys_per_op):
        raise ValueError(f"ops and keys_per_op differ in length: {len(ops)} != {len(keys_per_op)}")
    key_lists = []
    for k, op in enumerate(ops):
        if not callable(getattr(op, "_fc_arm", None)):
            raise TypeError(f"ops[{k}] must be a DelayedOperation, got {type(op).__name__}")
        keys = batch_keys(keys_per_op[k], "keys_per_op", k)
        if not keys:
            raise ValueError(f"keys_per_op[{k}] must not be empty")
        key_lists.append(keys)
    return ops, key_lists


def batch_keys(keys, name, k=None):
    """keys as a list, each key checked hashable; errors name them `name` (or
    `name[k]`). A str or bytes is refused: iterated, it would be its characters."""
    keys = _sequence(keys, name, k)
    for j, key in enumerate(keys):
        try:
            hash(key)
        except TypeError:
            raise TypeError(f"{_name(name, k)}[{j}] must be hashable, "
                            f"got {type(key).__name__}") from None
    return keys


def _sequence(items, name, k=None):
    if isinstance(items, (str, bytes, bytearray)):
        raise TypeError(f"{_name(name, k)} must be an iterable of items, "
                        f"not a {type(items).__name__}")
    try:
        return list(items)
    except TypeError:
        raise TypeError(f"{_name(name, k)} must be iterable, got {type(items).__name__}") from None


def _name(name, k):
    return name if k is None else f"{name}[{k}]"


class DelayedOperation:
    """Subclass and override try_complete(), on_complete() and on_expiration()."""

    def __init__(self, delay_ms, lock=None):
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int):
            raise TypeError(f"delay_ms must be an int, got {type(delay_ms).__name__}")
        if lock is not None and not (hasattr(lock, "acquire") and hasattr(lock, "release")):
            raise TypeError(f"lock must be a lock (acquire/release), got {type(lock).__name__}")
        self._delay_ms = delay_ms
        self.lock = threading.RLock() if lock is None else lock
        self._completed = False
        self._once = threading.Lock()  # acquired (never released) by the winner
        self._handle = None
        self._owner = None
        self._watches = None  # [purgatory, key, purgatory, key, ...] it is listed on

    # ---- hooks ---------------------------------------------------------------
    def try_complete(self) -> bool:
        """Check whether the operation can complete now; if so call force_complete()
        and return its result. Called with self.lock held."""
        raise NotImplementedError

    def on_complete(self) -> None:
        """Runs exactly once, in the caller of the winning force_complete()."""

    def on_expiration(self) -> None:
        """Runs after on_complete() when the operation completed by timing out."""

    # ---- state ---------------------------------------------------------------
    @property
    def delay_ms(self) -> int:
        return self._delay_ms

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete the operation if nobody did yet: True for the one winner, which
        cancels the timer entry and runs on_complete()."""
        if not self._once.acquire(False):
            return False
        self._completed = True
        self._fc_unwatch()
        self._fc_disarm()
        self.on_complete()
        return True

    def run_expiration(self) -> None:
        """What the timer runs at the deadline (Kafka's run())."""
        owner = self._owner
        if owner is not None:
            owner._fc_delayed_add(-1)  # the timer already dropped the entry
        self._handle = None
        if self.force_complete():
            self.on_expiration()

    # ---- purgatory protocol --------------------------------------------------
    def _fc_arm(self, timer, owner) -> None:
        if self._handle is not None:
            return
        self._owner = owner
        owner._fc_delayed_add(1)
        self._handle = timer.schedule(self._delay_ms, self.run_expiration)
        if self._completed:  # completed while we were arming it
            self._fc_disarm()

    def _fc_watch(self, owner, key) -> None:
        w = self._watches
        if w is None:
            self._watches = [owner, key]
        else:
            w += (owner, key)

    def _fc_unwatch(self) -> None:
        # (after _completed is set: a purgatory that lists the op after this read
        # sees the flag and marks its key itself)
        w = self._watches
        if w is not None:
            self._watches = None
            for i in range(0, len(w), 2):
                w[i]._fc_completed_on(w[i + 1])

    def _fc_disarm(self) -> bool:
        h = self._handle
        if h is not None and h.cancel():
            self._handle = None
            owner = self._owner
            if owner is not None:
                owner._fc_delayed_add(-1)
            return True
        return False

    def __repr__(self):
        return f"<{type(self).__name__} delay_ms={self._delay_ms} completed={self._completed}>"


class _Stripe:
    __slots__ = ("lock", "lists", "dirty")

    def __init__(self):
        self.lock = threading.Lock()
        self.lists = {}  # key -> list of operations
        self.dirty = set()  # every key whose list holds a completed operation (and maybe more)


class Purgatory:
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
        self._stripes = [_Stripe() for _ in range(_STRIPES)]
        self._count_lock = threading.Lock()
        self._delayed = 0
        self._estimated = 0  # estimated number of operations watched (for purges)
        self._purge_visits = 0
        self._purge_queued = False  # a purge is queued in the timer or running

    def _stripe(self, key):
        return self._stripes[hash(key) % _STRIPES]

    # ---- counters ------------------------------------------------------------
    def _fc_delayed_add(self, n):
        with self._count_lock:
            self._delayed += n

    @property
    def delayed(self) -> int:
        """Operations of this purgatory whose expiry is in the timer."""
        return self._delayed

    @property
    def watched(self) -> int:
        """Total length of the watcher lists (a completed op may still be listed)."""
        total = 0
        for s in self._stripes:
            with s.lock:
                total += sum(len(lst) for lst in s.lists.values())
        return total

    @property
    def purge_visits(self) -> int:
        """How many watcher lists the purges have visited so far."""
        return self._purge_visits

    def __len__(self):
        return self.watched

    # ---- operations ----------------------------------------------------------
    def try_complete_else_watch(self, op, keys) -> bool:
        """Try to complete op; else watch it on every key, try again, and if still
        not done arm its expiry. True when completed by this call."""
        keys = list(keys)
        if not keys:
            raise ValueError("keys must not be empty")
        with op.lock:
            if op.try_complete():
                return True
        watch_created = False
        for key in keys:
            if op.is_completed:  # completed meanwhile: stop adding it to lists
                return False
            s = self._stripe(key)
            with s.lock:
                lst = s.lists.get(key)
                if lst is None:
                    s.lists[key] = [op]
                else:
                    lst.append(op)
                op._fc_watch(self, key)
                if op.is_completed:  # completed before it could tell us
                    s.dirty.add(key)
            if not watch_created:
                watch_created = True
                with self._count_lock:
                    self._estimated += 1
        with op.lock:
            if op.try_complete():
                return True
        if not op.is_completed:
            op._fc_arm(self.timer, self)
        self._maybe_purge()
        return False

    def try_complete_else_watch_many(self, ops, keys_per_op) -> list:
        """try_complete_else_watch(ops[k], keys_per_op[k]) for each k, in order; their
        results. Every argument is checked first: a bad one watches nothing."""
        ops, key_lists = batch_watch_args(ops, keys_per_op)
        return list(map(self.try_complete_else_watch, ops, key_lists))

    def check_and_complete_keys(self, keys) -> int:
        """check_and_complete(key) for each key, in order; how many they completed.
        Every key is checked (hashable) first."""
        check = self.check_and_complete
        return sum(check(key) for key in batch_keys(keys, "keys"))

    def check_and_complete(self, key) -> int:
        """Try the operations watched on key; return how many this call completed."""
        s = self._stripe(key)
        with s.lock:
            lst = s.lists.get(key)
            if lst is None:
                return 0
            snapshot = list(lst)
        already = 0
        now = 0
        for op in snapshot:
            if op.is_completed:
                already += 1
                continue
            with op.lock:
                done = op.try_complete()
            if done:
                now += 1
        if already or now:
            self._purge_key(s, key)
        return now

    def _purge_key(self, s, key) -> int:
        with s.lock:
            lst = s.lists.get(key)
            if lst is None:
                return 0
            return self._clean(s, key, lst)

    def _clean(self, s, key, lst) -> int:
        # (s.lock held) drop the completed operations of key's list
        s.dirty.discard(key)
        keep = [op for op in lst if not op.is_completed]
        purged = len(lst) - len(keep)
        if keep:
            lst[:] = keep
        else:
            del s.lists[key]
        return purged

    def _fc_completed_on(self, key) -> None:
        """An operation listed on key completed: key's list needs a purge."""
        s = self._stripe(key)
        with s.lock:
            if key in s.lists:
                s.dirty.add(key)

    def cancel_for_key(self, key) -> list:
        """Stop watching key: remove its operations and cancel their timer entries
        (they are not completed); return them."""
        s = self._stripe(key)
        with s.lock:
            lst = s.lists.pop(key, None)
            s.dirty.discard(key)
        if not lst:
            return []
        for op in lst:
            op._fc_disarm()
        return lst

    def _maybe_purge(self) -> int:
        # With a reaper thread the purge runs there, else on the caller's thread; one
        # purge at a time (_purge_queued from here to its end)
        with self._count_lock:
            if self._estimated - self._delayed <= self.purge_interval or self._purge_queued:
                return 0
            self._estimated = self._delayed
            self._purge_queued = True
        if getattr(self.timer, "reaping", False):
            self.timer.schedule(0, self._queued_purge)
            return 0
        return self._queued_purge()

    def _queued_purge(self) -> int:
        try:
            return self.purge_completed()
        finally:
            self._purge_queued = False

    def purge_completed(self) -> int:
        """Drop completed operations from every watcher list; return how many.
        Visits only the lists in the stripes' dirty sets."""
        purged = 0
        visits = 0
        for s in self._stripes:
            if not s.dirty:
                continue
            with s.lock:
                for key in list(s.dirty):
                    lst = s.lists.get(key)
                    if lst is None:
                        s.dirty.discard(key)
                        continue
                    visits += 1
                    purged += self._clean(s, key, lst)
        with self._count_lock:
            self._purge_visits += visits
        return purged

    def shutdown(self) -> None:
        """Stop watching everything and cancel the timer entries of the operations."""
        ops = []
        for s in self._stripes:
            with s.lock:
                for lst in s.lists.values():
                    ops.extend(lst)
                s.lists.clear()
                s.dirty.clear()
        for op in ops:
            op._fc_disarm()

    def __repr__(self):
        return f"Purgatory({self.name!r}, watched={self.watched}, delayed={self.delayed})"

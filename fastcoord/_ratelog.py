"""Rate-limited logging: one line per kind of event per interval, however often it happens.

A hostile or broken client can make the same error happen on every request; the log
must say so once, with a count of what it did not print, never once per request and
never with a traceback per request. Each `RateLimitedLog` call names a `key` (the kind
of event); the first call for a key in an interval logs, later ones in the same
interval only count, and the next line for that key says how many were suppressed.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict, Hashable, List, Optional

__all__ = ["RateLimitedLog"]

# Keys remembered at most: a client that varies its key (a peer address per line) cannot
# grow the table without bound; past it the table is cleared, which at worst lets one
# extra line per key through.
_MAX_KEYS = 4096


class RateLimitedLog:
    """`warning(key, msg, *args)` (and `info`, `error`) log at most once per
    `interval_s` seconds per key. `clock` is a monotonic seconds function (tests)."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.logger = logger
        self.interval_s = float(interval_s)
        self._clock = clock
        self._lock = threading.Lock()
        # key -> [time of the last line, events suppressed since]
        self._seen: Dict[Hashable, List] = {}

    def _admit(self, key: Hashable) -> Optional[int]:
        """None: suppress this one; else log it, with this many suppressed before it."""
        now = self._clock()
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None and now - entry[0] < self.interval_s:
                entry[1] += 1
                return None
            if entry is None and len(self._seen) >= _MAX_KEYS:
                self._seen.clear()
            suppressed = entry[1] if entry is not None else 0
            self._seen[key] = [now, 0]
            return suppressed

    def log(self, level: int, key: Hashable, msg: str, *args, exc_info=None) -> bool:
        """Log `msg % args` at `level` unless `key` logged within the interval; True if
        it did. `exc_info` is passed on (use it only for events that cannot repeat per
        request: a traceback per request is what this class exists to prevent)."""
        suppressed = self._admit(key)
        if suppressed is None:
            return False
        if suppressed:
            msg = f"{msg} (and {suppressed} more like it in the last {self.interval_s:g} s)"
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def warning(self, key: Hashable, msg: str, *args, exc_info=None) -> bool:
        return self.log(logging.WARNING, key, msg, *args, exc_info=exc_info)

    def error(self, key: Hashable, msg: str, *args, exc_info=None) -> bool:
        return self.log(logging.ERROR, key, msg, *args, exc_info=exc_info)

    def info(self, key: Hashable, msg: str, *args, exc_info=None) -> bool:
        return self.log(logging.INFO, key, msg, *args, exc_info=exc_info)

"""Clocks. Everything in fastcoord reads time from an injected clock, so tests and
trace replays are exactly reproducible on a ManualClock."""
from __future__ import annotations

import time

__all__ = ["ManualClock", "SystemClock"]


class ManualClock:
    """Time in integer milliseconds that moves only when told."""

    __slots__ = ("_now",)
    is_manual = True

    def __init__(self, start_ms: int = 0) -> None:
        if isinstance(start_ms, bool) or not isinstance(start_ms, int):
            raise TypeError(f"start_ms must be an int, got {type(start_ms).__name__}")
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        """Move the clock forward by `ms` (>= 0) without firing anything."""
        if isinstance(ms, bool) or not isinstance(ms, int):
            raise TypeError(f"ms must be an int, got {type(ms).__name__}")
        if ms < 0:
            raise ValueError(f"ms must be >= 0, got {ms}")
        self._now += ms
        return self._now

    def set_ms(self, now_ms: int) -> None:
        """Set the time; it never moves backwards (used by discrete-event stepping)."""
        if now_ms > self._now:
            self._now = now_ms

    def __repr__(self) -> str:
        return f"ManualClock(now_ms={self._now})"


class SystemClock:
    """Milliseconds from the monotonic clock."""

    __slots__ = ()
    is_manual = False

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"

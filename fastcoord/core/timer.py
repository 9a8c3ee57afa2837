"""The hierarchical timing wheel's public entry point: `Timer(...)` returns an instance
of the chosen twin's class (`fastcoord.core._native.engines.Timer`, compiled, or
`fastcoord.core._pure.timer.Timer`, its readable specification).
"""
from __future__ import annotations

from .. import _twins

__all__ = ["Timer", "TimerHandle"]


class Timer:
    """Hierarchical timing wheel (docs/api.md). `impl` forces a twin."""

    def __new__(cls, clock, *, tick_ms: int = 1, wheel_size: int = 20, impl=None):
        return _twins.module(impl, "core.timer").Timer(clock, tick_ms=tick_ms, wheel_size=wheel_size)


TimerHandle = _twins.module(None, "core.timer").TimerHandle

"""Public entry points of the timer and purgatory: each constructor picks the twin.

`Timer(...)` and `Purgatory(...)` return an instance of the chosen twin's class
(`fastcoord._native.wheel.Timer` or `fastcoord._pure.wheel.Timer`, ...).
`DelayedOperation` is the base class of the default twin; both purgatories accept
operations derived from either twin's base class.
"""
from __future__ import annotations

from . import _compat

__all__ = ["Timer", "TimerHandle", "Purgatory", "DelayedOperation"]


class Timer:
    """Hierarchical timing wheel (spec/api.md). `impl` forces a twin."""

    def __new__(cls, clock, *, tick_ms: int = 1, wheel_size: int = 20, impl=None):
        return _compat.module(impl, "wheel").Timer(clock, tick_ms=tick_ms, wheel_size=wheel_size)


class Purgatory:
    """Delayed operations with watcher lists (spec/api.md). `impl` forces a twin;
    by default it follows the twin of `timer`."""

    def __new__(cls, name, timer, *, purge_interval: int = 1000, impl=None):
        if impl is None:
            impl = "native" if type(timer).__module__.startswith("fastcoord._native") else "pure"
        return _compat.module(impl, "purgatory").Purgatory(name, timer, purge_interval=purge_interval)


DelayedOperation = _compat.module(None, "purgatory").DelayedOperation
TimerHandle = _compat.module(None, "wheel").TimerHandle

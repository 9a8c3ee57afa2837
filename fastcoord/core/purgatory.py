"""The delayed-operation purgatory's public entry point: `Purgatory(...)` returns an
instance of the chosen twin's class (`fastcoord.core._native.engines.Purgatory` or
`fastcoord.core._pure.purgatory.Purgatory`). `DelayedOperation` is the default twin's
base class; both purgatories accept operations derived from either twin's base class.
The purgatory knows nothing of groups: an operation's `lock` is any lock.
"""
from __future__ import annotations

from .. import _twins

__all__ = ["Purgatory", "DelayedOperation"]


class Purgatory:
    """Delayed operations with watcher lists (docs/api.md). `impl` forces a twin;
    by default it follows the twin of `timer`."""

    def __new__(cls, name, timer, *, purge_interval: int = 1000, impl=None):
        if impl is None:
            native = type(timer).__module__.startswith("fastcoord.core._native")
            impl = "native" if native else "pure"
        return _twins.module(impl, "core.purgatory").Purgatory(name, timer, purge_interval=purge_interval)


DelayedOperation = _twins.module(None, "core.purgatory").DelayedOperation

"""Pick the twin: the compiled Cython core (native) or the pure-Python one.

Native is used when the extensions are built, unless FASTCOORD_NO_EXTENSIONS=1.
Every public constructor takes impl=None | "native" | "pure" to force one.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
from types import ModuleType

NO_EXTENSIONS = os.environ.get("FASTCOORD_NO_EXTENSIONS", "") not in ("", "0")

_BUILD_HINT = (
    "the fastcoord native extension is not built; build it with "
    "`pip install -e .` (or `make test`), without FASTCOORD_NO_EXTENSIONS set"
)

_native_error: "ImportError | None" = None
try:
    if NO_EXTENSIONS:
        raise ImportError("FASTCOORD_NO_EXTENSIONS is set")
    from fastcoord.core._native import engines as _native_engines  # noqa: F401  (probe: is it built?)
    NATIVE_AVAILABLE = True
except ImportError as exc:  # not built, or disabled
    NATIVE_AVAILABLE = False
    _native_error = exc

IMPLEMENTATION = "native" if NATIVE_AVAILABLE else "pure"


def resolve(impl: "str | None") -> str:
    """Validate an `impl=` argument and return "native" or "pure"."""
    if impl is None:
        return IMPLEMENTATION
    if impl == "pure":
        return "pure"
    if impl == "native":
        if not NATIVE_AVAILABLE:
            raise ImportError(f"{_BUILD_HINT} ({_native_error})")
        return "native"
    if not isinstance(impl, str):
        raise TypeError(f"impl must be None, 'native' or 'pure', got {type(impl).__name__}")
    raise ValueError(f"impl must be None, 'native' or 'pure', got {impl!r}")


# The native modules a subsystem builds into one extension (setup.py builds each
# _native/*.pyx, which may include parts): a twin module's name -> the extension that
# holds it, where they differ
_NATIVE_EXTENSION = {"core.timer": "engines", "core.purgatory": "engines",
                     "core.members": "engines", "core.assignors": "engines"}


def module(impl: "str | None", name: str) -> ModuleType:
    """The twin's module `name`, "<subsystem>.<module>", for the resolved `impl`:
    ("pure", "core.timer") is fastcoord.core._pure.timer, ("native", "core.timer")
    fastcoord.core._native.engines (the core's one extension)."""
    which = resolve(impl)
    subsystem, _, leaf = name.rpartition(".")
    if which == "native":
        leaf = _NATIVE_EXTENSION.get(name, leaf)
    return importlib.import_module(f"fastcoord.{subsystem}._{which}.{leaf}")


# The modules setup.py compiles in place, beside their .py: exactly the extension
# modules outside the _native folders that setup.py's compiled_python builds
# (tests/package/test_compiled_python.py, test_compiled_in_place_lists_what_the_build_compiled)
COMPILED_IN_PLACE = ("fastcoord.core.clock", "fastcoord.core.coordinator", "fastcoord.core.groups",
                     "fastcoord.core.store", "fastcoord.pipeline.replay")


class _SourceFirst(importlib.abc.MetaPathFinder):
    """With FASTCOORD_NO_EXTENSIONS set, COMPILED_IN_PLACE's modules load from their
    .py: an extension module beside a .py is what Python would import, and the pure
    setting promises plain Python throughout (a debugger's breakpoints, a profiler's
    lines). Every other module is left to the usual finders."""

    def find_spec(self, name, path, target=None):
        if name not in COMPILED_IN_PLACE or not path:
            return None
        source = os.path.join(path[0], name.rpartition(".")[2] + ".py")
        return importlib.util.spec_from_file_location(name, source)


if NO_EXTENSIONS:
    sys.meta_path.insert(0, _SourceFirst())

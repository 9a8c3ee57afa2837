"""Pick the twin: the compiled Cython core (native) or the pure-Python one.

Native is used when the extensions are built, unless FASTCOORD_NO_EXTENSIONS=1.
Every public constructor takes impl=None | "native" | "pure" to force one.
"""
from __future__ import annotations

import importlib
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
    from ._native import wheel as _native_wheel  # noqa: F401  (probe: is it built?)
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


def module(impl: "str | None", name: str) -> ModuleType:
    """The twin's submodule `name` (e.g. "wheel") for the resolved `impl`."""
    which = resolve(impl)
    return importlib.import_module(f"fastcoord._{which}.{name}")


def from_source(name: str) -> None:
    """With FASTCOORD_NO_EXTENSIONS set, load module `name` (one setup.py compiles in
    place: the thin API, the replay driver) from its .py, before anything imports it:
    an extension module beside a .py is what Python would import, and the pure setting
    promises plain Python throughout (a debugger's breakpoints, a profiler's lines).
    Called by the module's package before its first import; without the setting,
    nothing (the compiled module when built, else the .py)."""
    if not NO_EXTENSIONS or name in sys.modules:
        return
    package, _, child = name.rpartition(".")
    parent = sys.modules[package]
    path = os.path.join(os.path.dirname(parent.__file__), child + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    try:
        spec.loader.exec_module(loaded)
    except BaseException:
        del sys.modules[name]
        raise
    setattr(parent, child, loaded)

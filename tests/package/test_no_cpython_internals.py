"""The native core keeps to CPython's public C API: no private _Py* function, no
reference-count test or trick, no object built by hand at the allocator (a tuple filled
in place, a cached hash left as it was), no write at another class's slot offsets. Each
of these ties the extension to one CPython's layout (3.14 caches a tuple's hash; a
refcount of 1 means nothing on a free-threaded build, which the modules declare they
support). What C must read fast lives in a type it owns (ManualClock: clock.pxd).

Reads the hand-written sources (the .c files Cython writes are its own business)."""
from __future__ import annotations

import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "fastcoord"
SOURCES = sorted(p for ext in ("py", "pyx", "pxd", "pxi", "h") for p in PACKAGE.rglob(f"*.{ext}"))

FORBIDDEN = {
    "a private C API function": r"\b_Py[A-Z]\w*",
    "a reference count read or set": r"\b(Py_REFCNT|Py_SET_REFCNT|ob_refcnt)\b",
    "a tuple's cached hash": r"\bob_hash\b",
    "an allocation by hand": r"\b(tp_alloc|PyType_GenericAlloc)\b",
    "a tuple filled by hand": r"\bPyTuple_SET_ITEM\b",
    "a slot read at its offset": r"\b(PyMemberDef|PyMemberDescrObject|d_member)\b",
}


def test_the_sources_are_found():
    names = {p.name for p in SOURCES}
    assert {"timer.pyx", "runs.pyx", "groups.pxd", "groups.py", "clock.py"} <= names


@pytest.mark.parametrize("what", sorted(FORBIDDEN))
def test_no_source_uses_cpython_internals(what):
    pattern = re.compile(FORBIDDEN[what])
    hits = [f"{p.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
            for p in SOURCES
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if pattern.search(line)]
    assert not hits, f"{what}:\n" + "\n".join(hits)

"""The Python modules the native build compiles in place (setup.py): with the native
core built, each imports as an extension module built after its source's last change.
An extension module beside its .py is what Python imports, so one left stale by an
edit would run the old code in every test; and a build that stopped compiling one
would lose its speed without a test noticing."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

import fastcoord
from fastcoord._twins import COMPILED_IN_PLACE

COMPILED = list(COMPILED_IN_PLACE)
PACKAGE = os.path.dirname(os.path.abspath(fastcoord.__file__))


@pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE, reason="a build without extensions")
@pytest.mark.parametrize("name", COMPILED)
def test_compiled_module_is_loaded_and_current(name):
    module = importlib.import_module(name)
    assert module.__file__.endswith(".so"), f"{name} runs from {module.__file__}"
    stem = os.path.join(PACKAGE, name.split(".", 1)[1].replace(".", "/"))
    # the .py and the augmenting .pxd beside it, if it has one
    pxd = stem + ".pxd"
    for source in [stem + ".py"] + ([pxd] if os.path.exists(pxd) else []):
        assert os.path.getmtime(module.__file__) >= os.path.getmtime(source), (
            f"{module.__file__} is older than {source}: rebuild (make build)")


@pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE, reason="a build without extensions")
def test_compiled_in_place_lists_what_the_build_compiled():
    """The extension modules outside the _native folders are exactly COMPILED_IN_PLACE,
    the list the pure setting reads: setup.py's list and it agree."""
    built = set()
    for d, _, files in os.walk(PACKAGE):
        rel = os.path.relpath(d, os.path.dirname(PACKAGE)).replace(os.sep, ".")
        built.update(f"{rel}.{f.split('.', 1)[0]}" for f in files if f.endswith(".so"))
    assert {m for m in built if "._native." not in m} == \
        set(COMPILED_IN_PLACE)


def test_pure_setting_runs_the_python_sources():
    """FASTCOORD_NO_EXTENSIONS=1 at run time: the modules compiled in place load from
    their .py (what a debugger or a line profiler needs), the package's names and the
    module's are the same objects."""
    code = ("import fastcoord, fastcoord.core.coordinator as c\n"
            "from fastcoord.pipeline import replay\n"
            "import fastcoord.pipeline.replay as r\n"
            "assert fastcoord.IMPLEMENTATION == 'pure'\n"
            "assert fastcoord.GroupCoordinator is c.GroupCoordinator and replay is r\n"
            "print(c.__file__); print(r.__file__)\n")
    env = dict(os.environ, FASTCOORD_NO_EXTENSIONS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    files = out.stdout.split()
    assert [os.path.basename(f) for f in files] == ["coordinator.py", "replay.py"], files


def test_make_rebuilds_after_an_edit_of_each_compiled_module():
    """The Makefile's SOURCES, what `make build` (and every target after it) rebuilds
    for, covers each compiled module's .py: by name, or through the .pxd beside it (its
    wildcard rule takes the .py of every fastcoord/*/*.pxd)."""
    root = os.path.dirname(PACKAGE)
    with open(os.path.join(root, "Makefile"), encoding="utf-8") as f:
        makefile = f.read()
    sources = makefile[makefile.index("SOURCES :="):].split("\n\n", 1)[0]
    for name in COMPILED:
        path = name.replace(".", "/") + ".py"
        by_pxd = os.path.exists(os.path.join(root, path[:-3] + ".pxd")) and \
            path.count("/") == 2        # fastcoord/<subsystem>/<module>.py
        assert path in sources or by_pxd, f"make would not rebuild after an edit of {path}"

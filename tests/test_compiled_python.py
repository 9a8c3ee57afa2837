"""The Python modules the native build compiles in place (setup.py): with the native
core built, each imports as an extension module built after its source's last change.
An extension module beside its .py is what Python imports, so one left stale by an
edit would run the old code in every test; and a build that stopped compiling one
would lose its speed without a test noticing."""
from __future__ import annotations

import importlib
import os

import pytest

import fastcoord

COMPILED = ["fastcoord.coordinator", "fastcoord.pipeline.replay", "fastcoord._native.groups"]
SOURCES = {"fastcoord._native.groups": "_pure/groups.py"}


@pytest.mark.skipif(not fastcoord.NATIVE_AVAILABLE, reason="a build without extensions")
@pytest.mark.parametrize("name", COMPILED)
def test_compiled_module_is_loaded_and_current(name):
    module = importlib.import_module(name)
    assert module.__file__.endswith(".so"), f"{name} runs from {module.__file__}"
    package = os.path.dirname(os.path.abspath(fastcoord.__file__))
    rel = SOURCES.get(name, name.split(".", 1)[1].replace(".", "/") + ".py")
    source = os.path.join(package, rel)
    assert os.path.getmtime(module.__file__) >= os.path.getmtime(source), (
        f"{module.__file__} is older than {source}: rebuild (make build)")

"""The layout's rule: dependencies point down. The core imports nothing from the
server, storage, pipeline or load generator; storage nothing above it; the server
nothing from the pipeline or load generator; the pipeline nothing from the server; the
purgatory nothing of members or groups. Read from the sources (Python imports, Cython
cimports and imports), so a violation fails here before it becomes a cycle."""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "fastcoord"

# subsystem -> the subsystems it must not import
FORBIDDEN = {
    "core": ("server", "storage", "pipeline", "loadgen"),
    "storage": ("server", "pipeline", "loadgen"),
    "server": ("pipeline", "loadgen"),
    "pipeline": ("server", "loadgen"),
}
_CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import|c?import\s+([\w.]+))", re.M)


def _imports(path: pathlib.Path) -> set:
    """The absolute module names a source imports (relative ones resolved)."""
    text = path.read_text(encoding="utf-8")
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    package = parts[:-1]
    if path.suffix != ".py":
        return {a or b for a, b in _CYTHON_IMPORT.findall(text)}
    names = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
                names.add(module)
                names.update(f"{module}.{alias.name}" for alias in node.names)
            elif node.module:
                names.add(node.module)
    return names


def _sources(subsystem: str):
    for suffix in ("*.py", "*.pyx", "*.pxd"):
        yield from (PACKAGE / subsystem).rglob(suffix)


@pytest.mark.parametrize("subsystem", sorted(FORBIDDEN))
def test_dependencies_point_down(subsystem):
    bad = []
    for path in _sources(subsystem):
        for name in _imports(path):
            for other in FORBIDDEN[subsystem]:
                if name == f"fastcoord.{other}" or name.startswith(f"fastcoord.{other}."):
                    bad.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert bad == []


def test_the_purgatory_knows_nothing_of_groups():
    paths = [p for p in (PACKAGE / "core").rglob("purgatory.*")
             if p.suffix in (".py", ".pyx", ".pxd")]
    assert len(paths) == 4      # the constructor, the pure twin, the native part and its .pxd
    bad = [f"{p.name}: {name}" for p in paths for name in _imports(p)
           if re.search(r"\b(members|groups|coordinator)\b", name)]
    assert bad == []


def test_the_checker_sees_a_violation(tmp_path, monkeypatch):
    """The scan reads relative and Cython imports: a core module importing the server
    either way is caught."""
    core = tmp_path / "fastcoord" / "core"
    core.mkdir(parents=True)
    (core / "a.py").write_text("from ..server import protocol\n")
    (core / "b.pyx").write_text("from fastcoord.server._native.wire cimport HeartbeatReader\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path / "fastcoord")
    assert "fastcoord.server" in _imports(core / "a.py")
    assert "fastcoord.server._native.wire" in _imports(core / "b.pyx")
    with pytest.raises(AssertionError):
        test_dependencies_point_down("core")


def test_the_core_tier_needs_no_server_extra():
    """tests/core (and the helpers it imports) imports nothing of the server or kio: the
    core tier runs on every supported Python with only the test extra (make
    test-other-python), and kio, which the server needs, wants Python 3.11."""
    tests = PACKAGE.parent / "tests"
    paths = sorted((tests / "core").glob("*.py"))
    helpers = {name for p in paths for name in _imports(p) if name.startswith("helpers.")}
    paths += [tests / "helpers" / f"{name.split('.')[1]}.py" for name in sorted(helpers)
              if (tests / "helpers" / f"{name.split('.')[1]}.py").exists()]
    assert len(paths) > 20
    bad = [f"{p.relative_to(tests)} imports {name}" for p in paths for name in _imports(p)
           if name == "kio" or name.startswith(("kio.", "fastcoord.server"))]
    assert bad == []

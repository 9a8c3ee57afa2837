"""Every marker pyproject.toml declares is applied somewhere in tests/: with
--strict-markers a typo fails, and a declared marker nothing carries would promise a
selection (-m NAME) that selects nothing."""
from __future__ import annotations

import pathlib
import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def declared() -> list:
    with open(ROOT / "pyproject.toml", "rb") as f:
        ini = tomllib.load(f)["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in ini["addopts"].split()
    return [line.split(":", 1)[0].strip() for line in ini["markers"]]


def test_every_declared_marker_is_used():
    text = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("*.py"))
    used = set(re.findall(r"pytest\.mark\.(\w+)", text))
    names = declared()
    assert names, "no markers declared"
    assert [m for m in names if m not in used] == []

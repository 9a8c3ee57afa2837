"""Durations as the pipeline's commands take them ('10s', '500ms', '2m').

Standard library only: the command line parses these while it builds its parsers, so
this module must import without the spark extra (`fastcoord serve --help` and
`fastcoord demo` build the same parsers).
"""
from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(-?)\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")


def parse_duration(text: str) -> int:
    """'10s' / '500ms' / '2m' -> milliseconds; ValueError otherwise. A unit is required:
    a bare '5' is refused (read as ms it was a 5 ms session, a simulation of millions of
    heartbeats; read as seconds, a guess)."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (use e.g. 500ms, 10s, 2m)")
    if m.group(1):
        raise ValueError(f"a duration must be positive: {text!r}")
    if m.group(3) is None:
        raise ValueError(f"a duration needs a unit: {text!r} (500ms, 10s or 2m?)")
    ms = float(m.group(2)) * {"ms": 1, "s": 1000, "m": 60_000}[m.group(3)]
    if ms != int(ms) or ms <= 0:
        raise ValueError(f"a duration must be a positive whole number of ms: {text!r}")
    return int(ms)

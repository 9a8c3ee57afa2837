"""The pure twin's group state machine: `fastcoord/core/groups.py`, run as Python.

The state machine has one source. Built, `fastcoord.core.groups` is that file compiled
by Cython (the native twin's, with `groups.pxd` beside it); the pure twin needs the
same file as plain Python under a name of its own, so both twins can live in one
process. This module executes that source in its own namespace: tracebacks, debuggers
and profilers show the lines of `core/groups.py`.
"""
import os

_SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "groups.py")

with open(_SOURCE, encoding="utf-8") as _file:
    exec(compile(_file.read(), _SOURCE, "exec"), globals())

del _file

"""Type stub for the native group state machine: fastcoord/_pure/groups.py compiled by
Cython as it is (setup.py), so its names and types are the pure module's."""
from fastcoord._pure.groups import *  # noqa: F401,F403
from fastcoord._pure.groups import _OM_DEFAULTS as _OM_DEFAULTS  # noqa: F401  (not in *)

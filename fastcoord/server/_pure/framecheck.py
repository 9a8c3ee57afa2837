"""Request frames' length prefixes checked before kio decodes them, pure twin: the
walk of fastcoord/server/framecheck.py (where both twins' schema compilation lives).
fastcoord/server/_native/framecheck.pyx runs the same check as a compiled program in C."""
from __future__ import annotations

from ..framecheck import FrameError, check_request

__all__ = ["FrameError", "check_request"]

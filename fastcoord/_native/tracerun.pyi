"""Type stub for the native trace-replay heartbeat runs (twin: fastcoord/_pure/tracerun.py)."""
from typing import Any, List, Optional, Tuple

HEARTBEAT: int
COMMIT: int
NO_HANDLE: int
LOOK_UP: int
NOT_ARMED: int

class HeartbeatRun:
    arm: int
    def __init__(self, coordinator: Any, kinds: Any, times: Any, members: Any, groups: Any,
                 errors: Any, answered: Any, handles: Any, generations: Any, check_at: Any,
                 last_touch: Any, group_events: Any, *, offsets: Any = None,
                 instances: Optional[List[Optional[str]]] = None,
                 partition: Optional[Tuple[str, int]] = None) -> None: ...
    @property
    def now(self) -> int: ...
    def run(self, i: int, check_due: int, stop: Optional[int] = None) -> int: ...

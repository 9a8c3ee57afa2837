"""Type stub for the native trace-replay heartbeat runs (twin: fastcoord/pipeline/_pure/runs.py)."""
from typing import Any, List, Optional, Tuple

HEARTBEAT: int
COMMIT: int
NO_HANDLE: int
LOOK_UP: int
NOT_ARMED: int
NEVER: int

class CheckHeap:
    def __len__(self) -> int: ...
    def push(self, deadline: int, code: int) -> None: ...
    def next_due(self) -> int: ...
    def pop(self) -> Tuple[int, int]: ...

class HeartbeatRun:
    left_commit: bool
    def __init__(self, coordinator: Any, kinds: Any, times: Any, members: Any, groups: Any,
                 errors: Any, answered: Any, handles: Any, generations: Any, check_at: Any,
                 last_touch: Any, group_events: Any, *, checks: CheckHeap, sessions: Any,
                 replaced: Any, group_check_at: Any, offsets: Any = None,
                 instances: Optional[List[Optional[str]]] = None,
                 partition: Optional[Tuple[str, int]] = None) -> None: ...
    @property
    def now(self) -> int: ...
    def settle_checks(self, t: int) -> bool: ...
    def run(self, i: int, stop: Optional[int] = None) -> int: ...

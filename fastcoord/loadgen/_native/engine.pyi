from typing import Any, Dict, Iterable, List, Optional

def run_heartbeats(fds: Iterable[int], frames: Iterable[List[bytes]], *, pipeline: int = 1,
                   rate: Optional[float] = None, duration_s: float = 1.0,
                   warmup_s: float = 0.0, drain_s: float = 10.0) -> Dict[str, Any]: ...

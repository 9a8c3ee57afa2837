from typing import Callable, Deque, List, Optional, Tuple

def heartbeat_run(buf: bytearray, pos: int, max_frame: int, min_version: int,
                  max_version: int, heartbeat: Callable[[str, str, int, Optional[str]], int],
                  out: List[bytes],
                  log: Optional[List[Tuple[int, Optional[str], str, str, int, int,
                                           Optional[str]]]] = ...) -> int: ...


class HeartbeatReader:
    """One read's leading plain Heartbeat frames answered in C, their responses handed
    to `write` in one call; returns the bytes consumed."""
    answered: int

    def __init__(self, heartbeat: Callable[[str, str, int, Optional[str]], int],
                 max_frame: int, min_version: int, max_version: int,
                 latencies: Optional[Deque[float]] = ...,
                 log: Optional[Callable[[bytes], object]] = ...) -> None: ...
    log: Optional[Callable[[bytes], object]]
    def __call__(self, data: bytes, write: Callable[[bytes], object],
                 host: Optional[bytes] = ...) -> int: ...
    def flush_log(self) -> None: ...


def consumer_heartbeat_frame(
        frame: bytes, min_version: int, max_version: int,
        steady: Callable[[str, str, int, str, str], object], client_id: str,
        client_host: str) -> Optional[Tuple[bytes, int, Optional[str], str, str, int]]: ...

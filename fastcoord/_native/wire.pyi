from typing import Callable, List, Optional, Tuple

def heartbeat_run(buf: bytearray, pos: int, max_frame: int, min_version: int,
                  max_version: int, heartbeat: Callable[[str, str, int, Optional[str]], int],
                  out: List[bytes],
                  log: Optional[List[Tuple[int, Optional[str], str, str, int, int]]] = ...) -> int: ...

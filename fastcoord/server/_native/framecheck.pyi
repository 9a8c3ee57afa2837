from typing import Union

from fastcoord.server.framecheck import FrameError as FrameError

_Buffer = Union[bytes, bytearray, memoryview]

class RequestProgram:
    """One request class's frame-check program, in C memory."""
    def __init__(self, cls: type) -> None: ...
    def walk(self, frame: _Buffer) -> int: ...

def check_request(cls: type, frame: _Buffer) -> int: ...

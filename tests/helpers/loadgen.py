"""A Loadgen set up against a ServerProc, for module-scoped fixtures
(tests/loadgen/test_loadgen_engine.py, tests/server/test_loadgen_consumer.py)."""
from __future__ import annotations

import asyncio
import contextlib
from typing import Callable


@contextlib.contextmanager
def loadgen_on(server, loop: asyncio.AbstractEventLoop, make: Callable[[int], object]):
    """`make(server.port)`'s Loadgen set up on `loop` (its members made on `server`),
    yielded, then closed with the loop and the server, which must stop cleanly; the
    server is stopped whatever fails first (even making the Loadgen)."""
    gen = None
    try:
        gen = make(server.port)
        loop.run_until_complete(gen.__aenter__())
        yield gen
    finally:
        try:
            if gen is not None:
                loop.run_until_complete(gen.__aexit__(None, None, None))
            loop.close()
        finally:
            assert server.stop() == 0, server.log()

"""A Loadgen set up against a ServerProc, for module-scoped fixtures
(tests/loadgen/test_loadgen_engine.py, tests/server/test_loadgen_consumer.py)."""
from __future__ import annotations

import asyncio
import contextlib


@contextlib.contextmanager
def loadgen_on(server, loop: asyncio.AbstractEventLoop, gen):
    """Set `gen` up on `loop` (its members made on `server`), yield it, then close it,
    the loop and the server, which must stop cleanly."""
    try:
        loop.run_until_complete(gen.__aenter__())
        yield gen
    finally:
        try:
            loop.run_until_complete(gen.__aexit__(None, None, None))
            loop.close()
        finally:
            assert server.stop() == 0, server.log()

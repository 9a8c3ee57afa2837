"""The cyclic GC pause around a store's bulk decoding (fastcoord.storage.durable._no_gc):
loads run in several threads at once, so the GC stays paused until the last of them
ends, and what they built goes to the oldest generation rather than the youngest."""
from __future__ import annotations

import gc
import subprocess
import sys
import threading

from fastcoord.storage.durable import _no_gc


def test_the_gc_stays_paused_until_the_last_overlapping_block_ends():
    assert gc.isenabled()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with _no_gc():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second():
        first_in.wait(5)
        with _no_gc():
            second_in.set()
            first_out.wait(5)
            seen["after the first ended"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"after the first ended": False}
    assert gc.isenabled()


_OLDEST = """
import gc
from fastcoord.storage.durable import _no_gc
with _no_gc():
    built = [[i] for i in range(1000)]
ids = {id(x) for x in built}
assert not ids & {id(o) for o in gc.get_objects(generation=0)}
assert ids <= {id(o) for o in gc.get_objects(generation=2)}
"""


def test_what_a_block_built_goes_to_the_oldest_generation():
    # In a fresh interpreter: the move is skipped in a process that froze objects of its
    # own (gc.freeze: the load generator does), which an earlier test may have done here.
    subprocess.run([sys.executable, "-c", _OLDEST], check=True, timeout=60)


def test_a_disabled_gc_stays_disabled():
    gc.disable()
    try:
        with _no_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()

"""Crash test with real processes: a child (`python tests/helpers/crashchild.py`) runs
a coordinator on a DurableStore (fsync "always", small segments so rolls and background
compactions happen under fire) and commits offsets at full speed, printing every
acknowledged commit; the test SIGKILLs it at random moments (some during its startup and
loading), restarts it, and checks that every acknowledged commit came back, that nothing
came back that was never written, and that every restart loaded without corruption."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from helpers import crashchild

CYCLES = 20
# run by its path: a script of the tests, not a module of the package
CHILD = crashchild.__file__
READY_TIMEOUT = 30.0


class Child:
    def __init__(self, data_dir, impl):
        self.proc = subprocess.Popen(
            [sys.executable, CHILD, str(data_dir), "--impl", impl,
             "--threads", "4", "--groups", "8", "--partitions", "4", "--num-shards", "8",
             "--segment-bytes", "16384", "--compact-after-segments", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines = []
        self.ready = threading.Event()
        self.stderr = b""
        self._out = threading.Thread(target=self._read_stdout, daemon=True)
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        self._out.start()
        self._err.start()

    def _read_stdout(self):
        for line in self.proc.stdout:
            if line == b"READY\n":
                self.ready.set()
            else:
                self.lines.append(line)

    def _read_stderr(self):
        self.stderr = self.proc.stderr.read()

    def kill(self):
        """SIGKILL by pid; wait for it and for the pipes to drain (all bounded)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._out.join(10)
        self._err.join(10)
        assert not self._out.is_alive() and not self._err.is_alive(), "pipes did not close"
        self.proc.stdout.close()
        self.proc.stderr.close()

    def records(self, kind):
        out = {}
        for line in self.lines:
            parts = line.split()
            if parts and parts[0] == kind.encode():
                out[(parts[1].decode(), int(parts[2]))] = int(parts[3])
        return out


@pytest.mark.slow
def test_sigkill_never_loses_an_acknowledged_commit(impl, tmp_path):
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    acked = {}          # (group, partition) -> highest acknowledged offset
    known = {}          # highest offset known to have been written (acked or loaded)
    started = time.monotonic()
    total_acks = early_kills = torn = 0
    for cycle in range(CYCLES + 1):
        child = Child(tmp_path, impl)
        try:
            kill_early = cycle < CYCLES and rng.random() < 0.2
            if kill_early:                                   # somewhere in startup / loading
                time.sleep(rng.uniform(0.0, 0.4))
                if not child.ready.is_set():
                    early_kills += 1
                    child.kill()
                    continue
            assert child.ready.wait(READY_TIMEOUT), \
                f"cycle {cycle}: child never became ready (seed {seed}): {child.stderr[-2000:]!r}"
            loaded = child.records("L")
            for key, offset in acked.items():
                assert key in loaded, f"cycle {cycle} (seed {seed}): acknowledged {key}@{offset} lost"
                assert loaded[key] >= offset, \
                    f"cycle {cycle} (seed {seed}): {key} acknowledged {offset}, loaded {loaded[key]}"
            for key, offset in loaded.items():
                assert offset <= known.get(key, -1) + 1, \
                    f"cycle {cycle} (seed {seed}): {key} loaded {offset}, never written"
                known[key] = max(known.get(key, -1), offset)
            if cycle == CYCLES:
                break
            time.sleep(rng.uniform(0.05, 0.3))
        finally:
            child.kill()
        assert b"Traceback" not in child.stderr, child.stderr.decode(errors="replace")
        torn += child.stderr.count(b"torn record")
        acks = child.records("A")
        total_acks += len([line for line in child.lines if line.startswith(b"A ")])
        for key, offset in acks.items():
            acked[key] = max(acked.get(key, -1), offset)
            known[key] = max(known.get(key, -1), offset)
    elapsed = time.monotonic() - started
    assert total_acks > 1000, f"only {total_acks} commits acknowledged: the test exercised little"
    assert len(acked) == 32
    print(f"\n{impl}: {CYCLES} kills ({early_kills} during startup), {total_acks} acknowledged "
          f"commits, {torn} torn tails truncated, {elapsed:.1f} s, seed {seed}")
    assert elapsed < 60

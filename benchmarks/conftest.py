"""One test body for both twins: the `impl` fixture (the aio-libs pattern); and the
machine's speed at the start and the end of the run, recorded with every benchmark file
(`python_loop_ns_start`, `python_loop_ns_end`) and its memory's
(`memory_gather_ns_start`, `memory_gather_ns_end`)."""
import time

import pytest

import fastcoord

IMPLS = ["native", "pure"] if fastcoord.NATIVE_AVAILABLE else ["pure"]


@pytest.fixture(scope="session", params=IMPLS)
def impl(request) -> str:
    return request.param


def python_loop_ns(iterations: int = 1_000_000, rounds: int = 5) -> float:
    """Nanoseconds per iteration of a plain Python loop (`for i in range(n): s += i`),
    the best of `rounds`: how fast this machine runs the interpreter just then. The VMs
    benchmarks run on differ, and one VM drifts within a session (this loop measured
    28 to 67 ns in one; the same tree's one-core replay of the 10M trace took 8.3 s in
    one session and 13.2 and 16.8 s in two runs of another), so a figure is comparable
    with another run's only where these are about the same; ratios measured in one run
    are, whatever they say."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        s = 0
        for i in range(iterations):
            s += i
        best = min(best, time.perf_counter() - t0)
    return round(best * 1e9 / iterations, 1)


def memory_gather_ns(elements: int = 1 << 24, rounds: int = 3) -> float:
    """Nanoseconds per element of a random gather (numpy `take` of 16M int64 from a
    128 MiB array in a random order), the best of `rounds` after one that faults the
    pages in: how fast this machine's memory answers cache misses just then. The VM's
    memory phase moves on its own, apart from the interpreter loop's: a run whose
    loop is fast can still be slow at the member table's and the replay's misses."""
    import numpy as np
    src = np.arange(elements, dtype=np.int64)
    order = np.random.default_rng(0).permutation(elements)
    out = np.empty(elements, np.int64)
    np.take(src, order, out=out)
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        np.take(src, order, out=out)
        best = min(best, time.perf_counter() - t0)
    return round(best * 1e9 / elements, 1)


_SPEED_AT_START = {}


def pytest_sessionstart(session):
    # (only where results are saved: `make test` runs each benchmark once, disabled)
    config = session.config
    if config.pluginmanager.hasplugin("benchmark") and not config.getoption("benchmark_disable"):
        _SPEED_AT_START["ns"] = python_loop_ns()
        _SPEED_AT_START["gather_ns"] = memory_gather_ns()


def pytest_benchmark_update_machine_info(config, machine_info):
    # (pytest-benchmark asks for this when it saves, at the end of the run)
    machine_info["python_loop_ns_start"] = _SPEED_AT_START.get("ns")
    machine_info["python_loop_ns_end"] = python_loop_ns()
    machine_info["memory_gather_ns_start"] = _SPEED_AT_START.get("gather_ns")
    machine_info["memory_gather_ns_end"] = memory_gather_ns()

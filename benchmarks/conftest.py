"""One test body for both twins: the `impl` fixture (the aio-libs pattern); and the
machine's speed, recorded with every benchmark file (`python_loop_ns`)."""
import time

import pytest

import fastcoord

IMPLS = ["native", "pure"] if fastcoord.NATIVE_AVAILABLE else ["pure"]


@pytest.fixture(scope="session", params=IMPLS)
def impl(request) -> str:
    return request.param


def python_loop_ns(iterations: int = 1_000_000, rounds: int = 5) -> float:
    """Nanoseconds per iteration of a plain Python loop (`for i in range(n): s += i`),
    the best of `rounds`: how fast this machine runs the interpreter at the start of a
    run. The VMs benchmarks run on differ (the same tree's one-core replay took 8.3 s on
    one and 13.7 s on another), so a figure is comparable with another run's only where
    this one is about the same; ratios measured in one run are, whatever it says."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        s = 0
        for i in range(iterations):
            s += i
        best = min(best, time.perf_counter() - t0)
    return round(best * 1e9 / iterations, 1)


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["python_loop_ns"] = python_loop_ns()

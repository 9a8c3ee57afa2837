"""The regression gate that does not flake: instructions per operation of each hot path.

Each hot path (scalar heartbeat, heartbeat_batch, timer schedule/cancel/expire, a
10-member rebalance) runs a small fixed workload under `valgrind --tool=callgrind`
(benchmarks/profile_workloads.py: N and 2N operations, the difference divided by N).
Instruction counts do not depend on the machine's load, so this is exact from run to
run; the test fails when a path costs more than its committed baseline
(bench_results/instructions.json) plus the tolerance. A deliberate change of cost:
`make bench-baseline`, then commit bench_results/instructions.json.

Skips only when valgrind is absent (`make test` installs it when it can) or the
interpreter's version differs from the baseline's (counts are interpreter-specific).
"""
from __future__ import annotations

import json
import pathlib
import platform
import shutil
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import profile_workloads as pw  # noqa: E402

# the fixture counts every path under callgrind once, before the first case
pytestmark = pytest.mark.slow

BASELINE = json.loads(pw.BASELINE.read_text())
CASES = [(impl, path) for impl in ("native", "pure") for path in pw.PATHS
         if path in BASELINE["instructions_per_op"].get(impl, {})]


def _skip_reason():
    if shutil.which("valgrind") is None:
        return "valgrind is not installed (apt-get install -y valgrind; `make test` does it as root)"
    base_py = BASELINE["environment"]["python"].rsplit(".", 1)[0]
    here_py = platform.python_version().rsplit(".", 1)[0]
    if base_py != here_py:
        return f"baseline counted on Python {base_py}, this is {here_py}: run `make bench-baseline`"
    return None


@pytest.fixture(scope="module")
def measured():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    impls = pw.impls_available()
    return pw.count_all(impls, list(pw.PATHS))


@pytest.mark.parametrize("impl,path", CASES, ids=[f"{i}-{p}" for i, p in CASES])
def test_instructions_per_op(measured, impl, path):
    if impl not in measured:
        pytest.skip(f"the {impl} twin is not available here")
    base = BASELINE["instructions_per_op"][impl][path]
    tol = BASELINE.get("tolerance", pw.TOLERANCE)
    got = measured[impl][path]["per_op"]
    change = (got - base) / base
    assert got <= base * (1 + tol), (
        f"instruction-count regression in the {impl} {path} path "
        f"({pw.DESCRIPTIONS[path]}): {got:,.1f} instructions/op measured vs baseline "
        f"{base:,.1f} ({change:+.1%}, tolerance {tol:.0%}). If the extra cost is deliberate, "
        f"run `make bench-baseline` and commit bench_results/instructions.json.")
    if change < -tol:
        print(f"\n{impl} {path}: {got:,.1f} instructions/op, {change:+.1%} below baseline "
              f"{base:,.1f}: consider `make bench-baseline`")

"""How many examples the randomized tests draw. `make test-core`, the quick tier (meant
to take under a minute), sets FASTCOORD_QUICK=1: the state machines and the property
tests that take seconds then draw a quarter of the examples that `make test` draws."""
import os

QUICK = os.environ.get("FASTCOORD_QUICK", "") not in ("", "0")


def examples(n: int) -> int:
    """`n` examples, or a quarter of them (10 at least) in the quick tier."""
    return max(10, n // 4) if QUICK else n

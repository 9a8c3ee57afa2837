"""RateLimitedLog: one line per key per interval, the suppressed ones counted."""
import logging

import pytest

from fastcoord._ratelog import RateLimitedLog


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_key_per_interval(caplog):
    clock = _Clock()
    rl = RateLimitedLog(logging.getLogger("test.ratelog"), interval_s=10, clock=clock)
    with caplog.at_level(logging.INFO, logger="test.ratelog"):
        assert rl.warning("a", "bad frame from %s", "x") is True
        for _ in range(5):
            assert rl.warning("a", "bad frame from %s", "x") is False
        assert rl.warning("b", "other") is True          # another key is not held back
        clock.now += 10
        assert rl.error("a", "bad frame from %s", "y") is True
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["bad frame from x", "other",
                     "bad frame from y (and 5 more like it in the last 10 s)"]
    assert caplog.records[2].levelno == logging.ERROR


def test_key_table_is_bounded():
    clock = _Clock()
    rl = RateLimitedLog(logging.getLogger("test.ratelog"), interval_s=10, clock=clock)
    for i in range(10_000):
        rl.info(("peer", i), "x")
    assert len(rl._seen) <= 4096


@pytest.mark.parametrize("bad", [0, -1, float("nan")])
def test_interval_must_be_positive(bad):
    with pytest.raises(ValueError):
        RateLimitedLog(logging.getLogger("x"), interval_s=bad)

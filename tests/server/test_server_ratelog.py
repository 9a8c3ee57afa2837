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


# -- ClipFilter: bounded lines ---------------------------------------------------------------
def _clipped(record_args, msg="member %s of group %s joined"):
    from fastcoord._logclip import ClipFilter
    record = logging.LogRecord("fastcoord", logging.INFO, __file__, 1, msg, record_args, None)
    assert ClipFilter(arg_limit=256, line_limit=4096).filter(record) is True
    return record.getMessage()


def test_clip_filter_shortens_long_arguments_and_keeps_both_ends():
    member = "m-" + "x" * 100_000 + "-end"
    line = _clipped((member, "g"))
    assert len(line) < 400
    assert line.startswith("member m-xxx") and "-end of group g joined" in line
    assert f"({len(member) - 2 * (256 // 2 - 16)} characters)" in line


def test_clip_filter_leaves_short_lines_alone_and_clips_a_long_message():
    assert _clipped(("m-1", "g")) == "member m-1 of group g joined"
    assert _clipped(({"a": "y" * 10_000},), msg="%(a)s").count("y") < 300
    long_message = "z" * 50_000
    assert len(_clipped(None, msg=long_message)) <= 4096
    # many short arguments that add up to a long line
    assert len(_clipped(tuple("w" * 200 for _ in range(100)), msg="%s" * 100)) <= 4096


def test_clip_filter_lets_a_bad_format_through_for_logging_to_report():
    from fastcoord._logclip import ClipFilter
    record = logging.LogRecord("fastcoord", logging.INFO, __file__, 1, "%d", ("x",), None)
    assert ClipFilter().filter(record) is True and record.args == ("x",)

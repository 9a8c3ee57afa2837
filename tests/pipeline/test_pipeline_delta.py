"""The result blobs' step encoding (fastcoord/pipeline/delta.py): any table comes back
bit for bit, and the columns it is for do travel as int32 steps."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord.pipeline.delta import BASE_KEY, STEP_KEY, from_steps, to_steps

INT64 = st.integers(-2**63, 2**63 - 1)
# values near each other (steps that fit), far apart (steps that do not), and -1
NEAR = st.integers(1_700_000_000_000 - 10**6, 1_700_000_000_000 + 10**6)
VALUE = st.one_of(NEAR, INT64, st.just(-1), st.just(0))


def _column(draw, n: int):
    values = draw(st.lists(VALUE, min_size=n, max_size=n))
    nulls = draw(st.sampled_from([False, False, True]))
    mask = [draw(st.booleans()) for _ in range(n)] if nulls else None
    return pa.array(values, pa.int64(), mask=np.array(mask, bool) if mask else None)


@st.composite
def tables(draw):
    n = draw(st.integers(0, 40))
    columns = {"shard": pa.array([3] * n, pa.int32())}
    for name in ("seq", "time_ms", "answered_ms"):
        if draw(st.booleans()) or n == 0:
            columns[name] = _column(draw, n)
    columns["error"] = pa.array(draw(st.lists(st.integers(-1, 100), min_size=n, max_size=n)),
                                pa.int32())
    table = pa.table(columns)
    if n > 1 and draw(st.booleans()):          # several chunks, as a sliced table may have
        cut = draw(st.integers(1, n - 1))
        table = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
    return table


@settings(max_examples=300, deadline=None)
@given(tables())
def test_any_table_comes_back_exactly(table):
    back = from_steps(to_steps(table))
    assert back.schema == table.schema
    assert back.equals(table)


def test_a_responses_table_goes_as_int32_steps():
    """The replay's responses as a trace has them: the three columns become int32 steps
    (an unanswered request a null step), smaller once compressed, and come back."""
    from fastcoord.pipeline.spark import table_to_ipc
    rng = np.random.default_rng(7)
    n = 50_000
    times = 1_700_000_000_000 + np.cumsum(rng.integers(0, 5, n))
    seqs = 10**12 + np.cumsum(rng.integers(1, 60, n))        # (no int32 holds these)
    answered = np.where(rng.random(n) < 0.01, -1, times + rng.integers(0, 3000, n))
    table = pa.table({"seq": seqs, "time_ms": times, "answered_ms": answered,
                      "error": pa.array(np.zeros(n, np.int32))})
    stepped = to_steps(table)
    for name in ("seq", "time_ms", "answered_ms"):
        field = stepped.schema.field(name)
        assert field.type == pa.int32() and STEP_KEY in field.metadata, field
    assert int(stepped.schema.field("seq").metadata[BASE_KEY]) == seqs[0]
    assert stepped.column("answered_ms").null_count == int((answered == -1).sum())
    assert len(table_to_ipc(stepped)) < 0.7 * len(table_to_ipc(table))
    assert from_steps(stepped).equals(table)


def test_steps_that_do_not_fit_leave_the_column_as_it_is():
    table = pa.table({"seq": pa.array([0, 2**40], pa.int64()),
                      "time_ms": pa.array([5, 6], pa.int64()),
                      "answered_ms": pa.array([-1, 6 + 2**31], pa.int64())})
    stepped = to_steps(table)
    assert stepped.schema.field("seq").type == pa.int64()
    assert stepped.schema.field("time_ms").type == pa.int32()
    assert stepped.schema.field("answered_ms").type == pa.int64()
    assert from_steps(stepped).equals(table)


def test_answers_stepped_from_undecodable_times_are_refused():
    """A blob whose answers are steps from a time column it cannot decode is an error,
    never wrong times."""
    stepped = to_steps(pa.table({"time_ms": pa.array([5, 6], pa.int64()),
                                 "answered_ms": pa.array([7, -1], pa.int64())}))
    broken = stepped.set_column(
        0, pa.field("time_ms", pa.int32(), metadata={STEP_KEY: b"unknown"}),
        stepped.column("time_ms"))
    with pytest.raises(ValueError, match="answered_ms"):
        from_steps(broken)


def test_answers_stepped_from_a_missing_time_column_are_refused():
    stepped = to_steps(pa.table({"time_ms": pa.array([5, 6], pa.int64()),
                                 "answered_ms": pa.array([7, -1], pa.int64())}))
    with pytest.raises(ValueError, match="answered_ms"):
        from_steps(stepped.drop_columns(["time_ms"]))


def test_result_blobs_carry_the_steps():
    """table_blobs sends a responses-shaped table's columns as steps (each blob's
    schema says so), and blob_tables gives the table back."""
    from fastcoord.pipeline.spark import blob_tables, table_blobs, table_from_ipc
    n = 1000
    times = 1_700_000_000_000 + np.arange(n, dtype=np.int64) * 3
    table = pa.table({"seq": np.arange(n, dtype=np.int64) * 7, "time_ms": times,
                      "answered_ms": np.where(np.arange(n) % 10 == 0, -1, times + 1)})
    blobs = table_blobs("responses", table)
    for blob in blobs.column("ipc").to_pylist():
        schema = table_from_ipc(blob).schema
        assert all(schema.field(c).type == pa.int32() for c in table.column_names), schema
    got = blob_tables([{"table": "responses", "ipc": b} for b in blobs.column("ipc").to_pylist()],
                      {"responses": table.schema})["responses"]
    assert got.equals(table)

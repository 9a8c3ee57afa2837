"""The result blobs' step encoding: a table's int64 columns of small steps sent as int32
steps, which LZ4 compresses to a fraction, and faster, than the values themselves.

A replay's responses table (a row per trace event) is most of what its tasks send the
driver, and three of its columns are int64 values that move by small steps: `seq` and
`time_ms` from one row to the next (trace order), `answered_ms` from the row's own
time (-1: not answered). As steps they compress to fewer bytes, and faster, the
steps' computation included (table_blobs).

A column goes as steps only when every step fits in an int32 and the column holds no
null (else it goes as it is); the field's metadata says how its steps decode, so a
blob decodes by itself. Decoding adds the steps back in int64 arithmetic, which wraps
exactly as the subtraction that made them did: the values come back bit for bit.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

__all__ = ["to_steps", "from_steps", "STEP_KEY", "BASE_KEY"]

STEP_KEY = b"fastcoord.step"    # field metadata: what a column's int32 steps are from
BASE_KEY = b"fastcoord.base"    # ... and the first row's value, for steps from the previous
_FROM_PREVIOUS = b"previous"    # the row before's value (the first row's: the base's)
_FROM_TIME = b"time_ms"         # the row's time_ms; null: -1 (not answered)
# The columns sent as steps when their table has them, and from what
_STEPPED = (("seq", _FROM_PREVIOUS), ("time_ms", _FROM_PREVIOUS), ("answered_ms", _FROM_TIME))
_INT32 = np.iinfo(np.int32)


def _int64_values(table: pa.Table, name: str) -> Optional[np.ndarray]:
    """The column's values, when it is an int64 column without nulls; else None."""
    at = table.schema.get_field_index(name)
    if at < 0 or table.schema.field(at).type != pa.int64() or table.column(at).null_count:
        return None
    return table.column(at).to_numpy()


def _fits_int32(steps: np.ndarray) -> bool:
    return not len(steps) or (steps.min() >= _INT32.min and steps.max() <= _INT32.max)


def _replaced(table: pa.Table, name: str, values: pa.Array, metadata: dict) -> pa.Table:
    at = table.schema.get_field_index(name)
    return table.set_column(at, pa.field(name, values.type, metadata=metadata), values)


def to_steps(table: pa.Table) -> pa.Table:
    """`table` with its stepped columns (seq, time_ms, answered_ms) as int32 steps where
    they fit; every other column as it is."""
    times = _int64_values(table, "time_ms")     # (the answers' steps are from these)
    out = table
    for name, how in _STEPPED:
        values = _int64_values(table, name)
        if values is None:
            continue
        if how == _FROM_PREVIOUS:
            base = values[:1]
            steps = np.diff(values, prepend=base)
            if len(values) and _fits_int32(steps):
                out = _replaced(out, name, pa.array(steps.astype(np.int32)),
                                {STEP_KEY: how, BASE_KEY: str(int(base[0])).encode()})
        elif times is not None:
            unanswered = values == -1
            steps = values - times
            if _fits_int32(steps[~unanswered]):
                out = _replaced(out, name, pa.array(steps.astype(np.int32), mask=unanswered),
                                {STEP_KEY: how})
    return out


def from_steps(table: pa.Table) -> pa.Table:
    """to_steps' table back: every column whose field says it holds steps decoded to
    its int64 values (time_ms before the answers stepped from it)."""
    stepped = {f.name: f.metadata for f in table.schema
               if f.metadata and STEP_KEY in f.metadata}
    out = table
    for name, how in _STEPPED:
        metadata = stepped.get(name)
        if metadata is None or metadata[STEP_KEY] != how:
            continue
        steps = table.column(name)
        if how == _FROM_PREVIOUS:
            values = np.cumsum(steps.to_numpy().astype(np.int64), dtype=np.int64)
            values += np.int64(int(metadata[BASE_KEY]))
        else:
            at_time = out.schema.get_field_index("time_ms")
            if at_time < 0 or out.schema.field(at_time).type != pa.int64():
                # (a stepped time column is int32 until decoded above)
                raise ValueError("answered_ms is stepped from time_ms, which is not decoded")
            unanswered = steps.is_null().to_numpy(zero_copy_only=False)
            steps = steps.fill_null(0).to_numpy().astype(np.int64)
            values = np.where(unanswered, np.int64(-1),
                              out.column("time_ms").to_numpy() + steps)
        at = out.schema.get_field_index(name)
        out = out.set_column(at, pa.field(name, pa.int64()), pa.array(values, pa.int64()))
    return out

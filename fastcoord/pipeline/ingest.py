"""Reading a Parquet trace in pieces, each validated on its own (trace.validate).

A trace is read as units: one row group of one file. A unit is read in pieces of at
most PIECE_ROWS rows, and each piece is validated where it is read: its bad rows are
counted and set aside there. Spark's tasks read the units this way (spark.py: one
task per unit), so no machine ever holds the whole trace; the single-process replay
reads the same pieces in turn (`read_validated`). Both number a piece `ordinal(unit,
k)` and merge the pieces' counts in that order, so ingest.json is the same whichever
read the trace, its examples included.

What a piece cannot count alone is the rows out of order: that takes every row of a
group. A group's rows all go to one coordinator shard, so the count is made per shard
(`trace.count_out_of_order` on the shard's rows in piece order) and summed; in one
process, on the whole valid trace, which is the same number.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional, Tuple

import pyarrow as pa
import pyarrow.compute as pc

from .trace import TRACE_SCHEMA, IngestStats, count_out_of_order, validate

PIECE_ROWS = 1 << 20        # rows a piece at most: bounds a reader's memory
PIECE_BITS = 20             # ordinal = unit << PIECE_BITS | piece within the unit


@dataclass(frozen=True)
class TraceUnit:
    """One row group of one Parquet file, the trace columns that file has (a missing
    one is reported by validate and read as nulls), and the position of the row
    group's first row in the whole trace (a trace without `seq` numbers its rows so)."""
    path: str
    row_group: int
    columns: Tuple[str, ...]
    first_row: int


def ordinal(unit: int, k: int) -> int:
    """The number of piece `k` of unit `unit`: pieces in trace order."""
    if k >> PIECE_BITS:
        raise ValueError(f"a unit of more than {1 << PIECE_BITS} pieces")
    return unit << PIECE_BITS | k


def trace_units(path: str) -> List[TraceUnit]:
    """A Parquet trace (a file, or a directory of them: the files in name order, as
    pyarrow's reader takes them) as its non-empty row groups. The paths are absolute:
    executors do not share the driver's working directory."""
    import pyarrow.dataset as ds
    if "://" not in path:
        path = os.path.abspath(path)
    units: List[TraceUnit] = []
    rows = 0
    for fragment in ds.dataset(path, format="parquet").get_fragments():
        names = set(fragment.physical_schema.names)
        columns = tuple(n for n in TRACE_SCHEMA.names if n in names)
        for rg in fragment.row_groups:
            if rg.num_rows:
                units.append(TraceUnit(fragment.path, rg.id, columns, rows))
                rows += rg.num_rows
    return units


def trace_fingerprint(path: str) -> str:
    """What identifies a trace's contents, from its Parquet footers alone (row counts,
    byte sizes, column statistics of every row group of every file, in the files' name
    order): the same for a copy of a trace wherever it lies, another for another trace
    or a trace rewritten at the same path. A replay and a what-if record it so that a
    report pairs only outputs of one trace."""
    import hashlib

    import pyarrow.dataset as ds
    if "://" not in path:
        path = os.path.abspath(path)
    digest = hashlib.sha256()
    for fragment in ds.dataset(path, format="parquet").get_fragments():
        digest.update(repr(fragment.metadata.to_dict()).encode())
    return digest.hexdigest()[:16]


def validated_pieces(batches: Iterable[pa.RecordBatch], first: int, first_row: int = 0
                     ) -> Iterator[Tuple[int, pa.Table, IngestStats]]:
    """Arrow batches of raw trace rows -> (ordinal, valid rows, counts) per piece of
    about PIECE_ROWS rows at most, numbered from `first`; `first_row`: the position of
    the first batch's first row in the trace. The out-of-order count is left to the
    shard (see the module doc)."""
    held, rows, k = [], 0, 0

    def piece():
        good, stats = validate(pa.Table.from_batches(held), order=False,
                               first_row=first_row)
        return first + k, good, stats
    for batch in batches:
        if batch.num_rows:
            held.append(batch)
            rows += batch.num_rows
        if rows >= PIECE_ROWS:
            yield piece()
            first_row += rows
            held, rows, k = [], 0, k + 1
    if held:
        yield piece()


def read_unit(units: List[TraceUnit], i: int) -> Iterator[Tuple[int, pa.Table, IngestStats]]:
    """The validated pieces of unit `i` of `units`."""
    import pyarrow.parquet as pq
    unit = units[i]
    with pq.ParquetFile(unit.path) as f:
        yield from validated_pieces(
            f.iter_batches(row_groups=[unit.row_group], columns=list(unit.columns)),
            ordinal(i, 0), unit.first_row)


def read_validated(path: str) -> Tuple[pa.Table, IngestStats]:
    """The whole valid trace in this process, and its counts: the pieces Spark's tasks
    would read, in order."""
    units = trace_units(path)
    stats, parts = IngestStats(), []
    for i in range(len(units)):
        for _, good, piece_stats in read_unit(units, i):
            stats.merge(piece_stats)
            parts.append(good)
    good = pa.concat_tables(parts) if parts else TRACE_SCHEMA.empty_table()
    stats.out_of_order += count_out_of_order(good)
    return good, stats


# -- a piece's report, as it travels from a Spark task to the driver ---------------------------

Span = Tuple[Optional[int], Optional[int]]     # (first, last) valid time; (None, None): none


def time_span(good: pa.Table) -> Span:
    """The first and last time of a piece's valid rows."""
    if not good.num_rows:
        return None, None
    bounds = pc.min_max(good.column("time_ms")).as_py()
    return bounds["min"], bounds["max"]


def wider(span: Span, first: Optional[int], last: Optional[int]) -> Span:
    """`span` widened to take in first..last (None: nothing to take in)."""
    if first is None:
        return span
    if span[0] is None:
        return first, last
    return min(span[0], first), max(span[1], last)


def piece_report(stats: IngestStats, span: Span) -> str:
    """A piece's counts and the time span of its valid rows, as JSON."""
    return json.dumps({"stats": stats.as_dict(), "first_ms": span[0], "last_ms": span[1]})


def span_report(span: Span) -> str:
    """A time span alone, as JSON (a report without counts)."""
    return json.dumps({"first_ms": span[0], "last_ms": span[1]})


def merge_reports(reports: Iterable[Tuple[int, str]]
                  ) -> Tuple[IngestStats, Optional[int], Optional[int]]:
    """(ordinal, piece_report JSON) pairs -> the merged counts (in ordinal order) and
    the first and last valid times of the whole trace (None without a valid row)."""
    stats, span = IngestStats(), (None, None)
    for _, text in sorted(reports, key=lambda r: r[0]):
        report = json.loads(text)
        stats.merge(IngestStats.from_dict(report["stats"]))
        span = wider(span, report["first_ms"], report["last_ms"])
    return (stats,) + span

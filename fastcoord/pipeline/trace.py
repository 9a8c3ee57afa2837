"""The trace format: one row per coordinator request, as a pyarrow schema (Parquet).

| column               | type           | meaning                                                        |
|----------------------|----------------|----------------------------------------------------------------|
| seq                  | int64          | ordinal of the row in its source (tie-break for equal times)   |
| time_ms              | int64          | when the request reached the coordinator (ms, any epoch)       |
| group_id             | string         | the consumer group                                             |
| member_id            | string         | the client's identity for this incarnation: the member id the  |
|                      |                | coordinator gave it ("" allowed on a first join)               |
| instance_id          | string, null   | group.instance.id of a static member, null for dynamic ones    |
| event                | string         | join, sync, heartbeat, leave, commit, consumer_heartbeat       |
| session_timeout_ms   | int32, null    | join only                                                      |
| rebalance_timeout_ms | int32, null    | join only (null: the session timeout)                          |
| generation           | int32, null    | the generation the client sent (informational: replay uses the |
|                      |                | generation its own coordinator answered); a consumer_heartbeat: |
|                      |                | its member epoch                                               |
| protocol_type        | string, null   | join only ("consumer")                                         |
| protocols            | list<string>   | join only: assignor names in preference order                  |
| client_id            | string, null   | the client.id                                                  |
| error                | int16, null    | the error code the source saw (informational)                  |
| connection           | string, null   | the connection the request came on (Kafka's                    |
|                      |                | "broker:port-client:port-n"): one client process's; with the   |
|                      |                | member ids, who a request is (a client id is shared by many)   |
| offsets              | list<struct>,  | commit only: the partitions it commits, each {topic: string,   |
|                      | null           | partition: int32, offset: int64}, in the request's order       |

Validation (`validate`) never drops a row silently and never raises on bad data: rows
with a null time/group/member or an unknown event are counted (`malformed`,
`unknown_event`) and set aside; rows whose time goes backwards within a group are
counted (`out_of_order`) and kept (replay sorts by time); missing columns are reported
(`missing_columns`) and filled with nulls. The columns after `error` are optional: a
trace written before them has none, and `missing_note` says what their defaults mean.
A value of another type is coerced value by value; one that cannot be (an offsets
entry that is not a topic, a partition and an offset) is null.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# consumer_heartbeat: a ConsumerGroupHeartbeat (KIP-848), carried in traces; the replay
# of the classic protocol passes over it (the consumer protocol's what-if is its own)
EVENTS = ("join", "sync", "heartbeat", "leave", "commit", "consumer_heartbeat")

TRACE_SCHEMA = pa.schema([
    ("seq", pa.int64()),
    ("time_ms", pa.int64()),
    ("group_id", pa.string()),
    ("member_id", pa.string()),
    ("instance_id", pa.string()),
    ("event", pa.string()),
    ("session_timeout_ms", pa.int32()),
    ("rebalance_timeout_ms", pa.int32()),
    ("generation", pa.int32()),
    ("protocol_type", pa.string()),
    ("protocols", pa.list_(pa.string())),
    ("client_id", pa.string()),
    ("error", pa.int16()),
    ("connection", pa.string()),
    ("offsets", pa.list_(pa.struct([("topic", pa.string()), ("partition", pa.int32()),
                                    ("offset", pa.int64())]))),
])

# The optional columns (a trace made before they existed lacks them): what a trace
# without one loses, as missing_note says it
OPTIONAL = {"offsets": "commits name no partitions: the replay's offsets table is empty",
            "connection": "no connections: the what-if tells a consumer's restarts apart by "
                          "its client id alone"}

REQUIRED = ("time_ms", "group_id", "member_id", "event")


@dataclass
class IngestStats:
    """Counts of what ingest saw; every input row lands in exactly one of rows_ok,
    malformed, unknown_event (out_of_order rows are also in rows_ok)."""
    rows_in: int = 0
    rows_ok: int = 0
    malformed: int = 0
    unknown_event: int = 0
    out_of_order: int = 0
    missing_columns: List[str] = field(default_factory=list)
    examples: List[str] = field(default_factory=list)

    def note(self, kind: str, example: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.examples) < 20:
            self.examples.append(f"{kind}: {example[:200]}")

    def merge(self, other: "IngestStats") -> "IngestStats":
        for name in ("rows_in", "rows_ok", "malformed", "unknown_event", "out_of_order"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.missing_columns = sorted(set(self.missing_columns) | set(other.missing_columns))
        self.examples = (self.examples + other.examples)[:20]
        return self

    @classmethod
    def from_dict(cls, d: Dict) -> "IngestStats":
        """as_dict's counts back."""
        return cls(**{name: d[name] for name in ("rows_in", "rows_ok", "malformed",
                                                 "unknown_event", "out_of_order")},
                   missing_columns=list(d["missing_columns"]), examples=list(d["examples"]))

    def as_dict(self) -> Dict:
        return {"rows_in": self.rows_in, "rows_ok": self.rows_ok, "malformed": self.malformed,
                "unknown_event": self.unknown_event, "out_of_order": self.out_of_order,
                "missing_columns": list(self.missing_columns), "examples": list(self.examples)}


def missing_note(columns: List[str]) -> str:
    """What filling `columns` (IngestStats.missing_columns) with defaults means, in one
    line: an optional column's absence is expected of an older trace, not an error."""
    if not columns:
        return ""
    optional = [c for c in columns if c in OPTIONAL]
    other = [c for c in columns if c not in OPTIONAL]
    parts = []
    if optional:
        parts.append("optional columns the trace does not have, filled with defaults: "
                     + "; ".join(f"{c} ({OPTIONAL[c]})" for c in optional))
    if other:
        parts.append("columns the trace does not have, filled with nulls: " + ", ".join(other))
    return ". ".join(parts)


def from_rows(rows: List[dict]) -> pa.Table:
    """Rows (dicts with trace columns; missing keys are null) -> a trace table. `seq`
    defaults to the row's position."""
    cols = {name: [] for name in TRACE_SCHEMA.names}
    for i, row in enumerate(rows):
        for name in TRACE_SCHEMA.names:
            cols[name].append(row.get(name, i if name == "seq" else None))
    return pa.table(cols, schema=TRACE_SCHEMA)


def validate(table: pa.Table, stats: IngestStats = None, *, order: bool = True,
             first_row: int = 0):
    """Conform `table` to TRACE_SCHEMA and split off bad rows. Returns (good, stats).
    Without `order`, the rows out of order are not counted: a piece of a trace need not
    hold all of a group's rows (ingest.py counts them per shard). A trace without `seq`
    gets the rows' positions, counted from `first_row` (a piece's place in its trace)."""
    stats = stats or IngestStats()
    n = table.num_rows
    stats.rows_in += n
    cols = {}
    for f in TRACE_SCHEMA:
        if f.name in table.column_names:
            col = table.column(f.name)
            try:
                col = col.cast(f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                col = pa.array([_coerce(v, f.type) for v in col.to_pylist()], type=f.type)
            cols[f.name] = col
        elif f.name == "seq":
            cols[f.name] = pa.array(range(first_row, first_row + n), type=pa.int64())
        else:
            if f.name not in stats.missing_columns:
                stats.missing_columns.append(f.name)
            cols[f.name] = pa.nulls(n, type=f.type)
    t = pa.table(cols, schema=TRACE_SCHEMA)
    bad_null = None
    for name in REQUIRED:
        isn = pc.is_null(t.column(name))
        bad_null = isn if bad_null is None else pc.or_(bad_null, isn)
    bad_null = bad_null.combine_chunks() if hasattr(bad_null, "combine_chunks") else bad_null
    known = pc.is_in(t.column("event"), value_set=pa.array(EVENTS))
    unknown = pc.and_(pc.invert(bad_null), pc.invert(pc.fill_null(known, False)))
    for kind, mask in (("malformed", bad_null), ("unknown_event", unknown)):
        idx = pc.indices_nonzero(mask).to_pylist()
        setattr(stats, kind, getattr(stats, kind) + len(idx))
        for i in idx[: max(0, 20 - len(stats.examples))]:
            stats.examples.append(f"{kind}: {str(t.slice(i, 1).to_pylist()[0])[:200]}")
    bad = pc.or_(bad_null, unknown)
    # the filter copies every column: only when a row must go
    good = t.filter(pc.invert(bad)) if pc.any(bad).as_py() else t
    stats.rows_ok += good.num_rows
    if order:
        stats.out_of_order += count_out_of_order(good)
    return good, stats


def _coerce(value, typ):
    try:
        if value is None:
            return None
        if pa.types.is_integer(typ):
            return int(value)
        if pa.types.is_string(typ):
            return str(value)
        if pa.types.is_list(typ) and pa.types.is_struct(typ.value_type):
            return _coerce_offsets(value)
        if pa.types.is_list(typ):
            # one name given as a plain string is a list of one, not of its characters
            return [value] if isinstance(value, str) else [str(v) for v in value]
    except (TypeError, ValueError, OverflowError):
        return None
    return None


_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _coerce_offsets(value):
    """An offsets value given otherwise (entries as mappings or (topic, partition,
    offset) triples, numbers as text): the list, or None when an entry is none of these
    or a number does not fit its type (the partition an int32, the offset an int64)."""
    if isinstance(value, (str, bytes, dict)):
        return None
    out = []
    for entry in value:
        if isinstance(entry, dict):
            entry = (entry.get("topic"), entry.get("partition"), entry.get("offset"))
        if isinstance(entry, (str, bytes)) or len(entry) != 3:
            return None
        topic, partition, offset = entry
        if topic is None or isinstance(partition, bool) or isinstance(offset, bool):
            return None
        partition, offset = int(partition), int(offset)
        if not (_INT32[0] <= partition <= _INT32[1] and _INT64[0] <= offset <= _INT64[1]):
            return None
        out.append({"topic": str(topic), "partition": partition, "offset": offset})
    return out


def count_out_of_order(t: pa.Table) -> int:
    """Rows whose time is earlier than an earlier row (by seq) of the same group.

    In array operations (a Python loop over the rows would cost an interpreted step per
    row, most of a large trace's validation): the rows ordered by (group, seq), each row keyed
    group * span + its time's offset from the earliest (span: the times' range, or the
    ranks of the distinct times where that product would not fit in 63 bits). Every key
    of a group is above every key of the groups before it, so a running maximum of the
    keys starts afresh at each group, and a row is out of order exactly when its key is
    below the running maximum of the rows before it."""
    if t.num_rows == 0:
        return 0
    nulls = t.column("time_ms").null_count or t.column("seq").null_count
    times, seqs = t.column("time_ms").to_numpy(), t.column("seq").to_numpy()
    # Rows in time order whose seq never falls (a trace as written, a shard's rows after
    # the split): a group's rows by seq are then in row order, so in time order, and
    # none is out of order. Two passes instead of the sort below.
    if not (nulls or (np.diff(times) < 0).any() or (np.diff(seqs) < 0).any()):
        return 0
    groups = pc.dictionary_encode(t.column("group_id").combine_chunks()).indices
    groups = groups.to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.lexsort((seqs, groups))
    times = times[order]
    low = int(times.min())
    span = int(times.max()) - low + 1
    if (int(groups.max()) + 1) * span < 1 << 62:
        offsets = times - low
    else:
        _, offsets = np.unique(times, return_inverse=True)
        offsets = offsets.reshape(-1)
        span = int(offsets.max()) + 1
    keys = groups[order] * span + offsets
    highest = np.maximum.accumulate(keys)
    return int(np.count_nonzero(keys[1:] < highest[:-1]))


def read_trace(path) -> pa.Table:
    import pyarrow.parquet as pq
    return pq.read_table(path)


def write_trace(table: pa.Table, path) -> None:
    import pyarrow.parquet as pq
    pq.write_table(table, path)

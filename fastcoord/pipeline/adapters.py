"""Adapters: request logs -> traces. Each returns (table, IngestStats); a line that
cannot be parsed is counted as malformed (with an example), never dropped silently
and never fatal.

- `from_fastcoord_log`: the JSON lines `fastcoord serve` writes (requestlog.py): ts,
  api, version, client, host, group, member, generation, error, latency_ms, and where
  they apply instance, a join's timeouts, protocol type and names and the member id
  its answer gave (answer_member), a LeaveGroup's members, an OffsetCommit's offsets.
  A line is written when its answer goes out: the request's time is ts - latency_ms,
  and the rows are numbered (seq) in the order of those times, to the microsecond.
  A join becomes the row of the member id its answer gave; a LeaveGroup naming several
  members one row each. Older logs (no join timeouts) still convert: their joins get
  no session timeout (the replay's default), and a join with member "" takes the id of
  the next request from the same (group, client, host) that has one (noted in the
  stats' examples).
- `from_kafka_log`: Apache Kafka's `kafka.request.logger` lines at DEBUG:
  "... Completed request:{"requestHeader":{"requestApiKey":11,...,"clientId":...},
  "request":{...},"response":{...},...}". JoinGroup (11), SyncGroup (14),
  Heartbeat (12), LeaveGroup (13) and OffsetCommit (8) become events; other APIs are
  counted as unknown_event, ConsumerGroupHeartbeat (68) is carried. A line is written
  once its answer is sent: the request's time is the line's timestamp
  ("[2024-05-01 10:00:00,123]") less its "totalTimeMs" (else "startTimeMs"), so a
  parked join sits at its arrival, before the heartbeats that completed while it
  waited (the replay orders rows by time).
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Iterable, List, Tuple

import pyarrow as pa

from .trace import IngestStats, from_rows, validate

_API_EVENTS = {"JoinGroup": "join", "SyncGroup": "sync", "Heartbeat": "heartbeat",
               "LeaveGroup": "leave", "OffsetCommit": "commit",
               "ConsumerGroupHeartbeat": "consumer_heartbeat"}
_KEY_EVENTS = {11: "join", 14: "sync", 12: "heartbeat", 13: "leave", 8: "commit",
               68: "consumer_heartbeat"}


def _lines(source) -> Iterable[str]:
    if isinstance(source, (list, tuple)):
        yield from source
    else:
        with open(source, encoding="utf-8", errors="replace") as f:
            yield from f


def _finish(rows: List[dict], stats: IngestStats) -> Tuple[pa.Table, IngestStats]:
    good, stats = validate(from_rows(rows), stats)
    return good, stats


def from_fastcoord_log(source) -> Tuple[pa.Table, IngestStats]:
    stats = IngestStats()
    rows: List[dict] = []
    pending = {}     # (group, client, host) -> index of an old-format join with member ""
    notes = set()
    arrivals: List[float] = []      # each row's request's arrival (ms, unrounded)
    for line in _lines(source):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not an object")
            ts = rec["ts"]
            api = rec["api"]
        except (ValueError, KeyError, TypeError):
            stats.rows_in += 1
            stats.note("malformed", line.strip())
            continue
        event = _API_EVENTS.get(api)
        if event is None:
            stats.rows_in += 1
            stats.note("unknown_event", line.strip())
            continue
        try:
            # `ts` is written as the answer goes out: the request arrived `latency_ms`
            # before (a parked join's wait included), and that is when it happened
            latency = rec.get("latency_ms") or 0.0
            arrival = float(ts) * 1000 - float(latency)
            t = int(round(arrival))
            if not _is_int(t, 63):
                raise ValueError("time out of range")
            _check_types(rec)
        except (TypeError, ValueError, OverflowError):
            stats.rows_in += 1
            stats.note("malformed", line.strip())
            continue
        member = rec.get("member")
        key = (rec.get("group"), rec.get("client"), rec.get("host"))
        row = {"seq": len(rows), "time_ms": t, "group_id": rec.get("group"),
               "member_id": member, "instance_id": rec.get("instance"), "event": event,
               "generation": rec.get("generation"), "client_id": rec.get("client"),
               "error": rec.get("error")}
        old_join = event == "join" and "session_timeout_ms" not in rec
        if event == "join":
            _join_fields(row, rec)
            member = row["member_id"]
        if member:
            i = pending.pop(key, None)
            if i is not None:
                rows[i]["member_id"] = member
        elif old_join and member == "":
            pending[key] = len(rows)
            notes.add("old-format log: a first join's member id is the next id its client "
                      "sent; joins carry no session timeout (the replay's default)")
        if event == "leave" and isinstance(rec.get("members"), list):
            rows.extend(_leave_rows(row, rec, len(rows), notes))
        else:
            rows.append(row)
        arrivals.extend([arrival] * (len(rows) - len(arrivals)))
    # (first: a log's many malformed lines would otherwise crowd them out of the examples)
    stats.examples[:0] = [f"note: {text}" for text in sorted(notes)]
    return _finish(_in_arrival_order(rows, arrivals), stats)


def _in_arrival_order(rows: List[dict], arrivals: List[float]) -> List[dict]:
    """The rows in the order their requests arrived (to the microsecond the line gives,
    ties in line order), `seq` numbering them so: lines are written as answers go out,
    so a parked join's line comes after requests that arrived later, and the replay
    orders rows of one millisecond by seq."""
    order = sorted(range(len(rows)), key=arrivals.__getitem__)
    out = [rows[i] for i in order]
    for seq, row in enumerate(out):
        row["seq"] = seq
    return out


# A line's fields that become trace columns, and their types there: a line whose values
# are not of them is malformed (the trace's table could not hold it)
_TEXT_FIELDS = ("group", "member", "client", "instance", "protocol_type", "answer_member")
_INT_BOUNDS = {"generation": 31, "session_timeout_ms": 31, "rebalance_timeout_ms": 31,
               "error": 15}


def _is_int(value, bits: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and \
        -(1 << bits) <= value < (1 << bits)


def _check_types(rec: dict) -> None:
    """Raise ValueError unless each field of `rec` that goes into the trace is null or
    of its column's type (the leave members' entries as their rows' columns)."""
    for name in _TEXT_FIELDS:
        if not isinstance(rec.get(name), (str, type(None))):
            raise ValueError(f"{name} is not text")
    for name, bits in _INT_BOUNDS.items():
        if rec.get(name) is not None and not _is_int(rec[name], bits):
            raise ValueError(f"{name} is not an int{bits + 1}")
    protocols = rec.get("protocols")
    if protocols is not None and not (isinstance(protocols, list) and
                                      all(isinstance(p, str) for p in protocols)):
        raise ValueError("protocols is not a list of names")
    members = rec.get("members")
    if members is not None:
        if not isinstance(members, list):
            raise ValueError("members is not a list")
        for entry in members:
            if not (isinstance(entry, list) and 2 <= len(entry) <= 3
                    and all(isinstance(x, (str, type(None))) for x in entry[:2])
                    and (len(entry) < 3 or entry[2] is None or _is_int(entry[2], 15))):
                raise ValueError("a member is not [member id, instance id, error]")


def _join_fields(row: dict, rec: dict) -> None:
    """A join row's fields from its line: its timeouts, protocols and the member id the
    answer gave (the identity of the member from then on), where the line has them."""
    if rec.get("answer_member"):
        row["member_id"] = rec["answer_member"]
    row["session_timeout_ms"] = rec.get("session_timeout_ms")
    row["rebalance_timeout_ms"] = rec.get("rebalance_timeout_ms")
    row["protocol_type"] = rec.get("protocol_type", "consumer")
    row["protocols"] = rec.get("protocols")


def _leave_rows(row: dict, rec: dict, seq: int, notes: set) -> List[dict]:
    """A LeaveGroup v3+ line's rows: one per member it names ([member id, instance id,
    error]), numbered from `seq`."""
    out = []
    for entry in rec["members"]:          # (each checked by _check_types)
        one = dict(row, seq=seq + len(out), member_id=entry[0], instance_id=entry[1])
        if len(entry) > 2:
            one["error"] = entry[2]
        out.append(one)
    if "members_total" in rec:
        notes.add("a LeaveGroup named more members than its line kept")
    return out or [row]


_DECODER = json.JSONDecoder()
_TS = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def from_kafka_log(source) -> Tuple[pa.Table, IngestStats]:
    stats = IngestStats()
    rows: List[dict] = []
    for line in _lines(source):
        if not line.strip():
            continue
        at = line.find("Completed request:")
        if at < 0:
            stats.rows_in += 1
            stats.note("malformed", line.strip())
            continue
        try:
            rec, _ = _DECODER.raw_decode(line[at + len("Completed request:"):].lstrip())
            header = rec["requestHeader"]
            key = int(header["requestApiKey"])
            req = rec.get("request") or {}
            resp = rec.get("response") or {}
            m = _TS.search(line[:at])
            if m:
                # Kafka's request logger writes the line once the answer is sent
                # (RequestChannel.updateRequestMetrics): the request arrived
                # totalTimeMs before the line's time
                dt = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
                done = dt.replace(tzinfo=timezone.utc).timestamp() * 1000
                t = int(round(done - float(rec.get("totalTimeMs") or 0.0)))
            else:
                t = int(rec["startTimeMs"])
        except (ValueError, KeyError, TypeError, AttributeError):
            stats.rows_in += 1
            stats.note("malformed", line.strip())
            continue
        event = _KEY_EVENTS.get(key)
        if event is None:
            stats.rows_in += 1
            stats.note("unknown_event", line.strip())
            continue
        member = req.get("memberId")
        instance = req.get("groupInstanceId")
        if event == "leave" and member is None and req.get("members"):
            first = req["members"][0]
            member, instance = first.get("memberId"), first.get("groupInstanceId")
        if event in ("join", "consumer_heartbeat") and not member and resp.get("memberId"):
            member = resp["memberId"]        # the id the broker gave this first join
        row = {"seq": len(rows), "time_ms": t, "group_id": req.get("groupId"),
               "member_id": member, "instance_id": instance, "event": event,
               "generation": req.get("generationId", req.get("generationIdOrMemberEpoch",
                                                             req.get("memberEpoch"))),
               "client_id": header.get("clientId"), "error": resp.get("errorCode")}
        if event == "join":
            row["session_timeout_ms"] = req.get("sessionTimeoutMs")
            row["rebalance_timeout_ms"] = req.get("rebalanceTimeoutMs")
            row["protocol_type"] = req.get("protocolType")
            row["protocols"] = [p.get("name") for p in req.get("protocols") or []]
        rows.append(row)
    return _finish(rows, stats)

"""Adapters: request logs -> traces. Each returns (table, IngestStats); a line that
cannot be parsed is counted as malformed (with an example), never dropped silently
and never fatal.

- `from_fastcoord_log`: the JSON lines `fastcoord serve` writes (requestlog.py): ts,
  api, version, client, host, group, member, generation, error, latency_ms. A line is
  written when its answer goes out: the request's time is ts - latency_ms. The log
  does not carry the member id a first join was given; a join with member "" takes
  the id of the next request from the same (group, client, host) that has one. A
  commit's `offsets` ([[topic, partition, offset], ...]) are its row's; a leave's
  `members` ([[member_id, instance_id], ...]) become one row per member.
- `from_kafka_log`: Apache Kafka's `kafka.request.logger` lines at DEBUG:
  "... Completed request:{"requestHeader":{"requestApiKey":11,...,"clientId":...},
  "request":{...},"response":{...},...}". JoinGroup (11), SyncGroup (14),
  Heartbeat (12), LeaveGroup (13) and OffsetCommit (8) become events; other APIs are
  counted as unknown_event, ConsumerGroupHeartbeat (68) is carried. A line is written
  once its answer is sent: the request's time is the line's timestamp
  ("[2024-05-01 10:00:00,123]") less its "totalTimeMs" (else "startTimeMs"), so a
  parked join sits at its arrival, before the heartbeats that completed while it
  waited (the replay orders rows by time). An OffsetCommit's row carries the partitions
  it commits (topics[].partitions[]: partitionIndex, committedOffset); a LeaveGroup
  naming several members (v3+) becomes one row per member.
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Iterable, List, Optional, Tuple

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
    _name_static_leavers(rows)
    good, stats = validate(from_rows(rows), stats)
    return good, stats


def _name_static_leavers(rows: List[dict]) -> None:
    """A leave naming a static member by its instance id alone (member id "": how an
    admin's removal of static members reads, a LeaveGroup of several members) takes
    the member id that instance last had in its group before, in log order: the trace
    knows a member by its id, and the replay must see that member leave, not expire.
    An instance never seen with a member id keeps ""."""
    latest = {}
    for row in rows:
        inst = row.get("instance_id")
        if inst is None:
            continue
        key = (row.get("group_id"), inst)
        if row.get("member_id"):
            latest[key] = row["member_id"]
        elif row.get("event") == "leave" and key in latest:
            row["member_id"] = latest[key]


def from_fastcoord_log(source) -> Tuple[pa.Table, IngestStats]:
    stats = IngestStats()
    rows: List[dict] = []
    pending = {}     # (group, client, host) -> index of a join with member ""
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
            t = int(round(float(ts) * 1000 - float(latency)))
        except (TypeError, ValueError):
            stats.rows_in += 1
            stats.note("malformed", line.strip())
            continue
        member = rec.get("member")
        key = (rec.get("group"), rec.get("client"), rec.get("host"))
        row = {"seq": len(rows), "time_ms": t, "group_id": rec.get("group"),
               "member_id": member, "event": event, "generation": rec.get("generation"),
               "client_id": rec.get("client"), "error": rec.get("error"),
               "protocol_type": "consumer" if event == "join" else None}
        if event == "join":
            row["session_timeout_ms"] = rec.get("session_timeout_ms", 10_000)
            row["rebalance_timeout_ms"] = rec.get("rebalance_timeout_ms")
            row["protocols"] = rec.get("protocols", ["range"])
        more = _fastcoord_rows(row, event, rec)
        if more is None:
            stats.rows_in += 1
            stats.note("malformed", line.strip())
            continue
        if member:
            i = pending.pop(key, None)
            if i is not None:
                rows[i]["member_id"] = member
        elif event == "join" and member == "":
            pending[key] = len(rows)
        rows.extend(more)
    return _finish(rows, stats)


def _fastcoord_rows(row: dict, event: str, rec: dict) -> Optional[List[dict]]:
    """A fastcoord log line's trace rows, from its first (`row`): a commit's with its
    `offsets` ([[topic, partition, offset], ...]); a leave naming its `members`
    ([[member_id, instance_id], ...]) one row per member, in that order, numbered on
    from `row`'s seq. None when those fields are not of that shape."""
    if event == "commit" and "offsets" in rec:
        offsets = rec["offsets"]
        if not isinstance(offsets, list):
            return None
        row["offsets"] = []
        for entry in offsets:
            if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                    and _is_int(entry[1], 31) and _is_int(entry[2], 63)):
                return None
            row["offsets"].append({"topic": entry[0], "partition": entry[1],
                                   "offset": entry[2]})
    if event != "leave" or "members" not in rec:
        return [row]
    members = rec["members"]
    if not isinstance(members, list) or not members or not all(
            isinstance(m, list) and len(m) == 2 and isinstance(m[0], str)
            and (m[1] is None or isinstance(m[1], str)) for m in members):
        return None
    return [dict(row, seq=row["seq"] + k, member_id=m, instance_id=inst)
            for k, (m, inst) in enumerate(members)]


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
            if not (isinstance(req, dict) and isinstance(resp, dict)):
                raise TypeError("request or response is not an object")
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
        if event == "leave" and member is None and _members_listed(req):
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
        more = _kafka_rows(row, event, req)
        if more is None:
            stats.rows_in += 1
            stats.note("malformed", line.strip())
            continue
        rows.extend(more)
    return _finish(rows, stats)


def _kafka_rows(row: dict, event: str, req: dict) -> Optional[List[dict]]:
    """A Kafka request's trace rows, from its first (`row`): a commit's with the
    partitions it commits; a LeaveGroup naming several members (v3+: `members`) one row
    per member, in its order (the first is `row`'s own), numbered on from `row`'s seq.
    None when those fields are not what Kafka writes (the line is malformed)."""
    if event == "commit":
        row["offsets"] = _kafka_offsets(req.get("topics"))
        return None if row["offsets"] is None else [row]
    if event != "leave" or "members" not in req:
        return [row]
    if not (_members_listed(req) or req["members"] == []):
        return None
    out = [row]
    for k, m in enumerate(req["members"][1:], 1):
        out.append(dict(row, seq=row["seq"] + k, member_id=m.get("memberId"),
                        instance_id=m.get("groupInstanceId")))
    return out


def _members_listed(req: dict) -> bool:
    """Whether a LeaveGroup request (v3+) names members as Kafka writes them: a
    non-empty list of objects."""
    members = req.get("members")
    return isinstance(members, list) and bool(members) and all(
        isinstance(m, dict) for m in members)


def _kafka_offsets(topics) -> Optional[List[dict]]:
    """An OffsetCommit's `topics` as Kafka's request logger writes them (topics[].name,
    or its topicId where the name is null (v9+); .partitions[].partitionIndex and
    .committedOffset) -> the trace's offsets; None if they are not of that shape."""
    if topics is None:
        return []
    if not isinstance(topics, list):
        return None
    out = []
    for topic in topics:
        if not isinstance(topic, dict) or not isinstance(topic.get("partitions"), list):
            return None
        name = topic.get("name")
        name = topic.get("topicId") if name is None else name
        for p in topic["partitions"]:
            if not isinstance(p, dict) or not isinstance(name, str):
                return None
            index, offset = p.get("partitionIndex"), p.get("committedOffset")
            if not (_is_int(index, 31) and _is_int(offset, 63)):
                return None
            out.append({"topic": name, "partition": index, "offset": offset})
    return out


def _is_int(value, bits: int) -> bool:
    """An integer (JSON's, not a bool) that fits a signed `bits`+1-bit integer."""
    return (isinstance(value, int) and not isinstance(value, bool)
            and -(1 << bits) <= value < (1 << bits))

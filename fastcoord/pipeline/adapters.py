"""Adapters: request logs -> traces. Each returns (table, IngestStats); a line that
cannot be parsed is counted as malformed (with an example), never dropped silently
and never fatal.

- `from_fastcoord_log`: the JSON lines `fastcoord serve` writes (requestlog.py): ts,
  api, version, client, host, group, member, generation, error, latency_ms, and where
  they apply instance, a join's timeouts, protocol type and names and the member id
  its answer gave (answer_member), a LeaveGroup's members, an OffsetCommit's offsets
  ([[topic, partition, offset], ...], its row's `offsets`).
  A line is written when its answer goes out: the request's time is ts - latency_ms,
  and the rows are numbered (seq) in the order of those times, to the microsecond.
  A join becomes the row of the member id its answer gave; a LeaveGroup naming several
  members one row each. Older logs (no join timeouts) still convert: their joins get
  no session timeout (the replay's default), and a join with member "" takes the id of
  the next request from the same (group, client, host) that has one (noted in the
  stats' examples). A Heartbeat line names the instance id its request named
  (`instance`); one without it (every heartbeat of a log written before heartbeat lines
  had it) takes the instance id of its member's last join (same group and member id)
  that named one, unless its version (v0-v2) has no such field (noted in the stats'
  examples when that happens): a static member's heartbeat after a newer incarnation
  took its instance id is then fenced in the replay as it was by the server.
- `from_kafka_log`: Apache Kafka's `kafka.request.logger` lines at DEBUG:
  "[time] DEBUG Completed request:{"isForwarded":false,"requestHeader":{"requestApiKey":
  11,...,"clientId":...},"request":{...},"response":{...},"connection":...,
  "totalTimeMs":...,...} (kafka.request.logger)" (RequestConvertToJson.requestDescMetrics).
  JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13) and OffsetCommit (8)
  become events; other APIs are counted as unknown_event, ConsumerGroupHeartbeat (68)
  is carried. A line is written once its answer is sent: the request's time is the
  line's time less its "totalTimeMs" (else "startTimeMs"), so a parked join sits at its
  arrival, before the heartbeats that completed while it waited (the replay orders rows
  by time). The time: log4j's stock "[2024-05-01 10:00:00,123]" or log4j2's ISO-8601
  ("2024-05-01T10:00:00,005", ".005"), brackets optional, in the zone given (UTC by
  default) unless the line carries an offset. A member is who its member ids say (the
  request's, or the answer's for a first join) and its connection, never its client id.
  A log none of whose lines is a request-logger line is a LogFormatError (the one fatal
  case: a log of something else, not a log with bad lines).
  An OffsetCommit's row carries the partitions it commits (topics[].partitions[]:
  partitionIndex, committedOffset); a LeaveGroup naming several members (v3+)
  becomes one row per member.
"""
from __future__ import annotations

import functools
import json
import re
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Iterable, List, Optional, Tuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

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
    pending = {}     # (group, client, host) -> index of an old-format join with member ""
    static = {}      # (group, member id) -> the instance id its last join named
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
            offsets = _fastcoord_offsets(rec) if event == "commit" else None
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
        if offsets is not None:
            row["offsets"] = offsets
        old_join = event == "join" and "session_timeout_ms" not in rec
        if event == "join":
            _join_fields(row, rec)
            member = row["member_id"]
            _note_static(static, rows, row)
        elif event == "heartbeat" and "instance" not in rec:
            _heartbeat_instance(static, row, rec, notes)
        if member:
            i = pending.pop(key, None)
            if i is not None:
                rows[i]["member_id"] = member
                _note_static(static, rows, rows[i])
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


def _note_static(static: dict, rows: List[dict], join: dict) -> None:
    """Remember the instance id a join row named, for its member's heartbeats."""
    if join["instance_id"] is not None and join["member_id"]:
        static[(join["group_id"], join["member_id"])] = join["instance_id"]


def _heartbeat_instance(static: dict, row: dict, rec: dict, notes: set) -> None:
    """A heartbeat line without `instance` (an older log's): the instance id of its
    member's last join that named one, where its version has the field (v3+)."""
    version = rec.get("version")
    if _is_int(version, 15) and version < 3:
        return
    inst = static.get((row["group_id"], row["member_id"]))
    if inst is not None:
        row["instance_id"] = inst
        notes.add("heartbeat lines without an instance id (an older log): each takes the "
                  "one its member's join named")


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


def _fastcoord_offsets(rec: dict) -> Optional[List[dict]]:
    """A commit line's `offsets` ([[topic, partition, offset], ...]) as the trace's, None
    when the line has none; ValueError when they are not of that shape."""
    if "offsets" not in rec:
        return None
    offsets = rec["offsets"]
    if not isinstance(offsets, list) or not all(
            isinstance(e, list) and len(e) == 3 and isinstance(e[0], str)
            and _is_int(e[1], 31) and _is_int(e[2], 63) for e in offsets):
        raise ValueError("offsets are not [[topic, partition, offset], ...]")
    return [{"topic": t, "partition": p, "offset": o} for t, p, o in offsets]


_DECODER = json.JSONDecoder()
_MARK = "Completed request:"
# The time a request-logger line starts with, brackets optional: log4j's stock %d
# ("2024-05-01 10:00:00,123", Kafka's `[%d] %p %m (%c)%n`), log4j2's ISO-8601
# ("2024-05-01T10:00:00,005", or a dot before the millis), and an optional offset
# ("Z", "+02", "+0200", "+02:00") that says where the clock was.
_STAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[,.](\d{1,9}))?"
                    r"(Z|[+-]\d\d(?::?\d\d)?)?")

FOLD_SLACK_MS = 60_000      # how far a line's time may fall before its predecessor's


class LogFormatError(ValueError):
    """A log none of whose lines is a request-log line in a known format."""


def time_zone(name) -> tzinfo:
    """The zone a log's times without an offset were written in: None or "UTC" is UTC,
    else an IANA name (zoneinfo: "Europe/Berlin"), or a tzinfo as it is. ValueError
    naming it when there is no such zone."""
    if name is None or name == "UTC":
        return timezone.utc
    if isinstance(name, tzinfo):
        return name
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (an IANA name such as "
                         "Europe/Berlin, or UTC)") from None


def _offset(text: str) -> timezone:
    if text == "Z":
        return timezone.utc
    digits = text[1:].replace(":", "")
    delta = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
    return timezone(-delta if text[0] == "-" else delta)


def _stamp_ms(m: "re.Match", zone: tzinfo, last_ms: Optional[float]) -> float:
    """A line's time in ms since the epoch. An offset in the line wins over `zone`.
    A wall time the zone has twice (the hour repeated when clocks go back) is the first
    of the two, unless that is more than FOLD_SLACK_MS before the previous line's
    (`last_ms`): lines are written in time order (to within the ms threads race by), so
    the log has passed the first one and this is the second. (Undecidable: a log silent
    from the first pass into the second.) A wall time in the hour skipped when clocks go
    forward (no correct clock writes one) is read with the offset before the change."""
    first, second = _second_ms(m.group(1, 2, 3, 4, 5, 6), m.group(8), zone)
    frac = m.group(7)
    ms = int((frac + "00000")[:6]) / 1000 if frac else 0.0
    if second > first and last_ms is not None and last_ms - (first + ms) > FOLD_SLACK_MS:
        return second + ms
    return first + ms


@functools.lru_cache(maxsize=4096)
def _second_ms(date_time: Tuple[str, ...], offset: Optional[str], zone: tzinfo
               ) -> Tuple[float, float]:
    """A whole second of a line's time, in ms since the epoch, read as its first and as
    its second pass (the same but in a fold). Cached: a log's lines share their seconds."""
    naive = datetime(*(int(v) for v in date_time))
    if offset:
        at = naive.replace(tzinfo=_offset(offset)).timestamp() * 1000
        return at, at
    return (naive.replace(tzinfo=zone).timestamp() * 1000,
            naive.replace(tzinfo=zone, fold=1).timestamp() * 1000)


def from_kafka_log(source, tz=None) -> Tuple[pa.Table, IngestStats]:
    """`tz`: the zone of the lines' times that carry no offset (default UTC;
    see time_zone). Raises LogFormatError naming the first line when no line is a
    request-logger line in a known format (a log of something else, or an empty one)."""
    zone = time_zone(tz)
    stats = IngestStats()
    rows: List[dict] = []
    read = 0                # lines read as request-logger lines (of any API)
    first_bad = None        # (line number, line) of the first line that was not
    last_ms = None          # the previous line's time (a fold's second pass)
    for number, line in enumerate(_lines(source), 1):
        if not line.strip():
            continue
        at = line.find(_MARK)
        try:
            if at < 0:
                raise ValueError("not a request-logger line")
            rec, _ = _DECODER.raw_decode(line[at + len(_MARK):].lstrip())
            header = rec["requestHeader"]
            key = int(header["requestApiKey"])
            req = rec.get("request") or {}
            resp = rec.get("response") or {}
            if not (isinstance(req, dict) and isinstance(resp, dict)):
                raise TypeError("request or response not an object")
            m = _STAMP.search(line, 0, at)
            if m:
                # Kafka's request logger writes the line once the answer is sent
                # (RequestChannel.updateRequestMetrics): the request arrived
                # totalTimeMs before the line's time
                last_ms = done = _stamp_ms(m, zone, last_ms)
                t = int(round(done - float(rec.get("totalTimeMs") or 0.0)))
            else:
                t = int(rec["startTimeMs"])
            if _int(t, 64) is None:
                raise OverflowError("a time no int64 holds")
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
            stats.rows_in += 1
            stats.note("malformed", line.strip())
            if first_bad is None:
                first_bad = (number, line.strip())
            continue
        read += 1
        event = _KEY_EVENTS.get(key)
        if event is None:
            stats.rows_in += 1
            stats.note("unknown_event", line.strip())
            continue
        # (each value of the type its column takes, else null: a null group or member
        # makes the row malformed in validate, a null elsewhere is an unknown)
        member, instance = _identity(event, req, resp)
        row = {"seq": len(rows), "time_ms": t, "group_id": _text(req.get("groupId")),
               "member_id": member, "instance_id": instance, "event": event,
               "generation": _int(req.get("generationId", req.get(
                   "generationIdOrMemberEpoch", req.get("memberEpoch"))), 32),
               "client_id": _text(header.get("clientId")),
               "error": _int(resp.get("errorCode"), 16),
               "connection": _text(rec.get("connection"))}
        if event == "join":
            row["session_timeout_ms"] = _int(req.get("sessionTimeoutMs"), 32)
            row["rebalance_timeout_ms"] = _int(req.get("rebalanceTimeoutMs"), 32)
            row["protocol_type"] = _text(req.get("protocolType"))
            protocols = req.get("protocols")
            row["protocols"] = [p["name"] for p in protocols
                                if isinstance(p, dict) and isinstance(p.get("name"), str)] \
                if isinstance(protocols, list) else []
        more = _kafka_rows(row, event, req)
        if more is None:
            stats.rows_in += 1
            stats.note("malformed", line.strip())
            continue
        rows.extend(more)
    if not read:
        if first_bad is None:
            raise LogFormatError("no request-logger line: the log is empty")
        number, text = first_bad
        raise LogFormatError(
            f"no line is a Kafka request-logger line in a known format (a time such as "
            f"[2024-05-01 10:00:00,123] or 2024-05-01T10:00:00.123, then "
            f"'{_MARK}{{...}}'); the first, line {number}: {text[:80]!r}")
    return _finish(rows, stats)


def _identity(event: str, req: dict, resp: dict) -> Tuple[Optional[str], Optional[str]]:
    """(member id, group.instance.id) of a Kafka request: the member id it carries, else
    (a first join, a first ConsumerGroupHeartbeat) the one its answer gave it. Never the
    client id: consumers on one host often share one (librdkafka's is "rdkafka"). A
    join that stays "" was given no id (answered with an error such as
    COORDINATOR_LOAD_IN_PROGRESS): it is no one's first join, and is not linked to a
    later request (its client's next join asks afresh with "")."""
    member = _text(req.get("memberId"))
    instance = _text(req.get("groupInstanceId"))
    members = req.get("members")
    if event == "leave" and member is None and isinstance(members, list) and members \
            and isinstance(members[0], dict):
        member = _text(members[0].get("memberId"))
        instance = _text(members[0].get("groupInstanceId"))
    if event in ("join", "consumer_heartbeat") and not member and _text(resp.get("memberId")):
        member = resp["memberId"]        # the id the broker gave this first join
    return member, instance


def _text(value) -> Optional[str]:
    return value if isinstance(value, str) else None


def _int(value, bits: int) -> Optional[int]:
    """`value` if it is an integer a signed `bits`-bit column holds, else None."""
    if isinstance(value, int) and not isinstance(value, bool) \
            and -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        return value
    return None


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


"""A consumer group's record in the store (KIP-848 state that survives a restart).

`consumer_record` is what the coordinator gives `store_consumer_group` after a change:
the group's epochs, subscribed topics' metadata and resolved regexes whole, and the
members that changed (None for one removed), or every member (`full`). A store keeps
the fold of those records (`fold_consumer_record`), a full record, which is what the
coordinator loads back (ConsumerLogic.load). Plain values only: str, int, bool, None,
bytes, lists and dicts, so any store can encode them (bytes only in a classic member's
"classic": the subscriptions of its JoinGroup's protocols).
"""
from __future__ import annotations

import marshal
from typing import Optional

from fastcoord.core.consumer_embedded import ClassicMetadata

__all__ = ["apply_members", "commit_consumer_record", "committed_state", "consumer_record",
           "fill_member", "fold_consumer_record", "follows", "member_record", "unpack_member"]


def _sets(parts) -> dict:
    return {t: frozenset(ps) for t, ps in parts.items() if ps}


def _lists(parts) -> dict:
    return {t: sorted(ps) for t, ps in parts.items() if ps}


def member_record(cg, m) -> dict:
    return {"instance_id": m.instance_id, "rack_id": m.rack_id, "client_id": m.client_id,
            "client_host": m.client_host, "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "server_assignor": m.server_assignor, "topic_names": sorted(m.topic_names),
            "topic_regex": m.topic_regex, "state": m.state, "member_epoch": m.member_epoch,
            "previous_epoch": m.previous_epoch, "assigned": _lists(m.assigned),
            "revoking": _lists(m.revoking),
            "target": {t: sorted(ps) for t, ps in cg.target.get(m.member_id, {}).items() if ps},
            "classic": _classic_record(m.classic),
            "assignment_epochs": _epochs_record(m.assignment_epochs)}


def _epochs_record(epochs) -> list:
    """A member's assignment epochs as [topic, epoch, [partitions]] entries, one per
    topic and epoch (a topic's partitions mostly share one or two)."""
    out = []
    for topic in sorted(epochs):
        by_epoch: dict = {}
        for p, e in epochs[topic].items():
            by_epoch.setdefault(e, []).append(p)
        out += [[topic, e, sorted(ps)] for e, ps in sorted(by_epoch.items())]
    return out


def _epochs_from(entries) -> dict:
    """_epochs_record's entries back as {topic: {partition: epoch}}; a record that does
    not hold them in that shape is refused (ValueError)."""
    epochs: dict = {}
    if not isinstance(entries, list):
        raise ValueError("assignment_epochs is not a list")
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 3 and type(entry[0]) is str
                and type(entry[1]) is int and isinstance(entry[2], list)
                and all(type(p) is int for p in entry[2])):
            raise ValueError("an assignment_epochs entry is not [topic, epoch, [partitions]]")
        epochs.setdefault(entry[0], {}).update(dict.fromkeys(entry[2], entry[1]))
    return epochs


def _classic_record(classic) -> Optional[dict]:
    """A member of the classic protocol's metadata (None for a consumer-protocol
    member): its session timeout and its protocols as [name, subscription bytes]."""
    if classic is None:
        return None
    return {"session_timeout_ms": classic.session_timeout_ms,
            "protocols": [[name, bytes(meta)] for name, meta in classic.protocols]}


def fill_member(member, m: dict) -> None:
    """Set a new member's fields from its record (member_record's)."""
    member.instance_id = m["instance_id"]
    member.rack_id = m["rack_id"]
    member.client_id = m["client_id"]
    member.client_host = m["client_host"]
    member.rebalance_timeout_ms = m["rebalance_timeout_ms"]
    member.server_assignor = m["server_assignor"]
    member.topic_names = frozenset(m["topic_names"])
    member.topic_regex = m["topic_regex"]
    member.state = m["state"]
    member.member_epoch = m["member_epoch"]
    member.previous_epoch = m["previous_epoch"]
    member.assigned = _sets(m["assigned"])
    member.revoking = _sets(m["revoking"])
    # (absent in a record written before KIP-1251's epochs: every held partition then
    # counts as assigned at the member's epoch)
    member.assignment_epochs = _epochs_from(m.get("assignment_epochs", []))
    classic = m.get("classic")      # (absent in a record written before mixed groups)
    if classic is not None:
        member.classic = ClassicMetadata(
            classic["session_timeout_ms"],
            tuple((name, bytes(meta)) for name, meta in classic["protocols"]))


def consumer_record(cg, changed: Optional[set]) -> dict:
    """What the store writes for a consumer group: its epochs, topic metadata and
    resolved regexes whole, and the members in `changed` (None: every member, a full
    record replacing what came before); a member changed and gone is None (its
    tombstone). Plain values only (str, int, lists, dicts, None)."""
    ids = cg.members.keys() if changed is None else changed
    members = {}
    for member_id in sorted(ids):
        m = cg.members.get(member_id)
        members[member_id] = None if m is None else member_record(cg, m)
    return {"consumer": True, "full": changed is None, "group_epoch": cg.group_epoch,
            "assignment_epoch": cg.assignment_epoch, "metadata": dict(cg.metadata),
            "resolved": {r: sorted(ts) for r, ts in cg.resolved.items()},
            "members": members, "seq": cg.write_seq}


def follows(previous, record: dict) -> bool:
    """Whether the partial `record` may be applied over `previous` (a consumer group's
    state; anything else for none): a partial record holds the changes made on top of
    the record numbered just before it, so after a gap (a record the store lost) it
    describes a state that was never stored, and so does every partial record after it
    until a whole one. A group's first record is whole, so a numbered partial record
    over no consumer group state follows a lost one too. Records without numbers
    (written before they were numbered) always apply."""
    seq = record.get("seq")
    if type(seq) is not int:
        return True
    if not (isinstance(previous, dict) and previous.get("consumer")):
        return False
    last = previous.get("seq")
    return type(last) is not int or seq == last + 1


def apply_members(members: dict, record: dict, pack=None) -> None:
    """The members a partial `record` names, applied to `members` (a group's, by id) in
    place: each replaced by its record (or by `pack(record)`), or removed where its
    record is None."""
    for member_id, m in record["members"].items():
        if m is None:
            members.pop(member_id, None)
        else:
            members[member_id] = m if pack is None else pack(m)


def fold_consumer_record(previous: Optional[dict], record: dict) -> Optional[dict]:
    """A store's running state of a consumer group: `record` applied over `previous`
    (a full record replaces it; a partial one replaces the group's fields and the
    members it names, None removing one, if it follows `previous`: see `follows`;
    if not, the result is `previous`, None included). The result is a full record."""
    if record.get("full"):
        members = {}
    elif not follows(previous, record):
        return previous
    elif previous is None or not previous.get("consumer"):
        members = {}            # (an unnumbered record over none: as such logs were read)
    else:
        members = dict(previous["members"])
    apply_members(members, record)
    folded = dict(record)
    folded["full"] = True
    folded["members"] = members
    return folded


def commit_consumer_record(committed: Optional[dict], record: dict) -> dict:
    """The coordinator's copy of what the store holds, `committed` (None before the
    first record), with `record`, confirmed by the store right after it, applied in
    place: a partial record costs the members it names rather than the group's size.
    The copy is fold_consumer_record's full record (committed_state gives it back) with
    each member's record packed (marshal bytes): one object the garbage collector never
    visits, where a member's record holds about nine containers it would visit in every
    full collection, for every member the coordinator holds."""
    if committed is None or record.get("full"):
        committed = {"members": {}}
    apply_members(committed["members"], record, marshal.dumps)
    for key, value in record.items():
        if key != "members":
            committed[key] = value
    committed["full"] = True
    return committed


def unpack_member(packed: bytes) -> dict:
    """A member's record as commit_consumer_record's copy holds it, unpacked."""
    return marshal.loads(packed)


def committed_state(committed: Optional[dict]) -> Optional[dict]:
    """The full record commit_consumer_record's copy stands for (a new dict, its members
    unpacked), or None for none."""
    if committed is None:
        return None
    members = {member_id: unpack_member(packed)
               for member_id, packed in committed["members"].items()}
    return {**committed, "members": members}

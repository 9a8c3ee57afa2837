"""What the simulated classic consumers of the core tests share: a leader's range
assignment and how a JoinGroup answer moves a client."""
from __future__ import annotations

from fastcoord import Errors


def range_assign(members, partitions):
    """A classic leader's range assignment of one topic: {member id: [partitions]}."""
    ids = sorted(members)
    per, extra = divmod(partitions, len(ids))
    out, start = {}, 0
    for i, mid in enumerate(ids):
        count = per + (1 if i < extra else 0)
        out[mid] = list(range(start, start + count))
        start += count
    return out


def take_join_answer(client, r) -> bool:
    """A JoinGroup answer `r` to `client` (with `member_id` and `generation`): the id
    to use when the coordinator asks for one, none after UNKNOWN_MEMBER_ID or
    FENCED_INSTANCE_ID. True when the client joined (its SyncGroup is next)."""
    if r.error == Errors.MEMBER_ID_REQUIRED:
        client.member_id = r.member_id
        return False
    if r.error != Errors.NONE:
        if r.error in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
            client.member_id = ""
        return False
    client.member_id, client.generation = r.member_id, r.generation_id
    return True

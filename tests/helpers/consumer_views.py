"""Two views of a consumer group for tests: the group in memory, and what the store
confirmed (`ConsumerLogic.describe_committed`), each as consumer_group_describe answers.

consumer_group_describe describes what the store confirmed, as Kafka describes a group
at its last committed offset; when no write of the group is on its way and nothing is
left unwritten, it reads the group in memory instead (the two are then the same:
`memory_is_committed` checks that claim); otherwise it reads from memory the members
no write on its way names and nothing unwritten changed (`stored_is_committed` checks
that its answer is the copy's)."""
from __future__ import annotations


def in_memory(coord, group_id: str):
    """The group as it is in memory, its changes on their way to the store included
    (consumer_group_describe's answer for a group with no consumer state in memory)."""
    logic = coord._logic
    group = logic._get_group(group_id)
    if group is None or group.consumer is None:
        return coord.consumer_group_describe([group_id])[0]
    with group.rec:
        return logic.consumers.describe_live(group_id, group.consumer)


def memory_is_committed(coord, group_id: str) -> bool:
    """Check that a consumer group with no write on its way and nothing unwritten is
    described the same (but for the members' order) from memory and from the store's
    confirmed copy; True when the group was in that case (so checked), else False."""
    logic = coord._logic
    group = logic._get_group(group_id)
    if group is None or group.consumer is None:
        return False
    with group.rec:
        cg = group.consumer
        if cg.committed is None or cg.live or cg.unwritten():
            return False
        live = logic.consumers.describe_live(group_id, cg)
        committed = logic.consumers.describe_committed(group, cg)
    # (members in any order: the group's is its members', the copy's its records'; a
    # whole record lists them by id)
    assert _by_id(live) == _by_id(committed), (live, committed)
    return True


def _by_id(d):
    return d._replace(members=sorted(d.members, key=lambda m: m.member_id))


def stored_is_committed(coord, group_id: str) -> bool:
    """Check that ConsumerLogic.describe_stored (the copy, its unchanged members read from
    memory) answers what describe_committed (the copy alone) answers, members in the
    same order; True when the group has a copy to compare, else False."""
    logic = coord._logic
    group = logic._get_group(group_id)
    if group is None or group.consumer is None or group.consumer.committed is None:
        return False
    with group.rec:
        stored = logic.consumers.describe_stored(group, group.consumer)
        committed = logic.consumers.describe_committed(group, group.consumer)
    assert stored == committed, (stored, committed)
    return True

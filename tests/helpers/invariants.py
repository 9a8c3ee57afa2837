"""Checks that hold of a coordinator's groups after any sequence of requests (both twins)."""


def group_invariants(coord):
    """Internal consistency of every group (the same for both twins)."""
    logic = coord._logic
    for gid, rec in logic.table.groups.items():
        group = rec.group
        assert rec.state == group.state and rec.generation == group.generation
        assert set(rec.slots) == set(group.members), gid
        assert group.num_awaiting_join == sum(m.awaiting_join for m in group.members.values())
        if group.members:
            assert group.leader_id in group.members
        else:
            assert group.leader_id is None
        for instance, member_id in group.static.items():
            assert group.members[member_id].instance_id == instance
        for member_id, member in group.members.items():
            assert logic.owners[member.slot] == (group, member_id)
        if group.state == 0:   # Empty
            assert not group.members

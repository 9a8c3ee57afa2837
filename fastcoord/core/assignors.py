"""The consumer group protocol's (KIP-848) server-side assignors: `compute_assignment`
computes a group's target assignment with Kafka 4.0's ``uniform`` or ``range`` assignor
(docs/assignors.md), on the chosen twin (`fastcoord.core._native.engines`, compiled, or
`fastcoord.core._pure.assignors`, its readable specification; both return the same).
"""
from __future__ import annotations

from .. import _twins

__all__ = ["ASSIGNORS", "compute_assignment"]

ASSIGNORS = ("uniform", "range")


def compute_assignment(name: str, members, topics, current, *, impl=None) -> dict:
    """The target assignment of a group.

    name     "uniform" or "range".
    members  a sequence of (member_id, rack_id or None, subscribed topic names), in the
             group's member order (the uniform assignor's tie-breaks follow it; the range
             assignor sorts members by id as Kafka does). Racks are checked, not used.
             A static member may add its instance id as a fourth item (the range
             assignor puts static members first, by instance id, as Kafka does).
    topics   {topic name: partition count}: the partitions that exist; a subscribed
             topic missing here is not created yet and is ignored.
    current  {member_id: {topic: partitions}}: the current target assignment, what the
             uniform assignor keeps where balance allows; entries of members, topics or
             partitions that are gone, or of topics the member no longer subscribes to,
             are dropped.

    Returns {member_id: {topic: sorted partition tuple}} with every member (an empty
    dict for a member with nothing) and no empty tuples. The tuples are immutable
    values: a group keeps them as its target. The native twin's hold only ints and are
    untracked by the cyclic collector, as are the member dicts holding them, so a
    large target costs no garbage collection (the pure twin's are tracked until a
    collection untracks them, as CPython does with any tuple of ints).
    """
    return _twins.module(impl, "core.assignors").compute_assignment(name, members, topics, current)

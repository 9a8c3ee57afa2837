"""Server-side partition assignors of the consumer group protocol (KIP-848), pure-Python
twin of `fastcoord/core/_native/parts/assignors.pyx`: the readable specification.

Behaviour is Apache Kafka 4.0's group coordinator assignors (docs/assignors.md):

* ``uniform``: when every member subscribes to the same topic names, the homogeneous
  builder (`_uniform_homogeneous`): quotas in member order, keep what fits the quota,
  hand the rest out in order. Otherwise the heterogeneous builder
  (`_uniform_heterogeneous`): keep every subscribed current partition, hand out the
  unowned ones topic by topic to the least loaded subscribers, then move partitions
  from the most to the least loaded subscribers of each topic until balanced.
* ``range``: per topic, the subscribers sorted by member id receive consecutive
  ranges, the first ``P % N`` of them one more partition. Kafka 4.0's range assignor
  does not read the current assignment: it is deterministic, not sticky.

Where Kafka iterates a hash map (member ids, topic ids) this module uses a fixed order
instead: members in the order given (the group's member order), topics by name.
Topics that Kafka orders by topic id are ordered by name here.

Inputs are checked by `prepare` (shared by both twins); `current` is read by
`_current_owners` (each twin has its own reader; both drop the same things).
"""
from __future__ import annotations

import operator
from collections.abc import Mapping

__all__ = ["ASSIGNORS", "compute_assignment", "prepare"]

ASSIGNORS = ("uniform", "range")

# Kafka's partition ids are int32: a count above this is not a Kafka topic
MAX_PARTITIONS = 0x7FFFFFFF
# How many passes over the topics the heterogeneous balancing makes at most (Kafka's
# bound: each pass roughly halves the imbalance of overlapping subscriptions)
MAX_BALANCE_PASSES = 16


def _check_topic_name(topic, what: str) -> str:
    if not isinstance(topic, str):
        raise TypeError(f"{what} must be str topic names, got {type(topic).__name__}")
    return topic


def prepare(name, members, topics, current):
    """Validate the arguments (of `current` only its type: each twin reads its
    contents); return (member_ids, instance_ids, subscriptions, topics):
    instance_ids a list (None for a dynamic member) or None when no member is static,
    subscriptions a list of frozensets of topic names (all subscribed names, existing
    or not: Kafka decides homogeneity on names), topics a dict. Rack ids are checked
    and not returned: no assignor here places by rack."""
    if not isinstance(name, str):
        raise TypeError(f"assignor name must be str, got {type(name).__name__}")
    if name not in ASSIGNORS:
        raise ValueError(f"unknown assignor {name!r}: expected one of {ASSIGNORS}")
    if not isinstance(current, Mapping):
        raise TypeError(f"current must be a mapping of member id -> {{topic: partitions}}, got {type(current).__name__}")
    if not isinstance(topics, Mapping):
        raise TypeError(f"topics must be a mapping of topic name -> partition count, got {type(topics).__name__}")
    checked_topics = {}
    for topic, count in topics.items():
        _check_topic_name(topic, "topics' keys")
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"partition count of {topic!r} must be int, got {type(count).__name__}")
        if count < 0 or count > MAX_PARTITIONS:
            raise ValueError(f"partition count of {topic!r} must be in [0, {MAX_PARTITIONS}], got {count}")
        checked_topics[topic] = int(count)
    if isinstance(members, (str, bytes, Mapping)):
        raise TypeError("members must be a sequence of (member_id, rack_id, subscribed_topics[, instance_id])")
    member_ids, instance_ids, subscriptions, seen, seen_instances = [], [], [], set(), set()
    for entry in members:
        if not isinstance(entry, tuple) or len(entry) not in (3, 4):
            raise TypeError(f"a member must be a (member_id, rack_id, subscribed_topics[, instance_id]) "
                            f"tuple, got {entry!r}")
        member_id, rack, subscribed = entry[:3]
        instance_id = entry[3] if len(entry) == 4 else None
        if not isinstance(member_id, str):
            raise TypeError(f"member id must be str, got {type(member_id).__name__}")
        if member_id in seen:
            raise ValueError(f"duplicate member id {member_id!r}")
        if rack is not None and not isinstance(rack, str):
            raise TypeError(f"rack id of {member_id!r} must be str or None, got {type(rack).__name__}")
        if instance_id is not None:
            if not isinstance(instance_id, str):
                raise TypeError(f"instance id of {member_id!r} must be str or None, got {type(instance_id).__name__}")
            if instance_id in seen_instances:
                raise ValueError(f"duplicate instance id {instance_id!r}")
            seen_instances.add(instance_id)
        if isinstance(subscribed, (str, bytes)) or not hasattr(subscribed, "__iter__"):
            raise TypeError(f"subscribed topics of {member_id!r} must be a set or tuple of names")
        subscriptions.append(frozenset(_check_topic_name(t, "subscribed topics") for t in subscribed))
        seen.add(member_id)
        member_ids.append(member_id)
        instance_ids.append(instance_id)
    return member_ids, (instance_ids if seen_instances else None), subscriptions, checked_topics


def _partition_id(value) -> int:
    if isinstance(value, bool):
        raise TypeError("partition ids must be int, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"partition ids must be int, got {type(value).__name__}") from None


def _current_owners(member_ids, subscriptions, topics, current):
    """owners: {topic: list, owner member index or -1 per partition}, for the topics some
    member subscribes to, from `current`: a member's partitions count only where it
    still exists, is still subscribed, and the partition still exists; a partition
    claimed twice goes to the first claimant in member order (a target assignment never
    does that; the rule only makes the result defined)."""
    owners = {}
    for subscribed in subscriptions:
        for topic in subscribed:
            if topic in topics and topic not in owners:
                owners[topic] = [-1] * topics[topic]
    for index, member_id in enumerate(member_ids):
        assigned = current.get(member_id)
        if assigned is None:
            continue
        if not isinstance(assigned, Mapping):
            raise TypeError(f"current[{member_id!r}] must be a mapping of topic -> partitions")
        subscribed = subscriptions[index]
        for topic, partitions in assigned.items():
            _check_topic_name(topic, f"current[{member_id!r}]'s keys")
            if isinstance(partitions, (str, bytes)):
                raise TypeError(f"current[{member_id!r}][{topic!r}] must be an iterable of partition ids")
            row = owners.get(topic) if topic in subscribed else None
            for value in partitions:
                partition = _partition_id(value)
                if row is not None and 0 <= partition < len(row) and row[partition] == -1:
                    row[partition] = index
    return owners


def _empty_result(member_ids):
    return {member_id: {} for member_id in member_ids}


def _result_from_owners(member_ids, owners):
    """{member: {topic: sorted partition tuple}} from the per-partition owners."""
    result = _empty_result(member_ids)
    for topic in sorted(owners):
        held = {}  # owner -> its partitions of the topic, in partition order
        for partition, owner in enumerate(owners[topic]):
            if owner >= 0:
                held.setdefault(owner, []).append(partition)
        for owner, partitions in held.items():
            result[member_ids[owner]][topic] = tuple(partitions)
    return result


def compute_assignment(name, members, topics, current):
    """See fastcoord.core.assignors.compute_assignment."""
    member_ids, instance_ids, subscriptions, topics = prepare(name, members, topics, current)
    if name == "range":
        return _range(member_ids, instance_ids, subscriptions, topics)
    owners = _current_owners(member_ids, subscriptions, topics, current)
    if not member_ids:
        return {}
    if all(s == subscriptions[0] for s in subscriptions):
        _uniform_homogeneous(len(member_ids), sorted(owners), topics, owners)
    else:
        _uniform_heterogeneous(member_ids, subscriptions, topics, owners)
    return _result_from_owners(member_ids, owners)


# -- uniform, homogeneous subscriptions ---------------------------------------------

def _uniform_homogeneous(n_members, topic_names, topics, owners):
    """Every member subscribes to topic_names (the existing ones, sorted): rewrite
    owners in place. Member i's quota is total // n, plus one for the first total % n
    members in member order. Each member keeps its current partitions (topics by name,
    partitions ascending) up to its quota; the partitions nobody owned come first in the
    hand-out list (topics by name, partitions ascending), then the ones members gave
    back (in the order given back); members below quota take from it in member order."""
    if not topic_names:
        return
    total = sum(topics[t] for t in topic_names)
    min_quota, extra = divmod(total, n_members)
    held = [[] for _ in range(n_members)]  # member -> [(topic, partition)] in keep order
    unassigned = []
    for topic in topic_names:
        for partition, owner in enumerate(owners[topic]):
            if owner < 0:
                unassigned.append((topic, partition))
            else:
                held[owner].append((topic, partition))
    unfilled = []
    for member in range(n_members):
        quota = min_quota + (1 if member < extra else 0)
        kept = held[member]
        if len(kept) > quota:
            for topic, partition in kept[quota:]:
                owners[topic][partition] = -1
                unassigned.append((topic, partition))
        elif len(kept) < quota:
            unfilled.append((member, quota - len(kept)))
    # the quotas sum to the total, so the missing ones sum to len(unassigned)
    taken = 0
    for member, missing in unfilled:
        for topic, partition in unassigned[taken:taken + missing]:
            owners[topic][partition] = member
        taken += missing


# -- uniform, heterogeneous subscriptions -------------------------------------------

def _topic_order(topic_names, counts, subscribers):
    """Kafka's topic order: partitions per subscriber descending (compared exactly, by
    cross-multiplication), then subscriber count ascending, then topic (name) ascending."""
    import functools

    def compare(a, b):
        pa, sa, pb, sb = counts[a], len(subscribers[a]), counts[b], len(subscribers[b])
        lhs, rhs = pb * sa, pa * sb
        if lhs != rhs:
            return -1 if lhs < rhs else 1
        if sa != sb:
            return -1 if sa < sb else 1
        return -1 if a < b else (1 if a > b else 0)

    return sorted(topic_names, key=functools.cmp_to_key(compare))


class _Balancer:
    """Kafka's member balancer over one topic's subscribers: a range of least loaded
    members at the left of `order` (sorted by load, then member index), handed one
    partition each per level, and a range of most loaded ones at the right, giving one
    each per level. `sizes` is the live load of every member."""

    def __init__(self, sizes):
        self.sizes = sizes
        self.order = []

    def initialize(self, members) -> int:
        sizes = self.sizes
        self.order = order = sorted(members, key=lambda m: (sizes[m], m))
        self.least_end = 0
        self.least_level = sizes[order[0]] - 1
        self.next_least = 0
        self.most_start = self.most_end = len(order)
        self.most_level = sizes[order[-1]] + 1
        self.next_most = len(order) - 1
        return sizes[order[-1]] - sizes[order[0]]

    def next_least_loaded(self) -> int:
        order, sizes = self.order, self.sizes
        if self.next_least >= self.least_end:
            # every member of the range had one: raise the level, widen the range
            self.least_level += 1
            while self.least_end < len(order) and sizes[order[self.least_end]] == self.least_level:
                self.least_end += 1
            self.next_least = 0
        member = order[self.next_least]
        self.next_least += 1
        return member

    def next_most_loaded(self) -> int:
        order, sizes = self.order, self.sizes
        if self.next_most < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                # the range emptied by exclusions: restart it at the next member's load
                self.most_level = sizes[order[self.most_start - 1]]
            else:
                self.most_level -= 1
            while self.most_start > 0 and sizes[order[self.most_start - 1]] == self.most_level:
                self.most_start -= 1
            self.next_most = self.most_end - 1
        if self.next_most < 0:
            return -1
        member = order[self.next_most]
        self.next_most -= 1
        return member

    def exclude_most_loaded(self) -> None:
        """Drop the member next_most_loaded just returned from the most loaded range
        (it has none of this topic's partitions to give)."""
        order, at = self.order, self.next_most + 1
        order[at], order[self.most_end - 1] = order[self.most_end - 1], order[at]
        self.most_end -= 1

    def balanced(self) -> bool:
        return self.most_level - self.least_level <= 1


def _uniform_heterogeneous(member_ids, subscriptions, topics, owners):
    """Rewrite owners in place (current owners already filtered to subscribers)."""
    n_members = len(member_ids)
    subscribers = {t: [] for t in owners}
    for member in range(n_members):
        for topic in subscriptions[member]:
            if topic in subscribers:
                subscribers[topic].append(member)
    sizes = [0] * n_members
    for row in owners.values():
        for owner in row:
            if owner >= 0:
                sizes[owner] += 1
    counts = {t: topics[t] for t in owners}
    balancer = _Balancer(sizes)
    # hand out the unowned partitions, topic by topic, to the least loaded subscribers
    for topic in _topic_order([t for t in owners if -1 in owners[t]], counts, subscribers):
        row = owners[topic]
        balancer.initialize(subscribers[topic])
        for partition in range(len(row)):
            if row[partition] == -1:
                member = balancer.next_least_loaded()
                row[partition] = member
                sizes[member] += 1
    # then move partitions from the most to the least loaded subscribers of each topic
    movable = _topic_order([t for t in owners if len(subscribers[t]) >= 2], counts, subscribers)
    last_moved = -1
    for _ in range(MAX_BALANCE_PASSES):
        for position, topic in enumerate(movable):
            if position == last_moved:
                return  # a whole pass over the topics without a move
            moved = _balance_topic(owners[topic], subscribers[topic], sizes, balancer)
            if moved > 0 or last_moved == -1:
                last_moved = position


def _balance_topic(row, members, sizes, balancer) -> int:
    """Move this topic's partitions from its most to its least loaded subscribers until
    their loads differ by one at most (or no loaded one has a partition of it left);
    a giver gives its highest partition of the topic. Returns the number moved."""
    if balancer.initialize(members) <= 1:
        return 0
    # the topic's partitions grouped by owner (index ascending), ascending within one
    grouped = sorted(range(len(row)), key=lambda p: (row[p], p))
    start, end = {}, {}
    for i, partition in enumerate(grouped):
        start.setdefault(row[partition], i)
        end[row[partition]] = i + 1
    moved = 0
    while not balancer.balanced():
        while True:
            giver = balancer.next_most_loaded()
            if giver == -1 or end.get(giver, 0) - start.get(giver, 0) > 0:
                break
            balancer.exclude_most_loaded()
        if giver == -1:
            break
        end[giver] -= 1
        partition = grouped[end[giver]]
        taker = balancer.next_least_loaded()
        if balancer.balanced():
            break
        row[partition] = taker
        sizes[giver] -= 1
        sizes[taker] += 1
        moved += 1
    return moved


# -- range --------------------------------------------------------------------------

def _java_order(text: str) -> bytes:
    """Java compares strings by UTF-16 code units: so do these bytes."""
    return text.encode("utf-16-be", "surrogatepass")


def range_order(member_ids, instance_ids):
    """Member indices in Kafka's range order: static members first, by instance id,
    then the others by member id."""
    if instance_ids is None:
        return sorted(range(len(member_ids)), key=lambda m: _java_order(member_ids[m]))

    def key(m):
        instance_id = instance_ids[m]
        return (0, _java_order(instance_id)) if instance_id is not None else (1, _java_order(member_ids[m]))

    return sorted(range(len(member_ids)), key=key)


def _range(member_ids, instance_ids, subscriptions, topics):
    """Per existing subscribed topic: its subscribers in range order each take the next
    consecutive range of P // N partitions, the first P % N of them one more."""
    result = _empty_result(member_ids)
    by_id = range_order(member_ids, instance_ids)
    for topic in sorted(topics):
        count = topics[topic]
        subscribers = [m for m in by_id if topic in subscriptions[m]]
        if not subscribers:
            continue
        min_quota, extra = divmod(count, len(subscribers))
        start = 0
        for rank, member in enumerate(subscribers):
            end = start + min_quota + (1 if rank < extra else 0)
            if end > start:
                result[member_ids[member]][topic] = tuple(range(start, end))
            start = end
    return result

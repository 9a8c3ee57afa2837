"""Random consumer group records (consumer_records.consumer_record's dicts) for the
storage tests: a hypothesis strategy, and a seeded generator for random logs."""
from __future__ import annotations

import random

from hypothesis import strategies as st

__all__ = ["consumer_records", "random_consumer_record", "member"]

TOPICS = ["t", "u", "tópico", ""]
I32 = st.integers(-2**31, 2**31 - 1)
_text = st.text(max_size=6)
_otext = st.none() | _text
_parts = st.dictionaries(_text, st.lists(I32, max_size=4), max_size=3)

# an extra (unknown) field's value: what a newer coordinator may add, e.g. a migrating
# member's classic-protocol fields
_plain = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | _text | st.binary(max_size=4),
    lambda inner: (st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
                   | st.dictionaries(_text, inner, max_size=3)),
    max_leaves=8)


def _extras(known):
    return st.dictionaries(_text.filter(lambda k: k not in known), _plain, max_size=2)


_MEMBER_FIELDS = ("instance_id", "rack_id", "client_id", "client_host", "rebalance_timeout_ms",
                  "server_assignor", "topic_names", "topic_regex", "state", "member_epoch",
                  "previous_epoch", "assigned", "revoking", "target")
_GROUP_FIELDS = ("consumer", "full", "group_epoch", "assignment_epoch", "metadata", "resolved",
                 "members", "written_ms")

_members = st.builds(
    lambda fields, extras: {**extras, **fields},
    st.fixed_dictionaries({
        "instance_id": _otext, "rack_id": _otext, "client_id": _otext, "client_host": _otext,
        "rebalance_timeout_ms": I32, "server_assignor": _otext,
        "topic_names": st.lists(_text, max_size=3), "topic_regex": _otext,
        "state": st.integers(0, 255), "member_epoch": I32, "previous_epoch": I32,
        "assigned": _parts, "revoking": _parts, "target": _parts}),
    _extras(_MEMBER_FIELDS))

consumer_records = st.builds(
    lambda fields, extras: {**extras, **fields},
    st.fixed_dictionaries({
        "consumer": st.just(True), "full": st.booleans(), "group_epoch": I32,
        "assignment_epoch": I32, "metadata": st.dictionaries(_text, I32, max_size=3),
        "resolved": st.dictionaries(_text, st.lists(_text, max_size=3), max_size=2),
        "members": st.dictionaries(_text, st.none() | _members, max_size=4)}),
    _extras(_GROUP_FIELDS))


def member(rng: random.Random, epoch: int) -> dict:
    """A member_record-shaped dict; sometimes with a migrating member's classic fields."""
    topics = sorted(rng.sample(TOPICS, rng.randrange(1, 3)))
    m = {"instance_id": rng.choice([None, "i-é", ""]), "rack_id": rng.choice([None, "r1"]),
         "client_id": "c", "client_host": "/127.0.0.1",
         "rebalance_timeout_ms": rng.randrange(2**31), "server_assignor": rng.choice([None, "uniform"]),
         "topic_names": topics, "topic_regex": rng.choice([None, "t.*"]),
         "state": rng.randrange(3), "member_epoch": epoch, "previous_epoch": epoch - 1,
         "assigned": {t: sorted(rng.sample(range(8), rng.randrange(4))) for t in topics},
         "revoking": rng.choice([{}, {topics[0]: [rng.randrange(-2**31, 2**31)]}]),
         "target": {t: sorted(rng.sample(range(8), rng.randrange(4))) for t in topics}}
    if rng.random() < 0.2:
        m["classic"] = {"session_timeout_ms": rng.randrange(2**31),
                        "protocols": [["range", rng.randbytes(rng.randrange(5))]]}
    return m


def random_consumer_record(rng: random.Random, member_ids=("a", "b", "c", "d")) -> dict:
    """A consumer_record: full (every member) or a partial one (some members, some of
    them removed), over a small pool of member ids so that records of a group overlap."""
    epoch = rng.randrange(1, 50)
    full = rng.random() < 0.3
    members = {}
    for member_id in rng.sample(member_ids, rng.randrange(len(member_ids) + 1)):
        if full or rng.random() < 0.7:
            members[member_id] = member(rng, epoch)
        else:
            members[member_id] = None
    return {"consumer": True, "full": full, "group_epoch": epoch, "assignment_epoch": epoch - 1,
            "metadata": {t: rng.randrange(1, 9) for t in rng.sample(TOPICS, 2)},
            "resolved": rng.choice([{}, {"t.*": ["t"]}]), "members": members}

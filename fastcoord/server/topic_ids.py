"""Topic ids: the UUID Kafka gives every topic, for the APIs that name topics by id
(Metadata v10+, ConsumerGroupHeartbeat, ConsumerGroupDescribe).

Each topic declared to `fastcoord serve` gets a random (version 4) UUID the first time
it is declared; with a durable store the ids are kept beside the shard logs
(`DurableStore.store_topic_ids`) and read back at the next start, so a topic keeps its
id across restarts, as a Kafka topic does for its whole life. Without a store they live
as long as the process. A topic no longer declared keeps its kept id (declared again
later, it is the same topic); the zero UUID, Kafka's "no id", is never handed out.
"""
from __future__ import annotations

import uuid
from typing import Dict, Iterable, Optional

__all__ = ["TopicIds"]

ZERO = uuid.UUID(int=0)


class TopicIds:
    """The two-way map between the declared topics' names and their ids."""

    def __init__(self, ids: Dict[str, uuid.UUID]) -> None:
        self._by_name = dict(ids)
        self._by_id = {v: k for k, v in self._by_name.items()}

    @classmethod
    def for_topics(cls, names: Iterable[str], store=None) -> "TopicIds":
        """The ids of `names`: those `store` keeps (a DurableStore, or None), new ones
        made (and kept, before this returns) for the others."""
        names = list(dict.fromkeys(names))
        kept = {n: uuid.UUID(bytes=raw) for n, raw in
                (store.load_topic_ids().items() if store is not None else ())}
        missing = [n for n in names if n not in kept]
        used = set(kept.values())
        for name in missing:
            new = uuid.uuid4()
            while new in used or new == ZERO:     # (never, in practice)
                new = uuid.uuid4()
            used.add(new)
            kept[name] = new
        if missing and store is not None:
            store.store_topic_ids({n: u.bytes for n, u in kept.items()})
        # Only the declared topics exist: an id kept for another resolves to nothing.
        return cls({n: kept[n] for n in names})

    def id_of(self, name: str) -> Optional[uuid.UUID]:
        return self._by_name.get(name)

    def name_of(self, topic_id) -> Optional[str]:
        return self._by_id.get(topic_id)

    def as_dict(self) -> Dict[str, uuid.UUID]:
        return dict(self._by_name)

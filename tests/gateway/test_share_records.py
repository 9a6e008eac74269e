"""What a replicated cluster's share coordinator reads of its records for the administration
(walgate/gateway/kafka/share_records.py): the states of the asked groups in the coordinator partitions loaded here
(durable ones: a write queued and not held by the in-sync replicas is not seen), without deletions nor records of a
topic deleted since, and the ids of the groups they name; nothing without records (a persister)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from walgate.gateway.kafka.share_persister import write_states
from walgate.gateway.kafka.share_records import group_records, recorded_ids
from walgate.storage.coordinator_partitions import partition_for
from walgate.storage.durability import Unsynced
from walgate.storage.replicated_coordinator_log import ReplicatedShareStateLog

T, GONE = str(uuid.UUID(int=1)), str(uuid.UUID(int=2))
V = {"s": 3, "e": 3, "r": []}
N = 4
PERSISTER = object()
"""A replicated cluster's share service has a persister (its kind does not matter here)."""


class Topics:
    """Topic ``T`` exists; ``GONE`` was deleted."""

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return "t" if str(topic_id) == T else None


def broker(logs: dict[int, ReplicatedShareStateLog], persister: Any = PERSISTER) -> Any:
    replicated = SimpleNamespace(share_log=logs.get)
    return SimpleNamespace(coordinators=SimpleNamespace(partitions=N, replicated=replicated),
                           shares=SimpleNamespace(persister=persister), topics=Topics)


def written(log: ReplicatedShareStateLog, writes: list[tuple[tuple[str, str, int], Any]]) -> None:
    assert write_states(log, [(key, value, 0) for key, value in writes]) == {}
    sync = log.take_sync()
    assert sync is not None
    sync.done()


def test_the_records_of_the_asked_groups_without_deletions_or_deleted_topics() -> None:
    p = partition_for("g", N)
    log = ReplicatedShareStateLog(p, lambda: 1_700_000_000_000, Unsynced(lambda _: None))
    written(log, [(("g", T, 0), V), (("g", T, 1), V), (("g", GONE, 0), V), (("h", GONE, 0), V)])
    written(log, [(("g", T, 1), None)])  # deleted
    assert write_states(log, [(("g", T, 2), V, 0)]) == {}  # queued, not durable
    others = {q: ReplicatedShareStateLog(q, lambda: 0, Unsynced(lambda _: None)) for q in range(N) if q != p}
    assert group_records(broker({p: log}), ["g", "h"]) == {("g", T, 0): {**V, "l": 0}}
    assert group_records(broker(others), ["g"]) == {}, "the group's partition is not loaded here"
    assert recorded_ids(broker({p: log})) == {"g"}, "h's only record is of a deleted topic"
    assert group_records(broker({p: log}, None), ["g"]) == {} and recorded_ids(broker({p: log}, None)) == set()

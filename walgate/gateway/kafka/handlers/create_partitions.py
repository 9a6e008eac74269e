"""CreatePartitions (key 37) v0–v3: grow a Kafka-native topic (new vgroups of its database).

Only larger counts (INVALID_PARTITIONS otherwise), assignments only onto this
node; TDengine topics have their database's vgroups: INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.create_topics import MAX_PARTITIONS
from walgate.storage.errors import StorageError
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 37, 0, 3


def grow(broker: Broker, t: Any, validate_only: bool) -> dict[str, Any]:
    def result(error: int, message: str | None = None) -> dict[str, Any]:
        return {"name": t.name, "error_code": error, "error_message": message}

    engine = broker.engine
    topic = engine.catalog.topics.get(t.name)
    if topic is None:
        return result(ErrorCode.unknown_topic_or_partition, f"topic {t.name} does not exist")
    if topic.kind != "kafka":
        return result(ErrorCode.invalid_request, f"{t.name} is a TDengine topic: its partitions are {topic.db}'s vgroups")
    current = engine.partition_count(t.name)
    if not current < t.count <= MAX_PARTITIONS:
        return result(ErrorCode.invalid_partitions,
                      f"topic {t.name} has {current} partitions: ask for more, at most {MAX_PARTITIONS}")
    if t.assignments and any(list(a.broker_ids) != [broker.node_id] for a in t.assignments):
        return result(ErrorCode.invalid_replica_assignment, f"replicas can only be assigned to broker {broker.node_id}")
    if not validate_only:
        try:
            engine.create_partitions(t.name, t.count)
        except StorageError as exc:
            return result(ErrorCode.invalid_request, str(exc))
    return result(ErrorCode.none)


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    results = await broker.storage.call(lambda: [grow(broker, t, request.validate_only) for t in request.topics])
    return {"throttle_time": 0, "results": results}

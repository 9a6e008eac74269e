"""Metadata (key 3) v0–v12: this node as the only broker, TDengine topics with partitions = vgroups.

v0 asks for all topics with an empty list, v1+ with a null list. Unknown names
get UNKNOWN_TOPIC_OR_PARTITION, unless ``auto_create_topic_partitions`` is set
(off by default, as Kafka's ``auto.create.topics.enable`` should be) and the
request allows it (``allow_auto_topic_creation``, v4+): then a Kafka-native
topic of that many partitions is created.
Topic ids (v10+) are the stable UUIDs the catalog stores per topic.
"""

from __future__ import annotations

import uuid
from typing import Any

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.common import LEADER_EPOCH
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 3, 0, 12
_NO_AUTH_OPS = -2147483648


def topic_entries(engine: Engine, node_id: int, names: list[str] | None) -> list[dict[str, Any]]:
    """Metadata entries for ``names`` (None: every topic); runs on the storage thread."""
    topics = engine.catalog.topics
    out = []
    for name in sorted(topics) if names is None else names:
        t = topics.get(name)
        if t is None:
            out.append({"error_code": ErrorCode.unknown_topic_or_partition, "name": name, "topic_id": uuid.UUID(int=0), "partitions": []})
            continue
        out.append(
            {
                "error_code": ErrorCode.none,
                "name": name,
                "topic_id": uuid.UUID(t.topic_id),
                "is_internal": False,
                "topic_authorized_operations": _NO_AUTH_OPS,
                "partitions": [
                    {
                        "error_code": ErrorCode.none,
                        "partition_index": p,
                        "leader_id": node_id,
                        "leader_epoch": LEADER_EPOCH,
                        "replica_nodes": [node_id],
                        "isr_nodes": [node_id],
                        "offline_replicas": [],
                    }
                    for p in range(engine.partition_count(name))
                ],
            }
        )
    return out


def _requested(engine: Engine, request: Any, version: int) -> list[str] | None:
    topics = request.topics
    if topics is None or (version == 0 and not topics):
        return None
    by_id = {uuid.UUID(t.topic_id): n for n, t in engine.catalog.topics.items()}
    names = []
    for t in topics:
        name = getattr(t, "name", None)
        if name is None:
            name = by_id.get(t.topic_id, str(t.topic_id))
        names.append(name)
    return names


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    def describe() -> list[dict[str, Any]]:
        names = _requested(broker.engine, request, header.api_version)
        if broker.auto_create_partitions and getattr(request, "allow_auto_topic_creation", True):
            for name in names or ():
                if name not in broker.engine.catalog.topics:
                    try:
                        broker.engine.create_kafka_topic(name, broker.auto_create_partitions, {})
                    except StorageError:
                        pass  # an invalid name: answered UNKNOWN_TOPIC_OR_PARTITION below
        return topic_entries(broker.engine, broker.node_id, names)

    topics = await broker.storage.call(describe)
    return {
        "throttle_time": 0,
        "brokers": [{"node_id": broker.node_id, "host": broker.host, "port": broker.port, "rack": None}],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": _NO_AUTH_OPS,
    }

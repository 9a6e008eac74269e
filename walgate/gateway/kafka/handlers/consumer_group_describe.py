"""ConsumerGroupDescribe (key 69) v0–v1: KIP-848 groups with members, epochs, current and target assignment."""

from __future__ import annotations

import uuid
from typing import Any

from walgate.gateway.kafka.broker import Broker

API_KEY, MIN_VERSION, MAX_VERSION = 69, 0, 1
_NO_AUTH_OPS = -2147483648


def _with_ids(assignment: dict[str, Any], ids: dict[str, uuid.UUID]) -> dict[str, Any]:
    return {"topic_partitions": [
        {**t, "topic_id": ids.get(t["topic_name"], uuid.UUID(int=0))} for t in assignment["topic_partitions"]
    ]}


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    svc = broker.groups
    groups = await svc.run(lambda: (svc.groups.consumer.describe(request.group_ids), []))
    ids = {name: uuid.UUID(t.topic_id) for name, t in svc.engine.catalog.topics.items()}
    for g in groups:
        g["authorized_operations"] = _NO_AUTH_OPS
        for m in g["members"]:
            m["assignment"] = _with_ids(m["assignment"], ids)
            m["target_assignment"] = _with_ids(m["target_assignment"], ids)
    return {"throttle_time": 0, "groups": groups}

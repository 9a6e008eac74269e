"""OffsetDelete (key 47) v0: drop a group's committed offsets of topics it does not subscribe to."""

from __future__ import annotations

from typing import Any

from walgate.coordinator.offsets import delete_offsets
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.groups import now_ms

API_KEY, MIN_VERSION, MAX_VERSION = 47, 0, 0


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    svc = broker.groups
    topics = [(t.name, [p.partition_index for p in t.partitions]) for t in request.topics]

    def delete() -> tuple[dict[str, Any], list[Any]]:
        plan = delete_offsets(
            svc.groups.classic, svc.store, group_id=request.group_id, topics=topics,
            topic_exists=lambda name: name in svc.engine.catalog.topics, now_ms=now_ms(),
            consumer=svc.groups.consumer,
        )
        svc.store.delete(plan.group_id, plan.deletions)
        return plan.response, []

    return {"throttle_time": 0, **await svc.run(delete)}

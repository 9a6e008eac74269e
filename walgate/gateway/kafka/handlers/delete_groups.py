"""DeleteGroups (key 42) v0–v2: empty groups go, with their committed offsets; others get NON_EMPTY_GROUP."""

from __future__ import annotations

from typing import Any

from walgate.coordinator.offsets import delete_groups
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.groups import now_ms

API_KEY, MIN_VERSION, MAX_VERSION = 42, 0, 2


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    svc = broker.groups

    def delete() -> tuple[list[dict[str, Any]], list[Any]]:
        plan = delete_groups(svc.groups, svc.store, group_ids=request.groups_names, now_ms=now_ms())
        for group, partitions in plan.deletions.items():
            svc.store.delete(group, partitions)
        return plan.results, []

    return {"throttle_time": 0, "results": await svc.run(delete)}

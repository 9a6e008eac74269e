"""DescribeGroups (key 15) v0–v5: state, protocol and members of each group."""

from __future__ import annotations

from typing import Any

from walgate.gateway.kafka.broker import Broker

API_KEY, MIN_VERSION, MAX_VERSION = 15, 0, 5
_NO_AUTH_OPS = -2147483648


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    svc = broker.groups
    groups = await svc.run(
        lambda: (svc.groups.describe(request.groups, has_offsets=svc.store.has_offsets, report_not_found=False), [])
    )
    return {"throttle_time": 0, "groups": [{**g, "authorized_operations": _NO_AUTH_OPS} for g in groups]}

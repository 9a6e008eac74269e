"""DescribeGroups (key 15) v0–v5: state, protocol and members of each group.

A coordinator failure is answered as every requested group's error code (:mod:`.common`)."""

from __future__ import annotations

from typing import Any

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.common import answered

API_KEY, MIN_VERSION, MAX_VERSION = 15, 0, 5
_NO_AUTH_OPS = -2147483648


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    svc = broker.groups
    groups = await answered(svc.with_store(
        lambda store: (svc.groups.describe(request.groups, has_offsets=store.has_offsets, report_not_found=False), [])
    ), lambda code: [{"group_id": g, "error_code": code, "group_state": "", "protocol_type": "", "protocol_data": "",
                      "members": []} for g in request.groups])
    return {"throttle_time": 0, "groups": [{**g, "authorized_operations": _NO_AUTH_OPS} for g in groups]}

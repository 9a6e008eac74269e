"""ListGroups (key 16) v0–v5: every group, optionally filtered by state (v4+) and type (v5+).

A coordinator failure is answered as an error code (:mod:`.common`)."""

from __future__ import annotations

from typing import Any

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.common import answered
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 16, 0, 5


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    svc = broker.groups
    answer = await answered(svc.with_store(
        lambda store: (
            {"error_code": ErrorCode.none, "groups": svc.groups.list_groups(
                states_filter=getattr(request, "states_filter", ()),
                types_filter=getattr(request, "types_filter", ()),
                offset_groups=store.groups_with_offsets(),
            )},
            [],
        )
    ), lambda code: {"error_code": code, "groups": []})
    return {"throttle_time": 0, **answer}

"""ListGroups (key 16) v0–v5: every group, optionally filtered by state (v4+) and type (v5+)."""

from __future__ import annotations

from typing import Any

from walgate.gateway.kafka.broker import Broker
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 16, 0, 5


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    svc = broker.groups
    groups = await svc.run(
        lambda: (
            svc.groups.list_groups(
                states_filter=getattr(request, "states_filter", ()),
                types_filter=getattr(request, "types_filter", ()),
                offset_groups=svc.store.groups_with_offsets(),
            ),
            [],
        )
    )
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": groups}

"""OffsetFetch (key 9) v0–v9: committed offsets of one group (v0–v7) or several (v8+); all topics when null."""

from __future__ import annotations

from typing import Any

from walgate.coordinator.offsets import fetch_offsets
from walgate.gateway.kafka.broker import Broker

API_KEY, MIN_VERSION, MAX_VERSION = 9, 0, 9


def _topics(topics: Any) -> list[tuple[str, list[int]]] | None:
    return None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    svc = broker.groups
    if header.api_version >= 8:
        wanted = [(g.group_id, _topics(g.topics)) for g in request.groups]
    else:
        wanted = [(request.group_id, _topics(request.topics))]
    answers = await svc.run(lambda: ([fetch_offsets(svc.store, group_id=g, topics=t) for g, t in wanted], []))
    if header.api_version >= 8:
        return {"throttle_time": 0, "groups": answers}
    single = dict(answers[0])
    del single["group_id"]  # v0-v7 answer one group at the top level
    return {"throttle_time": 0, **single}

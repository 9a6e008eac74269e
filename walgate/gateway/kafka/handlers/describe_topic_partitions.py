"""DescribeTopicPartitions (key 75) v0: Metadata's topic view, paged by a cursor.

Topics are answered in name order starting at the cursor; at most
``response_partition_limit`` partitions per response, ``next_cursor`` says
where to go on. Newer Java admin clients try this API before Metadata. ACLs as Metadata's: topics the principal may not Describe
are left out of a listing and answer TOPIC_AUTHORIZATION_FAILED when named. Every other topic answered carries its
authorized operations (the request has no flag for them: Kafka's handler always fills them in).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from walgate.gateway.kafka.access import Operation, ResourceType, checker, operations
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.metadata import topic_entries
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 75, 0, 0


def _answer(engine: Engine, node_id: int, request: Any, describable: Callable[[str], bool] | None
            ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    names = sorted({t.name for t in request.topics}) if request.topics else None
    entries = topic_entries(engine, node_id, names, describable=describable)
    for e in entries:  # nullable in the schema, but the Java client streams them: send empty lists, as Kafka does
        for p in e["partitions"]:
            p.update(eligible_leader_replicas=[], last_known_elr=[])
    cursor = request.cursor
    limit = max(request.response_partition_limit, 1)
    out: list[dict[str, Any]] = []
    left = limit
    for e in entries:
        if cursor is not None and e["name"] < cursor.topic_name:
            continue
        first = cursor.partition_index if cursor is not None and e["name"] == cursor.topic_name else 0
        parts = e["partitions"][first:]
        if len(parts) > left:
            out.append({**e, "partitions": parts[:left]})
            return out, {"topic_name": e["name"], "partition_index": first + left}
        out.append({**e, "partitions": parts})
        left -= len(parts)
        if left == 0 and e is not entries[-1]:
            nxt = entries[entries.index(e) + 1]
            return out, {"topic_name": nxt["name"], "partition_index": 0}
    return out, None


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    topics, cursor = await broker.call(_answer, broker.node_id, request,
                                       checker(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC))
    for t in topics:
        if t["error_code"] != ErrorCode.topic_authorization_failed:
            t["topic_authorized_operations"] = operations(broker, ctx, ResourceType.TOPIC, t["name"])
    return {"throttle_time": 0, "topics": topics, "next_cursor": cursor}

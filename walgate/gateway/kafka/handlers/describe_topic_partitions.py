"""DescribeTopicPartitions (key 75) v0: Metadata's topic view, paged by a cursor (each partition's leader the node its
vgroup is placed on, as :mod:`.metadata` names it).

Topics are answered in name order starting at the cursor; at most
``response_partition_limit`` partitions per response, ``next_cursor`` says
where to go on. Newer Java admin clients try this API before Metadata. ACLs as Metadata's: topics the principal may not Describe
are left out of a listing and answer TOPIC_AUTHORIZATION_FAILED when named. Every other topic answered carries its
authorized operations (the request has no flag for them: Kafka's handler always fills them in).
"""

from __future__ import annotations

from collections.abc import Callable

from walgate.gateway.kafka.access import Operation, ResourceType, checker, operations
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.metadata import States, broker_states, topic_entries
from walgate.gateway.kafka.leaders import other_nodes
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponseCursor,
    DescribeTopicPartitionsResponseTopic,
    MetadataResponseTopic,
)

API_KEY, MIN_VERSION, MAX_VERSION = 75, 0, 0


def _topic(entry: MetadataResponseTopic) -> DescribeTopicPartitionsResponseTopic:
    """Metadata's entry of a topic as this API answers it: the ELR lists are nullable in the schema, but the Java
    client streams them, so they are sent empty, as Kafka does."""
    return {**entry, "partitions": [{**p, "eligible_leader_replicas": [], "last_known_elr": []}
                                    for p in entry.get("partitions", ())]}


def _answer(engine: Engine, node_id: int, request: DescribeTopicPartitionsRequest,
            describable: Callable[[str], bool] | None, live: frozenset[int], states: States
            ) -> tuple[list[DescribeTopicPartitionsResponseTopic], DescribeTopicPartitionsResponseCursor | None]:
    names = sorted({t.name for t in request.topics}) if request.topics else None
    entries = [_topic(e) for e in topic_entries(engine, node_id, names, describable=describable, live=live,
                                                states=states)]
    cursor = request.cursor
    limit = max(request.response_partition_limit, 1)
    out: list[DescribeTopicPartitionsResponseTopic] = []
    left = limit
    for e in entries:
        name = e.get("name") or ""  # topic_entries names every entry
        if cursor is not None and name < cursor.topic_name:
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        parts = e.get("partitions", ())[first:]
        if len(parts) > left:
            out.append({**e, "partitions": parts[:left]})
            return out, {"topic_name": name, "partition_index": first + left}
        out.append({**e, "partitions": parts})
        left -= len(parts)
        if left == 0 and e is not entries[-1]:
            nxt = entries[entries.index(e) + 1]
            return out, {"topic_name": nxt.get("name") or "", "partition_index": 0}
    return out, None


async def handle(broker: Broker, ctx: RequestContext,
                 request: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    topics, cursor = await broker.call(_answer, broker.node_id, request,
                                       checker(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC),
                                       frozenset(other_nodes(broker, ctx.listener.name)), broker_states(broker))
    for t in topics:
        if t["error_code"] != ErrorCode.topic_authorization_failed:
            t["topic_authorized_operations"] = operations(broker, ctx, ResourceType.TOPIC, t.get("name") or "")
    return {"throttle_time": 0, "topics": topics, "next_cursor": cursor}

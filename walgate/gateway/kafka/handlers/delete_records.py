"""DeleteRecords (key 21) v0–v2: move partitions' log start offsets (-1: to the high watermark).

Fetches below the new log start get OFFSET_OUT_OF_RANGE and the consumer's
reset policy; the bytes go when retention deletes their WAL segment. An offset past the high watermark is
OFFSET_OUT_OF_RANGE (Kafka's ``UnifiedLog.deleteRecordsOnLeader``: records not committed are not deleted). Each
partition answers its own error (:mod:`.common`'s table). Leadership as ListOffsets'
(:class:`~walgate.gateway.kafka.leaders.Reads`): a replicated partition (issue 25) only on its leader, else
NOT_LEADER_OR_FOLLOWER (the Admin client asks Metadata again), so a follower's copy never moves its log start by
itself.

ACLs (as Kafka): Delete on the topic, else TOPIC_AUTHORIZATION_FAILED in its partitions.
"""

from __future__ import annotations

from collections.abc import Callable

from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, ResourceType, checker
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.leaders import Reads
from walgate.storage.engine import Engine
from walgate.storage.lanes import partition_keys
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DeleteRecordsPartitionResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)

API_KEY, MIN_VERSION, MAX_VERSION = 21, 0, 2


def _one(engine: Engine, reads: Reads, topic: str, partition: int, offset: int) -> DeleteRecordsPartitionResult:
    check, low = reads.serve(topic, partition, -1, lambda: engine.partitions.delete_records(topic, partition, offset))
    return {"partition_index": partition, "low_watermark": -1 if low is None else low, "error_code": check.error}


def _delete(engine: Engine, request: DeleteRecordsRequest, deletable: Callable[[str], bool] | None,
            broker: Broker) -> list[DeleteRecordsTopicResult]:
    reads = Reads(broker)
    return [
        {"name": t.name, "partitions": [
            _one(engine, reads, t.name, p.partition_index, p.offset) if deletable is None or deletable(t.name)
            else {"partition_index": p.partition_index, "low_watermark": -1,
                  "error_code": ErrorCode.topic_authorization_failed}
            for p in t.partitions]}
        for t in request.topics
    ]


async def handle(broker: Broker, ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    keys = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    topics = await broker.call_on(lambda known: partition_keys(known, keys), _delete, request,
                                  checker(broker, ctx, Operation.DELETE, ResourceType.TOPIC), broker)
    for t, asked in zip(topics, request.topics):
        for p, a in zip(t["partitions"], asked.partitions):
            audit_kafka(ctx, "DeleteRecords", f"topic {t['name']} partition {p['partition_index']} before offset {a.offset}",
                        p["error_code"])
    return {"throttle_time": 0, "topics": topics}

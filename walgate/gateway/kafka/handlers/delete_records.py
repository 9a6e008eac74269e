"""DeleteRecords (key 21) v0–v2: move partitions' log start offsets (-1: to the high watermark).

Fetches below the new log start get OFFSET_OUT_OF_RANGE and the consumer's
reset policy; the bytes go when retention deletes their WAL segment.
"""

from __future__ import annotations

from typing import Any

from walgate.gateway.kafka.broker import Broker
from walgate.storage.errors import NotFound, OffsetOutOfRange
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 21, 0, 2


def _one(broker: Broker, topic: str, partition: int, offset: int) -> dict[str, Any]:
    try:
        low = broker.engine.delete_records(topic, partition, offset)
    except NotFound:
        return {"partition_index": partition, "low_watermark": -1, "error_code": ErrorCode.unknown_topic_or_partition}
    except OffsetOutOfRange:
        return {"partition_index": partition, "low_watermark": -1, "error_code": ErrorCode.offset_out_of_range}
    return {"partition_index": partition, "low_watermark": low, "error_code": ErrorCode.none}


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    topics = await broker.storage.call(lambda: [
        {"name": t.name, "partitions": [_one(broker, t.name, p.partition_index, p.offset) for p in t.partitions]}
        for t in request.topics
    ])
    return {"throttle_time": 0, "topics": topics}

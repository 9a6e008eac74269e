"""Produce (key 0) v3–v11: answered per partition; writing arrives with Kafka-native topics and row producers.

Why it is advertised now: librdkafka enables message format v2 (and with it
Fetch v4+) only when the broker advertises Produce v3+, so a consumer needs
it. Until the write path exists, every partition is refused with
INVALID_REQUEST and a message saying so (nothing is written); unknown topics
get UNKNOWN_TOPIC_OR_PARTITION. ``acks=0`` requests get no response, as in Kafka.
"""

from __future__ import annotations

from typing import Any

from walgate.gateway.kafka.broker import Broker
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 0, 3, 11


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any] | None:
    known = await broker.storage.call(lambda: set(broker.engine.catalog.topics))
    responses = []
    for t in request.topic_data:
        parts = []
        for p in t.partition_data:
            if t.name in known:
                error, message = ErrorCode.invalid_request, f"walgate does not accept writes to topic {t.name} yet"
            else:
                error, message = ErrorCode.unknown_topic_or_partition, f"unknown topic {t.name}"
            parts.append(
                {"index": p.index, "error_code": error, "base_offset": -1, "log_append_time": -1,
                 "log_start_offset": -1, "record_errors": [], "error_message": message}
            )
        responses.append({"name": t.name, "partition_responses": parts})
    if request.acks == 0:
        return None
    return {"throttle_time": 0, "responses": responses}

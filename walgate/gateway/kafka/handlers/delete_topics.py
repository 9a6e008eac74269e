"""DeleteTopics (key 20) v0–v6: by name (and by topic id from v6).

A Kafka-native topic goes with its database (all its data); a TDengine topic
is dropped as ``DROP TOPIC`` does (its data stays in its database). Committed
offsets of the topic go too.
"""

from __future__ import annotations

import uuid
from typing import Any

from walgate.gateway.kafka.broker import Broker
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 20, 0, 6
_NO_ID = uuid.UUID(int=0)


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    engine = broker.engine
    if header.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]

    def delete() -> list[dict[str, Any]]:
        by_id = {uuid.UUID(t.topic_id): n for n, t in engine.catalog.topics.items()}
        results = []
        for name, topic_id in wanted:
            if name is None and topic_id is not None and topic_id != _NO_ID:
                name = by_id.get(topic_id)
                if name is None:
                    results.append({"name": None, "topic_id": topic_id, "error_code": ErrorCode.unknown_topic_id,
                                    "error_message": f"no topic has id {topic_id}"})
                    continue
            topic = engine.catalog.topics.get(name or "")
            if topic is None:
                results.append({"name": name, "topic_id": topic_id or _NO_ID,
                                "error_code": ErrorCode.unknown_topic_or_partition,
                                "error_message": f"topic {name} does not exist"})
                continue
            engine.drop_topic(name)
            broker.cache.drop_topic(name)
            results.append({"name": name, "topic_id": uuid.UUID(topic.topic_id), "error_code": ErrorCode.none,
                            "error_message": None})
        return results

    return {"throttle_time": 0, "responses": await broker.storage.call(delete)}

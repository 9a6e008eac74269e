"""DeleteTopics (key 20) v0–v6: by name (and by topic id from v6).

A Kafka-native topic goes with its database (all its data); a TDengine topic
is dropped as ``DROP TOPIC`` does (its data stays in its database). Committed
offsets of the topic go too. A topic the engine cannot drop answers its error
(:mod:`.common`'s table) and stays; the others go.

ACLs (as Kafka): Delete on the topic, else TOPIC_AUTHORIZATION_FAILED (before its existence is looked at); a
topic named by id also needs Describe, else TOPIC_AUTHORIZATION_FAILED without its name.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, ResourceType, checker
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicsResponseDeletableTopicResult,
)
from walgate.wire.protocol import ZERO_UUID

API_KEY, MIN_VERSION, MAX_VERSION = 20, 0, 6
Result = DeleteTopicsResponseDeletableTopicResult


async def handle(broker: Broker, ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    if ctx.api_version >= 6:
        wanted: list[tuple[str | None, uuid.UUID | None]] = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]

    describable = checker(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC)
    deletable = checker(broker, ctx, Operation.DELETE, ResourceType.TOPIC)

    def delete(engine: Engine) -> list[Result]:
        results: list[Result] = []
        for name, topic_id in wanted:
            try:
                results.append(_delete(engine, broker, name, topic_id, describable, deletable))
            except Exception as exc:  # noqa: BLE001 - mapped per topic, siblings unaffected
                results.append({"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": error_of(exc),
                                "error_message": str(exc)})
        return results

    try:
        responses = await broker.call(delete)
    except Exception as exc:  # noqa: BLE001 - cluster mode: the cluster's catalog refused them (nothing deleted)
        responses = [{"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": error_of(exc),
                      "error_message": str(exc)} for name, topic_id in wanted]
    for r in responses:
        audit_kafka(ctx, "DeleteTopics", f"topic {r['name'] if r['name'] is not None else r['topic_id']}", r["error_code"])
    return {"throttle_time": 0, "responses": responses}


def _delete(engine: Engine, broker: Broker, name: str | None, topic_id: uuid.UUID | None,
            describable: Callable[[str], bool] | None, deletable: Callable[[str], bool] | None) -> Result:
    if name is None and topic_id is not None and topic_id != ZERO_UUID:
        name = engine.topic_name(topic_id)
        if name is None:
            return {"name": None, "topic_id": topic_id, "error_code": ErrorCode.unknown_topic_id,
                    "error_message": f"no topic has id {topic_id}"}
        if describable is not None and not describable(name):  # the name is not disclosed
            return {"name": None, "topic_id": topic_id, "error_code": ErrorCode.topic_authorization_failed,
                    "error_message": "Authorization failed."}
    if deletable is not None and not deletable(name or ""):
        return {"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": ErrorCode.topic_authorization_failed,
                "error_message": "Authorization failed."}
    topic = engine.catalog.topics.get(name or "")
    if topic is None:
        return {"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": f"topic {name} does not exist"}
    engine.drop_topic(topic.name)
    return {"name": topic.name, "topic_id": uuid.UUID(topic.topic_id), "error_code": ErrorCode.none,
            "error_message": None}

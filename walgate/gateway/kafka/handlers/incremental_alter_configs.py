"""IncrementalAlterConfigs (key 44) v0–v1: change a Kafka-native topic's configs; WAL settings follow at once.

Operations SET, DELETE (back to the default), APPEND and SUBTRACT (list
configs: ``cleanup.policy``). TDengine topics take their settings from their
database (``ALTER DATABASE`` is the way) and broker settings are fixed at start:
both get INVALID_REQUEST with a message. ``validate_only`` changes nothing.
"""

from __future__ import annotations

from typing import Any

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.describe_configs import TOPIC
from walgate.storage.errors import StorageError
from walgate.storage.kafka_topics import validate_configs
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 44, 0, 1
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _apply(configs: dict[str, str], ops: Any) -> dict[str, str]:
    out = dict(configs)
    for op in ops:
        if op.config_operation == SET:
            out[op.name] = op.value or ""
        elif op.config_operation == DELETE:
            out.pop(op.name, None)
        elif op.config_operation in (APPEND, SUBTRACT) and op.name == "cleanup.policy":
            items = [x for x in out.get(op.name, "delete").split(",") if x]
            change = [x for x in (op.value or "").split(",") if x]
            items = items + [x for x in change if x not in items] if op.config_operation == APPEND \
                else [x for x in items if x not in change]
            out[op.name] = ",".join(items)
        else:
            raise ValueError(f"operation {op.config_operation} is not possible on {op.name}")
    return out


def alter(broker: Broker, r: Any, validate_only: bool) -> dict[str, Any]:
    def result(error: int, message: str | None) -> dict[str, Any]:
        return {"error_code": error, "error_message": message, "resource_type": r.resource_type,
                "resource_name": r.resource_name}

    engine = broker.engine
    if r.resource_type != TOPIC:
        return result(ErrorCode.invalid_request, "walgate's broker settings are set when it starts")
    topic = engine.catalog.topics.get(r.resource_name)
    if topic is None:
        return result(ErrorCode.unknown_topic_or_partition, f"topic {r.resource_name} does not exist")
    if topic.kind != "kafka":
        return result(ErrorCode.invalid_request, f"{r.resource_name} is a TDengine topic: ALTER DATABASE {topic.db}")
    try:
        configs = _apply(topic.configs, r.configs)
        validate_configs(configs)
    except (ValueError, StorageError) as exc:
        return result(ErrorCode.invalid_config, str(exc))
    if not validate_only:
        engine.alter_topic_configs(r.resource_name, configs)
    return result(ErrorCode.none, None)


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    responses = await broker.storage.call(lambda: [alter(broker, r, request.validate_only) for r in request.resources])
    return {"throttle_time": 0, "responses": responses}

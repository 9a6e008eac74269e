"""IncrementalAlterConfigs (key 44) v0–v1: change a Kafka-native topic's configs; WAL settings follow at once.

Operations SET, DELETE (back to the default), APPEND and SUBTRACT (list
configs: ``cleanup.policy``, the throttled-replica lists). TDengine topics take their settings from their
database (``ALTER DATABASE`` is the way) and broker settings are fixed at start:
both get INVALID_REQUEST with a message, except that compacting a TDengine topic is INVALID_CONFIG (its records
are table rows: there is nothing to compact). ``validate_only`` changes nothing.
A change the engine refuses answers that resource's error (:mod:`.common`'s
table); the others are applied.

ACLs (as Kafka): AlterConfigs on the topic (TOPIC_AUTHORIZATION_FAILED) or, for the broker, on the cluster
(CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, config_denials
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.handlers.describe_configs import TOPIC
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError
from walgate.storage.topic_configs import CONFIG_TYPES, TOPIC_CONFIG_DEFAULTS, validate_configs
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 44, 0, 1
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OPS = {SET: "set", DELETE: "deleted", APPEND: "appended", SUBTRACT: "subtracted"}  # config values are not logged
_KINDS = {2: "topic", 4: "broker", 8: "broker logger"}


def _apply(configs: dict[str, str], ops: Any) -> dict[str, str]:
    out = dict(configs)
    for op in ops:
        if op.config_operation == SET:
            out[op.name] = op.value or ""
        elif op.config_operation == DELETE:
            out.pop(op.name, None)
        elif op.config_operation in (APPEND, SUBTRACT) and CONFIG_TYPES.get(op.name) == "LIST":
            items = [x for x in out.get(op.name, TOPIC_CONFIG_DEFAULTS[op.name]).split(",") if x]
            change = [x for x in (op.value or "").split(",") if x]
            items = items + [x for x in change if x not in items] if op.config_operation == APPEND \
                else [x for x in items if x not in change]
            out[op.name] = ",".join(items)
        else:
            raise ValueError(f"operation {op.config_operation} is not possible on {op.name}")
    return out


def _result(r: Any, error: int, message: str | None) -> dict[str, Any]:
    return {"error_code": error, "error_message": message, "resource_type": r.resource_type,
            "resource_name": r.resource_name}


def alter(engine: Engine, r: Any, validate_only: bool) -> dict[str, Any]:
    if r.resource_type != TOPIC:
        return _result(r, ErrorCode.invalid_request, "walgate's broker settings are set when it starts")
    topic = engine.catalog.topics.get(r.resource_name)
    if topic is None:
        return _result(r, ErrorCode.unknown_topic_or_partition, f"topic {r.resource_name} does not exist")
    if topic.kind != "kafka":
        if any(c.name == "cleanup.policy" and "compact" in (c.value or "") for c in r.configs):
            return _result(r, ErrorCode.invalid_config, f"{r.resource_name} is a TDengine topic: its records are rows "
                           "of its database's tables and cannot be compacted (cleanup.policy=compact is for "
                           "Kafka-native topics)")
        return _result(r, ErrorCode.invalid_request, f"{r.resource_name} is a TDengine topic: ALTER DATABASE {topic.db}")
    try:
        configs = _apply(topic.configs, r.configs)
        validate_configs(configs)
    except (ValueError, StorageError) as exc:
        return _result(r, ErrorCode.invalid_config, str(exc))
    if not validate_only:
        engine.alter_topic_configs(r.resource_name, configs)
    return _result(r, ErrorCode.none, None)


def _alter_all(engine: Engine, request: Any, denied: dict[int, int]) -> list[dict[str, Any]]:
    responses = []
    for i, r in enumerate(request.resources):
        if i in denied:
            responses.append(_result(r, denied[i], "Authorization failed."))
            continue
        try:
            responses.append(alter(engine, r, request.validate_only))
        except Exception as exc:  # noqa: BLE001 - mapped per resource, siblings unaffected
            responses.append(_result(r, error_of(exc), str(exc)))
    return responses


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    responses = await broker.call(_alter_all, request, config_denials(
        broker, Operation.ALTER_CONFIGS, [(r.resource_type, r.resource_name) for r in request.resources]))
    if not request.validate_only:
        for r, asked in zip(responses, request.resources):
            changes = ", ".join(f"{c.name} {_OPS.get(c.config_operation, c.config_operation)}" for c in asked.configs)
            audit_kafka("IncrementalAlterConfigs", f"{_KINDS.get(r['resource_type'], r['resource_type'])} "
                        f"{r['resource_name']} ({changes})", r["error_code"])
    return {"throttle_time": 0, "responses": responses}

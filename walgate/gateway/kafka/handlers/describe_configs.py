"""DescribeConfigs (key 32) v0–v4: topic configs (real values) and this broker's settings.

Kafka-native topics answer their configs as set (TOPIC_CONFIG) and Kafka's
defaults for the rest (DEFAULT_CONFIG); TDengine topics answer what their
database's WAL settings amount to. The broker (resource name = its node id)
answers the settings walgate runs with (STATIC_BROKER_CONFIG). A resource that
cannot be described answers its error; the others are answered.

ACLs (as Kafka): DescribeConfigs on the topic (TOPIC_AUTHORIZATION_FAILED) or, for the broker, on the cluster
(CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from walgate.gateway.kafka.access import Operation, config_denials
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.common import error_of
from walgate.storage.engine import Engine
from walgate.storage.topic_configs import CONFIG_TYPES, topic_configs
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 32, 0, 4
TOPIC, BROKER = 2, 4  # resource types
_TOPIC_CONFIG, _STATIC_BROKER_CONFIG, _DEFAULT_CONFIG = 1, 4, 5
_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "LONG": 5, "DOUBLE": 6, "LIST": 7}  # Kafka's ConfigType
_TYPES = {k: _TYPE_IDS[t] for k, t in CONFIG_TYPES.items()}


def _entry(name: str, value: str, source: int) -> dict[str, Any]:
    return {"name": name, "value": value, "read_only": False, "is_default": source == _DEFAULT_CONFIG,
            "config_source": source, "is_sensitive": False, "synonyms": [], "config_type": _TYPES.get(name, 2),
            "documentation": None}


def _result(r: Any, error: int, message: str | None, configs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"error_code": error, "error_message": message, "resource_type": r.resource_type,
            "resource_name": r.resource_name, "configs": configs}


def describe(engine: Engine, broker: Broker, r: Any) -> dict[str, Any]:
    keys = None if r.configuration_keys is None else set(r.configuration_keys)
    if r.resource_type == TOPIC:
        topic = engine.catalog.topics.get(r.resource_name)
        if topic is None:
            return _result(r, ErrorCode.unknown_topic_or_partition, f"topic {r.resource_name} does not exist", [])
        options = engine.catalog.database(topic.db).options
        entries = [_entry(k, v, _TOPIC_CONFIG if set_ else _DEFAULT_CONFIG)
                   for k, (v, set_) in topic_configs(topic.kind, topic.configs, options).items()]
    elif r.resource_type == BROKER:
        if r.resource_name not in ("", str(broker.node_id)):
            return _result(r, ErrorCode.invalid_request, f"this broker is node {broker.node_id}", [])
        entries = [_entry(k, v, _STATIC_BROKER_CONFIG) for k, v in broker.configs.items()]
    else:
        return _result(r, ErrorCode.invalid_request, f"resource type {r.resource_type}: topics (2) and brokers (4)", [])
    return _result(r, ErrorCode.none, None, [e for e in entries if keys is None or e["name"] in keys])


def _describe_all(engine: Engine, broker: Broker, request: Any, denied: dict[int, int]) -> list[dict[str, Any]]:
    results = []
    for i, r in enumerate(request.resources):
        if i in denied:
            results.append(_result(r, denied[i], "Authorization failed.", []))
            continue
        try:
            results.append(describe(engine, broker, r))
        except Exception as exc:  # noqa: BLE001 - mapped per resource, siblings unaffected
            results.append(_result(r, error_of(exc), str(exc), []))
    return results


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    return {"throttle_time": 0, "results": await broker.call(
        _describe_all, broker, request, config_denials(broker, Operation.DESCRIBE_CONFIGS,
                                                       [(r.resource_type, r.resource_name) for r in request.resources]))}

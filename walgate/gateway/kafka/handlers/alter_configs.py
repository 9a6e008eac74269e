"""AlterConfigs (key 33) v0–v2, the legacy API Kafka 4 still serves: the configs named replace the resource's
whole set of dynamic configs (those not named go back to their defaults), for topics, brokers and groups
(:mod:`.config_changes`); ``validate_only`` changes nothing. Null values are refused (INVALID_REQUEST), as Kafka
refuses them; so is BROKER_LOGGER, which only IncrementalAlterConfigs alters.

ACLs (as Kafka): AlterConfigs on the topic, the group or, for the broker, on the cluster.
"""

from __future__ import annotations

import functools
from typing import Any

from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, config_denials
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.handlers.config_changes import alter, preprocess
from walgate.storage.engine import Engine

API_KEY, MIN_VERSION, MAX_VERSION = 33, 0, 2
_KINDS = {2: "topic", 4: "broker", 32: "group"}


def _result(r: Any, error: int, message: str | None) -> dict[str, Any]:
    return {"error_code": error, "error_message": message, "resource_type": r.resource_type,
            "resource_name": r.resource_name}


def _replaced(configs: Any, current: dict[str, str]) -> dict[str, str]:
    """The resource's new set: exactly the request's configs (the current ones go)."""
    return {c.name: c.value for c in configs}


def _alter_all(engine: Engine, broker: Broker, request: Any,
               denied: dict[int, int]) -> list[dict[str, Any]]:
    refused = preprocess(list(request.resources), lambda c: False)
    responses = []
    for i, r in enumerate(request.resources):
        if i in denied:
            responses.append(_result(r, denied[i], "Authorization failed."))
        elif i in refused:
            responses.append(_result(r, *refused[i]))
        else:
            try:
                responses.append(_result(r, *alter(engine, broker, r.resource_type, r.resource_name,
                                                   functools.partial(_replaced, r.configs), request.validate_only)))
            except Exception as exc:  # noqa: BLE001 - mapped per resource, siblings unaffected
                responses.append(_result(r, error_of(exc), str(exc)))
    return responses


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    responses = await broker.call(_alter_all, broker, request, config_denials(
        broker, Operation.ALTER_CONFIGS, [(r.resource_type, r.resource_name) for r in request.resources]))
    if not request.validate_only:
        for r, asked in zip(responses, request.resources):
            names = ", ".join(c.name for c in asked.configs)  # config values are not logged
            audit_kafka("AlterConfigs", f"{_KINDS.get(r['resource_type'], r['resource_type'])} {r['resource_name']} "
                        f"(replaced by {names or 'nothing'})", r["error_code"])
    return {"throttle_time": 0, "responses": responses}

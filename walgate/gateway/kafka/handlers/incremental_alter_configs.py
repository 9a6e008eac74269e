"""IncrementalAlterConfigs (key 44) v0–v1: change the configs of topics, brokers and groups (:mod:`.config_changes`).

Operations SET, DELETE (back to the default), APPEND and SUBTRACT (list
configs: ``cleanup.policy``, ``log.cleanup.policy``, the throttled-replica lists). BROKER_LOGGER resources
(walgate's log levels are set when it starts) get INVALID_REQUEST with a message; so does a TDengine topic (its
settings follow its database: ``ALTER DATABASE``), except that compacting one is INVALID_CONFIG (its records are
table rows: there is nothing to compact). A change the engine refuses answers that resource's error
(:mod:`.common`'s table); the others are applied.

ACLs (as Kafka): AlterConfigs on the topic (TOPIC_AUTHORIZATION_FAILED), the group (GROUP_AUTHORIZATION_FAILED)
or, for the broker, on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import functools
from typing import Any

from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, config_denials
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.config_changes import alter_each
from walgate.storage.topic_configs import CONFIG_TYPES, TOPIC_CONFIG_DEFAULTS

API_KEY, MIN_VERSION, MAX_VERSION = 44, 0, 1
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OPS = {SET: "set", DELETE: "deleted", APPEND: "appended", SUBTRACT: "subtracted"}  # config values are not logged
_KINDS = {2: "topic", 4: "broker", 8: "broker logger", 32: "group"}
_LISTS = {**{k: TOPIC_CONFIG_DEFAULTS[k] for k, t in CONFIG_TYPES.items() if t == "LIST"},
          "log.cleanup.policy": TOPIC_CONFIG_DEFAULTS["cleanup.policy"]}  # list configs and their defaults


def _apply(configs: dict[str, str], ops: Any) -> dict[str, str]:
    out = dict(configs)
    for op in ops:
        if op.config_operation == SET:
            out[op.name] = op.value or ""
        elif op.config_operation == DELETE:
            out.pop(op.name, None)
        elif op.config_operation in (APPEND, SUBTRACT) and op.name in _LISTS:
            items = [x for x in out.get(op.name, _LISTS[op.name]).split(",") if x]
            change = [x for x in (op.value or "").split(",") if x]
            items = items + [x for x in change if x not in items] if op.config_operation == APPEND \
                else [x for x in items if x not in change]
            out[op.name] = ",".join(items)
        else:
            raise ValueError(f"operation {op.config_operation} is not possible on {op.name}")
    return out


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    denied = config_denials(broker, Operation.ALTER_CONFIGS,
                            [(r.resource_type, r.resource_name) for r in request.resources])
    responses = await broker.call(alter_each, broker, request, denied, lambda c: c.config_operation == DELETE,
                                  lambda r: functools.partial(_apply, ops=r.configs))
    if not request.validate_only:
        for r, asked in zip(responses, request.resources):
            changes = ", ".join(f"{c.name} {_OPS.get(c.config_operation, c.config_operation)}" for c in asked.configs)
            audit_kafka("IncrementalAlterConfigs", f"{_KINDS.get(r['resource_type'], r['resource_type'])} "
                        f"{r['resource_name']} ({changes})", r["error_code"])
    return {"throttle_time": 0, "responses": responses}

"""IncrementalAlterConfigs (key 44) v0–v1: change the configs of topics, brokers and groups (:mod:`.config_changes`).

Operations SET, DELETE (back to the default), APPEND and SUBTRACT (list configs only: ``cleanup.policy``, the
throttled-replica lists, ``log.cleanup.policy``, ``sasl.enabled.mechanisms`` ...; on any other config they are
INVALID_CONFIG, as Kafka answers). BROKER_LOGGER resources
(walgate's log levels are set when it starts) get INVALID_REQUEST with a message; so does a TDengine topic (its
settings follow its database: ``ALTER DATABASE``), except that compacting one is INVALID_CONFIG (its records are
table rows: there is nothing to compact). A change the engine refuses answers that resource's error
(:mod:`.common`'s table); the others are applied.

ACLs (as Kafka): AlterConfigs on the topic (TOPIC_AUTHORIZATION_FAILED), the group (GROUP_AUTHORIZATION_FAILED)
or, for the broker, on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, config_denials
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.config_changes import BROKER, TOPIC, alter_all
from walgate.storage.broker_configs import spec_of
from walgate.storage.topic_configs import TOPIC_CONFIGS
from walgate.wire.messages import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    IncrementalAlterConfigsResponse,
)

API_KEY, MIN_VERSION, MAX_VERSION = 44, 0, 1
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OPS = {SET: "set", DELETE: "deleted", APPEND: "appended", SUBTRACT: "subtracted"}  # config values are not logged
_KINDS = {2: "topic", 4: "broker", 8: "broker logger", 32: "group"}
_VERB = {APPEND: "append", SUBTRACT: "subtract"}


def _list_default(rtype: int, name: str) -> str | None:
    """The default of list config ``name`` of a resource type (None: not a list config, APPEND and SUBTRACT
    refused)."""
    spec = TOPIC_CONFIGS.get(name) if rtype == TOPIC else spec_of(name) if rtype == BROKER else None
    return spec.default or "" if spec is not None and spec.type == "LIST" else None


def _apply(configs: dict[str, str], rtype: int,
           ops: Sequence[IncrementalAlterConfigsRequestAlterableConfig]) -> dict[str, str]:
    """The resource's new set after ``ops``; ``ValueError`` (INVALID_CONFIG, with Kafka's message) for APPEND or
    SUBTRACT on a config that is not a list."""
    out = dict(configs)
    for op in ops:
        if op.config_operation == SET:
            out[op.name] = op.value or ""
        elif op.config_operation == DELETE:
            out.pop(op.name, None)
        elif op.config_operation in (APPEND, SUBTRACT):
            default = _list_default(rtype, op.name)
            if default is None and rtype == BROKER:  # the broker's check (ConfigAdminManager)
                raise ValueError(f"Config value {_VERB[op.config_operation]} is not allowed for config key: "
                                 f"{op.name}")
            if default is None:  # the controller's (ConfigurationControlManager)
                raise ValueError(f"Can't {_VERB[op.config_operation].upper()} to key {op.name} because its type is "
                                 "not LIST.")
            items = [x for x in out.get(op.name, default).split(",") if x]
            change = [x for x in (op.value or "").split(",") if x]
            items = items + [x for x in change if x not in items] if op.config_operation == APPEND \
                else [x for x in items if x not in change]
            out[op.name] = ",".join(items)
        else:
            raise ValueError(f"Unknown operations type {op.config_operation}")
    return out


async def handle(broker: Broker, ctx: RequestContext,
                 request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    denied = config_denials(broker, ctx, Operation.ALTER_CONFIGS,
                            [(r.resource_type, r.resource_name) for r in request.resources])
    responses = await alter_all(broker, request, denied, lambda c: c.config_operation == DELETE,
                                  lambda r: functools.partial(_apply, rtype=r.resource_type, ops=r.configs))
    if not request.validate_only:
        for r, asked in zip(responses, request.resources):
            changes = ", ".join(f"{c.name} {_OPS.get(c.config_operation, c.config_operation)}" for c in asked.configs)
            audit_kafka(ctx, "IncrementalAlterConfigs", f"{_KINDS.get(r['resource_type'], r['resource_type'])} "
                        f"{r['resource_name']} ({changes})", r["error_code"])
    return {"throttle_time": 0, "responses": responses}

"""AlterConfigs (key 33) v0–v2, the legacy API Kafka 4 still serves: the configs named replace the resource's
whole set of dynamic configs (those not named go back to their defaults), for topics, brokers and groups
(:mod:`.config_changes`); ``validate_only`` changes nothing. Null values are refused (INVALID_REQUEST), as Kafka
refuses them; so is BROKER_LOGGER, which only IncrementalAlterConfigs alters.

ACLs (as Kafka): AlterConfigs on the topic, the group or, for the broker, on the cluster.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, config_denials
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.config_changes import alter_all
from walgate.wire.messages import (
    AlterConfigsRequest,
    AlterConfigsRequestAlterableConfig,
    AlterConfigsResponse,
)

API_KEY, MIN_VERSION, MAX_VERSION = 33, 0, 2
_KINDS = {2: "topic", 4: "broker", 32: "group"}


def _replaced(configs: Sequence[AlterConfigsRequestAlterableConfig], current: dict[str, str]) -> dict[str, str]:
    """The resource's new set: exactly the request's configs (the current ones go)."""
    return {c.name: c.value for c in configs if c.value is not None}  # a null was refused before (preprocess)


async def handle(broker: Broker, ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    denied = config_denials(broker, ctx, Operation.ALTER_CONFIGS,
                            [(r.resource_type, r.resource_name) for r in request.resources])
    responses = await alter_all(broker, request, denied, lambda c: False,
                                  lambda r: functools.partial(_replaced, r.configs))
    if not request.validate_only:
        for r, asked in zip(responses, request.resources):
            names = ", ".join(c.name for c in asked.configs)  # config values are not logged
            audit_kafka(ctx, "AlterConfigs", f"{_KINDS.get(r['resource_type'], r['resource_type'])} {r['resource_name']} "
                        f"(replaced by {names or 'nothing'})", r["error_code"])
    return {"throttle_time": 0, "responses": responses}

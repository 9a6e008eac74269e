"""DescribeClientQuotas (key 48) v0–v1: the quota entities matching a filter, with their values (KIP-546).

Filters match as Kafka's ``ClientQuotasImage.describe`` does (:func:`walgate.storage.quotas.describe`): exact name,
default entity or any entity of a type, ``strict`` excluding entities with other types. A malformed filter answers
INVALID_REQUEST, an unknown entity type UNSUPPORTED_VERSION (Kafka's codes), with no entries. With ACLs, DescribeConfigs
on the cluster is needed (else CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from walgate.gateway.kafka.access import Operation, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import DESCRIBE_CLIENT_QUOTAS, error_of
from walgate.storage import quotas
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeClientQuotasResponseEntryData,
)

API_KEY, MIN_VERSION, MAX_VERSION = 48, 0, 1


def _describe(engine: Engine, request: DescribeClientQuotasRequest) -> list[tuple[quotas.Entity, quotas.QuotaValues]]:
    components = [(c.entity_type, c.match_type, c.match) for c in request.components]
    return quotas.describe(engine.catalog.client_quotas, components, request.strict)


async def handle(broker: Broker, ctx: RequestContext,
                 request: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    if not cluster_allowed(broker, ctx, Operation.DESCRIBE_CONFIGS):  # Kafka's handleDescribeClientQuotasRequest
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "error_message": "DescribeConfigs on the cluster is needed", "entries": None}
    try:
        found = await broker.call(_describe, request)
    except Exception as exc:  # noqa: BLE001 - a bad filter (or the engine's error) is the answer's error
        return {"throttle_time": 0, "error_code": error_of(exc, DESCRIBE_CLIENT_QUOTAS), "error_message": str(exc), "entries": None}
    entries: list[DescribeClientQuotasResponseEntryData] = [
        {"entity": [{"entity_type": kind, "entity_name": name} for kind, name in which],
         "values": [{"key": key, "value": value} for key, value in sorted(values.items())]}
        for which, values in sorted(found, key=lambda item: str(item[0]))]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "entries": entries}

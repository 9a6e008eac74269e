"""AlterClientQuotas (key 49) v0–v1: set or remove quota values of user / client-id entities (KIP-546).

Each entry is validated and answered on its own, as Kafka's ``ClientQuotaControlManager`` does (INVALID_REQUEST for
an empty, repeated or unknown entity type, an ``ip`` entity, an unknown key, a value <= 0 or a fractional byte rate,
a key named twice, an entity named twice); a valid entry is persisted in the catalog (one record per entity,
:mod:`walgate.storage.quotas`) and enforced from the next request on (:mod:`walgate.gateway.quotas`). A write the
disk refuses is that entry's error. ``validate_only`` changes nothing. Every applied or refused change is audited.
With ACLs, AlterConfigs on the cluster is needed (else every entry answers CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.storage import quotas
from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterClientQuotasResponseEntryData,
)

API_KEY, MIN_VERSION, MAX_VERSION = 49, 0, 1


def describe_entity(pairs: list[tuple[str, str | None]]) -> str:
    """``user alice, client-id <default>``: an entity as the audit log names it."""
    return ", ".join(f"{kind} {name if name is not None else '<default>'}" for kind, name in pairs)


def _alter_all(engine: Engine, request: AlterClientQuotasRequest
               ) -> tuple[list[tuple[int, str | None]], dict[quotas.Entity, quotas.QuotaValues]]:
    """(error code, message) per entry, and the quotas in force afterwards (storage thread)."""
    seen: set[quotas.Entity] = set()
    results: list[tuple[int, str | None]] = []
    for entry in request.entries:
        try:
            which = quotas.entity((e.entity_type, e.entity_name) for e in entry.entity)
            if which in seen:
                raise InvalidValue(f"Ignoring duplicate entity {describe_entity(list(which))}")
            seen.add(which)
            current = engine.catalog.client_quotas
            values = quotas.alter(current, which, ((op.key, op.value, op.remove) for op in entry.ops))
            if not request.validate_only and values != current.get(which, {}):
                engine.catalog.set_client_quota(which, values)
            results.append((ErrorCode.none, None))
        except Exception as exc:  # noqa: BLE001 - mapped per entry, siblings unaffected
            results.append((error_of(exc), str(exc)))
    return results, dict(engine.catalog.client_quotas)


async def handle(broker: Broker, ctx: RequestContext, request: AlterClientQuotasRequest) -> AlterClientQuotasResponse:
    results: list[tuple[int, str | None]]
    try:
        if not cluster_allowed(broker, ctx, Operation.ALTER_CONFIGS):  # Kafka's handleAlterClientQuotasRequest
            results = [(ErrorCode.cluster_authorization_failed, "AlterConfigs on the cluster is needed")
                       ] * len(request.entries)
        else:
            results, in_force = await broker.call(_alter_all, request)
            broker.quotas.configure(in_force)
    except Exception as exc:  # noqa: BLE001 - the catalog could not be read: every entry's error
        results = [(error_of(exc), str(exc))] * len(request.entries)
    entries: list[AlterClientQuotasResponseEntryData] = []
    for entry, (error, message) in zip(request.entries, results):
        pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
        if not request.validate_only:
            ops = ", ".join(f"{op.key} removed" if op.remove else f"{op.key}={op.value:g}" for op in entry.ops)
            audit_kafka(ctx, "AlterClientQuotas", f"{describe_entity(pairs)} ({ops})", error)
        entries.append({"error_code": error, "error_message": message,
                        "entity": [{"entity_type": kind, "entity_name": name} for kind, name in pairs]})
    return {"throttle_time": 0, "entries": entries}

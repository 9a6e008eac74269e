"""DeleteAcls (key 31) v1–v3: remove the bindings filters match (``kafka-acls --remove``, ``Admin.deleteAcls``).

As Kafka's ``AclApis``: Alter on the cluster is needed (else every filter answers CLUSTER_AUTHORIZATION_FAILED);
with no authorizer SECURITY_DISABLED; a filter with an UNKNOWN code answers INVALID_REQUEST. Each filter answers
the bindings it matched (Kafka's ``AclBindingFilter``: a binding two filters match is listed by both); all of
them are removed together as one durable catalog record, or every filter answers the storage error.
"""

from __future__ import annotations

from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.security.acl import AclBinding, AclFilter, Operation, describe
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
)

API_KEY, MIN_VERSION, MAX_VERSION = 31, 1, 3


def _failed(code: int, message: str) -> DeleteAclsFilterResult:
    return {"error_code": code, "error_message": message, "matching_acls": []}


async def handle(broker: Broker, ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    filters = request.filters
    if not cluster_allowed(broker, ctx, Operation.ALTER):
        return {"throttle_time": 0, "filter_results": [
            _failed(ErrorCode.cluster_authorization_failed, "Alter on the cluster is needed")] * len(filters)}
    if broker.authorizer is None:
        return {"throttle_time": 0, "filter_results": [
            _failed(ErrorCode.security_disabled, "No Authorizer is configured.")] * len(filters)}
    parsed = [AclFilter.from_wire(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                  f.principal_filter, f.host_filter, f.operation, f.permission_type) for f in filters]
    try:
        matched = await broker.call(_delete, parsed)
    except Exception as exc:  # noqa: BLE001 - answered per filter
        return {"throttle_time": 0, "filter_results": [_failed(error_of(exc), str(exc))] * len(filters)}
    results: list[DeleteAclsFilterResult] = []
    for f, found in zip(parsed, matched):
        for b in found or ():
            audit_kafka(ctx, "DeleteAcls", describe(b), ErrorCode.none)
        if found is None:
            results.append(_failed(ErrorCode.invalid_request, f.unknown() or ""))
        else:
            results.append({"error_code": ErrorCode.none, "error_message": None, "matching_acls": [
                {"error_code": ErrorCode.none, "error_message": None, "resource_type": b.resource_type,
                 "resource_name": b.name, "pattern_type": b.pattern_type, "principal": b.principal, "host": b.host,
                 "operation": b.operation, "permission_type": b.permission} for b in found]})
    return {"throttle_time": 0, "filter_results": results}


def _delete(engine: Engine, filters: list[AclFilter]) -> list[list[AclBinding] | None]:
    """Each filter's matches (None: an invalid filter), all removed in one record (storage thread)."""
    acls = engine.catalog.acls
    matched = [None if f.unknown() else acls.matching(f) for f in filters]
    gone = list(dict.fromkeys(b for found in matched if found for b in found))
    if gone:
        engine.catalog.change_acls("delete_acls", gone)
    return matched

"""CreateAcls (key 30) v1–v3: store ACL bindings (what ``kafka-acls --add`` and ``Admin.createAcls`` call).

As Kafka's ``AclApis``: the principal needs Alter on the cluster (else every creation answers
CLUSTER_AUTHORIZATION_FAILED); with no authorizer configured every creation answers SECURITY_DISABLED. A binding
Kafka would not create (:func:`walgate.security.acl.validate`) answers INVALID_REQUEST with the reason; the valid
ones are stored together as one durable catalog record (one already stored is a success that changes nothing),
or all answer the storage error.
"""

from __future__ import annotations

from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.security.acl import AclBinding, InvalidAcl, Operation, binding, describe, validate
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    CreateAclsResponseAclCreationResult,
)

API_KEY, MIN_VERSION, MAX_VERSION = 30, 1, 3


def _result(code: int, message: str | None = None) -> CreateAclsResponseAclCreationResult:
    return {"error_code": code, "error_message": message}


async def handle(broker: Broker, ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    creations = request.creations
    results: list[CreateAclsResponseAclCreationResult]
    if not cluster_allowed(broker, ctx, Operation.ALTER):
        results = [_result(ErrorCode.cluster_authorization_failed, "Alter on the cluster is needed")] * len(creations)
    elif broker.authorizer is None:
        results = [_result(ErrorCode.security_disabled, "No Authorizer is configured.")] * len(creations)
    else:
        results = []
        valid: list[tuple[int, AclBinding]] = []
        for i, c in enumerate(creations):
            b = binding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host, c.operation,
                        c.permission_type)
            try:
                validate(b)
            except InvalidAcl as exc:
                results.append(_result(ErrorCode.invalid_request, str(exc)))
                continue
            results.append(_result(ErrorCode.none))
            valid.append((i, b))
        if valid:
            try:
                await broker.call(_store, [b for _, b in valid])
            except Exception as exc:  # noqa: BLE001 - answered per creation
                failed = _result(error_of(exc), str(exc))
                for i, _ in valid:
                    results[i] = failed
    for c, r in zip(creations, results):
        audit_kafka(ctx, "CreateAcls", describe(binding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                                                   c.host, c.operation, c.permission_type)), r["error_code"])
    return {"throttle_time": 0, "results": results}


def _store(engine: Engine, bindings: list[AclBinding]) -> None:
    new = engine.catalog.acls.new(bindings)
    if new:
        engine.catalog.change_acls("create_acls", new)

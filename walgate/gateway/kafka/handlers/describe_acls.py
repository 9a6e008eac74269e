"""DescribeAcls (key 29) v1–v3: the ACL bindings a filter matches (``kafka-acls --list``, ``Admin.describeAcls``).

As Kafka's ``AclApis``: Describe on the cluster is needed (else CLUSTER_AUTHORIZATION_FAILED); with no authorizer
SECURITY_DISABLED; a filter with an UNKNOWN code is INVALID_REQUEST. The filter is Kafka's ``AclBindingFilter``
(:class:`walgate.security.acl.AclFilter`: ANY and MATCH pattern types), and the bindings are answered grouped by
resource pattern. They come from the authorizer's current set: the one the next check decides with.
"""

from __future__ import annotations

from walgate.gateway.kafka.access import cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.security.acl import AclBinding, AclFilter, Operation
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DescribeAclsRequest,
    DescribeAclsResource,
    DescribeAclsResponse,
    DescribeAclsResponseAclDescription,
)

API_KEY, MIN_VERSION, MAX_VERSION = 29, 1, 3


def _answer(code: int, message: str | None, resources: list[DescribeAclsResource]) -> DescribeAclsResponse:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "resources": resources}


async def handle(broker: Broker, ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    if not cluster_allowed(broker, ctx, Operation.DESCRIBE):
        return _answer(ErrorCode.cluster_authorization_failed, "Describe on the cluster is needed", [])
    if broker.authorizer is None:
        return _answer(ErrorCode.security_disabled, "No Authorizer is configured on the broker", [])
    f = AclFilter.from_wire(request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
                            request.principal_filter, request.host_filter, request.operation, request.permission_type)
    why = f.unknown()
    if why:
        return _answer(ErrorCode.invalid_request, why, [])
    return _answer(ErrorCode.none, None, resources(broker.authorizer.source.current.matching(f)))


def resources(bindings: list[AclBinding]) -> list[DescribeAclsResource]:
    """``bindings`` grouped by resource pattern, as DescribeAcls answers them (input order kept)."""
    grouped: dict[tuple[int, str, int], list[DescribeAclsResponseAclDescription]] = {}
    for b in bindings:
        grouped.setdefault((b.resource_type, b.name, b.pattern_type), []).append(
            {"principal": b.principal, "host": b.host, "operation": b.operation, "permission_type": b.permission})
    return [{"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in grouped.items()]

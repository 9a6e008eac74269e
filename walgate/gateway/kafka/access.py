"""The authorization checks handlers make, for the request being served (Kafka's ``AuthHelper``).

Each asks the broker's :class:`~walgate.security.authorizer.Authorizer` about the principal and client host
of the request being served, given as its :class:`~walgate.gateway.kafka.context.RequestContext`.
With no authorizer configured every check allows at the cost of one attribute test, and handlers keep their
answers exactly as without ACLs. Another node of the cluster (:func:`~walgate.gateway.kafka.node_auth.from_cluster_node`:
authenticated with the cluster's node token) is allowed everything, as Kafka's brokers' own principal is one of its
``super.users`` (a node's requests of groups: :mod:`walgate.gateway.kafka.offsets_import`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.node_auth import from_cluster_node
from walgate.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, Operation, ResourceType, authorized_bits
from walgate.security.authorizer import Authorizer

__all__ = ["allowed", "allowed_names", "cluster_allowed", "checker", "config_denials", "by_resource_type", "operations", "NOT_REQUESTED",
           "Operation", "ResourceType"]

NOT_REQUESTED = -(2**31)
"""The authorized-operations value of a response that did not ask for them (Kafka's Integer.MIN_VALUE)."""


def _judge(broker: Broker, ctx: RequestContext) -> Authorizer | None:
    """The authorizer that judges the request; None when everything is allowed (no authorizer, or a request of
    another node of the cluster: the module docstring)."""
    auth = broker.authorizer
    return None if auth is None or from_cluster_node(broker, ctx) else auth


def allowed(broker: Broker, ctx: RequestContext, op: Operation, rtype: ResourceType, name: str) -> bool:
    """The request's principal may ``op`` the resource (always, without an authorizer)."""
    auth = _judge(broker, ctx)
    return auth is None or auth.authorize(ctx.principal, ctx.peer, op, rtype, name)


def cluster_allowed(broker: Broker, ctx: RequestContext, op: Operation) -> bool:
    return allowed(broker, ctx, op, ResourceType.CLUSTER, CLUSTER_NAME)


def allowed_names(broker: Broker, ctx: RequestContext, op: Operation, rtype: ResourceType, names: Iterable[str]) -> set[str]:
    """Those of ``names`` the principal may ``op`` (Kafka's ``filterByAuthorized``)."""
    auth = _judge(broker, ctx)
    if auth is None:
        return set(names)
    principal, host = ctx.principal, ctx.peer
    return {n for n in set(names) if auth.authorize(principal, host, op, rtype, n)}


def checker(broker: Broker, ctx: RequestContext, op: Operation, rtype: ResourceType) -> Callable[[str], bool] | None:
    """A test of resource names for the request's principal and host, to run anywhere (the storage thread
    included); None without an authorizer (everything allowed)."""
    auth = _judge(broker, ctx)
    if auth is None:
        return None
    principal, host = ctx.principal, ctx.peer
    return lambda name: auth.authorize(principal, host, op, rtype, name)


def by_resource_type(broker: Broker, ctx: RequestContext, op: Operation, rtype: ResourceType) -> bool:
    """The principal may ``op`` some resource of ``rtype`` (Kafka's ``authorizeByResourceType``)."""
    auth = _judge(broker, ctx)
    return auth is None or auth.authorize_by_resource_type(ctx.principal, ctx.peer, op, rtype)


_CONFIG_RESOURCES = {2: (ResourceType.TOPIC, 29), 4: (ResourceType.CLUSTER, 31), 8: (ResourceType.CLUSTER, 31),
                     32: (ResourceType.GROUP, 30)}
"""Config resource type (TOPIC 2, BROKER 4, BROKER_LOGGER 8, GROUP 32) -> the ACL resource Kafka checks and the
error code it answers when refused (TOPIC/CLUSTER/GROUP_AUTHORIZATION_FAILED)."""


def config_denials(broker: Broker, ctx: RequestContext, op: Operation, resources: Iterable[tuple[int, str]]) -> dict[int, int]:
    """For DescribeConfigs / IncrementalAlterConfigs: index -> error code of each (config resource type, name) the
    principal may not ``op`` (Kafka's ``ConfigHelper``: brokers are checked on the cluster)."""
    if broker.authorizer is None:
        return {}
    out = {}
    for i, (rtype, name) in enumerate(resources):
        acl_type, code = _CONFIG_RESOURCES.get(rtype, (None, 0))
        if acl_type is ResourceType.CLUSTER:
            name = CLUSTER_NAME
        if acl_type is not None and not allowed(broker, ctx, op, acl_type, name):
            out[i] = code
    return out


def operations(broker: Broker, ctx: RequestContext, rtype: ResourceType, name: str) -> int:
    """The authorized-operations bit field of a resource for the principal (all supported, without ACLs)."""
    auth = _judge(broker, ctx)
    if auth is None:
        return authorized_bits(list(SUPPORTED_OPERATIONS[rtype]))
    return auth.authorized_operations(ctx.principal, ctx.peer, rtype, name)

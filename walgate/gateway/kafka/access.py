"""The authorization checks handlers make, for the request being served (Kafka's ``AuthHelper``).

Each asks the broker's :class:`~walgate.security.authorizer.Authorizer` about the principal and client host
of the current request (:data:`~walgate.gateway.kafka.broker.PRINCIPAL`, :data:`~walgate.gateway.kafka.broker.PEER`).
With no authorizer configured every check allows at the cost of one attribute test, and handlers keep their
answers exactly as without ACLs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from walgate.gateway.kafka.broker import PEER, PRINCIPAL, Broker
from walgate.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, Operation, ResourceType, authorized_bits

__all__ = ["allowed", "allowed_names", "cluster_allowed", "checker", "config_denials", "by_resource_type", "operations", "NOT_REQUESTED",
           "Operation", "ResourceType"]

NOT_REQUESTED = -(2**31)
"""The authorized-operations value of a response that did not ask for them (Kafka's Integer.MIN_VALUE)."""


def allowed(broker: Broker, op: Operation, rtype: ResourceType, name: str) -> bool:
    """The current request's principal may ``op`` the resource (always, without an authorizer)."""
    auth = broker.authorizer
    return auth is None or auth.authorize(PRINCIPAL.get(), PEER.get(), op, rtype, name)


def cluster_allowed(broker: Broker, op: Operation) -> bool:
    return allowed(broker, op, ResourceType.CLUSTER, CLUSTER_NAME)


def allowed_names(broker: Broker, op: Operation, rtype: ResourceType, names: Iterable[str]) -> set[str]:
    """Those of ``names`` the principal may ``op`` (Kafka's ``filterByAuthorized``)."""
    auth = broker.authorizer
    if auth is None:
        return set(names)
    principal, host = PRINCIPAL.get(), PEER.get()
    return {n for n in set(names) if auth.authorize(principal, host, op, rtype, n)}


def checker(broker: Broker, op: Operation, rtype: ResourceType) -> Callable[[str], bool] | None:
    """A test of resource names for the current request's principal and host, to run anywhere (the storage
    thread included, where the request's context is not); None without an authorizer (everything allowed)."""
    auth = broker.authorizer
    if auth is None:
        return None
    principal, host = PRINCIPAL.get(), PEER.get()
    return lambda name: auth.authorize(principal, host, op, rtype, name)


def by_resource_type(broker: Broker, op: Operation, rtype: ResourceType) -> bool:
    """The principal may ``op`` some resource of ``rtype`` (Kafka's ``authorizeByResourceType``)."""
    auth = broker.authorizer
    return auth is None or auth.authorize_by_resource_type(PRINCIPAL.get(), PEER.get(), op, rtype)


_CONFIG_RESOURCES = {2: (ResourceType.TOPIC, 29), 4: (ResourceType.CLUSTER, 31), 8: (ResourceType.CLUSTER, 31),
                     32: (ResourceType.GROUP, 30)}
"""Config resource type (TOPIC 2, BROKER 4, BROKER_LOGGER 8, GROUP 32) -> the ACL resource Kafka checks and the
error code it answers when refused (TOPIC/CLUSTER/GROUP_AUTHORIZATION_FAILED)."""


def config_denials(broker: Broker, op: Operation, resources: Iterable[tuple[int, str]]) -> dict[int, int]:
    """For DescribeConfigs / IncrementalAlterConfigs: index -> error code of each (config resource type, name) the
    principal may not ``op`` (Kafka's ``ConfigHelper``: brokers are checked on the cluster)."""
    if broker.authorizer is None:
        return {}
    out = {}
    for i, (rtype, name) in enumerate(resources):
        acl_type, code = _CONFIG_RESOURCES.get(rtype, (None, 0))
        if acl_type is ResourceType.CLUSTER:
            name = CLUSTER_NAME
        if acl_type is not None and not allowed(broker, op, acl_type, name):
            out[i] = code
    return out


def operations(broker: Broker, rtype: ResourceType, name: str) -> int:
    """The authorized-operations bit field of a resource for the principal (all supported, without ACLs)."""
    auth = broker.authorizer
    if auth is None:
        return authorized_bits(list(SUPPORTED_OPERATIONS[rtype]))
    return auth.authorized_operations(PRINCIPAL.get(), PEER.get(), rtype, name)

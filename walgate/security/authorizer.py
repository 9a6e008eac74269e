"""The authorizer: does a principal, from a host, may do an operation on a resource? (Kafka's StandardAuthorizer.)

Decision for ``(principal, host, operation, resource type, name)``, in order:

1. a principal listed in ``super.users`` is always allowed;
2. the bindings of the resource's type whose pattern covers the name (the literal name, the literal ``*``, any
   prefix) are the resource's ACLs; of those, the ones whose principal is the request's or ``User:*``, whose
   host is the request's or ``*``, and whose operation decides the requested one (:func:`~.acl.grants`: ALL,
   the operation itself, and for an ALLOW the operations implying DESCRIBE / DESCRIBE_CONFIGS) apply;
3. any applying DENY denies (deny wins), else any applying ALLOW allows;
4. nothing applies: allowed only when the resource has no ACL at all and ``allow.everyone.if.no.acl.found``.

The bindings come from a store whose ``current`` attribute is an immutable :class:`~.acl.AclSet` replaced
whole on each change (:class:`walgate.storage.acls.AclStore`); decisions are cached per set, so a change is
seen by the very next check. Pure: the caller passes the principal and host. Safe to call from the event loop
and the storage thread at once (the SQL check runs there): each cache belongs to the set it was computed from.
"""

from __future__ import annotations

from typing import Protocol

from walgate.security.acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclSet,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorized_bits,
    grants,
)

__all__ = ["AUTHORIZER_CLASSES", "AclSource", "Authorizer"]

AUTHORIZER_CLASSES = frozenset((
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
))
"""Kafka's authorizer class names: ``authorizer.class.name`` set to one of them turns ACLs on."""

_CACHE_ENTRIES = 8192


class AclSource(Protocol):
    @property
    def current(self) -> AclSet: ...


class Authorizer:
    """Kafka's authorization decisions over the bindings of ``source`` (see the module docstring)."""

    def __init__(self, source: AclSource, super_users: frozenset[str] = frozenset(),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.source = source
        self.super_users = super_users
        self.allow_everyone = allow_everyone_if_no_acl_found
        # decisions of one AclSet, kept with it: a check that read an older set never caches into a newer one's
        self._cache: tuple[AclSet | None, dict[tuple[str, str, Operation, ResourceType, str], bool]] = (None, {})

    def authorize(self, principal: str, host: str, op: Operation, rtype: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self.source.current
        cached_for, cache = self._cache
        if acls is not cached_for or len(cache) >= _CACHE_ENTRIES:
            cache = {}
            self._cache = (acls, cache)
        key = (principal, host, op, rtype, name)
        decision = cache.get(key)
        if decision is None:
            decision = cache[key] = self._decide(acls, principal, host, op, rtype, name)
        return decision

    def _decide(self, acls: AclSet, principal: str, host: str, op: Operation, rtype: ResourceType,
                name: str) -> bool:
        has_acls = allowed = False
        for b in acls.of_type(rtype):
            if not b.covers(name):
                continue
            has_acls = True
            if ((b.principal == principal or b.principal == WILDCARD_PRINCIPAL) and (b.host == host or b.host == WILDCARD)
                    and grants(b.operation, op, b.permission)):
                if b.permission is Permission.DENY:
                    return False
                allowed = True
        return allowed or (not has_acls and self.allow_everyone)

    def authorize_by_resource_type(self, principal: str, host: str, op: Operation, rtype: ResourceType) -> bool:
        """Some resource of ``rtype`` may be ``op``-ed (Kafka's ``authorizeByResourceType``): an applying ALLOW
        whose pattern no applying DENY (the literal ``*``, the same literal name, or a covering prefix) cancels;
        with ``allow.everyone.if.no.acl.found``, also when ``rtype`` has no ACL at all."""
        if principal in self.super_users:
            return True
        acls = self.source.current.of_type(rtype)
        applying = [b for b in acls if (b.principal == principal or b.principal == WILDCARD_PRINCIPAL)
                    and (b.host == host or b.host == WILDCARD) and grants(b.operation, op, b.permission)]
        denied = [b for b in applying if b.permission is Permission.DENY]
        if any(d.pattern_type is PatternType.LITERAL and d.name == WILDCARD for d in denied):
            return False
        prefixes = [d.name for d in denied if d.pattern_type is PatternType.PREFIXED]
        literals = {d.name for d in denied if d.pattern_type is PatternType.LITERAL}
        for b in applying:
            if b.permission is Permission.ALLOW and not any(b.name.startswith(p) for p in prefixes) and (
                    b.pattern_type is PatternType.PREFIXED or b.name not in literals):
                return True
        return not acls and self.allow_everyone

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bit field of a resource: its type's supported operations allowed."""
        return authorized_bits([op for op in SUPPORTED_OPERATIONS[rtype]
                                if self.authorize(principal, host, op, rtype, name)])

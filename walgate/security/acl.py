"""Kafka's ACL model: resource patterns, entries, bindings and the filters DescribeAcls/DeleteAcls match.

The codes are Kafka's wire codes (``ResourceType``, ``PatternType``, ``AclOperation``, ``AclPermissionType``
in ``org.apache.kafka.common``), so a binding goes to and from the wire unchanged.

* A binding is a resource pattern (type, name, LITERAL or PREFIXED) plus an entry (principal ``Type:name``
  or ``User:*``, host ``*`` or an address, operation, ALLOW or DENY). A LITERAL pattern named ``*`` matches
  every resource of its type; a PREFIXED one every name starting with its name. The CLUSTER resource is
  named ``kafka-cluster`` and nothing else.
* :func:`validate` refuses what Kafka's controller refuses when an ACL is created (``AclControlManager``):
  an UNKNOWN/ANY type, pattern type other than LITERAL/PREFIXED, an UNKNOWN/ANY operation or permission,
  an empty name, a principal that is not ``Type:name``, a CLUSTER resource not named ``kafka-cluster``.
* :class:`AclFilter` is Kafka's ``AclBindingFilter``: ``None`` fields and ANY codes match anything; a
  MATCH pattern type matches the bindings that would apply to the named resource (the literal name, the
  literal ``*`` and every covering prefix).
* :func:`grants` holds Kafka's implications (``StandardAuthorizerData``): an ALLOW of READ, WRITE, DELETE or
  ALTER also allows DESCRIBE; an ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS; ALL allows (or denies)
  every operation. A DENY denies only its own operation (or all, for ALL).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "CLUSTER_NAME", "WILDCARD", "WILDCARD_PRINCIPAL", "ResourceType", "PatternType", "Operation", "Permission",
    "AclBinding", "AclFilter", "AclSet", "InvalidAcl", "binding", "validate", "grants", "SUPPORTED_OPERATIONS",
    "authorized_bits",
]

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_O = Operation
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER, _O.DESCRIBE_CONFIGS,
                         _O.ALTER_CONFIGS),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE,
                           _O.ALTER, _O.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE, _O.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}
"""The operations Kafka's ``AclEntry.supportedOperations`` lists per resource type (authorized-operations bits)."""

_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    _O.DESCRIBE: frozenset((_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER, _O.ALL)),
    _O.DESCRIBE_CONFIGS: frozenset((_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.ALL)),
}


class InvalidAcl(ValueError):
    """A binding Kafka refuses to create (INVALID_REQUEST); the message says why."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: who (principal, host) may or may not (permission) do what (operation) on which resources."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def covers(self, name: str) -> bool:
        """This binding's pattern applies to the resource named ``name`` (of its type)."""
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD

    def to_json(self) -> list[object]:
        return [int(self.resource_type), self.name, int(self.pattern_type), self.principal, self.host,
                int(self.operation), int(self.permission)]

    @classmethod
    def from_json(cls, raw: object) -> AclBinding:
        """The binding of :meth:`to_json`'s list; raises ValueError/InvalidAcl when it is not a valid one."""
        if not isinstance(raw, list) or len(raw) != 7:
            raise InvalidAcl(f"an ACL is a list of 7 fields, not {raw!r}")
        rtype, name, ptype, principal, host, op, perm = raw
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (rtype, ptype, op, perm)):
            raise InvalidAcl(f"ACL codes are integers: {raw!r}")
        if not all(isinstance(v, str) for v in (name, principal, host)):
            raise InvalidAcl(f"ACL names are strings: {raw!r}")
        binding = cls(ResourceType(rtype), name, PatternType(ptype), principal, host, Operation(op), Permission(perm))
        validate(binding)
        return binding


def _code(enum: type[IntEnum], value: int) -> IntEnum:
    """``enum(value)``, or its UNKNOWN member for a code this version does not know (as Kafka's fromCode)."""
    try:
        return enum(value)
    except ValueError:
        return enum(0)


def binding(rtype: int, name: str, ptype: int, principal: str, host: str, op: int, perm: int) -> AclBinding:
    """A binding from wire codes (unknown codes become UNKNOWN, which :func:`validate` refuses)."""
    return AclBinding(ResourceType(_code(ResourceType, rtype)), name, PatternType(_code(PatternType, ptype)),
                      principal, host, Operation(_code(Operation, op)), Permission(_code(Permission, perm)))


def describe(b: AclBinding) -> str:
    """``ALLOW READ User:alice host * on TOPIC power. PREFIXED``: a binding as logs name it."""
    return (f"{b.permission.name} {b.operation.name} {b.principal} host {b.host} on {b.resource_type.name} {b.name} "
            f"{b.pattern_type.name}")


def validate(b: AclBinding) -> None:
    """Raise :class:`InvalidAcl` for a binding Kafka would not create (see the module docstring)."""
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAcl(f"Invalid resourceType {b.resource_type.name}")
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl(f"Invalid patternType {b.pattern_type.name}")
    if b.operation in (Operation.UNKNOWN, Operation.ANY):
        raise InvalidAcl(f"Invalid operation {b.operation.name}")
    if b.permission in (Permission.UNKNOWN, Permission.ANY):
        raise InvalidAcl(f"Invalid permissionType {b.permission.name}")
    if not b.name:
        raise InvalidAcl("Invalid empty resource name")
    if b.resource_type is ResourceType.CLUSTER and b.name != CLUSTER_NAME:
        raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    kind, sep, who = b.principal.partition(":")
    if not sep or not kind or not who:
        raise InvalidAcl(f"Could not parse principal from `{b.principal}` (no colon is found or an empty part)")
    if not b.host:
        raise InvalidAcl("Invalid null host")


def grants(acl_op: Operation, op: Operation, permission: Permission) -> bool:
    """An ACL on ``acl_op`` with ``permission`` decides ``op`` (Kafka's implications, module docstring)."""
    if acl_op is op or acl_op is Operation.ALL:
        return True
    return permission is Permission.ALLOW and acl_op in _IMPLIED_BY.get(op, ())


def authorized_bits(ops: set[Operation] | list[Operation]) -> int:
    """Kafka's 32-bit authorized-operations field: bit ``op.value`` set for each operation."""
    bits = 0
    for op in ops:
        bits |= 1 << int(op)
    return bits


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's ``AclBindingFilter`` (DescribeAcls, DeleteAcls); ``None`` name/principal/host match anything."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    @classmethod
    def from_wire(cls, rtype: int, name: str | None, ptype: int, principal: str | None, host: str | None,
                  op: int, perm: int) -> AclFilter:
        return cls(ResourceType(_code(ResourceType, rtype)), name, PatternType(_code(PatternType, ptype)),
                   principal, host, Operation(_code(Operation, op)), Permission(_code(Permission, perm)))

    def unknown(self) -> str | None:
        """Why the filter cannot be matched (an UNKNOWN code: INVALID_REQUEST), or None."""
        for what, value in (("resourceType", self.resource_type), ("patternType", self.pattern_type),
                            ("operation", self.operation), ("permissionType", self.permission)):
            if value == 0:
                return f"The filter's {what} is UNKNOWN"
        return None

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type is not b.pattern_type:
            return False
        if self.name is not None:
            if self.pattern_type is PatternType.MATCH:
                if not b.covers(self.name):
                    return False
            elif self.name != b.name:
                return False
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and (self.operation is Operation.ANY or self.operation is b.operation)
                and (self.permission is Permission.ANY or self.permission is b.permission))


class AclSet:
    """An immutable set of bindings, indexed by resource type. Never changed once built: a store publishes a new
    one per change, so a reader on another thread sees the old set or the new one, never half of a change."""

    __slots__ = ("bindings", "_by_type")

    def __init__(self, bindings: frozenset[AclBinding] = frozenset()) -> None:
        self.bindings = bindings
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for b in bindings:
            by_type.setdefault(b.resource_type, []).append(b)
        self._by_type = {k: tuple(v) for k, v in by_type.items()}

    def of_type(self, rtype: ResourceType) -> tuple[AclBinding, ...]:
        return self._by_type.get(rtype, ())

    def ordered(self) -> list[AclBinding]:
        """Every binding, in a stable order (type, pattern, name, principal, host, operation, permission)."""
        return sorted(self.bindings, key=_order)

    def matching(self, f: AclFilter) -> list[AclBinding]:
        """The bindings ``f`` matches, in :meth:`ordered`'s order."""
        return [b for b in self.ordered() if f.matches(b)]

    def __len__(self) -> int:
        return len(self.bindings)


def _order(b: AclBinding) -> tuple[int, int, str, str, str, int, int]:
    return (b.resource_type, b.pattern_type, b.name, b.principal, b.host, b.operation, b.permission)

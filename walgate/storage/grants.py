"""TDengine's GRANT / REVOKE / SHOW USER PRIVILEGES, as views of the Kafka ACL store (:mod:`walgate.storage.acls`).

One permission store, two views: a grant is stored as the ACL bindings below (so DescribeAcls lists it and every
Kafka handler and SQL statement is checked against it), and SHOW USER PRIVILEGES lists every binding, those made
with Kafka's CreateAcls included. A TDengine user ``u`` is the Kafka principal ``User:u``; TDengine objects are
named as TOPIC resources (:mod:`walgate.security.sql_access`: table ``db.t``, database ``db.*``).

=============================  ==============================================================================
TDengine                        Kafka ACL (ALLOW, host ``*``, principal ``User:u``)
=============================  ==============================================================================
``READ ON db.*``                Read on TOPIC PREFIXED ``db.`` (Read implies Describe: SELECT, DESCRIBE, SHOW)
``WRITE ON db.*``               Write on TOPIC PREFIXED ``db.`` (INSERT)
``ALL ON db.*``                 All on TOPIC PREFIXED ``db.`` (also CREATE/ALTER/DROP of its tables, DROP DATABASE)
``READ|WRITE|ALL ON db.t``      the same on TOPIC LITERAL ``db.t``
``SUBSCRIBE ON topic``          Read on TOPIC LITERAL ``topic`` (consume it; a consumer group needs Read on it too)
=============================  ==============================================================================

GRANT stores the bindings not stored yet, REVOKE removes those stored, each as one durable record (the
database / topic must exist, as TDengine requires). SHOW USER PRIVILEGES answers TDengine's columns
(``user_name, privilege, db_name, table_name, condition, notes``): the rows above read back as TDengine wrote them
(``subscribe`` with the topic in ``db_name``); any other binding as its operation, resource name in ``db_name``
and the whole Kafka binding in ``notes``.
"""

from __future__ import annotations

from collections.abc import Mapping

from walgate.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from walgate.storage.errors import InvalidValue, NotFound
from walgate.storage.result import Result, affected
from walgate.storage.sql import ast
from walgate.storage.store import Store

__all__ = ["Grants", "bindings_of"]

_OPS = {"ALL": Operation.ALL, "READ": Operation.READ, "WRITE": Operation.WRITE}
_COLUMNS = [("user_name", "VARCHAR", 24), ("privilege", "VARCHAR", 10), ("db_name", "VARCHAR", 65),
            ("table_name", "VARCHAR", 193), ("condition", "VARCHAR", 49152), ("notes", "VARCHAR", 64)]


def bindings_of(s: ast.Grant) -> list[AclBinding]:
    """The ACL bindings a GRANT / REVOKE statement names (see the module docstring); InvalidValue if none can."""
    principal = f"User:{s.user}"
    if s.db is None:
        if s.privileges != ("SUBSCRIBE",):
            raise InvalidValue(f"{', '.join(s.privileges)} is granted ON db.* or db.table; ON a topic: SUBSCRIBE")
        return [AclBinding(ResourceType.TOPIC, s.table, PatternType.LITERAL, principal, "*", Operation.READ,
                           Permission.ALLOW)]
    if "SUBSCRIBE" in s.privileges:
        raise InvalidValue("SUBSCRIBE is granted ON a topic, not ON db.* or db.table")
    name, pattern = (f"{s.db}.", PatternType.PREFIXED) if s.table == "*" else (f"{s.db}.{s.table}", PatternType.LITERAL)
    return [AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", _OPS[p], Permission.ALLOW)
            for p in s.privileges]


class Grants:
    """The GRANT / REVOKE / SHOW USER PRIVILEGES statements (storage thread)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def grant(self, s: ast.Grant, _: str | None) -> Result:
        catalog = self.store.catalog
        if s.db is None and s.table not in catalog.topics:
            raise NotFound(f"Topic not exist: {s.table}")
        if s.db is not None:
            catalog.database(s.db)  # NotFound
        wanted = bindings_of(s)
        if s.revoke:
            gone = [b for b in wanted if b in catalog.acls.current.bindings]
            if gone:
                catalog.change_acls("delete_acls", gone)
        else:
            new = catalog.acls.new(wanted)
            if new:
                catalog.change_acls("create_acls", new)
        return affected(0)

    def show(self, _s: ast.ShowUserPrivileges, _: str | None) -> Result:
        topics = self.store.catalog.topics
        rows = [_row(b, topics) for b in sorted(self.store.catalog.acls.current.bindings,
                                                key=lambda b: (b.principal, b.name, b.operation, b.permission))]
        return Result(list(_COLUMNS), rows)


def _row(b: AclBinding, topics: Mapping[str, object]) -> list[str]:
    user = b.principal.removeprefix("User:")
    privilege = b.operation.name.lower()
    db, table, notes = b.name, "", ""
    plain = b.permission is Permission.ALLOW and b.host == "*" and b.resource_type is ResourceType.TOPIC
    if plain:
        if b.pattern_type is PatternType.PREFIXED and b.name.endswith("."):
            db, table = b.name[:-1], "*"
        elif b.pattern_type is PatternType.LITERAL and b.name in topics:
            privilege = "subscribe" if b.operation is Operation.READ else privilege
            plain = b.operation is Operation.READ
        elif b.pattern_type is PatternType.LITERAL and "." in b.name:
            db, table = b.name.split(".", 1)
        else:
            plain = False
    if not plain:
        notes = (f"{b.permission.name} {b.operation.name} on {b.resource_type.name} {b.pattern_type.name} {b.name} "
                 f"from {b.host}")
    return [user, privilege, db, table, "", notes]

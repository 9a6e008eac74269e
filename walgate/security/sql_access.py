"""What a SQL statement needs from the authorizer: the same ACLs Kafka clients are checked against.

TDengine objects are named as Kafka TOPIC resources (there is no database resource in Kafka): a table or
supertable ``db.t`` is the topic resource ``db.t``; the database ``db`` itself is ``db.*`` (``*`` is not a legal
Kafka topic character, so it never names a real topic); a topic is its own name; a consumer group a GROUP. A
PREFIXED ``db.`` pattern (what ``GRANT ... ON db.*`` stores, :mod:`walgate.storage.grants`) covers the
database and all its tables.

:func:`requirements` lists, per statement, the (operation, resource type, name) that must all be allowed. Each
is met by that operation on the resource or on the cluster (``kafka-cluster``), as Kafka's CreateTopics accepts
Create on either:

=================================================  ===========================================================
statement                                          needs
=================================================  ===========================================================
CREATE / DROP DATABASE d, USE d                    Create / Delete / Describe on ``d.*``
CREATE [S]TABLE, ALTER STABLE, DROP [S]TABLE d.t   Create / Alter / Delete on ``d.t``
INSERT INTO d.t ...                                Write on each ``d.t``
SELECT ... FROM d.t, DESCRIBE d.t                  Read / Describe on ``d.t``
SHOW [d.]STABLES / TABLES / VGROUPS                Describe on ``d.*``
CREATE TOPIC t AS ... FROM src                     Create on topic ``t`` and Read on the source
DROP TOPIC t / DROP CONSUMER GROUP g ON t          Delete on topic ``t`` / Delete on group ``g``
SHOW QUARANTINE, SHOW USER PRIVILEGES              Describe on the cluster
GRANT / REVOKE                                     Alter on the cluster (as CreateAcls / DeleteAcls)
ALTER USER u PASS '...'                            nothing when ``u`` is the principal's own user (``User:u``):
                                                   TDengine lets every user change its own password; another
                                                   user's: super users only (Kafka's AlterUserScramCredentials
                                                   keeps Kafka's rule, Alter on the cluster, for every user)
REDISTRIBUTE / BALANCE VGROUP, DROP DNODE          super users only (TDengine: root), as any statement not listed
(HTTP) line protocol / CSV into database d         Write on ``d.*``
SHOW DATABASES / TOPICS / CONSUMERS / SUBSCRIPTIONS  nothing; :func:`visible` keeps the rows whose database
                                                   (``d.*``), topic and group the principal may Describe
=================================================  ===========================================================
"""

from __future__ import annotations

from walgate.security.acl import CLUSTER_NAME, Operation, ResourceType
from walgate.security.authorizer import Authorizer
from walgate.storage.errors import StorageError
from walgate.storage.result import Result
from walgate.storage.sql import ast

__all__ = ["NotPermitted", "requirements", "check", "check_needs", "visible", "database_resource", "table_resource"]

Need = tuple[Operation, ResourceType, str]
_T, _G = ResourceType.TOPIC, ResourceType.GROUP


class NotPermitted(StorageError):
    """The principal may not run the statement (TDengine's TSDB_CODE_MND_NO_RIGHTS, "Insufficient privilege")."""

    code = 0x0303


def database_resource(db: str) -> str:
    return f"{db}.*"


def table_resource(name: ast.Name, db: str | None) -> str:
    return f"{name.db or db or ''}.{name.name}"


def requirements(stmt: object, db: str | None) -> list[Need]:
    """What ``stmt`` needs (see the table of the module docstring); ``db`` is the session's current database."""
    if isinstance(stmt, (ast.CreateDatabase, ast.DropDatabase, ast.UseDatabase)):
        op = {ast.CreateDatabase: Operation.CREATE, ast.DropDatabase: Operation.DELETE}.get(type(stmt),
                                                                                            Operation.DESCRIBE)
        return [(op, _T, database_resource(stmt.name))]
    if isinstance(stmt, (ast.CreateStable, ast.CreateTable, ast.CreateSubtable)):
        return [(Operation.CREATE, _T, table_resource(stmt.name, db))]
    if isinstance(stmt, ast.AlterStable):
        return [(Operation.ALTER, _T, table_resource(stmt.name, db))]
    if isinstance(stmt, ast.DropTable):
        return [(Operation.DELETE, _T, table_resource(n, db)) for n in stmt.names]
    if isinstance(stmt, ast.DropStable):
        return [(Operation.DELETE, _T, table_resource(stmt.name, db))]
    if isinstance(stmt, ast.Insert):
        return [(Operation.WRITE, _T, table_resource(t.table, db)) for t in stmt.targets]
    if isinstance(stmt, ast.Select):
        return [(Operation.READ, _T, table_resource(stmt.source, db))]
    if isinstance(stmt, ast.Describe):
        return [(Operation.DESCRIBE, _T, table_resource(stmt.name, db))]
    if isinstance(stmt, ast.CreateTopic):
        source = (database_resource(stmt.source.name) if stmt.kind == "database"
                  else table_resource(stmt.source, db))
        return [(Operation.CREATE, _T, stmt.name), (Operation.READ, _T, source)]
    if isinstance(stmt, ast.DropTopic):
        return [(Operation.DELETE, _T, stmt.name)]
    if isinstance(stmt, ast.DropConsumerGroup):
        return [(Operation.DELETE, _G, stmt.group)]
    if isinstance(stmt, ast.Show):
        if stmt.what in ("STABLES", "TABLES", "VGROUPS"):
            return [(Operation.DESCRIBE, _T, database_resource(stmt.db or db or ""))]
        if stmt.what == "QUARANTINE":
            return [(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)]
        return []
    if isinstance(stmt, ast.ShowUserPrivileges):
        return [(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)]
    if isinstance(stmt, ast.Grant):
        return [(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)]
    raise NotPermitted(f"{type(stmt).__name__} statements are not authorized for anyone but super users")


def check(authorizer: Authorizer, principal: str, host: str, stmt: object, db: str | None) -> None:
    """Raise :class:`NotPermitted` unless ``principal`` (from ``host``) may run ``stmt`` (module docstring)."""
    if principal not in authorizer.super_users and not _own_password(principal, stmt):
        check_needs(authorizer, principal, host, requirements(stmt, db))


def _own_password(principal: str, stmt: object) -> bool:
    """Whether ``stmt`` changes the password of ``principal``'s own user (TDengine allows it to every user)."""
    return isinstance(stmt, ast.AlterUser) and principal == f"User:{stmt.name}"


def check_needs(authorizer: Authorizer, principal: str, host: str, needs: list[Need]) -> None:
    """Raise :class:`NotPermitted` unless each need is allowed on its resource or on the cluster."""
    for op, rtype, name in needs:
        if not (authorizer.authorize(principal, host, op, ResourceType.CLUSTER, CLUSTER_NAME)
                or authorizer.authorize(principal, host, op, rtype, name)):
            what = "the cluster" if rtype is ResourceType.CLUSTER else f"{rtype.name.lower()} {name}"
            raise NotPermitted(f"Insufficient privilege: {principal} needs {op.name} on {what}")


_LISTED: dict[str, tuple[tuple[int, ResourceType, bool], ...]] = {
    # SHOW ... -> (column, resource type, the column names a database) that must be describable for a row to show
    "DATABASES": ((0, _T, True),),
    "TOPICS": ((0, _T, False),),
    "CONSUMERS": ((1, _G, False),),
    "SUBSCRIPTIONS": ((0, _T, False), (1, _G, False)),
}


def visible(authorizer: Authorizer, principal: str, host: str, stmt: object, result: Result) -> Result:
    """``result`` of ``stmt`` without the rows of a SHOW listing (databases, topics, consumers, subscriptions)
    whose database / topic / group the principal may not Describe (kept whole for Describe on the cluster)."""
    listed = _LISTED.get(stmt.what) if isinstance(stmt, ast.Show) else None
    if not listed or principal in authorizer.super_users or authorizer.authorize(
            principal, host, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return result
    rows = [row for row in result.rows if all(
        authorizer.authorize(principal, host, Operation.DESCRIBE, rtype, database_resource(row[i]) if db else row[i])
        for i, rtype, db in listed)]
    return Result(result.columns, rows, result.affected_rows, result.database)

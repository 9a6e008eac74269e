"""SQL statements against the ACLs: what each needs, the GRANT/REVOKE mapping, and the check itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from walgate.security.acl import AclBinding, AclSet, Operation, PatternType, Permission, ResourceType
from walgate.security.authorizer import Authorizer
from walgate.security.sql_access import NotPermitted, check, requirements
from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue, NotFound
from walgate.storage.grants import bindings_of
from walgate.storage.sql.parser import parse

T, Op = ResourceType.TOPIC, Operation
BOB = "User:bob"


@pytest.mark.parametrize(("sql", "needs"), [
    ("CREATE DATABASE d", [(Op.CREATE, T, "d.*")]),
    ("DROP DATABASE d", [(Op.DELETE, T, "d.*")]),
    ("USE d", [(Op.DESCRIBE, T, "d.*")]),
    ("CREATE STABLE st (ts TIMESTAMP, v INT) TAGS (t INT)", [(Op.CREATE, T, "cur.st")]),
    ("DROP TABLE d.a, b", [(Op.DELETE, T, "d.a"), (Op.DELETE, T, "cur.b")]),
    ("INSERT INTO d.t1 VALUES (now, 1) d.t2 VALUES (now, 2)", [(Op.WRITE, T, "d.t1"), (Op.WRITE, T, "d.t2")]),
    ("SELECT * FROM d.st WHERE v > 1", [(Op.READ, T, "d.st")]),
    ("CREATE TOPIC tp AS DATABASE d", [(Op.CREATE, T, "tp"), (Op.READ, T, "d.*")]),
    ("CREATE TOPIC tp AS SELECT v FROM d.st", [(Op.CREATE, T, "tp"), (Op.READ, T, "d.st")]),
    ("DROP TOPIC tp", [(Op.DELETE, T, "tp")]),
    ("DROP CONSUMER GROUP `g-1` ON tp", [(Op.DELETE, ResourceType.GROUP, "g-1")]),
    ("SHOW d.STABLES", [(Op.DESCRIBE, T, "d.*")]),
    ("SHOW d.VGROUPS", [(Op.DESCRIBE, T, "d.*")]),
    ("SHOW TOPICS", []),
    ("GRANT READ ON d.* TO bob", [(Op.ALTER, ResourceType.CLUSTER, "kafka-cluster")]),
    ("SHOW USER PRIVILEGES", [(Op.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster")]),
])
def test_what_each_statement_needs(sql: str, needs: list[tuple[Operation, ResourceType, str]]):
    assert requirements(parse(sql), "cur") == needs


def grant(sql: str) -> list[AclBinding]:
    stmt = parse(sql)
    return bindings_of(stmt)  # type: ignore[arg-type]


def test_grants_are_acls():
    assert grant("GRANT READ, WRITE ON power.* TO bob") == [
        AclBinding(T, "power.", PatternType.PREFIXED, BOB, "*", op, Permission.ALLOW) for op in (Op.READ, Op.WRITE)]
    assert grant("REVOKE ALL ON power.meters FROM bob") == [
        AclBinding(T, "power.meters", PatternType.LITERAL, BOB, "*", Op.ALL, Permission.ALLOW)]
    assert grant("GRANT SUBSCRIBE ON tp TO bob") == [AclBinding(T, "tp", PatternType.LITERAL, BOB, "*", Op.READ,
                                                                Permission.ALLOW)]
    for bad in ("GRANT READ ON tp TO bob", "GRANT SUBSCRIBE ON power.* TO bob"):
        with pytest.raises(InvalidValue):
            grant(bad)


class Store:
    def __init__(self, *bindings: AclBinding) -> None:
        self.current = AclSet(frozenset(bindings))


def test_a_database_grant_covers_its_tables_and_itself_and_the_cluster_covers_all():
    auth = Authorizer(Store(*grant("GRANT READ ON power.* TO bob"),  # type: ignore[arg-type]
                            AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:ops", "*",
                                       Op.CREATE, Permission.ALLOW)))
    check(auth, BOB, "h", parse("SELECT * FROM power.meters"), None)
    check(auth, BOB, "h", parse("SHOW power.STABLES"), None)  # Read implies Describe
    check(auth, "User:ops", "h", parse("CREATE DATABASE other"), None)
    for sql in ("INSERT INTO power.d1 VALUES (now, 1)", "SELECT * FROM powerx.meters", "DROP DATABASE power"):
        with pytest.raises(NotPermitted, match="Insufficient privilege"):
            check(auth, BOB, "h", parse(sql), None)


def test_grant_needs_the_database_or_topic_and_show_lists_every_acl(tmp_path: Path):
    e = Engine.open(tmp_path)
    try:
        for sql in ("GRANT READ ON nowhere.* TO bob", "GRANT SUBSCRIBE ON nothing TO bob"):
            with pytest.raises(NotFound):
                e.execute(sql)
        e.execute("CREATE DATABASE power VGROUPS 1")
        e.execute("GRANT ALL ON power.* TO bob")
        e.execute("GRANT ALL ON power.* TO bob")  # again: nothing new
        assert e.execute("SHOW USER PRIVILEGES").rows == [["bob", "all", "power", "*", "", ""]]
        e.execute("REVOKE ALL ON power.* FROM bob")
        assert e.execute("SHOW USER PRIVILEGES").rows == [] and not e.catalog.acls.current.bindings
    finally:
        e.close()


def test_a_user_may_change_its_own_password_and_no_one_elses():
    """TDengine lets every user ALTER USER its own password; another's needs a super user (no ACL grants it)."""
    auth = Authorizer(Store(*grant("GRANT ALL ON power.* TO bob")), super_users=frozenset({"User:root"}))  # type: ignore[arg-type]
    check(auth, "User:bob", "h", parse("ALTER USER bob PASS 'new-one'"), None)
    check(auth, "User:root", "h", parse("ALTER USER bob PASS 'new-one'"), None)
    for principal, user in (("User:bob", "alice"), ("User:alice", "bob"), ("User:ANONYMOUS", "bob")):
        with pytest.raises(NotPermitted):
            check(auth, principal, "h", parse(f"ALTER USER {user} PASS 'x'"), None)

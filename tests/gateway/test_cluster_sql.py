"""TDengine's REDISTRIBUTE VGROUP / BALANCE VGROUP [LEADER] / DROP DNODE (walgate/gateway/cluster_sql.py): parsed,
refused on a single node (not a cluster) before anything is asked, and allowed to super users only when ACLs are
on; the cluster's answers are in
tests/cluster/test_serve_cluster_rebalance.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gateway.test_http_api import serving, sql
from walgate.cluster.partition_codec import PartitionId
from walgate.gateway.cluster_sql import MoveRefused, Vgroups, decommissioned, vgroups
from walgate.replication.rebalance import Holding
from walgate.security.acl import AclBinding, AclSet, Operation, PatternType, Permission, ResourceType
from walgate.security.authorizer import Authorizer
from walgate.security.sql_access import NotPermitted, check
from walgate.storage.engine import Engine
from walgate.storage.errors import SqlSyntaxError, Unsupported
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse


@pytest.mark.parametrize(("text", "stmt"), [
    ("REDISTRIBUTE VGROUP 2 DNODE 1 DNODE 3", ast.RedistributeVgroup(None, 2, (1, 3))),
    ("redistribute vgroup power.0 dnode 4 dnode 5 dnode 6;", ast.RedistributeVgroup("power", 0, (4, 5, 6))),
    ("BALANCE VGROUP", ast.BalanceVgroup(leader=False)),
    ("balance vgroup leader", ast.BalanceVgroup(leader=True)),
    ("DROP DNODE 3", ast.DropDnode(3)),
])
def test_the_statements_parse(text: str, stmt: ast.Statement) -> None:
    assert parse(text) == stmt


@pytest.mark.parametrize("text", ["REDISTRIBUTE VGROUP 1", "REDISTRIBUTE VGROUP 1 DNODE 1 DNODE 2 DNODE 3 DNODE 4",
                                  "BALANCE VGROUPS", "DROP DNODE", "DROP DNODE n1"])
def test_malformed_statements_are_syntax_errors(text: str) -> None:
    with pytest.raises(SqlSyntaxError):
        parse(text)


@pytest.mark.parametrize("text", ["REDISTRIBUTE VGROUP power.0 DNODE 0", "BALANCE VGROUP", "BALANCE VGROUP LEADER",
                                  "DROP DNODE 0"])
async def test_a_single_node_refuses_them_as_not_a_cluster(tmp_path: Path, text: str) -> None:
    async with serving(tmp_path / "data") as api:
        status, body = await sql(api, text)
    assert status == 400
    assert body["code"] == Unsupported.code
    assert "moves replicas between the nodes of a cluster: this node is a single node" in body["desc"]


@pytest.mark.parametrize("text", ["REDISTRIBUTE VGROUP d.0 DNODE 1", "BALANCE VGROUP", "BALANCE VGROUP LEADER",
                                  "DROP DNODE 1"])
def test_only_super_users_may_run_them_when_acls_are_on(text: str) -> None:
    """As TDengine allows them to root only: no ACL grants them, not even ALL on the cluster."""
    ops = AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:ops", "*", Operation.ALL,
                     Permission.ALLOW)

    class Store:
        current = AclSet(frozenset({ops}))

    auth = Authorizer(Store(), super_users=frozenset({"User:root"}))  # type: ignore[arg-type]
    check(auth, "User:root", "h", parse(text), None)
    with pytest.raises(NotPermitted, match="not authorized for anyone but super users"):
        check(auth, "User:ops", "h", parse(text), None)


def test_a_node_plans_on_the_catalog_and_refuses_moves_beyond_the_placement(tmp_path: Path) -> None:
    """The plan's inputs from a real catalog (one-copy vgroups unmovable), and the refusals made before the
    controller is asked: a one-copy vgroup on the node decommissioned, no node left, a move to a node not placed."""
    engine = Engine.open(tmp_path / "data")
    try:
        engine.execute("CREATE DATABASE power VGROUPS 2")
        known = vgroups(engine, None)
    finally:
        engine.close()
    assert sorted(known.names.values()) == ["power/0", "power/1"]
    assert all(h == Holding((0,), movable=False) for h in known.holdings.values())
    with pytest.raises(Unsupported, match="DROP DNODE 0: vgroup power/[01] has one copy, on node 0: its data cannot "
                                          "move"):
        decommissioned(0, known, {0: None, 1: None}, (0, 1))
    with pytest.raises(MoveRefused, match="Dnode does not exist: node 7 never registered") as refused:
        decommissioned(7, known, {0: None}, (0,))
    assert refused.value.code == 0x0331

    a, b = PartitionId("x", 0), PartitionId("x", 1)
    spread = Vgroups({a: Holding((1, 2)), b: Holding((2, 3))}, {a: "t/0", b: "t/1"})
    with pytest.raises(MoveRefused, match="Out of dnodes: DROP DNODE 2: no live node can take vgroup t/0") as out:
        decommissioned(2, spread, {1: None, 2: None}, (1, 2, 3))  # (node 3 down)
    assert out.value.code == 0x0334
    plan = decommissioned(2, spread, {1: None, 2: None, 3: None, 4: None}, (1, 2, 3, 4))
    assert plan == {a: (1, 4), b: (3, 1)}  # (the fewest replicas held, then the smaller id)
